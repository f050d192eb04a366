"""A step's cost by count: the passes the config gives are the passes the trainer runs (counted on the
model calls of a one-step run), tokens come from the run's logged metrics (dynamic sampling's extra
rounds included), and FLOPs follow 2 N a token forward and 2 (N + N_w) backward."""

import math

import pandas as pd
import pytest
import torch

from grpo_lab import preset, train
from grpo_lab.analysis import step_cost
from grpo_lab.analysis.step_cost import Passes, StepCost, Tokens
from grpo_lab.comparisons.bed import base
from grpo_lab.models.size import model_size
from grpo_lab.presets import PRESETS, TRICKS
from grpo_lab.training import rollout, trainer
from grpo_lab.training.compose import Objective

BED = {"num_iterations": 2, "num_mini_batches": 2}
"""the study base's off-policy updates, at the tiny configs' four groups"""
TINY = dict(task="judge", steps=1, prompts_per_step=4, group_size=4, max_completion_length=8,
            val_size=4, val_samples=0, progress=False)  # fmt: skip
"""one step on the tiny model (judge's dense reward: no group is all-equal)"""


def cost_of(config, metrics=None):
    """`step_cost` of `config` with its model's size (`models.size.model_size`)."""
    size = model_size(config)
    return step_cost.step_cost(config, metrics, params=size.matmul, trained_params=size.trained)


class Calls:
    """What a run's model calls did, counted by wrapping the trainer's log-prob function and the
    rollout's sampler: rows and completion tokens of each log-prob call, with or without a gradient,
    and the completion tokens of each sampling call (validation's own calls go elsewhere)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.logprob: list[tuple[int, float, bool]] = []
        self.sampled: list[float] = []
        logprobs, sample = trainer.completion_logprobs, rollout.sample

        def counted_logprobs(model, batch, *args, **kwargs):
            self.logprob.append(
                (len(batch.completion_ids), float(batch.completion_mask.sum()), torch.is_grad_enabled())
            )
            return logprobs(model, batch, *args, **kwargs)

        def counted_sample(*args, **kwargs):
            out = sample(*args, **kwargs)
            self.sampled.append(float(out.completion_mask.sum()))
            return out

        monkeypatch.setattr(trainer, "completion_logprobs", counted_logprobs)
        monkeypatch.setattr(rollout, "sample", counted_sample)

    def passes(self, rows: int, grad: bool | None = None) -> float:
        """Passes over a batch of `rows` completions (only those with or without a gradient)."""
        return sum(n for n, _, g in self.logprob if grad is None or g == grad) / rows

    def tokens_per_pass(self, rows: int) -> float:
        return sum(t for _, t, _ in self.logprob) / self.passes(rows)


COUNTED = {
    # label: (config changes over the tiny grpo config, forward passes, backward passes)
    "grpo, one update": ({}, 2, 1),  # the policy and the reference; the sampler's log-probs are the old
    "grpo": (BED, 3, 2),
    "grpo_no_kl": ({**BED, "preset": "grpo_no_kl"}, 2, 2),
    "cispo": ({**BED, "preset": "cispo"}, 2, 2),
    "dapo_loss": ({**BED, "preset": "dapo_loss"}, 2, 2),
    "learnable_temperature": ({**BED, **TRICKS["learnable_temperature"]}, 3, 2),
    "two_layer_kl": ({**BED, **TRICKS["two_layer_kl"]}, 4, 2),
    "EOS suppressed": ({**BED, "fault_long_frac": 0.5}, 4, 2),  # the old log-probs recomputed
    "no KL, kl_monitor": ({**BED, "preset": "grpo_no_kl", "kl_monitor": True}, 3, 2),
}


@pytest.mark.parametrize("label", list(COUNTED))
def test_the_passes_are_those_the_trainer_runs(label, tiny_model_path, monkeypatch):
    changes, forward, backward = COUNTED[label]
    name = changes.get("preset", "grpo")
    config = preset(name, model=tiny_model_path, **{**TINY, **changes})
    calls = Calls(monkeypatch)
    metrics = train(config)
    rows = int(metrics["sampling/completions"].dropna().iloc[0])
    cost = cost_of(config, metrics)
    assert (cost.passes.forward, cost.passes.backward) == (forward, backward)
    assert calls.passes(rows) == forward and calls.passes(rows, grad=True) == backward
    assert cost.tokens.trained == pytest.approx(calls.tokens_per_pass(rows))
    assert cost.tokens.sampled == pytest.approx(sum(calls.sampled))
    assert metrics["cost/forward_passes"].dropna().tolist() == [forward]  # the monitor's forward too


@pytest.mark.parametrize("trick", ["dynamic_sampling", "dynamic_group_size"])
def test_run_dependent_tokens_come_from_the_logged_metrics(trick, embedded_arith_path, monkeypatch):
    """On the warm-started arith model with groups of 2, many groups have one reward for all: dynamic
    sampling draws more rounds (their dropped groups' tokens are sampled, never trained), dynamic group
    size grows groups (their rows are trained)."""
    config = preset(
        "grpo",
        **TRICKS[trick],
        steps=2,
        prompts_per_step=4,
        group_size=2,
        group_size_max=4,
        dynamic_sampling_max_rounds=16,
        val_size=4,
        val_samples=0,
        progress=False,
    )
    calls = Calls(monkeypatch)
    metrics = train(config)
    steps = metrics[metrics["reward"].notna()]
    cost = cost_of(config, metrics)
    assert cost.tokens.sampled * len(steps) == pytest.approx(sum(calls.sampled))
    trained = sum(t for _, t, _ in calls.logprob) / cost.passes.forward
    assert cost.tokens.trained * len(steps) == pytest.approx(trained)
    if trick == "dynamic_sampling":
        assert steps["sampling/rounds"].max() > 1 and cost.tokens.rounds > 1
        assert cost.tokens.sampled > cost.tokens.trained
    else:
        assert steps["sampling/completions"].max() > 8  # a group grew
    with pytest.raises(ValueError, match=f"{trick} makes a step's tokens depend on the run"):
        cost_of(config)


def test_flops_are_2n_a_token_forward_and_4n_backward_in_a_full_fine_tune():
    n, tokens = 1000, 50.0
    one = StepCost(Passes(1, 0, 0, 0), Tokens(sampled=0.0, trained=tokens, rounds=1.0), n, n)
    assert one.flops == one.training_flops == 6 * n * tokens  # Kaplan's / PaLM's 6 N D
    kl = StepCost(Passes(2, 0, 1, 0), Tokens(sampled=tokens, trained=tokens, rounds=1.0), n, n)
    assert kl.sampling_flops == 2 * n * tokens
    assert kl.training_flops == (3 * 2 + 2 * 4) * n * tokens
    lora = StepCost(Passes(1, 0, 0, 0), Tokens(0.0, tokens, 1.0), n, 10)
    assert lora.training_flops == (2 * n + 2 * (n + 10)) * tokens  # gradients of the adapters' weights alone


def test_flops_scale_with_tokens_passes_and_size():
    cost = StepCost(Passes(2, 0, 1, 0), Tokens(100.0, 80.0, 1.0), 500, 500)
    twice_tokens = StepCost(cost.passes, Tokens(200.0, 160.0, 1.0), 500, 500)
    twice_size = StepCost(cost.passes, cost.tokens, 1000, 1000)
    assert twice_tokens.flops == twice_size.flops == 2 * cost.flops
    more_passes = StepCost(Passes(2, 1, 1, 1), cost.tokens, 500, 500)
    assert more_passes.training_flops - cost.training_flops == 2 * 2 * 500 * 80  # two no-grad forwards


def test_the_study_base_schemes_by_count():
    """On the study base (2 passes of 4 mini-batches): grpo runs the reference besides its two policy
    passes; grpo_no_kl, cispo and dapo_loss drop it; at equal tokens that is 14 N against 16 N a token."""
    grpo = cost_of(base("full"))
    assert (grpo.passes.forward, grpo.passes.backward, grpo.passes.old) == (3, 2, 0)
    assert grpo.tokens == Tokens(sampled=64 * 48, trained=64 * 48, rounds=1.0)
    for name in ("grpo_no_kl", "cispo", "dapo_loss"):
        cost = cost_of(base("full", name))
        assert step_cost.flops_ratio(cost, grpo) == pytest.approx(14 / 16)
        assert step_cost.cost_cell(cost, grpo) == (
            "fwd 2/3, bwd 2/2, FLOPs x0.88, tokens sampled x1.00, trained x1.00"
        )
    tau = cost_of(base("full", **TRICKS["learnable_temperature"]))
    assert tau == grpo  # one scalar more to train: no pass, no matrix multiply


OLD_LOGP = {
    **{name: base("full", name) for name in PRESETS},
    **{name: base("full", **changes) for name, changes in TRICKS.items()},
    "one update": preset("grpo"),
    "one update, IS correction": preset("grpo", is_correction="tis_token"),
    "one update, KL in reward": preset("rloo"),
    "one update, reward placement without KL": preset("rloo", kl_coef=0.0),
}
"""configs whose need of the old log-probs the analysis restates from the objective's rule"""


@pytest.mark.parametrize("label", list(OLD_LOGP))
def test_needs_old_logp_restates_the_objectives_rule(label):
    config = OLD_LOGP[label]
    assert step_cost.needs_old_logp(config) == Objective(config).needs_old_logp


def test_step_cost_refuses_impossible_parameter_counts():
    with pytest.raises(ValueError, match="need params >= 1 and 0 <= trained_params <= params"):
        step_cost.step_cost(base("full"), params=100, trained_params=200)
    with pytest.raises(ValueError, match="need params >= 1"):
        step_cost.step_cost(base("full"), params=0)


def test_logged_tokens_are_means_over_training_steps():
    metrics = pd.DataFrame(
        {
            "step": [0, 0, 1, 2],
            "reward": [math.nan, 0.5, 0.6, math.nan],  # validation-only rows have no reward
            "cost/sampled_tokens": [math.nan, 100.0, 300.0, math.nan],
            "completions/mean_length": [math.nan, 10.0, 12.0, math.nan],
            "sampling/completions": [math.nan, 8, 8, math.nan],
            "sampling/rounds": [math.nan, 1, 3, math.nan],
        }
    )
    assert step_cost.logged_tokens(metrics) == Tokens(sampled=200.0, trained=88.0, rounds=2.0)
    with pytest.raises(ValueError, match=r"lack \['cost/sampled_tokens'\]"):
        step_cost.logged_tokens(metrics.drop(columns="cost/sampled_tokens"))
    with pytest.raises(ValueError, match="no training step"):
        step_cost.logged_tokens(metrics[metrics["reward"].isna()])


def test_by_label_reads_each_labels_runs_with_its_config_dict():
    metrics = pd.DataFrame(
        {
            "label": ["grpo", "grpo", "cispo"],
            "seed": [0, 1, 0],
            "reward": [0.5, 0.5, 0.5],
            "cost/sampled_tokens": [100.0, 200.0, 100.0],
            "completions/mean_length": [10.0, 20.0, 10.0],
            "sampling/completions": [10, 10, 10],
            "sampling/rounds": [1, 1, 1],
        }
    )
    configs = {"grpo": base("full").to_dict(), "cispo": base("full", "cispo").to_dict()}
    costs = step_cost.by_label(metrics, configs, params=1000)
    assert costs["grpo"].tokens == Tokens(sampled=150.0, trained=150.0, rounds=1.0)
    assert costs["grpo"].params == costs["grpo"].trained_params == 1000
    assert costs["cispo"].passes.forward == 2 and costs["grpo"].passes.forward == 3
    assert step_cost.cost_cell(costs["cispo"], costs["grpo"]).startswith("fwd 2/3, bwd 2/2, FLOPs x0.58")
    with pytest.raises(ValueError, match=r"no config for label\(s\) \['cispo'\]"):
        step_cost.by_label(metrics, {"grpo": configs["grpo"]}, params=1000)
    other_model = {
        **configs,
        "cispo": base("full", "cispo", task="arith").to_dict(),
    }  # arith's embedded model
    with pytest.raises(ValueError, match="by_label counts one model's runs"):
        step_cost.by_label(metrics, other_model, params=1000)


def test_to_dict_is_flat_and_complete():
    cost = StepCost(Passes(2, 1, 1, 0), Tokens(100.0, 80.0, 1.5), 500, 400)
    d = cost.to_dict()
    assert d["forward_passes"] == 4 and d["backward_passes"] == 2 and d["old_passes"] == 1
    assert d["sampled_tokens"] == 100.0 and d["trained_tokens"] == 80.0 and d["rounds"] == 1.5
    assert d["params"] == 500 and d["trained_params"] == 400 and d["flops"] == cost.flops
