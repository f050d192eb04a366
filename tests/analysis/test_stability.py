"""Stability figures from hand-made run logs."""

import numpy as np
import pandas as pd
import pytest

from grpo_lab.analysis import stability


def run(n=20, seed=0, **columns):
    frame = pd.DataFrame({"step": np.arange(n), "reward": np.linspace(0, 1, n), **columns})
    frame["seed"] = seed
    return frame


def test_reward_variance_ignores_a_steady_trend():
    steady = run(reward=np.linspace(0, 1, 20))
    noisy = run(reward=np.linspace(0, 1, 20) + np.resize([0.1, -0.1], 20))
    assert stability.reward_variance(steady) == pytest.approx(0, abs=1e-12)
    assert stability.reward_variance(noisy) > 0.01


def test_entropy_decay_compares_the_edges_of_the_run():
    frame = run(entropy=np.r_[np.full(10, 2.0), np.full(10, 0.5)])
    assert stability.entropy_decay(frame) == pytest.approx(0.75)


def test_kl_volatility_prefers_the_exact_kl_and_is_nan_without_reference():
    exact = run(**{"kl/exact": np.resize([0.0, 1.0], 20), "kl": np.zeros(20)})
    assert stability.kl_volatility(exact) > 0.5
    assert np.isnan(stability.kl_volatility(run()))


def test_steps_to_accuracy_reads_the_evaluations():
    frame = run()
    frame["val/accuracy"] = np.nan
    frame.loc[[0, 10, 19], "val/accuracy"] = [0.4, stability.THRESHOLD, 0.7]
    assert stability.steps_to_accuracy(frame) == 10


def test_table_has_one_row_per_run_with_every_figure():
    columns = {
        "grad_norm": np.ones(20),
        "entropy": np.ones(20),
        "clip_ratio/region_mean": np.full(20, 0.02),
        "ratio/p05": np.full(20, 0.9),
        "ratio/p95": np.full(20, 1.2),
        "frac_reward_zero_std": np.zeros(20),
    }
    frames = [run(seed=s, **columns).assign(label=label) for label in ("a", "b") for s in (0, 1)]
    table = stability.table(pd.concat(frames), by=["label"])
    assert len(table) == 4 and set(stability.STABILITY) <= set(table.columns)
    assert table["clip_rate"].tolist() == pytest.approx([0.02] * 4)
    assert table["ratio_spread"].tolist() == pytest.approx([0.3] * 4)
