"""Robustness tables, degradation from clean runs, and diagnostics counted per condition."""

import json

import numpy as np
import pandas as pd
import pytest

from grpo_lab.analysis import power, robustness


def finals_frame() -> pd.DataFrame:
    rows = []
    for scheme, clean in (("grpo", [0.50, 0.52, 0.48]), ("scheme_a", [0.60, 0.62, 0.58])):
        noisy = [v - 0.3 + d for v, d in zip(clean, (0.01, -0.01, 0.0))]  # about 0.3 lower on each seed
        nearly = [v + d for v, d in zip(clean, (0.002, -0.001, 0.0))]  # within rounding of the clean run
        conditions = {("none", "none"): clean, ("fault_reward_sigma", "1.0"): noisy,
                      ("fault_sampler_dtype", "bfloat16"): nearly}  # fmt: skip
        for (fault, level), values in conditions.items():
            for seed, value in enumerate(values):
                condition = robustness.condition_label(fault, level)
                rows.append({"scheme": scheme, "fault": fault, "level": level, "condition": condition,
                             "seed": seed, "acc": value})  # fmt: skip
    return pd.DataFrame(rows)


def test_robustness_table_starts_every_curve_at_the_clean_runs():
    faults = {"fault_reward_sigma": [1.0], "fault_sampler_dtype": ["bfloat16"]}
    table = robustness.robustness_table(finals_frame(), "acc", faults)
    assert len(table) == 2 * 2 * 2  # faults x schemes x (clean + one level)
    sigma = table[(table["fault"] == "fault_reward_sigma") & (table["scheme"] == "scheme_a")]
    assert sigma["level"].tolist() == [0.0, 1.0]  # clean at the field's clean value
    assert sigma["mean"].tolist() == pytest.approx([0.60, 0.30])
    assert sigma["n"].tolist() == [3, 3]
    dtype = table[(table["fault"] == "fault_sampler_dtype") & (table["scheme"] == "grpo")]
    assert dtype["level"].tolist() == ["none", "bfloat16"]
    with pytest.raises(ValueError, match="unknown fault field"):
        robustness.robustness_table(finals_frame(), "acc", {"fault_typo": [1.0]})
    with pytest.raises(ValueError, match="no 'scheme' column"):
        robustness.robustness_table(finals_frame().drop(columns="scheme"), "acc", faults)


def test_degradation_compares_each_condition_with_its_schemes_clean_runs():
    table = robustness.degradation(finals_frame(), "acc").set_index(["scheme", "condition"])
    assert table.loc[("grpo", "reward_sigma=1.0"), "diff"] == pytest.approx(-0.3)
    assert table.loc[("grpo", "reward_sigma=1.0"), "verdict"] == "worse"  # every seed about 0.3 lower
    assert table.loc[("scheme_a", "sampler_dtype=bfloat16"), "verdict"] == "no difference"
    assert table.loc[("grpo", "reward_sigma=1.0"), "n"] == 3
    assert table.loc[("grpo", "reward_sigma=1.0"), "summary"].startswith("-0.300 [")
    with pytest.raises(ValueError, match="no clean run"):
        robustness.degradation(finals_frame().query("fault != 'none'"), "acc")


def write_run(path, zero_std: float, steps: int = 12) -> None:
    path.mkdir()
    rows = [{"step": s, "reward": 0.5, "frac_reward_zero_std": zero_std} for s in range(steps)]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_run_findings_and_rule_counts(tmp_path):
    write_run(tmp_path / "flat", zero_std=0.9)
    write_run(tmp_path / "fine", zero_std=0.1)
    runs = pd.DataFrame({
        "condition": ["repeat_k=6", "clean", "repeat_k=6"], "seed": [0, 0, 1],
        "status": ["trained", "trained", "failed"], "error": [None, None, "FloatingPointError: nan loss"],
        "path": [str(tmp_path / "flat"), str(tmp_path / "fine"), str(tmp_path / "missing")],
    })  # fmt: skip
    findings = robustness.run_findings(runs, ["condition"])
    assert set(findings["rule"]) == {"zero_variance_groups", "run_failed"}
    failed = findings[findings["rule"] == "run_failed"].iloc[0]
    assert (failed["seed"], failed["severity"], failed["message"]) == (
        1,
        "error",
        "FloatingPointError: nan loss",
    )
    doubled = pd.concat([findings, findings])  # a run counts once per rule
    counts = robustness.rule_counts(doubled, runs, by="condition")
    assert list(counts.columns) == ["repeat_k=6", "clean"]
    assert list(counts.index) == ["zero_variance_groups", "run_failed"]
    assert counts.loc["zero_variance_groups"].tolist() == [1, 0]
    assert counts.loc["run_failed", "repeat_k=6"] == 1


def test_rule_counts_of_no_findings_is_empty():
    runs = pd.DataFrame({"condition": ["clean"], "seed": [0]})
    empty = robustness.run_findings(runs.assign(status="failed", error="x", path="p").iloc[:0], ["condition"])
    counts = robustness.rule_counts(empty, runs, by="condition")
    assert counts.empty and list(counts.columns) == ["clean"]
    assert np.issubdtype(counts.dtypes.iloc[0], np.integer)


def test_rule_counts_count_runs_of_different_schemes_that_share_a_seed_apart():
    """Four schemes, one seed: a rule that fired on all four runs of a condition counts 4 of 4."""
    runs = pd.DataFrame({"scheme": ["a", "b", "c", "d"], "condition": ["flip"] * 4, "seed": [0] * 4})
    findings = runs.assign(rule="stall", severity="warning", message="m")
    counts = robustness.rule_counts(findings, runs, by="condition")
    assert counts.loc["stall", "flip"] == 4 == runs["condition"].value_counts()["flip"]


def test_degradation_pairs_each_faulty_run_with_the_clean_run_of_its_seed():
    """Seeds differ a lot, the fault lowers every seed by about 0.1: unpaired, the interval would
    cross 0; paired, it does not."""
    rows = []
    for seed, clean in enumerate([0.2, 0.5, 0.8, 0.35]):
        rows.append({"scheme": "grpo", "fault": "none", "condition": "clean", "seed": seed, "acc": clean})
        faulty = clean - 0.1 + 0.01 * (seed % 2)
        rows.append({"scheme": "grpo", "fault": "f", "condition": "f=1", "seed": seed, "acc": faulty})
    row = robustness.degradation(pd.DataFrame(rows), "acc").iloc[0]
    assert row["verdict"] == "worse" and row["hi"] < 0
    assert 0 < row["mde"] < 0.05


def test_degradation_carries_what_the_error_rate_control_reads():
    table = robustness.degradation(finals_frame(), "acc", margin=0.02)
    assert set(table["confidence"]) == {0.95} and set(table["df"]) == {2} and set(table["margin"]) == {0.02}
    noisy = table.set_index(["scheme", "condition"]).loc[("grpo", "reward_sigma=1.0")]
    assert noisy["sd"] == pytest.approx(np.std([0.01, -0.01, 0.0], ddof=1))


def test_pooled_spread_weights_each_row_by_its_degrees_of_freedom():
    pooled = power.pooled_spread([3, 5, 1, 4], [0.1, 0.2, np.nan, np.nan])
    assert (pooled.rows, pooled.df) == (2, 6)  # a row without a spread is left out
    assert pooled.sd == pytest.approx(np.sqrt((2 * 0.1**2 + 4 * 0.2**2) / 6))
    assert pooled.words() == f"the sd pooled over 2 rows ({pooled.sd:.3g}, 6 df)"
    assert np.isnan(power.pooled_spread([1], [np.nan]).sd)


def test_an_mde_rests_on_five_seeds_own_spread_or_on_the_pooled_one():
    """Three seeds whose differences happen to agree give no tiny MDE: the row takes the pooled sd;
    a row of six seeds keeps its own; a table whose pool has too few degrees of freedom gives none."""
    table = pd.DataFrame({"n": [3, 3, 6], "sd": [0.0005, 0.02, 0.01]})
    out = power.spread_mde(table)
    pooled = power.pooled_spread(table["n"], table["sd"])
    assert pooled.df == 2 + 2 + 5
    assert out["mde from"].tolist() == ["pooled", "pooled", "own"]
    assert out["mde sd"].tolist() == pytest.approx([pooled.sd, pooled.sd, 0.01])
    factor3, factor6 = power.mde_factor(3), power.mde_factor(6)
    assert out["mde"].tolist() == pytest.approx(
        [factor3 * pooled.sd / np.sqrt(3), factor3 * pooled.sd / np.sqrt(3), factor6 * 0.01 / np.sqrt(6)]
    )
    assert out.loc[0, "mde"] > 10 * factor3 * 0.0005 / np.sqrt(3)  # not its own agreeing seeds'
    alone = power.spread_mde(pd.DataFrame({"n": [3], "sd": [0.01]}))  # a pool of 2 df
    assert alone["mde from"].tolist() == ["none"] and np.isnan(alone.loc[0, "mde"])
