"""Sampler/trainer off-policy correction: detached importance weights rho = pi_old / pi_sampler (N, T).

The sampler (e.g. vLLM) and the trainer compute slightly different log-probs for the same policy, so
"on-policy" data is off-policy (Yao et al., "Your Efficient RL Framework Secretly Brings You Off-Policy
RL Training", 2025). The weights multiply the per-token policy loss. Log-ratios are clamped to +-20
(per token, and again after a sequence reduction); weights on padding are defined but never used.

Stats: `is/weight_*` over valid tokens; `is/seq_weight_*` and `is/ess` = (sum w)^2 / (n sum w^2) over the
per-sequence weights (the row mean of the token weights, over non-empty rows); `is/masked_frac` = share
of valid tokens with weight 0; `is/logp_gap_*` = |old_logp - sampler_logp| over valid tokens.
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from grpo_lab.objective.aggregation import masked_mean
from grpo_lab.objective.surrogates import LOG_RATIO_CLAMP, log_ratio
from grpo_lab.registry import Registry


@dataclass(frozen=True)
class CorrectionParams:
    """Bounds and sequence reduction of the importance weights."""

    low: float = 0.5
    """Masked IS (`mis_*`): weights below this are zeroed."""
    high: float = 2.0
    """Truncated IS (`tis_*`) caps weights here; masked IS (`mis_*`) zeroes weights above it."""
    seq_reduce: str = "geometric"
    """Sequence weight: "geometric" exp(mean_t log rho) or "product" exp(sum_t log rho) (TRL, verl)."""

    def __post_init__(self) -> None:
        if self.seq_reduce not in ("geometric", "product"):
            raise ValueError(f"unknown seq_reduce {self.seq_reduce!r}; valid: geometric, product")
        if not 0 <= self.low <= self.high:
            raise ValueError(f"need 0 <= low <= high, got low={self.low}, high={self.high}")


CorrectionOut = tuple[Tensor, dict[str, Tensor]]
Correction = Callable[[Tensor, Tensor, Tensor, CorrectionParams], CorrectionOut]
IS_CORRECTIONS: Registry[Correction] = Registry("IS correction")


def _seq_rho(old_logp: Tensor, sampler_logp: Tensor, mask: Tensor, seq_reduce: str) -> Tensor:
    """Per-sequence weight (N,) from the masked token log-ratios."""
    logr = log_ratio(old_logp, sampler_logp) * mask  # (N, T)
    total = logr.sum(-1) if seq_reduce == "product" else masked_mean(logr, mask, dim=-1)  # (N,)
    return torch.exp(total.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))


def _in_band(w: Tensor, p: CorrectionParams) -> Tensor:
    """w where low <= w <= high, else 0."""
    return w * ((w >= p.low) & (w <= p.high))


def _report(weights: Tensor, old_logp: Tensor, sampler_logp: Tensor, mask: Tensor) -> CorrectionOut:
    """Detach the weights (N, T) and compute the shared stats."""
    weights, valid = weights.detach(), mask > 0
    nonempty = mask.sum(-1) > 0  # (N,)
    seq_w = masked_mean(weights, mask, dim=-1)[nonempty]  # (S,)
    gap = (old_logp - sampler_logp).detach().abs()  # (N, T)
    ess = seq_w.sum() ** 2 / (seq_w.numel() * (seq_w**2).sum()).clamp(min=1e-30)
    # the uncorrected sequence ratios' ESS (geometric mean): a mismatch shows even without correction
    raw = torch.exp(masked_mean(log_ratio(old_logp, sampler_logp).detach(), mask, dim=-1)[nonempty])  # (S,)
    raw_ess = raw.sum() ** 2 / (raw.numel() * (raw**2).sum()).clamp(min=1e-30)
    return weights, {
        "is/weight_mean": masked_mean(weights, mask),
        "is/weight_max": torch.where(valid, weights, 0).max(),
        "is/seq_weight_mean": seq_w.mean() if seq_w.numel() else weights.new_zeros(()),
        "is/seq_weight_max": seq_w.max() if seq_w.numel() else weights.new_zeros(()),
        "is/ess": ess,
        "is/raw_ess": raw_ess,
        "is/masked_frac": masked_mean((weights == 0).to(mask.dtype), mask),
        "is/logp_gap_mean": masked_mean(gap, mask),
        "is/logp_gap_max": torch.where(valid, gap, 0).max(),
    }


@IS_CORRECTIONS.register("none")
def none(old_logp: Tensor, sampler_logp: Tensor, mask: Tensor, p: CorrectionParams) -> CorrectionOut:
    """No correction: trust the sampler's tokens as if the trainer had drawn them (plain GRPO)."""
    return _report(torch.ones_like(old_logp), old_logp, sampler_logp, mask)


@IS_CORRECTIONS.register("tis_token")
def tis_token(old_logp: Tensor, sampler_logp: Tensor, mask: Tensor, p: CorrectionParams) -> CorrectionOut:
    """Truncated IS per token, min(rho_t, high) (Yao et al. 2025, fengyao.notion.site/off-policy-rl;
    verl token TIS, TRL `token_truncate`)."""
    rho = torch.exp(log_ratio(old_logp, sampler_logp))  # (N, T)
    return _report(rho.clamp(max=p.high), old_logp, sampler_logp, mask)


@IS_CORRECTIONS.register("tis_seq")
def tis_seq(old_logp: Tensor, sampler_logp: Tensor, mask: Tensor, p: CorrectionParams) -> CorrectionOut:
    """Truncated IS per sequence, min(rho_seq, high) broadcast over tokens; rho_seq is the geometric mean
    or the product per seq_reduce (Liu, Li et al. 2025, "When Speed Kills Stability")."""
    rho = _seq_rho(old_logp, sampler_logp, mask, p.seq_reduce)  # (N,)
    return _report(rho.clamp(max=p.high)[:, None].expand_as(old_logp), old_logp, sampler_logp, mask)


@IS_CORRECTIONS.register("mis_token")
def mis_token(old_logp: Tensor, sampler_logp: Tensor, mask: Tensor, p: CorrectionParams) -> CorrectionOut:
    """Masked IS per token (IcePop): rho_t kept inside [low, high], the token dropped outside (Ling team,
    arXiv:2510.18855; verl "lo_hi" threshold, TRL `token_mask`)."""
    rho = torch.exp(log_ratio(old_logp, sampler_logp))  # (N, T)
    return _report(_in_band(rho, p), old_logp, sampler_logp, mask)


@IS_CORRECTIONS.register("mis_seq")
def mis_seq(old_logp: Tensor, sampler_logp: Tensor, mask: Tensor, p: CorrectionParams) -> CorrectionOut:
    """Masked IS per sequence: the whole row is dropped when rho_seq leaves [low, high] (Liu, Li et al.
    2025, "When Speed Kills Stability"; TRL `sequence_mask`)."""
    rho = _seq_rho(old_logp, sampler_logp, mask, p.seq_reduce)  # (N,)
    return _report(_in_band(rho, p)[:, None].expand_as(old_logp), old_logp, sampler_logp, mask)
