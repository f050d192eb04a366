"""Sensitivity of GRPO to its main knobs, as Evaluation guide §4.6 Tuning sensitivity asks
(docs/sources.md): "cover the learning rate, clip threshold, KL coefficient and group size; is the
outcome smooth around the default, or is there a steep failure boundary?" Each knob is scanned
alone around the study base (`grpo_lab.comparisons.bed.base`) on short runs; the outcome against the value
is read with `stats.sensitivity_table` and its failure edges (where the outcome falls more than a
margin below the knob's best value) with `stats.failure_edges`. Every scheme's own scans, on the
headline score of 60-step runs, are notebook 16's (`studies.scheme_sensitivity`).

`settings` / `design` / `run`, then `outcome_table`, `edge_table` and `figure`."""

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.artist import Artist

from grpo_lab.analysis.stats import failure_edges, sensitivity_table
from grpo_lab.comparisons.bed import base as study_base
from grpo_lab.config import Config
from grpo_lab.experiments import SweepResult, run_design
from grpo_lab.experiments.designs import Point
from grpo_lab.profiles import Budget, Profile

FULL = Budget(seeds=(0, 1, 2), steps=20)
"""the short-run budget of 06 under the full profile: 3 seeds of 20 steps, validated only
before the first and after the last update (the outcome is the final validation; `docs/studies.md`,
"Sizing the full profile")"""


settings = FULL.settings
"""The short-run profile: `FULL` under the full profile, the smoke profile's few otherwise,
validated only at the ends under every profile; `seeds` and `steps` as the notebook sets them."""


def base_config(settings: Profile) -> Config:
    """The study base (`comparisons.bed.base`) under the profile: its steps, validation interval and size."""
    return study_base(settings)


@dataclass(frozen=True)
class Scan:
    """One knob scanned over values, the rest of the config fixed."""

    name: str
    """the knob, as it appears in the `scan` column"""
    fields: tuple[str, ...]
    """config fields set to each value (the clip range sets both bounds)"""
    values: tuple[Any, ...]
    label: str
    """x-axis label, with units"""
    scale: str
    """x-axis scale: 'log', 'log2', 'symlog' (log with a linear stretch around 0) or 'linear'"""


SCANS = (
    Scan(
        name="learning_rate",
        fields=("learning_rate",),
        values=(1e-5, 3e-5, 1e-4, 3e-4, 1e-3),
        label="learning rate (AdamW)",
        scale="log",
    ),
    Scan(
        name="clip_range",
        fields=("eps_low", "eps_high"),
        values=(0.01, 0.05, 0.2, 0.5),
        label="clip range ε (ratio clipped to [1-ε, 1+ε])",
        scale="log",
    ),
    Scan(
        name="kl_coef",
        fields=("kl_coef",),
        values=(0.0, 0.04, 0.2, 1.0),
        label="KL coefficient β (k3 in the loss)",
        scale="symlog",
    ),
    Scan(
        name="group_size",
        fields=("group_size",),
        values=(2, 4, 8, 16),
        label="group size G (completions per prompt)",
        scale="log2",
    ),
)
SMOKE_VALUES = {"learning_rate": (3e-5, 1e-3), "clip_range": (0.2,), "kl_coef": (0.04,), "group_size": (8,)}
"""the values under the smoke profile: a curve for the learning rate, the default alone for the others"""

Outcome = tuple[str, int, str]
"""(metric, window of last logged values, label)"""
OUTCOMES: tuple[Outcome, ...] = (
    ("val/accuracy", 1, "final validation accuracy (greedy)"),
    ("reward", 10, "training reward (mean of last 10 steps)"),
)
"""the outcomes read against each knob"""


def scans(settings: Profile) -> tuple[Scan, ...]:
    """Every value under the full profile; `SMOKE_VALUES` otherwise."""
    if settings.name == "full":
        return SCANS
    return tuple(replace(s, values=SMOKE_VALUES[s.name]) for s in SCANS)


def points(base: Config, scan: Scan) -> list[Point]:
    """One design point per value of `scan`: columns `scan` (its name) and `value`."""
    return [
        Point(
            f"{scan.name}={value}",
            {"scan": scan.name, "value": value},
            base.replace(**dict.fromkeys(scan.fields, value)),
        )
        for value in scan.values
    ]


def design(settings: Profile) -> list[Point]:
    """Every scan of `scans(settings)` around the base in one design (a configuration shared by
    several scans, such as the base, is trained once)."""
    config = base_config(settings)
    return [p for scan in scans(settings) for p in points(config, scan)]


def run(
    points: Sequence[Point], settings: Profile, root: str | Path | None = None, **options: Any
) -> SweepResult:
    """Train (or load) the design over the profile's seeds into `root` (default: the shared store).
    `options` as for `experiments.run_design`."""
    return run_design(points, settings.seeds, settings.runs_dir() if root is None else root, **options)


def outcome_table(
    metrics: pd.DataFrame, scans: Sequence[Scan], outcomes: Sequence[Outcome] = OUTCOMES
) -> pd.DataFrame:
    """Per scan, outcome and value: runs, across-seed mean with t-interval and IQM of the outcome
    (each run's mean of its last `window` logged values), from `stats.sensitivity_table`."""
    frames = []
    for scan in scans:
        runs = metrics[metrics["scan"] == scan.name].astype({"value": float})
        for metric, window, _ in outcomes:
            table = sensitivity_table(runs, "value", metric, window)
            frames.append(table.assign(scan=scan.name, outcome=metric))
    return pd.concat(frames, ignore_index=True)[["scan", "outcome", "value", "n", "mean", "lo", "hi", "iqm"]]


def edge_table(outcomes: pd.DataFrame, margin: float) -> pd.DataFrame:
    """The failure edges of every scan and outcome (`stats.failure_edges`: values whose mean outcome
    lies more than `margin` below the scan's best, or that crashed), one row each."""
    rows = []
    for (scan, outcome), table in outcomes.groupby(["scan", "outcome"], sort=False):
        for edge in failure_edges(table, "value", margin):
            rows.append({"scan": scan, "outcome": outcome, **edge._asdict(), "drop": edge.drop})
    return pd.DataFrame(rows, columns=["scan", "outcome", "value", "best", "mean", "best_mean", "drop"])


def figure(
    outcomes: pd.DataFrame,
    scans: Sequence[Scan],
    margin: float,
    base: Config,
    labels: Sequence[Outcome] = OUTCOMES,
) -> plt.Figure:
    """A column per knob, a row per outcome (one y scale per row): the across-seed mean (points and
    line) with its 95% t-interval (error bars) against the value; the study base's value dotted;
    failure edges (`edge_table`: a mean more than `margin` below the knob's best) as red crosses."""
    found = edge_table(outcomes, margin)
    edge_style: dict[str, Any] = dict(
        color="tab:red", marker="x", ms=11, mew=2.5, ls="none", zorder=4,
        label=f"failure edge (mean > {margin:g} below the best value)",
    )  # fmt: skip
    mean_style: dict[str, Any] = dict(fmt="o-", color="tab:blue", ms=4, lw=1.2, capsize=3, zorder=3)
    fig, axes = plt.subplots(
        len(labels),
        len(scans),
        figsize=(3.6 * len(scans), 3.0 * len(labels) + 0.6),
        squeeze=False,
        sharey="row",
    )
    for col, scan in enumerate(scans):
        default = getattr(base, scan.fields[0])
        for row, (metric, _, label) in enumerate(labels):
            ax = axes[row, col]
            t = outcomes[(outcomes["scan"] == scan.name) & (outcomes["outcome"] == metric)].sort_values(
                "value"
            )
            edges = found[(found["scan"] == scan.name) & (found["outcome"] == metric)]
            if len(edges):
                ax.plot(edges["value"], edges["mean"], **edge_style)
            bars = [t["mean"] - t["lo"], t["hi"] - t["mean"]]
            ax.errorbar(
                t["value"], t["mean"], yerr=bars, label="across-seed mean, 95% t-interval", **mean_style
            )
            ax.axvline(default, color="0.5", ls=":", lw=1, zorder=1, label="study base")
            _set_scale(ax, scan)
            ax.grid(alpha=0.3)
            if row == len(labels) - 1:
                ax.set_xlabel(scan.label, fontsize=9)
            if col == 0:
                ax.set_ylabel(label, fontsize=9)
        axes[0, col].set_title(scan.label.split(" (")[0], fontsize=10)
    handles: dict[str, Artist] = {}  # label -> its first handle, so that each label shows once
    for ax in axes.flat:
        lines, names = ax.get_legend_handles_labels()
        handles.update(zip(names, lines))
    fig.legend(
        list(handles.values()),
        list(handles),
        loc="lower center",
        ncol=len(handles),
        fontsize=8,
        frameon=False,
    )
    n = outcomes["n"].max()
    fig.suptitle(f"sensitivity of GRPO on {base.task} (mean and 95% t-interval over {n} seeds)", fontsize=11)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig


def _set_scale(ax: plt.Axes, scan: Scan) -> None:
    """The scan's x scale, ticks at its values."""
    if scan.scale == "log":
        ax.set_xscale("log")
    elif scan.scale == "log2":
        ax.set_xscale("log", base=2)
    elif scan.scale == "symlog":
        positive = [v for v in scan.values if v > 0]
        ax.set_xscale("symlog", linthresh=min(positive) if positive else 1.0)
    elif scan.scale != "linear":
        raise ValueError(f"unknown scale {scan.scale!r}; valid: log, log2, symlog, linear")
    ax.set_xticks(list(scan.values), [f"{v:g}" for v in scan.values], fontsize=8)
    ax.minorticks_off()
    ax.set_xlim(*_padded(scan))


def _padded(scan: Scan) -> tuple[float, float]:
    """x limits a little beyond the first and last value, in the scan's scale."""
    lo, hi = min(scan.values), max(scan.values)
    if scan.scale in ("log", "log2"):
        return lo / 1.5, hi * 1.5
    if scan.scale == "symlog":
        return lo - 0.5 * min([v for v in scan.values if v > 0] or [1.0]), hi * 1.5
    span = hi - lo or 1.0
    return lo - 0.05 * span, hi + 0.05 * span
