"""The baseline study (notebook 01): the study base (`comparisons.bed.base`, GRPO on the test bed) trained
over several seeds, its training and validation curves and a summary table of its final values. Every
other study compares against these runs; they share the run store with any study that asks for the
same configuration. `settings` / `design` / `run`, then `summary` and `figure`."""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd

from grpo_lab.analysis import plots, stats
from grpo_lab.comparisons.bed import BASE_RUNS, base
from grpo_lab.experiments import SweepResult, run_design
from grpo_lab.experiments.designs import Point
from grpo_lab.profiles import Profile

CURVES = (
    "reward",
    "val/accuracy",
    "kl/exact",
    "entropy",
    "clip_ratio/region_mean",
    "grad_norm",
    "completions/mean_length",
)
"""the metrics drawn against the step"""
SUMMARY = ("val/accuracy", "val/reward", "reward", "kl/exact", "entropy", "completions/mean_length")
"""the metrics of the summary table (each run's last logged value)"""
SMOOTH = 5
"""training metrics are drawn as a trailing mean over this many logged steps (validation never is)"""
FULL = BASE_RUNS
"""under the full profile: the base's runs of `comparisons.bed.BASE_RUNS`, which 09's claims share"""


settings = FULL.settings
"""The study's profile: `FULL` under the full profile, the smoke profile's few otherwise;
`seeds` and `steps` as the notebook sets them."""


def design(settings: Profile) -> list[Point]:
    """The study base alone, labelled 'grpo'."""
    return [Point("grpo", {}, base(settings))]


def run(
    points: Sequence[Point], settings: Profile, root: str | Path | None = None, **options: Any
) -> SweepResult:
    """Train (or load) the design over the profile's seeds into `root` (default: the shared store),
    the seeds in parallel in the process pool (one torch thread each). `options` as for
    `experiments.run_design`."""
    return run_design(points, settings.seeds, settings.runs_dir() if root is None else root, **options)


def figure(metrics: pd.DataFrame, settings: Profile) -> plt.Figure:
    """One panel per metric of `CURVES`: mean and 95% interval over the seeds."""
    config = base(settings)
    title = f"study base: {config.preset} on {config.task}, {settings.steps} steps"
    return plots.curves(metrics, [m for m in CURVES if m in metrics], smooth=SMOOTH, title=title)


def summary(metrics: pd.DataFrame) -> pd.DataFrame:
    """Each `SUMMARY` metric's last logged value per run: mean, 95% interval, runs."""
    return stats.summary_table(metrics, [m for m in SUMMARY if m in metrics], window=1)
