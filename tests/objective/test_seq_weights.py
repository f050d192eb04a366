import pytest
import torch

from grpo_lab.objective.seq_weights import SEQ_WEIGHTS


def t(*values):
    return torch.tensor(values, dtype=torch.float64)


LENGTHS = t(1.0, 3.0, 2.0, 2.0)
REWARDS = t(1.0, 0.0, 0.0, 0.0)  # group success rates 0.5 and 0


def test_registered_names():
    assert SEQ_WEIGHTS.names() == ["none", "length", "inverse_length", "difficulty"]


HAND_VALUES = [
    ("none", [1.0, 1.0, 1.0, 1.0]),
    ("length", [0.5, 1.5, 1.0, 1.0]),  # l / mean(l), mean 2
    ("inverse_length", [x / (7 / 12) for x in (1.0, 1 / 3, 0.5, 0.5)]),  # 1/l over mean(1/l) = 7/12
    ("difficulty", [2 / 3, 2 / 3, 4 / 3, 4 / 3]),  # 1 - p = [0.5, 1]; mean 0.75
]


@pytest.mark.parametrize(("name", "expected"), HAND_VALUES, ids=[case[0] for case in HAND_VALUES])
def test_hand_values(name, expected):
    assert torch.allclose(SEQ_WEIGHTS.get(name)(LENGTHS, REWARDS, 2), t(*expected))


def test_difficulty_clamps_rewards_to_success_rates():
    out = SEQ_WEIGHTS.get("difficulty")(LENGTHS, t(3.0, -2.0, 0.0, 0.0), 2)  # clamped to [1, 0]
    assert torch.allclose(out, t(2 / 3, 2 / 3, 4 / 3, 4 / 3))


def test_all_zero_raw_weights_fall_back_to_ones():
    ones = torch.ones(4, dtype=torch.float64)
    assert torch.equal(SEQ_WEIGHTS.get("difficulty")(LENGTHS, ones, 2), ones)  # every prompt solved
    assert torch.equal(SEQ_WEIGHTS.get("length")(torch.zeros(4, dtype=torch.float64), REWARDS, 2), ones)


@pytest.mark.parametrize("name", SEQ_WEIGHTS.names())
def test_every_entry_documented_finite_and_mean_one(name):
    fn = SEQ_WEIGHTS.get(name)
    assert fn.__doc__.strip()
    torch.manual_seed(0)
    lengths = torch.tensor([0.0, 5.0, 1.0, 0.0, 7.0, 2.0])
    out = fn(lengths, torch.rand(6), 3)
    assert torch.isfinite(out).all() and torch.isclose(out.mean(), torch.tensor(1.0))
