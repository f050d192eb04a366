"""Experimental designs as lists of labelled configurations, built before any compute (so an invalid
value fails at once): a grid (cartesian product of field values, presets included) and an ablation
(leave-one-out or add-one-in over components)."""

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from grpo_lab.config import Config, field_names
from grpo_lab.presets import preset

PRESET = "preset"
"""the grid key whose values are preset names"""
ABLATION_MODES = ("leave-one-out", "add-one-in")
REFERENCE = "none"
"""the `component` column of an ablation's reference configuration (nothing removed or added)"""

Component = tuple[Mapping[str, Any], Mapping[str, Any]] | Mapping[str, Any]
"""(overrides that switch a component on, overrides that switch it off), or only the on overrides:
then off is the Config default (grpo's value) of each of those fields, as in `presets.TRICKS`"""


@dataclass(frozen=True)
class Point:
    """One configuration of a design (seed not yet set)."""

    label: str
    columns: dict[str, Any]
    """what identifies it in the tidy DataFrame: the swept fields, or the ablated component"""
    config: Config


def preset_overrides(base: Config) -> dict[str, Any]:
    """The fields in which `base` differs from its own preset: what every preset of a grid keeps."""
    reference = preset(base.preset).to_dict()
    return {k: v for k, v in base.to_dict().items() if v != reference[k]}


def grid_points(base: Config, grid: Mapping[str, Sequence[Any]]) -> list[Point]:
    """The cartesian product of `grid` (config field -> values) applied to `base`.

    The key 'preset' takes preset names: each is built as `preset(name, **preset_overrides(base))`,
    i.e. the base's own changes to its preset (model, task, steps, ...) carry over to every preset;
    the other keys are then set on top. Labels read 'dapo, learning_rate=0.0001' (the base's
    preset name for an empty grid)."""
    unknown = sorted(set(grid) - set(field_names()))
    if unknown:
        raise ValueError(f"unknown grid field(s) {unknown}; valid: {', '.join(field_names())}")
    if "seed" in grid:
        raise ValueError("'seed' is not a grid field: pass the seeds separately")
    for name, values in grid.items():
        if isinstance(values, str) or not isinstance(values, Sequence) or not values:
            raise ValueError(f"grid[{name!r}] must be a non-empty list of values, got {values!r}")
    points = []
    for values in itertools.product(*grid.values()):
        columns = dict(zip(grid, values))
        config = preset(columns[PRESET], **preset_overrides(base)) if PRESET in columns else base
        config = config.replace(**{k: v for k, v in columns.items() if k != PRESET})
        parts = [str(v) if k == PRESET else f"{k}={v}" for k, v in columns.items()]
        points.append(Point(", ".join(parts) or base.preset, columns, config))
    return points


def ablation_points(
    base: Config, components: Mapping[str, Component], mode: str = "leave-one-out"
) -> list[Point]:
    """An ablation over `components`: name -> (on_overrides, off_overrides), or name -> on_overrides
    with off the Config defaults of those fields (so `presets.TRICKS` is a valid components dict).

    - 'leave-one-out': the reference 'all' is `base` with every component on; then each component is
      switched off in turn ('-name').
    - 'add-one-in': the reference 'none' is `base` with every component off; then each component is
      switched on in turn ('+name').
    Overrides are applied in the order of `components`. The `component` column names the switched
    component ('none' for the reference)."""
    if mode not in ABLATION_MODES:
        raise ValueError(f"unknown ablation mode {mode!r}; valid: {', '.join(ABLATION_MODES)}")
    if not components:
        raise ValueError("an ablation needs at least one component")
    if REFERENCE in components:
        raise ValueError(f"{REFERENCE!r} is reserved for the reference configuration")
    pairs = {name: _on_off(component) for name, component in components.items()}
    start, toggle, reference_label, sign = (
        (0, 1, "all", "-") if mode == "leave-one-out" else (1, 0, "none", "+")
    )
    reference = base.replace(**{k: v for pair in pairs.values() for k, v in pair[start].items()})
    points = [Point(reference_label, {"component": REFERENCE}, reference)]
    for name, pair in pairs.items():
        points.append(Point(f"{sign}{name}", {"component": name}, reference.replace(**pair[toggle])))
    return points


def _on_off(component: Component) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    if isinstance(component, tuple):
        return component
    defaults = Config().to_dict()
    return component, {k: defaults[k] for k in component}
