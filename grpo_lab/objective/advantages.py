"""Advantage estimators: one scalar reward per completion (N,) -> one advantage per completion (N,).

Rows come in contiguous groups, one per prompt: G each (`group_size` an int), or ragged, a size per
prompt ((B,) tensor, dynamic group size), where every group statistic is taken over the group's own
rows. Every std is the unbiased (Bessel) one, as in TRL and verl; the std of a single element is 0, so
a singleton group gets advantage 0, not NaN.
"""

from collections.abc import Callable

import torch
from torch import Tensor

from grpo_lab.objective.aggregation import masked_mean
from grpo_lab.objective.groups import Groups, group_sizes, padded, per_row, unpadded
from grpo_lab.registry import Registry

Advantage = Callable[[Tensor, Groups, Tensor, float], Tensor]
ADVANTAGES: Registry[Advantage] = Registry("advantage")

SCALES = {"group": "grpo", "batch": "lite_ppo", "none": "dr_grpo"}
"""`group_advantages` scale -> registry entry (TRL's `scale_rewards` values)."""


def _mean_std(x: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Masked mean and unbiased std along the last dim (keepdim); std is 0 with fewer than 2 entries."""
    mask = torch.ones_like(x) if mask is None else mask
    mean = masked_mean(x, mask, dim=-1)[..., None]  # (..., 1)
    var = ((x - mean) ** 2 * mask).sum(-1, keepdim=True) / (mask.sum(-1, keepdim=True) - 1).clamp(min=1)
    return mean, var.sqrt()


def _centred(rewards: Tensor, group_size: Groups) -> Tensor:
    """r - group mean, (N,)."""
    g, m = padded(rewards, group_size)  # (B, G)
    return unpadded(g - masked_mean(g, m, dim=-1)[:, None], m)


@ADVANTAGES.register("grpo")
def grpo(rewards: Tensor, group_size: Groups, lengths: Tensor, eps: float) -> Tensor:
    """GRPO: group z-score (r - mean_G) / (std_G + eps) (DeepSeekMath, arXiv:2402.03300)."""
    g, m = padded(rewards, group_size)  # (B, G)
    mean, std = _mean_std(g, m)  # (B, 1)
    return unpadded((g - mean) / (std + eps), m)


@ADVANTAGES.register("dr_grpo")
def dr_grpo(rewards: Tensor, group_size: Groups, lengths: Tensor, eps: float) -> Tensor:
    """Dr. GRPO: r - mean_G with no std division, removing the difficulty bias (arXiv:2503.20783)."""
    return _centred(rewards, group_size)


@ADVANTAGES.register("lite_ppo")
def lite_ppo(rewards: Tensor, group_size: Groups, lengths: Tensor, eps: float) -> Tensor:
    """Lite PPO: group mean, but the std of the raw rewards over the whole batch (arXiv:2508.08221;
    TRL `scale_rewards="batch"`)."""
    _, std = _mean_std(rewards)  # (1,)
    return _centred(rewards, group_size) / (std + eps)


@ADVANTAGES.register("batch_std")
def batch_std(rewards: Tensor, group_size: Groups, lengths: Tensor, eps: float) -> Tensor:
    """Global whitening: batch mean and batch std, no group baseline (the PPO-style normalization)."""
    mean, std = _mean_std(rewards)  # (1,)
    return (rewards - mean) / (std + eps)


@ADVANTAGES.register("rloo")
def rloo(rewards: Tensor, group_size: Groups, lengths: Tensor, eps: float) -> Tensor:
    """RLOO: leave-one-out baseline r_i - mean_{j!=i} r_j = G/(G-1) (r_i - mean_G), no std
    (arXiv:2402.14740), with each group's own G when groups are ragged. A singleton group gets 0."""
    if isinstance(group_size, int):
        return _centred(rewards, group_size) * group_size / max(group_size - 1, 1)
    n = per_row(group_sizes(rewards.shape[0], group_size), group_size).to(rewards)  # (N,)
    return _centred(rewards, group_size) * n / (n - 1).clamp(min=1)


@ADVANTAGES.register("reinforce_pp")
def reinforce_pp(rewards: Tensor, group_size: Groups, lengths: Tensor, eps: float) -> Tensor:
    """REINFORCE++-baseline: group-centred, then whitened over the batch's sequences (arXiv:2501.03262).
    verl whitens over tokens instead, which weights each sequence by its length."""
    centred = _centred(rewards, group_size)  # (N,)
    mean, std = _mean_std(centred)  # (1,)
    return (centred - mean) / (std + eps)


@ADVANTAGES.register("opo")
def opo(rewards: Tensor, group_size: Groups, lengths: Tensor, eps: float) -> Tensor:
    """OPO: length-weighted group baseline sum(l r) / sum(l), the variance-optimal baseline when the
    gradient norm grows with length (arXiv:2505.23585). A group with no tokens uses the plain mean."""
    (g, m), (lens, _) = padded(rewards, group_size), padded(lengths, group_size)  # (B, G)
    total = lens.sum(-1, keepdim=True)  # (B, 1); padding has length 0
    weighted = (lens * g).sum(-1, keepdim=True) / total.clamp(min=1)  # (B, 1)
    baseline = torch.where(total > 0, weighted, masked_mean(g, m, dim=-1)[:, None])  # (B, 1)
    return unpadded(g - baseline, m)


@ADVANTAGES.register("gpg")
def gpg(rewards: Tensor, group_size: Groups, lengths: Tensor, eps: float) -> Tensor:
    """GPG: group-centred, no std, scaled by alpha = N / (rows in groups whose rewards are not all
    equal), so zero-signal groups do not dilute the batch gradient (arXiv:2504.02546)."""
    g, m = padded(rewards, group_size)  # (B, G)
    top = g.masked_fill(m == 0, -torch.inf).amax(-1)  # (B,)
    informative = top > g.masked_fill(m == 0, torch.inf).amin(-1)  # (B,)
    alpha = rewards.shape[0] / max(int(m.sum(-1)[informative].sum()), 1)
    return alpha * _centred(rewards, group_size)


def group_advantages(rewards: Tensor, group_size: Groups, scale: str = "group", eps: float = 1e-6) -> Tensor:
    """Group-baseline advantages (N,): `scale` "group" divides by the group std (GRPO), "batch" by the
    batch std (Lite PPO), "none" not at all (Dr. GRPO). `group_size` may be ragged group sizes (B,)."""
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; valid: {', '.join(SCALES)}")
    return ADVANTAGES.get(SCALES[scale])(rewards, group_size, torch.ones_like(rewards), eps)


def reward_to_go(x: Tensor, mask: Tensor, include_current: bool = True) -> Tensor:
    """Per position (N, T): the sum of `x` over the valid tokens (`mask`) at or after it, or strictly
    after it with `include_current=False` (padding contributes nothing)."""
    x = x * mask  # (N, T)
    to_go = x.flip(-1).cumsum(-1).flip(-1)  # (N, T)
    return to_go if include_current else to_go - x


def token_advantages(
    seq_adv: Tensor,
    token_rewards: Tensor | None,
    mask: Tensor,
    group_size: Groups,
    mix: float,
    eps: float,
    outcome: Tensor | None = None,
) -> Tensor:
    """Per-token advantages (N, T): (1 - mix) * seq_adv + mix * the whitened return from each token.

    The return from token t is the sequence's `outcome` reward (N,) (0 when None) plus the
    `token_rewards` of its valid tokens s >= t; it is whitened (mean and unbiased std) over all valid
    tokens of the prompt's group. Token rewards keep their own scale against the outcome's spread,
    as in the references' token-level returns (verl's REINFORCE++ with the KL in the reward): a KL
    penalty enters with its coefficient, so the coefficient moves the advantages. With mix = 0 or no
    token rewards this is seq_adv broadcast over the valid tokens.
    """
    adv = seq_adv[:, None] * mask  # (N, T)
    if token_rewards is None or mix == 0:
        return adv
    rtg = reward_to_go(token_rewards, mask)  # (N, T)
    if outcome is not None:
        rtg = rtg + outcome[:, None]  # (N, T) the outcome counts in the return from every token
    (g_rtg, rows), (g_mask, _) = padded(rtg, group_size), padded(mask, group_size)  # (B, G, T), (B, G)
    flat, flat_mask = g_rtg.flatten(1), g_mask.flatten(1)  # (B, G*T); padding rows are masked out
    mean, std = _mean_std(flat, flat_mask)  # (B, 1)
    whitened = unpadded(((flat - mean) / (std + eps)).view_as(g_rtg), rows)  # (N, T)
    return ((1 - mix) * adv + mix * whitened) * mask
