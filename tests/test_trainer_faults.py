"""Fault injectors wired into the training loop: each changes what it should and nothing else."""

import functools
import math

import pandas as pd
import pytest

from grpo_lab import train
from grpo_lab.training.compose import Objective


@pytest.fixture
def tiny(tiny_config):
    """This file's fast configs: the shared tiny ones with learning_rate=1e-2, diversity_every=1."""
    return functools.partial(tiny_config, learning_rate=1e-2, diversity_every=1)


def comparable(df: pd.DataFrame) -> pd.DataFrame:
    return df.drop(columns=[c for c in df.columns if c.startswith(("time/", "cost/peak"))])


def test_zero_strength_reward_noise_is_bit_identical(tiny):
    base = comparable(train(tiny()))
    zero = comparable(train(tiny(fault_reward_sigma=0.0, fault_group_fraction=0.5)))
    pd.testing.assert_frame_equal(base, zero)


def test_reward_noise_changes_rewards_not_samples(tiny, tmp_path):
    base = train(tiny(steps=1, samples_every=1, samples_per_log=16), out=tmp_path / "a")
    noisy = train(
        tiny(steps=1, samples_every=1, samples_per_log=16, fault_reward_sigma=0.5), out=tmp_path / "b"
    )
    read = lambda d: (tmp_path / d / "samples.jsonl").read_text().splitlines()  # noqa: E731
    import json

    a, b = [json.loads(x) for x in read("a")], [json.loads(x) for x in read("b")]
    assert [x["completion"] for x in a] == [x["completion"] for x in b]  # same sampled completions
    assert [x["reward"] for x in a] != [x["reward"] for x in b]
    assert base["rewards/judge/mean"].iloc[0] == noisy["rewards/judge/mean"].iloc[0]  # raw scores untouched


def test_repeated_samples_make_groups_identical(tiny):
    df = train(tiny(fault_repeat_k=3)).dropna(subset=["reward"])
    assert (df["diversity/identical_group_frac"] == 1.0).all()
    assert (df["frac_reward_zero_std"] == 1.0).all()


def test_extreme_lengths_force_the_maximum(tiny):
    forced = train(tiny(fault_long_frac=1.0)).dropna(subset=["reward"])
    assert (forced["completions/min_length"] == 8).all() and (forced["completions/clipped_ratio"] == 1).all()
    junk = train(tiny(fault_junk_frac=1.0)).dropna(subset=["reward"])
    assert (junk["completions/min_length"] == 8).all() and (junk["fault/junk_rows_frac"] == 1).all()


def test_low_precision_sampler_shows_a_logprob_gap(tiny):
    exact = train(tiny()).dropna(subset=["reward"])
    bf16 = train(tiny(fault_sampler_dtype="bfloat16")).dropna(subset=["reward"])
    assert exact["is/logp_gap_max"].max() < 1e-4 < bf16["is/logp_gap_max"].min()


def test_stale_policy_moves_the_ratio(tiny):
    """Sampling with the policy of 2 updates ago makes the trainer's ratio differ from 1."""
    fresh = train(tiny(steps=4)).dropna(subset=["reward"])
    stale = train(tiny(steps=4, fault_stale_k=2)).dropna(subset=["reward"])
    assert (fresh["ratio/std"] == 0).all()
    assert stale["ratio/std"].iloc[0] < 1e-5 < stale["ratio/std"].iloc[-1]  # step 0: nothing is stale yet


def test_a_recomputed_stale_sampler_moves_the_sampler_gap_not_the_ratio(tiny):
    """With the stale log-probs recomputed (verl's one-step off-policy), the trainer's ratio stays at 1
    and the lag shows where the sampler IS correction reads it, in the sampler-trainer gap."""
    stale = train(tiny(steps=4, fault_stale_k=2, fault_stale_recompute=True)).dropna(subset=["reward"])
    assert (stale["ratio/std"] < 1e-6).all()
    assert stale["is/logp_gap_max"].iloc[0] < 1e-6 < stale["is/logp_gap_max"].iloc[-1]


def test_recompute_without_a_stale_sampler_is_refused(tiny):
    with pytest.raises(ValueError, match="fault_stale_recompute .* needs fault_stale_k > 0"):
        tiny(fault_stale_recompute=True)


def test_non_finite_loss_stops_or_is_skipped(tiny, monkeypatch):
    """A loss that turns NaN (here: forced) stops the run, or is skipped and counted when asked."""
    loss = Objective.loss
    monkeypatch.setattr(Objective, "loss", lambda self, *a, **k: loss(self, *a, **k) * math.nan)
    with pytest.raises(FloatingPointError, match="non-finite loss at step 0"):
        train(tiny())
    df = train(tiny(skip_nonfinite=True)).dropna(subset=["reward"])
    assert df["nonfinite/skipped_steps"].tolist() == [1, 2, 3]
    assert df["kl"].tolist() == pytest.approx([0.0, 0.0, 0.0], abs=1e-7)  # the weights never moved
