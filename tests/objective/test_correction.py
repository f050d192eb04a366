import math

import pytest
import torch

from grpo_lab.objective.correction import IS_CORRECTIONS, CorrectionParams


def t(rows):
    return torch.tensor(rows, dtype=torch.float64)


OLD = [[0.0, math.log(2.0)], [math.log(0.25), 0.0]]  # rho = [[1, 2], [0.25, 1]] against a zero sampler
ROOT2 = math.sqrt(2.0)


DEFAULT = CorrectionParams()
PRODUCT = CorrectionParams(seq_reduce="product")


def run(name, p=DEFAULT, mask=None, old=OLD):
    old_logp = t(old).requires_grad_()
    mask = torch.ones_like(old_logp) if mask is None else t(mask)
    return IS_CORRECTIONS.get(name)(old_logp, torch.zeros_like(old_logp), mask, p)


def close(a, b):
    return torch.allclose(a, t(b), rtol=1e-12, atol=1e-15)


def test_registered_names():
    assert IS_CORRECTIONS.names() == ["none", "tis_token", "tis_seq", "mis_token", "mis_seq"]


@pytest.mark.parametrize(
    ("name", "p", "expected"),
    [
        pytest.param("none", DEFAULT, [[1.0, 1.0], [1.0, 1.0]], id="none"),
        pytest.param("tis_token", DEFAULT, [[1.0, 2.0], [0.25, 1.0]], id="tis_token"),  # min(rho, 2)
        pytest.param("tis_token", CorrectionParams(high=1.5), [[1.0, 1.5], [0.25, 1.0]], id="tis_token-cap"),
        # geometric means sqrt(2 * 1) and sqrt(1/4 * 1)
        pytest.param("tis_seq", DEFAULT, [[ROOT2, ROOT2], [0.5, 0.5]], id="tis_seq-geometric"),
        pytest.param("tis_seq", PRODUCT, [[2.0, 2.0], [0.25, 0.25]], id="tis_seq-product"),
        pytest.param("tis_seq", CorrectionParams(high=1.2), [[1.2, 1.2], [0.5, 0.5]], id="tis_seq-cap"),
        pytest.param("mis_token", DEFAULT, [[1.0, 2.0], [0.0, 1.0]], id="mis_token"),  # 0.25 outside [0.5, 2]
        pytest.param("mis_seq", DEFAULT, [[ROOT2, ROOT2], [0.5, 0.5]], id="mis_seq-geometric"),  # inclusive
        pytest.param("mis_seq", PRODUCT, [[2.0, 2.0], [0.0, 0.0]], id="mis_seq-product"),
    ],
)
def test_hand_values(name, p, expected):
    weights, _ = run(name, p)
    assert close(weights, expected) and not weights.requires_grad


def test_stats_of_sequence_truncation():
    _, stats = run("tis_seq")
    assert math.isclose(stats["is/weight_mean"], (ROOT2 + 0.5) / 2)
    assert math.isclose(stats["is/weight_max"], ROOT2)
    assert math.isclose(stats["is/seq_weight_mean"], (ROOT2 + 0.5) / 2)
    assert math.isclose(stats["is/seq_weight_max"], ROOT2)
    assert math.isclose(stats["is/ess"], (ROOT2 + 0.5) ** 2 / (2 * (2 + 0.25)))
    assert math.isclose(stats["is/logp_gap_mean"], (math.log(2) + math.log(4)) / 4)
    assert math.isclose(stats["is/logp_gap_max"], math.log(4)) and stats["is/masked_frac"] == 0


def test_stats_of_token_masking():
    _, stats = run("mis_token")
    assert stats["is/masked_frac"] == 0.25 and stats["is/weight_max"] == 2.0
    seq = [1.5, 0.5]  # row means of the token weights
    assert math.isclose(stats["is/seq_weight_mean"], 1.0)
    assert math.isclose(stats["is/ess"], sum(seq) ** 2 / (2 * sum(w * w for w in seq)))


def test_none_has_full_ess():
    _, stats = run("none")
    assert stats["is/ess"] == 1 and stats["is/weight_mean"] == 1


def test_padding_is_excluded():
    weights, stats = run("tis_seq", mask=[[1, 1], [1, 0]], old=[[0.0, math.log(2.0)], [math.log(0.25), 9.0]])
    assert close(weights[1], [0.25, 0.25])  # geometric mean over the one valid token
    assert math.isclose(stats["is/logp_gap_max"], math.log(4))


def test_params_validation():
    with pytest.raises(ValueError, match="valid: geometric, product"):
        CorrectionParams(seq_reduce="mean")
    with pytest.raises(ValueError, match="low <= high"):
        CorrectionParams(low=3.0, high=2.0)


@pytest.mark.parametrize("name", IS_CORRECTIONS.names())
@pytest.mark.parametrize("seq_reduce", ["geometric", "product"])
def test_every_entry_documented_and_finite(name, seq_reduce):
    fn = IS_CORRECTIONS.get(name)
    assert fn.__doc__.strip()
    torch.manual_seed(0)
    old = torch.randn(4, 6) - 2
    sampler = old + 0.1 * torch.randn(4, 6)
    old[0, 0], sampler[3, 2] = -1e4, -1e4  # extreme log-probs
    mask = torch.ones(4, 6)
    mask[1] = 0  # a row with no valid token
    p = CorrectionParams(seq_reduce=seq_reduce)
    for m in (mask, torch.zeros(4, 6)):
        weights, stats = fn(old, sampler, m, p)
        assert weights.shape == (4, 6) and torch.isfinite(weights).all()
        assert all(v.dim() == 0 and torch.isfinite(v) for v in stats.values())
