"""What one training step costs, counted from its configuration and its run's logged token counts instead
of timed: forward and backward passes over the batch, completion tokens sampled and trained, and FLOPs.
Step times logged by runs measure the machine's load as much as the method (identical configurations
took 1.7 to 7.1 s a step in the stored runs); counts do not. A quiet-machine time to set beside them is
`grpo-lab bench --arms` (`bench.arms`), which measures the arms side by side in one run.

Passes are what `training.trainer.Trainer.step` runs over the step's batch after sampling: the policy's
forward and backward `num_iterations` times (each over all its mini-batches), and one forward without a
gradient for each of the old policy (only when the objective needs the old log-probs and the sampler's own
cannot stand in for them), the reference (a KL term, or `kl_monitor`'s exact KL) and the previous step's
policy (the two-layer KL). Validation is not part of a step, and the diagnostic gradient cosines
(`grad_cos_every`) are a measurement, not the method: both are left out.

FLOPs follow Kaplan et al. (arXiv 2001.08361, §2.1) and PaLM's 6ND (arXiv 2204.02311, App. B):
- a token costs 2 N FLOPs in a forward; in a backward, 2 N for the activations' gradient and 2 N_w for
  the weights' (N_w = N in a full fine-tune: 4 N, so 6 N for a forward and backward);
- N and N_w are the caller's, counted by `models.size.model_size` (the analysis never names a model's
  files): the weights of the model's linear layers, every matrix multiply a token passes through (the
  output layer included even where it shares its weight with the input embedding; the embedding lookup,
  norms and biases left out), and of those the ones a backward computes a gradient for (LoRA's adapters
  alone under LoRA); the learnable temperature, one scalar, multiplies no matrix;
- attention's own products (queries by keys, weights by values: 2 n_layer n_ctx d_model a token in a
  forward) are left out: at the study base's at most 55 positions they add under 3% to the embedded
  model's 2 N;
- tokens are real completion tokens: padding is left out, and so are the prompt's tokens (7 characters a
  prompt on the studies' tasks against up to 48 completion tokens each of the 8 completions of its group,
  and run once per group by the lean path);
- sampling costs 2 N a sampled token (one KV-cached decode step), the prompt's prefill left out."""

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import pandas as pd

from grpo_lab.config import Config
from grpo_lab.objective.kl import placement_site

TOKEN_COLUMNS = ("cost/sampled_tokens", "completions/mean_length", "sampling/completions", "sampling/rounds")
"""the per-step columns of a run's metrics the token counts are read from (`logged_tokens`)"""
RUN_DEPENDENT = ("dynamic_sampling", "dynamic_group_size")
"""config switches under which a step's tokens depend on the run (extra rounds, grown groups): their
counts come from the run's metrics only"""


@dataclass(frozen=True)
class Passes:
    """Passes over one step's batch, each through every completion token of the batch trained on."""

    policy: int
    """forward-and-backward passes of the policy: `num_iterations`, each over all its mini-batches"""
    old: int
    """forward passes without a gradient for the old policy's log-probs (0 or 1)"""
    reference: int
    """forward passes without a gradient of the reference model (0 or 1)"""
    previous: int
    """forward passes without a gradient of the previous step's policy, for the two-layer KL (0 or 1)"""

    @property
    def forward(self) -> int:
        """every forward over the batch: the policy's and the fixed log-probs'"""
        return self.policy + self.old + self.reference + self.previous

    @property
    def backward(self) -> int:
        """every backward over the batch: one per policy pass"""
        return self.policy


@dataclass(frozen=True)
class Tokens:
    """Completion tokens of one step (means over a run's steps, or a bound from the config)."""

    sampled: float
    """completion tokens generated: those of groups dynamic sampling dropped and of grown groups included"""
    trained: float
    """completion tokens of the batch trained on: what each pass over the batch runs through the model"""
    rounds: float
    """rounds of new prompts sampled (1 without dynamic sampling)"""


@dataclass(frozen=True)
class StepCost:
    """What one training step costs, by count."""

    passes: Passes
    """forward and backward passes over the batch"""
    tokens: Tokens
    """completion tokens sampled and trained"""
    params: int
    """N: the model's matrix-multiply weights (`models.size.ModelSize.matmul`)"""
    trained_params: int
    """N_w: those a backward computes a gradient for (`models.size.ModelSize.trained`)"""

    @property
    def sampling_flops(self) -> float:
        """2 N per sampled token"""
        return 2.0 * self.params * self.tokens.sampled

    @property
    def training_flops(self) -> float:
        """2 N per trained token and forward pass, 2 (N + N_w) per trained token and backward pass"""
        per_token = 2 * self.params * self.passes.forward
        per_token += 2 * (self.params + self.trained_params) * self.passes.backward
        return float(per_token) * self.tokens.trained

    @property
    def flops(self) -> float:
        """sampling and training FLOPs of one step"""
        return self.sampling_flops + self.training_flops

    def to_dict(self) -> dict[str, Any]:
        """The counts and the FLOPs as one flat JSON-ready dict (forward_passes, ..., flops)."""
        return {
            **{f"{k}_passes": v for k, v in asdict(self.passes).items()},
            "forward_passes": self.passes.forward,
            "backward_passes": self.passes.backward,
            **{f"{k}_tokens" if k != "rounds" else k: v for k, v in asdict(self.tokens).items()},
            "params": self.params,
            "trained_params": self.trained_params,
            "sampling_flops": self.sampling_flops,
            "training_flops": self.training_flops,
            "flops": self.flops,
        }


def as_config(config: Config | Mapping[str, Any]) -> Config:
    """A config, or one from its dict (a run's config.json, `runlog.read_config`)."""
    return config if isinstance(config, Config) else Config.from_dict(dict(config))


def passes(config: Config) -> Passes:
    """The passes `Trainer.step` runs over the batch under `config` (the module doc says which)."""
    return Passes(
        policy=config.num_iterations,
        old=int(needs_old_logp(config) and not sampler_logp_stands_in(config)),
        reference=int(config.reference_forward),
        previous=int(config.kl_prev_coef > 0),
    )


def needs_old_logp(config: Config) -> bool:
    """Whether the objective uses the old policy's log-probs (`training.compose.Objective.needs_old_logp`,
    restated from the config: the analysis imports nothing that trains): several updates per batch, the
    KL in the reward, or a sampler importance correction."""
    c = config
    several_updates = c.num_iterations > 1 or c.num_mini_batches > 1
    kl_in_reward = c.uses_reference and placement_site(c.kl_placement) == "reward"
    return several_updates or kl_in_reward or c.is_correction != "none"


def sampler_logp_stands_in(config: Config) -> bool:
    """Whether the sampler's own log-probs are the old policy's, so that no forward makes them
    (`training.faults.Sampler.behaviour_logp`): the stale sampler's under asynchronous lag unless the
    trainer recomputes them, or those of the policy itself sampling at full precision with EOS never
    suppressed (the same computation as the forward)."""
    c = config
    stale_kept = c.fault_stale_k > 0 and not c.fault_stale_recompute
    same_computation = c.fault_stale_k == 0 and c.fault_sampler_dtype == "none" and c.fault_long_frac == 0
    return stale_kept or same_computation


def logged_tokens(metrics: pd.DataFrame) -> Tokens:
    """The mean per training step (rows with a reward; validation-only rows left out) of a run's logged
    token counts (`TOKEN_COLUMNS`): one run's metrics, or several runs' of one configuration."""
    missing = [c for c in TOKEN_COLUMNS if c not in metrics]
    if missing:
        raise ValueError(f"the metrics lack {missing}: the token counts are read from {list(TOKEN_COLUMNS)}")
    steps = metrics[metrics["reward"].notna()] if "reward" in metrics else metrics
    if steps.empty:
        raise ValueError("the metrics have no training step (no row with a reward)")
    trained = steps["completions/mean_length"] * steps["sampling/completions"]
    return Tokens(
        sampled=float(steps["cost/sampled_tokens"].mean()),
        trained=float(trained.mean()),
        rounds=float(steps["sampling/rounds"].mean()),
    )


def bound_tokens(config: Config) -> Tokens:
    """The most tokens a step can have when they do not depend on the run: every completion of the batch
    at `max_completion_length`, one round. Under a switch of `RUN_DEPENDENT` a run's metrics are needed."""
    on = [name for name in RUN_DEPENDENT if getattr(config, name)]
    if on:
        raise ValueError(
            f"{', '.join(on)} makes a step's tokens depend on the run: give its metrics "
            f"(with {list(TOKEN_COLUMNS)})"
        )
    tokens = float(config.batch_size * config.max_completion_length)
    return Tokens(sampled=tokens, trained=tokens, rounds=1.0)


def step_cost(
    config: Config | Mapping[str, Any],
    metrics: pd.DataFrame | None = None,
    *,
    params: int,
    trained_params: int | None = None,
) -> StepCost:
    """What a step of `config` (a Config or its dict) costs: its passes, the tokens of `metrics` (its runs'
    logged metrics, `logged_tokens`) or without them the config's bound (`bound_tokens`), and the FLOPs
    of a model of `params` matrix-multiply weights, `trained_params` of them trained (default: all;
    `models.size.model_size` counts both)."""
    c = as_config(config)
    trained = params if trained_params is None else trained_params
    if params < 1 or not 0 <= trained <= params:
        raise ValueError(f"need params >= 1 and 0 <= trained_params <= params; got {params}, {trained}")
    tokens = bound_tokens(c) if metrics is None else logged_tokens(metrics)
    return StepCost(passes(c), tokens, params, trained)


def by_label(
    metrics: pd.DataFrame,
    configs: Mapping[str, Config | Mapping[str, Any]],
    *,
    params: int,
    trained_params: int | None = None,
    by: str = "label",
) -> dict[str, StepCost]:
    """Each label's `step_cost` from the tidy metrics of its runs (column `by`, all seeds together) and
    `configs[label]` (the config, or dict, of those runs), all of one model: `params` and
    `trained_params` as in `step_cost`. Labels without a config, or configs of different models or LoRA
    settings, raise."""
    missing = sorted(set(metrics[by]) - set(configs))
    if missing:
        raise ValueError(f"no config for label(s) {missing}; configs are given for {sorted(configs)}")
    labels = list(dict.fromkeys(metrics[by]))
    models = {_model(as_config(configs[label])) for label in labels}
    if len(models) > 1:
        raise ValueError(
            f"by_label counts one model's runs; these name {sorted(models)}: call step_cost per model"
        )
    return {
        label: step_cost(configs[label], runs, params=params, trained_params=trained_params)
        for label, runs in metrics.groupby(by, sort=False)
    }


def _model(config: Config) -> tuple[str, str, int, int]:
    """What fixes a run's parameter counts: the model (the task and its digits naming the embedded one)
    and the LoRA rank (0: none)."""
    task, digits = (config.task, config.task_digits) if config.model == "embedded" else ("", 0)
    return config.model, task, digits, config.lora_r if config.lora else 0


def flops_ratio(arm: StepCost, reference: StepCost) -> float:
    """The arm's FLOPs a step over the reference's."""
    return arm.flops / reference.flops if reference.flops > 0 else math.nan


def cost_cell(arm: StepCost, reference: StepCost) -> str:
    """An arm's cost against its reference as the verdict table shows it: passes as counts, FLOPs and
    tokens as multiples, e.g. 'fwd 2/3, bwd 2/2, FLOPs x0.71, tokens sampled x1.95, trained x1.00'."""
    a, r = arm, reference
    sampled = a.tokens.sampled / r.tokens.sampled if r.tokens.sampled > 0 else math.nan
    trained = a.tokens.trained / r.tokens.trained if r.tokens.trained > 0 else math.nan
    return (
        f"fwd {a.passes.forward}/{r.passes.forward}, bwd {a.passes.backward}/{r.passes.backward}, "
        f"FLOPs x{flops_ratio(a, r):.2f}, tokens sampled x{sampled:.2f}, trained x{trained:.2f}"
    )
