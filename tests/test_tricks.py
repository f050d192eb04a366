"""Each trick does what it says on a case built to trigger it."""

import collections
import dataclasses
import functools
import json

import pandas as pd
import pytest
import torch

from grpo_lab import preset, train
from grpo_lab.experiments.designs import ablation_points
from grpo_lab.presets import PRESETS, TRICKS
from grpo_lab.tasks import make_task
from grpo_lab.training import trainer
from grpo_lab.tricks import (
    KL_TOKEN_WEIGHTS,
    EntropyController,
    KLController,
    KLScheduleParams,
    batch_normalize,
    clip_advantages,
    group_temperatures,
    shape_length,
    still_uniform,
    top_entropy_mask,
    uniform_groups,
)


@pytest.fixture
def tiny(tiny_config):
    """This file's fast configs: the shared tiny ones with steps=4, eval_every=4, learning_rate=1e-2."""
    return functools.partial(tiny_config, steps=4, eval_every=4, learning_rate=1e-2)


def params(**kw):
    base = dict(final=0.0, target=0.05, growth=0.1, horizon=100, batch_size=10)
    return KLScheduleParams(**{**base, **kw})


def test_threshold_kl_raises_only_above_the_bound():
    ctl = KLController(0.1, "threshold", params())
    assert ctl.update(0.01, 0, 10) == pytest.approx(0.1)  # below: unchanged
    assert ctl.update(0.2, 1, 10) == pytest.approx(0.11)  # above: grows by 10%
    assert ctl.update(0.2, 2, 10) == pytest.approx(0.121)
    assert ctl.update(0.04, 3, 10) == pytest.approx(0.121)  # back below: kept, not lowered
    assert ctl.triggered == 2


def test_proportional_kl_moves_toward_target():
    high, low = KLController(0.1, "proportional", params()), KLController(0.1, "proportional", params())
    assert high.update(0.5, 0, 10) == pytest.approx(0.1 * (1 + 0.2 * 10 / 100))  # error clipped at +0.2
    assert low.update(0.04, 0, 10) == pytest.approx(0.1 * (1 - 0.2 * 10 / 100))


def test_linear_kl_reaches_final():
    ctl = KLController(0.1, "linear", params())
    values = [ctl.update(0.0, s, 4) for s in range(4)]
    assert values == pytest.approx([0.075, 0.05, 0.025, 0.0])


def test_kl_coefficient_set_during_the_run_restarts_the_linear_schedule_and_round_trips():
    ctl = KLController(0.1, "linear", params())
    ctl.update(0.0, 0, 4)
    ctl.set_coef(0.5, step=2)  # from 0.5 at step 2 to final 0.0 at step 4
    assert ctl.coef == 0.5 and [ctl.update(0.0, s, 4) for s in (2, 3)] == pytest.approx([0.25, 0.0])
    copy = KLController(0.1, "linear", params())
    copy.load_state_dict(ctl.state_dict())
    assert copy == ctl


def test_entropy_controller_bonus_and_state():
    ctl = EntropyController(coef=0.01, target=0.5, delta=0.005, max_coef=0.1)
    ctl.update(0.9)  # above target: no bonus next step
    assert ctl.bonus == 0.0
    copy = EntropyController(coef=0.01, target=0.5, delta=0.005, max_coef=0.1)
    copy.load_state_dict(ctl.state_dict())
    assert (copy.coef, copy.active) == (pytest.approx(0.005), False)


def test_adaptive_entropy_steers_toward_target():
    ctl = EntropyController(coef=0.01, target=0.5, delta=0.005, max_coef=0.012)
    ctl.update(0.2)  # below target: stronger bonus, capped
    assert ctl.coef == pytest.approx(0.012) and ctl.active
    ctl.update(0.9)  # above target: weaker, and the bonus is off next step
    assert ctl.coef == pytest.approx(0.007) and not ctl.active
    fixed = EntropyController(coef=0.01, target=0.0, delta=0.005, max_coef=1.0)
    fixed.update(0.0)
    assert fixed.coef == 0.01 and fixed.active


def test_length_shaping_hand_values():
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0])
    lengths = torch.tensor([4.0, 20.0, 22.0, 24.0])
    shaped, stats = shape_length(
        rewards, lengths, max_len=24, penalty=0.0, norm_ref=0, overlong_buffer=8, overlong_factor=1.0
    )
    # DAPO: penalty -(L - (24 - 8)) / 8 for L > 16
    assert shaped.tolist() == pytest.approx([1.0, 0.5, -0.75, 0.0])
    assert stats["length/overlong_frac"] == pytest.approx(0.75)
    normed, _ = shape_length(rewards, lengths, 24, 0.0, 8, 0, 1.0)
    assert normed.tolist() == pytest.approx([1.0, 0.4, 0.0, 1 / 3])
    penalized, _ = shape_length(rewards, lengths, 24, 0.5, 0, 0, 1.0)
    assert penalized.tolist() == pytest.approx([1 - 0.5 * 4 / 24, 1 - 0.5 * 20 / 24, -0.5 * 22 / 24, 0.5])


def test_batch_normalization_and_clipping():
    adv = torch.tensor([2.0, -1.0, 0.5, 3.5])
    normed = batch_normalize(adv, 0.0)
    assert normed.mean().abs() < 1e-6 and normed.std() == pytest.approx(1.0)
    clipped, frac = clip_advantages(adv, 2.0)
    assert clipped.tolist() == [2.0, -1.0, 0.5, 2.0] and frac == 0.25


def test_zero_variance_groups():
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0])
    assert uniform_groups(rewards, 2).tolist() == [True, False, True]
    ragged = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.5, 0.5])  # groups [1, 1, 1], [0], [0.5, 0.5]... of 3, 1, 2
    assert uniform_groups(ragged, torch.tensor([3, 1, 2])).tolist() == [True, True, True]
    assert uniform_groups(ragged, torch.tensor([2, 2, 2])).tolist() == [True, False, True]


def test_still_uniform_compares_extra_rewards_to_the_first():
    first, extra = torch.tensor([0.0, 1.0, 0.0]), torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]])
    assert still_uniform(first, extra).tolist() == [True, False, True]


def test_top_entropy_mask_keeps_the_highest_fraction():
    entropy = torch.tensor([[0.1, 0.9, 0.5, 0.3], [0.7, 0.2, 0.8, 0.0]])
    mask = torch.tensor([[1.0, 1, 1, 1], [1, 1, 1, 0]])
    kept = top_entropy_mask(entropy, mask, 0.5)
    assert kept.sum() == 4 and kept[0, 1] == 1 and kept[1, 2] == 1 and kept[0, 0] == 0 and kept[1, 3] == 0


@pytest.mark.parametrize("name", ["entropy", "position"])
def test_kl_token_weights_mean_one_and_riskier_is_heavier(name):
    entropy = torch.tensor([[0.1, 0.5, 0.9], [0.2, 0.4, 0.0]])
    mask = torch.tensor([[1.0, 1, 1], [1, 1, 0]])
    w = KL_TOKEN_WEIGHTS.get(name)(entropy, mask, 1.0)
    assert (w * mask).sum() / mask.sum() == pytest.approx(1.0) and w[1, 2] == 0
    assert w[0, 2] > w[0, 0]  # higher entropy / later position weighs more


def test_group_temperatures_one_draw_per_group():
    temps = group_temperatures(3, 4, 1.0, 0.2, torch.Generator().manual_seed(0))
    groups = temps.view(3, 4)
    assert (groups == groups[:, :1]).all() and len(set(groups[:, 0].tolist())) == 3
    assert ((temps >= 0.8) & (temps <= 1.2)).all()


def test_all_tricks_is_the_union_and_leave_one_out_resets_each():
    all_on = preset("all_tricks")
    for changes in TRICKS.values():
        for key, value in changes.items():
            assert getattr(all_on, key) == value
    children = {point.label: point.config for point in ablation_points(all_on, TRICKS)}
    assert set(children) == {"all", *(f"-{n}" for n in TRICKS)}
    off = children["-dynamic_sampling"]
    assert not off.dynamic_sampling and off.learnable_temperature
    assert PRESETS["all_tricks"].changes


def test_learnable_temperature_moves_and_is_logged(tiny):
    df = train(tiny(learnable_temperature=True, temperature_lr=0.05)).dropna(subset=["reward"])
    assert df["temperature/learned"].iloc[-1] != pytest.approx(1.0)
    assert df["sampling/temperature"].iloc[1:].tolist() == pytest.approx(
        df["temperature/learned"].iloc[:-1].tolist()
    )


def test_two_layer_kl_tracks_the_previous_policy(tiny):
    df = train(tiny(kl_prev_coef=0.1)).dropna(subset=["reward"])
    assert df["kl/prev"].iloc[0] == pytest.approx(0.0, abs=1e-7)  # step 0: previous == current
    assert (df["kl/prev"].iloc[1:] > 0).all()
    assert (df["cost/forward_passes"] == 3).all()  # policy + reference + previous policy


def test_mask_truncated_removes_them_from_the_loss(tiny):
    """With completions of one token almost nothing ends with EOS: masking truncated rows leaves
    (nearly) no token in the loss, so the gradient vanishes where it did not before."""
    base = tiny(max_completion_length=1, kl_coef=0.0, kl_placement="off", steps=2)
    on = train(base.replace(mask_truncated=True)).dropna(subset=["reward"])
    off = train(base).dropna(subset=["reward"])
    assert (on["completions/clipped_ratio"] == 1).all()
    assert (on["grad_norm"] == 0).all() and (off["grad_norm"] > 0).all()


def test_dynamic_sampling_cap_error(tiny):
    """A random model never solves arith: every group has zero variance and the cap is hit."""
    config = tiny(task="arith", dynamic_sampling=True, dynamic_sampling_max_rounds=2)
    with pytest.raises(
        RuntimeError, match="dynamic sampling found only 0 of 4 groups .* after 2 extra rounds"
    ):
        train(config)


@pytest.mark.slow
def test_dynamic_sampling_leaves_no_zero_variance_group(embedded_arith_path):
    df = train(preset("grpo", dynamic_sampling=True, steps=6, eval_every=6, val_size=16, progress=False))
    df = df.dropna(subset=["reward"])
    assert (df["frac_reward_zero_std"] == 0).all()
    assert df["sampling/dropped_groups"].sum() > 0 and (df["sampling/rounds"] >= 1).all()


def test_temperature_noise_log_probs_at_each_rows_temperature(tiny):
    """Each group is sampled at its own temperature and the trainer scores it at that temperature:
    the data stay on-policy (no sampler-trainer gap) while the temperatures do differ."""
    calm = train(tiny()).dropna(subset=["reward"])
    noisy = train(tiny(temperature_jitter=0.5)).dropna(subset=["reward"])
    assert (calm["sampling/temperature_std"] == 0).all() and (noisy["sampling/temperature_std"] > 0.01).all()
    assert noisy["is/logp_gap_max"].max() < 1e-4
    assert not noisy["reward"].equals(calm["reward"])


# --- dynamic group size ------------------------------------------------------------------------------


def scripted_judge(roles: dict[str, int]):
    """A make_task replacement whose judge reward is scripted per prompt: a prompt with role r scores
    1 on the first completion of its r-th scoring call (round) and 0 everywhere else; unlisted
    prompts (validation) score 0. So role 1 has variance at once, role 2 only after one growth round,
    role 0 never."""
    calls: collections.Counter = collections.Counter()

    def reward(prompts, completions, **kwargs):
        seen = collections.Counter()
        for p in dict.fromkeys(prompts):
            calls[p] += 1
        out = []
        for p in prompts:
            out.append(1.0 if roles.get(p) == calls[p] and seen[p] == 0 else 0.0)
            seen[p] += 1
        return out

    def make(name, digits=None, *rest):
        task = make_task(name, digits, *rest)
        return dataclasses.replace(task, rewards={**task.rewards, "judge": reward})

    return make


@pytest.mark.parametrize("name", ["grpo", "scheme_b", "gpg", "rloo"])
def test_dynamic_group_size_grows_uniform_groups_until_a_reward_differs(
    name, tiny_config, monkeypatch, tmp_path
):
    """Four prompts of 4 completions: the first varies at once, the second after one extra round, the
    last two never do and grow to group_size_max = 12. Their rows come back contiguous."""
    changes = dict(
        steps=1,
        eval_every=1,
        dynamic_group_size=True,
        group_size_max=12,
        samples_every=1,
        samples_per_log=100,
    )
    config = tiny_config(**PRESETS[name].changes, **changes)
    prompts = [ex.prompt for ex in make_task("judge").batch(config.seed, 0, 4)]
    monkeypatch.setattr(trainer, "make_task", scripted_judge(dict(zip(prompts, [1, 2, 0, 0]))))
    row = train(config, out=tmp_path / "run").iloc[0]
    assert row["sampling/completions"] == 4 + 8 + 12 + 12
    assert (row["group_size/min"], row["group_size/max"], row["group_size/mean"]) == (4, 12, 9)
    assert row["group_size/grown_frac"] == 0.75 and row["group_size/rescued_frac"] == pytest.approx(1 / 3)
    assert row["group_size/rounds"] == 2 and row["group_size/extra_completions"] == 3 * 4 + 2 * 4
    assert row["group_size/extra_tokens"] > 0 and row["time/sample_s"] > 0
    assert row["frac_reward_zero_std"] == 0.5  # the two that never varied
    samples = [json.loads(x) for x in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    assert [s["prompt"] for s in samples] == [p for p, n in zip(prompts, [4, 8, 12, 12]) for _ in range(n)]
    assert [s["reward"] for s in samples[4:12]] == [0.0] * 4 + [1.0] + [
        0.0
    ] * 3  # the extra round joins the group


def test_dynamic_group_size_with_dynamic_sampling_drops_what_stays_uniform(tiny_config, monkeypatch):
    """Growth first; groups still uniform at group_size_max are then dropped and refilled from new prompts."""
    config = tiny_config(
        steps=1, eval_every=1, dynamic_group_size=True, group_size_max=8, dynamic_sampling=True
    )
    task = make_task("judge")
    first, refill = task.batch(config.seed, 0, 4), task.batch(config.seed, 0, 4, 1)
    roles = {**{ex.prompt: 1 for ex in refill}, **dict(zip([ex.prompt for ex in first], [1, 2, 0, 0]))}
    monkeypatch.setattr(trainer, "make_task", scripted_judge(roles))
    row = train(config).iloc[0]
    assert row["sampling/rounds"] == 2 and row["sampling/dropped_groups"] == 2
    assert row["sampling/completions"] == 4 + 8 + 4 + 4 and row["frac_reward_zero_std"] == 0


def test_dynamic_group_size_changes_nothing_when_every_group_varies(tiny_config, monkeypatch):
    """A reward that differs within every group never triggers growth: the run is the plain run."""

    def distinct(prompts, completions, **kwargs):
        return [0.1 * i for i in range(len(completions))]

    def make(name, digits=None, *rest):
        task = make_task(name, digits, *rest)
        return dataclasses.replace(task, rewards={**task.rewards, "judge": distinct})

    monkeypatch.setattr(trainer, "make_task", make)
    config = tiny_config(steps=2, learning_rate=1e-2)
    on = train(config.replace(dynamic_group_size=True, group_size_max=8))
    off = train(config)
    assert (on["group_size/grown_frac"].dropna() == 0).all() and (on["group_size/mean"].dropna() == 4).all()
    volatile = [c for c in on.columns if c.startswith(("time/", "group_size/")) or c == "cost/peak_rss_mb"]
    pd.testing.assert_frame_equal(
        on.drop(columns=volatile), off.drop(columns=[c for c in volatile if c in off])
    )
