"""The long-horizon study (notebook 05): the study base (`comparisons.bed.base`) trained long at several
learning rates. Measures: the training and validation curves, how far the entropy falls (start, end,
decay rate), the path in the entropy-reward plane, each run's best and final validation accuracy, the
diagnostic rules that fire. `settings` / `design` / `run`, then `entropy`, `peaks`, `diagnostics` and
the figures (`figure`, `figure_phase`).

Then the pilot that fixes the horizon of the long-horizon verdicts (Evaluation guide §6.5 and §10:
cover the phase where the entropy clearly falls; judge no method by its early reward):
`pilot_settings`, `pilot_design`, `pilot`, and `stored_horizon`, the horizon its stored runs fix
(`studies.long_verdicts`, notebook 15, compares the schemes there)."""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd

from grpo_lab.analysis import horizon, plots, robustness, stats
from grpo_lab.analysis.scores import GREEDY, HEADLINE
from grpo_lab.comparisons.bed import base, described
from grpo_lab.comparisons.horizon_pilot import (
    ENTROPY_FALL,
    KNEE_REACH,
    PARAM,
    PILOT,
    SMOOTH,
    pilot,
    pilot_design,
    pilot_settings,
    stored_horizon,
)
from grpo_lab.comparisons.point_sets import for_profile
from grpo_lab.config import Config
from grpo_lab.experiments import SweepResult, run_design
from grpo_lab.experiments.designs import Point, grid_points
from grpo_lab.profiles import Budget, Profile

__all__ = [
    "CURVES",
    "ENTROPY_FALL",
    "FULL",
    "KNEE_REACH",
    "LEARNING_RATES",
    "PARAM",
    "PHASE_SMOOTH",
    "PILOT",
    "SMOKE_KEEP",
    "SMOOTH",
    "base",
    "described",
    "design",
    "diagnostics",
    "entropy",
    "figure",
    "figure_phase",
    "figure_pilot",
    "for_profile",
    "peaks",
    "pilot",
    "pilot_design",
    "pilot_settings",
    "run",
    "runs",
    "settings",
    "stored_horizon",
]

LEARNING_RATES = (3e-5, 3e-4)
"""the compared learning rates, the study base's own among them"""
SMOKE_KEEP = 2
"""the smoke profile keeps only the first this many learning rates"""
FULL = Budget(seeds=(0,), steps=500, eval_every=100)
"""under the full profile: one seed of 500 steps per learning rate, validated every 100 steps: the
long-horizon figures describe trajectories and give no verdict, so they take fewer seeds"""
CURVES = ("reward", "val/accuracy", "entropy", "kl/exact", "completions/mean_length", "grad_norm")
PHASE_SMOOTH = 20
"""the entropy-reward path: trailing mean over this many steps"""


settings = FULL.settings
"""The study's profile: `FULL` under the full profile, the smoke profile's few otherwise;
`seeds` and `steps` as the notebook sets them."""


def design(settings: Profile) -> list[Point]:
    """The study base at each learning rate (the first `SMOKE_KEEP` under the smoke profile); the
    column `learning_rate` names it."""
    rates = for_profile(list(LEARNING_RATES), settings, SMOKE_KEEP)
    return grid_points(base(settings), {PARAM: rates})


def runs(points: Sequence[Point], settings: Profile, root: str | Path | None = None) -> list[Config]:
    """Every run the notebook trains: the design over the settings' seeds, then the pilot's
    (`pilot_design` over `pilot_settings` of the same profile). `root` is unused: nothing here
    depends on what the store holds."""
    pilot = pilot_settings(settings.name)
    ran = [(p, s) for p in points for s in settings.seeds] + [
        (p, s) for p in pilot_design(pilot) for s in pilot.seeds
    ]
    return [point.config.replace(seed=seed) for point, seed in ran]


def run(
    points: Sequence[Point], settings: Profile, root: str | Path | None = None, **options: Any
) -> SweepResult:
    """Train (or load) the design over the profile's seeds into `root` (default: the shared store).
    `options` as for `experiments.run_design`."""
    return run_design(points, settings.seeds, settings.runs_dir() if root is None else root, **options)


def figure(metrics: pd.DataFrame, settings: Profile) -> plt.Figure:
    """The `CURVES` by learning rate."""
    title = f"{described(settings)}, by learning rate, {settings.steps} steps"
    return plots.curves(metrics, [m for m in CURVES if m in metrics], by=PARAM, smooth=SMOOTH, title=title)


def entropy(metrics: pd.DataFrame) -> pd.DataFrame:
    """Per learning rate: the token entropy at the start and the end, their ratio and the fitted
    decay rate (`stats.run_table`), mean and interval over seeds."""
    per_run = horizon.start_end(metrics, "entropy", by=PARAM).merge(
        stats.run_table(metrics, by=PARAM)[[PARAM, "seed", "entropy_decay"]]
    )
    return horizon.summarize(per_run, ["start", "end", "ratio", "entropy_decay"], by=PARAM)


def figure_phase(metrics: pd.DataFrame) -> plt.Figure:
    """The path of each learning rate in the entropy-reward plane."""
    return plots.phase(
        metrics,
        "entropy",
        "reward",
        by=PARAM,
        smooth=PHASE_SMOOTH,
        title=f"entropy against reward, {described()}",
    )


def peaks(metrics: pd.DataFrame) -> pd.DataFrame:
    """Per learning rate: the best validation accuracy of a run, its step, the final one, the drop."""
    per_run = horizon.peak_and_drop(metrics, "val/accuracy", by=PARAM)
    return horizon.summarize(per_run, ["best", "best_step", "final", "drop"], by=PARAM)


def diagnostics(result: SweepResult) -> tuple[plt.Figure, pd.DataFrame]:
    """The rules that fired, by learning rate (each cell out of that learning rate's runs), and the
    findings."""
    findings = robustness.run_findings(result.runs, [PARAM])
    counts = robustness.rule_counts(findings, result.runs, by=PARAM)
    totals = result.runs[PARAM].value_counts()
    fig = plots.rule_heatmap(
        counts, totals, title=f"diagnostics that fired, by learning rate (runs out of n), {described()}"
    )
    return fig, findings


def figure_pilot(metrics: pd.DataFrame, settings: Profile, table: pd.DataFrame) -> plt.Figure:
    """The pilot's entropy, headline and greedy accuracy (mean and 95% interval over seeds), with the
    median step of the entropy's fall and the headline's knee marked on every panel."""
    title = (
        f"pilot: {described(settings)}, {settings.steps} steps, validated every "
        f"{settings.eval_every}; dashed: entropy down {ENTROPY_FALL:.0%} (median over seeds), dotted: "
        f"knee of {HEADLINE.metric} ({KNEE_REACH:.0%} of its rise)"
    )
    fig = plots.curves(metrics, ["entropy", HEADLINE.metric, GREEDY.metric], smooth=SMOOTH, title=title)
    fall_at = table.loc[table["reading"] == "entropy", "fall_step"].median()
    knee_at = table.loc[table["reading"] == HEADLINE.metric, "knee_step"].iloc[0]
    for ax in fig.axes[:3]:
        for step, style in ((fall_at, "--"), (knee_at, ":")):
            if pd.notna(step):
                ax.axvline(step, color="grey", ls=style, lw=1)
    return fig
