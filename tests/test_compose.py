"""The composed objective: where the KL coefficient enters scheme B's advantages."""

import torch

from grpo_lab import preset
from grpo_lab.training.compose import Objective


def scheme_b_advantages(kl_coef: float, rewards: torch.Tensor) -> torch.Tensor:
    objective = Objective(preset("scheme_b", kl_coef=kl_coef, group_size=4, task="judge"))
    torch.manual_seed(0)
    mask = torch.ones(4, 5)  # (N, T)
    old_logp, ref_logp = -torch.rand(4, 5), -torch.rand(4, 5)  # (N, T)
    kl_reward = objective.reward_kl(old_logp, ref_logp, mask, kl_coef)  # (N, T)
    adv, _ = objective.advantages(rewards, mask.sum(-1), mask, kl_reward, None)
    return adv


def test_scheme_b_advantages_follow_the_kl_coefficient():
    """The KL penalty enters the token-level return with its coefficient, beside the outcome: a
    larger coefficient moves the advantages (it does not drop out in a normalization)."""
    rewards = torch.tensor([0.80, 0.76, 0.84, 0.78])  # a judge-like dense group
    small, large = scheme_b_advantages(0.01, rewards), scheme_b_advantages(1.0, rewards)
    assert not torch.allclose(small, large, atol=1e-3)
    # a tiny coefficient leaves the task's outcome in charge: the token part follows the sequence's
    outcome_only = scheme_b_advantages(1e-8, rewards)
    assert torch.allclose(outcome_only, outcome_only[:, :1].expand_as(outcome_only), atol=1e-4)
