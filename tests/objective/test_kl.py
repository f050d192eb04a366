import math

import pytest
import torch

from grpo_lab.objective.kl import (
    KL_ESTIMATORS,
    KL_PLACEMENTS,
    distinct_estimators,
    exact_kl,
    importance_weighted_kl,
    kl_estimate,
    placement_site,
)


def t(rows):
    return torch.tensor(rows, dtype=torch.float64)


LOGP, REF = [[-1.0, -2.0]], [[-1.5, -1.0]]  # log pi - log pi_ref = [0.5, -1.0]
BASE = {
    "k1": [[0.5, -1.0]],
    "k2": [[0.125, 0.5]],
    "k3": [[math.exp(-0.5) + 0.5 - 1, math.exp(1.0) - 1.0 - 1]],  # e^x - x - 1, x = ref - logp
    "abs": [[0.5, 1.0]],
}


def value_and_grad(name, logp=LOGP, ref=REF):
    logp = t(logp).requires_grad_()
    kl = KL_ESTIMATORS.get(name)(logp, t(ref))
    (grad,) = torch.autograd.grad(kl.sum(), logp)
    return kl.detach(), grad


def test_registered_names():
    assert KL_ESTIMATORS.names() == ["k1", "k2", "k3", "abs", "k1+", "k3+", "abs+"]
    assert KL_PLACEMENTS.names() == ["loss", "reward", "off"]


@pytest.mark.parametrize("name", ["k1", "k2", "k3", "abs"])
def test_estimator_values(name):
    value, _ = value_and_grad(name)
    assert torch.allclose(value, t(BASE[name]))


@pytest.mark.parametrize("name", ["k1+", "k3+", "abs+"])
def test_straight_through_value_of_base_gradient_of_k2(name):
    value, grad = value_and_grad(name)
    assert torch.allclose(value, t(BASE[name[:-1]]))
    assert torch.allclose(grad, t([[0.5, -1.0]]))  # d k2 / d logp = logp - ref


def test_base_gradients():
    assert torch.allclose(value_and_grad("k1")[1], t([[1.0, 1.0]]))
    assert torch.allclose(value_and_grad("k3")[1], t([[1 - math.exp(-0.5), 1 - math.exp(1.0)]]))  # 1 - e^x
    assert torch.allclose(value_and_grad("abs")[1], t([[1.0, -1.0]]))


def test_k3_clamps_the_log_ratio_at_20():
    value, grad = value_and_grad("k3", [[-1e4]], [[0.0]])
    assert torch.allclose(value, t([[math.exp(20) - 20 - 1]])) and torch.isfinite(grad).all()


def test_kl_estimate_defaults_to_k3():
    assert torch.equal(kl_estimate(t(LOGP), t(REF)), KL_ESTIMATORS.get("k3")(t(LOGP), t(REF)))
    with pytest.raises(ValueError, match="valid: k1, k2, k3"):
        kl_estimate(t(LOGP), t(REF), "k4")


def test_exact_kl_is_the_direct_sum():
    logits, ref_logits = [0.2, -1.0, 1.5], [1.0, 0.0, -0.5]
    p = [math.exp(z) / sum(math.exp(w) for w in logits) for z in logits]
    q = [math.exp(z) / sum(math.exp(w) for w in ref_logits) for z in ref_logits]
    direct = sum(pi * math.log(pi / qi) for pi, qi in zip(p, q, strict=True))
    out = exact_kl(t([[logits, logits]]), t([[ref_logits, logits]]))  # (1, 2, 3); second position: KL = 0
    assert torch.allclose(out, t([[direct, 0.0]]))


# Exact enumeration over a vocabulary of 5 tokens at one position: "k in the loss" means the expected
# gradient sum_y pi(y) grad k(y) with pi(y) held fixed (the sample is not differentiated).
LOGITS = [0.3, -1.2, 0.8, 0.0, -0.4]
REF_LOGITS = [-0.5, 0.4, 1.1, -1.0, 0.2]


def enumerate_grad(weighted_loss):
    """grad wrt the logits of weighted_loss(logq, logq_ref, pi) over all 5 tokens."""
    logits = t(LOGITS).requires_grad_()
    logq, logq_ref = torch.log_softmax(logits, -1), torch.log_softmax(t(REF_LOGITS), -1)
    (grad,) = torch.autograd.grad(weighted_loss(logq, logq_ref, logq.exp().detach()), logits)
    return grad


def in_loss(name):
    return enumerate_grad(lambda lq, lr, pi: (pi * KL_ESTIMATORS.get(name)(lq, lr)).sum())


REVERSE = enumerate_grad(lambda lq, lr, pi: (lq.exp() * (lq - lr)).sum())  # grad KL(pi || ref)
FORWARD = enumerate_grad(lambda lq, lr, pi: (lr.exp() * (lr - lq)).sum())  # grad KL(ref || pi)


def test_k1_in_loss_has_zero_expected_gradient():
    assert torch.allclose(in_loss("k1"), torch.zeros(5, dtype=torch.float64), atol=1e-12)


def test_k2_in_loss_equals_k1_in_reward_and_the_reverse_kl_gradient():
    # REINFORCE with reward -k1: loss -sum_y pi(y) (-k1(y)) log pi(y), k1 detached
    k1_reward = enumerate_grad(lambda lq, lr, pi: (pi * (lq - lr).detach() * lq).sum())
    assert torch.allclose(in_loss("k2"), k1_reward)
    assert torch.allclose(k1_reward, REVERSE)


@pytest.mark.parametrize("name", ["k1+", "k3+", "abs+"])
def test_straight_through_in_loss_follows_the_reverse_kl(name):
    assert torch.allclose(in_loss(name), REVERSE)


def test_k3_in_loss_follows_the_forward_kl_not_the_reverse():
    assert REVERSE.norm() > 0.1 and (REVERSE - FORWARD).norm() > 0.1  # a nontrivial pair
    assert torch.allclose(in_loss("k3"), FORWARD)
    assert not torch.allclose(in_loss("k3"), REVERSE, atol=1e-3)


def test_k1_and_k3_unbiased_k2_biased_under_enumeration():
    logq, logq_ref = torch.log_softmax(t(LOGITS), -1), torch.log_softmax(t(REF_LOGITS), -1)
    true_kl = exact_kl(t(LOGITS)[None], t(REF_LOGITS)[None])
    mean = {k: (logq.exp() * KL_ESTIMATORS.get(k)(logq, logq_ref)).sum() for k in ["k1", "k2", "k3"]}
    assert torch.allclose(mean["k1"], true_kl) and torch.allclose(mean["k3"], true_kl)
    assert not torch.allclose(mean["k2"], true_kl, atol=1e-3)


def test_importance_weighted_kl_keeps_the_ratio_gradient():
    logp = t([[math.log(2.0)]]).requires_grad_()
    out = importance_weighted_kl(t([[0.1]]), logp, t([[0.0]]))
    (grad,) = torch.autograd.grad(out.sum(), logp)
    assert torch.allclose(out.detach(), t([[0.2]])) and torch.allclose(grad, t([[0.2]]))


KL = t([[0.5, -0.2, 3.0]])
MASK = t([[1.0, 1.0, 0.0]])


def test_loss_placement():
    terms = KL_PLACEMENTS.get("loss")(KL, 0.1, MASK)
    assert terms.reward is None and torch.allclose(terms.loss, t([[0.05, -0.02, 0.0]]))


def test_reward_placement_is_detached_and_negated():
    kl = KL.clone().requires_grad_()
    terms = KL_PLACEMENTS.get("reward")(kl, 0.1, MASK)
    assert terms.loss is None and not terms.reward.requires_grad
    assert torch.allclose(terms.reward, t([[-0.05, 0.02, 0.0]]))


def test_off_placement():
    terms = KL_PLACEMENTS.get("off")(KL, 0.1, MASK)
    assert terms.loss is None and terms.reward is None


@pytest.mark.parametrize("name", KL_ESTIMATORS.names())
def test_every_estimator_documented_and_finite(name):
    fn = KL_ESTIMATORS.get(name)
    assert fn.__doc__.strip()
    logp = torch.tensor([[-1e4, -0.5, 0.0], [0.0, -1e4, -3.0]], requires_grad=True)
    ref = torch.tensor([[0.0, -1e4, -1.0], [-1e4, -1e4, -2.0]])
    kl = fn(logp, ref)
    (grad,) = torch.autograd.grad(kl.sum(), logp)
    assert torch.isfinite(kl).all() and torch.isfinite(grad).all()


@pytest.mark.parametrize("name", KL_PLACEMENTS.names())
def test_every_placement_documented_and_finite(name):
    fn = KL_PLACEMENTS.get(name)
    assert fn.__doc__.strip()
    terms = fn(KL, 0.04, torch.zeros_like(MASK))
    assert all(x is None or torch.isfinite(x).all() for x in (terms.loss, terms.reward))


def test_placement_site_is_read_from_the_registered_placement():
    assert [placement_site(p) for p in ("loss", "reward", "off", "nowhere")] == ["loss", "reward", None, None]


def test_distinct_estimators_leave_out_the_straight_through_ones():
    assert distinct_estimators() == ["k1", "k2", "k3", "abs"]
