"""The fault-injection study (notebook 04): every scheme on the study base (`studies.base`), clean
and under each level of each injected fault (`studies.fault_points`), the fault-injection step of
Evaluation guide §6.4 Fault injection (docs/sources.md). Measures: the final validation
accuracy against each fault's level, each condition's change from the same scheme's clean run
(paired over seeds, with its minimum detectable effect), and the diagnostic rules each condition
sets off, per scheme."""

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd

from grpo_lab import experiments, profiles
from grpo_lab.analysis import plots, robustness, stats
from grpo_lab.experiments import SweepResult
from grpo_lab.experiments.designs import Point
from grpo_lab.studies.base import base
from grpo_lab.studies.designs import fault_points, for_profile

COLUMNS = ["scheme", "fault", "level", "condition"]
"""the design's columns that identify a condition"""
METRIC = "val/accuracy"


def settings(
    profile: str,
    seeds: Sequence[int] | None,
    steps: int | None,
    full_steps: int,
    eval_every: int,
    val_size: int,
) -> profiles.Profile:
    """The study's profile: under the full profile `full_steps` steps, validated every `eval_every`
    steps on at most `val_size` prompts; the smoke profile keeps its own few steps and prompts."""
    chosen = list(seeds) if seeds is not None else None
    return profiles.profile(
        profile, chosen, steps, full_steps=full_steps, eval_every=eval_every, val_size=val_size
    )


def design(
    settings: profiles.Profile, schemes: Sequence[str], faults: Mapping[str, Sequence[Any]], keep: int
) -> list[Point]:
    """Each scheme (the first `keep` under smoke) clean and under each fault level (the first `keep`
    faults under smoke), on the study base."""
    compared = for_profile(list(schemes), settings, keep)
    return fault_points(base(settings), compared, injected(settings, faults, keep))


def injected(settings: profiles.Profile, faults: Mapping[str, Sequence[Any]], keep: int) -> dict:
    """The faults the profile injects: all under the full profile, the first `keep` otherwise."""
    return for_profile(dict(faults), settings, keep)


def run(design: Sequence[Point], settings: profiles.Profile) -> SweepResult:
    """Train (or load) every point over the profile's seeds in the shared store."""
    return experiments.run_design(design, settings.seeds, root=settings.runs_dir())


def finals(result: SweepResult) -> pd.DataFrame:
    """Each run's final validation accuracy, with the design's columns."""
    return stats.final_values(result.metrics, METRIC, by=COLUMNS)


def figure_robustness(
    finals: pd.DataFrame, faults: Mapping[str, Sequence[Any]], settings: profiles.Profile
) -> plt.Figure:
    """Final validation accuracy of each scheme against each fault's level (`plots.robustness`)."""
    table = robustness.robustness_table(finals, METRIC, faults)
    runs = f"{len(settings.seeds)} seeds, {settings.steps} steps, {settings.val_size} validation prompts"
    title = f"final validation accuracy under injected faults (mean and 95% t-interval over {runs})"
    return plots.robustness(table, ylabel="final validation accuracy", title=title)


def changes(finals: pd.DataFrame, schemes: Sequence[str]) -> dict[str, pd.DataFrame]:
    """Each faulty condition's change from the scheme's clean run (paired over seeds), as wide tables
    (condition x scheme): 'change' (difference [95% interval]), 'mde' and 'verdict'."""
    table = robustness.degradation(finals, METRIC)
    order = list(dict.fromkeys(table["condition"]))
    columns = [s for s in schemes if s in set(table["scheme"])]
    wide = {}
    for name, column in (("change", "summary"), ("mde", "mde"), ("verdict", "verdict")):
        wide[name] = table.pivot(index="condition", columns="scheme", values=column)
        wide[name] = wide[name].reindex(order, columns=columns)
    return wide


def diagnostics(result: SweepResult, settings: profiles.Profile) -> tuple[plt.Figure, pd.DataFrame]:
    """The diagnostic rules that fired, per scheme (never merged): a heatmap panel per scheme whose
    cells are out of that scheme's runs of the condition, and the counts (scheme, rule) x condition."""
    findings = robustness.run_findings(result.runs, ["scheme", "condition"])
    counts, totals = {}, {}
    for scheme, runs in result.runs.groupby("scheme", sort=False):
        counts[scheme] = robustness.rule_counts(findings[findings["scheme"] == scheme], runs, by="condition")
        totals[scheme] = runs["condition"].value_counts().to_dict()
    title = (
        f"diagnostic rules that fired, per scheme: runs out of n ({len(settings.seeds)} seeds per condition)"
    )
    table = pd.concat(counts, names=["scheme", "rule"])
    return plots.rule_heatmaps(counts, totals, title=title), table
