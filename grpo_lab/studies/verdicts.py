"""The verdict table (notebook 12; `docs/sources.md`, Evaluation guide §6.3 and Tricks review
§3.1), on the study base with one headline score: every scheme against `grpo` (paired on seeds,
`studies.schemes`, notebook 03, under the sequential rule), every factor of the factorial screen
(its main effect, `comparisons.screen`, notebook 02), every named conflict against `grpo` (paired,
`studies.ablations`) and the tricks the leave-one-out confirms (every trick on against all but that
one, `studies.ablations`). It asks for those studies' designs under their own settings, so their
runs are shared through the store and, after notebooks 02 and 03, this one only loads. Every row's
margin is `analysis.verdict_table.MARGIN_OF_GAIN` times grpo's gain over its run, and `MDE / gain` its MDE
over that gain. The scheme rows are decided by the scheme study's own sequential rule
(`sequential_seeds.verdict_rule`) on its adjusted interval, not re-decided on a plain 95% one; every row shows
the paired effect on greedy accuracy beside the headline one.

The study's settings are the scheme comparison's profile; each design's own profile follows from it
(`profiles`), so `design` returns a dict keyed by `DESIGNS` (and `run` a result per key); the rest is
the one table, its markdown and its figures (the table's, and the Tricks review read against it,
`comparisons.tricks_review`)."""

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd

from grpo_lab.analysis import multiplicity, plots, verdict_table
from grpo_lab.analysis.scores import examine as score_examination
from grpo_lab.comparisons import (
    paired,
    scheme_arms,
    screen,
    sequential_seeds,
    timing,
    trick_arms,
    tricks_review,
)
from grpo_lab.config import Config
from grpo_lab.experiments.designs import Point
from grpo_lab.presets import TRICKS
from grpo_lab.profiles import Profile

FAMILY = multiplicity.Family("every row of the verdict table", "holm")
"""the table's family and its error-rate control: one family over all its rows, so that a single
'better' among them is read as one of that many tests"""
DESIGNS = ("schemes", "screen", "conflicts", "tricks")
"""the designs of the table, each under its own study's settings"""


settings = scheme_arms.settings
"""The study's profile: the scheme comparison's (03's runs, `comparisons.scheme_arms.settings`); the
other designs' profiles follow from it (`profiles`); `seeds` and `steps` as the notebook sets them."""


def profiles(settings: Profile) -> dict[str, Profile]:
    """The profile of each design, its own study's, so that its runs are 02's and 03's:
    'schemes', `settings`; 'screen', `screen.settings` (its blocks); 'conflicts' and 'tricks',
    `trick_arms.settings` (02's runs). The seeds and steps the notebook set
    on `settings` (where they differ from the scheme comparison's own) apply to the paired designs,
    the steps to the screen."""
    own = scheme_arms.settings(settings.name)
    seeds = None if settings.seeds == own.seeds else settings.seeds
    steps = None if settings.steps == own.steps else settings.steps
    paired_settings = trick_arms.settings(settings.name, seeds, steps)
    return {
        "schemes": settings,
        "screen": screen.settings(settings.name, steps=steps),
        "conflicts": paired_settings,
        "tricks": paired_settings,
    }


def design(settings: Profile) -> dict[str, list[Point]]:
    """Each design under its settings: the schemes of `scheme_arms.design`, the screen's 32 runs, the
    conflicts with the base they are paired against, the leave-one-out of `trick_arms.trick_points`."""
    chosen = profiles(settings)
    conflicts = trick_arms.conflict_points(chosen["conflicts"])
    reference = trick_arms.component_points(chosen["conflicts"])[0]  # the base, labelled grpo
    return {
        "schemes": scheme_arms.design(chosen["schemes"]),
        "screen": screen.design(chosen["screen"]),
        "conflicts": [reference, *conflicts],
        "tricks": trick_arms.trick_points(chosen["tricks"]),
    }


def runs(
    designs: Mapping[str, Sequence[Point]], settings: Profile, root: str | Path | None = None
) -> list[Config]:
    """The runs the designs need (what `grpo-lab plan` counts): the schemes' under the sequential
    rule (`sequential_seeds.runs`, against the store `root`; None: an empty one), the screen's (a seed per
    run), the conflicts' and the leave-one-out's over their seeds."""
    chosen = profiles(settings)
    over_seeds = [
        p.config.replace(seed=seed)
        for name in ("conflicts", "tricks")
        for p in designs[name]
        for seed in chosen[name].seeds
    ]
    return [
        *sequential_seeds.runs(designs["schemes"], chosen["schemes"], root),
        *screen.runs(designs["screen"], chosen["screen"]),
        *over_seeds,
    ]


def run(designs: Mapping[str, Sequence[Point]], settings: Profile, **options: Any) -> dict[str, Any]:
    """Train (or load) each design in its run store: the schemes look by look under the sequential
    rule (`sequential_seeds.run`), the screen with a seed per run (`screen.run`), the conflicts (a crash is
    their outcome, not an error) and the leave-one-out over their seeds. `options` as for
    `experiments.execute`."""
    chosen = profiles(settings)
    return {
        "schemes": sequential_seeds.run(designs["schemes"], chosen["schemes"], **options),
        "screen": screen.run(designs["screen"], chosen["screen"], **options),
        "conflicts": paired.run(
            designs["conflicts"], chosen["conflicts"], may_fail=trick_arms.CONFLICTS, **options
        ),
        "tricks": paired.run(designs["tricks"], chosen["tricks"], **options),
    }


def counts(results: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """Per design, its runs by status (`SweepResult.counts`)."""
    return {name: results[name].counts() for name in DESIGNS}


def scores(results: Mapping[str, Any]) -> dict[str, pd.DataFrame]:
    """Per design, one row per run with its scores: the paired designs' from their studies
    (`scheme_arms.scores`, `trick_arms.scores`), the screen's with its factor columns and every factor's
    activity measure where it is on, each run with its step's cost by count (`paired.scores`); 'quiet',
    the quiet bench's step-time multiples (`timing.quiet_multiples`)."""
    screened = results["screen"]
    measured = {
        label: [f for f in screen.FACTORS if bool(run[f].iloc[0]) and f in verdict_table.ACTIVITY]
        for label, run in screened.metrics.groupby("label")
    }
    per_run = paired.scores(screened, measured)
    factors = screen.scores(screened).rename(columns={"run": "label", "seed": "block", "run_seed": "seed"})
    found = {
        "schemes": scheme_arms.scores(results["schemes"]),
        "screen": factors.drop(columns=["score", "start"]).merge(per_run, on=["label", "seed"]),
        "conflicts": trick_arms.scores(results["conflicts"]),
        "tricks": trick_arms.scores(results["tricks"]),
    }
    return {**found, "quiet": timing.quiet_multiples()}


def headline_check(results: Mapping[str, Any]) -> pd.DataFrame:
    """The headline's candidates side by side (`analysis.scores.examine`): each score's seed-to-seed
    sd over the scheme study's grpo runs over what grpo learns in it, and its Spearman correlation
    with the final entropy across the screen's runs (32 configurations: the spread of tricks that
    sharpen or flatten the policy), the confound a headline must not follow."""
    grpo = results["schemes"].metrics
    return score_examination(results["screen"].metrics, grpo[grpo["label"] == scheme_arms.REFERENCE])


def table(
    scored: Mapping[str, pd.DataFrame],
    margin: float | None = None,
    settings: Profile | None = None,
) -> pd.DataFrame:
    """The verdict table: the schemes against grpo and, where a scheme also changes what is not its
    mechanism, against its matched comparator (`scheme_arms.arms`), the screen's factors, the conflicts
    against grpo, then the confirmed tricks (all on against all but that one). Every row's reference gain
    is grpo's (`analysis.verdict_table.gain` over the schemes' grpo runs) and `margin` defaults to
    `MARGIN_OF_GAIN` times it, the screen's included. The scheme rows are the scheme study's sequential
    rule's decisions (`sequential_seeds.verdict_rule` under `settings`, the study's settings:
    required, as they fix the rule's looks and cap; protocol 'sequential'); under a profile too small for a
    look they are plain paired comparisons (protocol 'paired', each 'too few seeds'). The screen's rows carry
    its main effects on greedy accuracy beside the headline ones. A row's `cost x` is its FLOPs a step as a
    multiple of its reference's, counted from the configs and the runs' logged tokens (`cost counts` gives
    the passes and tokens beside it), never step times logged under load; `quiet time x` is the step time
    the quiet bench measured side by side with grpo in one run (`timing.quiet_multiples`; NaN where it
    timed no such arm). The table is adjusted over its rows (`FAMILY`,
    `analysis.multiplicity.adjust`): each row has its raw and its adjusted word."""
    if settings is None:
        raise ValueError(
            "the scheme rows follow the scheme study's sequential rule, whose looks and cap come from "
            "its settings: pass this study's settings (verdicts.settings(profile, seeds, steps))"
        )
    grpo = scored["schemes"][scored["schemes"]["label"] == scheme_arms.REFERENCE]
    learned = verdict_table.gain(grpo)
    chosen = verdict_table.MARGIN_OF_GAIN * learned if margin is None else margin
    scheme_rows = scheme_arms.arms(set(scored["schemes"]["label"]))
    conflict_labels = set(scored["conflicts"]["label"])
    conflict_rows = [
        (c, "conflict", c, trick_arms.REFERENCE) for c in trick_arms.CONFLICTS if c in conflict_labels
    ]
    trick_labels = set(scored["tricks"]["label"])
    trick_rows = [(t, "trick", trick_arms.ALL_ON, f"-{t}") for t in TRICKS if f"-{t}" in trick_labels]
    screened = scored["screen"].rename(columns={"seed": "run_seed", "block": "seed"})
    effects = screen.main_effects(screened, chosen, reference_gain=learned)
    on_greedy = screen.main_effects(screened.assign(score=screened["greedy"]), chosen, reference_gain=learned)
    rule = sequential_seeds.verdict_rule(settings, chosen)
    if rule is None:
        by_scheme = verdict_table.compare(
            scored["schemes"], scheme_rows, margin=chosen, reference_gain=learned
        )
    else:
        by_scheme = verdict_table.compare(
            scored["schemes"], scheme_rows, reference_gain=learned, protocol="sequential", rule=rule
        )
    parts = [
        by_scheme,
        verdict_table.factorial_rows(scored["screen"], effects, learned, greedy=on_greedy),
        verdict_table.compare(scored["conflicts"], conflict_rows, margin=chosen, reference_gain=learned),
    ]
    if trick_rows:
        parts.append(
            verdict_table.compare(
                scored["tricks"], trick_rows, margin=chosen, reference_gain=learned, protocol="leave-one-out"
            )
        )
    rows = pd.concat(parts, ignore_index=True)
    quiet = scored["quiet"].set_index("label")["multiple"] if "quiet" in scored else pd.Series(dtype=float)
    controls = {(name, kind): control for name, kind, _, control in [*scheme_rows, *conflict_rows]}
    rows["quiet time x"] = [
        quiet.get(r, math.nan) / quiet.get(controls.get((r, k), scheme_arms.REFERENCE), math.nan)
        if k != "trick" or p == "factorial screen"
        else math.nan
        for r, k, p in zip(rows["row"], rows["kind"], rows["protocol"])
    ]
    return multiplicity.adjust(verdict_table.pooled_mdes(rows), FAMILY)


def figure(verdict_rows: pd.DataFrame, settings: Profile) -> plt.Figure:
    """The table as a forest plot (`paired.forest`), with each design's steps (`profiles`)."""
    screen_steps = profiles(settings)["screen"].steps
    runs = f"{settings.steps} steps (schemes, conflicts, tricks), {screen_steps} (screen)"
    return paired.forest(verdict_rows, runs, "schemes and conflicts vs grpo, trick factors, confirmed tricks")


def save_markdown(verdict_rows: pd.DataFrame, name: str) -> Path:
    """Write the table as markdown (`analysis.verdict_table.table_markdown`, the columns of
    `TABLE_COLUMNS`) under its family's caption (`FAMILY`) and the line that says its scheme rows are at the
    shared rate (`scheme_arms.SHARED_RATE`), next to its figure (`plots.save_markdown`)."""
    caption = FAMILY.caption(multiplicity.family_size(verdict_rows))
    table = verdict_table.table_markdown(verdict_rows)
    return plots.save_markdown(f"{caption}\n\n{scheme_arms.SHARED_RATE}\n\n{table}", name)


def figure_review(reviewed: pd.DataFrame, settings: Profile) -> plt.Figure:
    """The Tricks review's table read against the verdict table (`tricks_review.figure` of
    `tricks_review.review_table`), its title saying the profile and the runs of each design."""
    chosen = profiles(settings)
    runs = (
        f"{settings.name} profile: {settings.steps}-step paired runs, {chosen['screen'].steps}-step "
        "screen, cost as FLOPs a step by count"
    )
    return tricks_review.figure(reviewed, runs)
