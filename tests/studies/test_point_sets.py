"""Shared designs (`comparisons.point_sets`): variants of a reference, schemes under faults, and the smoke
profile's trimming."""

import pytest

from grpo_lab import preset, profiles
from grpo_lab.comparisons.point_sets import fault_points, for_profile, variant_points

FULL, SMOKE = profiles.profile("full"), profiles.profile("smoke")


def test_for_profile_trims_only_quick_profiles():
    assert for_profile([1, 2, 3], FULL, 1) == [1, 2, 3]
    assert for_profile([1, 2, 3], SMOKE, 2) == [1, 2]
    assert for_profile(("a", "b"), SMOKE, 1) == ("a",)
    assert for_profile({"a": 1, "b": 2, "c": 3}, SMOKE, 2) == {"a": 1, "b": 2}
    with pytest.raises(ValueError, match="keep must be >= 1"):
        for_profile([1], SMOKE, 0)


def test_variant_points_change_one_thing_each():
    base = preset("grpo", steps=5, progress=False)
    variants = {"no KL": {"kl_coef": 0.0, "kl_placement": "off"}, "k2": {"kl_estimator": "k2"}}
    points = variant_points(base, variants, "grpo")
    assert [p.label for p in points] == ["grpo", "no KL", "k2"]
    assert [p.columns for p in points] == [{"variant": "grpo"}, {"variant": "no KL"}, {"variant": "k2"}]
    assert points[0].config == base
    changed = {k for k, v in points[2].config.to_dict().items() if v != base.to_dict()[k]}
    assert changed == {"kl_estimator"}


@pytest.mark.parametrize(
    ("variants", "message"),
    [
        ({"same": {"kl_coef": 0.04}}, "changes nothing"),
        ({"typo": {"kl_coeff": 0.0}}, "unknown config field"),
        ({"grpo": {"kl_coef": 0.0}}, "names the reference"),
        ({"bad": {"kl_estimator": "k9"}}, "unknown kl_estimator"),
    ],
)
def test_variant_points_refuse_bad_variants(variants, message):
    with pytest.raises(ValueError, match=message):
        variant_points(preset("grpo"), variants, "grpo")


def test_fault_points_cover_every_scheme_clean_and_at_each_level():
    base = preset("grpo", steps=7, progress=False)
    faults = {"fault_reward_sigma": [0.5, 1.0], "fault_sampler_dtype": ["bfloat16"]}
    points = fault_points(base, ["grpo", "scheme_a"], faults)
    assert len(points) == 2 * (1 + 3)
    conditions = [p.columns["condition"] for p in points[:4]]
    assert conditions == ["clean", "reward_sigma=0.5", "reward_sigma=1.0", "sampler_dtype=bfloat16"]
    scheme_a = [p for p in points if p.columns["scheme"] == "scheme_a"]
    assert all(p.config.steps == 7 and p.config.eps_high == 0.28 for p in scheme_a)  # base and preset kept
    noisy = scheme_a[2].config
    assert (noisy.fault_reward_sigma, noisy.fault_sampler_dtype) == (1.0, "none")
    assert scheme_a[0].columns == {
        "scheme": "scheme_a",
        "fault": "none",
        "level": "none",
        "condition": "clean",
    }
    assert scheme_a[1].columns["level"] == "0.5"


@pytest.mark.parametrize(
    ("faults", "message"),
    [
        ({"fault_reward_sigma": [0.0, 1.0]}, "clean value"),
        ({"fault_typo": [1.0]}, "unknown fault field"),
        ({"fault_reward_sigma": 1.0}, "non-empty list"),
        ({"fault_reward_sigma": []}, "non-empty list"),
        ({"fault_reward_flip": [1.5]}, "fault_reward_flip must be in"),
    ],
)
def test_fault_points_refuse_bad_faults(faults, message):
    with pytest.raises(ValueError, match=message):
        fault_points(preset("grpo"), ["grpo"], faults)


def test_fault_points_need_a_scheme():
    with pytest.raises(ValueError, match="at least one scheme"):
        fault_points(preset("grpo"), [], {"fault_reward_sigma": [1.0]})


def test_profile_caps_the_validation_prompts_it_displays():
    """A study's validation size is carried (and displayed) by its profile, never above the profile's."""
    assert profiles.profile("full", val_size=100).val_size == 100
    assert profiles.profile("smoke", val_size=100).val_size == profiles.PROFILES["smoke"].val_size
    assert profiles.profile("full").val_size == profiles.PROFILES["full"].val_size
