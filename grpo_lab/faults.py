"""Fault injectors: pure, seeded transformations of one step's rewards and completions, for the
evaluation documents' anomaly injection ("construct reward noise, extremely long answers, repeated
samples, and check each scheme's fault tolerance").

Every injector takes its own `torch.Generator` and returns (new values, stats) where the stats are
`fault/...` floats for the run log. Inputs are never modified in place. Give the injectors a generator
of their own (e.g. a CPU generator seeded from the run seed), never the sampler's: then switching a fault
on or off leaves the sampled completions of every step exactly as they were. An injector that is
switched off (zero strength) returns its inputs unchanged and draws no random numbers at all, so
composed injectors stay reproducible whichever of them are active. Draws happen on the generator's
device; results are moved to the inputs' device."""

import math

import torch
from torch import Tensor


def _check_groups(n: int, group_size: int) -> int:
    """The number of groups B = N / G; fails when N is not a multiple of G."""
    if group_size < 1 or n % group_size:
        raise ValueError(f"{n} rows do not split into groups of {group_size}")
    return n // group_size


def _check_fraction(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value}")


def select_rows(n: int, fraction: float, generator: torch.Generator) -> Tensor:
    """A CPU bool mask (n,) with exactly round(fraction * n) rows set, chosen uniformly at random.
    A fraction that selects no row draws no random numbers."""
    _check_fraction("fraction", fraction)
    k = math.floor(fraction * n + 0.5)
    chosen = torch.zeros(n, dtype=torch.bool)  # (n,)
    if k:
        chosen[torch.randperm(n, generator=generator, device=generator.device)[:k].cpu()] = True
    return chosen


def reward_noise(
    rewards: Tensor,
    group_size: int,
    sigma: float,
    flip_prob: float,
    group_fraction: float,
    low: float,
    high: float,
    generator: torch.Generator,
) -> tuple[Tensor, dict[str, float]]:
    """Noisy rewards (N,): in a random `group_fraction` of the groups, each reward is flipped to
    low + high - r with probability `flip_prob`, then gets additive N(0, sigma^2) noise; rows of the
    other groups are returned bit for bit. NaN (unscored) rewards stay NaN.

    With sigma = 0 and flip_prob = 0 (or group_fraction = 0) the input itself is returned and the
    generator is not touched. Otherwise the draws are, in this order and whatever sigma and flip_prob
    are: the group choice, N uniforms (flips), N normals (noise); so changing a strength never changes
    which groups are hit."""
    if sigma < 0:
        raise ValueError(f"sigma must be >= 0, got {sigma}")
    _check_fraction("flip_prob", flip_prob)
    _check_fraction("group_fraction", group_fraction)
    n_groups = _check_groups(rewards.shape[0], group_size)
    off = {"fault/reward_groups_frac": 0.0, "fault/reward_flip_frac": 0.0, "fault/reward_abs_change": 0.0}
    if (sigma == 0 and flip_prob == 0) or group_fraction == 0:
        return rewards, off
    device = generator.device
    groups = select_rows(n_groups, group_fraction, generator)  # (B,)
    hit = groups.repeat_interleave(group_size).to(rewards.device)  # (N,)
    flip_u = torch.rand(rewards.shape, generator=generator, device=device).to(rewards.device)  # (N,)
    noise = torch.randn(rewards.shape, generator=generator, device=device).to(rewards)  # (N,)
    flip = hit & (flip_u < flip_prob) & ~rewards.isnan()  # (N,)
    flipped = torch.where(flip, low + high - rewards, rewards)  # (N,)
    noisy = torch.where(hit, flipped + sigma * noise, rewards)  # (N,)
    scored = ~rewards.isnan()  # (N,)
    change = (noisy - rewards).abs()[scored]  # (S,)
    return noisy, {
        "fault/reward_groups_frac": float(groups.float().mean()),
        "fault/reward_flip_frac": float(flip.float().mean()),
        "fault/reward_abs_change": float(change.mean()) if change.numel() else 0.0,
    }


def repeat_samples(
    completion_ids: Tensor,
    completion_mask: Tensor,
    sampler_logp: Tensor,
    truncated: Tensor,
    group_size: int,
    k: int,
    generator: torch.Generator,
) -> tuple[tuple[Tensor, Tensor, Tensor, Tensor], dict[str, float]]:
    """Repeated samples: in every group, k of the G completions (chosen at random) are replaced by
    copies of one other completion of the same group (also chosen at random), so each group holds
    at least k + 1 identical rows; k = G - 1 makes every group constant. The four tensors are
    (N, T), (N, T), (N, T), (N,) and are returned in that order. k = 0 returns the inputs and draws
    nothing. Rebuild the rollout from the result; the prompts need no change (they are the same
    within a group)."""
    n = completion_ids.shape[0]
    n_groups = _check_groups(n, group_size)
    if not 0 <= k < group_size:
        raise ValueError(f"k must be in [0, group_size - 1] = [0, {group_size - 1}], got {k}")
    tensors = (completion_ids, completion_mask, sampler_logp, truncated)
    if k == 0:
        return tensors, {"fault/repeat_frac": 0.0}
    scores = torch.rand(n_groups, group_size, generator=generator, device=generator.device)  # (B, G)
    order = scores.argsort(dim=1).cpu()  # (B, G) a random permutation per group
    source, targets = order[:, :1], order[:, 1 : k + 1]  # (B, 1), (B, k)
    within = torch.arange(group_size).repeat(n_groups, 1)  # (B, G)
    within.scatter_(1, targets, source.expand(-1, k))  # (B, G) row -> row it copies, within the group
    index = (within + group_size * torch.arange(n_groups)[:, None]).reshape(-1)  # (N,)
    index = index.to(completion_ids.device)
    return tuple(t[index] for t in tensors), {"fault/repeat_frac": k / group_size}


def junk_padding(
    completion_ids: Tensor,
    completion_mask: Tensor,
    truncated: Tensor,
    rows: Tensor,
    max_len: int,
    junk_ids: Tensor,
    eos_id: int,
    pad_id: int,
    generator: torch.Generator,
) -> tuple[tuple[Tensor, Tensor, Tensor], dict[str, float]]:
    """Extremely long answers: in the selected rows (N,) bool, the EOS and everything after it become
    random tokens drawn uniformly from `junk_ids` up to `max_len` columns; those rows get a mask of all
    ones and truncated = True. The width grows from T to max_len when needed (the other rows are padded
    with pad_id and mask 0, their tokens unchanged). Returns ids (N, max_len), mask (N, max_len),
    truncated (N,). With no row selected the inputs are returned and nothing is drawn; otherwise N x
    max_len indices are drawn whatever the selection. The log-probs of the selected rows are stale:
    recompute them (and pad sampler_logp with zeros to the new width)."""
    n, t = completion_ids.shape
    if max_len < t:
        raise ValueError(f"max_len ({max_len}) must be at least the completion width ({t})")
    if junk_ids.numel() == 0 or bool(((junk_ids == eos_id) | (junk_ids == pad_id)).any()):
        raise ValueError("junk_ids must be non-empty and hold neither the EOS nor the pad id")
    lengths = completion_mask.sum(-1)  # (N,)
    off = {"fault/junk_rows_frac": 0.0, "fault/junk_tokens_mean": 0.0}
    if not bool(rows.any()):
        return (completion_ids, completion_mask, truncated), off
    rows = rows.to(completion_ids.device)
    pick = torch.randint(junk_ids.numel(), (n, max_len), generator=generator, device=generator.device)
    junk = junk_ids.to(pick.device)[pick].to(completion_ids)  # (N, L)
    ids = torch.nn.functional.pad(completion_ids, (0, max_len - t), value=pad_id)  # (N, L)
    mask = torch.nn.functional.pad(completion_mask, (0, max_len - t))  # (N, L)
    kept = lengths - (~truncated).to(lengths.dtype)  # (N,) tokens before the EOS
    col = torch.arange(max_len, device=ids.device)  # (L,)
    replace = rows[:, None] & (col[None, :] >= kept[:, None])  # (N, L)
    new_ids = torch.where(replace, junk, ids)  # (N, L)
    new_mask = torch.where(rows[:, None], torch.ones_like(mask), mask)  # (N, L)
    new_truncated = truncated | rows  # (N,)
    return (new_ids, new_mask, new_truncated), {
        "fault/junk_rows_frac": float(rows.float().mean()),
        "fault/junk_tokens_mean": float(replace.sum(-1)[rows].float().mean()),
    }
