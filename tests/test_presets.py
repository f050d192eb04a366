import dataclasses

import pytest

from grpo_lab.config import Config
from grpo_lab.presets import PRESETS, preset, preset_diff


def test_grpo_preset_is_the_config_defaults():
    p = preset("grpo")
    assert p.preset == "grpo"
    assert p == Config()
    assert p.to_dict() == Config().to_dict()


@pytest.mark.parametrize("name", list(PRESETS))
def test_presets_equal_defaults_except_preset_name_and_changes(name):
    p, base = preset(name).to_dict(), Config().to_dict()
    differing = {k for k in base if base[k] != p[k]}
    assert differing - {"preset"} == set(PRESETS[name].changes)
    assert p["preset"] == name


def test_grpo_method_settings():
    p = preset("grpo")
    assert p.kl_coef == 0.04
    assert p.kl_estimator == "k3"
    assert p.kl_placement == "loss"
    assert p.eps_low == 0.2 and p.eps_high == 0.2
    assert p.surrogate == "ppo_clip"
    assert p.aggregation == "seq-mean-token-mean"
    assert p.advantage == "grpo"
    assert p.uses_reference


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_is_documented(name):
    assert PRESETS[name].doc.strip()


def test_unknown_preset_lists_valid_names():
    with pytest.raises(ValueError, match="unknown preset 'nope'") as err:
        preset("nope")
    for name in PRESETS:
        assert name in str(err.value)
    with pytest.raises(ValueError, match="unknown preset"):
        preset_diff("nope")


def test_grpo_diff_is_empty():
    assert preset_diff("grpo") == {}


def test_overrides_apply_and_are_validated():
    p = preset("grpo", seed=7, kl_coef=0.0, eps_high=0.28)
    assert (p.seed, p.kl_coef, p.eps_high, p.preset) == (7, 0.0, 0.28, "grpo")
    assert not p.uses_reference
    assert dataclasses.replace(Config(), seed=7, kl_coef=0.0, eps_high=0.28) == p
    with pytest.raises(ValueError, match="temperature"):
        preset("grpo", temperature=0.0)
    with pytest.raises(ValueError, match="unknown config field"):
        preset("grpo", nonsense=1)
