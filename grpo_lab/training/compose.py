"""The one place where the objective's pieces are composed. Each axis is looked up once in its
registry by the name the config gives; nothing else in the package branches on a variant. The tricks
that change the training signal (length shaping, the truncation mask, advantage whitening and
clipping, entropy-selected tokens, KL token weights) enter here too, and the controllers of the live KL
and entropy coefficients are built here from the config's starting values."""

from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor

from grpo_lab import objective as obj
from grpo_lab.config import Config
from grpo_lab.models.sampler import Rollout
from grpo_lab.objective.advantages import Advantage
from grpo_lab.objective.aggregation import Aggregation
from grpo_lab.objective.correction import Correction
from grpo_lab.objective.groups import Groups, padded, per_row, prompt_balance
from grpo_lab.objective.kl import Estimator, Placement, distinct_estimators, placement_site
from grpo_lab.objective.seq_weights import SeqWeight
from grpo_lab.objective.surrogates import Surrogate
from grpo_lab.tricks import (
    KL_TOKEN_WEIGHTS,
    EntropyController,
    KLController,
    KLScheduleParams,
    TokenWeight,
    batch_normalize,
    clip_advantages,
    shape_length,
    top_entropy_mask,
)


@dataclass
class StepTensors:
    """The per-step tensors that stay fixed during the updates; `select` cuts a micro-batch."""

    adv: Tensor
    """(N, T) advantages"""
    mask: Tensor
    """(N, T) tokens in the loss (truncated completions removed when asked)"""
    seq_weights: Tensor
    """(N,) scheme B loss coefficients"""
    is_weights: Tensor
    """(N, T) sampler-vs-trainer importance weights"""
    old_logp: Tensor | None
    """(N, T) old policy, when it needed its own pass; else the detached current log-probs are used"""
    ref_logp: Tensor | None
    """(N, T) reference, when the KL uses it"""
    prev_logp: Tensor | None
    """(N, T) previous step's policy, for the two-layer KL"""

    def select(self, rows: Tensor) -> "StepTensors":
        cut: dict[str, Any] = {
            f: None if (v := getattr(self, f)) is None else v[rows] for f in self.__dataclass_fields__
        }
        return replace(self, **cut)


@dataclass
class FixedLogprobs:
    """The log-probs (N, T) that stay fixed during one step's updates, named as in `StepTensors`."""

    old_logp: Tensor | None
    """old policy, when it can differ from the current one or is needed before the update"""
    ref_logp: Tensor | None
    """reference, when the KL uses it"""
    ref_logsm: Tensor | None
    """(N, T, V) reference log-softmax, for the exact KL on small vocabularies"""
    prev_logp: Tensor | None
    """previous step's policy, for the two-layer KL"""
    old_from_sampler: bool = False
    """the old log-probs are the sampler's own, kept while sampling: no forward pass made them"""
    reference_forward: bool = False
    """the reference made a forward pass: for the KL (`ref_logp`), or for `kl_monitor`'s exact KL alone,
    which keeps no `ref_logp`"""

    @property
    def passes(self) -> int:
        """Forward passes made for these log-probs (the reference's counted whatever it was for)."""
        old = self.old_logp is not None and not self.old_from_sampler
        return int(old) + int(self.reference_forward) + int(self.prev_logp is not None)


@dataclass
class Signal:
    """The training signal of one step before the updates: what the loss needs, fixed during them,
    and the KL penalty folded into the reward (N, T) when the placement puts it there."""

    fixed: StepTensors
    kl_reward: Tensor | None
    stats: dict[str, float]


class Objective:
    """The composed objective of one config: each axis looked up once in its registry, the tricks that
    change the training signal (length shaping, truncation mask, advantage tricks, entropy-selected
    tokens, KL token weights) applied here."""

    config: Config
    advantage_fn: Advantage
    surrogate_fn: Surrogate
    kl_fn: Estimator
    placement_fn: Placement
    aggregate_fn: Aggregation
    seq_weight_fn: SeqWeight
    correction_fn: Correction
    kl_prev_fn: Estimator
    kl_token_weight_fn: TokenWeight
    surrogate_params: obj.SurrogateParams
    correction_params: obj.CorrectionParams
    kl_site: str | None
    """where the KL sits: "loss", "reward", or None when no reference is used"""

    def __init__(self, config: Config) -> None:
        c = self.config = config
        self.advantage_fn = obj.ADVANTAGES.get(c.advantage)
        self.surrogate_fn = obj.SURROGATES.get(c.surrogate)
        self.kl_fn = obj.KL_ESTIMATORS.get(c.kl_estimator)
        self.placement_fn = obj.KL_PLACEMENTS.get(c.kl_placement)
        self.aggregate_fn = obj.AGGREGATIONS.get(c.aggregation)
        self.seq_weight_fn = obj.SEQ_WEIGHTS.get(c.seq_weight)
        self.correction_fn = obj.IS_CORRECTIONS.get(c.is_correction)
        self.kl_prev_fn = obj.KL_ESTIMATORS.get(c.kl_prev_estimator)
        self.kl_token_weight_fn = KL_TOKEN_WEIGHTS.get(c.kl_token_weight)
        self.surrogate_params = obj.SurrogateParams.from_fields(c)  # the config's fields of the same name
        self.correction_params = obj.CorrectionParams(
            low=c.is_low, high=c.is_high, seq_reduce=c.is_seq_reduce
        )
        self.kl_site = placement_site(c.kl_placement) if c.uses_reference else None

    @property
    def kl_in_reward(self) -> bool:
        return self.kl_site == "reward"

    @property
    def kl_in_loss(self) -> bool:
        return self.kl_site == "loss"

    @property
    def needs_old_logp(self) -> bool:
        """Old log-probs are needed only when they can differ from the current ones (several updates
        per batch) or before the update (KL in the reward, IS correction)."""
        c = self.config
        several_updates = c.num_iterations > 1 or c.num_mini_batches > 1
        return several_updates or self.kl_in_reward or c.is_correction != "none"

    @property
    def needs_token_credit(self) -> bool:
        """Whether the advantages mix in the task's token-level credit (scheme B)."""
        return self.config.token_adv_mix > 0

    @property
    def shapes_length(self) -> bool:
        """Whether any length trick changes the rewards."""
        c = self.config
        return bool(c.length_penalty or c.length_norm_ref or c.overlong_buffer)

    def shape_rewards(self, rewards: Tensor, lengths: Tensor) -> tuple[Tensor, dict[str, float]]:
        """The scalar rewards (N,) after the length tricks (normalization, penalty, overlong shaping)."""
        c = self.config
        return shape_length(
            rewards,
            lengths,
            max_len=c.max_completion_length,
            penalty=c.length_penalty,
            norm_ref=c.length_norm_ref,
            overlong_buffer=c.overlong_buffer,
            overlong_factor=c.overlong_factor,
        )

    def loss_mask(self, mask: Tensor, truncated: Tensor) -> Tensor:
        """The tokens (N, T) in the loss: all the policy produced, or, with mask_truncated, only those
        of completions that ended (truncated (N,) ones still count in the reward statistics)."""
        return mask * (~truncated)[:, None] if self.config.mask_truncated else mask

    def signal(
        self,
        rollout: Rollout,
        rewards: Tensor,
        fixed: FixedLogprobs,
        groups: Groups,
        *,
        token_credit: Tensor | None,
        kl_coef: float,
    ) -> Signal:
        """The step's training signal from its shaped rewards (N,) and fixed log-probs (N, T): the KL
        folded into the reward when it sits there, the advantages, the sequence weights and, given the
        old policy's log-probs, the sampler importance weights."""
        mask, lengths, sampler_logp = rollout.completion_mask, rollout.lengths, rollout.sampler_logp  # (N, T)
        old_logp, ref_logp = fixed.old_logp, fixed.ref_logp
        kl_reward = None  # (N, T) when the KL sits in the reward: old and reference log-probs are then there
        if self.kl_in_reward and old_logp is not None and ref_logp is not None:
            kl_reward = self.reward_kl(old_logp, ref_logp, mask, kl_coef)
        adv, stats = self.advantages(rewards, lengths, mask, kl_reward, token_credit, groups)  # (N, T)
        seq_w = self.sequence_weights(
            lengths, rewards, groups
        )  # (N,) ragged groups: every prompt weighs the same
        is_w = torch.ones_like(mask)  # (N, T)
        if old_logp is not None:
            is_w, is_stats = self.correction(old_logp, sampler_logp, mask)
            stats.update({k: float(v) for k, v in is_stats.items()})
        if kl_reward is not None:
            stats["kl_reward/mean"] = float((kl_reward * mask).sum(-1).mean())
        tensors = StepTensors(
            adv=adv,
            mask=self.loss_mask(mask, rollout.truncated),
            seq_weights=seq_w,
            is_weights=is_w,
            old_logp=old_logp,
            ref_logp=ref_logp,
            prev_logp=fixed.prev_logp,
        )
        return Signal(tensors, kl_reward, stats)

    def reward_kl(self, old_logp: Tensor, ref_logp: Tensor, mask: Tensor, kl_coef: float) -> Tensor:
        """Per-token KL penalty folded into the reward (zero unless the placement is 'reward'): (N, T)."""
        terms = self.placement_fn(self.kl_fn(old_logp, ref_logp), kl_coef, mask)
        return terms.reward if terms.reward is not None else torch.zeros_like(mask)

    def advantages(
        self,
        rewards: Tensor,
        lengths: Tensor,
        mask: Tensor,
        kl_reward: Tensor | None,
        token_credit: Tensor | None,
        groups: Groups | None = None,
    ) -> tuple[Tensor, dict[str, float]]:
        """Sequence advantages from the scalar rewards (N,), spread over tokens and mixed with the
        token-level return (scheme B): (N, T). A KL penalty in the reward (N, T), coefficient
        included, is summed into the sequence reward (as verl does before the group normalization)
        and enters the token-level return as token rewards beside the task's token credit.
        Unscored rows (NaN reward) get advantage 0. The advantage tricks (batch normalization on top
        of the group's, clipping) apply here. `groups`: ragged group sizes (B,) when dynamic group
        size made them so (default: group_size each)."""
        c = self.config
        groups = c.group_size if groups is None else groups
        unscored = rewards.isnan()  # (N,)
        kl_sum = (kl_reward * mask).sum(-1) if kl_reward is not None else torch.zeros_like(rewards)  # (N,)
        filled = torch.where(unscored, _group_nanmean(rewards + kl_sum, groups), rewards + kl_sum)  # (N,)
        seq_adv = self.advantage_fn(filled, groups, lengths, c.adv_eps).masked_fill(unscored, 0.0)  # (N,)
        stats = {"advantages/zero_std_abs_mean": equal_groups_abs_mean(seq_adv, rewards, groups)}
        if c.adv_batch_norm:
            whitened = batch_normalize(seq_adv, c.adv_eps)  # (N,)
            stats["advantages/batch_norm_shift"] = float((whitened - seq_adv).abs().mean())
            seq_adv = whitened
        parts = [t for t in (kl_reward, token_credit) if t is not None]
        token_rewards = sum(parts[1:], parts[0]) if parts else None  # (N, T)
        adv = obj.token_advantages(
            seq_adv, token_rewards, mask, groups, c.token_adv_mix, c.adv_eps, outcome=filled - kl_sum
        )
        # spread of the advantage within each sequence: 0 when every token carries its sequence's
        spread = (adv - obj.masked_mean(adv, mask, dim=-1)[:, None]) ** 2  # (N, T)
        stats["advantages/token_std"] = float(obj.masked_mean(spread, mask, dim=-1).sqrt().mean())
        if c.adv_clip > 0:
            adv, stats["advantages/clipped_frac"] = clip_advantages(adv, c.adv_clip)
        return adv, stats

    def sequence_weights(self, lengths: Tensor, rewards: Tensor, groups: Groups | None = None) -> Tensor:
        """Loss coefficients per sequence, mean 1: (N,). Scheme B's (`seq_weight`), times, for ragged
        groups (B,), the prompt balance (N / B) / n_g that gives every prompt the same total weight
        whatever its group size (`objective.groups.prompt_balance`)."""
        groups = self.config.group_size if groups is None else groups
        weights = self.seq_weight_fn(lengths, rewards.nan_to_num(0.0), groups)  # (N,)
        if isinstance(groups, int):
            return weights
        balanced = weights * prompt_balance(groups, len(weights)).to(weights)  # (N,)
        return balanced * len(balanced) / balanced.sum().clamp(min=1e-12)

    def totals(self, mask: Tensor, groups: Groups | None = None) -> obj.BatchTotals:
        """The whole batch's normalizers from its loss mask (N, T). With ragged groups (B,) every row
        counts with its prompt balance, like its loss: then a prompt whose completions are repeated k
        times weighs exactly what one copy weighs, under every normalized aggregation."""
        groups = self.config.group_size if groups is None else groups
        max_len = self.config.max_completion_length
        if isinstance(groups, int):
            return obj.BatchTotals.of(mask, max_len)
        return obj.BatchTotals.of(mask, max_len, prompt_balance(groups, mask.shape[0]).to(mask))

    def correction(
        self, old_logp: Tensor, sampler_logp: Tensor, mask: Tensor
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Detached importance weights of the trainer's old policy against the sampler: (N, T)."""
        return self.correction_fn(old_logp, sampler_logp, mask, self.correction_params)

    def loss(
        self,
        logp: Tensor,
        entropy: Tensor,
        t: "StepTensors",
        totals: obj.BatchTotals,
        kl_coef: float,
        entropy_coef: float,
    ) -> Tensor:
        """The scalar loss of a micro-batch; summed over micro-batches it is the full-batch loss.
        `entropy` (n, T) carries a gradient only when the entropy bonus is on. The coefficients are the
        live ones, the controllers' (`tricks.KLController`, `tricks.EntropyController`): the config's
        kl_coef and entropy_coef are only where they start, so the objective never reads them."""
        c = self.config
        old = t.old_logp if t.old_logp is not None else logp.detach()
        policy_mask = top_entropy_mask(entropy.detach(), t.mask, c.top_entropy_frac)  # (n, T)
        per_token, _ = self.surrogate_fn(logp, old, t.adv, policy_mask, self.surrogate_params)  # (n, T)
        per_token = per_token * t.is_weights  # sampler correction applies to the policy term only
        if t.ref_logp is not None:
            kl = self.kl_fn(logp, t.ref_logp)  # (n, T)
            if c.kl_importance_weighted:
                kl = obj.importance_weighted_kl(kl, logp, old)
            kl = kl * self.kl_token_weight_fn(entropy.detach(), t.mask, c.kl_token_alpha)
            terms = self.placement_fn(kl, kl_coef, t.mask)
            if terms.loss is not None:
                per_token = per_token + terms.loss
        if t.prev_logp is not None:  # two-layer KL: also stay close to the previous step's policy
            per_token = per_token + c.kl_prev_coef * self.kl_prev_fn(logp, t.prev_logp) * t.mask
        per_token = per_token * t.seq_weights[:, None]  # (n, T)
        loss = self.aggregate_fn(per_token, t.mask, totals)
        if entropy_coef:
            loss = loss - entropy_coef * self.aggregate_fn(entropy, t.mask, totals)
        return loss

    @torch.no_grad()
    def update_stats(
        self, logp: Tensor, entropy: Tensor, fixed: StepTensors, rollout: Rollout
    ) -> dict[str, float]:
        """What the updates did, from the last pass's log-probs and entropies (N, T) over the tokens the
        policy produced (N, T): the surrogate and KL statistics (`stats`), the two-layer KL, the advantage
        means, and the sampler-trainer gap. With one on-policy update the policy just evaluated is the
        sampler's trainer twin: the IS correction is measured against it."""
        mask, sampler_logp = rollout.completion_mask, rollout.sampler_logp  # (N, T)
        old = fixed.old_logp if fixed.old_logp is not None else logp  # (N, T)
        out = self.stats(logp, old, fixed.ref_logp, fixed.adv, mask, entropy)
        if fixed.old_logp is None:
            _, is_stats = self.correction(logp, sampler_logp, mask)
            out.update({k: float(v) for k, v in is_stats.items()})
        if fixed.prev_logp is not None:
            out["kl/prev"] = float(obj.masked_mean(self.kl_prev_fn(logp, fixed.prev_logp), mask))
        out["sampling/kl_sampler_trainer"] = float(obj.masked_mean(sampler_logp - old, mask))
        out["advantages/mean"] = float(obj.masked_mean(fixed.adv, mask))
        out["advantages/abs_mean"] = float(obj.masked_mean(fixed.adv.abs(), mask))
        return out

    @torch.no_grad()
    def stats(
        self,
        logp: Tensor,
        old_logp: Tensor,
        ref_logp: Tensor | None,
        adv: Tensor,
        mask: Tensor,
        entropy: Tensor | None = None,
    ) -> dict:
        """Surrogate statistics of the whole batch, every KL estimator side by side and, given the
        token entropies (N, T), how much the entropy-driven token selection and KL weights act."""
        c = self.config
        _, stats = self.surrogate_fn(logp, old_logp, adv, mask, self.surrogate_params)
        out = {k: float(v) for k, v in stats.items()}
        if entropy is not None:
            kept = top_entropy_mask(entropy, mask, c.top_entropy_frac)  # (N, T)
            out["policy/token_dropped_frac"] = 1 - float(kept.sum() / mask.sum().clamp(min=1))
            if ref_logp is not None:
                weights = self.kl_token_weight_fn(entropy, mask, c.kl_token_alpha)  # (N, T)
                spread = (weights - obj.masked_mean(weights, mask)) ** 2  # (N, T)
                out["kl/token_weight_std"] = float(obj.masked_mean(spread, mask).sqrt())
        if ref_logp is not None:
            for name in distinct_estimators():
                out[f"kl/{name}"] = float(obj.masked_mean(obj.KL_ESTIMATORS.get(name)(logp, ref_logp), mask))
            out["kl"] = float(obj.masked_mean(self.kl_fn(logp, ref_logp), mask))
        return out


def kl_schedule_params(c: Config) -> KLScheduleParams:
    """The KL schedules' constants from the config (batch_size: the proportional controller's samples
    per step)."""
    return KLScheduleParams(
        final=c.kl_coef_final,
        target=c.kl_target,
        growth=c.kl_growth,
        horizon=c.kl_horizon,
        batch_size=c.batch_size,
    )


def kl_controller(c: Config) -> KLController:
    """The live KL coefficient's owner, starting at the config's kl_coef under its schedule."""
    return KLController(coef=c.kl_coef, schedule=c.kl_schedule, params=kl_schedule_params(c))


def entropy_controller(c: Config) -> EntropyController:
    """The live entropy bonus's owner, starting at the config's entropy_coef."""
    return EntropyController(
        coef=c.entropy_coef, target=c.entropy_target, delta=c.entropy_coef_delta, max_coef=c.entropy_coef_max
    )


def _group_nanmean(x: Tensor, groups: Groups) -> Tensor:
    """Each row's group mean over the non-NaN rows (0 for an all-NaN group): (N,)."""
    g, rows = padded(x, groups)  # (B, G)
    scored = rows * ~g.isnan()  # (B, G)
    mean = obj.masked_mean(g.nan_to_num(0.0), scored, dim=-1)  # (B,)
    return per_row(mean, groups)


def equal_groups_abs_mean(seq_adv: Tensor, rewards: Tensor, groups: Groups) -> float:
    """Mean |sequence advantage| (N,) over the completions of the groups whose task rewards (N,) are
    all equal (unscored ones counted as 0, as `frac_reward_zero_std` counts them): 0 for an advantage
    of the task reward alone; with the KL in the reward, what its differences within the group
    become once normalized (Evaluation guide §7: a changed reward scale distorts the normalized
    advantage). NaN in a step without such a group."""
    g, m = padded(rewards.nan_to_num(0.0), groups)  # (B, G)
    present = m.bool()  # (B, G)
    high = g.masked_fill(~present, float("-inf")).amax(-1)  # (B,)
    low = g.masked_fill(~present, float("inf")).amin(-1)  # (B,)
    equal = per_row(torch.isclose(high, low), groups)  # (N,)
    return float(seq_adv[equal].abs().mean()) if bool(equal.any()) else float("nan")
