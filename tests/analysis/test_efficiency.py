"""Sample efficiency from hand-made logs: the common target, first crossings, censored runs kept,
completions counted before an evaluation, and the figure."""

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from grpo_lab.analysis import efficiency

VAL = "val/sampled_accuracy"


def run(label: str, seed: int, val: dict[int, float], steps: int = 10, correct: float = 0.2) -> pd.DataFrame:
    """One run's log: an evaluation at each step of `val` (before that step's batch) and a training
    batch of 8 completions at every step below `steps`, all equally correct."""
    rows = [
        {"label": label, "seed": seed, "step": s, "sampling/completions": 8.0,
         efficiency.TRAIN_METRIC: correct, "frac_reward_zero_std": 0.5, "completions/clipped_ratio": 0.1,
         "reward_std": 0.3}
        for s in range(steps)
    ]  # fmt: skip
    frame = pd.DataFrame(rows)
    evals = pd.DataFrame({"label": label, "seed": seed, "step": list(val), VAL: list(val.values())})
    return pd.concat([frame, evals]).groupby(["label", "seed", "step"], as_index=False).first()


def logs() -> pd.DataFrame:
    """grpo rises from 0.1 to 0.3 in every run (target 0.2 at share 0.5); slow reaches 0.2 in one of
    three runs, at step 10."""
    grpo = [run("grpo", s, {0: 0.1, 5: 0.2 + 0.01 * s, 10: 0.3}) for s in range(3)]
    slow = [run("slow", 0, {0: 0.1, 5: 0.15, 10: 0.2})] + [
        run("slow", s, {0: 0.1, 5: 0.1, 10: 0.15}) for s in (1, 2)
    ]
    return pd.concat([*grpo, *slow], ignore_index=True)


def test_a_run_that_never_reaches_the_target_is_censored_not_dropped():
    validated = efficiency.views(VAL)[0]
    progressed = efficiency.progress(logs(), validated, "label")
    level = efficiency.target(progressed, "label", "grpo")
    assert level == pytest.approx(0.1 + 0.5 * (0.3 - 0.1))
    reached = efficiency.reach(progressed, "label", level).set_index(["label", "seed"])
    assert reached.loc[("grpo", 0), ["reached", "step"]].tolist() == [True, 5]
    assert reached.loc[("slow", 0), ["reached", "step"]].tolist() == [True, 10]
    assert reached.loc[("slow", 1), ["reached", "step"]].tolist() == [False, 10]  # censored at its end
    # an evaluation at step 5 comes before step 5's batch: 5 batches of 8 sampled by then
    assert reached.loc[("grpo", 0), "completions"] == 40
    summary = efficiency.summary(reached.reset_index(), "label", ["grpo", "slow"]).set_index("label")
    assert summary.loc["grpo", ["runs", "reached", "median step"]].tolist() == [3, 3, 5]
    assert summary.loc["slow", ["runs", "reached"]].tolist() == [3, 1]
    assert math.isnan(summary.loc["slow", "median step"])  # two of three censored: no median


def test_the_share_that_reached_counts_every_run_of_a_group():
    progressed = efficiency.progress(logs(), efficiency.views(VAL)[0], "label")
    reached = efficiency.reach(progressed, "label", 0.2)
    shares = efficiency.reached_share(reached, "label", "step", [0, 5, 10]).set_index(["label", "step"])
    assert shares.loc["grpo", "share"].tolist() == [0, 1, 1]
    assert shares.loc["slow", "share"].tolist() == pytest.approx([0, 0, 1 / 3])
    assert shares.loc["slow", ["n", "k"]].iloc[0].tolist() == [3, 1]


def test_the_training_view_is_smoothed_and_counts_its_own_batch():
    trained = efficiency.views(VAL)[1]
    progressed = efficiency.progress(logs(), trained, "label")
    first = progressed[(progressed["label"] == "grpo") & (progressed["seed"] == 0)].iloc[0]
    assert first["step"] == efficiency.SMOOTH - 1 and first["value"] == pytest.approx(0.2)
    assert first["completions"] == 8 * efficiency.SMOOTH  # measured on its own batch


def test_a_missing_reference_is_an_error():
    progressed = efficiency.progress(logs(), efficiency.views(VAL)[0], "label")
    with pytest.raises(ValueError, match="no runs of the reference 'dapo'"):
        efficiency.target(progressed, "label", "dapo")


def test_the_figure_names_the_counts_and_shades_what_was_not_evaluated():
    metrics = logs()
    metrics = pd.concat([metrics, run("grpo", 9, {0: 0.1, 1: 0.1, 2: 0.1, 10: 0.3})], ignore_index=True)
    fig = efficiency.figure(metrics, "label", ["grpo", "slow"], VAL, "test")
    try:
        legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
        assert legend == ["grpo (4 of 4)", "slow (1 of 3)"]
        assert any(t.get_text() == "not evaluated" for t in fig.axes[0].texts)
        assert "3 to 4 seeds per line" in fig.get_suptitle()
        assert np.isfinite(fig.axes[3].lines[0].get_ydata()).all()
    finally:
        plt.close(fig)


def test_a_run_shorter_than_the_window_keeps_one_smoothed_point():
    short = run("grpo", 0, {0: 0.1, 4: 0.2}, steps=4)
    progressed = efficiency.progress(short, efficiency.views(VAL)[1], "label")
    assert progressed["step"].tolist() == [3] and progressed["value"].tolist() == pytest.approx([0.2])
