"""Property tests of every registered objective function over random shapes, masks with empty rows
and extreme log-probs: finite values and gradients, zero on padding, and the invariances of the
advantage estimators and aggregations."""

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from grpo_lab.config import Config
from grpo_lab.objective import (
    ADVANTAGES,
    AGGREGATIONS,
    IS_CORRECTIONS,
    KL_ESTIMATORS,
    SEQ_WEIGHTS,
    SURROGATES,
    BatchTotals,
    CorrectionParams,
    SurrogateParams,
    token_advantages,
)

SETTINGS = settings(max_examples=40, deadline=None)
F64 = torch.float64
LOGP = st.floats(-1e4, 0.0, allow_nan=False)
REWARD = st.floats(-100.0, 100.0, allow_nan=False)


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tensor(a) -> torch.Tensor:
    return torch.as_tensor(np.asarray(a, dtype=np.float64), dtype=F64)


@st.composite
def shapes(draw) -> tuple[int, int, int]:
    """(N, G, T): N rows in groups of G contiguous rows, T token positions."""
    n = draw(st.integers(1, 12))
    g = draw(st.sampled_from([d for d in range(1, n + 1) if n % d == 0]))
    return n, g, draw(st.integers(1, 10))


@st.composite
def masks(draw, n: int, t: int) -> torch.Tensor:
    """A random 0/1 mask (N, T), often with some rows that hold no valid token."""
    mask = draw(arrays(np.float64, (n, t), elements=st.sampled_from([0.0, 1.0])))
    for row in draw(st.sets(st.integers(0, n - 1), max_size=n)):
        mask[row] = 0.0
    return tensor(mask)


@st.composite
def logps(draw, n: int, t: int, near: torch.Tensor | None = None) -> torch.Tensor:
    """Log-probs in [-1e4, 0]: independent of `near` (far from it), or `near` plus a small step."""
    if near is not None and draw(st.booleans()):
        step = tensor(draw(arrays(np.float64, (n, t), elements=st.floats(-1.0, 1.0))))
        return (near + step).clamp(max=0.0)
    return tensor(draw(arrays(np.float64, (n, t), elements=LOGP)))


@st.composite
def batches(draw) -> dict:
    """A batch of the shapes the objective sees: mask, current/old/ref log-probs, advantages."""
    n, g, t = draw(shapes())
    mask = draw(masks(n, t))
    logp = draw(logps(n, t))
    old = draw(logps(n, t, near=logp))
    ref = draw(logps(n, t, near=logp))
    seq_adv = tensor(draw(arrays(np.float64, (n,), elements=st.floats(-10.0, 10.0))))
    per_token = draw(st.booleans())
    adv = tensor(draw(arrays(np.float64, (n, t), elements=st.floats(-10.0, 10.0)))) if per_token else None
    adv = adv if adv is not None else seq_adv[:, None].expand(n, t).clone()  # nonzero on padding too
    return dict(n=n, g=g, t=t, mask=mask, logp=logp, old=old, ref=ref, adv=adv)


def all_finite(x: torch.Tensor) -> bool:
    return bool(torch.isfinite(x).all())


# --- surrogates ------------------------------------------------------------------------------------
# Each property loops over every registry entry on the same drawn batch (the draw is the slow part).


@SETTINGS
@given(b=batches())
def test_surrogates_finite_zero_on_padding_finite_gradient(b):
    padding = b["mask"] == 0
    for name in SURROGATES.names():
        logp = b["logp"].clone().requires_grad_(True)
        loss, stats = SURROGATES.get(name)(
            logp, b["old"], b["adv"], b["mask"], SurrogateParams.from_fields(Config())
        )
        assert loss.shape == logp.shape and loss.dtype == F64, name
        assert all_finite(loss), name
        assert bool((loss[padding] == 0).all()), f"{name}: per-token loss must be zero on padding"
        for key, value in stats.items():
            assert all_finite(torch.as_tensor(value)), (name, key)
        loss.sum().backward()
        assert logp.grad is not None and all_finite(logp.grad), name
        assert bool((logp.grad[padding] == 0).all()), f"{name}: padding must get no gradient"


# --- KL estimators ---------------------------------------------------------------------------------

NONNEGATIVE = {"k2", "k3", "abs", "k3+", "abs+"}
"""estimators documented as non-negative (their reported value)"""


@SETTINGS
@given(b=batches())
def test_kl_estimators_finite_with_finite_gradient(b):
    for name in KL_ESTIMATORS.names():
        fn = KL_ESTIMATORS.get(name)
        logp = b["logp"].clone().requires_grad_(True)
        kl = fn(logp, b["ref"])
        assert kl.shape == logp.shape and all_finite(kl), name
        if name in NONNEGATIVE:
            assert bool((kl >= -1e-12).all()), name
        (kl * b["mask"]).sum().backward()
        assert logp.grad is not None and all_finite(logp.grad), name
        assert bool((fn(b["logp"], b["logp"].clone()).abs() <= 1e-12).all()), f"{name}: KL(p, p) != 0"


# --- aggregations ----------------------------------------------------------------------------------


@st.composite
def losses(draw) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """Two per-token losses (N, T), a mask and the generation budget (>= T)."""
    n, _, t = draw(shapes())
    mask = draw(masks(n, t))
    elements = st.floats(-1e3, 1e3, allow_nan=False)
    x, y = (tensor(draw(arrays(np.float64, (n, t), elements=elements))) for _ in range(2))
    return x, y, mask, t + draw(st.integers(0, 5))


@SETTINGS
@given(case=losses(), a=st.floats(-10, 10), c=st.floats(-10, 10), data=st.data())
def test_aggregations_linear_ignore_padding_and_add_up_over_micro_batches(case, a, c, data):
    x, y, mask, max_len = case
    totals = BatchTotals.of(mask, max_len)
    empty = torch.zeros_like(mask)
    mixed = torch.where(mask > 0, x, y)  # other values only on padding
    cut = data.draw(st.integers(0, x.shape[0]))
    for name in AGGREGATIONS.names():
        fn = AGGREGATIONS.get(name)
        fx, fy, fxy = fn(x, mask, totals), fn(y, mask, totals), fn(a * x + c * y, mask, totals)
        assert fx.dim() == 0 and all(all_finite(v) for v in (fx, fy, fxy)), name
        scale = 1 + abs(a) * fx.abs() + abs(c) * fy.abs()
        assert abs(float(fxy - (a * fx + c * fy))) <= 1e-9 * float(scale) * max(1, totals.tokens), name
        assert torch.equal(fx, fn(mixed, mask, totals)), f"{name}: depends on values on padding"
        assert float(fn(x, empty, BatchTotals.of(empty, max_len))) == 0.0, f"{name}: empty batch != 0"
        # with the whole batch's totals, the micro-batch values sum to the full-batch value
        parts = [fn(x[rows], mask[rows], totals) for rows in (slice(0, cut), slice(cut, None))]
        assert torch.isclose(sum(parts), fx, rtol=1e-9, atol=1e-9), name


# --- advantages ------------------------------------------------------------------------------------


@st.composite
def rewards_batches(draw, low: float = -1e3, high: float = 1e3) -> tuple[torch.Tensor, int, torch.Tensor]:
    """Finite rewards (N,), the group size and lengths taken from a random mask."""
    n, g, t = draw(shapes())
    rewards = tensor(draw(arrays(np.float64, (n,), elements=st.floats(low, high, allow_nan=False))))
    return rewards, g, draw(masks(n, t)).sum(-1)


def group_std(rewards: torch.Tensor, g: int) -> torch.Tensor:
    """Unbiased std of each group (N/G,); 0 for groups of one."""
    return rewards.view(-1, g).std(-1) if g > 1 else torch.zeros(rewards.shape[0], dtype=F64)


@SETTINGS
@given(case=rewards_batches(), mix=st.floats(0, 1), data=st.data())
def test_advantages_finite_and_token_advantages_zero_on_padding(case, mix, data):
    rewards, g, lengths = case
    n, t = rewards.shape[0], data.draw(st.integers(1, 10))
    mask = data.draw(masks(n, t))
    token_rewards = tensor(data.draw(arrays(np.float64, (n, t), elements=st.floats(-1, 1))))
    for name in ADVANTAGES.names():
        adv = ADVANTAGES.get(name)(rewards, g, lengths, 1e-6)
        assert adv.shape == rewards.shape and all_finite(adv), name
        for tr in (None, token_rewards):
            tok = token_advantages(adv, tr, mask, g, mix, 1e-6)
            assert tok.shape == (n, t) and all_finite(tok), name
            assert bool((tok[mask == 0] == 0).all()), f"{name}: token advantages must be zero on padding"


@SETTINGS
@given(case=rewards_batches(-100, 100), shift=st.floats(-100, 100))
def test_advantages_shift_invariance(case, shift):
    rewards, g, lengths = case
    for name in ["grpo", "dr_grpo", "rloo", "lite_ppo", "batch_std"]:
        fn = ADVANTAGES.get(name)
        a, b = fn(rewards, g, lengths, 1e-6), fn(rewards + shift, g, lengths, 1e-6)
        assert torch.allclose(a, b, rtol=1e-6, atol=1e-6), (name, a, b)


@SETTINGS
@given(case=rewards_batches(-100, 100), scale=st.floats(0.1, 10))
def test_advantages_scale_invariance_away_from_eps(case, scale):
    """Away from the eps regime: every std involved is at least 1e4 eps, before and after scaling."""
    rewards, g, lengths = case
    eps = 1e-6
    n = rewards.shape[0]
    assume(g == 1 or float(group_std(rewards, g).min()) * min(scale, 1) > 1e4 * eps)
    assume(n == 1 or float(rewards.std()) * min(scale, 1) > 1e4 * eps)
    for name in ["grpo", "batch_std"]:
        fn = ADVANTAGES.get(name)
        a, b = fn(rewards, g, lengths, eps), fn(rewards * scale, g, lengths, eps)
        assert torch.allclose(a, b, rtol=1e-3, atol=1e-3), (name, a, b)


@SETTINGS
@given(case=rewards_batches())
def test_group_baseline_advantages_sum_to_zero_per_group(case):
    rewards, g, lengths = case
    varied = group_std(rewards, g) > 0  # (N/G,)
    for name in ["grpo", "dr_grpo", "rloo"]:
        adv = ADVANTAGES.get(name)(rewards, g, lengths, 1e-6).view(-1, g)
        scale = adv.abs().sum(-1) + rewards.view(-1, g).abs().sum(-1) + 1
        assert bool((adv.sum(-1).abs()[varied] <= 1e-9 * scale[varied]).all()), (name, adv)


@SETTINGS
@given(case=rewards_batches(), data=st.data())
def test_permuting_groups_permutes_advantages(case, data):
    rewards, g, lengths = case
    order = torch.tensor(data.draw(st.permutations(range(rewards.shape[0] // g))), dtype=torch.long)
    rows = (order[:, None] * g + torch.arange(g)).flatten()  # whole groups moved, order inside kept
    for name in ADVANTAGES.names():
        fn = ADVANTAGES.get(name)
        a, b = fn(rewards, g, lengths, 1e-6), fn(rewards[rows], g, lengths[rows], 1e-6)
        assert torch.allclose(b, a[rows], rtol=1e-9, atol=1e-9), (name, a[rows], b)


# --- sequence weights ------------------------------------------------------------------------------


@SETTINGS
@given(case=rewards_batches())
def test_seq_weights_finite_nonnegative_mean_one(case):
    rewards, g, lengths = case
    for name in SEQ_WEIGHTS.names():
        w = SEQ_WEIGHTS.get(name)(lengths, rewards, g)
        assert w.shape == rewards.shape and all_finite(w), name
        assert bool((w >= 0).all()), name
        assert abs(float(w.mean()) - 1) <= 1e-9, name


# --- importance corrections ------------------------------------------------------------------------


@SETTINGS
@given(b=batches())
def test_is_corrections_finite_bounded_detached(b):
    for reduce in ["geometric", "product"]:
        params = CorrectionParams(seq_reduce=reduce)
        for name in IS_CORRECTIONS.names():
            old = b["old"].clone().requires_grad_(True)
            weights, stats = IS_CORRECTIONS.get(name)(old, b["logp"], b["mask"], params)
            assert weights.shape == old.shape and all_finite(weights), (name, reduce)
            assert not weights.requires_grad and bool((weights >= 0).all()), (name, reduce)
            if name.startswith("tis"):
                assert bool((weights <= params.high).all()), (name, reduce)
            if name.startswith("mis"):
                kept = weights[weights > 0]
                assert bool(((kept >= params.low) & (kept <= params.high)).all()), (name, reduce)
            if name == "none":
                assert bool((weights == 1).all())
            for key, value in stats.items():
                assert all_finite(torch.as_tensor(value)), (name, reduce, key)
