import math

import pytest
import torch

from grpo_lab.objective.advantages import ADVANTAGES, group_advantages, reward_to_go, token_advantages


def t(*rows):
    return torch.tensor(rows, dtype=torch.float64)


R = t(1.0, 0.0, 2.0, 2.0)  # two groups of G=2: [1, 0] and [2, 2]
ONES = torch.ones(4, dtype=torch.float64)
BATCH_STD = math.sqrt((0.25**2 + 1.25**2 + 0.75**2 + 0.75**2) / 3)  # unbiased std of R, mean 1.25


def test_registered_names():
    expected = ["grpo", "dr_grpo", "lite_ppo", "batch_std", "rloo", "reinforce_pp", "opo", "gpg"]
    assert ADVANTAGES.names() == expected


E = 1e-6
SD0 = math.sqrt(0.5)  # unbiased std of group [1, 0]
CENTRED_STD = math.sqrt(0.5 / 3)  # unbiased std of the centred rewards [0.5, -0.5, 0, 0]


HAND_VALUES = [
    ("grpo", [0.5 / (SD0 + E), -0.5 / (SD0 + E), 0.0, 0.0]),  # group [2, 2]: 0 / (0 + eps)
    ("dr_grpo", [0.5, -0.5, 0.0, 0.0]),
    ("lite_ppo", [0.5 / (BATCH_STD + E), -0.5 / (BATCH_STD + E), 0.0, 0.0]),
    ("batch_std", [x / (BATCH_STD + E) for x in (-0.25, -1.25, 0.75, 0.75)]),
    ("rloo", [1.0, -1.0, 0.0, 0.0]),
    ("reinforce_pp", [0.5 / (CENTRED_STD + E), -0.5 / (CENTRED_STD + E), 0.0, 0.0]),
    ("gpg", [1.0, -1.0, 0.0, 0.0]),  # alpha = 4 rows / 2 rows in the group with varied rewards
]


@pytest.mark.parametrize(("name", "expected"), HAND_VALUES, ids=[case[0] for case in HAND_VALUES])
def test_hand_values(name, expected):
    assert torch.allclose(ADVANTAGES.get(name)(R, 2, ONES, E), t(*expected), rtol=1e-12, atol=1e-15)


def test_opo_length_weighted_baseline():
    lengths = t(3.0, 1.0, 2.0, 4.0)
    # group 0: (3*1 + 1*0) / 4 = 0.75; group 1: (2*2 + 4*2) / 6 = 2
    assert torch.allclose(ADVANTAGES.get("opo")(R, 2, lengths, 0.0), t(0.25, -0.75, 0.0, 0.0))
    # a group with no tokens falls back to the plain mean
    no_tokens = torch.zeros(4, dtype=torch.float64)
    assert torch.allclose(ADVANTAGES.get("opo")(R, 2, no_tokens, 0.0), t(0.5, -0.5, 0.0, 0.0))


def test_rloo_is_leave_one_out():
    # r_i - mean of the others: 0 - 1.5, 1 - 1, 2 - 0.5
    assert torch.allclose(ADVANTAGES.get("rloo")(t(0.0, 1.0, 2.0), 3, torch.ones(3), 0.0), t(-1.5, 0.0, 1.5))


def test_gpg_alpha_is_one_when_every_group_varies():
    r = t(1.0, 0.0, 0.0, 3.0)
    assert torch.allclose(ADVANTAGES.get("gpg")(r, 2, ONES, 0.0), t(0.5, -0.5, -1.5, 1.5))


def test_grpo_std_is_unbiased():
    # [0, 1, 2]: unbiased std 1 (population std would be sqrt(2/3))
    assert torch.allclose(ADVANTAGES.get("grpo")(t(0.0, 1.0, 2.0), 3, torch.ones(3), 0.0), t(-1.0, 0.0, 1.0))


def test_grpo_eps_is_added_to_the_std():
    # (r - mean) / (std + eps) with std = 1, eps = 0.5; not sqrt(var + eps)
    out = ADVANTAGES.get("grpo")(t(0.0, 1.0, 2.0), 3, torch.ones(3), 0.5)
    assert torch.allclose(out, t(-1 / 1.5, 0.0, 1 / 1.5))


def test_group_advantages_default_eps_is_1e_6():
    out = group_advantages(t(1.0, 0.0), 2)
    assert torch.allclose(out, t(0.5, -0.5) / (math.sqrt(0.5) + 1e-6), rtol=1e-12, atol=0)
    assert not torch.allclose(out, t(0.5, -0.5) / (math.sqrt(0.5) + 1e-4), rtol=1e-12, atol=0)


def test_zero_std_group_gets_zero():
    assert torch.equal(group_advantages(t(3.0, 3.0, 3.0), 3), torch.zeros(3, dtype=torch.float64))


@pytest.mark.parametrize("name", ADVANTAGES.names())
def test_singleton_groups_are_finite(name):
    out = ADVANTAGES.get(name)(t(1.0, 0.0, 0.5), 1, t(2.0, 0.0, 1.0), 1e-6)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "lite_ppo", "rloo", "reinforce_pp", "opo", "gpg"])
def test_singleton_group_has_no_signal(name):
    out = ADVANTAGES.get(name)(t(1.0, 0.0, 0.5), 1, ONES[:3], 1e-6)
    assert torch.equal(out, torch.zeros(3, dtype=torch.float64))


@pytest.mark.parametrize(("scale", "entry"), [("group", "grpo"), ("batch", "lite_ppo"), ("none", "dr_grpo")])
def test_group_advantages_scales(scale, entry):
    assert torch.equal(group_advantages(R, 2, scale, 1e-6), ADVANTAGES.get(entry)(R, 2, ONES, 1e-6))


def test_group_advantages_invalid_scale_lists_valid_ones():
    with pytest.raises(ValueError, match="valid: group, batch, none"):
        group_advantages(R, 2, scale="std")


def test_groups_must_divide_rows():
    with pytest.raises(ValueError, match="groups of 3"):
        group_advantages(R, 3)


@pytest.mark.parametrize("name", ADVANTAGES.names())
def test_every_entry_documented_and_finite(name):
    fn = ADVANTAGES.get(name)
    assert fn.__doc__.strip()
    torch.manual_seed(0)
    rewards = torch.cat([torch.randn(6), torch.full((3,), 1.0)])  # last group has zero std
    lengths = torch.tensor([3.0, 0.0, 5.0, 1.0, 1.0, 2.0, 0.0, 0.0, 0.0])
    out = fn(rewards, 3, lengths, 1e-6)
    assert out.shape == (9,) and torch.isfinite(out).all()


MASK = t([1, 1, 1], [1, 1, 0])


def test_reward_to_go_sums_the_valid_tokens_ahead():
    x = t([1.0, 2.0, 3.0, 4.0])
    mask = t([1.0, 1.0, 1.0, 0.0])
    assert reward_to_go(x, mask).tolist() == [[6.0, 5.0, 3.0, 0.0]]
    assert reward_to_go(x, mask, include_current=False).tolist() == [[5.0, 3.0, 0.0, 0.0]]


def test_token_advantages_broadcast_without_token_rewards():
    expected = t([1.0, 1.0, 1.0], [-1.0, -1.0, 0.0])
    assert torch.equal(token_advantages(t(1.0, -1.0), None, MASK, 2, 0.5, 1e-6), expected)
    assert torch.equal(token_advantages(t(1.0, -1.0), torch.ones(2, 3), MASK, 2, 0.0, 1e-6), expected)


def test_token_advantages_mixes_whitened_reward_to_go():
    rewards = t([1.0, 0.0, 2.0], [0.0, 3.0, 5.0])  # the 5 sits on padding and is ignored
    # reward-to-go on valid tokens: [3, 2, 2] and [3, 3]; mean 2.6, unbiased std sqrt(1.2 / 4)
    std = math.sqrt(0.3)
    hi, lo = 0.4 / std, -0.6 / std
    expected = t([0.5 + 0.5 * hi, 0.5 + 0.5 * lo, 0.5 + 0.5 * lo], [-0.5 + 0.5 * hi, -0.5 + 0.5 * hi, 0.0])
    assert torch.allclose(token_advantages(t(1.0, -1.0), rewards, MASK, 2, 0.5, 0.0), expected)


def test_token_advantages_finite_with_empty_rows():
    mask = t([0, 0, 0], [1, 0, 0], [0, 0, 0], [0, 0, 0])
    out = token_advantages(t(1.0, -1.0, 0.5, 0.5), torch.randn(4, 3, dtype=torch.float64), mask, 2, 1.0, 1e-6)
    assert torch.isfinite(out).all() and torch.equal(out * (1 - mask), torch.zeros_like(out))
