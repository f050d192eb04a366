"""Per-step measurements that are not the loss: reward and group statistics, completion lengths,
diversity, dynamic group size, and the cosine between the gradients of the loss's components. TRL's
names where TRL has one, namespaces otherwise."""

import dataclasses
import math

import torch
from torch import Tensor

from grpo_lab.config import Config
from grpo_lab.models.logprobs import completion_logprobs
from grpo_lab.models.sampler import Rollout
from grpo_lab.objective import BatchTotals, masked_mean
from grpo_lab.objective.groups import Groups, padded
from grpo_lab.tasks.diversity import diversity
from grpo_lab.training.compose import Objective, StepTensors
from grpo_lab.training.rollout import Batch, Growth


def group_stats(rewards: Tensor, groups: Groups) -> dict[str, float]:
    """TRL's reward metrics: `reward`, `reward_std` (mean within-group unbiased std),
    `frac_reward_zero_std`; groups may be ragged."""
    g, m = padded(rewards.nan_to_num(0.0), groups)  # (B, G)
    n = m.sum(-1)  # (B,)
    mean = masked_mean(g, m, dim=-1)  # (B,)
    std = (((g - mean[:, None]) ** 2 * m).sum(-1) / (n - 1).clamp(min=1)).sqrt()  # (B,) 0 for G = 1
    return {
        "reward": float(rewards.nanmean()),
        "reward_std": float(std.mean()),
        "frac_reward_zero_std": float(torch.isclose(std, torch.zeros_like(std)).float().mean()),
    }


def reward_function_stats(per_func: dict[str, Tensor]) -> dict[str, float]:
    """Mean and std of each reward function's raw values (N,), unscored (NaN) rows left out."""
    out = {}
    for name, values in per_func.items():
        scored = values[~values.isnan()]  # (S,)
        out[f"rewards/{name}/mean"] = float(values.nanmean())
        out[f"rewards/{name}/std"] = float(scored.std()) if len(scored) > 1 else 0.0
    return out


def batch_stats(batch: Batch, group_size: int, with_diversity: bool) -> dict[str, float]:
    """Lengths, truncation and sampling statistics of the step's batch; with `with_diversity`, the
    completions' diversity over each prompt's first group_size (every group has that many)."""
    scored = batch.scored
    rollout = scored.rollout
    lengths = rollout.lengths  # (N,)
    terminated = lengths[~rollout.truncated]  # (n,)
    out = {
        "completions/mean_length": float(lengths.mean()),
        "completions/min_length": float(lengths.min()),
        "completions/max_length": float(lengths.max()),
        "completions/clipped_ratio": float(rollout.truncated.float().mean()),
        "completions/mean_terminated_length": float(terminated.mean()) if len(terminated) else 0.0,
        "sampling/temperature": batch.temperature,
        "sampling/temperature_std": float(scored.temperatures.std()) if len(lengths) > 1 else 0.0,
        "sampling/rounds": batch.rounds,
        "sampling/dropped_groups": scored.dropped_groups,
        "sampling/completions": len(rollout.truncated),
        "cost/sampled_tokens": float(scored.sampled_tokens),
    }
    if with_diversity:
        out.update(diversity(scored.heads(group_size).completions, group_size))
    return out


def growth_stats(growth: Growth, group_sizes: Tensor) -> dict[str, float]:
    """`group_size/*`: what dynamic group size did, with the group sizes of the batch trained on (B,)."""
    sizes = group_sizes.float()
    return {
        "group_size/mean": float(sizes.mean()),
        "group_size/min": float(sizes.min()),
        "group_size/max": float(sizes.max()),
        "group_size/grown_frac": growth.grown / max(growth.prompts, 1),
        "group_size/rescued_frac": growth.rescued / growth.grown if growth.grown else math.nan,
        "group_size/rounds": float(growth.rounds),
        "group_size/extra_completions": float(growth.extra_completions),
        "group_size/extra_tokens": float(growth.extra_tokens),
    }


def correctness_lengths(lengths: Tensor, correct: list[bool]) -> dict[str, float]:
    """Mean length of the correct and of the incorrect completions (N,) (NaN where there are none):
    a length bias shows as incorrect answers growing longer than correct ones (Dr. GRPO's case)."""
    hit = torch.tensor(correct, dtype=torch.bool, device=lengths.device)  # (N,)
    right, wrong = lengths[hit].float(), lengths[~hit].float()
    return {
        "completions/correct_mean_length": float(right.mean()) if len(right) else math.nan,
        "completions/incorrect_mean_length": float(wrong.mean()) if len(wrong) else math.nan,
    }


def sampling_metrics(
    batch: Batch, rewards: Tensor, c: Config, step: int, correct: list[bool]
) -> dict[str, float]:
    """Everything measured on the step's batch before training on it, with its shaped rewards (N,)
    and whether each completion is correct (`correct`, the task's check): rewards and groups, each
    reward function, lengths (of correct and incorrect answers too) and sampling, the faults
    injected, diversity when due, and dynamic group size when on."""
    scored = batch.scored
    out = {**group_stats(rewards, scored.groups), **reward_function_stats(scored.per_func)}
    out.update(correctness_lengths(scored.rollout.lengths, correct))
    out.update(scored.fault_stats)
    out.update(
        batch_stats(
            batch, c.group_size, with_diversity=bool(c.diversity_every and step % c.diversity_every == 0)
        )
    )
    if c.dynamic_group_size:
        out.update(growth_stats(batch.growth, scored.group_sizes))
    return out


@dataclasses.dataclass(frozen=True)
class Component:
    """One loss component computed alone: its advantages (N, T) and its KL and entropy coefficients."""

    adv: Tensor
    kl_coef: float = 0.0
    entropy_coef: float = 0.0


def loss_components(
    objective: Objective,
    *,
    per_func: dict[str, Tensor],
    reward_weights: tuple[float, ...],
    length_delta: Tensor | None,
    lengths: Tensor,
    mask: Tensor,
    groups: Groups,
    kl_coef: float,
    entropy_coef: float,
) -> dict[str, Component]:
    """The components whose gradients can pull apart: each weighted reward function, the length
    shaping (its reward change `length_delta` (N,), when any is on), the in-loss KL, the entropy bonus."""

    def advantages(rewards: Tensor) -> Tensor:
        return objective.advantages(rewards, lengths, mask, kl_reward=None, token_credit=None, groups=groups)[
            0
        ]

    parts = {
        f"policy:{name}": Component(advantages(w * per_func[name]))
        for name, w in zip(per_func, reward_weights)
    }
    if length_delta is not None:
        parts["length"] = Component(advantages(length_delta))
    if objective.kl_in_loss:
        parts["kl"] = Component(torch.zeros_like(mask), kl_coef=kl_coef)
    if entropy_coef:
        parts["entropy"] = Component(torch.zeros_like(mask), entropy_coef=entropy_coef)
    return parts


def gradient_cosines(
    model: torch.nn.Module,
    params: list[torch.nn.Parameter],
    *,
    rollout: Rollout,
    chunks: list[Tensor],
    temperatures: Tensor,
    objective: Objective,
    fixed: StepTensors,
    totals: BatchTotals,
    parts: dict[str, Component],
) -> dict[str, float]:
    """Cosine between the gradients of loss components computed alone (`grad_cos/a__b`): do the loss
    terms pull apart? A backward pass each; leaves no gradient behind."""
    grads = {}
    for name, part in parts.items():
        model.zero_grad(set_to_none=True)
        ref_logp = fixed.ref_logp if part.kl_coef else None
        alone = dataclasses.replace(fixed, adv=part.adv, ref_logp=ref_logp, prev_logp=None)
        for rows in chunks:
            stats = completion_logprobs(
                model,
                rollout.select(rows),
                temperatures[rows],
                entropy="grad" if part.entropy_coef else "value",
            )
            logp, entropy = stats.logp, stats.entropy  # (n, T)
            assert entropy is not None  # it was asked for
            loss = objective.loss(logp, entropy, alone.select(rows), totals, part.kl_coef, part.entropy_coef)
            loss.backward()
        grads[name] = torch.cat(
            [p.grad.flatten() if p.grad is not None else p.new_zeros(p.numel()) for p in params]
        )
    model.zero_grad(set_to_none=True)
    names = list(grads)
    return {
        f"grad_cos/{a}__{b}": float(torch.nn.functional.cosine_similarity(grads[a], grads[b], dim=0))
        for i, a in enumerate(names)
        for b in names[i + 1 :]
    }
