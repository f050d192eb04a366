"""Training tricks (docs/sources.md, Tricks review §2, §3.1), each switched by its own config fields.
Pure functions take what they need and return what they change; controllers are small state
machines with explicit state (so they checkpoint). Nothing here reaches into the trainer or reads
the config: `compose` builds the controllers from it, and the config checks its names against the
registries here."""

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from grpo_lab.objective import masked_mean
from grpo_lab.objective.groups import Groups, padded
from grpo_lab.registry import Registry

# --- KL coefficient schedules: fn(controller, kl, step, steps) -> the coefficient for the next step ---


@dataclass(frozen=True)
class KLScheduleParams:
    """The schedules' constants, from the config (`compose.kl_schedule_params`)."""

    final: float
    """linear: the coefficient reached at the last step"""
    target: float
    """threshold: KL bound above which the coefficient grows; proportional: the target KL"""
    growth: float
    """threshold: relative growth per step while the KL is above the bound"""
    horizon: int
    """proportional: horizon in samples (Ziegler et al.)"""
    batch_size: int
    """samples per step (the proportional controller's n_steps)"""


KLSchedule = Callable[["KLController", float, int, int], float]
KL_SCHEDULES: Registry[KLSchedule] = Registry("KL schedule")


@KL_SCHEDULES.register("fixed")
def fixed(ctl: "KLController", kl: float, step: int, steps: int) -> float:
    """GRPO: a constant coefficient."""
    return ctl.coef


@KL_SCHEDULES.register("linear")
def linear(ctl: "KLController", kl: float, step: int, steps: int) -> float:
    """Linear decay (or growth) from the coefficient at the start step to the final coefficient at the
    last step."""
    start, final = ctl.start_coef, ctl.params.final
    return start + (final - start) * (min(step + 1, steps) - ctl.start_step) / max(steps - ctl.start_step, 1)


@KL_SCHEDULES.register("threshold")
def threshold(ctl: "KLController", kl: float, step: int, steps: int) -> float:
    """Raise the coefficient slowly, and only while the KL exceeds the bound; otherwise keep it:
    intervene only when needed (Tricks review §2.1, the most stable of the schedules compared there)."""
    p = ctl.params
    return ctl.coef * (1 + p.growth) if kl > p.target else ctl.coef


@KL_SCHEDULES.register("proportional")
def proportional(ctl: "KLController", kl: float, step: int, steps: int) -> float:
    """Ziegler et al. 2019 (arXiv 1909.08593) proportional controller toward a target KL:
    beta <- beta (1 + clip(KL / target - 1, -0.2, 0.2) n / horizon)."""
    p = ctl.params
    error = min(max(kl / p.target - 1, -0.2), 0.2)
    return ctl.coef * (1 + error * p.batch_size / p.horizon)


@dataclass
class KLController:
    """The owner of the live KL coefficient: `coef` is the next step's; `update` moves it after each
    step's measured KL, `set_coef` sets it during the run (the schedule then restarts from it)."""

    coef: float
    schedule: str
    params: KLScheduleParams
    start_step: int = 0
    """linear: the step the schedule starts from, at `start_coef`"""
    start_coef: float = field(init=False)
    triggered: int = 0
    """steps on which the coefficient changed"""

    def __post_init__(self) -> None:
        self.start_coef = self.coef

    def update(self, kl: float, step: int, steps: int) -> float:
        new = KL_SCHEDULES.get(self.schedule)(self, kl, step, steps)
        self.triggered += int(not math.isclose(new, self.coef))
        self.coef = new
        return new

    def set_coef(self, coef: float, step: int) -> None:
        """The coefficient from `step` on, whatever the schedule; a linear schedule restarts from it."""
        self.coef, self.start_coef, self.start_step = coef, coef, step

    def state_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("coef", "start_step", "start_coef", "triggered")}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            setattr(self, k, v)


@dataclass
class EntropyController:
    """Entropy bonus coefficient; with a target, it steers entropy toward it (Skywork-OR1, as in
    TRL): the bonus applies only while entropy is at or below the target, and the coefficient grows
    by `delta` there and shrinks by `delta` above it, within [0, max_coef]."""

    coef: float
    target: float
    delta: float
    max_coef: float
    active: bool = True
    """whether the bonus applies at the next step"""

    def update(self, entropy: float) -> None:
        if self.target <= 0:
            return
        low = entropy <= self.target
        self.coef = min(self.coef + self.delta, self.max_coef) if low else max(self.coef - self.delta, 0.0)
        self.active = low

    @property
    def bonus(self) -> float:
        """The coefficient the next step's loss uses: 0 while the bonus is off."""
        return self.coef if self.active else 0.0

    def state_dict(self) -> dict[str, Any]:
        return {"coef": self.coef, "active": self.active}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.coef, self.active = state["coef"], state["active"]


# --- reward and advantage shaping ---


def shape_length(
    rewards: Tensor,
    lengths: Tensor,
    max_len: int,
    penalty: float,
    norm_ref: int,
    overlong_buffer: int,
    overlong_factor: float,
) -> tuple[Tensor, dict[str, float]]:
    """Length handling on the scalar rewards (N,): normalization r x min(1, ref / length), a linear
    length penalty, and DAPO's soft overlong punishment (arXiv 2503.14476), in that order."""
    shaped = rewards
    if norm_ref > 0:
        shaped = shaped * (norm_ref / lengths.clamp(min=norm_ref))  # (N,)
    if penalty > 0:
        shaped = shaped - penalty * lengths / max_len
    overlong = torch.zeros_like(rewards)
    if overlong_buffer > 0:
        excess = lengths - (max_len - overlong_buffer)  # (N,)
        overlong = (-excess / overlong_buffer * overlong_factor).clamp(max=0.0)
        shaped = shaped + overlong
    stats = {
        "length/reward_delta": float((shaped - rewards).nanmean()) if rewards.numel() else 0.0,
        "length/reshaped_frac": float((shaped != rewards).float().mean()),
        "length/overlong_frac": float((overlong < 0).float().mean()),
    }
    return shaped, stats


def batch_normalize(adv: Tensor, eps: float) -> Tensor:
    """Global reward normalization on top of group normalization: whiten the sequence advantages
    (N,) over the whole batch (Tricks review §2.2 reports it harmful for GRPO)."""
    return (adv - adv.mean()) / (adv.std() + eps) if adv.numel() > 1 else adv


def clip_advantages(adv: Tensor, bound: float) -> tuple[Tensor, float]:
    """PPO-era advantage clipping to [-bound, bound]; returns the share of values clipped."""
    clipped = adv.clamp(-bound, bound)
    return clipped, float((clipped != adv).float().mean())


def uniform_groups(rewards: Tensor, group_size: Groups) -> Tensor:
    """Groups whose rewards are all equal (no GRPO signal): bool (B,). Groups may be ragged."""
    g, m = padded(rewards.nan_to_num(0.0), group_size)  # (B, G)
    return ((g == g[:, :1]) | (m == 0)).all(dim=1)


def still_uniform(first: Tensor, extra: Tensor) -> Tensor:
    """Dynamic group size: which groups that were all equal to `first` (b,) still are after `extra`
    (b, k) more rewards: bool (b,)."""
    return (extra.nan_to_num(0.0) == first.nan_to_num(0.0)[:, None]).all(dim=1)


def group_temperatures(num_groups: int, group_size: int, base: float, jitter: float, generator) -> Tensor:
    """Sampling temperature per completion (N,): T (1 + U(-j, j)), one draw per group."""
    noise = (torch.rand(num_groups, generator=generator) * 2 - 1) * jitter  # (B,)
    return (base * (1 + noise)).repeat_interleave(group_size)


# --- token-level masks and weights ---


def top_entropy_mask(entropy: Tensor, mask: Tensor, frac: float) -> Tensor:
    """Keep only the highest-entropy fraction of valid tokens in the policy term (Wang et al. 2025,
    arXiv 2506.01939, "80/20"): float (N, T)."""
    valid = entropy[mask.bool()]
    if frac >= 1 or valid.numel() == 0:
        return mask
    cut = torch.quantile(valid.float(), 1 - frac)
    return mask * (entropy >= cut).float()


TokenWeight = Callable[[Tensor, Tensor, float], Tensor]
KL_TOKEN_WEIGHTS: Registry[TokenWeight] = Registry("KL token weight")


@KL_TOKEN_WEIGHTS.register("none")
def uniform(entropy: Tensor, mask: Tensor, alpha: float) -> Tensor:
    """GRPO: every token's KL weighs the same."""
    return mask


@KL_TOKEN_WEIGHTS.register("entropy")
def by_entropy(entropy: Tensor, mask: Tensor, alpha: float) -> Tensor:
    """Dynamic KL: risky (high-entropy) tokens get a stronger penalty, w = 1 + alpha H / mean(H),
    renormalized to mean 1 over valid tokens (Tricks review §2.3 Two-layer KL and dynamic regularization)."""
    w = 1 + alpha * entropy / masked_mean(entropy, mask).clamp(min=1e-8)  # (N, T)
    return w / masked_mean(w, mask).clamp(min=1e-8) * mask


@KL_TOKEN_WEIGHTS.register("position")
def by_position(entropy: Tensor, mask: Tensor, alpha: float) -> Tensor:
    """Dynamic KL: tokens late in an over-long answer get a stronger penalty, w = 1 + alpha t / T,
    renormalized to mean 1 over valid tokens."""
    t = torch.arange(mask.shape[1], dtype=mask.dtype, device=mask.device)[None]  # (1, T)
    w = (1 + alpha * t / max(mask.shape[1] - 1, 1)).expand_as(mask)  # (N, T)
    return w / masked_mean(w, mask).clamp(min=1e-8) * mask


class LearnableTemperature(torch.nn.Module):
    """Differentiable temperature: a trainable scale dividing the logits (log-parametrized so it
    stays positive), trained by the same loss as the policy."""

    def __init__(self) -> None:
        super().__init__()
        self.log_tau = torch.nn.Parameter(torch.zeros(()))

    def forward(self) -> Tensor:
        return self.log_tau.exp()
