"""Claims' decision rule on hand intervals and on synthetic runs built to give each verdict, and the
per-run metrics (analysis.claim_checks reads run logs only)."""

import math

import numpy as np
import pandas as pd
import pytest

from grpo_lab.analysis import claim_checks
from grpo_lab.analysis.claim_checks import (
    Claim,
    at_most,
    between,
    equivalent,
    greater,
    less,
    noninferior,
    verdict,
)
from grpo_lab.analysis.scores import HEADLINE

# --- the decision rule -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("low", "high", "region", "expected"),
    [
        (0.1, 0.3, greater(), "supported"),
        (-0.3, -0.1, greater(), "not supported"),
        (-0.1, 0.3, greater(), "inconclusive"),
        (0.0, 0.0, greater(), "inconclusive"),  # every seed the same: zero width decides nothing
        (1.0, 1.0, between(0.5, 0.7), "inconclusive"),
        (0.01, 0.02, greater(0.05), "not supported"),  # an effect, but smaller than the claimed margin
        (-0.3, -0.1, less(), "supported"),
        (-0.02, 0.01, equivalent(0.03), "supported"),
        (0.04, 0.09, equivalent(0.03), "not supported"),
        (-0.01, 0.05, equivalent(0.03), "inconclusive"),
        (0.16, 0.19, between(0.15, 0.20), "supported"),
        (-0.05, 0.05, between(0.15, 0.20), "not supported"),
        (0.10, 0.18, between(0.15, 0.20), "inconclusive"),
        (-0.02, 0.08, noninferior(0.03), "supported"),
        (-0.09, -0.04, noninferior(0.03), "not supported"),
        (0.001, 0.008, at_most(0.01), "supported"),
        (0.02, 0.04, at_most(0.01), "not supported"),
        (math.nan, math.nan, greater(), "inconclusive"),
    ],
)
def test_verdict_compares_the_interval_with_the_claimed_region(low, high, region, expected):
    assert verdict(low, high, region, n=3) == expected


def test_no_claim_is_decided_on_fewer_than_three_seeds():
    assert verdict(0.1, 0.3, greater(), n=3) == "supported"
    assert verdict(0.1, 0.3, greater(), n=2) == "inconclusive"
    assert verdict(-0.3, -0.1, greater(), n=2) == "inconclusive"


def test_regions_describe_themselves_and_refuse_empty_ranges():
    assert greater().describe() == "> 0" and less().describe() == "< 0"
    assert between(0.15, 0.2).describe() == "in (0.15, 0.2)"
    with pytest.raises(ValueError, match="low < high"):
        between(0.2, 0.1)
    with pytest.raises(ValueError, match="low <= high"):
        verdict(0.3, 0.1, greater(), n=3)


def synthetic_claim(region, effect="difference", control=True) -> Claim:
    return Claim("c", "a claim", "doc", "headline_score", effect, region, {"adv_clip": 2.0},
                 {} if control else None)  # fmt: skip


def synthetic_scores(treatment: list[float], control: list[float] | None) -> pd.DataFrame:
    rows = [{"claim": "c", "arm": "treatment", "seed": i, "score": v} for i, v in enumerate(treatment)]
    rows += [{"claim": "c", "arm": "control", "seed": i, "score": v} for i, v in enumerate(control or [])]
    return pd.DataFrame(rows)


@pytest.mark.parametrize(
    ("treatment", "control", "expected"),
    [
        ([0.60, 0.62, 0.61, 0.63], [0.40, 0.41, 0.42, 0.40], "supported"),  # clearly higher
        ([0.30, 0.31, 0.29, 0.30], [0.50, 0.52, 0.49, 0.51], "not supported"),  # clearly lower
        ([0.30, 0.70, 0.40, 0.60], [0.50, 0.45, 0.55, 0.50], "inconclusive"),  # noise swamps it
    ],
)
def test_decision_rule_on_synthetic_runs_for_an_increase(treatment, control, expected):
    claim = synthetic_claim(greater())
    table = claim_checks.evaluate([claim], synthetic_scores(treatment, control))
    row = table.iloc[0]
    assert row["verdict"] == expected
    assert row["estimate"] == pytest.approx(np.mean(treatment) - np.mean(control))
    assert row["low"] < row["estimate"] < row["high"]
    assert row["n"] == 4 and row["mde"] > 0


@pytest.mark.parametrize(
    ("treatment", "control", "expected"),
    [
        ([0.500, 0.505, 0.495, 0.500], [0.500, 0.502, 0.498, 0.501], "supported"),  # the same outcome
        ([0.600, 0.610, 0.605, 0.600], [0.500, 0.502, 0.498, 0.501], "not supported"),  # 10 points apart
        ([0.400, 0.600, 0.450, 0.550], [0.500, 0.502, 0.498, 0.501], "inconclusive"),
    ],
)
def test_decision_rule_on_synthetic_runs_for_a_no_op(treatment, control, expected):
    table = claim_checks.evaluate([synthetic_claim(equivalent(0.03))], synthetic_scores(treatment, control))
    assert table.iloc[0]["verdict"] == expected


@pytest.mark.parametrize(
    ("treatment", "expected"),
    [
        ([1.17, 1.18, 1.175], "supported"),
        ([1.00, 1.01, 0.99], "not supported"),
        ([1.0, 1.4, 1.2], "inconclusive"),
    ],
)
def test_decision_rule_on_synthetic_runs_for_a_relative_cost(treatment, expected):
    control = [1.0, 1.002, 0.998]
    claim = synthetic_claim(between(0.15, 0.20), effect="relative")
    table = claim_checks.evaluate([claim], synthetic_scores(treatment, control))
    assert table.iloc[0]["verdict"] == expected
    ratios = np.log(np.array(treatment) / np.array(control))
    assert table.iloc[0]["estimate"] == pytest.approx(np.expm1(ratios.mean()))  # geometric mean ratio - 1


def test_decision_rule_on_a_value_without_control():
    claim = synthetic_claim(at_most(0.01), effect="value", control=False)
    assert (
        claim_checks.evaluate([claim], synthetic_scores([0.001, 0.002, 0.0015], None)).iloc[0]["verdict"]
        == "supported"
    )
    row = claim_checks.evaluate([claim], synthetic_scores([0.03, 0.028, 0.031], None)).iloc[0]
    assert row["verdict"] == "not supported" and row["n"] == 3 and np.isnan(row["control"])


def test_arms_are_paired_by_seed():
    """Seeds differ by far more than the effect, which is the same on every seed: the paired
    interval is narrow and the claim supported; a seed missing from one arm leaves the pairs."""
    control = [0.20, 0.50, 0.80, 0.35]
    treatment = [c + 0.05 + 0.002 * i for i, c in enumerate(control)]
    scores = synthetic_scores(treatment, control)
    row = claim_checks.evaluate([synthetic_claim(greater())], scores).iloc[0]
    assert row["verdict"] == "supported" and row["low"] > 0.04 and row["mde"] < 0.01
    fewer = scores[~((scores["arm"] == "control") & (scores["seed"] == 3))]
    assert claim_checks.evaluate([synthetic_claim(greater())], fewer).iloc[0]["n"] == 3


# --- per-run metrics -------------------------------------------------------------------------------


def synthetic_run() -> pd.DataFrame:
    steps = np.arange(8)
    run = pd.DataFrame({
        "step": steps,
        "reward": 0.1 * steps,
        "kl/exact": [0.0, 0.1, 0.0, 0.1, 0.0, 0.1, 0.0, 0.1],
        "completions/mean_length": np.arange(8.0, 16.0),
        "time/step_s": [9.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
        "entropy": [1.0] * 4 + [0.5] * 4,
    })  # fmt: skip
    validation = pd.DataFrame({
        "step": [0, 4, 6, 8],
        "val/accuracy": [0.3, 0.6, 0.4, 0.55],
        "val/reward": [0.3, 0.5, 0.5, 0.8],
        "val/sampled_accuracy": [0.2, 0.4, 0.5, 0.6],
    })  # evaluated at step 0 and in the last half, as a headline run  # fmt: skip
    return pd.concat([run, validation], ignore_index=True)


def test_run_metrics_on_a_synthetic_run():
    run = synthetic_run()
    metric = claim_checks.RUN_METRICS.get
    assert metric("headline_score")(run) == pytest.approx(0.5)  # steps 4, 6, 8: the last half
    assert metric("headline_score")(run) == HEADLINE.of(run)
    assert metric("headline_reward")(run) == pytest.approx(0.6)
    assert metric("mean_reward")(run) == pytest.approx(0.35)
    assert metric("kl_volatility")(run) == pytest.approx(np.std([0.1, -0.1] * 3 + [0.1], ddof=1))
    assert metric("final_length")(run) == pytest.approx(14.5)  # last quarter: 14, 15
    assert metric("step_time")(run) == 1.0  # the warm-up step is left out
    assert metric("early_entropy")(run) == 1.0
    with pytest.raises(ValueError, match="never logged 'advantages/clipped_frac'"):
        metric("clipped_frac")(run)
    with pytest.raises(ValueError, match="never logged 'val/sampled_accuracy'"):
        metric("headline_score")(run.drop(columns="val/sampled_accuracy"))


def test_failure_metrics_on_synthetic_runs():
    run = synthetic_run().assign(loss=0.1)
    metric = claim_checks.RUN_METRICS.get
    assert metric("crashed_early")(run) == 0.0
    broken = run.copy()
    broken.loc[2, "loss"] = np.nan
    assert metric("crashed_early")(broken) == 1.0
    assert metric("crashed_early")(run[run["step"] < 3]) == 1.0  # stopped after 3 steps
    assert metric("diverged_or_stalled")(run) == 0.0  # headline score 0.5, up 0.3 from step 0; KL small
    stalled = run.copy()  # the last greedy evaluation is up 0.25, the headline score 0.01
    stalled.loc[stalled["val/sampled_accuracy"].notna(), "val/sampled_accuracy"] = [0.2, 0.2, 0.21, 0.22]
    assert metric("diverged_or_stalled")(stalled) == 1.0
    assert metric("diverged_or_stalled")(run[run["step"] < 4]) == 1.0  # no evaluation in the window
    drifted = run.assign(**{"kl/exact": 5.0})
    assert metric("diverged_or_stalled")(drifted) == 1.0
    assert set(claim_checks.ON_FAILURE) <= set(claim_checks.RUN_METRICS.names())


def test_final_temperature_is_the_late_learned_temperature():
    learned = np.linspace(1.0, 0.1, len(synthetic_run()))
    late = claim_checks.RUN_METRICS.get("final_temperature")(
        synthetic_run().assign(**{"temperature/learned": learned})
    )
    assert late == pytest.approx(learned[:8][-2:].mean())  # the last quarter of the 8 training steps


def test_the_catalogue_is_one_bonferroni_family():
    """Alone, a claim's adjusted interval is its own; among three with intervals, each is read at
    alpha / 3, so a claim supported by its raw 95% interval can be inconclusive after adjustment."""
    treatment, control = [0.520, 0.508, 0.530, 0.514], [0.50, 0.50, 0.50, 0.50]
    claim = synthetic_claim(greater())
    alone = claim_checks.evaluate([claim], synthetic_scores(treatment, control)).iloc[0]
    assert alone["adjusted low"] == pytest.approx(alone["low"])
    assert alone["verdict"] == alone["adjusted verdict"] == "supported"
    claims = [Claim(name, "a claim", "doc", "headline_score", "difference", greater(), {"adv_clip": 2.0}, {})
              for name in ("a", "b", "c")]  # fmt: skip
    scores = pd.concat([synthetic_scores(treatment, control).assign(claim=c.name) for c in claims])
    table = claim_checks.evaluate(claims, scores)
    assert np.allclose(table["adjusted confidence"], 1 - 0.05 / 3)
    assert (table["adjusted low"] < table["low"]).all() and (table["adjusted high"] > table["high"]).all()
    assert list(table["verdict"]) == ["supported"] * 3
    assert list(table["adjusted verdict"]) == ["inconclusive"] * 3


def test_a_relative_claim_is_widened_on_the_log_ratio_scale():
    region = between(0.15, 0.20)
    claims = [Claim(name, "a claim", "doc", "headline_score", "relative", region, {"adv_clip": 2.0}, {})
              for name in ("a", "b")]  # fmt: skip
    treatment, control = [1.17, 1.18, 1.175], [1.0, 1.002, 0.998]
    scores = pd.concat([synthetic_scores(treatment, control).assign(claim=c.name) for c in claims])
    row = claim_checks.evaluate(claims, scores).iloc[0]
    logs = np.log1p([row["low"], row["estimate"], row["high"], row["adjusted low"], row["adjusted high"]])
    assert logs[1] - logs[3] == pytest.approx(logs[4] - logs[1])  # symmetric around the log-ratio
    assert logs[3] < logs[0]
