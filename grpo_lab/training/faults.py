"""Fault injectors: pure, seeded transformations of one step's rewards and completions, for fault
injection (docs/sources.md, Evaluation guide §6.4: reward noise, extremely long answers, repeated
samples, to check each scheme's fault tolerance), and the sampler that lags or loses precision.

Every injector takes its own `torch.Generator` and returns (new values, stats) where the stats are
`fault/...` floats for the run log. Inputs are never modified in place. Give the injectors a generator
of their own (e.g. a CPU generator seeded from the run seed), never the sampler's: then switching a fault
on or off leaves the sampled completions of every step exactly as they were. An injector that is
switched off (zero strength) returns its inputs unchanged and draws no random numbers at all, so
composed injectors stay reproducible whichever of them are active. Draws happen on the generator's
device; results are moved to the inputs' device."""

import collections
import copy
import dataclasses
import math
from typing import Any

import torch
from torch import Tensor

from grpo_lab.config import Config
from grpo_lab.models.logprobs import completion_logprobs
from grpo_lab.models.sampler import Rollout


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
    repeated = (completion_ids[index], completion_mask[index], sampler_logp[index], truncated[index])
    return repeated, {"fault/repeat_frac": k / group_size}


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


# --- the injectors as one step's config switches them: on the rollout, its rewards, the sampler ---


def long_rows(n: int, config: Config, generator: torch.Generator, device: torch.device) -> Tensor | None:
    """Rows (N,) bool to sample without EOS (forced to the maximum length), or None when off. Drawn
    before sampling: the sampler suppresses their EOS."""
    if not config.fault_long_frac:
        return None
    return select_rows(n, config.fault_long_frac, generator).to(device)


def corrupt_rollout(
    rollout: Rollout,
    config: Config,
    *,
    group_size: int,
    forced: Tensor | None,
    policy: torch.nn.Module,
    tokenizer: Any,
    temperatures: Tensor,
    generator: torch.Generator,
) -> tuple[Rollout, dict[str, float]]:
    """The sampled rollout with the switched-on completion faults applied, repeats before junk. In a
    group smaller than fault_repeat_k + 1 (a dynamic group size round), all but one completion are
    repeats. `forced`: the rows `long_rows` chose (only counted here)."""
    stats = {"fault/long_frac": float(forced.float().mean())} if forced is not None else {}
    if config.fault_repeat_k:
        (ids, mask, logp, truncated), fs = repeat_samples(
            rollout.completion_ids,
            rollout.completion_mask,
            rollout.sampler_logp,
            rollout.truncated,
            group_size=group_size,
            k=min(config.fault_repeat_k, group_size - 1),
            generator=generator,
        )
        rollout = dataclasses.replace(
            rollout, completion_ids=ids, completion_mask=mask, sampler_logp=logp, truncated=truncated
        )
        stats.update(fs)
    if config.fault_junk_frac:
        rollout, fs = pad_with_junk(
            rollout,
            policy,
            tokenizer,
            fraction=config.fault_junk_frac,
            max_len=config.max_completion_length,
            temperatures=temperatures,
            generator=generator,
        )
        stats.update(fs)
    return rollout, stats


@torch.no_grad()
def pad_with_junk(
    rollout: Rollout,
    policy: torch.nn.Module,
    tokenizer: Any,
    fraction: float,
    max_len: int,
    temperatures: Tensor,
    generator: torch.Generator,
) -> tuple[Rollout, dict[str, float]]:
    """`junk_padding` on a rollout: a fraction of its completions padded with junk tokens (every
    non-special token) up to max_len. The junk's sampler log-probs are the policy's at each row's
    temperature (N,): it never sampled them, so no sampler-trainer mismatch is invented."""
    device = rollout.completion_ids.device
    rows = select_rows(len(rollout.truncated), fraction, generator).to(device)  # (N,)
    special = set(tokenizer.all_special_ids)
    junk_ids = torch.tensor([i for i in range(len(tokenizer)) if i not in special], device=device)
    (ids, mask, truncated), stats = junk_padding(
        rollout.completion_ids,
        rollout.completion_mask,
        rollout.truncated,
        rows,
        max_len=max_len,
        junk_ids=junk_ids,
        eos_id=tokenizer.eos_token_id,
        pad_id=tokenizer.pad_token_id,
        generator=generator,
    )
    width = ids.shape[1] - rollout.sampler_logp.shape[1]
    logp = torch.nn.functional.pad(rollout.sampler_logp, (0, width))  # (N, T')
    rollout = dataclasses.replace(
        rollout, completion_ids=ids, completion_mask=mask, sampler_logp=logp, truncated=truncated
    )
    idx = rows.nonzero().squeeze(-1)
    if len(idx):
        logp[idx] = completion_logprobs(policy, rollout.select(idx), temperatures[idx]).logp * mask[idx]
    return rollout, stats


def corrupt_rewards(
    rewards: Tensor,
    config: Config,
    *,
    group_size: int,
    reward_range: tuple[float, float],
    generator: torch.Generator,
) -> tuple[Tensor, dict[str, float]]:
    """`reward_noise` as the config switches it (flips within the task's reward range); the rewards
    unchanged and no stats when it is off."""
    if not (config.fault_reward_sigma or config.fault_reward_flip):
        return rewards, {}
    low, high = reward_range
    return reward_noise(
        rewards,
        group_size=group_size,
        sigma=config.fault_reward_sigma,
        flip_prob=config.fault_reward_flip,
        group_fraction=config.fault_group_fraction,
        low=low,
        high=high,
        generator=generator,
    )


class Sampler:
    """Which weights sample: the policy itself or, under fault injection, the policy of k updates
    ago (asynchronous lag) or a lower-precision copy (sampler-trainer mismatch). `recompute`: the
    trainer recomputes a stale sampler's log-probs (verl's one-step off-policy trainer) instead of
    taking them as the old ones."""

    def __init__(
        self,
        policy: torch.nn.Module,
        stale_k: int,
        dtype: str,
        suppresses_eos: bool = False,
        recompute: bool = False,
    ) -> None:
        self.copy: torch.nn.Module | None = None
        if stale_k or dtype != "none":
            self.copy = copy.deepcopy(policy).eval().requires_grad_(False)
        if self.copy is not None and dtype != "none":
            self.copy.to(getattr(torch, dtype))
        self.history: collections.deque[dict[str, Tensor]] = collections.deque(maxlen=stale_k + 1)
        self.stale = stale_k > 0
        self.recompute = recompute
        self.suppresses_eos = suppresses_eos

    def weights(self, policy: torch.nn.Module) -> torch.nn.Module:
        """The model to sample this step with (call once per step, before its update)."""
        if self.copy is None:
            return policy
        state = policy.state_dict()
        if self.stale:  # the oldest kept state is the policy of k updates ago (or the first, early on)
            self.history.append({k: v.detach().clone() for k, v in state.items()})
            state = self.history[0]
        self.copy.load_state_dict(state)  # casts to the copy's precision
        return self.copy

    def behaviour_logp(self, rollout: Rollout, needed: bool) -> Tensor | None:
        """The old policy's log-probs (N, T) from the sampler itself, or None when the trainer must
        compute them. A stale sampler's are the only ones an asynchronous trainer has, needed or not,
        unless it recomputes them (`recompute`): the stale ones then enter the IS correction alone.
        When the sampler is the policy itself and its EOS is never suppressed, its log-probs are the
        same computation as a forward pass of the policy (same weights, same temperature per row), so
        that pass would buy nothing; a lower-precision copy or a suppressed EOS makes them differ, and
        then the trainer recomputes them (`needed`: the objective uses the old log-probs at all)."""
        if self.stale and not self.recompute:
            return rollout.sampler_logp
        if needed and self.copy is None and not self.suppresses_eos:
            return rollout.sampler_logp
        return None

    def state_dict(self) -> dict[str, Any]:
        return {"history": list(self.history)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history.clear()
        self.history.extend(state["history"])
