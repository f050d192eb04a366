"""The baseline study (notebook 01): the study base (`studies.base`, GRPO on the test bed) trained
over several seeds, its training and validation curves and a summary table of its final values. Every
other study compares against these runs; they share the run store with any study that asks for the
same configuration."""

from collections.abc import Sequence

import matplotlib.pyplot as plt
import pandas as pd

from grpo_lab import experiments, profiles
from grpo_lab.analysis import plots, stats
from grpo_lab.experiments.designs import Point
from grpo_lab.studies.base import base

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


def settings(profile: str, seeds: Sequence[int] | None = None, steps: int | None = None) -> profiles.Profile:
    """The profile's own steps, validation interval and size; `seeds` and `steps` as the notebook sets."""
    return profiles.profile(profile, list(seeds) if seeds is not None else None, steps)


def run(settings: profiles.Profile) -> pd.DataFrame:
    """Train (or load from the shared store) the study base over the profile's seeds, the seeds in
    parallel in the process pool (one torch thread each): a row per run and logged step."""
    design = [Point("grpo", {}, base(settings))]
    return experiments.run_design(design, settings.seeds, root=settings.runs_dir(), progress=False).metrics


def figure(metrics: pd.DataFrame, settings: profiles.Profile) -> plt.Figure:
    """One panel per metric of `CURVES`: mean and 95% interval over the seeds."""
    config = base(settings)
    title = f"study base: {config.preset} on {config.task}, {settings.steps} steps"
    return plots.curves(metrics, [m for m in CURVES if m in metrics], smooth=SMOOTH, title=title)


def summary(metrics: pd.DataFrame) -> pd.DataFrame:
    """Each `SUMMARY` metric's last logged value per run: mean, 95% interval, runs."""
    return stats.summary_table(metrics, [m for m in SUMMARY if m in metrics], window=1)
