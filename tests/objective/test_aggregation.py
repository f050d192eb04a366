import pytest
import torch

from grpo_lab.config import Config
from grpo_lab.objective.aggregation import AGGREGATIONS, BatchTotals, aggregate, masked_mean
from grpo_lab.objective.surrogates import SURROGATES, SurrogateParams


def t(rows):
    return torch.tensor(rows, dtype=torch.float64)


LOSS = t([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
MASK = t([[1, 1, 1], [1, 0, 0], [0, 0, 0]])  # lengths 3, 1, 0: valid sum = 1 + 2 + 3 + 4 = 10


def test_registered_names():
    expected = "token-mean seq-mean-token-mean seq-mean-token-sum seq-mean-token-sum-norm token-sum"
    assert AGGREGATIONS.names() == expected.split()


def test_batch_totals_of():
    assert BatchTotals.of(MASK, 7) == BatchTotals(seqs=3, nonempty_seqs=2, tokens=4, max_len=7)


HAND_VALUES = [
    ("token-mean", 10 / 4),
    ("seq-mean-token-mean", (6 / 3 + 4 / 1) / 2),  # the empty row leaves the count (TRL would use 3)
    ("seq-mean-token-sum", 10 / 3),
    ("seq-mean-token-sum-norm", 10 / (3 * 3)),
    ("token-sum", 10.0),
]


@pytest.mark.parametrize(("mode", "expected"), HAND_VALUES, ids=[case[0] for case in HAND_VALUES])
def test_hand_values(mode, expected):
    assert torch.isclose(aggregate(LOSS, MASK, mode), torch.tensor(expected, dtype=torch.float64))


def test_dr_grpo_constant_uses_max_len():
    assert torch.isclose(aggregate(LOSS, MASK, "seq-mean-token-sum-norm", max_len=5), t(10 / 15))


def test_default_mode_is_seq_mean_token_mean():
    assert torch.equal(aggregate(LOSS, MASK), aggregate(LOSS, MASK, "seq-mean-token-mean"))


def test_unknown_mode_lists_valid_ones():
    with pytest.raises(ValueError, match="valid: token-mean, seq-mean-token-mean"):
        aggregate(LOSS, MASK, "seq-sum")


def test_masked_mean():
    assert torch.allclose(masked_mean(LOSS, MASK, dim=-1), t([2.0, 4.0, 0.0]))
    assert torch.isclose(masked_mean(LOSS, MASK), t(2.5))


@pytest.mark.parametrize("mode", AGGREGATIONS.names())
def test_every_entry_documented_and_zero_on_an_empty_batch(mode):
    assert AGGREGATIONS.get(mode).__doc__.strip()
    out = aggregate(LOSS, torch.zeros_like(MASK), mode)
    assert torch.isfinite(out) and out == 0


def micro_batch_grad(mode, sizes, with_totals=True):
    """Sum of aggregate over consecutive micro-batches of `sizes` rows; gradient wrt logp."""
    torch.manual_seed(0)
    logp = (torch.randn(7, 5, dtype=torch.float64) - 1).requires_grad_()
    old = logp.detach() + 0.3 * torch.randn(7, 5, dtype=torch.float64)
    adv = torch.randn(7, 5, dtype=torch.float64)
    mask = (torch.rand(7, 5) > 0.3).double()
    mask[2] = 0  # an empty row
    totals = BatchTotals.of(mask, 5) if with_totals else None
    total, start = 0.0, 0
    for size in sizes:
        rows = slice(start, start + size)
        loss, _ = SURROGATES.get("ppo_clip")(
            logp[rows], old[rows], adv[rows], mask[rows], SurrogateParams.from_fields(Config())
        )
        total = total + aggregate(loss, mask[rows], mode, max_len=5, totals=totals)
        start += size
    (grad,) = torch.autograd.grad(total, logp)
    return total.detach(), grad


@pytest.mark.parametrize("mode", AGGREGATIONS.names())
def test_micro_batch_invariance(mode):
    full_value, full_grad = micro_batch_grad(mode, [7])
    for sizes in ([1] * 7, [3, 3, 1]):
        value, grad = micro_batch_grad(mode, sizes)
        assert torch.allclose(value, full_value) and torch.allclose(grad, full_grad)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_micro_batch_totals_are_needed(mode):
    _, full_grad = micro_batch_grad(mode, [7])
    _, grad = micro_batch_grad(mode, [3, 3, 1], with_totals=False)
    assert not torch.allclose(grad, full_grad)
