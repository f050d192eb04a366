"""pass@k: the unbiased estimator, which pass@1 reduces to the sampled accuracy."""

import itertools
import math

import pytest
import torch

from grpo_lab.models.evaluation import pass_at_k, pass_ks


def test_pass_at_k_is_the_chance_that_k_of_the_samples_hold_a_correct_one():
    hits = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    assert pass_at_k(hits, 1) == pytest.approx(hits.float().mean().item())
    for k in (2, 3, 4):  # by enumeration of every k-subset of each prompt's samples
        exact = [
            sum(any(row[list(c)]) for c in itertools.combinations(range(4), k)) / math.comb(4, k)
            for row in hits.tolist()
            for row in [torch.tensor(row)]
        ]
        assert pass_at_k(hits, k) == pytest.approx(sum(exact) / len(exact))
    assert pass_at_k(hits, 4) == 0.75
    with pytest.raises(ValueError, match="1 <= k <= samples"):
        pass_at_k(hits, 5)


def test_the_logged_k_are_powers_of_two_up_to_the_samples():
    assert pass_ks(4) == [2, 4] and pass_ks(6) == [2, 4] and pass_ks(1) == [] and pass_ks(16) == [2, 4, 8, 16]
