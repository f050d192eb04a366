"""The fault-injection study (notebook 04): every scheme on the study base (`comparisons.bed.base`), clean
and under each level of each injected fault (`studies.fault_points`), the fault-injection step of
Evaluation guide §6.4 Fault injection (docs/sources.md). `settings` / `design` / `run`, then the
measures: the final validation accuracy against each fault's level (`figure`), each condition's
change from the same scheme's clean run (paired over seeds, with its minimum detectable effect:
`changes`), and the diagnostic rules each condition sets off, per scheme (`diagnostics`).

The changes are one family (`FAMILY`) under Benjamini-Hochberg's control of the false-discovery rate,
as the fault-robustness study's changes (notebook 17, `studies.fault_robustness`) and for its reason: the
faults are built to hurt, so the table is read as a map of where they bite, and the error to bound is
the share of false words among those it says. Each cell shows its raw word beside its adjusted one."""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd

from grpo_lab.analysis import alarms, multiplicity, plots, robustness, stats
from grpo_lab.analysis.robustness import CLEAN_CONDITION
from grpo_lab.comparisons.bed import base
from grpo_lab.comparisons.point_sets import FAULTS, SMOKE_FAULTS, fault_points, for_profile
from grpo_lab.experiments import SweepResult, run_design
from grpo_lab.experiments.designs import Point
from grpo_lab.profiles import Budget, Profile

COLUMNS = ["scheme", "fault", "level", "condition"]
"""the design's columns that identify a condition"""
METRIC = "val/accuracy"
SCHEMES = ("grpo", "scheme_a", "scheme_b", "scheme_c")
"""the schemes put under faults"""
FAMILY = multiplicity.Family(
    "every scheme's change under every fault condition, the cells of this table", "bh"
)
"""the changes' family and its error-rate control (module doc)"""
SMOKE_KEEP = 1
"""the smoke profile keeps only the first scheme and the first fault"""
FULL = Budget(seeds=(0, 1, 2), steps=8, eval_every=2, val_size=50)
"""under the full profile: 3 seeds of 8 steps, validated every 2 steps (the stall rule needs 4
evaluations) on 50 prompts: faults act from the first step, and the diagnostics read the training
metrics, so short runs show them (`docs/studies.md`, "Sizing the full profile")"""


settings = FULL.settings
"""The study's profile: `FULL` under the full profile, the smoke profile's few steps and prompts
otherwise; `seeds` and `steps` as the notebook sets them."""


def schemes(settings: Profile) -> list[str]:
    """`SCHEMES` under the full profile; the first `SMOKE_KEEP` otherwise."""
    return for_profile(list(SCHEMES), settings, SMOKE_KEEP)


def injected(settings: Profile) -> dict[str, list[Any]]:
    """The faults the profile injects: all of `FAULTS` under the full profile, the first
    `SMOKE_FAULTS` otherwise."""
    return for_profile(dict(FAULTS), settings, SMOKE_FAULTS)


def design(settings: Profile) -> list[Point]:
    """Each scheme of `schemes(settings)` clean and under each level of `injected(settings)`, on the
    study base."""
    return fault_points(base(settings), schemes(settings), injected(settings))


def run(
    points: Sequence[Point], settings: Profile, root: str | Path | None = None, **options: Any
) -> SweepResult:
    """Train (or load) every point over the profile's seeds into `root` (default: the shared store);
    failures are recorded (a run that fails under a fault is a finding of the diagnostics). `options`
    as for `experiments.run_design`."""
    return run_design(points, settings.seeds, settings.runs_dir() if root is None else root, **options)


def finals(result: SweepResult) -> pd.DataFrame:
    """Each run's final validation accuracy, with the design's columns."""
    return stats.final_values(result.metrics, METRIC, by=COLUMNS)


def figure(finals: pd.DataFrame, settings: Profile) -> plt.Figure:
    """Final validation accuracy of each scheme against each injected fault's level
    (`plots.robustness`)."""
    table = robustness.robustness_table(finals, METRIC, injected(settings))
    runs = f"{len(settings.seeds)} seeds, {settings.steps} steps, {settings.val_size} validation prompts"
    title = f"final validation accuracy under injected faults (mean and 95% t-interval over {runs})"
    return plots.robustness(table, ylabel="final validation accuracy", title=title)


def changes(finals: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Each faulty condition's change from the scheme's clean run (paired over seeds), as wide tables
    (condition x scheme, schemes in the order of `SCHEMES`): 'change' (difference [95% interval]),
    'mde', 'verdict', 'adjusted verdict' (the word of the cell's interval at its `FAMILY` level,
    `robustness.adjusted`) and 'p' (the cell's p-value; NaN outside the family)."""
    table = robustness.adjusted(robustness.degradation(finals, METRIC), FAMILY)
    order = list(dict.fromkeys(table["condition"]))
    columns = [s for s in SCHEMES if s in set(table["scheme"])]
    wide = {}
    named = [("change", "summary"), ("mde", "mde"), ("verdict", "verdict")]
    named += [("adjusted verdict", "adjusted verdict"), ("p", "p")]
    for name, column in named:
        wide[name] = table.pivot(index="condition", columns="scheme", values=column)
        wide[name] = wide[name].reindex(order, columns=columns)
    return wide


def caption(change: dict[str, pd.DataFrame]) -> str:
    """The changes' family line (`FAMILY`): its cells (those with a p-value, `changes`) and control."""
    return FAMILY.caption(int(change["p"].notna().sum().sum()))


def diagnostics(result: SweepResult, settings: Profile) -> tuple[plt.Figure, pd.DataFrame]:
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


def detection(result: SweepResult, settings: Profile) -> tuple[plt.Figure, pd.DataFrame]:
    """The confusion table of the diagnostics (`analysis.alarms.confusion`): per condition, clean
    first, the share of its runs (every scheme pooled) each rule fired on. The clean row is each
    rule's false-alarm rate on this design, the others its detection rate of that fault; a failed run
    has no logs to read and is left out of its row's n. Figure and table."""
    finished = result.runs[result.runs["status"] != "failed"]
    order = sorted(dict.fromkeys(finished["condition"]), key=lambda c: c != CLEAN_CONDITION)  # clean first
    schemes = ", ".join(dict.fromkeys(finished["scheme"]))
    title = f"rules that fired per condition ({schemes}; {len(settings.seeds)} seeds each)"
    return alarms.detection(result.runs, "condition", order, title)
