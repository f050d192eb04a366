"""Fault injection with power (notebook 17; Evaluation guide §6.4, `docs/sources.md`): every scheme of
the scheme study (`studies.schemes`, with its matched comparator) clean and under each fault of
notebook 04 (`point_sets.FAULTS`), on the scheme study's 60-step runs and its headline score, so that a
robustness effect has a score whose paired sd is known, an interval within the score's range and an
MDE. Notebook 04 keeps its 8-step runs: they are what its diagnostics read (faults act from the first
step), not a robustness verdict.

Two questions per fault:
- `changes`: what the fault does to each scheme, the score under the fault minus the clean score,
  paired on seeds (a faulty run and its clean run share the prompts and sampling streams);
- `relative`: whether a scheme withstands the fault better than grpo and than its matched comparator:
  the difference of the two schemes' changes, paired on seeds (each seed's
  (scheme faulty - scheme clean) - (control faulty - control clean)); positive: the scheme loses less.
Both are judged against the scheme study's margin (`MARGIN_OF_GAIN` x grpo's clean gain). A run that
fails under a fault is counted (`crashes`) and has no score.

- `settings` / `design` / `run`;
- `scores`, `margin`, `changes`, `relative`, `crashes`, `figure`, `markdown`."""

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from grpo_lab.analysis import power, robustness, verdict_table
from grpo_lab.analysis.robustness import CLEAN, CLEAN_CONDITION
from grpo_lab.analysis.stats import seeds_shown
from grpo_lab.comparisons import paired, point_sets, scheme_arms, sequential_seeds
from grpo_lab.comparisons.bed import base, described
from grpo_lab.comparisons.point_sets import for_profile
from grpo_lab.experiments import SweepResult, run_design
from grpo_lab.experiments.designs import Point
from grpo_lab.profiles import Profile

COLUMNS = ["scheme", "fault", "level", "condition"]
"""the design's columns that identify a condition (as notebook 04's)"""
FULL = scheme_arms.FIRST_LOOK
"""under the full profile: the scheme study's runs over its first look, so that every clean run is one
notebook 03 already holds"""
SEEDS_SHOWN = 200
"""`relative`'s seeds_needed is inf beyond this many seeds"""


settings = FULL.settings
"""The study's profile: `FULL` under the full profile, the smoke profile's few otherwise; `seeds`
and `steps` as the notebook sets them."""


def injected(settings: Profile) -> dict[str, list[Any]]:
    """Notebook 04's faults (`point_sets.FAULTS`) under the full profile, the first alone otherwise."""
    return for_profile(dict(point_sets.FAULTS), settings, point_sets.SMOKE_FAULTS)


def design(settings: Profile) -> list[Point]:
    """Each scheme of the scheme study with its matched comparator (`scheme_arms.design`'s arms: their
    clean configs are its runs), clean and under each level of each fault of `injected`, one fault at
    a time; columns `COLUMNS` as in notebook 04 (`robustness.condition_label`)."""
    points = []
    for arm in scheme_arms.design(settings):
        clean = {"scheme": arm.label, "fault": CLEAN, "level": CLEAN, "condition": CLEAN_CONDITION}
        points.append(Point(f"{arm.label}, clean", clean, arm.config))
        for fault, levels in injected(settings).items():
            for level in levels:
                condition = robustness.condition_label(fault, level)
                columns = {"scheme": arm.label, "fault": fault, "level": str(level), "condition": condition}
                points.append(
                    Point(f"{arm.label}, {condition}", columns, base(settings, arm.label, **{fault: level}))
                )
    return points


def run(
    points: Sequence[Point], settings: Profile, root: str | Path | None = None, **options: Any
) -> SweepResult:
    """Train (or load) every point over the profile's seeds into `root` (default: the profile's store);
    a run that fails under a fault is recorded, not raised (`crashes` counts it). `options` as for
    `experiments.run_design`."""
    return run_design(points, settings.seeds, settings.runs_dir() if root is None else root, **options)


def scores(result: SweepResult) -> pd.DataFrame:
    """One row per finished run: its scores (`analysis.verdict_table.run_scores`) with `COLUMNS`."""
    scored = paired.scores(result, {})
    columns = result.runs[["label", *COLUMNS]].drop_duplicates("label")
    return scored.merge(columns, on="label", validate="many_to_one")


def crashes(result: SweepResult) -> pd.DataFrame:
    """Per scheme and condition, the runs that failed (`SweepResult.failures`) out of all."""
    runs = result.runs.assign(failed=result.runs["status"] == "failed")
    table = runs.groupby(["scheme", "condition"], sort=False)["failed"].agg(failed="sum", runs="size")
    return table.reset_index()


def margin(scored: pd.DataFrame) -> float:
    """The scheme study's margin: `MARGIN_OF_GAIN` x grpo's clean gain (`verdict_table.gain`),
    `sequential_seeds.MIN_MARGIN` where grpo learned nothing."""
    clean = scored[(scored["scheme"] == scheme_arms.REFERENCE) & (scored["condition"] == CLEAN_CONDITION)]
    return sequential_seeds.margin_of(clean)


def changes(scored: pd.DataFrame, margin: float) -> pd.DataFrame:
    """What each fault does to each scheme's score, paired on seeds with the scheme's clean runs
    (`robustness.degradation`: diff, 95% interval, MDE, verdict against `margin`), the schemes in the
    scheme study's order."""
    table = robustness.degradation(scored, "score", margin=margin)
    return table.sort_values("scheme", key=scheme_arms.order, kind="stable", ignore_index=True)


def relative(scored: pd.DataFrame, margin: float) -> pd.DataFrame:
    """Per scheme row of the scheme study (`scheme_arms.arms`: against grpo, and against its matched
    comparator) and fault condition, the scheme's change under the fault minus the control's, paired
    on seeds (`power.paired` of the two changes per seed): positive, the scheme loses less. Columns:
    row, kind, treatment, control, condition, n, diff, lo, hi, mde, verdict (against `margin`), and
    seeds_needed: the paired seeds whose MDE would reach `margin` at the spread these seeds show
    (`power.seeds_needed`; inf beyond `SEEDS_SHOWN`), what deciding the row would take."""
    change = _per_seed_changes(scored)
    rows = []
    for name, kind, treatment, control in scheme_arms.arms(set(scored["scheme"])):
        for condition in dict.fromkeys(change.loc[change["scheme"] == treatment, "condition"]):
            t = _series(change, treatment, condition)
            c = _series(change, control, condition)
            result = power.paired(t, c)
            rows.append(
                {"row": name, "kind": kind, "treatment": treatment, "control": control,
                 "condition": condition, "n": result.n, "diff": result.effect, "lo": result.low,
                 "hi": result.high, "mde": result.mde, "verdict": result.verdict(margin),
                 "seeds_needed": _seeds_for(result, margin)}
            )  # fmt: skip
    return pd.DataFrame(rows)


def _seeds_for(result: power.Paired, margin: float) -> float:
    """The seeds whose MDE reaches `margin` at `result`'s paired spread: NaN without a spread, inf
    beyond `SEEDS_SHOWN`."""
    if not np.isfinite(result.sd):
        return math.nan
    n = power.seeds_needed(result.sd, margin, most=SEEDS_SHOWN + 1)  # SEEDS_SHOWN + 1: not reached
    return float(n) if n <= SEEDS_SHOWN else math.inf


def _per_seed_changes(scored: pd.DataFrame) -> pd.DataFrame:
    """Per scheme, faulty condition and seed: the score minus the scheme's clean score of that seed."""
    clean = scored[scored["condition"] == CLEAN_CONDITION].set_index(["scheme", "seed"])["score"]
    faulty = scored[scored["condition"] != CLEAN_CONDITION]
    lost = faulty["score"].to_numpy() - clean.reindex(pd.MultiIndex.from_frame(faulty[["scheme", "seed"]]))
    return faulty[["scheme", "condition", "seed"]].assign(change=np.asarray(lost, dtype=float))


def _series(change: pd.DataFrame, scheme: str, condition: str) -> pd.Series:
    found = change[(change["scheme"] == scheme) & (change["condition"] == condition)]
    return found.set_index("seed")["change"]


def figure(changed: pd.DataFrame, margin: float, settings: Profile) -> plt.Figure:
    """A panel per fault condition: each scheme's change of the headline score under it (the
    effect with its 95% interval, coloured by verdict), its MDE as a grey bar around 0 and the margin
    as dotted lines; the title gives the seeds the rows rest on."""
    conditions = list(dict.fromkeys(changed["condition"]))
    size = (max(2.6 * len(conditions) + 1.5, 8), 0.32 * changed["scheme"].nunique() + 2.2)
    fig, axes = plt.subplots(1, len(conditions), figsize=size, squeeze=False, sharey=True)
    names = [s for s in scheme_arms.SCHEMES if s in set(changed["scheme"])][::-1]
    y = {name: i for i, name in enumerate(names)}
    for ax, condition in zip(axes[0], conditions):
        rows = changed[changed["condition"] == condition]
        for r in rows.itertuples():
            at = y[r.scheme]
            if np.isfinite(r.mde):
                ax.barh(at, 2 * r.mde, left=-r.mde, height=0.6, color="0.88", zorder=1)
            colour = verdict_table.VERDICT_COLORS.get(r.verdict, "0.5")
            ax.errorbar(r.diff, at, xerr=[[r.diff - r.lo], [r.hi - r.diff]], fmt="o", color=colour,
                        ms=4, capsize=2, zorder=3)  # fmt: skip
        for edge in (-margin, margin):
            ax.axvline(edge, color="0.4", ls=":", lw=1)
        ax.axvline(0, color="0.2", lw=0.8)
        ax.set_title(condition, fontsize=9)
        ax.set_xlabel("change of the headline score", fontsize=8)
        ax.grid(axis="x", alpha=0.3)
    axes[0, 0].set_yticks(range(len(names)), names, fontsize=8)
    seeds = seeds_shown(list(changed["n"]))
    fig.suptitle(
        f"what each fault does to each scheme ({described(settings)}, {settings.steps} steps, {seeds} paired "
        f"seeds):\nfault minus clean, 95% interval coloured by verdict; grey: MDE; dotted: the margin "
        f"({margin:.3f})",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.9))
    return fig


def markdown(changed: pd.DataFrame, compared: pd.DataFrame, failed: pd.DataFrame) -> str:
    """The two tables as GitHub markdown: per condition and scheme the change [95% CI], MDE and
    verdict, with the failed runs; then per condition and scheme row the relative robustness."""
    lost = {(r.scheme, r.condition): f"{r.failed}/{r.runs}" for r in failed.itertuples()}
    lines = [
        "| condition | scheme | change [95% CI] | MDE | seeds | failed runs | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in changed.itertuples():
        failures = lost.get((r.scheme, r.condition), "0")
        lines.append(
            f"| {r.condition} | {r.scheme} | {r.summary} | {r.mde:.3f} | {r.n} | {failures} | {r.verdict} |"
        )
    lines += [
        "",
        "| condition | row | kind | scheme's change minus the control's [95% CI] | MDE | seeds "
        "| seeds for an MDE at the margin | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in compared.itertuples():
        shown = f"{r.diff:+.3f} [{r.lo:+.3f}, {r.hi:+.3f}]"
        x = r.seeds_needed
        needed = "n/a" if math.isnan(x) else f"> {SEEDS_SHOWN}" if math.isinf(x) else f"{x:.0f}"
        lines.append(
            f"| {r.condition} | {r.row} | {r.kind} | {shown} | {r.mde:.3f} | {r.n} | {needed} | {r.verdict} |"
        )
    return "\n".join(lines) + "\n"
