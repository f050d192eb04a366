"""Grouping a scored batch: rows of one prompt stay contiguous through every selection."""

import torch

from grpo_lab.models.sampler import Rollout
from grpo_lab.training.rollout import Scored


def scored(rewards: list[float], sizes: list[int]) -> Scored:
    n = len(rewards)
    ids = torch.arange(n)[:, None]  # (N, 1) each row's index as its only token
    rollout = Rollout(
        ids, torch.ones(n, 1), ids, torch.ones(n, 1), torch.zeros(n, 1), torch.zeros(n, dtype=torch.bool)
    )
    return Scored(
        rollout=rollout,
        rewards=torch.tensor(rewards),
        per_func={"r": torch.tensor(rewards)},
        completions=[str(i) for i in range(n)],
        prompts=[f"p{i}" for i, s in enumerate(sizes) for _ in range(s)],
        answers=[""] * n,
        group_sizes=torch.tensor(sizes),
        temperatures=torch.ones(n),
        sampled_tokens=n,
    )


def test_regroup_makes_each_prompts_rows_contiguous():
    batch = scored([0.0, 1.0, 2.0, 3.0, 4.0], [2, 3])  # rows 2-4 belong to prompts 0, 1, 0
    out = batch.regroup(torch.tensor([0, 1, 0, 1, 0]), 2)
    assert out.completions == ["0", "2", "4", "1", "3"] and out.group_sizes.tolist() == [3, 2]
    assert out.rollout.completion_ids[:, 0].tolist() == [0, 2, 4, 1, 3] and out.groups.tolist() == [3, 2]


def test_keep_groups_counts_the_dropped_and_heads_take_each_groups_first():
    batch = scored([1.0, 1.0, 0.0, 1.0, 2.0, 2.0], [2, 2, 2])
    kept = batch.keep_groups(torch.tensor([False, True, True]))
    assert kept.completions == ["2", "3", "4", "5"] and kept.dropped_groups == 1 and kept.groups == 2
    assert batch.heads(1).completions == ["0", "2", "4"]
    assert batch.first_groups(2).prompts == ["p0", "p0", "p1", "p1"]
