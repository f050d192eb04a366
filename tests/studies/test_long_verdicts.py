"""The long-horizon verdict table (notebook 15) is one family under Holm: null rows that say a direction
raw do not once adjusted, and its markdown's caption names the family."""

from pathlib import Path

import pandas as pd
import pytest

from grpo_lab.analysis import multiplicity, verdict_table
from grpo_lab.analysis.power import SIGN, word
from grpo_lab.comparisons import scheme_arms
from grpo_lab.experiments.store import run_dir
from grpo_lab.studies import long_verdicts


def rows(effects: list[tuple[str, float, float]], margin: float = 0.01) -> pd.DataFrame:
    """Verdict rows of (row, effect, half-width of the 95% interval over 6 seeds), their words read off
    the intervals, every column `verdict_table.table_markdown` reads."""
    frame = pd.DataFrame(
        [
            {"row": r, "kind": "scheme", "protocol": "sequential", "effect": e, "ci_low": e - h,
             "ci_high": e + h, "confidence": 0.95, "df": 5, "seeds": 6, "margin": margin, "mde": 0.02,
             "mde / gain": 0.5, "greedy effect": 0.0, "greedy ci_low": -0.01, "greedy ci_high": 0.01,
             "activity": 1.0, "entropy change": -0.6, "reference entropy change": -0.6,
             "reward_variance x": 1.0, "cost x": 1.0}
            for r, e, h in effects
        ]
    )  # fmt: skip
    return frame.assign(verdict=[word(lo, hi, margin) for lo, hi in zip(frame["ci_low"], frame["ci_high"])])


NULL = [(f"s{i}", e, 0.03) for i, e in enumerate([0.0, 0.004, -0.006, 0.002, -0.001, 0.005, 0.0, -0.003])]
"""eight rows whose intervals hold 0 with room to spare"""


def test_null_rows_that_say_a_direction_raw_do_not_under_holm_and_the_caption_names_the_family(
    monkeypatch, tmp_path
):
    """Twelve rows where nothing acts; two raw intervals just exclude 0 by chance (p about 0.03): the
    table (`table`, over the rule table) gives them no direction once adjusted over its 12 rows."""
    chance = [("s8", -0.02, 0.018), ("s9", 0.02, 0.018), ("s10", 0.0, 0.03), ("s11", 0.001, 0.03)]
    made = rows([*NULL, *chance])
    monkeypatch.setattr(long_verdicts.sequential_seeds, "rule_table", lambda result, settings: made)
    table = long_verdicts.table(None, None)
    assert long_verdicts.FAMILY.control == "holm" and multiplicity.family_size(table) == 12
    assert table["verdict"].isin(SIGN).sum() == 2
    assert not table["adjusted verdict"].isin(SIGN).any()
    text = long_verdicts.markdown(table)
    caption, rate, shown = text.split("\n\n", 2)
    assert caption == long_verdicts.FAMILY.caption(12)
    assert caption.startswith("family: every row of the long-horizon verdict table (12 comparisons); Holm")
    assert rate == scheme_arms.SHARED_RATE and shown == verdict_table.table_markdown(table)
    assert "| worse, size unsure | undecided |" in shown and "| better, size unsure | undecided |" in shown
    monkeypatch.setenv("GRPO_LAB_FIGURES", str(tmp_path))
    assert long_verdicts.save_markdown(table, "15_long_verdicts_test").read_text() == text


def test_the_rate_scan_at_the_horizon_changes_the_rate_alone_and_shares_the_designs_runs():
    settings = long_verdicts.settings("full", steps=800)
    scan = long_verdicts.rate_design(settings, (1 / 3, 1.0, 3.0))
    own = {p.label: p.config for p in long_verdicts.design(settings)}
    assert len(scan) == len(own) * 3
    for point in scan:
        config = own[point.columns["arm"]]
        changed = {k for k, v in point.config.to_dict().items() if config.to_dict()[k] != v}
        assert changed <= {"learning_rate"}
        assert (point.columns["factor"] == 1.0) == (point.config.key() == config.key())
    rates = sorted({p.config.learning_rate for p in scan if p.columns["arm"] == "grpo"})
    assert rates == [1e-05, 3e-05, 9e-05]  # written as the 60-step scan writes them


def test_the_scan_so_far_reads_each_rate_on_the_seeds_stored_at_it(tmp_path):
    """A store holding grpo at x1 on seeds 0-2 and at x1/3 on seed 0 alone: each rate is read on its own
    seeds, and the best rate is not bracketed until the scan goes one step beyond it."""
    settings = long_verdicts.settings("full", steps=800)
    points = long_verdicts.rate_design(settings)
    held = {(1.0, 0), (1.0, 1), (1.0, 2), (1 / 3, 0)}
    for p in points:
        for seed in (0, 1, 2):
            if p.columns["arm"] == "grpo" and (p.columns["factor"], seed) in held:
                stored = run_dir(p.config.replace(seed=seed), "results")
                (tmp_path / stored.name).symlink_to(stored.resolve())
    scan = long_verdicts.scan_table(long_verdicts.stored_scan(settings, tmp_path))
    assert list(scan["factor"]) == [1 / 3, 1.0] and list(scan["seeds"]) == [(0,), (0, 1, 2)]
    assert list(scan["learning rate"]) == [1e-05, 3e-05]
    own = {r.factor: r.mean for r in scan.itertuples()}
    summary = long_verdicts.scan_summary(scan).set_index("arm")
    assert summary.loc["grpo", "best"] == ("x1" if own[1.0] > own[1 / 3] else "x1/3")
    assert not summary.loc["grpo", "bracketed"]
    assert summary.loc["grpo", "next"] == ("x3 seed 0" if own[1.0] > own[1 / 3] else "x1/9 seed 0")
    labels = {p.label for p in points if p.columns["arm"] == "grpo"}
    assert labels == {"grpo, lr x1/3", "grpo, lr x1"}  # the scan's start


def scan_rows(arm: str, means: dict[float, float], seeds: tuple[int, ...]) -> list[dict]:
    return [
        {"arm": arm, "factor": f, "seeds": seeds, "n": len(seeds), "mean": m, "sd": 0.02}
        for f, m in means.items()
    ]


def test_the_next_runs_extend_an_open_bracket_on_seed_0_and_add_seeds_where_a_lead_is_within_the_noise():
    """`close` leads x1/3 within the noise and x3 far beyond it: the next seed goes to x1/3 and x1 alone."""
    scan = pd.DataFrame(
        scan_rows("edge", {1 / 3: 0.40, 1.0: 0.30}, (0, 1, 2))
        + scan_rows("clear", {1 / 3: 0.30, 1.0: 0.50, 3.0: 0.10}, (0,))
        + scan_rows("close", {1 / 3: 0.47, 1.0: 0.50, 3.0: 0.10}, (0,))
        + scan_rows("close, all seeds", {1 / 3: 0.47, 1.0: 0.50, 3.0: 0.10}, (0, 1, 2))
    )
    assert long_verdicts.scan_spread(scan).sd == pytest.approx(0.02)
    runs = long_verdicts.next_runs(scan)
    assert runs[0][0] == "edge" and runs[0][1] == pytest.approx(1 / 9) and runs[0][2] == 0
    assert [r for r in runs if r[0] == "close"] == [("close", 1 / 3, 1), ("close", 1.0, 1)]
    assert not [r for r in runs if r[0] in ("clear", "close, all seeds")]
    summary = long_verdicts.scan_summary(scan).set_index("arm")
    assert summary.loc["clear", "settled"] and not summary.loc["close", "settled"]
    assert summary.loc["close", "next"] == "x1/3 seed 1, x1 seed 1"


def test_the_fresh_design_runs_each_arm_at_its_tuned_factor_and_names_the_untuned():
    settings = long_verdicts.settings("full", steps=800)
    own = {p.label: p.config for p in long_verdicts.design(settings)}
    factors = {arm: 1.0 for arm in own} | {"cispo": 1 / 3, "grpo": 3.0}
    points = {p.label: p for p in long_verdicts.fresh_design(settings, factors)}
    assert set(points) == set(own)
    assert points["scheme_a"].config.key() == own["scheme_a"].key()  # x1: the sequential rule's runs count
    assert points["cispo"].config.learning_rate == 1e-05 and points["grpo"].config.learning_rate == 9e-05
    assert not set(long_verdicts.FRESH_SEEDS) & set(long_verdicts.TUNING_SEEDS)
    with pytest.raises(ValueError, match="no tuned factor for \\['gspo'\\]"):
        long_verdicts.fresh_design(settings, {k: v for k, v in factors.items() if k != "gspo"})


def test_the_next_runs_name_an_extension_beyond_the_reach_as_an_error():
    lowest = long_verdicts.tuning.STEP**long_verdicts.SCAN_REACH.start
    scan = pd.DataFrame(scan_rows("falling", {lowest: 0.40, 3 * lowest: 0.30}, (0,)))
    with pytest.raises(ValueError, match="falling's best rate lies at the scan's edge.*widen it"):
        long_verdicts.next_runs(scan)


def two_arms(monkeypatch):
    """The design cut to grpo and scheme_a, so that a smoke scan trains a handful of runs."""
    design = long_verdicts.design
    monkeypatch.setattr(
        long_verdicts,
        "design",
        lambda settings: [p for p in design(settings) if p.label in ("grpo", "scheme_a")],
    )


@pytest.mark.slow
def test_the_scan_and_the_tuned_table_run_by_their_rule_under_the_smoke_profile(monkeypatch, tmp_path):
    """The scan starts every arm at SCAN_START on the first tuning seed, then takes the runs its rule names
    (SMOKE_ROUNDS rounds under the smoke profile); the tuned-rate table judges each arm at its best factor on
    a seed no rate was chosen on, and `scan_runs`, which the script prices, names every run trained."""
    two_arms(monkeypatch)
    settings = long_verdicts.settings("smoke")
    planned = long_verdicts.scan_runs(settings, None)
    starting = [(a, f) for a in ("grpo", "scheme_a") for f in long_verdicts.SCAN_START]
    assert len(planned) == len(starting) + 2 * len(long_verdicts.fresh_seeds(settings))
    assert long_verdicts.fresh_seeds(settings) == (max(settings.seeds) + 1,)
    monkeypatch.setattr(long_verdicts, "SMOKE_ROUNDS", 2)
    scan = long_verdicts.run_scan(settings, tmp_path, workers=1)
    table = long_verdicts.scan_table(scan)
    assert {(a, f) for a, f in zip(table["arm"], table["factor"])} >= set(starting)
    assert len(table) > len(starting)  # the second round extended or added a seed
    assert set(scan.runs["seed"]) <= set(long_verdicts.tuning_seeds(settings))
    factors = long_verdicts.tuned_factors(table)
    fresh = long_verdicts.run_tuned(settings, scan, tmp_path, workers=1)
    assert set(fresh.runs["seed"]) == set(long_verdicts.fresh_seeds(settings))
    rows = long_verdicts.tuned_table(scan, fresh)
    assert list(rows["row"]) == ["scheme_a"]
    for arm, factor in factors.items():
        rate = {
            p.columns["factor"]: p.config.learning_rate for p in long_verdicts.rate_design(settings, [factor])
        }
        assert (
            fresh.runs[fresh.runs["label"] == arm]["path"]
            .map(lambda path: long_verdicts.read_config(path)["learning_rate"])
            .eq(rate[factor])
            .all()
        )
    counted = {run_dir(c, tmp_path) for c in long_verdicts.scan_runs(settings, tmp_path)}
    trained = {Path(p).resolve() for p in [*scan.runs["path"], *fresh.runs["path"]]}
    assert trained <= {p.resolve() for p in counted}


def test_an_arm_whose_rate_is_chosen_takes_its_fresh_seeds_while_others_are_scanned():
    scan = pd.DataFrame(
        scan_rows("clear", {1 / 3: 0.30, 1.0: 0.50, 3.0: 0.10}, (0,))
        + scan_rows("close", {1 / 3: 0.47, 1.0: 0.50, 3.0: 0.10}, (0,))
        + scan_rows("low", {1 / 9: 0.30, 1 / 3: 0.38, 1.0: 0.37}, (0, 1, 2))
    )
    settings = long_verdicts.settings("full", steps=800)
    fresh = long_verdicts.fresh_runs(scan, settings)
    seeds = long_verdicts.FRESH_SEEDS
    assert fresh == [("clear", 1.0, s) for s in seeds] + [("low", 1 / 3, s) for s in seeds]


def test_the_scan_figure_stars_each_arms_tuned_rate_in_both_rows():
    scan = pd.DataFrame(
        scan_rows("grpo", {1 / 3: 0.38, 1.0: 0.47, 3.0: 0.28}, (0,))
        + scan_rows("cispo", {1 / 9: 0.28, 1 / 3: 0.37, 1.0: 0.01}, (0,))
    ).assign(greedy=0.8, **{"learning rate": lambda f: 3e-5 * f["factor"]})
    fig = long_verdicts.scan_figure(scan, long_verdicts.settings("full", steps=800))
    assert fig.axes[0].get_title() == "grpo" and fig.axes[1].get_title() == "cispo"
    for ax, tuned in zip(fig.axes, (1.0, 1 / 3, 1.0, 1 / 3)):  # headline row, then greedy row
        star = [line for line in ax.get_lines() if line.get_marker() == "*"]
        assert list(star[0].get_xdata()) == [tuned]
    assert "shared rate 3e-05" in fig._suptitle.get_text()


def test_the_tuned_markdown_says_a_side_has_too_few_seeds_rather_than_print_a_nan_interval():
    """cispo's own-best side rests on one paired seed: no interval, and the cell says so."""
    sides = {
        "shared": ("worse", -0.469, 3),
        "own best": ("too few seeds", -0.098, 1),
        "fresh seeds": ("worse", -0.094, 3),
    }
    row = {"row": "cispo", "kind": "scheme", "treatment rate x": 1 / 3, "control rate x": 1.0,
           "treatment bracketed": True, "control bracketed": True,
           "adjusted verdict fresh seeds": "undecided", "greedy effect fresh seeds": 0.028,
           "greedy ci_low fresh seeds": -0.01, "greedy ci_high fresh seeds": 0.066,
           "notes fresh seeds": "", "on fresh seeds": "appears", "turns on the rate": True}  # fmt: skip
    for side, (verdict, effect, seeds) in sides.items():
        interval = (float("nan"),) * 2 if seeds == 1 else (effect - 0.04, effect + 0.04)
        row |= {f"verdict {side}": verdict, f"effect {side}": effect, f"ci_low {side}": interval[0],
                f"ci_high {side}": interval[1], f"seeds {side}": seeds}  # fmt: skip
    text = long_verdicts.tuned_markdown(pd.DataFrame([row]), long_verdicts.settings("full", steps=800))
    assert "too few seeds: -0.098, 1 seed, no interval" in text and "nan" not in text
    row |= {"greedy ci_low fresh seeds": float("nan"), "greedy ci_high fresh seeds": float("nan")}
    text = long_verdicts.tuned_markdown(pd.DataFrame([row]), long_verdicts.settings("full", steps=800))
    assert "| +0.028, no interval |" in text and "nan" not in text
    assert "worse: -0.094 [-0.134, -0.054], 3 seeds" in text and "800 steps" in text
