import dataclasses
import hashlib
import json

import pytest

from grpo_lab import objective
from grpo_lab.config import Config, field_doc, field_names, parse_override
from grpo_lab.tasks import TASKS


def test_defaults_are_valid_and_derived_fields_computed():
    c = Config()
    assert c.preset == "grpo"
    assert c.batch_size == c.prompts_per_step * c.group_size == 64
    assert c.uses_reference is True


@pytest.mark.parametrize(
    "changes, batch_size, uses_reference",
    [
        ({"prompts_per_step": 3, "group_size": 5}, 15, True),
        ({"kl_placement": "off"}, 64, False),
        ({"kl_coef": 0.0}, 64, False),
        ({"kl_placement": "reward", "kl_coef": 0.1}, 64, True),
    ],
)
def test_derived_fields(changes, batch_size, uses_reference):
    c = Config(**changes)
    assert c.batch_size == batch_size
    assert c.uses_reference is uses_reference


def test_the_kl_monitor_runs_the_reference_without_a_kl_term_using_it():
    watched = Config(kl_coef=0.0, kl_placement="off", kl_monitor=True)
    assert watched.reference_forward and not watched.uses_reference
    assert not Config(kl_coef=0.0).reference_forward and Config().reference_forward
    assert Config(kl_monitor=True).key() != Config().key()


def test_derived_fields_are_not_init_or_serialized():
    with pytest.raises(TypeError):
        Config(batch_size=3)
    d = Config().to_dict()
    assert "batch_size" not in d and "uses_reference" not in d and "reference_forward" not in d
    assert set(d) == set(field_names())


def test_json_round_trip():
    c = Config(
        seed=3,
        rewards=("correct", "format"),
        reward_weights=(1.0, 0.5),
        dual_clip_c=3.0,
        lora=True,
        learning_rate=1e-4,
    )
    text = c.to_json()
    assert json.loads(text)["rewards"] == ["correct", "format"]
    back = Config.from_json(text)
    assert back == c
    assert back.rewards == ("correct", "format") and isinstance(back.rewards, tuple)
    assert back.reward_weights == (1.0, 0.5)
    assert back.key() == c.key()
    assert Config.from_json(Config().to_json()) == Config()


def test_key_is_stable_and_sensitive():
    k = Config().key()
    assert len(k) == 16 and all(ch in "0123456789abcdef" for ch in k)
    assert Config().key() == k
    assert Config(seed=1).key() != k
    assert Config(eps_high=0.28).key() != k
    assert Config(seed=1).replace(seed=0).key() == k


def test_key_reads_only_the_fields_set_away_from_their_defaults():
    """A field added with a default that keeps behaviour must not re-key a kept store: the key is
    the hash of the changed fields alone, so it matches that hash computed by hand."""
    c = Config(seed=3, eps_high=0.28)
    changed = json.dumps({"eps_high": 0.28, "seed": 3}, sort_keys=True)
    assert c.key() == hashlib.sha256(changed.encode()).hexdigest()[:16]


@pytest.mark.parametrize("name", field_names())
def test_every_field_has_a_one_line_doc(name):
    doc = field_doc(name)
    assert doc.strip(), f"field {name!r} has no doc"
    assert "\n" not in doc.strip()


def test_field_doc_of_derived_and_unknown():
    assert "prompts_per_step" in field_doc("batch_size")
    assert field_doc("no_such_field") == ""


@pytest.mark.parametrize(
    "field, valid",
    [
        ("advantage", objective.ADVANTAGES.names()),
        ("surrogate", objective.SURROGATES.names()),
        ("kl_estimator", objective.KL_ESTIMATORS.names()),
        ("kl_placement", objective.KL_PLACEMENTS.names()),
        ("aggregation", objective.AGGREGATIONS.names()),
        ("task", list(TASKS)),
        ("device", ["auto", "cpu", "cuda"]),
    ],
)
def test_unknown_name_lists_valid_choices(field, valid):
    with pytest.raises(ValueError) as err:
        Config(**{field: "bogus_name"})
    msg = str(err.value)
    assert field in msg and "bogus_name" in msg
    assert len(valid) >= 2
    for name in valid:
        assert name in msg


def test_unknown_field_in_from_dict():
    with pytest.raises(ValueError, match="unknown config field.*'nonsense'") as err:
        Config.from_dict({"nonsense": 1, "seed": 2})
    assert "kl_coef" in str(err.value)  # lists the valid fields


@pytest.mark.parametrize(
    "changes, fragment",
    [
        ({"steps": -1}, "steps must be >= 1"),
        ({"steps": 0}, "steps must be >= 1"),
        ({"eps_low": 1.0}, "eps_low"),
        ({"eps_low": 1.5}, "eps_low"),
        ({"temperature": 0.0}, "temperature"),
        ({"dual_clip_c": 1.0}, "dual_clip_c"),
        ({"dual_clip_c": 0.5}, "dual_clip_c"),
        ({"rewards": ("correct",), "reward_weights": (1.0, 2.0)}, "reward_weights"),
        ({"reward_weights": (1.0,)}, "reward_weights"),
        ({"prompts_per_step": 2, "group_size": 4, "micro_batch_size": 9}, "micro_batch_size"),
        ({"advantage": "rloo", "group_size": 1}, "rloo"),
        ({"is_low": 1.5}, "is_low"),
        ({"is_low": 0.0}, "is_low"),
        ({"seed": -1}, "seed"),
        ({"kl_coef": -0.1}, "kl_coef"),
        ({"group_size_max": 0}, "group_size_max must be >= 1"),
        ({"dynamic_group_size": True, "group_size": 8, "group_size_max": 8}, "group_size_max > group_size"),
        (
            {"dynamic_group_size": True, "fault_group_fraction": 0.5},
            "incompatible switches: dynamic_group_size",
        ),
    ],
)
def test_invalid_values_name_the_field(changes, fragment):
    with pytest.raises(ValueError, match=fragment):
        Config(**changes)


@pytest.mark.parametrize(
    "changes",
    [
        {"dual_clip_c": 1.01},
        {"eps_low": 0.0},
        {"prompts_per_step": 2, "group_size": 4, "micro_batch_size": 8},
        {"advantage": "rloo", "group_size": 2},
        {"is_low": 1.0, "is_high": 1.0},
        {"rewards": ("correct", "format"), "reward_weights": (1.0, 0.1)},
        {"dynamic_group_size": True, "group_size": 8, "group_size_max": 9},
        {"group_size": 32, "group_size_max": 16},  # the bound only matters with dynamic group size
    ],
)
def test_boundary_values_are_accepted(changes):
    c = Config(**changes)
    for k, v in changes.items():
        assert getattr(c, k) == v


def test_config_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Config().seed = 3


@pytest.mark.parametrize(
    "text, expected",
    [
        ("steps=5", ("steps", 5)),
        ("seed=12", ("seed", 12)),
        ("kl_coef=0.1", ("kl_coef", 0.1)),
        ("learning_rate=1e-4", ("learning_rate", 1e-4)),
        ("lora_alpha=32", ("lora_alpha", 32.0)),
        ("lora=true", ("lora", True)),
        ("lora=False", ("lora", False)),
        ("progress=0", ("progress", False)),
        ("progress=yes", ("progress", True)),
        ("rewards=correct,format", ("rewards", ("correct", "format"))),
        ("reward_weights=1,0.5", ("reward_weights", (1.0, 0.5))),
        ("rewards=", ("rewards", ())),
        ("dual_clip_c=None", ("dual_clip_c", None)),
        ("dual_clip_c=null", ("dual_clip_c", None)),
        ("dual_clip_c=3", ("dual_clip_c", 3.0)),
        ("model=/tmp/x=y", ("model", "/tmp/x=y")),
        ("surrogate=gspo", ("surrogate", "gspo")),
    ],
)
def test_parse_override_converts_types(text, expected):
    key, value = parse_override(text)
    assert (key, value) == expected
    assert type(value) is type(expected[1])


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("nonsense=1", "unknown config field 'nonsense'"),
        ("steps", "key=value"),
        ("steps=abc", "'steps'"),
        ("steps=1.5", "'steps'"),
        ("lora=maybe", "'lora'"),
        ("kl_coef=high", "'kl_coef'"),
        ("reward_weights=1,x", "'reward_weights'"),
    ],
)
def test_parse_override_rejects(text, fragment):
    with pytest.raises(ValueError, match=fragment):
        parse_override(text)


def test_overrides_build_a_config():
    c = Config.from_dict(dict(parse_override(s) for s in ["steps=3", "lora=true", "rewards=correct"]))
    assert (c.steps, c.lora, c.rewards) == (3, True, ("correct",))


def test_replace_revalidates_and_keeps_other_fields():
    c = Config(seed=4)
    d = c.replace(eps_high=0.28, prompts_per_step=2)
    assert (d.seed, d.eps_high, d.batch_size) == (4, 0.28, 16)
    assert c.eps_high == 0.2  # the original is untouched
    with pytest.raises(ValueError, match="temperature"):
        c.replace(temperature=0)
    with pytest.raises(ValueError, match="unknown config field"):
        c.replace(nonsense=1)
    with pytest.raises(ValueError, match="group_size"):
        c.replace(advantage="rloo", group_size=1)


def test_from_dict_coerces_json_types():
    c = Config.from_dict({"rewards": ["correct"], "reward_weights": [2], "steps": 3.0, "kl_coef": 1})
    assert c.rewards == ("correct",) and c.reward_weights == (2.0,)
    assert c.steps == 3 and isinstance(c.steps, int)
    assert c.kl_coef == 1.0 and isinstance(c.kl_coef, float)
    with pytest.raises(ValueError, match="'steps'"):
        Config.from_dict({"steps": 2.5})
