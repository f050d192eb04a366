"""Per-step metrics on hand-computed cases."""

import math

import pytest
import torch

from grpo_lab.training.rollout import Growth
from grpo_lab.training.step_metrics import group_stats, growth_stats, reward_function_stats


def test_group_stats_on_ragged_groups():
    rewards = torch.tensor([1.0, 0.0, 1.0, 2.0, 2.0])  # groups [1, 0, 1], [2, 2]
    stats = group_stats(rewards, torch.tensor([3, 2]))
    std_first = math.sqrt(((1 - 2 / 3) ** 2 * 2 + (2 / 3) ** 2) / 2)  # unbiased
    assert stats["reward"] == pytest.approx(1.2)
    assert stats["reward_std"] == pytest.approx(std_first / 2)
    assert stats["frac_reward_zero_std"] == 0.5


def test_reward_function_stats_leave_out_unscored_rows():
    stats = reward_function_stats({"correct": torch.tensor([1.0, float("nan"), 0.0])})
    assert stats == {"rewards/correct/mean": 0.5, "rewards/correct/std": pytest.approx(math.sqrt(0.5))}


def test_growth_stats():
    growth = Growth(prompts=4, grown=2, rescued=1, rounds=2, extra_completions=12, extra_tokens=30)
    stats = growth_stats(growth, torch.tensor([4, 8, 12, 4]))
    assert stats["group_size/mean"] == 7 and stats["group_size/grown_frac"] == 0.5
    assert stats["group_size/rescued_frac"] == 0.5 and stats["group_size/extra_tokens"] == 30
