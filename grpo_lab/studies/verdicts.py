"""The headline comparisons and their verdict table (`docs/sources.md`, Evaluation guide §6.3 and
Tricks review §3.1): every scheme against `grpo`, and every trick left out of all tricks on, on the
study base, with arms paired on seeds (the same seed gives every arm the same prompts and sampling
streams). Design -> runs -> measures -> table and figure:

- `scheme_points` / `trick_points`: the designs (labelled configurations, seeds set later);
- `run`: trains or loads both designs over the seeds through the run store;
- `scores` / `table`: per-run scores (final accuracy, stability, cost, activity) and the verdict table
  (`analysis.verdicts.compare`);
- `figure`: the table as a forest plot of effects with their MDEs."""

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from grpo_lab.analysis import verdicts
from grpo_lab.experiments import SweepResult, run_design
from grpo_lab.experiments.designs import Point, ablation_points
from grpo_lab.presets import TRICKS
from grpo_lab.profiles import Profile
from grpo_lab.runlog import read_config
from grpo_lab.studies.base import base

SCHEMES = ("grpo", "scheme_a", "scheme_b", "scheme_c", "dr_grpo", "dapo", "gspo", "cispo")
"""the compared schemes; `grpo` is the reference"""
REFERENCE = "grpo"
ALL_ON = "all"
"""the leave-one-out reference: every trick on"""


def scheme_points(settings: Profile, schemes: Sequence[str] = SCHEMES, **changes: Any) -> list[Point]:
    """Each scheme on the study base (`changes` apply to all), labelled by its preset name."""
    if REFERENCE not in schemes:
        raise ValueError(f"the schemes must include the reference {REFERENCE!r}, got {list(schemes)}")
    return [Point(name, {"arm": name}, base(settings, name, **changes)) for name in schemes]


def trick_points(settings: Profile, tricks: Sequence[str] | None = None, **changes: Any) -> list[Point]:
    """All tricks of `presets.TRICKS` on over the study base ('all'), then each left out ('-name')."""
    chosen = {k: v for k, v in TRICKS.items() if tricks is None or k in tricks}
    unknown = sorted(set(tricks or ()) - set(TRICKS))
    if unknown:
        raise ValueError(f"unknown trick(s) {unknown}; valid: {', '.join(TRICKS)}")
    points = ablation_points(base(settings, **changes), chosen, "leave-one-out")
    return [Point(p.label, {"arm": p.label}, p.config) for p in points]


@dataclass(frozen=True)
class Runs:
    schemes: SweepResult
    tricks: SweepResult


def run(
    settings: Profile,
    schemes: Sequence[str] = SCHEMES,
    tricks: Sequence[str] | None = None,
    root: str | Path | None = None,
    **options: Any,
) -> Runs:
    """Train (or load) both designs over the profile's seeds into `root` (default: the profile's run
    store); `options` as for `experiments.run_design`."""
    root = settings.runs_dir() if root is None else root
    scheme_runs = run_design(scheme_points(settings, schemes), settings.seeds, root, **options)
    trick_runs = run_design(trick_points(settings, tricks), settings.seeds, root, **options)
    for name, result in (("scheme", scheme_runs), ("trick", trick_runs)):
        if len(result.failures):
            raise RuntimeError(
                f"{len(result.failures)} {name} runs failed: {result.failures[['label', 'error']]}"
            )
    return Runs(scheme_runs, trick_runs)


def scores(runs: Runs) -> pd.DataFrame:
    """One row per run of both designs with its scores and the activity of what it switches on:
    each scheme's own measure in its runs, every trick's in the runs with all tricks on."""
    schemes, tricks = _configs(runs.schemes), _configs(runs.tricks)
    left_out = [t for t in TRICKS if f"-{t}" in tricks]
    parts = [
        verdicts.run_scores(runs.schemes.metrics, schemes, {label: [label] for label in schemes}),
        verdicts.run_scores(runs.tricks.metrics, tricks, {ALL_ON: left_out}),
    ]
    return pd.concat(parts, ignore_index=True)


def table(scored: pd.DataFrame, margin: float = verdicts.MARGIN) -> pd.DataFrame:
    """The verdict table: schemes against grpo, then tricks (all on against all but that one)."""
    labels = set(scored["label"])
    arms = [(s, "scheme", s, REFERENCE) for s in SCHEMES if s in labels and s != REFERENCE]
    arms += [(t, "trick", ALL_ON, f"-{t}") for t in TRICKS if f"-{t}" in labels]
    return verdicts.compare(scored, arms, margin=margin)


def figure(
    verdict_table: pd.DataFrame, steps: int, seeds: int, margin: float = verdicts.MARGIN
) -> plt.Figure:
    """Effects on final validation accuracy with 95% intervals (bars), the MDE (grey band around 0
    per row) and the margin (dotted), schemes and tricks."""
    rows = verdict_table.iloc[::-1]
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(rows) + 1.5))
    y = np.arange(len(rows))
    ax.barh(y, 2 * rows["mde"].clip(upper=1), left=-rows["mde"].clip(upper=1), color="0.9", label="± MDE")
    colors = {"better": "tab:green", "worse": "tab:red", "no difference > margin": "tab:blue"}
    for yi, r in zip(y, rows.itertuples()):
        ax.errorbar(r.effect, yi, xerr=[[r.effect - r.ci_low], [r.ci_high - r.effect]], fmt="o",
                    color=colors.get(r.verdict, "0.4"), capsize=3)  # fmt: skip
    ax.axvline(0, color="k", lw=0.8)
    for x in (-margin, margin):
        ax.axvline(x, color="k", lw=0.8, ls=":")
    ax.set_yticks(y, [f"{r.row} ({r.kind})" for r in rows.itertuples()])
    ax.set_xlabel("paired effect on final validation accuracy (95% t-interval over seeds)")
    ax.set_title(
        f"verdicts: schemes vs grpo, tricks left out of all-on; {steps} steps, {seeds} paired seeds per arm\n"
        f"grey: ± minimum detectable effect (power 0.8); dotted: ± margin {margin}",
        fontsize=9,
    )
    fig.tight_layout()
    return fig


def _configs(result: SweepResult) -> dict[str, dict]:
    """Label -> the config dict of its runs (seeds aside, equal for every run of a label)."""
    return {row.label: read_config(row.path) for row in result.runs.itertuples()}
