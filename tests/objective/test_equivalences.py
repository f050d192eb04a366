"""Two roads to the same gradient must agree (the verl `*_vectorized_equivalence` pattern)."""

from dataclasses import replace

import pytest
import torch

from grpo_lab.config import Config
from grpo_lab.objective.advantages import ADVANTAGES, token_advantages
from grpo_lab.objective.aggregation import AGGREGATIONS, aggregate
from grpo_lab.objective.seq_weights import SEQ_WEIGHTS
from grpo_lab.objective.surrogates import SURROGATES, SurrogateParams

MODES = AGGREGATIONS.names()
DEFAULT = SurrogateParams.from_fields(Config())


def batch(seq_constant_adv=False, shift=0.0, seed=0):
    """Random float64 batch of 6 rows x 5 tokens with an empty row; old = logp + shift * noise."""
    g = torch.Generator().manual_seed(seed)
    logp = torch.randn(6, 5, dtype=torch.float64, generator=g) - 1
    old = logp + shift * torch.randn(6, 5, dtype=torch.float64, generator=g)
    adv = torch.randn(6, 5 if not seq_constant_adv else 1, dtype=torch.float64, generator=g).expand(6, 5)
    mask = (torch.rand(6, 5, generator=g) > 0.3).double()
    mask[:, 0], mask[4] = 1, 0
    return logp, old, adv, mask


def grad(name, logp, old, adv, mask, mode, p=DEFAULT):
    logp = logp.clone().requires_grad_()
    loss, _ = SURROGATES.get(name)(logp, old, adv, mask, p)
    (g,) = torch.autograd.grad(aggregate(loss, mask, mode), logp)
    return g


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ["ppo_clip", "dual_clip", "no_clip", "sapo", "cispo"])
def test_on_policy_equals_plain_pg(name, mode):
    logp, _, adv, mask = batch()
    expected = grad("pg", logp, logp, adv, mask, mode)
    assert expected.abs().sum() > 0
    assert torch.allclose(grad(name, logp, logp, adv, mask, mode), expected)


def test_clip_cov_on_policy_is_pg_except_its_detached_tokens():
    logp, _, adv, mask = batch()
    pg = grad("pg", logp, logp, adv, mask, "token-mean")
    differs = grad("clip_cov", logp, logp, adv, mask, "token-mean") != pg
    assert int(differs.sum()) == 1  # max(1, floor(2e-4 * valid tokens)) tokens


def test_cispo_token_mean_is_token_mean_reinforce():
    logp, _, adv, mask = batch()
    logp_leaf = logp.clone().requires_grad_()
    reinforce = -(adv * logp_leaf * mask).sum() / mask.sum()
    (expected,) = torch.autograd.grad(reinforce, logp_leaf)
    for mode in ("relative", "absolute"):
        got = grad("cispo", logp, logp, adv, mask, "token-mean", replace(DEFAULT, cispo_mode=mode))
        assert torch.allclose(got, expected)


def test_off_policy_ppo_differs_from_pg():
    logp, old, adv, mask = batch(shift=0.5)
    pg = grad("pg", logp, old, adv, mask, "token-mean")
    assert not torch.allclose(grad("ppo_clip", logp, old, adv, mask, "token-mean"), pg)


@pytest.mark.parametrize("shift", [0.0, 0.05, 0.5])
def test_gspo_token_equals_gspo_with_sequence_advantages(shift):
    logp, old, adv, mask = batch(seq_constant_adv=True, shift=shift)
    expected = grad("gspo", logp, old, adv, mask, "seq-mean-token-mean")
    assert expected.abs().sum() > 0
    assert torch.allclose(grad("gspo_token", logp, old, adv, mask, "seq-mean-token-mean"), expected)


def test_gspo_token_differs_from_gspo_with_token_advantages():
    logp, old, adv, mask = batch(shift=0.05)
    got = grad("gspo_token", logp, old, adv, mask, "seq-mean-token-mean")
    assert not torch.allclose(got, grad("gspo", logp, old, adv, mask, "seq-mean-token-mean"))


def test_gmpo_on_policy_is_sequence_mean_reinforce():
    logp, _, adv, mask = batch(seq_constant_adv=True)
    expected = grad("pg", logp, logp, adv, mask, "seq-mean-token-mean")
    assert torch.allclose(grad("gmpo", logp, logp, adv, mask, "seq-mean-token-mean"), expected)


def test_grpo_with_unit_std_equals_dr_grpo():
    rewards = torch.tensor([0.0, 1.0, 2.0, 5.0, 4.0, 3.0], dtype=torch.float64)  # both groups: unbiased std 1
    ones = torch.ones(6, dtype=torch.float64)
    grpo, dr = ADVANTAGES.get("grpo")(rewards, 3, ones, 0.0), ADVANTAGES.get("dr_grpo")(rewards, 3, ones, 0.0)
    assert torch.allclose(grpo, dr)


def test_reinforce_pp_is_lite_ppo_with_the_std_of_the_centred_rewards():
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 5.0, 3.0], dtype=torch.float64)
    ones = torch.ones(8, dtype=torch.float64)
    centred = ADVANTAGES.get("dr_grpo")(rewards, 2, ones, 0.0)
    expected = centred / centred.std()
    assert torch.allclose(ADVANTAGES.get("reinforce_pp")(rewards, 2, ones, 0.0), expected)
    assert not torch.allclose(ADVANTAGES.get("lite_ppo")(rewards, 2, ones, 0.0), expected)


def test_length_weights_turn_seq_mean_token_mean_into_token_mean():
    loss = torch.randn(4, 5, dtype=torch.float64)
    lengths = torch.tensor([5.0, 2.0, 1.0, 3.0], dtype=torch.float64)
    mask = (torch.arange(5) < lengths[:, None]).double()  # (4, 5)
    w = SEQ_WEIGHTS.get("length")(lengths, torch.zeros(4), 1)
    weighted = aggregate(loss * w[:, None], mask, "seq-mean-token-mean")
    assert torch.allclose(weighted, aggregate(loss, mask, "token-mean"))


def test_token_advantages_without_mix_is_the_broadcast():
    _, _, _, mask = batch()
    seq_adv = torch.randn(6, dtype=torch.float64)
    out = token_advantages(seq_adv, torch.randn(6, 5, dtype=torch.float64), mask, 3, 0.0, 1e-6)
    assert torch.equal(out, seq_adv[:, None] * mask)
