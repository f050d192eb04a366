"""The per-scheme sensitivity study: its design (every scheme's knobs around its own setting, the
factor-1 runs shared with the scheme study), and its outcome table, failure edges, figure and
best-rate verdicts on hand-made scores."""

import numpy as np
import pandas as pd
import pytest

from grpo_lab.analysis import verdict_table
from grpo_lab.studies import scheme_sensitivity, schemes

FULL = scheme_sensitivity.settings("full")


def by_label(points):
    return {p.label: p for p in points}


def test_every_scheme_has_its_knobs_around_its_own_setting():
    points = scheme_sensitivity.design(FULL)
    found = {(p.columns["scheme"], p.columns["knob"]) for p in points}
    for arm in schemes.design(schemes.settings("full")):
        has_kl = arm.config.kl_coef > 0 and arm.config.kl_placement != "off"
        knobs = {k for s, k in found if s == arm.label}
        expected = {"learning_rate", "clip", "group_size"} | ({"kl_coef"} if has_kl else set())
        assert knobs == expected, arm.label
    assert {s for s, _ in found} == set(schemes.SCHEMES)


def test_factor_one_is_the_scheme_studys_own_run():
    """The scheme study's first 3 seeds at its own settings are this study's factor-1 runs: same keys."""
    own = {p.label: p.config.key() for p in schemes.design(schemes.settings("full"))}
    for p in scheme_sensitivity.design(FULL):
        if p.columns["factor"] == 1.0:
            assert p.config.key() == own[p.columns["scheme"]], p.label
        else:
            assert p.config.key() != own[p.columns["scheme"]], p.label
    assert set(FULL.seeds) <= set(schemes.settings("full").seeds)


def test_each_knob_changes_its_own_fields():
    points = by_label(scheme_sensitivity.design(FULL))
    own = points["grpo learning_rate x1"].config
    assert points["grpo learning_rate x0.333333"].config.learning_rate == pytest.approx(own.learning_rate / 3)
    assert points["grpo learning_rate x0.333333"].config.learning_rate == 1e-5  # tidy, as a user writes it
    wide = points["dapo_loss clip x2"].config
    assert (wide.eps_low, wide.eps_high) == (0.4, 0.56)
    cispo = points["cispo clip x0.5"].config
    assert cispo.eps_low == 0.999 and cispo.eps_high == 0.005  # the open side stays open
    assert points["grpo kl_coef x4"].config.kl_coef == pytest.approx(0.16)
    for label, group in (("grpo group_size x0.5", 4), ("grpo group_size x2", 16)):
        config = points[label].config
        assert config.group_size == group and config.group_size * config.prompts_per_step == 64


def test_the_smoke_profile_scans_the_learning_rate_alone():
    points = scheme_sensitivity.design(scheme_sensitivity.settings("smoke"))
    varied = {p.columns["knob"] for p in points if p.columns["factor"] != 1.0}
    assert varied == {"learning_rate"}


def scored_frame(levels: dict[tuple[str, str, float], float], seeds: int = 4) -> pd.DataFrame:
    """Hand-made run scores: (scheme, knob, factor) -> the mean score, a seed adding 0.01 x seed, 0.004
    more on odd seeds for every scheme but grpo and up to 0.003 at random per seed and factor (so paired
    differences vary, between schemes and between factors); every run starts at 0.1, so grpo's gain
    at factor 1 is about its level - 0.1 + 0.0165."""
    rows = []
    for (scheme, knob, factor), level in levels.items():
        for seed in range(seeds):
            jitter = np.random.default_rng([seed, round(6 * factor)]).uniform(0.0, 0.003)
            score = level + 0.01 * seed + 0.004 * (seed % 2) * (scheme != "grpo") + jitter
            rows.append(
                {"label": f"{scheme} {knob} x{factor:g}", "seed": seed, "score": score, "start": 0.1,
                 "step_s": 1.0, "scheme": scheme, "knob": knob, "factor": factor,
                 **dict.fromkeys(verdict_table.STABILITY_COLUMNS, 1.0)}
            )  # fmt: skip
    return pd.DataFrame(rows)


LEVELS = {
    ("grpo", "learning_rate", 1 / 3): 0.30,
    ("grpo", "learning_rate", 1.0): 0.50,
    ("grpo", "learning_rate", 3.0): 0.45,
    ("grpo", "group_size", 0.5): 0.40,
    ("grpo", "group_size", 1.0): 0.50,
    ("grpo", "group_size", 2.0): 0.70,
    ("dapo_loss", "learning_rate", 1 / 3): 0.20,
    ("dapo_loss", "learning_rate", 1.0): 0.45,
    ("dapo_loss", "learning_rate", 3.0): 0.60,
    ("grpo_no_kl", "learning_rate", 1 / 3): 0.30,
    ("grpo_no_kl", "learning_rate", 1.0): 0.50,
    ("grpo_no_kl", "learning_rate", 3.0): 0.50,
}


def test_outcomes_edges_where_the_score_falls_and_the_figure():
    scored = scored_frame(LEVELS)
    margin = scheme_sensitivity.margin(scored)
    assert margin == pytest.approx(verdict_table.MARGIN_OF_GAIN * (0.5165 - 0.1), abs=3e-4)
    outcomes = scheme_sensitivity.outcome_table(scored)
    assert list(outcomes["scheme"].unique()) == [
        "grpo",
        "dapo_loss",
        "grpo_no_kl",
    ]  # the scheme study's order
    assert (outcomes["n"] == 4).all() and (outcomes["lo"] < outcomes["mean"]).all()
    edges = scheme_sensitivity.edge_table(scored, margin)
    found = {(r.scheme, r.knob, round(r.factor, 3)) for r in edges.itertuples()}
    assert (edges["lo"] > margin).all() and (edges["n"] == 4).all()  # each drop beyond the margin
    # grpo's group size rises steeply from x1 to x2: x1 lies below the best, the rise itself is no edge
    assert found == {
        ("grpo", "learning_rate", 0.333),
        ("grpo", "group_size", 0.5),
        ("grpo", "group_size", 1.0),
        ("dapo_loss", "learning_rate", 0.333),
        ("dapo_loss", "learning_rate", 1.0),
        ("grpo_no_kl", "learning_rate", 0.333),
    }
    fig = scheme_sensitivity.figure(scored, margin, FULL)
    assert len(fig.axes) == 3 * 2  # schemes x knobs present
    assert "4 seeds" in fig._suptitle.get_text()
    empty = fig.axes[4]  # the group-size row: dapo_loss has no scan here
    assert not empty.axison


def test_best_rate_verdicts_beside_the_shared_rate():
    scored = scored_frame(LEVELS)
    outcomes = scheme_sensitivity.outcome_table(scored)
    assert scheme_sensitivity.best_rates(outcomes) == {"grpo": 1.0, "dapo_loss": 3.0, "grpo_no_kl": 1.0}
    table = scheme_sensitivity.best_rate_table(scored, outcomes, margin=0.02)
    dapo_loss = table[(table["row"] == "dapo_loss") & (table["kind"] == "scheme")].iloc[0]
    assert dapo_loss["effect shared"] == pytest.approx(-0.05, abs=0.003)
    assert dapo_loss["effect own best"] == pytest.approx(0.10, abs=0.003)
    assert (dapo_loss["treatment rate x"], dapo_loss["control rate x"]) == (3.0, 1.0)
    assert dapo_loss["verdict shared"] == "worse" and dapo_loss["verdict own best"] == "better"
    assert dapo_loss["turns on the rate"]
    matched = table[table["kind"] == "scheme vs grpo_no_kl"].iloc[0]
    assert matched["effect own best"] == pytest.approx(0.10, abs=0.003) and matched["control rate x"] == 1.0
    text = scheme_sensitivity.best_rate_markdown(table)
    assert (
        "| dapo_loss | scheme | x3 (not bracketed), x1 | better: +0.1" in text and "| worse: -0.048" in text
    )
    assert table["effect shared"].notna().all()
    # dapo_loss's best is the scan's highest rate: its optimum may lie beyond; grpo's is bracketed
    assert scheme_sensitivity.bracketed(outcomes)["dapo_loss"] is False
    assert scheme_sensitivity.bracketed(outcomes)["grpo"] is True
    assert not dapo_loss["treatment bracketed"] and dapo_loss["control bracketed"]


def test_a_drop_within_the_seeds_noise_is_no_edge_and_a_crash_is_one():
    noisy = {("grpo", "learning_rate", f): level for f, level in ((1 / 3, 0.45), (1.0, 0.50), (3.0, 0.40))}
    scored = scored_frame(noisy, seeds=3)
    rng = np.random.default_rng(0)
    scored.loc[scored["factor"] == 1 / 3, "score"] += rng.normal(0.0, 0.08, 3)  # a 0.05 fall, lost in noise
    scored.loc[scored["factor"] == 3.0, "score"] = np.nan  # every run at x3 failed
    edges = scheme_sensitivity.edge_table(scored, margin=0.01)
    assert edges["factor"].tolist() == [3.0] and np.isnan(edges.loc[0, "mean"]) and edges.loc[0, "n"] == 0


def test_the_own_best_verdict_judged_again_on_fresh_seeds():
    scored = scored_frame(LEVELS)
    outcomes = scheme_sensitivity.outcome_table(scored)
    best = scheme_sensitivity.best_rates(outcomes)
    chosen = {(s, k, f): v for (s, k, f), v in LEVELS.items() if k == "learning_rate" and f == best[s]}
    fresh = scored_frame(chosen)
    fresh.loc[fresh["scheme"] == "dapo_loss", "score"] -= 0.15  # on fresh seeds dapo_loss's best rate loses
    table = scheme_sensitivity.best_rate_table(scored, outcomes, margin=0.02, fresh=fresh)
    dapo_loss = table[(table["row"] == "dapo_loss") & (table["kind"] == "scheme")].iloc[0]
    assert dapo_loss["verdict own best"] == "better" and dapo_loss["verdict fresh seeds"] == "worse"
    assert dapo_loss["on fresh seeds"] == "reversed" and dapo_loss["seeds fresh seeds"] == 4
    assert dapo_loss["adjusted verdict fresh seeds"] in ("worse", "worse, size unsure", "undecided")
    text = scheme_sensitivity.best_rate_markdown(table)
    assert text.startswith("Primary scheme table: every arm at its own tuned learning rate")
    assert f"family: the rows of the tuned-rate table on fresh seeds ({len(table)} comparisons); Holm" in text
    assert "| tuning verdict on fresh seeds |" in text and "| worse: -0.05" in text and "| reversed |" in text
    assert "fresh seeds" not in scheme_sensitivity.best_rate_markdown(
        scheme_sensitivity.best_rate_table(scored, outcomes, margin=0.02)
    )


def test_the_confirmation_runs_each_best_rate_on_seeds_it_was_not_chosen_on():
    points = scheme_sensitivity.confirm_design(FULL, {"grpo": 1 / 3, "cispo": 1.0})
    assert [p.label for p in points] == ["grpo learning_rate x0.333333", "cispo learning_rate x1"]
    fresh = scheme_sensitivity.fresh_seeds(FULL)
    assert len(fresh) == scheme_sensitivity.FRESH_SEEDS and not set(fresh) & set(FULL.seeds)
    with pytest.raises(ValueError, match="no learning-rate point for grpo x2"):
        scheme_sensitivity.confirm_design(FULL, {"grpo": 2.0})


def test_the_plan_counts_the_confirmation_before_and_after_the_rates_are_known(tmp_path):
    points = scheme_sensitivity.design(FULL)
    counted = scheme_sensitivity.runs(points, FULL, tmp_path)  # nothing stored: the lowest rate stands in
    confirming = len(schemes.SCHEMES) * scheme_sensitivity.FRESH_SEEDS
    extra = counted[len(points) * len(FULL.seeds) :][:confirming]
    tricks = counted[len(points) * len(FULL.seeds) + confirming :]  # stand-ins until the scan is stored
    assert len(tricks) == scheme_sensitivity.TRICKS_CONFIRMED * scheme_sensitivity.TRICK_SEEDS
    assert {c.seed for c in tricks} == set(scheme_sensitivity.trick_seeds(FULL))
    own = {p.config.key() for p in schemes.design(schemes.settings("full"))}
    assert not {c.replace(seed=0).key() for c in extra} & own  # not runs the scheme study counts
    assert {c.seed for c in extra} == set(scheme_sensitivity.fresh_seeds(FULL))
    assert scheme_sensitivity.stored_rates(FULL, tmp_path) is None


def test_a_trick_table_without_screened_tricks_still_renders_under_its_caption():
    empty = pd.DataFrame(columns=["row", "verdict", "adjusted verdict", "p"])  # as trick_table gives it
    text = scheme_sensitivity.trick_markdown(empty)
    assert "(0 comparisons)" in text
    assert text.rstrip().splitlines()[-1] == "|---|---|---|---|---|---|"
