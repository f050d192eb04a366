"""The powered fault study: its design (every scheme clean and under each fault, the clean runs
shared with the scheme study) and its changes, relative robustness, crashes, figure and tables on
hand-made scores."""

import numpy as np
import pandas as pd
import pytest

from grpo_lab.analysis import multiplicity, power, verdict_table
from grpo_lab.analysis.robustness import CLEAN_CONDITION
from grpo_lab.experiments import SweepResult
from grpo_lab.studies import fault_injection, fault_robustness, schemes

FULL = fault_robustness.settings("full")


def test_every_scheme_clean_and_under_each_fault_one_at_a_time():
    points = fault_robustness.design(FULL)
    arms = {p.label: p.config for p in schemes.design(schemes.settings("full"))}
    assert {p.columns["scheme"] for p in points} == set(schemes.SCHEMES)
    assert len(points) == len(arms) * (1 + sum(len(levels) for levels in fault_injection.FAULTS.values()))
    for p in points:
        own = arms[p.columns["scheme"]]
        changed = {k for k, v in p.config.to_dict().items() if v != own.to_dict()[k]}
        if p.columns["condition"] == CLEAN_CONDITION:
            assert p.config.key() == own.key()  # the scheme study's own run
        else:
            assert changed == {p.columns["fault"]}, p.label


def test_the_smoke_profile_keeps_one_fault():
    points = fault_robustness.design(fault_robustness.settings("smoke"))
    assert {p.columns["condition"] for p in points} == {CLEAN_CONDITION, "reward_sigma=1.0"}


def scored(levels: dict[tuple[str, str], float], seeds: int = 4) -> pd.DataFrame:
    """Hand-made run scores: (scheme, condition) -> mean score; seed s adds 0.01 s, and 0.004 on odd
    seeds under a fault (so paired changes vary); every run starts at 0.1."""
    rows = []
    for (scheme, condition), level in levels.items():
        clean = condition == CLEAN_CONDITION
        for seed in range(seeds):
            score = level + 0.01 * seed + (0 if clean else 0.004 * (seed % 2))
            fault = "none" if clean else "fault_" + condition.split("=")[0]
            rows.append(
                {"label": f"{scheme}, {condition}", "seed": seed, "score": score, "start": 0.1,
                 "step_s": 1.0, "scheme": scheme, "fault": fault, "level": "x", "condition": condition,
                 **dict.fromkeys(verdict_table.STABILITY_COLUMNS, 1.0)}
            )  # fmt: skip
    return pd.DataFrame(rows)


LEVELS = {
    ("grpo", "clean"): 0.50,
    ("grpo", "reward_flip=0.4"): 0.30,
    ("dapo_loss", "clean"): 0.50,
    ("dapo_loss", "reward_flip=0.4"): 0.45,
    ("grpo_no_kl", "clean"): 0.50,
    ("grpo_no_kl", "reward_flip=0.4"): 0.35,
}


def test_changes_and_relative_robustness_paired_on_seeds():
    frame = scored(LEVELS)
    margin = fault_robustness.margin(frame)
    assert margin == pytest.approx(verdict_table.MARGIN_OF_GAIN * (0.515 - 0.1))
    changed = fault_robustness.changes(frame, margin)
    assert list(changed["scheme"]) == ["grpo", "dapo_loss", "grpo_no_kl"]  # the scheme study's order
    by = changed.set_index("scheme")
    assert by.loc["grpo", "diff"] == pytest.approx(-0.198) and by.loc["grpo", "verdict"] == "worse"
    assert by.loc["dapo_loss", "diff"] == pytest.approx(-0.048) and by.loc["dapo_loss", "mde"] > 0
    compared = fault_robustness.relative(frame, margin)
    rows = {(r.row, r.kind): r for r in compared.itertuples()}
    assert set(rows) == {
        ("dapo_loss", "scheme"),
        ("dapo_loss", "scheme vs grpo_no_kl"),
        ("grpo_no_kl", "scheme"),
    }
    # every scheme's change shares the same per-seed jitter, so the differences are exact
    assert rows[("dapo_loss", "scheme")].diff == pytest.approx(0.15)
    assert rows[("dapo_loss", "scheme vs grpo_no_kl")].diff == pytest.approx(0.10)
    assert rows[("grpo_no_kl", "scheme")].diff == pytest.approx(0.05)
    # no spread between the changes: the fewest seeds decide; a noisy row needs many more
    assert rows[("dapo_loss", "scheme")].seeds_needed == power.MIN_SEEDS
    jitter = (frame["seed"] % 2) * (frame["scheme"] == "dapo_loss") * (frame["condition"] != CLEAN_CONDITION)
    noisy = frame.assign(score=frame["score"] + 0.3 * jitter)
    found = fault_robustness.relative(noisy, margin).set_index(["row", "kind"])
    assert found.loc[("dapo_loss", "scheme"), "seeds_needed"] > 10 * power.MIN_SEEDS


def test_crashes_figure_and_tables():
    frame = scored(LEVELS)
    runs = frame.drop_duplicates(["label", "seed"])[
        ["label", "seed", "scheme", "fault", "level", "condition"]
    ]
    runs = runs.assign(status=["failed" if (lab, s) == ("dapo_loss, reward_flip=0.4", 3) else "loaded"
                               for lab, s in zip(runs["label"], runs["seed"])])  # fmt: skip
    failed = fault_robustness.crashes(SweepResult(frame, runs))
    row = failed[(failed["scheme"] == "dapo_loss") & (failed["condition"] == "reward_flip=0.4")].iloc[0]
    assert (row["failed"], row["runs"]) == (1, 4)
    margin = fault_robustness.margin(frame)
    changed = fault_robustness.changes(frame, margin)
    compared = fault_robustness.relative(frame, margin)
    text = fault_robustness.markdown(changed, compared, failed)
    assert "| reward_flip=0.4 | dapo_loss | -0.048 [" in text and "| 1/4 |" in text
    assert "| reward_flip=0.4 | dapo_loss | scheme vs grpo_no_kl | +0.100 [" in text
    assert "| seeds for an MDE at the margin |" in text
    fig = fault_robustness.figure(changed, margin, FULL)
    assert len(fig.axes) == 1 and "4 paired seeds" in fig._suptitle.get_text()
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["grpo_no_kl", "dapo_loss", "grpo"]


DIRECTED = set(power.SIGN)
"""the words that say a direction"""
NULL_CONDITIONS = [f"reward_flip=0.{i}" for i in range(1, 9)]


def null_scores(seeds: int = 3, rng_seed: int = 2) -> pd.DataFrame:
    """Hand-made run scores where no fault and no scheme does anything: every run scores 0.5 plus
    noise of sd 0.02, three schemes clean and under eight conditions (24 rows in each table). Under
    `rng_seed` 2, a few rows of each table say a direction by chance."""
    rng = np.random.default_rng(rng_seed)
    rows = []
    for scheme in ("grpo", "dapo_loss", "grpo_no_kl"):
        for condition in [CLEAN_CONDITION, *NULL_CONDITIONS]:
            clean = condition == CLEAN_CONDITION
            for seed in range(seeds):
                rows.append(
                    {"label": f"{scheme}, {condition}", "seed": seed,
                     "score": 0.5 + 0.02 * rng.standard_normal(), "start": 0.1, "step_s": 1.0,
                     "scheme": scheme, "fault": "none" if clean else "fault_reward_flip", "level": "x",
                     "condition": condition, **dict.fromkeys(verdict_table.STABILITY_COLUMNS, 1.0)}
                )  # fmt: skip
    return pd.DataFrame(rows)


def test_null_rows_that_say_a_direction_by_chance_do_not_after_adjustment():
    """Nothing acts, yet each table's raw 95% intervals give a few directional words; its control
    over its 24 rows (Benjamini-Hochberg for the changes, Holm for the relative rows) gives none."""
    frame = null_scores()
    margin = fault_robustness.margin(frame)
    changed = fault_robustness.changes(frame, margin)
    compared = fault_robustness.relative(frame, margin)
    for table in (changed, compared):
        assert len(table) == multiplicity.family_size(table) == 24
        assert table["verdict"].isin(DIRECTED).sum() >= 2  # chance alone
        assert not table["adjusted verdict"].isin(DIRECTED).any()
        assert (table["adjusted lo"] <= table["lo"] + 1e-12).all()
        assert (table["adjusted hi"] >= table["hi"] - 1e-12).all()
    families = (fault_robustness.CHANGES_FAMILY, fault_robustness.RELATIVE_FAMILY)
    assert [f.control for f in families] == ["bh", "holm"]
    text = fault_robustness.markdown(changed, compared, fault_robustness.crashes(_all_loaded(frame)))
    raw_only = [r for r in compared.to_dict("records") if r["verdict"] in DIRECTED]
    r = raw_only[0]
    assert f"| {r['diff']:+.3f} [{r['lo']:+.3f}, {r['hi']:+.3f}] | " in text
    assert f"| {r['verdict']} | undecided |" in text  # the raw word beside the adjusted one


def _all_loaded(frame: pd.DataFrame) -> SweepResult:
    runs = frame.drop_duplicates(["label", "seed"])[["label", "seed", *fault_robustness.COLUMNS]]
    return SweepResult(frame, runs.assign(status="loaded"))


def test_each_table_s_caption_names_its_family_and_control():
    frame = null_scores()
    margin = fault_robustness.margin(frame)
    changed = fault_robustness.changes(frame, margin)
    compared = fault_robustness.relative(frame, margin)
    text = fault_robustness.markdown(changed, compared, fault_robustness.crashes(_all_loaded(frame)))
    paragraphs = text.split("\n\n")
    assert paragraphs[0] == fault_robustness.CHANGES_FAMILY.caption(24)
    assert paragraphs[0].startswith("family: every scheme's change under every fault")
    assert "(24 comparisons); Benjamini-Hochberg (false-discovery rate) at 0.05" in paragraphs[0]
    second = next(p for p in paragraphs if p.startswith("family: every scheme row's change"))
    assert "(24 comparisons); Holm (family-wise error rate) at 0.05" in second
    headers = [line for line in text.splitlines() if line.startswith("| condition |")]
    assert len(headers) == 2 and all(h.endswith("| verdict | adjusted verdict |") for h in headers)


def test_below_five_seeds_the_mde_and_seeds_needed_come_from_the_pooled_sd_and_say_so():
    """Three seeds: every row's MDE is its test's at the sd pooled over the table's rows (a row whose
    three changes happen to agree does not get a tiny one), and the markdown says so; five seeds: each
    row's own."""
    frame = null_scores()
    agree = (frame["scheme"] == "dapo_loss") & (frame["condition"] == NULL_CONDITIONS[0])
    clean = frame[(frame["scheme"] == "dapo_loss") & (frame["condition"] == CLEAN_CONDITION)][
        "score"
    ].to_numpy()
    frame.loc[agree, "score"] = clean - 0.03 + [0.0, 0.0001, -0.0001]  # sd of the changes 1e-4
    margin = fault_robustness.margin(frame)
    changed = fault_robustness.changes(frame, margin)
    compared = fault_robustness.relative(frame, margin)
    for table in (changed, compared):
        pooled = power.pooled_spread(table["n"], table["sd"])
        assert (pooled.rows, pooled.df) == (24, 48)
        assert pooled.sd == pytest.approx(np.sqrt((table["sd"] ** 2).mean()))
        assert set(table["mde from"]) == {"pooled"}
        np.testing.assert_allclose(table["mde"], power.mde_factor(3) * pooled.sd / np.sqrt(3))
    row = changed.set_index(["scheme", "condition"]).loc[("dapo_loss", NULL_CONDITIONS[0])]
    assert row["sd"] < 1e-3 and row["mde"] > 20 * power.mde_factor(3) * row["sd"] / np.sqrt(3)
    pooled = power.pooled_spread(compared["n"], compared["sd"])
    needed = power.seeds_needed(pooled.sd, margin, most=fault_robustness.SEEDS_SHOWN + 1)
    assert 3 < needed <= fault_robustness.SEEDS_SHOWN
    assert (compared["seeds_needed"] == needed).all()  # one spread, one figure for every row
    text = fault_robustness.markdown(changed, compared, fault_robustness.crashes(_all_loaded(frame)))
    assert "MDE: 24 rows of fewer than 5 seeds from the sd pooled over 24 rows (" in text
    assert "MDE and seeds needed: 24 rows of fewer than 5 seeds from the sd pooled over 24 rows (" in text
    assert "48 df)" in text and " (pooled) | 3 |" in text
    fig = fault_robustness.figure(changed, margin, FULL)
    assert "sd pooled over 24 rows" in fig._suptitle.get_text()

    five = null_scores(seeds=5)
    margin = fault_robustness.margin(five)
    changed = fault_robustness.changes(five, margin)
    assert set(changed["mde from"]) == {"own"}
    np.testing.assert_allclose(changed["mde"], power.mde_factor(5) * changed["sd"] / np.sqrt(5))
    text = fault_robustness.markdown(changed, fault_robustness.relative(five, margin), pd.DataFrame(
        columns=["scheme", "condition", "failed", "runs"]))  # fmt: skip
    assert "(pooled)" not in text and "24 rows of 5 seeds or more from their own sd" in text
