"""KL to the reference policy: per-token estimators (which sample estimate) and placements (where it goes).

Estimators see one sampled token y ~ pi_theta per position and estimate KL(pi_theta || pi_ref) from
logp = log pi_theta(y) and ref_logp = log pi_ref(y) (Schulman, "Approximating KL Divergence", 2020).
Their value and their gradient are different questions: see tests/objective/test_kl.py.
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from grpo_lab.objective.surrogates import log_ratio
from grpo_lab.registry import Registry

Estimator = Callable[[Tensor, Tensor], Tensor]
KL_ESTIMATORS: Registry[Estimator] = Registry("kl estimator")


@KL_ESTIMATORS.register("k1")
def k1(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k1 = log pi - log pi_ref: unbiased, high variance, negative half the time; in the loss its
    expected gradient is 0 (Schulman 2020; arXiv:2510.01555)."""
    return logp - ref_logp


@KL_ESTIMATORS.register("k2")
def k2(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k2 = (log pi - log pi_ref)^2 / 2: biased, low variance; in the loss its gradient equals k1 in the
    reward, on-policy (Schulman 2020; arXiv:2510.01555)."""
    return 0.5 * (logp - ref_logp) ** 2


@KL_ESTIMATORS.register("k3")
def k3(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k3 = e^x - x - 1 with x = log pi_ref - log pi clamped to +-20 (verl; TRL has no clamp): GRPO's
    unbiased, non-negative estimator; in the loss it follows the forward KL (arXiv:2402.03300)."""
    x = log_ratio(ref_logp, logp)  # (N, T)
    return torch.exp(x) - x - 1


@KL_ESTIMATORS.register("abs")
def abs_kl(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """|log pi - log pi_ref|: a biased, non-negative magnitude of k1 (verl `abs`)."""
    return (logp - ref_logp).abs()


def _straight_through(value: Tensor, logp: Tensor, ref_logp: Tensor) -> Tensor:
    """Forward value `value`, gradient of k2."""
    grad_path = k2(logp, ref_logp)  # (N, T)
    return grad_path - grad_path.detach() + value.detach()


@KL_ESTIMATORS.register("k1+")
def k1_plus(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """Straight-through: reports k1, differentiates as k2, so the loss gradient is k1-in-reward's
    (verl `k1+`; arXiv:2510.01555)."""
    return _straight_through(k1(logp, ref_logp), logp, ref_logp)


@KL_ESTIMATORS.register("k3+")
def k3_plus(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """Straight-through: reports k3, differentiates as k2 (verl `k3+`/`low_var_kl+`; arXiv:2510.01555)."""
    return _straight_through(k3(logp, ref_logp), logp, ref_logp)


@KL_ESTIMATORS.register("abs+")
def abs_plus(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """Straight-through: reports |k1|, differentiates as k2 (verl `abs+`)."""
    return _straight_through(abs_kl(logp, ref_logp), logp, ref_logp)


def kl_estimate(logp: Tensor, ref_logp: Tensor, kind: str = "k3") -> Tensor:
    """Per-token KL estimate (N, T) with the registered estimator `kind`."""
    return KL_ESTIMATORS.get(kind)(logp, ref_logp)


def exact_kl(logits: Tensor, ref_logits: Tensor) -> Tensor:
    """Exact KL(pi || pi_ref) per position (N, T), summed over the vocabulary of logits (N, T, V)."""
    logq, logq_ref = torch.log_softmax(logits, -1), torch.log_softmax(ref_logits, -1)  # (N, T, V)
    return (logq.exp() * (logq - logq_ref)).sum(-1)


def importance_weighted_kl(kl: Tensor, logp: Tensor, old_logp: Tensor) -> Tensor:
    """kl * pi/pi_old with the ratio NOT detached, so an in-loss KL stays unbiased off-policy
    (DeepSeek-V3.2, arXiv:2512.02556; TRL `use_bias_correction_kl`)."""
    return kl * torch.exp(log_ratio(logp, old_logp))


@dataclass(frozen=True)
class KLTerms:
    """What a KL placement contributes: a per-token loss term and/or a per-token reward."""

    loss: Tensor | None
    """(N, T) added to the per-token policy loss before aggregation, or None."""
    reward: Tensor | None
    """(N, T) detached per-token reward, to fold into the return (`token_advantages`), or None."""


Placement = Callable[[Tensor, float, Tensor], KLTerms]
KL_PLACEMENTS: Registry[Placement] = Registry("kl placement")


@KL_PLACEMENTS.register("loss")
def in_loss(kl: Tensor, coef: float, mask: Tensor) -> KLTerms:
    """GRPO: coef * kl added to the per-token loss, differentiated directly (arXiv:2402.03300)."""
    return KLTerms(loss=coef * kl * mask, reward=None)


@KL_PLACEMENTS.register("reward")
def in_reward(kl: Tensor, coef: float, mask: Tensor) -> KLTerms:
    """PPO-RLHF: -coef * kl as a detached per-token reward, credited through the return
    (Ziegler et al., arXiv:1909.08593; verl `use_kl_in_reward`)."""
    return KLTerms(loss=None, reward=-coef * kl.detach() * mask)


@KL_PLACEMENTS.register("off")
def off(kl: Tensor, coef: float, mask: Tensor) -> KLTerms:
    """No KL regularizer (Dr. GRPO, DAPO: beta = 0)."""
    return KLTerms(loss=None, reward=None)


def placement_site(placement: str) -> str | None:
    """Where the named placement puts the KL: "loss", "reward", or None when it is off or unknown (the
    config's validation names the valid ones). Read from what the registered placement returns, so the
    registry stays the one place that knows."""
    if placement not in KL_PLACEMENTS:
        return None
    terms = KL_PLACEMENTS.get(placement)(torch.zeros(1), 1.0, torch.ones(1))
    return "loss" if terms.loss is not None else "reward" if terms.reward is not None else None


def distinct_estimators() -> list[str]:
    """The registered estimators whose values differ: all but the straight-through ones (verl's "+"
    suffix), which report their base estimator's value."""
    return [name for name in KL_ESTIMATORS.names() if not name.endswith("+")]
