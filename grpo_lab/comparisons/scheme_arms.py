"""The scheme comparison's arms, shared by every study that compares the schemes (03 draws it; 12, 13,
14, 15, 16 and 17 ask for the same design, or vary one thing around its arms): every scheme of
`SCHEMES` on the study bed against `REFERENCE` (grpo), and a scheme whose preset also changes what is
not its own mechanism against its matched comparator too (`presets.matched_comparator`), arms paired
on seeds.

- `FULL` / `settings` / `FIRST_LOOK`: the comparison's full-profile budget, its profile, and its
  runs over the sequential rule's first look (the budget of the studies that vary one thing around
  each scheme's run);
- `design`: each scheme and its matched comparator on the bed; `comparisons` / `arms`: the pairs
  judged and the verdict rows they give; `order`: scheme names in the order of `SCHEMES`;
- `scores` / `reference_gain` / `table` / `figure`: per-run scores, what grpo learns over its runs (the
  bed's unit of margin), the verdict rows and their forest plot.
The sequential rule that decides how many seeds each arm takes is `comparisons.sequential_seeds`."""

from collections.abc import Collection, Sequence
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd

from grpo_lab.analysis import verdict_table
from grpo_lab.analysis.power import MIN_SEEDS
from grpo_lab.comparisons import paired
from grpo_lab.comparisons.bed import base, described
from grpo_lab.comparisons.point_sets import for_profile
from grpo_lab.experiments import SweepResult
from grpo_lab.experiments.designs import Point
from grpo_lab.presets import matched_comparator
from grpo_lab.profiles import Budget, Profile

SCHEMES = ("grpo", "scheme_a", "scheme_b", "scheme_c", "dr_grpo", "dapo_loss", "gspo", "cispo", "grpo_no_kl")
"""the compared schemes (presets); `grpo` is the reference and `grpo_no_kl` the matched comparator of
the four that drop the KL, itself compared with grpo (what dropping the KL does)"""
REFERENCE = "grpo"
SHARED_RATE = (
    "The scheme rows compare every arm at one shared learning rate, the study base's: the sensitivity at "
    "one common rate. The primary scheme table, every arm at its own tuned rate, is figures/16_best_rates.md "
    "at 60 steps and figures/15_tuned_rates.md at the long horizon."
)
"""the line a scheme table at the shared rate carries under its caption (12's, 15's)"""
SMOKE_SCHEMES = 2
"""the smoke profile compares the first this many schemes"""
FULL = Budget(seeds=tuple(range(9)), steps=60, eval_every=5, scored_tail=True)
"""under the full profile: up to 9 paired seeds of 60 steps, validated every 5 steps in the scored
tail: the score pilot's sd of the headline score puts a scheme comparison's MDE within 0.15 of grpo's
gain at 9 seeds; the sequential rule stops a clear comparison earlier (`docs/studies.md`, "Sizing
the full profile")"""
FIRST_LOOK = Budget(
    seeds=tuple(range(MIN_SEEDS)), steps=FULL.steps, eval_every=FULL.eval_every, scored_tail=True
)
"""the scheme study's runs over its first look (`MIN_SEEDS` seeds): the budget of the studies that vary
one thing around each scheme's own run (16's knobs, 17's faults), so that their unvaried runs are 03's"""
settings = FULL.settings
"""The scheme comparison's profile: `FULL` under the full profile, the smoke profile's few otherwise;
`seeds` and `steps` as the notebook sets them."""


def compared(settings: Profile) -> tuple[str, ...]:
    """`SCHEMES` under the full profile; the first `SMOKE_SCHEMES` under any other."""
    return for_profile(SCHEMES, settings, SMOKE_SCHEMES)


def with_comparators(schemes: Sequence[str]) -> tuple[str, ...]:
    """`schemes`, then the matched comparator (`presets.matched_comparator`) of each that is not
    among them, once each."""
    return tuple(dict.fromkeys([*schemes, *map(matched_comparator, schemes)]))


def design(settings: Profile, schemes: Sequence[str] | None = None, **changes: Any) -> list[Point]:
    """Each scheme (default: `compared(settings)`) and its matched comparator (`with_comparators`) on
    the study base, labelled by its preset name (`changes` apply to every arm)."""
    schemes = compared(settings) if schemes is None else tuple(schemes)
    if REFERENCE not in schemes:
        raise ValueError(f"the schemes must include the reference {REFERENCE!r}, got {list(schemes)}")
    return [Point(name, {"arm": name}, base(settings, name, **changes)) for name in with_comparators(schemes)]


def comparisons(labels: Sequence[str]) -> list[tuple[str, str]]:
    """The (treatment, control) pairs judged among the arms `labels`, in their order: each arm against
    `REFERENCE`, followed by the arm against its matched comparator when that is another arm."""
    pairs = []
    for label in labels:
        comparator = matched_comparator(label)
        if label != REFERENCE:
            pairs.append((label, REFERENCE))
        if comparator != REFERENCE and comparator in labels:
            pairs.append((label, comparator))
    return pairs


def arms(labels: Collection[str]) -> list[tuple[str, str, str, str]]:
    """The verdict rows (`analysis.verdict_table.compare`'s arms: row, kind, treatment, control) of the
    `SCHEMES` among `labels`, in that order: each scheme against `REFERENCE` (kind 'scheme') and
    against its matched comparator (kind 'scheme vs <comparator>': its own mechanism alone). Both rows
    of a scheme carry its name, hence its activity measure."""
    pairs = comparisons([s for s in SCHEMES if s in labels])
    return [(t, "scheme" if c == REFERENCE else f"scheme vs {c}", t, c) for t, c in pairs]


def order(column: pd.Series) -> pd.Series:
    """A sort key that puts scheme names in the order of `SCHEMES`."""
    return column.map({name: i for i, name in enumerate(SCHEMES)})


def scores(result: SweepResult) -> pd.DataFrame:
    """One row per run with its scores and its scheme's activity measure."""
    return paired.scores(result, {label: [label] for label in result.runs["label"].unique()})


def reference_gain(result: SweepResult) -> float:
    """What `REFERENCE` learns over its runs of the comparison (`analysis.verdict_table.gain` of their
    scores): the bed's one unit of margin, `MARGIN_OF_GAIN` times it, for every table on the bed (the
    verdict table's, the ablations', the screen's). An error without its runs."""
    scored = scores(result)
    mine = scored[scored["label"] == REFERENCE]
    if mine.empty:
        raise ValueError(f"no runs of {REFERENCE!r} among the labels {sorted(set(scored['label']))}")
    return verdict_table.gain(mine)


def table(scored: pd.DataFrame, margin: float | None = None) -> pd.DataFrame:
    """The verdict rows of the scored runs (`arms`): each scheme against `REFERENCE` and against its
    matched comparator, paired on seeds, in the order of `SCHEMES`. Every row's gain is the
    reference's (`analysis.verdict_table.gain`), as in the sequential rule, and `margin` defaults to
    `MARGIN_OF_GAIN` times it."""
    learned = verdict_table.gain(scored[scored["label"] == REFERENCE])
    rows = arms(set(scored["label"]))
    return verdict_table.compare(scored, rows, margin=margin, reference_gain=learned)


def figure(verdict_rows: pd.DataFrame, settings: Profile) -> plt.Figure:
    """The verdict table as a forest plot (`paired.forest`)."""
    return paired.forest(
        verdict_rows, f"{described(settings)}, {settings.steps} steps", f"schemes vs {REFERENCE}"
    )
