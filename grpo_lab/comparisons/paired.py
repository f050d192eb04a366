"""What the paired-comparison studies share (03 schemes, 02 ablations, 12 verdicts, 11 your task):
running a design in which every arm is needed, scoring its runs for the verdict table
(`analysis.verdict_table`), and drawing a verdict table as a forest plot. Not a study itself: the study
modules call it, so the four of them train, score and draw their arms the same way."""

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from grpo_lab.analysis import step_cost, verdict_table
from grpo_lab.analysis.scores import HEADLINE
from grpo_lab.config import Config
from grpo_lab.experiments import SweepResult, execute, run_design
from grpo_lab.experiments.designs import Point
from grpo_lab.experiments.sweeps import collect
from grpo_lab.models.size import model_size
from grpo_lab.profiles import Profile
from grpo_lab.runlog import read_config


def run(
    points: Sequence[Point],
    settings: Profile,
    root: str | Path | None = None,
    may_fail: Collection[str] = (),
    **options: Any,
) -> SweepResult:
    """Train (or load) a design over the profile's seeds into `root` (default: the profile's run
    store). A failed run of any label but those in `may_fail` is an error here, as a verdict needs
    every arm; a label whose failure is itself the outcome measured (a combination reported to crash)
    is listed in `may_fail`. `options` as for `experiments.run_design`."""
    result = run_design(points, settings.seeds, settings.runs_dir() if root is None else root, **options)
    return checked(result, may_fail)


def run_seeded(seeded: Sequence[tuple[Point, Config]], root: str | Path, **options: Any) -> SweepResult:
    """Train (or load) runs whose seeds the study chose itself (point, config with its seed) into
    `root`; a failed run is an error, as for `run`. `options` as for `experiments.execute`."""
    where = Path(root).resolve()
    return checked(collect(list(seeded), execute([c for _, c in seeded], where, **options), where))


def checked(result: SweepResult, may_fail: Collection[str] = ()) -> SweepResult:
    """`result`, or a RuntimeError listing its failed runs of any label but those in `may_fail`."""
    failures = result.failures[~result.failures["label"].isin(list(may_fail))]
    if len(failures):
        failed = failures[["label", "seed", "error"]].to_string(index=False)
        raise RuntimeError(f"{len(failures)} runs failed:\n{failed}")
    return result


def configs(result: SweepResult) -> dict[str, dict]:
    """Label -> the config dict of its runs (seeds aside, equal for every run of a label), read from
    the runs that finished."""
    finished = result.runs[result.runs["status"] != "failed"]
    return {row.label: read_config(row.path) for row in finished.drop_duplicates("label").itertuples()}


def step_counts(result: SweepResult) -> pd.DataFrame:
    """One row per label of the finished runs with what a step of them costs by count
    (`analysis.step_cost.by_label` over all their seeds' logged tokens, the model's weights counted by
    `models.size.model_size`): columns `label` and `verdict_table.COUNT_COLUMNS`."""
    found = configs(result)
    if not found:
        return pd.DataFrame(columns=["label", *verdict_table.COUNT_COLUMNS])
    size = model_size(Config.from_dict(next(iter(found.values()))))
    finished = result.metrics[result.metrics["label"].isin(list(found))]
    costs = step_cost.by_label(finished, found, params=size.matmul, trained_params=size.trained)
    return pd.DataFrame([{"label": label, **verdict_table.count_columns(c)} for label, c in costs.items()])


def scores(result: SweepResult, measured: Mapping[str, Sequence[str]]) -> pd.DataFrame:
    """One row per finished run with its verdict scores (`analysis.verdict_table.run_scores`) and its
    label's step cost by count (`step_counts`, what a verdict table's `cost x` reads); the runs of label L
    also carry the activity measure of every scheme or trick in `measured[L]`."""
    scored = verdict_table.run_scores(result.metrics, configs(result), dict(measured))
    return scored.merge(step_counts(result), on="label", how="left")


def _seeds(table: pd.DataFrame, mixed: bool) -> str:
    """The seeds the rows rest on: one range of paired seeds, or a range per protocol (a screen's
    factor rests on its runs, each with a seed of its own)."""
    if not len(table):
        return "no seeds"
    if not mixed:
        return f"{table['seeds'].min()}-{table['seeds'].max()} paired seeds per comparison"
    spans = table.groupby("protocol", sort=False)["seeds"].agg(["min", "max"])
    named = [f"{p} {lo}" if lo == hi else f"{p} {lo}-{hi}" for p, lo, hi in spans.itertuples()]
    return "seeds (runs, for a screen) per row: " + ", ".join(named)


def forest_axes(
    table: pd.DataFrame, labels: Sequence[str], margins: str, extra_height: float
) -> tuple[plt.Figure, plt.Axes]:
    """The forest plot of every verdict table and of the screen's main effects, one row per row of
    `table` (first at the top, labelled by `labels`): the effect and its interval coloured by verdict
    (`verdict_table.VERDICT_COLORS`, grey for any other), the MDE as a grey band around 0 and the
    margin, either as ticks on each row (`margins='per row'`: the paired rows, each with its own) or
    as dotted lines (`margins='shared'`: the screen's one margin; a row without a finite interval then
    shows its effect alone). The caller writes the axis label and the title."""
    if margins not in ("per row", "shared"):
        raise ValueError(f"margins must be 'per row' or 'shared', got {margins!r}")
    rows = table.iloc[::-1]
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(rows) + extra_height))
    y = np.arange(len(rows))
    mde = rows["mde"].clip(upper=1)
    ax.barh(y, 2 * mde, left=-mde, color="0.9", label="± MDE")
    for yi, r in zip(y, rows.itertuples()):
        colour = verdict_table.VERDICT_COLORS.get(r.verdict, "0.4")
        bar = [[r.effect - r.ci_low], [r.ci_high - r.effect]]
        if margins == "per row":
            ax.errorbar(r.effect, yi, xerr=bar, fmt="o", color=colour, capsize=3)
            ax.plot([-r.margin, r.margin], [yi, yi], "|", color="k", ms=10)
            continue
        if np.isfinite(r.ci_low):
            ax.errorbar(r.effect, yi, xerr=bar, fmt="none", ecolor=colour, capsize=3)
        ax.plot(r.effect, yi, "o", color=colour)
    ax.axvline(0, color="k", lw=0.8)
    if margins == "shared":
        margin = float(table["margin"].iloc[0])
        for x in (-margin, margin):
            ax.axvline(x, color="k", lw=0.8, ls=":")
    ax.set_yticks(y, list(labels)[::-1])
    return fig, ax


def forest(table: pd.DataFrame, runs: str, title: str) -> plt.Figure:
    """A verdict table (`analysis.verdict_table.compare`) as a forest plot (`forest_axes`): each row's
    paired effect on the headline score with its interval (coloured by verdict; 95%, or the
    sequential rule's adjusted one on its rows), its MDE as a grey band around 0 and its margin as
    ticks. `runs` says what the runs were (steps), `title` what is compared."""
    mixed = "protocol" in table and table["protocol"].nunique() > 1
    labels = [
        f"{r.row} ({r.kind}, {r.protocol})" if mixed else f"{r.row} ({r.kind})" for r in table.itertuples()
    ]
    fig, ax = forest_axes(table, labels, "per row", 1.5)
    interval = "95% t-interval over seeds"
    if "protocol" in table and (table["protocol"] == "sequential").any():
        interval += "; sequential rows: the rule's adjusted interval"
    ax.set_xlabel(f"paired effect on the {HEADLINE.caption()} ({interval})", fontsize=8)
    ax.set_title(
        f"{title}; {runs}; {_seeds(table, mixed)}\n"
        "grey: ± minimum detectable effect (power 0.8); ticks: ± margin of the row",
        fontsize=9,
    )
    fig.tight_layout()
    return fig
