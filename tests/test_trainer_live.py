"""The steppable trainer: one step at a time, live changes between steps, same run as `train`."""

import functools
import json

import pandas as pd
import pytest
import torch

from grpo_lab import Trainer, train
from grpo_lab.models.loading import load_policy
from grpo_lab.training.trainer import EVENTS, LIVE_FIELDS


@pytest.fixture
def tiny(tiny_config):
    """This file's fast configs: the shared tiny ones, four steps, a learning rate that moves the policy."""
    return functools.partial(tiny_config, steps=4, learning_rate=1e-2)


def comparable(df: pd.DataFrame) -> pd.DataFrame:
    return df.drop(columns=[c for c in df.columns if c.startswith("time/") or c == "cost/peak_rss_mb"])


def test_run_equals_train(tiny):
    config = tiny(seed=5)
    pd.testing.assert_frame_equal(comparable(Trainer(config).run()), comparable(train(config)))


def test_steps_then_run_equals_train(tiny):
    config = tiny(seed=2)
    trainer = Trainer(config)
    rows = [trainer.step(), trainer.step()]
    assert [r["step"] for r in rows] == [0, 1] and not trainer.done
    df = trainer.run()
    assert trainer.done and trainer.finished
    pd.testing.assert_frame_equal(comparable(df), comparable(train(config)))
    with pytest.raises(RuntimeError, match="done"):
        trainer.step()


def test_kl_coef_set_live_is_used_next_step_and_the_linear_schedule_restarts_from_it(tiny):
    config = tiny(kl_schedule="linear", kl_coef=0.04, kl_coef_final=0.0)
    trainer = Trainer(config)
    first = trainer.step()
    assert first["kl/coef"] == pytest.approx(0.04)
    trainer.reconfigure(kl_coef=0.5)
    assert trainer.kl_coef == 0.5 and trainer.config.kl_coef == 0.5
    rows = [trainer.step() for _ in range(3)]
    assert rows[0]["kl/coef"] == pytest.approx(0.5)
    # from 0.5 at step 1 down to kl_coef_final after the last step (3 steps left)
    expected = [0.5 + (0.0 - 0.5) * k / 3 for k in range(3)]
    assert [r["kl/coef"] for r in rows] == pytest.approx(expected)


def test_kl_coef_set_back_to_its_start_after_a_schedule_moved_it(tiny):
    """The KL controller owns beta once a schedule moves it: setting the starting value again is a
    change (recorded from the controller's value), not a silent no-op."""
    trainer = Trainer(tiny(kl_schedule="linear", kl_coef=0.04, kl_coef_final=0.0))
    trainer.step(), trainer.step()
    moved = trainer.kl_coef
    assert moved < 0.04 and trainer.config.kl_coef == 0.04
    trainer.reconfigure(kl_coef=0.04)
    assert trainer.kl_coef == 0.04
    assert trainer.events[-1]["changes"] == {"kl_coef": [pytest.approx(moved), 0.04]}
    assert trainer.step()["kl/coef"] == pytest.approx(0.04)
    trainer.reconfigure(kl_coef=trainer.kl_coef)  # the value in use: no change, no event
    assert len(trainer.events) == 1


def test_kl_switched_on_live_loads_the_starting_weights_as_reference(tiny, tiny_model_path):
    trainer = Trainer(tiny(kl_coef=0.0))
    assert trainer.policy.reference is None
    assert "kl" not in trainer.step()
    trainer.reconfigure(kl_coef=0.1)
    start = load_policy(tiny_model_path, "judge", None, torch.device("cpu"), need_reference=False).model
    for (name, a), b in zip(trainer.policy.reference.named_parameters(), start.parameters()):
        assert torch.equal(a, b), name
        assert not a.requires_grad
    row = trainer.step()
    assert row["kl/coef"] == pytest.approx(0.1)
    assert row["kl"] > 0  # the policy moved away from its starting weights in step 0


def test_kl_placement_and_estimator_change_live(tiny):
    trainer = Trainer(tiny(kl_estimator="k3"))
    trainer.step()
    trainer.reconfigure(kl_estimator="k2", kl_placement="reward")
    row = trainer.step()
    assert row["kl"] == pytest.approx(row["kl/k2"])  # the logged KL is the new estimator's
    assert "kl_reward/mean" in row  # and it now sits in the reward
    assert trainer.objective.kl_in_reward and not trainer.objective.kl_in_loss


def test_clip_range_change_changes_the_clip_statistics(tiny):
    """Two updates per batch make the second pass off-policy: with a zero clip range every moved
    token is clipped, with a huge one none is."""
    trainer = Trainer(tiny(num_iterations=2, eps_low=0.2, eps_high=0.2))
    trainer.step()
    trainer.reconfigure(eps_low=0.0, eps_high=0.0)
    tight = trainer.step()
    trainer.reconfigure(eps_low=0.99, eps_high=100.0)
    loose = trainer.step()
    assert tight["clip_ratio/region_mean"] > 0.1
    assert loose["clip_ratio/region_mean"] == 0.0


def test_learning_rate_change_reaches_the_optimizer(tiny):
    trainer = Trainer(tiny(weight_decay=0.0))
    trainer.step()
    trainer.reconfigure(learning_rate=1e-9)
    assert trainer.optimizer.param_groups[0]["lr"] == 1e-9
    before = [p.detach().clone() for p in trainer.params]
    row = trainer.step()
    assert row["learning_rate"] == 1e-9
    moved = max(float((p.detach() - b).abs().max()) for p, b in zip(trainer.params, before))
    assert 0 < moved < 1e-8  # Adam's step is about the learning rate


def test_dynamic_group_size_switched_on_live(tiny):
    """A random model never solves arith: with dynamic group size switched on, every group grows."""
    trainer = Trainer(tiny(task="arith", prompts_per_step=2, group_size=2))
    assert trainer.step()["sampling/completions"] == 4
    trainer.reconfigure(dynamic_group_size=True, group_size_max=6)
    row = trainer.step()
    assert row["sampling/completions"] == 12 and row["group_size/grown_frac"] == 1.0


def test_group_size_and_temperature_change_the_sampling(tiny):
    trainer = Trainer(tiny(prompts_per_step=4, group_size=4))
    assert trainer.step()["sampling/completions"] == 16
    trainer.reconfigure(group_size=2, temperature=0.5)
    row = trainer.step()
    assert row["sampling/completions"] == 8 and row["sampling/temperature"] == 0.5
    assert trainer.config.batch_size == 8


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"eps_low": 1.5}, ["eps_low", "[0, 1)"]),
        ({"kl_estimator": "k9"}, ["kl_estimator", "k3"]),
        ({"learning_rate": 0.0}, ["learning_rate", "> 0"]),
        ({"model": "other"}, ["model", "kl_coef", "group_size"]),
        ({"task": "arith", "kl_coef": 0.1}, ["task", "new Trainer"]),
        ({"no_such_field": 1}, ["no_such_field", "kl_coef"]),
        ({"kl_placement": "off"}, ["kl_schedule", "off"]),  # the run uses a threshold schedule
    ],
)
def test_invalid_live_change_is_refused_and_changes_nothing(tiny, tmp_path, changes, words):
    trainer = Trainer(tiny(kl_schedule="threshold"), out=tmp_path / "run")
    trainer.step()
    config, objective, coef = trainer.config, trainer.objective, trainer.kl_coef
    lr = trainer.optimizer.param_groups[0]["lr"]
    with pytest.raises(ValueError) as err:
        trainer.reconfigure(**changes)
    for word in words:
        assert word in str(err.value), f"{word!r} not in: {err.value}"
    assert trainer.config is config and trainer.objective is objective and trainer.kl_coef == coef
    assert trainer.optimizer.param_groups[0]["lr"] == lr
    assert trainer.events == [] and not (tmp_path / "run" / EVENTS).exists()


def test_refusal_lists_every_live_field(tiny):
    with pytest.raises(ValueError) as err:
        Trainer(tiny(steps=1)).reconfigure(seed=1)
    for name in LIVE_FIELDS:
        assert name in str(err.value)


def test_reconfigurations_are_recorded_in_the_run_directory(tiny, tmp_path):
    trainer = Trainer(tiny(), out=tmp_path / "run")
    trainer.step()
    trainer.reconfigure(kl_coef=0.2, eps_high=0.28, temperature=1.0)  # temperature unchanged: not recorded
    trainer.step()
    trainer.reconfigure(learning_rate=1e-3)
    trainer.run()
    events = [json.loads(x) for x in (tmp_path / "run" / EVENTS).read_text().splitlines()]
    assert events == trainer.events
    assert events == [
        {"step": 1, "event": "reconfigure", "changes": {"kl_coef": [0.04, 0.2], "eps_high": [0.2, 0.28]}},
        {"step": 2, "event": "reconfigure", "changes": {"learning_rate": [0.01, 0.001]}},
    ]


def test_resume_replays_live_changes(tiny, tmp_path):
    """A run with live changes, interrupted after a checkpoint and resumed, matches the same run
    uninterrupted; the resumed run keeps the changes made before its checkpoint."""
    config = tiny(steps=5, checkpoint_every=3, kl_coef=0.0)

    def first_steps(out):
        trainer = Trainer(config, out=out)
        trainer.step()
        trainer.reconfigure(kl_coef=0.2, learning_rate=5e-3, eps_high=0.3)
        trainer.step()
        trainer.step()  # checkpoint after step 2
        return trainer

    full = first_steps(tmp_path / "full")
    full.step()
    expected = comparable(full.run())

    interrupted = first_steps(tmp_path / "killed")
    interrupted.step()  # lost: after the checkpoint
    interrupted.reconfigure(eps_low=0.1)  # lost too
    resumed = Trainer(config, out=tmp_path / "killed", resume=True)
    assert resumed.step_index == 3 and resumed.config == full.config
    assert resumed.kl_coef == 0.2 and resumed.optimizer.param_groups[0]["lr"] == 5e-3
    pd.testing.assert_frame_equal(comparable(resumed.run()), expected)
    assert resumed.events == full.events
