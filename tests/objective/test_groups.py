"""Ragged groups (dynamic group size): every group statistic is the group's own, equal sizes given as a
tensor agree with the int path, and the prompt balance makes a prompt weigh the same whatever its
group size."""

import pytest
import torch

from grpo_lab.config import Config
from grpo_lab.objective import AGGREGATIONS, BatchTotals
from grpo_lab.objective.advantages import ADVANTAGES, token_advantages
from grpo_lab.objective.groups import group_sizes, padded, prompt_balance, unpadded
from grpo_lab.objective.seq_weights import SEQ_WEIGHTS
from grpo_lab.training.compose import Objective, StepTensors

E = 1e-6
SIZES = torch.tensor([3, 1, 4, 2])


def rewards_and_lengths(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randint(0, 3, (n,), generator=g).double()
    return rewards, torch.randint(1, 9, (n,), generator=g).double()


def test_padded_round_trip_and_mask():
    x = torch.arange(20.0).view(10, 2)
    g, mask = padded(x, SIZES)
    assert g.shape == (4, 4, 2) and mask.sum(-1).tolist() == SIZES.tolist()
    assert g[1, 0].tolist() == x[3].tolist() and (g[1, 1:] == 0).all()  # group 1 is row 3 alone
    assert torch.equal(unpadded(g, mask), x)


@pytest.mark.parametrize("groups", [3, torch.tensor([2, 2]), torch.tensor([4, 0, 2]), torch.tensor([[3, 3]])])
def test_groups_must_tile_the_rows(groups):
    with pytest.raises(ValueError, match="rows"):
        group_sizes(6 if isinstance(groups, torch.Tensor) else 7, groups)


@pytest.mark.parametrize("name", ADVANTAGES.names())
def test_equal_sizes_as_a_tensor_match_the_int_path(name):
    rewards, lengths = rewards_and_lengths(12)
    fn = ADVANTAGES.get(name)
    assert torch.allclose(fn(rewards, torch.tensor([4, 4, 4]), lengths, E), fn(rewards, 4, lengths, E))


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo", "opo"])
def test_group_local_estimators_use_each_groups_own_rows(name):
    rewards, lengths = rewards_and_lengths(10, seed=1)
    fn = ADVANTAGES.get(name)
    alone = [
        fn(r, len(r), ln, E) for r, ln in zip(rewards.split(SIZES.tolist()), lengths.split(SIZES.tolist()))
    ]
    assert torch.allclose(fn(rewards, SIZES, lengths, E), torch.cat(alone))


def test_batch_level_estimators_on_ragged_groups():
    rewards, lengths = rewards_and_lengths(10, seed=2)
    centred = ADVANTAGES.get("dr_grpo")(rewards, SIZES, lengths, E)
    lite = ADVANTAGES.get("lite_ppo")(rewards, SIZES, lengths, E)
    assert torch.allclose(lite, centred / (rewards.std() + E))
    whitened = ADVANTAGES.get("reinforce_pp")(rewards, SIZES, lengths, E)
    assert torch.allclose(whitened, (centred - centred.mean()) / (centred.std() + E))


def test_gpg_counts_the_rows_of_informative_ragged_groups():
    rewards = torch.tensor([5.0, 1.0, 0.0, 0.0, 2.0, 2.0])  # groups [5], [1, 0, 0], [2, 2]
    adv = ADVANTAGES.get("gpg")(rewards, torch.tensor([1, 3, 2]), torch.ones(6), E)
    alpha = 6 / 3  # only the middle group varies, and it has 3 rows
    assert torch.allclose(adv, alpha * torch.tensor([0.0, 2 / 3, -1 / 3, -1 / 3, 0.0, 0.0]))


def test_token_reward_to_go_is_whitened_within_each_ragged_group():
    g = torch.Generator().manual_seed(3)
    mask = (torch.rand(10, 5, generator=g) > 0.3).double()
    mask[:, 0] = 1
    token_rewards, seq_adv = torch.randn(10, 5, generator=g).double(), torch.randn(10, generator=g).double()
    ragged = token_advantages(seq_adv, token_rewards, mask, SIZES, 0.5, E)
    rows = SIZES.tolist()
    alone = [
        token_advantages(a, r, m, len(a), 0.5, E)
        for a, r, m in zip(seq_adv.split(rows), token_rewards.split(rows), mask.split(rows))
    ]
    assert torch.allclose(ragged, torch.cat(alone))


def test_difficulty_weights_use_each_groups_success_rate():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0])  # sizes 3, 1, 4, 2
    w = SEQ_WEIGHTS.get("difficulty")(torch.ones(10), rewards, SIZES)
    hardness = torch.tensor([2 / 3] * 3 + [0.0] + [0.5] * 4 + [1.0] * 2)
    assert torch.allclose(w, hardness * 10 / hardness.sum())


def test_prompt_balance_gives_every_prompt_the_same_total_weight():
    w = prompt_balance(torch.tensor([4, 16]), 20)
    assert w[:4].sum() == pytest.approx(10.0) and w[4:].sum() == pytest.approx(10.0)
    assert w.mean() == pytest.approx(1.0)
    assert torch.equal(prompt_balance(4, 8), torch.ones(8))


def one_step_loss(objective: Objective, rewards, mask, logp, groups, balanced: bool = True):
    """The objective's loss on one on-policy batch (no KL, no entropy bonus)."""
    lengths = mask.sum(-1)
    adv, _ = objective.advantages(rewards, lengths, mask, None, None, groups)
    if balanced:
        seq_w, totals = objective.sequence_weights(lengths, rewards, groups), objective.totals(mask, groups)
    else:
        seq_w, totals = torch.ones_like(lengths), BatchTotals.of(mask, mask.shape[1])
    fixed = StepTensors(adv, mask, seq_w, torch.ones_like(mask), None, None, None)
    return objective.loss(logp, torch.zeros_like(logp), fixed, totals, 0.0, 0.0)


@pytest.mark.parametrize("aggregation", [m for m in AGGREGATIONS.names() if m != "token-sum"])
def test_a_prompt_with_repeated_completions_weighs_what_one_copy_weighs(aggregation):
    """Prompt B's 4 completions repeated 4 times (a group of 16) next to prompt A's 4: with the prompt
    balance, loss and gradient equal those of the plain 4 + 4 batch, so the bigger group does not
    weigh 4 times more. (Dr. GRPO's centred advantage keeps the copies' advantages equal; token-sum has
    no normalizer, so its scale follows the batch by design.)"""
    objective = Objective(Config(advantage="dr_grpo", aggregation=aggregation, max_completion_length=6))
    g = torch.Generator().manual_seed(4)
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0])
    mask = (torch.rand(8, 6, generator=g) > 0.4).float()
    mask[:, 0] = 1
    base = (torch.randn(8, 6, generator=g) - 1).requires_grad_()
    rows = torch.cat([torch.arange(4), torch.arange(4, 8).repeat(4)])  # (20,) A once, B four times
    plain = one_step_loss(objective, rewards, mask, base, 4)
    ragged = one_step_loss(objective, rewards[rows], mask[rows], base[rows], torch.tensor([4, 16]))
    assert ragged.item() == pytest.approx(plain.item(), rel=1e-5)
    (g_plain,) = torch.autograd.grad(plain, base)
    (g_ragged,) = torch.autograd.grad(ragged, base)
    assert torch.allclose(g_ragged, g_plain, atol=1e-7)
    unbalanced = one_step_loss(objective, rewards[rows], mask[rows], base[rows], torch.tensor([4, 16]), False)
    (g_unbalanced,) = torch.autograd.grad(unbalanced, base)
    assert not torch.allclose(g_unbalanced, g_plain, atol=1e-4)  # without it, B would weigh more
