"""Experimental designs of the studies in notebooks 02 (ablations) and 04 (fault injection), built
before any compute so that a bad field or value fails at once:

- `variant_points`: a reference configuration and named variants of it (one change set each), the
  "switch off the KL term, switch off clipping, move the KL" ablation of Evaluation guide §6.2
  Ablations (docs/sources.md);
- `fault_points`: every scheme clean and under each fault level (Evaluation guide §6.4 Fault
  injection), for robustness curves;
- `for_profile`: the compared lists in full, or their first few entries under a quick profile."""

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from grpo_lab.analysis.robustness import CLEAN, CLEAN_CONDITION, condition_label
from grpo_lab.config import Config, field_names
from grpo_lab.experiments.designs import Point, preset_overrides
from grpo_lab.presets import preset
from grpo_lab.profiles import Profile

Items = TypeVar("Items", list, tuple, dict)

FAULTS: dict[str, list[Any]] = {
    "fault_reward_sigma": [1.0],
    "fault_repeat_k": [6],
    "fault_reward_flip": [0.4],
    "fault_long_frac": [0.5],
    "fault_stale_k": [4],
    "fault_sampler_dtype": ["bfloat16"],
}
"""the faults notebook 04 injects into its schemes and 17 into 03's: config field -> levels; the clean
run (the field's default) is included for every scheme"""
SMOKE_FAULTS = 1
"""the smoke profile injects only the first fault"""


def for_profile(items: Items, settings: Profile, keep: int) -> Items:
    """`items` (a list, tuple or dict of what a notebook compares) under the full profile; under any
    other profile (smoke) only its first `keep` entries, so the notebook runs in seconds."""
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    if settings.name == "full":
        return items
    if isinstance(items, dict):
        return dict(list(items.items())[:keep])
    return type(items)(list(items)[:keep])


def variant_points(base: Config, variants: Mapping[str, Mapping[str, Any]], reference: str) -> list[Point]:
    """`base` labelled `reference`, then one point per variant: `base` with that variant's fields
    changed (e.g. {"no KL": {"kl_coef": 0.0, "kl_placement": "off"}}). The `variant` column names the
    point. A variant must change something: one equal to `base` would only rerun the reference."""
    if reference in variants:
        raise ValueError(f"{reference!r} names the reference; choose another variant name")
    points = [Point(reference, {"variant": reference}, base)]
    for name, changes in variants.items():
        unknown = sorted(set(changes) - set(field_names()))
        if unknown:
            valid = ", ".join(field_names())
            raise ValueError(f"variant {name!r}: unknown config field(s) {unknown}; valid: {valid}")
        config = base.replace(**changes)
        if config == base:
            raise ValueError(f"variant {name!r} changes nothing: {dict(changes)} are the base's own values")
        points.append(Point(name, {"variant": name}, config))
    return points


def fault_points(base: Config, schemes: Sequence[str], faults: Mapping[str, Sequence[Any]]) -> list[Point]:
    """Each preset of `schemes`, built with the base's own changes to its preset (model, task, steps,
    ...: `experiments.preset_overrides`), once clean and once per level of each fault field (e.g.
    {"fault_reward_sigma": [0.5, 1.0], "fault_stale_k": [4]}), one fault at a time. Columns, all
    strings so that tables group and sort them: `scheme`; `fault`, the field ('none' when clean);
    `level`, the level as written ('none' when clean); `condition`, e.g. 'reward_sigma=0.5' or
    'clean'. A level equal to the field's clean value (its Config default) is refused: the clean run
    is in the design already."""
    if not schemes:
        raise ValueError("fault_points needs at least one scheme")
    clean_values = Config().to_dict()
    for name, levels in faults.items():
        if name not in clean_values:
            faulty = [f for f in field_names() if f.startswith("fault_")]
            raise ValueError(f"unknown fault field {name!r}; valid: {', '.join(faulty)}")
        if isinstance(levels, str) or not isinstance(levels, Sequence) or not levels:
            raise ValueError(f"faults[{name!r}] must be a non-empty list of levels, got {levels!r}")
        if clean_values[name] in levels:
            clean = clean_values[name]
            raise ValueError(f"faults[{name!r}] lists the clean value {clean!r}: the clean run is included")
    overrides = preset_overrides(base)
    points = []
    for scheme in schemes:
        clean = preset(scheme, **overrides)
        columns = {"scheme": scheme, "fault": CLEAN, "level": CLEAN, "condition": CLEAN_CONDITION}
        points.append(Point(f"{scheme}, clean", columns, clean))
        for name, levels in faults.items():
            for level in levels:
                condition = condition_label(name, level)
                columns = {"scheme": scheme, "fault": name, "level": str(level), "condition": condition}
                points.append(Point(f"{scheme}, {condition}", columns, clean.replace(**{name: level})))
    return points
