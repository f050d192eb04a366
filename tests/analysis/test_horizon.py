"""Long-horizon readings: entropy fall, early against final, peaks, and the rank correlation."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from grpo_lab.analysis import horizon


def run(lr: float, seed: int, reward: np.ndarray, val: dict[int, float], entropy: np.ndarray) -> pd.DataFrame:
    steps = np.arange(len(reward))
    train = pd.DataFrame({"lr": lr, "seed": seed, "step": steps, "reward": reward, "entropy": entropy})
    evals = pd.DataFrame({"lr": lr, "seed": seed, "step": list(val), "val/accuracy": list(val.values())})
    return pd.concat([train, evals], ignore_index=True)


def test_start_end_and_ratio():
    df = run(0.1, 0, np.zeros(20), {0: 0.1}, np.r_[np.full(10, 2.0), np.full(10, 1.0)])
    table = horizon.start_end(df, "entropy", by="lr", frac=0.1)
    assert table.iloc[0][["start", "end", "ratio"]].tolist() == [2.0, 1.0, 0.5]
    with pytest.raises(ValueError, match="frac must be in"):
        horizon.start_end(df, "entropy", frac=0.9)
    with pytest.raises(ValueError, match="'missing' was not logged"):
        horizon.start_end(df, "missing")


def test_early_and_final_use_the_first_share_of_steps_and_the_last_validation():
    reward = np.arange(10, dtype=float)  # steps 0..9: the first 20% are steps 0 and 1
    df = run(0.1, 3, reward, {0: 0.1, 5: 0.4, 10: 0.3}, np.ones(10))
    table = horizon.early_and_final(df, by="lr", early_frac=0.2)
    assert table.iloc[0][["lr", "seed", "early", "final"]].tolist() == [0.1, 3, 0.5, 0.3]


def test_runs_come_in_one_order_whatever_the_order_of_the_rows():
    rng = np.random.default_rng(0)
    pairs = [(lr, seed) for lr in (0.3, 0.1) for seed in (1, 0)]
    runs = [run(lr, seed, rng.random(10), {9: rng.random()}, np.ones(10)) for lr, seed in pairs]
    df = pd.concat(runs, ignore_index=True)
    table = horizon.early_and_final(df, by="lr")
    shuffled = horizon.early_and_final(df.sample(frac=1.0, random_state=1), by="lr")
    pd.testing.assert_frame_equal(table, shuffled)
    assert list(zip(table["lr"], table["seed"])) == [(0.1, 0), (0.1, 1), (0.3, 0), (0.3, 1)]


def test_peak_and_drop():
    df = run(0.1, 0, np.zeros(4), {0: 0.2, 10: 0.6, 20: 0.6, 30: 0.35}, np.ones(4))
    row = horizon.peak_and_drop(df, by="lr").iloc[0]
    assert (row["best"], row["best_step"], row["final"]) == (0.6, 10, 0.35)
    assert row["drop"] == pytest.approx(0.25)


def test_summarize_formats_mean_and_interval():
    per_run = pd.DataFrame({"lr": [1, 1, 2], "x": [1.0, 3.0, 5.0]})
    table = horizon.summarize(per_run, ["x"], by="lr")
    low, high = stats.t.interval(0.95, 1, loc=2.0, scale=1.0)
    assert table.loc[1, "x"] == f"2.000 [{low:.3f}, {high:.3f}]"
    assert table.loc[2, "x"] == "5.000 [5.000, 5.000]" and table.loc[1, "runs"] == 2


def test_rank_correlation_matches_spearman_and_its_p_value():
    rng = np.random.default_rng(1)
    x = rng.normal(size=12)
    y = x + rng.normal(size=12)
    c = horizon.rank_correlation(x, y, n_permutations=10000)
    reference = stats.spearmanr(x, y)
    assert c.rho == pytest.approx(reference.statistic)
    assert c.n == 12 and c.lo < c.rho < c.hi

    def rho(a, b):
        return stats.spearmanr(a, b).statistic

    exact = stats.permutation_test(
        (x, y), rho, permutation_type="pairings", n_resamples=10000, random_state=0
    )
    assert c.p == pytest.approx(exact.pvalue, abs=0.01)
    unrelated = horizon.rank_correlation(x, rng.permutation(12) * 1.0)
    assert unrelated.p > c.p


def test_within_groups_removes_what_the_configuration_explains():
    """Across configurations the runs line up (a high config is high on both), within each one the
    better early run ends worse: pooled rho is positive, the within-group rho is -1."""
    groups = np.repeat([0, 1, 2], 4)
    offsets = 10.0 * groups
    x = offsets + np.tile([0.0, 1.0, 2.0, 3.0], 3)
    y = offsets + np.tile([3.0, 2.0, 1.0, 0.0], 3)
    pooled = horizon.rank_correlation(x, y).rho
    assert pooled == pytest.approx(stats.spearmanr(x, y).statistic) and pooled > 0.5
    within = horizon.rank_correlation(x, y, groups=groups)
    assert within.rho == pytest.approx(-1.0)
    assert within.p < 0.01


def test_rank_correlation_needs_three_runs_and_matching_inputs():
    assert np.isnan(horizon.rank_correlation([1.0, 2.0, np.nan], [1.0, 2.0, 3.0]).rho)
    with pytest.raises(ValueError, match="same length"):
        horizon.rank_correlation([1.0, 2.0, 3.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="groups has 2 entries for 3 runs"):
        horizon.rank_correlation([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], groups=[0, 1])


def test_fall_step_is_the_first_step_the_trailing_mean_reaches_the_fall():
    steps = np.arange(100)
    entropy = np.where(steps < 50, 1.0, 0.5)  # halves at step 50
    df = pd.DataFrame({"seed": 0, "step": steps, "entropy": entropy})
    row = horizon.fall_step(df, "entropy", fall=0.4, window=10).iloc[0]
    assert row["start"] == 1.0 and row["ratio"] == 0.5
    assert (
        row["fall_step"] == 57
    )  # the 10-step trailing mean is 0.6 once 8 of its values are 0.5: steps 50-57
    never = horizon.fall_step(df, "entropy", fall=0.6, window=10).iloc[0]
    assert np.isnan(never["fall_step"])
    with pytest.raises(ValueError, match="fall must be in"):
        horizon.fall_step(df, "entropy", fall=1.0)


def test_knee_is_where_the_curve_has_made_most_of_its_rise():
    curve = pd.DataFrame({"step": [0, 100, 200, 300, 400], "mean": [0.1, 0.5, 0.8, 0.9, 0.85]})
    found = horizon.knee(curve, reach=0.9)
    assert found["knee_step"] == 300 and found["peak_step"] == 300  # 0.1 + 0.9 x 0.8 = 0.82
    assert horizon.knee(curve, reach=0.5)["knee_step"] == 100
    flat = horizon.knee(pd.DataFrame({"step": [0, 100], "mean": [0.5, 0.4]}))
    assert np.isnan(flat["knee_step"])
