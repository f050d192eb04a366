"""Statistics against hand-computed values: per-run figures, across-seed aggregates, probability of
improvement, sensitivity failure edges and the cost table."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from grpo_lab.analysis import stats


def run_frame(label: str, seed: int, steps: np.ndarray, **metrics: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame({"label": label, "seed": seed, "step": steps, **metrics})


# --- per run ---------------------------------------------------------------------------------------


def test_area_under_a_line():
    steps = np.arange(11)
    assert stats.area_under_curve(steps, 2.0 * steps) == pytest.approx(100.0)  # 10 x 20 / 2
    assert stats.area_under_curve([0, 2, 6], [1.0, 1.0, 1.0]) == pytest.approx(6.0)  # uneven steps


def test_steps_to_threshold():
    steps, values = np.array([0, 5, 10, 15]), np.array([0.1, 0.4, 0.6, 0.9])
    assert stats.steps_to_threshold(steps, values, 0.5) == 10
    assert math.isnan(stats.steps_to_threshold(steps, values, 0.95))
    assert stats.steps_to_threshold(steps, -values, -0.5, above=False) == 10


def test_stability_figures():
    steps = np.arange(20)
    assert stats.volatility(0.01 * steps) == pytest.approx(0.0, abs=1e-12)  # steady drift: no volatility
    assert stats.volatility(np.array([0.0, 1.0, 0.0, 1.0, 0.0])) == pytest.approx(
        np.std([1, -1, 1, -1], ddof=1)
    )
    grad = np.ones(20) + 0.01 * (steps % 3)
    grad[7] = 50.0
    assert stats.spike_frequency(grad, k=5) == pytest.approx(1 / 20)
    assert stats.spike_frequency(np.ones(20), k=5) == 0.0
    assert stats.decay_rate(steps, 3.0 * np.exp(-0.1 * steps)) == pytest.approx(-0.1)


def test_run_table_one_row_per_run():
    steps = np.arange(10)
    df = pd.concat([
        run_frame("a", 0, steps, reward=0.1 * steps, kl=0.01 * steps, grad_norm=np.ones(10),
                  entropy=np.exp(-0.2 * steps)),
        run_frame("a", 1, steps, reward=np.ones(10), kl=np.zeros(10), grad_norm=np.ones(10),
                  entropy=np.ones(10)),
    ])  # fmt: skip
    table = stats.run_table(df, by="label", metric="reward", window=2, threshold=0.5)
    assert list(table["seed"]) == [0, 1]
    first = table.iloc[0]
    assert first["final"] == pytest.approx(0.85)  # mean of 0.8, 0.9
    assert first["auc"] == pytest.approx(0.5 * 9 * 0.9)
    assert first["steps_to_threshold"] == 5
    assert first["reward_var"] == pytest.approx(np.var(0.1 * steps, ddof=1))
    assert first["entropy_decay"] == pytest.approx(-0.2)
    assert table.iloc[1]["steps_to_threshold"] == 0 and table.iloc[1]["reward_var"] == 0
    assert math.isnan(stats.run_table(df.drop(columns="kl"), by="label").iloc[0]["kl_volatility"])


# --- across seeds ----------------------------------------------------------------------------------


def test_iqm_of_one_to_eight():
    assert stats.iqm(np.arange(1, 9)) == pytest.approx(4.5)  # mean of 3, 4, 5, 6
    assert stats.iqm([1, 2, 3, 4, 5, 6, 7, 1000]) == pytest.approx(4.5)  # robust to an outlier


def test_bootstrap_interval_brackets_the_point_and_stratifies():
    values = np.arange(1.0, 9.0)
    point, lo, hi = stats.bootstrap_interval(values, "iqm", n_resamples=500)
    assert point == pytest.approx(4.5) and lo < point < hi
    mean, lo, hi = stats.bootstrap_interval(values, "mean", n_resamples=500)
    assert mean == pytest.approx(4.5) and 2 < lo < mean < hi < 7
    # two tasks on very different scales: resampling within tasks keeps 4 runs of each in every
    # resample, so the pooled mean varies far less than with a plain bootstrap that mixes them
    tasks = [np.array([0.0, 0.1, 0.2, 0.3]), np.array([10.0, 10.1, 10.2, 10.3])]
    _, s_lo, s_hi = stats.bootstrap_interval(tasks, "mean", n_resamples=500)
    _, p_lo, p_hi = stats.bootstrap_interval(np.concatenate(tasks), "mean", n_resamples=500)
    assert s_lo <= 5.15 <= s_hi and (s_hi - s_lo) < 0.2 * (p_hi - p_lo)
    assert stats.bootstrap_interval([2.0], "mean") == (2.0, 2.0, 2.0)


def test_probability_of_improvement():
    better, worse = np.array([5.0, 6.0, 7.0, 8.0]), np.array([1.0, 2.0, 3.0])
    assert stats.probability_of_improvement(better, worse, n_resamples=300) == (1.0, 1.0, 1.0)
    assert stats.probability_of_improvement(worse, better, n_resamples=300)[0] == 0.0
    assert stats.probability_of_improvement([1.0, 1.0], [1.0, 1.0])[0] == 0.5  # ties count half
    # x = [1, 3] against y = [2, 0]: 3 of the 4 pairs improve (1 > 0, 3 > 2, 3 > 0)
    assert stats.probability_of_improvement([1.0, 3.0], [2.0, 0.0])[0] == pytest.approx(0.75)
    # per-task values averaged: task 1 PoI = 1, task 2 PoI = 0
    point, lo, hi = stats.probability_of_improvement([better, worse], [worse, better], n_resamples=300)
    assert (point, lo, hi) == (0.5, 0.5, 0.5)


def test_aggregate_and_improvement_tables():
    finals = pd.DataFrame({
        "label": ["a"] * 4 + ["b"] * 4,
        "task": ["t1", "t1", "t2", "t2"] * 2,
        "reward": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0],
    })  # fmt: skip
    table = stats.aggregate_table(finals, "reward", by="label", strata="task", n_resamples=300)
    assert list(table["label"]) == ["a", "b"] and list(table["n"]) == [4, 4]
    assert list(table["mean"]) == [2.5, 6.5] and list(table["iqm"]) == [2.5, 6.5]
    assert (table["iqm_lo"] <= table["iqm"]).all() and (table["iqm"] <= table["iqm_hi"]).all()
    poi = stats.improvement_table(finals, "reward", "label", baseline="a", n_resamples=300)
    assert list(poi["label"]) == ["b"] and poi.iloc[0]["poi"] == 1.0
    with pytest.raises(ValueError, match="baseline"):
        stats.improvement_table(finals, "reward", "label", baseline="c")


# --- sensitivity -----------------------------------------------------------------------------------


def sweep_frame(outcome) -> pd.DataFrame:
    values = [1e-5, 3e-5, 1e-4, 3e-4, 1e-3]
    rows = [
        {"learning_rate": v, "seed": s, "step": 0, "reward": outcome(i) + 0.01 * s}
        for i, v in enumerate(values)
        for s in range(3)
    ]
    return pd.DataFrame(rows)


def test_failure_edges_where_the_outcome_falls_never_where_it_rises():
    step = stats.sensitivity_table(sweep_frame(lambda i: 0.9 if i < 3 else 0.1), "learning_rate", "reward")
    assert list(step["n"]) == [3] * 5 and (step["lo"] < step["mean"]).all()
    found = stats.failure_edges(step, "learning_rate", margin=0.3)
    assert [e.value for e in found] == [3e-4, 1e-3]
    assert found[0].best == 1e-5 and found[0].drop == pytest.approx(0.8)  # the first of equal means
    rising = stats.sensitivity_table(sweep_frame(lambda i: 0.1 if i < 3 else 0.9), "learning_rate", "reward")
    assert [e.value for e in stats.failure_edges(rising, "learning_rate", margin=0.3)] == [1e-5, 3e-5, 1e-4]
    line = stats.sensitivity_table(sweep_frame(lambda i: 0.05 * i), "learning_rate", "reward")
    assert stats.failure_edges(line, "learning_rate", margin=0.3) == []


def test_a_crashed_value_is_a_failure_edge():
    table = pd.DataFrame({"learning_rate": [1e-4, 1e-5, 1e-3], "mean": [0.5, 0.45, math.nan]})
    (crash,) = stats.failure_edges(table, "learning_rate", margin=0.1)
    assert crash.value == 1e-3 and math.isnan(crash.mean)


# --- cost ------------------------------------------------------------------------------------------


def test_cost_table_as_multiples_of_the_baseline():
    def run(label: str, seed: int, step_s: float, peak_mb: list[float]) -> pd.DataFrame:
        costs = {"time/step_s": step_s, "cost/sampled_tokens": 100.0, "cost/peak_rss_mb": peak_mb}
        return run_frame(label, seed, np.arange(4), **costs)

    df = pd.concat([
        run("grpo", 0, 1.0, [100.0, 120.0, 110.0, 115.0]),
        run("grpo", 1, 1.0, [120.0] * 4),
        run("dapo", 0, 2.0, [240.0] * 4),
    ])  # fmt: skip
    table = stats.cost_table(df, "grpo")
    assert table.loc["grpo", "cost/peak_rss_mb"] == 120.0  # peak of each run, then mean over runs
    assert table.loc["grpo", "tokens_per_s"] == 100.0 and table.loc["dapo", "tokens_per_s"] == 50.0
    assert table.loc["dapo", "time/step_s_x"] == 2.0 and table.loc["dapo", "tokens_per_s_x"] == 0.5
    assert table.loc["dapo", "cost/peak_rss_mb_x"] == 2.0 and table.loc["grpo", "time/step_s_x"] == 1.0
    timing_only = stats.cost_table(df[["label", "seed", "step", "time/step_s"]], "grpo")
    assert list(timing_only.columns) == ["time/step_s", "time/step_s_x"]  # cost/* absent: left out
    with pytest.raises(ValueError, match="baseline"):
        stats.cost_table(df, "nope")


def test_cost_table_takes_the_maximum_of_every_peak_column():
    df = run_frame("grpo", 0, np.arange(3), **{"time/step_s": 1.0, "cost/peak_over_rest_mb": [5.0, 9.0, 7.0]})
    assert stats.cost_table(df, "grpo").loc["grpo", "cost/peak_over_rest_mb"] == 9.0


# --- effect of a treatment -------------------------------------------------------------------------


def test_effect_interval_difference_is_welchs():
    treatment, control = np.array([0.61, 0.65, 0.58, 0.70]), np.array([0.50, 0.52, 0.47])
    point, lo, hi = stats.effect_interval(treatment, control, "difference")
    welch = scipy_stats.ttest_ind(treatment, control, equal_var=False).confidence_interval(0.95)
    assert point == pytest.approx(treatment.mean() - control.mean())
    assert (lo, hi) == (pytest.approx(welch.low), pytest.approx(welch.high))


def test_effect_interval_relative_is_a_ratio_interval():
    control = np.array([1.0, 1.1, 0.9])
    point, lo, hi = stats.effect_interval(1.2 * control, control, "relative")
    assert point == pytest.approx(0.2)
    assert lo < 0.2 < hi and (1 + lo) * (1 + hi) == pytest.approx(1.2**2)  # symmetric on the log scale
    assert stats.effect_interval(np.full(3, 2.0), np.full(3, 1.0), "relative") == (1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="positive means"):
        stats.effect_interval(np.array([-1.0, -2.0]), control, "relative")


def test_effect_interval_value_and_bad_input():
    values = np.array([0.1, 0.2, 0.3])
    assert stats.effect_interval(values, None, "value") == stats.mean_interval(values)
    point, lo, hi = stats.effect_interval(np.array([0.4]), np.array([0.1, 0.2]), "difference")
    assert point == pytest.approx(0.25) and np.isnan(lo) and np.isnan(hi)  # one run: no interval
    with pytest.raises(ValueError, match="unknown effect"):
        stats.effect_interval(values, values, "ratio")
    with pytest.raises(ValueError, match="control=None"):
        stats.effect_interval(values, values, "value")
    with pytest.raises(ValueError, match="pass the control"):
        stats.effect_interval(values, None, "difference")


# --- existing functions keep their behaviour --------------------------------------------------------


def test_summary_functions_unchanged():
    df = pd.concat([run_frame("a", s, np.arange(3), reward=np.array([0.0, 1.0, 2.0]) + s) for s in range(2)])
    finals = stats.final_values(df, "reward", "label", window=2)
    assert list(finals["reward"]) == [1.5, 2.5]
    assert stats.mean_interval(np.array([3.0]))[0] == 3.0
    assert list(stats.curve(df, "reward", by="label")["mean"]) == [0.5, 1.5, 2.5]
    assert stats.summary_table(df, ["reward"], by="label").loc["a", "seeds"] == 2
