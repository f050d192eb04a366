"""The diversity of a step's completions (`tasks.diversity`): distinct-n, edit distance, identical
groups and the template share across prompts."""

import math

import pytest

from grpo_lab.tasks.diversity import diversity, template_share


def test_diversity_metrics():
    d = diversity(["1358", "1358", "1358", "1358", "0247", "2047", "7420", "0427"], group_size=4)
    assert d["diversity/identical_group_frac"] == 0.5
    assert d["diversity/distinct2_group"] == pytest.approx((3 / 12 + 8 / 12) / 2)
    assert 0 < d["diversity/edit_distance_group"] < 1 and d["diversity/template_frac"] == 0.0
    assert {k.split("/")[0] for k in d} == {"diversity"}
    same = diversity(["42"] * 8, group_size=2)
    assert same["diversity/identical_group_frac"] == 1.0 and same["diversity/template_frac"] == 1.0
    assert same["diversity/edit_distance_group"] == 0.0
    assert math.isnan(diversity(["", "a"], group_size=2)["diversity/distinct2_batch"])
    with pytest.raises(ValueError):
        diversity(["a", "b", "c"], group_size=2)


def test_edit_distance_pairs_are_thinned_past_max_pairs():
    group = ["a", "a", "b", "b"]  # 6 pairs, 4 of them differ
    assert diversity(group, 4)["diversity/edit_distance_group"] == pytest.approx(4 / 6)
    assert diversity(group, 4, max_pairs=1)["diversity/edit_distance_group"] == 0.0  # only ("a", "a")


def test_template_share():
    assert template_share([["a", "b"], ["a", "c"], ["d", "e"]]) == 0.5
    assert math.isnan(template_share([["a"]]))
