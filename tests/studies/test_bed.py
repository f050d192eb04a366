"""The study base: what it changes over grpo, per profile, and that a study's changes win."""

import pytest

from grpo_lab.comparisons.bed import TEST_BED, base
from grpo_lab.presets import preset
from grpo_lab.profiles import PROFILES


def test_base_is_grpo_with_the_test_bed_and_the_profile():
    config = base("full")
    assert config.preset == "grpo" and config.task == "worked"
    assert config.num_mini_batches * config.num_iterations > 1  # several optimizer steps per batch
    full = PROFILES["full"]
    assert (config.steps, config.eval_every, config.val_size) == (full.steps, full.eval_every, full.val_size)
    expected = dict(steps=full.steps, eval_every=full.eval_every, val_size=full.val_size, progress=False)
    assert config == preset("grpo", **TEST_BED, **expected)


def test_a_study_changes_only_what_it_compares():
    config = base(PROFILES["smoke"], "dapo", steps=7, learning_rate=5e-5)
    assert config.preset == "dapo" and config.eps_high == 0.28 and config.task == "worked"
    assert (config.steps, config.learning_rate) == (7, 5e-5)
    assert config.batch_size < base("full").batch_size  # the smoke profile's quick batch


def test_unknown_profile():
    with pytest.raises(ValueError, match="unknown profile 'nope'; valid: smoke, full"):
        base("nope")
