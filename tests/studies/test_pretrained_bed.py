"""The pretrained bed: what it changes over grpo, its pinned start, the pilot's design and its table."""

import numpy as np
import pandas as pd
import pytest

from grpo_lab.comparisons import pretrained_bed
from grpo_lab.experiments import SweepResult
from grpo_lab.models.pretrained import PRETRAINED
from grpo_lab.presets import preset


def test_the_bed_is_grpo_on_the_pretrained_model_and_the_word_task():
    settings = pretrained_bed.pilot_settings("full")
    config = pretrained_bed.base(settings)
    assert (config.model, config.task) == ("smollm2-135m", "word")
    assert config.temperature == config.val_temperature == pretrained_bed.TEMPERATURE
    assert config.num_mini_batches * config.num_iterations > 1  # a mini-batch off-policy: a clip can bind
    assert config.val_sampled_size == settings.val_size // pretrained_bed.VAL_SAMPLED_SHARE
    fields = dict(steps=30, eval_every=10, eval_start=0, val_size=96, val_sampled_size=48, progress=False)
    assert config == preset("grpo", **pretrained_bed.PRETRAINED_BED, **fields)
    smoke = pretrained_bed.base(pretrained_bed.pilot_settings("smoke"), "dapo")
    assert smoke.preset == "dapo" and smoke.batch_size < config.batch_size
    assert smoke.max_completion_length < config.max_completion_length


def test_the_start_is_pinned_by_the_registrys_sha256():
    assert pretrained_bed.start_sha256() == PRETRAINED["smollm2-135m"].weights_sha256
    described = pretrained_bed.described(pretrained_bed.pilot_settings("full"))
    assert described == f"pretrained bed: word task, smollm2-135m, start {pretrained_bed.start_sha256()[:8]}"


def test_the_pilot_scans_the_rate_alone():
    full = pretrained_bed.pilot_design(pretrained_bed.pilot_settings("full"))
    assert [p.columns["learning_rate"] for p in full] == list(pretrained_bed.PILOT_RATES)
    configs = [p.config.to_dict() for p in full]
    changed = {k for k in configs[0] if len({str(c[k]) for c in configs}) > 1}
    assert changed == {"learning_rate"}
    assert len(pretrained_bed.pilot_design(pretrained_bed.pilot_settings("smoke"))) == 1


def test_the_pilot_table_reads_start_end_gain_and_phases():
    steps = np.arange(31)
    evals = {0: (0.25, 0.09, 0.25), 10: (0.3, 0.12, 0.3), 20: (0.4, 0.2, 0.4), 30: (0.5, 0.3, 0.5)}
    metrics = pd.DataFrame(
        {
            "label": "grpo, lr 3e-06",
            "seed": 0,
            "step": steps,
            "val/accuracy": [evals[s][0] if s in evals else np.nan for s in steps],
            "val/sampled_accuracy": [evals[s][1] if s in evals else np.nan for s in steps],
            "val/pass@4": [evals[s][2] if s in evals else np.nan for s in steps],
            "completions/mean_length": np.linspace(44, 33, 31),
            "time/sample_s": 10.0,
            "time/logprob_s": 5.0,
            "time/train_s": 20.0,
            "time/step_s": 36.0,
        }
    )
    row = pretrained_bed.pilot_table(SweepResult(metrics, pd.DataFrame())).iloc[0]
    assert (row["greedy start"], row["greedy end"], row["sampled end"]) == (0.25, 0.5, 0.3)
    assert row["headline"] == pytest.approx(0.25)  # evaluations at steps 20 and 30: the last half
    assert row["gain"] == pytest.approx(0.25 - 0.09)
    assert (row["length start"], row["length end"], row["step s"]) == (44.0, 33.0, 36.0)
