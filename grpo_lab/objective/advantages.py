"""Advantage estimators: one scalar reward per completion (N,) -> one advantage per completion (N,).

Rows come in groups of G contiguous completions of the same prompt. Every std is the unbiased (Bessel)
one, as in TRL and verl; the std of a single element is 0, so a singleton group gets advantage 0, not NaN.
"""

from collections.abc import Callable

import torch
from torch import Tensor

from grpo_lab.objective.aggregation import masked_mean
from grpo_lab.registry import Registry

Advantage = Callable[[Tensor, int, Tensor, float], Tensor]
ADVANTAGES: Registry[Advantage] = Registry("advantage")

SCALES = {"group": "grpo", "batch": "lite_ppo", "none": "dr_grpo"}
"""`group_advantages` scale -> registry entry (TRL's `scale_rewards` values)."""


def _grouped(x: Tensor, group_size: int) -> Tensor:
    """(N, ...) -> (N/G, G * ...): one row per prompt."""
    if group_size < 1 or x.shape[0] % group_size:
        raise ValueError(f"{x.shape[0]} rows do not split into groups of {group_size}")
    return x.reshape(x.shape[0] // group_size, -1)


def _mean_std(x: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Masked mean and unbiased std along the last dim (keepdim); std is 0 with fewer than 2 entries."""
    mask = torch.ones_like(x) if mask is None else mask
    mean = masked_mean(x, mask, dim=-1)[..., None]  # (..., 1)
    var = ((x - mean) ** 2 * mask).sum(-1, keepdim=True) / (mask.sum(-1, keepdim=True) - 1).clamp(min=1)
    return mean, var.sqrt()


def _centred(rewards: Tensor, group_size: int) -> Tensor:
    """r - group mean, (N,)."""
    g = _grouped(rewards, group_size)  # (N/G, G)
    return (g - g.mean(-1, keepdim=True)).flatten()


@ADVANTAGES.register("grpo")
def grpo(rewards: Tensor, group_size: int, lengths: Tensor, eps: float) -> Tensor:
    """GRPO: group z-score (r - mean_G) / (std_G + eps) (DeepSeekMath, arXiv:2402.03300)."""
    g = _grouped(rewards, group_size)  # (N/G, G)
    mean, std = _mean_std(g)  # (N/G, 1)
    return ((g - mean) / (std + eps)).flatten()


@ADVANTAGES.register("dr_grpo")
def dr_grpo(rewards: Tensor, group_size: int, lengths: Tensor, eps: float) -> Tensor:
    """Dr. GRPO: r - mean_G with no std division, removing the difficulty bias (arXiv:2503.20783)."""
    return _centred(rewards, group_size)


@ADVANTAGES.register("lite_ppo")
def lite_ppo(rewards: Tensor, group_size: int, lengths: Tensor, eps: float) -> Tensor:
    """Lite PPO: group mean, but the std of the raw rewards over the whole batch (arXiv:2508.08221;
    TRL `scale_rewards="batch"`)."""
    _, std = _mean_std(rewards)  # (1,)
    return _centred(rewards, group_size) / (std + eps)


@ADVANTAGES.register("batch_std")
def batch_std(rewards: Tensor, group_size: int, lengths: Tensor, eps: float) -> Tensor:
    """Global whitening: batch mean and batch std, no group baseline (the PPO-style normalization)."""
    mean, std = _mean_std(rewards)  # (1,)
    return (rewards - mean) / (std + eps)


@ADVANTAGES.register("rloo")
def rloo(rewards: Tensor, group_size: int, lengths: Tensor, eps: float) -> Tensor:
    """RLOO: leave-one-out baseline r_i - mean_{j!=i} r_j = G/(G-1) (r_i - mean_G), no std
    (arXiv:2402.14740). A singleton group gets 0."""
    return _centred(rewards, group_size) * group_size / max(group_size - 1, 1)


@ADVANTAGES.register("reinforce_pp")
def reinforce_pp(rewards: Tensor, group_size: int, lengths: Tensor, eps: float) -> Tensor:
    """REINFORCE++-baseline: group-centred, then whitened over the batch's sequences (arXiv:2501.03262).
    verl whitens over tokens instead, which weights each sequence by its length."""
    centred = _centred(rewards, group_size)  # (N,)
    mean, std = _mean_std(centred)  # (1,)
    return (centred - mean) / (std + eps)


@ADVANTAGES.register("opo")
def opo(rewards: Tensor, group_size: int, lengths: Tensor, eps: float) -> Tensor:
    """OPO: length-weighted group baseline sum(l r) / sum(l), the variance-optimal baseline when the
    gradient norm grows with length (arXiv:2505.23585). A group with no tokens uses the plain mean."""
    g, lens = _grouped(rewards, group_size), _grouped(lengths, group_size)  # (N/G, G)
    total = lens.sum(-1, keepdim=True)  # (N/G, 1)
    weighted = (lens * g).sum(-1, keepdim=True) / total.clamp(min=1)  # (N/G, 1)
    baseline = torch.where(total > 0, weighted, g.mean(-1, keepdim=True))  # (N/G, 1)
    return (g - baseline).flatten()


@ADVANTAGES.register("gpg")
def gpg(rewards: Tensor, group_size: int, lengths: Tensor, eps: float) -> Tensor:
    """GPG: group-centred, no std, scaled by alpha = N / (rows in groups whose rewards are not all
    equal), so zero-signal groups do not dilute the batch gradient (arXiv:2504.02546)."""
    g = _grouped(rewards, group_size)  # (N/G, G)
    informative = g.amax(-1) > g.amin(-1)  # (N/G,)
    alpha = rewards.shape[0] / max(int(informative.sum()) * group_size, 1)
    return alpha * _centred(rewards, group_size)


def group_advantages(rewards: Tensor, group_size: int, scale: str = "group", eps: float = 1e-6) -> Tensor:
    """Group-baseline advantages (N,): `scale` "group" divides by the group std (GRPO), "batch" by the
    batch std (Lite PPO), "none" not at all (Dr. GRPO)."""
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; valid: {', '.join(SCALES)}")
    return ADVANTAGES.get(SCALES[scale])(rewards, group_size, torch.ones_like(rewards), eps)


def token_advantages(
    seq_adv: Tensor,
    token_rewards: Tensor | None,
    mask: Tensor,
    group_size: int,
    mix: float,
    eps: float,
) -> Tensor:
    """Per-token advantages (N, T): (1 - mix) * seq_adv + mix * whitened reward-to-go, zero on padding.

    The reward-to-go at t sums `token_rewards` over valid tokens s >= t; it is whitened (mean and
    unbiased std) over all valid tokens of the prompt's group. With mix = 0 or no token rewards this
    is seq_adv broadcast over the valid tokens.
    """
    adv = seq_adv[:, None] * mask  # (N, T)
    if token_rewards is None or mix == 0:
        return adv
    rtg = (token_rewards * mask).flip(-1).cumsum(-1).flip(-1)  # (N, T)
    g_rtg, g_mask = _grouped(rtg, group_size), _grouped(mask, group_size)  # (N/G, G*T)
    mean, std = _mean_std(g_rtg, g_mask)  # (N/G, 1)
    whitened = ((g_rtg - mean) / (std + eps)).view_as(rtg)  # (N, T)
    return ((1 - mix) * adv + mix * whitened) * mask
