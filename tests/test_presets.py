import dataclasses

import pytest

from grpo_lab.config import Config
from grpo_lab.presets import (
    INCIDENTAL,
    PRESETS,
    TRICKS,
    matched_comparator,
    mechanism,
    preset,
    preset_diff,
)


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


def test_grpo_no_kl_is_grpo_without_its_kl_term():
    p = preset("grpo_no_kl")
    assert preset_diff("grpo_no_kl") == {"kl_coef": (0.04, 0.0), "kl_placement": ("loss", "off")}
    assert not p.uses_reference


@pytest.mark.parametrize("name", list(PRESETS))
def test_a_preset_and_its_matched_comparator_differ_in_its_mechanism_alone(name):
    comparator = matched_comparator(name)
    changes = PRESETS[name].changes
    assert set(preset_diff(name, comparator)) == set(mechanism(name))
    assert set(preset_diff(comparator)) == set(changes) - set(mechanism(name))  # grpo plus the incidental
    assert all(changes[k] == v for k, v in mechanism(name).items())


def test_the_methods_that_drop_the_kl_are_matched_with_grpo_without_it():
    for name in ("dr_grpo", "dapo_loss", "dapo", "gspo", "gspo_token", "cispo"):
        assert matched_comparator(name) == "grpo_no_kl"
        assert not {"kl_coef", "kl_placement"} & set(mechanism(name))
    assert mechanism("dapo_loss") == {"eps_high": 0.28, "aggregation": "token-mean"}
    # GPG's paper proposes dropping the KL: there it is the mechanism, and grpo the comparator
    assert matched_comparator("gpg") == "grpo" and mechanism("gpg")["kl_placement"] == "off"
    assert matched_comparator("grpo") == "grpo" and matched_comparator("scheme_a") == "grpo"


@pytest.mark.parametrize("name", list(INCIDENTAL))
def test_incidental_fields_are_fields_the_preset_changes(name):
    assert INCIDENTAL[name] and set(INCIDENTAL[name]) < set(PRESETS[name].changes)


def test_a_matched_comparator_must_be_a_preset(monkeypatch):
    monkeypatch.setitem(INCIDENTAL, "scheme_b", ("kl_estimator",))  # grpo with the k1 estimator: no preset
    with pytest.raises(ValueError, match="no preset is grpo with {'kl_estimator': 'k1'}"):
        matched_comparator("scheme_b")
    for fn in (matched_comparator, mechanism):
        with pytest.raises(ValueError, match="unknown preset 'nope'"):
            fn("nope")


def test_preset_diff_against_another_preset():
    assert preset_diff("dapo_loss", "grpo_no_kl") == {
        "eps_high": (0.2, 0.28),
        "aggregation": ("seq-mean-token-mean", "token-mean"),
    }
    assert preset_diff("grpo", "grpo_no_kl") == {"kl_coef": (0.0, 0.04), "kl_placement": ("off", "loss")}


def test_dapo_is_the_papers_full_recipe_and_dapo_loss_its_objective_alone():
    """DAPO (arXiv 2503.14476): clip-higher (0.2, 0.28), dynamic sampling, token-level loss, overlong
    reward shaping, no KL; each switch as `TRICKS` sets it. dapo_loss is the objective without the two
    sampling and reward tricks. Both read their mechanism against grpo_no_kl."""
    p = preset("dapo")
    assert (p.eps_low, p.eps_high, p.aggregation) == (0.2, 0.28, "token-mean")
    assert p.dynamic_sampling and p.overlong_buffer == TRICKS["overlong_shaping"]["overlong_buffer"]
    assert p.overlong_factor == 1.0  # the paper's penalty at the maximum length
    assert {**TRICKS["dynamic_sampling"], **TRICKS["overlong_shaping"]}.items() <= p.to_dict().items()
    assert (p.kl_coef, p.kl_placement, p.uses_reference) == (0.0, "off", False)
    assert mechanism("dapo") == {
        "eps_high": 0.28,
        "dynamic_sampling": True,
        "aggregation": "token-mean",
        "overlong_buffer": 8,
    }
    assert preset_diff("dapo", "dapo_loss") == {"overlong_buffer": (0, 8), "dynamic_sampling": (False, True)}
    loss = preset("dapo_loss")
    assert not loss.dynamic_sampling and loss.overlong_buffer == 0 and loss.eps_high == 0.28
    assert INCIDENTAL["dapo"] == INCIDENTAL["dapo_loss"] == ("kl_coef", "kl_placement")
    assert matched_comparator("dapo") == matched_comparator("dapo_loss") == "grpo_no_kl"
    with pytest.raises(ValueError, match="overlong_buffer"):  # its buffer needs longer completions
        preset("dapo", max_completion_length=8)


def test_cispo_caps_its_weight_one_sided_in_verl_relative_form():
    p = preset("cispo")
    assert (p.surrogate, p.cispo_mode, p.aggregation) == ("cispo", "relative", "token-mean")
    assert 1 - p.eps_low == pytest.approx(0.001)  # a floor under every ratio of the stored study runs
    assert p.eps_high == 0.01  # a cap at the median per-step 95th percentile of the ratio there
    assert not p.uses_reference
