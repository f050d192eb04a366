"""Policy surrogates: per-token loss (N, T) to minimize, plus detached scalar stats.

r = exp(logp - old_logp), with the log-ratio clamped to +-20 like verl (TRL does not clamp), so extreme
log-probs stay finite. `logp` carries the gradient, `old_logp` and `adv` are treated as constants.
Every returned loss is zero on padding.

Stats (over valid tokens; over non-empty sequences for `gspo`):
- `clip_ratio/low_mean` = mean[(r < low) & A < 0], `clip_ratio/high_mean` = mean[(r > high) & A > 0],
  `clip_ratio/region_mean` = their sum (TRL), with [low, high] the variant's own clip bounds; for
  `cispo`, whose bounds clip a detached weight that multiplies every token's gradient, A's sign drops
  out: mean[(r < low) & A != 0] and mean[(r > high) & A != 0], the tokens whose gradient its bound changes;
- `ratio/{mean,std,max,min,p05,p50,p95}` of the ratio the variant uses (population std);
- `frac_zero_grad`: share of valid tokens whose gradient a clip or a token selection removed, from the
  analytic clip indicator of each variant (a zero advantage or the +-20 clamp is not counted);
- `clip_ratio/dual_mean` (`ppo_clip`, `dual_clip`): share of valid tokens where the dual clip binds.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass, fields, replace

import torch
from torch import Tensor

from grpo_lab.objective.aggregation import masked_mean
from grpo_lab.registry import Registry

LOG_RATIO_CLAMP = 20.0
"""Bound on every log importance ratio before exponentiating (verl's value)."""


@dataclass(frozen=True)
class SurrogateParams:
    """Knobs of the surrogates; each variant reads only its own. The config owns their values and
    defaults (`from_fields`); only the Clip-Cov candidate bounds, which no config sets, have theirs here."""

    eps_low: float
    """Lower clip: r >= 1 - eps_low (PPO/GRPO)."""
    eps_high: float
    """Upper clip: r <= 1 + eps_high; raise it for DAPO clip-higher (0.28)."""
    dual_clip_c: float | None
    """Dual-clip bound c > 1: for A < 0 the loss is capped at -c A. None disables it."""
    cispo_mode: str
    """CISPO weight: "relative" sg(clip(r, 1-eps_low, 1+eps_high)) (verl), "absolute" sg(min(r, cap))."""
    cispo_cap: float
    """Absolute upper cap on the CISPO weight (TRL/MiniMax-M1; ScaleRL uses 5)."""
    sapo_tau_pos: float
    """SAPO gate temperature for A > 0."""
    sapo_tau_neg: float
    """SAPO gate temperature for A <= 0."""
    gmpo_eps: float
    """GMPO clip in log space: log r <= gmpo_eps, and log r >= -gmpo_eps unless gmpo_eps_low is set."""
    gmpo_eps_low: float | None
    """GMPO lower clip in log space: log r >= -gmpo_eps_low (verl `geo_mean`'s clip_ratio_low); None
    clips symmetrically at -gmpo_eps."""
    cov_ratio: float
    """Clip-Cov: fraction of valid tokens whose gradient is detached; KL-Cov: fraction of valid tokens,
    those of largest cov(logp, A), that get the |log r| penalty."""
    kl_cov_coef: float
    """KL-Cov: weight of the |log r| penalty (verl `ppo_kl_coef`)."""
    clip_cov_lb: float = 1.0
    """Clip-Cov: only tokens with centred cov(logp, A) above this are candidates."""
    clip_cov_ub: float = 5.0
    """Clip-Cov: only tokens with centred cov(logp, A) below this are candidates."""

    def __post_init__(self) -> None:
        check_clip_range(self.eps_low, self.eps_high)
        checks = [
            (
                self.dual_clip_c is None or self.dual_clip_c > 1,
                f"dual_clip_c must be > 1 or None, got {self.dual_clip_c}",
            ),
            (
                self.cispo_mode in ("relative", "absolute"),
                f"unknown cispo_mode {self.cispo_mode!r}; valid: relative, absolute",
            ),
            (self.cispo_cap > 0 and self.gmpo_eps > 0, "cispo_cap and gmpo_eps must be > 0"),
            (
                self.gmpo_eps_low is None or self.gmpo_eps_low > 0,
                f"gmpo_eps_low must be > 0 or None, got {self.gmpo_eps_low}",
            ),
            (self.sapo_tau_pos > 0 and self.sapo_tau_neg > 0, "sapo_tau_pos and sapo_tau_neg must be > 0"),
            (0 < self.cov_ratio <= 1, f"cov_ratio must be in (0, 1], got {self.cov_ratio}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    @classmethod
    def from_fields(cls, source: object) -> "SurrogateParams":
        """The knobs read from the attributes of the same name on `source` (a config, which has every
        knob without a default here). Raises ValueError on a bad value: the one place they are checked."""
        return cls(**{f.name: getattr(source, f.name) for f in fields(cls) if hasattr(source, f.name)})


def check_clip_range(eps_low: float, eps_high: float) -> None:
    """Raise ValueError unless the ratio's clip interval [1 - eps_low, 1 + eps_high] holds 1 and stays
    above 0."""
    if not 0 <= eps_low < 1:
        raise ValueError(f"eps_low must be in [0, 1), got {eps_low}")
    if eps_high < 0:
        raise ValueError(f"eps_high must be >= 0, got {eps_high}")


SurrogateOut = tuple[Tensor, dict[str, Tensor]]
Surrogate = Callable[[Tensor, Tensor, Tensor, Tensor, SurrogateParams], SurrogateOut]
SURROGATES: Registry[Surrogate] = Registry("surrogate")


def log_ratio(logp: Tensor, old_logp: Tensor) -> Tensor:
    """log(pi / pi_old), clamped to +-LOG_RATIO_CLAMP."""
    return (logp - old_logp).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)


def _clip_flags(ratio: Tensor, adv: Tensor, low: float, high: float) -> tuple[Tensor, Tensor]:
    """Where the lower clip binds (A < 0) and where the upper clip binds (A > 0)."""
    return (ratio < low) & (adv < 0), (ratio > high) & (adv > 0)


def _weight_flags(ratio: Tensor, adv: Tensor, low: float, high: float) -> tuple[Tensor, Tensor]:
    """Where a clipped detached weight's lower and upper bound bind on a token with a nonzero advantage,
    whatever its sign: such a bound rescales the token's gradient instead of removing it, so it acts on
    both signs, where PPO's clip acts only on the side whose gradient it removes."""
    live = adv != 0
    return (ratio < low) & live, (ratio > high) & live


def _ppo(ratio: Tensor, adv: Tensor, low: float, high: float, c: float | None) -> tuple[Tensor, ...]:
    """-min(r A, clip(r) A), capped at -c A for A < 0 when c is set; also (lo, hi, zero_grad) flags."""
    loss = -torch.min(ratio * adv, ratio.clamp(low, high) * adv)  # (...)
    lo, hi = _clip_flags(ratio, adv, low, high)
    zero_grad = lo | hi
    if c is not None:
        loss = torch.where(adv < 0, torch.min(loss, -c * adv), loss)
        zero_grad = zero_grad | ((adv < 0) & (ratio > c))
    return loss, lo, hi, zero_grad


def _stats(
    ratio: Tensor, lo: Tensor, hi: Tensor, zero_grad: Tensor, valid: Tensor, dist: Tensor | None = None
) -> dict[str, Tensor]:
    """The shared stats dict over `valid` entries; `dist` (1-D) replaces ratio[valid] for ratio/*."""
    n = valid.sum().clamp(min=1).to(ratio.dtype)
    values = (ratio[valid] if dist is None else dist).detach()
    if values.numel() == 0:
        values = torch.ones(1, dtype=ratio.dtype, device=ratio.device)
    q = torch.quantile(values, values.new_tensor([0.05, 0.5, 0.95]))
    low, high = (lo & valid).sum() / n, (hi & valid).sum() / n
    return {
        "clip_ratio/low_mean": low,
        "clip_ratio/high_mean": high,
        "clip_ratio/region_mean": low + high,
        "ratio/mean": values.mean(),
        "ratio/std": values.std(correction=0),
        "ratio/max": values.max(),
        "ratio/min": values.min(),
        "ratio/p05": q[0],
        "ratio/p50": q[1],
        "ratio/p95": q[2],
        "frac_zero_grad": (zero_grad & valid).sum() / n,
    }


def _soft_stats(ratio: Tensor, adv: Tensor, mask: Tensor, low: float, high: float) -> dict[str, Tensor]:
    """Stats of a token-level variant whose bounds [low, high] remove no gradient."""
    lo, hi = _clip_flags(ratio, adv, low, high)
    return _stats(ratio, lo, hi, torch.zeros_like(lo), mask > 0)


def _centred_cov(adv: Tensor, logp: Tensor, mask: Tensor) -> Tensor:
    """(A - mean A)(logp - mean logp) per token, means over valid tokens, detached (Cui et al.)."""
    logp = logp.detach()
    return (adv - masked_mean(adv, mask)) * (logp - masked_mean(logp, mask))  # (N, T)


def _top_cov(cov: Tensor, candidates: Tensor, fraction: float, n_valid: int) -> Tensor:
    """The max(1, floor(fraction * n_valid)) candidate tokens of largest cov, as a bool mask."""
    k = min(max(1, int(fraction * n_valid)), cov.numel())
    idx = torch.where(candidates, cov, -torch.inf).flatten().topk(k).indices  # (k,)
    chosen = torch.zeros(cov.numel(), dtype=torch.bool, device=cov.device)
    chosen[idx] = True
    return chosen.view_as(cov) & candidates


@SURROGATES.register("ppo_clip")
def ppo_clip(logp: Tensor, old_logp: Tensor, adv: Tensor, mask: Tensor, p: SurrogateParams) -> SurrogateOut:
    """GRPO/PPO clipped surrogate -min(rA, clip(r, 1-eps_low, 1+eps_high)A) (arXiv:1707.06347);
    eps_high > eps_low is DAPO clip-higher (arXiv:2503.14476), dual_clip_c adds the dual clip."""
    return _ppo_clip(logp, old_logp, adv, mask, 1 - p.eps_low, 1 + p.eps_high, p.dual_clip_c)


def _ppo_clip(
    logp: Tensor, old_logp: Tensor, adv: Tensor, mask: Tensor, low: float, high: float, c: float | None
) -> SurrogateOut:
    """`ppo_clip` with the ratio clipped to [low, high] and the dual clip at c (None: off)."""
    ratio = torch.exp(log_ratio(logp, old_logp))  # (N, T)
    loss, lo, hi, zero_grad = _ppo(ratio, adv, low, high, c)
    stats = _stats(ratio, lo, hi, zero_grad, mask > 0)
    dual = (adv < 0) & (ratio > c) & (mask > 0) if c else torch.zeros_like(lo)
    stats["clip_ratio/dual_mean"] = dual.sum() / (mask > 0).sum().clamp(min=1)
    return loss * mask, stats


@SURROGATES.register("dual_clip")
def dual_clip(logp: Tensor, old_logp: Tensor, adv: Tensor, mask: Tensor, p: SurrogateParams) -> SurrogateOut:
    """PPO clip plus the dual clip: for A < 0 the loss is capped at -cA, c = dual_clip_c or 3.0
    (Ye et al., arXiv:1912.09729; verl `clip_ratio_c`, TRL `delta`)."""
    return ppo_clip(logp, old_logp, adv, mask, replace(p, dual_clip_c=p.dual_clip_c or 3.0))


@SURROGATES.register("no_clip")
def no_clip(logp: Tensor, old_logp: Tensor, adv: Tensor, mask: Tensor, p: SurrogateParams) -> SurrogateOut:
    """Unclipped importance-weighted surrogate -rA: PPO without its trust region (arXiv:1707.06347)."""
    ratio = torch.exp(log_ratio(logp, old_logp))  # (N, T)
    return -ratio * adv * mask, _soft_stats(ratio, adv, mask, 1 - p.eps_low, 1 + p.eps_high)


@SURROGATES.register("pg")
def pg(logp: Tensor, old_logp: Tensor, adv: Tensor, mask: Tensor, p: SurrogateParams) -> SurrogateOut:
    """Plain REINFORCE -A logp: no ratio, no clip (GPG, arXiv:2504.02546; nanochat's on-policy GRPO)."""
    ratio = torch.exp(log_ratio(logp, old_logp)).detach()  # (N, T)
    return -adv * logp * mask, _soft_stats(ratio, adv, mask, 1 - p.eps_low, 1 + p.eps_high)


@SURROGATES.register("gspo")
def gspo(logp: Tensor, old_logp: Tensor, adv: Tensor, mask: Tensor, p: SurrogateParams) -> SurrogateOut:
    """GSPO: clip the sequence ratio s = exp(mean_t log r) against the mean advantage; the gradient flows
    through every token (arXiv:2507.18071). Sequence-level: the per-sequence loss is broadcast over the
    row's valid tokens, so seq-mean-token-mean gives its mean over sequences; stats are over sequences."""
    seq_ratio = torch.exp(masked_mean(log_ratio(logp, old_logp), mask, dim=-1))  # (N,)
    seq_adv = masked_mean(adv, mask, dim=-1)  # (N,)
    loss, lo, hi, zero_grad = _ppo(seq_ratio, seq_adv, 1 - p.eps_low, 1 + p.eps_high, None)  # (N,)
    return loss[:, None] * mask, _stats(seq_ratio, lo, hi, zero_grad, mask.sum(-1) > 0)


@SURROGATES.register("gspo_token")
def gspo_token(logp: Tensor, old_logp: Tensor, adv: Tensor, mask: Tensor, p: SurrogateParams) -> SurrogateOut:
    """GSPO-token: log s_t = logp - sg(logp) + sg(mean_t log r), clipped token-wise with per-token A; equal
    to GSPO when A is constant per sequence (arXiv:2507.18071, sec. 4.3)."""
    seq_log_ratio = masked_mean(log_ratio(logp, old_logp), mask, dim=-1).detach()  # (N,)
    ratio = torch.exp(logp - logp.detach() + seq_log_ratio[:, None])  # (N, T)
    loss, lo, hi, zero_grad = _ppo(ratio, adv, 1 - p.eps_low, 1 + p.eps_high, None)
    return loss * mask, _stats(ratio, lo, hi, zero_grad, mask > 0)


@SURROGATES.register("cispo")
def cispo(logp: Tensor, old_logp: Tensor, adv: Tensor, mask: Tensor, p: SurrogateParams) -> SurrogateOut:
    """CISPO: -sg(clipped r) A logp, so a clipped token keeps its gradient (MiniMax-M1, arXiv:2506.13585).
    cispo_mode "relative" clips to [1-eps_low, 1+eps_high] (verl), "absolute" to min(r, cispo_cap) (TRL)."""
    ratio = torch.exp(log_ratio(logp, old_logp)).detach()  # (N, T)
    low, high = (1 - p.eps_low, 1 + p.eps_high) if p.cispo_mode == "relative" else (0.0, p.cispo_cap)
    loss = -ratio.clamp(low, high) * adv * logp  # (N, T)
    lo, hi = _weight_flags(ratio, adv, low, high)
    return loss * mask, _stats(ratio, lo, hi, torch.zeros_like(lo), mask > 0)


@SURROGATES.register("sapo")
def sapo(logp: Tensor, old_logp: Tensor, adv: Tensor, mask: Tensor, p: SurrogateParams) -> SurrogateOut:
    """SAPO: the hard clip becomes a soft gate -sigmoid(tau (r - 1)) 4/tau A, tau = tau_pos if A > 0
    else tau_neg (arXiv:2511.20347). Nothing is zeroed; clip_ratio/* show where PPO's clip would bind."""
    ratio = torch.exp(log_ratio(logp, old_logp))  # (N, T)
    tau = torch.where(adv > 0, adv.new_tensor(p.sapo_tau_pos), adv.new_tensor(p.sapo_tau_neg))  # (N, T)
    loss = -torch.sigmoid(tau * (ratio - 1)) * 4 / tau * adv  # (N, T)
    return loss * mask, _soft_stats(ratio, adv, mask, 1 - p.eps_low, 1 + p.eps_high)


@SURROGATES.register("gmpo")
def gmpo(logp: Tensor, old_logp: Tensor, adv: Tensor, mask: Tensor, p: SurrogateParams) -> SurrogateOut:
    """GMPO: -mean_t(A) * exp(mean_t clipped log r), a geometric instead of arithmetic mean of token
    ratios, with a sign-aware log-space clip per token to [-gmpo_eps_low, gmpo_eps] (arXiv:2507.20673;
    verl `geo_mean`). Sequence-level: the loss is broadcast over valid tokens; clip stats are per token,
    ratio/* over sequence geometric means."""
    low = p.gmpo_eps if p.gmpo_eps_low is None else p.gmpo_eps_low
    delta = log_ratio(logp, old_logp)  # (N, T)
    sign = torch.sign(adv)  # (N, T)
    clipped = sign * torch.min(sign * delta, sign * delta.clamp(-low, p.gmpo_eps))  # (N, T)
    seq_ratio = torch.exp(masked_mean(clipped, mask, dim=-1))  # (N,)
    loss = -masked_mean(adv, mask, dim=-1) * seq_ratio  # (N,)
    ratio = torch.exp(delta).detach()  # (N, T)
    lo, hi = _clip_flags(ratio, adv, math.exp(-low), math.exp(p.gmpo_eps))
    nonempty = mask.sum(-1) > 0  # (N,)
    dist = torch.exp(masked_mean(delta, mask, dim=-1))[nonempty]  # (S,) unclipped geometric means
    return loss[:, None] * mask, _stats(ratio, lo, hi, lo | hi, mask > 0, dist)


@SURROGATES.register("clip_cov")
def clip_cov(logp: Tensor, old_logp: Tensor, adv: Tensor, mask: Tensor, p: SurrogateParams) -> SurrogateOut:
    """Clip-Cov: PPO clip, plus the gradient of a few unclipped tokens with cov(logp, A) in (lb, ub) is
    detached (arXiv:2505.22617). Deterministic: the largest-cov candidates, not verl's random subset."""
    ratio = torch.exp(log_ratio(logp, old_logp))  # (N, T)
    loss, lo, hi, zero_grad = _ppo(ratio, adv, 1 - p.eps_low, 1 + p.eps_high, p.dual_clip_c)
    cov = _centred_cov(adv, logp, mask)  # (N, T)
    candidates = (mask > 0) & ~zero_grad & (cov > p.clip_cov_lb) & (cov < p.clip_cov_ub)
    chosen = _top_cov(cov, candidates, p.cov_ratio, int(mask.sum()))  # (N, T)
    loss = torch.where(chosen, loss.detach(), loss)
    return loss * mask, _stats(ratio, lo, hi, zero_grad | chosen, mask > 0)


@SURROGATES.register("kl_cov")
def kl_cov(logp: Tensor, old_logp: Tensor, adv: Tensor, mask: Tensor, p: SurrogateParams) -> SurrogateOut:
    """KL-Cov: unclipped -rA, plus kl_cov_coef |log r| on the tokens of largest cov(logp, A)
    (arXiv:2505.22617)."""
    ratio = torch.exp(log_ratio(logp, old_logp))  # (N, T)
    cov = _centred_cov(adv, logp, mask)  # (N, T)
    chosen = _top_cov(cov, mask > 0, p.cov_ratio, int(mask.sum()))  # (N, T)
    loss = -ratio * adv + p.kl_cov_coef * (logp - old_logp).abs() * chosen  # (N, T)
    return loss * mask, _soft_stats(ratio, adv, mask, 1 - p.eps_low, 1 + p.eps_high)


def clipped_surrogate(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    eps_low: float,
    eps_high: float,
) -> SurrogateOut:
    """`ppo_clip` without the dual clip, with advantages given per sequence (N,) or per token (N, T);
    the clip range is the caller's (a config's `eps_low`, `eps_high`)."""
    check_clip_range(eps_low, eps_high)
    adv = advantages[:, None].expand_as(logp) if advantages.dim() == 1 else advantages  # (N, T)
    return _ppo_clip(logp, old_logp, adv, mask, 1 - eps_low, 1 + eps_high, None)
