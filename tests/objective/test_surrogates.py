import math
from dataclasses import replace

import pytest
import torch

from grpo_lab.config import Config
from grpo_lab.objective.surrogates import SURROGATES, SurrogateParams, clipped_surrogate

P = SurrogateParams.from_fields(Config())
"""the surrogate knobs at the config's defaults (the config owns them)"""
RATIOS = [[1.5, 0.5], [1.1, 0.7]]
TOKEN_ADV = [[1.0, -1.0], [-1.0, 1.0]]  # clip high binds at (0,0), clip low at (0,1)
SEQ_ADV = [[1.0, 1.0], [-1.0, -1.0]]


def t(rows):
    return torch.tensor(rows, dtype=torch.float64)


def run(name, ratios=RATIOS, adv=TOKEN_ADV, mask=None, p=P, old=None):
    """Surrogate at logp = log(ratios), old_logp = 0 (or `old`); returns loss, stats, d sum(loss) / d logp."""
    logp = t(ratios).log().requires_grad_()
    old_logp = torch.zeros_like(logp) if old is None else t(old)
    mask = torch.ones_like(logp) if mask is None else t(mask)
    loss, stats = SURROGATES.get(name)(logp, old_logp, t(adv), mask, p)
    (grad,) = torch.autograd.grad(loss.sum(), logp)
    return loss.detach(), stats, grad


def close(a, b):
    return torch.allclose(a, t(b), rtol=1e-9, atol=1e-12)


def test_registered_names():
    expected = "ppo_clip dual_clip no_clip pg gspo gspo_token cispo sapo gmpo clip_cov kl_cov"
    assert SURROGATES.names() == expected.split()


def test_ppo_clip_hand_values_and_stats():
    loss, stats, grad = run("ppo_clip")
    # (1.5, A=1): -min(1.5, 1.2); (0.5, A=-1): -min(-0.5, -0.8); (1.1, A=-1): 1.1; (0.7, A=1): -0.7
    assert close(loss, [[-1.2, 0.8], [1.1, -0.7]])
    assert close(grad, [[0.0, 0.0], [1.1, -0.7]])  # -A r where unclipped
    assert stats["clip_ratio/low_mean"] == 0.25 and stats["clip_ratio/high_mean"] == 0.25
    assert stats["clip_ratio/region_mean"] == 0.5 and stats["frac_zero_grad"] == 0.5
    assert math.isclose(stats["ratio/mean"], 0.95) and stats["ratio/max"] == 1.5 and stats["ratio/min"] == 0.5
    assert math.isclose(stats["ratio/std"], math.sqrt(0.59 / 4))  # population std
    # linear-interpolated quantiles of [0.5, 0.7, 1.1, 1.5]
    assert math.isclose(stats["ratio/p05"], 0.53) and math.isclose(stats["ratio/p50"], 0.9)
    assert math.isclose(stats["ratio/p95"], 1.44)


def test_ppo_clip_higher():
    loss, stats, grad = run("ppo_clip", p=replace(P, eps_high=0.6))
    assert close(loss[0], [-1.5, 0.8]) and close(grad[0], [-1.5, 0.0])
    assert stats["clip_ratio/high_mean"] == 0


def test_ppo_clip_ignores_padding():
    loss, stats, _ = run("ppo_clip", mask=[[1, 0], [1, 1]])
    assert close(loss, [[-1.2, 0.0], [1.1, -0.7]])
    assert math.isclose(stats["clip_ratio/high_mean"], 1 / 3) and stats["clip_ratio/low_mean"] == 0


def test_dual_clip_caps_negative_advantage_loss():
    plain = run("ppo_clip", [[4.0]], [[-1.0]])
    assert close(plain[0], [[4.0]]) and close(plain[2], [[4.0]])
    for name, p in [("ppo_clip", replace(P, dual_clip_c=3.0)), ("dual_clip", P)]:
        loss, stats, grad = run(name, [[4.0]], [[-1.0]], p=p)
        assert close(loss, [[3.0]]) and close(grad, [[0.0]]) and stats["frac_zero_grad"] == 1
    loss, _, _ = run("dual_clip", [[4.0]], [[-1.0]], p=replace(P, dual_clip_c=2.0))
    assert close(loss, [[2.0]])


def test_surrogate_params_validation():
    with pytest.raises(ValueError, match="> 1"):
        replace(P, dual_clip_c=1.0)
    with pytest.raises(ValueError, match="valid: relative, absolute"):
        replace(P, cispo_mode="both")


def test_no_clip():
    loss, stats, grad = run("no_clip")
    assert close(loss, [[-1.5, 0.5], [1.1, -0.7]]) and close(grad, [[-1.5, 0.5], [1.1, -0.7]])
    assert stats["frac_zero_grad"] == 0 and stats["clip_ratio/region_mean"] == 0.5


def test_pg_is_minus_advantage_times_logp():
    loss, stats, grad = run("pg")
    assert close(loss, [[-math.log(1.5), math.log(0.5)], [math.log(1.1), -math.log(0.7)]])
    assert close(grad, [[-1.0, 1.0], [1.0, -1.0]]) and stats["frac_zero_grad"] == 0


def test_gspo_sequence_ratio_and_broadcast():
    loss, stats, grad = run("gspo", adv=SEQ_ADV)
    s0, s1 = math.sqrt(1.5 * 0.5), math.sqrt(1.1 * 0.7)  # geometric means 0.866, 0.877
    assert close(loss, [[-s0, -s0], [s1, s1]])
    # d/dlogp_t of the broadcast loss (2 copies of -A s) = 2 * (-A s / 2)
    assert close(grad, [[-s0, -s0], [s1, s1]])
    assert math.isclose(stats["ratio/mean"], (s0 + s1) / 2) and stats["frac_zero_grad"] == 0


def test_gspo_clips_the_sequence():
    loss, stats, grad = run("gspo", adv=SEQ_ADV, p=replace(P, eps_low=0.1, eps_high=0.1))
    s0 = math.sqrt(0.75)
    assert close(loss, [[-s0, -s0], [0.9, 0.9]]) and close(grad[1], [0.0, 0.0])  # s1 = 0.877 < 0.9, A < 0
    assert stats["clip_ratio/low_mean"] == 0.5 and stats["frac_zero_grad"] == 0.5  # over sequences


def test_gspo_padding_and_mean_advantage():
    loss, _, _ = run("gspo", adv=[[1.0, 1.0], [-3.0, 9.0]], mask=[[1, 1], [1, 0]])
    s0 = math.sqrt(0.75)
    assert close(loss, [[-s0, -s0], [3.3, 0.0]])  # s = 1.1, A = mean over valid tokens = -3


def test_gspo_token_values_equal_sequence_ratio():
    loss, stats, _ = run("gspo_token", adv=SEQ_ADV)
    s0, s1 = math.sqrt(0.75), math.sqrt(0.77)
    assert close(loss, [[-s0, -s0], [s1, s1]]) and math.isclose(stats["ratio/max"], s1)


def test_cispo_relative():
    loss, stats, grad = run("cispo")
    w = [[1.2, 0.8], [1.1, 0.8]]  # sg(clip(r, 0.8, 1.2))
    assert close(grad, [[-1.2, 0.8], [1.1, -0.8]])  # -w A: clipped tokens keep a gradient
    expected = [[-w[i][j] * TOKEN_ADV[i][j] * math.log(RATIOS[i][j]) for j in range(2)] for i in range(2)]
    assert close(loss, expected)
    # its bounds bind on 1.5 (above 1.2), 0.5 and 0.7 (below 0.8), whatever the sign of A: the weight
    # of each changes, while PPO's clip would count 0.7 (A > 0) as unclipped
    assert stats["frac_zero_grad"] == 0 and stats["clip_ratio/region_mean"] == 0.75
    assert stats["clip_ratio/high_mean"] == 0.25 and stats["clip_ratio/low_mean"] == 0.5


def test_cispo_absolute_cap():
    _, stats, grad = run("cispo", p=replace(P, cispo_mode="absolute", cispo_cap=1.3))
    assert close(grad, [[-1.3, 0.5], [1.1, -0.7]])  # -min(r, 1.3) A, no lower bound
    assert stats["clip_ratio/high_mean"] == 0.25 and stats["clip_ratio/low_mean"] == 0


def test_cispo_clip_rate_counts_the_tokens_whose_gradient_its_cap_changes():
    """The cap binds above 1 + eps_high for either sign of A; a token with A = 0 has no gradient to
    change; eps_low 0.999 (the preset's) leaves no lower bound for these ratios."""
    p = replace(P, eps_low=0.999, eps_high=0.01)
    ratios, adv = [[1.5, 1.02, 1.005], [0.5, 1.3, 1.2]], [[1.0, -1.0, 1.0], [-1.0, 0.0, -1.0]]
    _, stats, grad = run("cispo", ratios=ratios, adv=adv, p=p)
    assert close(grad, [[-1.01, 1.01, -1.005], [0.5, 0.0, 1.01]])  # -min(r, 1.01) A
    assert stats["clip_ratio/high_mean"] == 3 / 6  # 1.5, 1.02 (A < 0), 1.2 (A < 0); not 1.3 (A = 0)
    assert stats["clip_ratio/low_mean"] == 0 and stats["frac_zero_grad"] == 0
    _, masked, _ = run("cispo", ratios=ratios, adv=adv, p=p, mask=[[1, 1, 1], [1, 1, 0]])
    assert masked["clip_ratio/high_mean"] == 2 / 5  # padding never counts


def test_sapo_soft_gate():
    def sig(x):
        return 1 / (1 + math.exp(-x))

    loss, stats, grad = run("sapo")
    tau = [[1.0, 1.05], [1.05, 1.0]]  # tau_pos where A > 0, tau_neg elsewhere
    gate = [[sig(tau[i][j] * (RATIOS[i][j] - 1)) * 4 / tau[i][j] for j in range(2)] for i in range(2)]
    assert close(loss, [[-gate[i][j] * TOKEN_ADV[i][j] for j in range(2)] for i in range(2)])
    # d/dlogp = -A * 4 sig'(x) r with x = tau (r - 1), sig' = sig (1 - sig)
    x = [[tau[i][j] * (RATIOS[i][j] - 1) for j in range(2)] for i in range(2)]
    dgate = [[4 * sig(x[i][j]) * (1 - sig(x[i][j])) * RATIOS[i][j] for j in range(2)] for i in range(2)]
    assert close(grad, [[-dgate[i][j] * TOKEN_ADV[i][j] for j in range(2)] for i in range(2)])
    assert stats["frac_zero_grad"] == 0


def test_gmpo_geometric_mean_with_sign_aware_clip():
    loss, stats, grad = run("gmpo", adv=SEQ_ADV)
    # A > 0 row: log r = [0.405, -0.693] -> [0.4 (upper clip), -0.693]; A < 0 row: lower clip does not bind
    rho0 = math.exp((0.4 + math.log(0.5)) / 2)
    rho1 = math.exp((math.log(1.1) + math.log(0.7)) / 2)
    assert close(loss, [[-rho0, -rho0], [rho1, rho1]])
    assert close(grad, [[0.0, -rho0], [rho1, rho1]])  # 2 broadcast copies x d(-A rho)/dlogp_t = -A rho / 2
    assert stats["clip_ratio/high_mean"] == 0.25 and stats["frac_zero_grad"] == 0.25
    s0, s1 = math.sqrt(0.75), math.sqrt(0.77)  # ratio/* over unclipped sequence geometric means
    assert math.isclose(stats["ratio/min"], s0) and math.isclose(stats["ratio/max"], s1)


def test_gmpo_lower_clip_for_negative_advantage():
    loss, _, grad = run("gmpo", [[0.5, 1.0]], [[-1.0, -1.0]])
    rho = math.exp(-0.4 / 2)  # log 0.5 clipped up to -0.4
    assert close(loss, [[rho, rho]]) and close(grad, [[0.0, rho]])


def test_gmpo_asymmetric_clip_takes_its_own_lower_bound():
    """verl's geo_mean clips log r to [-low, high]: a lower bound of 0.2 binds at log 0.5 for A < 0,
    while the upper bound stays gmpo_eps for A > 0."""
    p = replace(P, gmpo_eps_low=0.2)
    loss, stats, grad = run("gmpo", [[0.5, 1.0]], [[-1.0, -1.0]], p=p)
    rho = math.exp(-0.2 / 2)  # log 0.5 clipped up to -0.2
    assert close(loss, [[rho, rho]]) and close(grad, [[0.0, rho]]) and stats["clip_ratio/low_mean"] == 0.5
    high, _, _ = run("gmpo", [[1.5, 0.5]], [[1.0, 1.0]], p=p)
    assert torch.equal(high, run("gmpo", [[1.5, 0.5]], [[1.0, 1.0]])[0])  # log 1.5 clipped at 0.4 either way


def test_gmpo_symmetric_default_is_the_lower_bound_at_gmpo_eps():
    default = run("gmpo", adv=SEQ_ADV)
    explicit = run("gmpo", adv=SEQ_ADV, p=replace(P, gmpo_eps_low=P.gmpo_eps))
    assert P.gmpo_eps_low is None
    assert all(torch.equal(a, b) for a, b in zip((default[0], default[2]), (explicit[0], explicit[2])))
    assert {k: float(v) for k, v in default[1].items()} == {k: float(v) for k, v in explicit[1].items()}
    with pytest.raises(ValueError, match="gmpo_eps_low must be > 0"):
        Config(gmpo_eps_low=0.0)


COV_LOGP = [[-1.0, -3.0], [-3.0, -3.0]]
COV_ADV = [[2.0, 1.0], [0.0, 0.0]]
# centred cov (A - 0.75)(logp + 2.5): [[1.875, -0.125], [0.375, 0.375]]; only (0,0) lies in (1, 5)


def run_cov(name, p=P, old_shift=0.0):
    logp = t(COV_LOGP).requires_grad_()
    old = logp.detach() - t([[old_shift, 0.0], [0.0, 0.0]])
    loss, stats = SURROGATES.get(name)(logp, old, t(COV_ADV), torch.ones(2, 2, dtype=torch.float64), p)
    (grad,) = torch.autograd.grad(loss.sum(), logp)
    return loss.detach(), stats, grad


def test_clip_cov_detaches_the_top_cov_token():
    loss, stats, grad = run_cov("clip_cov")
    assert close(loss, [[-2.0, -1.0], [0.0, 0.0]])  # value unchanged
    assert close(grad, [[0.0, -1.0], [0.0, 0.0]]) and stats["frac_zero_grad"] == 0.25
    _, _, grad = run_cov("clip_cov", p=replace(P, clip_cov_ub=1.5))  # 1.875 out of (lb, ub)
    assert close(grad, [[-2.0, -1.0], [0.0, 0.0]])


def test_kl_cov_penalizes_the_top_cov_token():
    loss, stats, grad = run_cov("kl_cov", old_shift=0.5)
    r = math.exp(0.5)
    assert close(loss, [[-2 * r + 0.1 * 0.5, -1.0], [0.0, 0.0]])
    assert close(grad, [[-2 * r + 0.1, -1.0], [0.0, 0.0]]) and stats["frac_zero_grad"] == 0


def test_clipped_surrogate_accepts_sequence_advantages():
    logp, old = t(RATIOS).log(), torch.zeros(2, 2, dtype=torch.float64)
    mask = torch.ones(2, 2, dtype=torch.float64)
    loss, stats = clipped_surrogate(logp, old, t([1.0, -1.0]), mask, eps_low=0.2, eps_high=0.3)
    expected, _ = SURROGATES.get("ppo_clip")(
        logp, old, t(SEQ_ADV), mask, replace(P, eps_low=0.2, eps_high=0.3)
    )
    assert torch.equal(loss, expected) and close(loss, [[-1.3, -0.5], [1.1, 0.8]])
    with pytest.raises(ValueError, match="eps_low must be in"):
        clipped_surrogate(logp, old, t([1.0, -1.0]), mask, eps_low=1.0, eps_high=0.3)


@pytest.mark.parametrize("name", SURROGATES.names())
def test_every_entry_documented_and_finite(name):
    fn = SURROGATES.get(name)
    assert fn.__doc__.strip()
    torch.manual_seed(0)
    logp = (torch.randn(6, 5) - 2).requires_grad_()
    old = logp.detach() + torch.randn(6, 5)
    with torch.no_grad():
        logp[0, 0], old[0, 1], logp[2, 4] = -1e4, -1e4, -1e4  # extreme log-probs, valid and padding
    mask = torch.ones(6, 5)
    mask[1] = 0  # a row with no valid token
    mask[2, 3:] = 0
    adv = torch.randn(6, 1).expand(6, 5)
    loss, stats = fn(logp, old, adv, mask, replace(P, dual_clip_c=3.0))
    (grad,) = torch.autograd.grad(loss.sum(), logp)
    assert loss.shape == (6, 5) and torch.isfinite(loss).all() and torch.isfinite(grad).all()
    assert torch.equal(loss * (1 - mask), torch.zeros_like(loss))
    assert all(v.dim() == 0 and torch.isfinite(v) and not v.requires_grad for v in stats.values())
    empty_loss, empty_stats = fn(logp, old, adv, torch.zeros(6, 5), P)
    assert torch.isfinite(empty_loss).all() and all(torch.isfinite(v) for v in empty_stats.values())


def test_surrogate_params_from_a_config_take_its_fields_of_the_same_name():
    p = SurrogateParams.from_fields(Config(gmpo_eps=0.3, cov_ratio=0.1, eps_high=0.28))
    assert (p.gmpo_eps, p.cov_ratio, p.eps_high, p.clip_cov_ub) == (0.3, 0.1, 0.28, 5.0)
    with pytest.raises(ValueError, match="cov_ratio must be in"):
        replace(P, cov_ratio=0.0)
