"""Experimental designs as lists of labelled configurations, built before any compute (so an invalid
value fails at once): a grid (cartesian product of field values, presets included), an ablation
(leave-one-out or add-one-in over components) and a two-level fractional factorial screen over
components (every run informs every main effect)."""

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from grpo_lab.analysis.factorial import alias_table
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
    values: dict[str, bool] = field(default_factory=dict)
    """a factorial design's point: every factor -> True (on) or False (off); empty for other designs"""


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


FACTORIAL_RESOLUTIONS = (3, 4)
"""the resolutions `factorial_points` builds: III (n runs hold up to n - 1 factors; main effects are
aliased with two-factor interactions) and IV (n runs hold up to n / 2 factors; they are not)"""
FACTORIAL_MIN_RUNS = 8
"""the smallest factorial design built: fewer runs leave too few contrasts to judge anything"""
RESERVED_FACTOR_NAMES = ("run", "label", "seed", "key", "step", "score", "status", "error", "seconds", "path")
"""names a factor cannot take: columns that a sweep's result or a scored frame already has"""


def factorial_runs(factors: int, resolution: int = 4) -> int:
    """The fewest runs (a power of two, at least `FACTORIAL_MIN_RUNS`) of a two-level design that
    holds `factors` factors at `resolution`: n runs hold n / 2 at resolution IV, n - 1 at III."""
    _check_resolution(resolution)
    if factors < 1:
        raise ValueError(f"a factorial design needs at least one factor, got {factors}")
    runs = FACTORIAL_MIN_RUNS
    while (runs // 2 if resolution == 4 else runs - 1) < factors:
        runs *= 2
    return runs


def factorial_matrix(factors: Iterable[str], resolution: int = 4) -> pd.DataFrame:
    """The two-level design of `factors` (names, or a mapping whose keys are them) as runs x factors of
    +1 (on) and -1 (off), runs labelled 'r01', 'r02', ... in standard order.

    Built from the Sylvester Hadamard matrix H of order m (H[r, c] = (-1)^popcount(r & c); the
    columns are pairwise orthogonal and the product of two columns is a third). Resolution IV: the
    fold-over [H; -H] of order m = n / 2, whose m columns (the constant one included) are balanced and
    orthogonal, and every product of two of them, [h_a h_b; h_a h_b], is orthogonal to every column
    [h_c; -h_c]: no main effect is aliased with a two-factor interaction (Box, Hunter & Hunter,
    "Statistics for Experimenters", 2nd ed., ch. 6: folding over a resolution III design). For 16
    factors in 32 runs it is the 2^(16-11) design of resolution IV. Resolution III: the saturated
    Hadamard design of order n without its constant column (Plackett & Burman 1946). With fewer
    factors than the design holds, the basic columns come first and then the interactions of the most
    basic factors (the longest generators), which keeps the defining words long; it is of the
    resolution asked for or higher, though not always the minimum-aberration fraction."""
    names = _factor_names(factors)
    runs = factorial_runs(len(names), resolution)
    if resolution == 4:
        half = _sylvester(runs // 2)  # (runs/2, runs/2)
        chosen = _column_order(runs // 2, with_constant=True)[: len(names)]
        matrix = np.vstack([half[:, chosen], -half[:, chosen]])  # (runs, factors)
    else:
        chosen = _column_order(runs, with_constant=False)[: len(names)]
        matrix = _sylvester(runs)[:, chosen]  # (runs, factors)
    width = len(str(runs))
    return pd.DataFrame(matrix, index=[f"r{i:0{width}d}" for i in range(1, runs + 1)], columns=names)


def factorial_aliases(factors: Iterable[str], resolution: int = 4) -> pd.DataFrame:
    """The alias structure of `factorial_matrix(factors, resolution)` (`analysis.factorial.alias_table`):
    for each main effect the two-factor interactions aliased with it ('none' at resolution IV), then
    the chains of two-factor interactions aliased with each other."""
    return alias_table(factorial_matrix(factors, resolution))


def factorial_points(base: Config, factors: Mapping[str, Component], resolution: int = 4) -> list[Point]:
    """A two-level fractional factorial design of resolution `resolution` over `factors` applied to
    `base`: one point per run of `factorial_matrix`, each factor on or off.

    `factors` maps a name to the config changes that switch it on (off: the Config default of each of
    those fields, so `presets.TRICKS` is valid), or to (on changes, off changes); a field named on one
    side only takes its Config default on the other. Every run of a two-level design holds every
    factor at one of its levels, so each main effect is estimated from all the runs (variance
    4 sigma^2 / N with N runs, against 2 sigma^2 / r per leave-one-out comparison of r seeds).

    Points are labelled 'r01', 'r02', ...; `columns` is {'run': label, factor: True/False, ...} and
    `values` the factor -> True/False mapping. Errors, before any compute: no factor, a name reserved
    for result columns, an unknown config field or 'seed' (seeds are the replicate blocks, given
    separately), a factor that changes nothing, two factors with the same changes, two factors that
    set one field to different values, and any run whose configuration is invalid (named with the
    factors on and off in it)."""
    changes = _factor_changes(factors)
    matrix = factorial_matrix(changes, resolution)
    points = []
    for label, row in matrix.iterrows():
        values = {name: bool(row[name] > 0) for name in changes}
        settings = {k: v for name, on in values.items() for k, v in changes[name][0 if on else 1].items()}
        try:
            config = base.replace(**settings)
        except ValueError as error:
            on = [n for n, v in values.items() if v]
            off = [n for n, v in values.items() if not v]
            raise ValueError(
                f"run {label} of the factorial design (on: {', '.join(on) or 'none'}; off: "
                f"{', '.join(off) or 'none'}) is not a valid configuration: {error}"
            ) from None
        points.append(Point(str(label), {"run": str(label), **values}, config, values))
    return points


def _check_resolution(resolution: int) -> None:
    if resolution not in FACTORIAL_RESOLUTIONS:
        raise ValueError(
            f"resolution {resolution!r} is not built; valid: {', '.join(map(str, FACTORIAL_RESOLUTIONS))} "
            "(III: main effects aliased with two-factor interactions; IV: main effects free of them)"
        )


def _factor_names(factors: Iterable[str]) -> list[str]:
    if isinstance(factors, str):
        raise ValueError(f"factors must be a collection of names, got the string {factors!r}")
    names = list(factors)
    if not names:
        raise ValueError(
            "a factorial design needs at least one factor: name -> the config changes that switch it on "
            "(e.g. presets.TRICKS)"
        )
    bad = [n for n in names if not isinstance(n, str) or not n]
    if bad:
        raise ValueError(f"factor names must be non-empty strings, got {bad}")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"factor(s) {twice} named more than once; each factor needs one name")
    reserved = [n for n in names if n in RESERVED_FACTOR_NAMES]
    if reserved:
        raise ValueError(
            f"factor name(s) {reserved} are taken by result columns; choose others (reserved: "
            f"{', '.join(RESERVED_FACTOR_NAMES)})"
        )
    return names


def _factor_changes(factors: Mapping[str, Component]) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Each factor's (on, off) field values over the same fields, checked (see `factorial_points`)."""
    if not isinstance(factors, Mapping):
        raise ValueError(
            f"factors must map each factor's name to the config changes that switch it on, or to an "
            f"(on, off) pair of changes; got {type(factors).__name__}"
        )
    _factor_names(factors)
    defaults, valid = Config().to_dict(), set(field_names())
    pairs: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    for name, component in factors.items():
        shape_ok = isinstance(component, Mapping) or (
            isinstance(component, tuple)
            and len(component) == 2
            and all(isinstance(c, Mapping) for c in component)
        )
        if not shape_ok:
            raise ValueError(
                f"factor {name!r} must be a mapping of config changes or an (on, off) pair of them, "
                f"got {component!r}"
            )
        on, off = component if isinstance(component, tuple) else (component, {})
        unknown = sorted((set(on) | set(off)) - valid)
        if unknown:
            raise ValueError(
                f"factor {name!r} sets unknown config field(s) {unknown}; valid: {', '.join(field_names())}"
            )
        if "seed" in on or "seed" in off:
            raise ValueError(
                f"factor {name!r} sets 'seed': the seeds are the replicate blocks, given separately"
            )
        fields = list(dict.fromkeys([*on, *off]))
        pair = ({k: on.get(k, defaults[k]) for k in fields}, {k: off.get(k, defaults[k]) for k in fields})
        if pair[0] == pair[1]:
            raise ValueError(f"factor {name!r} changes nothing: on and off give the same values {pair[0]}")
        same = [other for other, seen in pairs.items() if seen == pair]
        if same:
            raise ValueError(
                f"factors {same[0]!r} and {name!r} make the same changes {pair[0]}: they are one factor"
            )
        pairs[name] = pair
    owners: dict[str, list[str]] = {}
    for name, (on, _) in pairs.items():
        for key in on:
            owners.setdefault(key, []).append(name)
    for key, names in owners.items():
        levels = {repr(pairs[n][side][key]) for n in names for side in (0, 1)}
        if len(names) > 1 and len(levels) > 1:
            detail = "; ".join(f"{n}: on {pairs[n][0][key]!r}, off {pairs[n][1][key]!r}" for n in names)
            raise ValueError(
                f"factors {names} all set {key!r} ({detail}): in the runs where they disagree the field "
                "would be set twice; give each field to one factor"
            )
    return pairs


def _sylvester(order: int) -> np.ndarray:
    """The Sylvester Hadamard matrix of `order` (a power of two): H[r, c] = (-1)^popcount(r & c)."""
    h = np.ones((1, 1), dtype=np.int64)  # (1, 1)
    while len(h) < order:
        h = np.block([[h, h], [h, -h]])  # (2m, 2m)
    return h


def _column_order(order: int, with_constant: bool) -> list[int]:
    """The columns of a Sylvester matrix in the order factors take them: the constant one (for a
    fold-over, where it becomes the fold's own factor), the basic columns (powers of two), then the
    interactions of the most basic columns first."""
    basic = [c for c in range(1, order) if c & (c - 1) == 0]
    rest = sorted((c for c in range(1, order) if c & (c - 1)), key=lambda c: (-bin(c).count("1"), c))
    return ([0] if with_constant else []) + basic + rest
