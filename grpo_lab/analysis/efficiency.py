"""Sample efficiency (`docs/sources.md`, Evaluation guide §4.3: the steps and sampled groups a scheme
needs to reach the same validation score, the share of invalid samples, the reward discrimination
within a group), read from run logs only.

A run reaches a target at its first logged point at or above it (`reach`); a run that never does is
censored at its last logged point, never dropped: dropping it would draw a scheme that reaches the
target in one run of nine as fast as one that reaches it in all nine. Every run of a study is logged
at the same steps and censored only at its end, so the share of runs that reached the target by a
step (`reached_share`) is the Kaplan-Meier estimate of the cumulative incidence, shown with the count
that reached it ('k of n'). Two views of one target rule (`target`: the reference's start plus a share
of what it gains over the run): the validation score at its evaluations, and the task reward of the
training batches (before any shaping), logged at every step, smoothed by a trailing mean: a study
that skips early evaluations (`profiles.Budget.scored_tail`) still shows its early steps there."""

import math
from collections.abc import Sequence
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from grpo_lab.analysis.plots import GAP
from grpo_lab.analysis.stats import curve, seeds_shown

TARGET_SHARE = 0.5
"""the common target: the reference's start plus this share of its gain over the run"""
TRAIN_METRIC = "rewards/correct/mean"
"""the training-batch view: the task's correctness of the sampled completions, before shaping"""
SMOOTH = 10
"""trailing mean, in steps, of the training-batch view (one batch's correctness is noisy)"""
INVALID = {
    "frac_reward_zero_std": "zero-variance groups (share of groups)",
    "completions/clipped_ratio": "truncated completions (share)",
}
"""the per-step shares of samples that carry no learning signal, with their panel titles (malformed
completions are not logged apart from wrong ones: a malformed answer scores as a wrong one)"""
SPREAD = "reward_std"
"""the within-group reward spread: the mean over groups of each group's reward std (TRL's name)"""


@dataclass(frozen=True)
class View:
    """One view of a run's progress: a logged column, smoothed or not, and what it is called."""

    metric: str
    """the column read"""
    smooth: int
    """trailing mean over this many logged points within each run (1: none)"""
    label: str
    """what the view is, for a panel's title"""
    on_batch: bool
    """whether a step's value is measured on that step's sampled batch (training), not before the
    batch is sampled (an evaluation at step s sees the updates of steps 0 to s-1 only)"""


def views(validation: str) -> tuple[View, View]:
    """The validation view of `validation` (each evaluation as logged) and the training-batch view."""
    return (
        View(validation, 1, f"{validation} at each evaluation", on_batch=False),
        View(TRAIN_METRIC, SMOOTH, f"training-batch {TRAIN_METRIC}, trailing mean over {SMOOTH} steps", True),
    )


def progress(metrics: pd.DataFrame, view: View, by: str) -> pd.DataFrame:
    """Per run (`by`, seed) and logged step: the view's value, smoothed within the run (over its whole
    length when it is shorter than the window, so that a short run keeps one point), and the
    completions sampled by the time it was measured (`completions`, from `sampling/completions`: the
    batches before the step, and the step's own for a view measured on it, `View.on_batch`)."""
    keys = [by, "seed"]
    data = metrics.sort_values("step")
    sampled = data.dropna(subset=["sampling/completions"])[[*keys, "step", "sampling/completions"]]
    cumulative = sampled.assign(completions=sampled.groupby(keys)["sampling/completions"].cumsum())
    values = data.dropna(subset=[view.metric])[[*keys, "step", view.metric]].copy()
    if view.smooth > 1:
        values[view.metric] = values.groupby(keys)[view.metric].transform(
            lambda s: s.rolling(min(view.smooth, len(s)), min_periods=min(view.smooth, len(s))).mean()
        )
        values = values.dropna(subset=[view.metric])
    merged = pd.merge_asof(
        values.sort_values("step"),
        cumulative[[*keys, "step", "completions"]].sort_values("step"),
        on="step",
        by=keys,
        allow_exact_matches=view.on_batch,
    )
    merged["completions"] = merged["completions"].fillna(0.0)
    return merged.rename(columns={view.metric: "value"}).sort_values([*keys, "step"]).reset_index(drop=True)


def target(progressed: pd.DataFrame, by: str, reference: object, share: float = TARGET_SHARE) -> float:
    """The reference's mean first value plus `share` of its mean gain from its first to its last
    logged value (`progress` output)."""
    runs = progressed[progressed[by] == reference].groupby("seed")["value"]
    if not len(runs):
        raise ValueError(f"no runs of the reference {reference!r} in the view")
    first, last = runs.first().mean(), runs.last().mean()
    return float(first + share * (last - first))


def reach(progressed: pd.DataFrame, by: str, level: float) -> pd.DataFrame:
    """One row per run: whether it reached `level` (`reached`), and the step and completions at its
    first point at or above it, else at its last point (censored)."""
    rows = []
    for (key, seed), run in progressed.groupby([by, "seed"], sort=False):
        hit = run[run["value"] >= level]
        at = hit.iloc[0] if len(hit) else run.iloc[-1]
        rows.append(
            {
                by: key,
                "seed": seed,
                "reached": bool(len(hit)),
                "step": at["step"],
                "completions": at["completions"],
            }
        )
    return pd.DataFrame(rows)


def reached_share(reached: pd.DataFrame, by: str, axis: str, grid: Sequence[float]) -> pd.DataFrame:
    """Per group of `by` and value of `grid` on `axis` ('step' or 'completions'): the share of its
    runs that reached the target by then (`share`), with `n` runs and `k` that reached it at all."""
    rows = []
    for key, runs in reached.groupby(by, sort=False):
        hits = runs.loc[runs["reached"], axis].to_numpy(dtype=float)
        for x in grid:
            rows.append({by: key, axis: x, "share": float((hits <= x).sum() / len(runs))})
    table = pd.DataFrame(rows)
    counts = reached.groupby(by, sort=False).agg(n=("reached", "size"), k=("reached", "sum"))
    return table.merge(counts, left_on=by, right_index=True)


def summary(reached: pd.DataFrame, by: str, order: Sequence[str]) -> pd.DataFrame:
    """Per group: runs, runs that reached the target, and the median step and completions at which
    they did over all runs (NaN when half or more never reached it: a median a censored half hides)."""
    rows = []
    for key in order:
        runs = reached[reached[by] == key]
        n, k = len(runs), int(runs["reached"].sum())
        row = {by: key, "runs": n, "reached": k}
        for axis in ("step", "completions"):
            times = np.sort(runs.loc[runs["reached"], axis].to_numpy(dtype=float))
            row[f"median {axis}"] = (
                float(times[math.ceil(n / 2) - 1]) if k >= math.ceil(n / 2) and n else math.nan
            )
        rows.append(row)
    return pd.DataFrame(rows)


def _shade_unevaluated(ax: plt.Axes, logged: np.ndarray) -> None:
    """Grey where no run was measured: every gap between logged points wider than `plots.GAP` times
    the median gap (a study that skips its early evaluations), so a flat line there is not read as a
    measurement."""
    points = np.unique(logged)
    gaps = np.diff(points)
    if len(gaps) < 2:
        return
    for i in np.flatnonzero(gaps > GAP * np.median(gaps)):
        ax.axvspan(points[i], points[i + 1], color="0.85", alpha=0.6, lw=0)
        ax.text((points[i] + points[i + 1]) / 2, 0.5, "not evaluated", ha="center", fontsize=7, color="0.4")


def figure(
    metrics: pd.DataFrame,
    by: str,
    order: Sequence[str],
    validation: str,
    title: str,
    share: float = TARGET_SHARE,
) -> plt.Figure:
    """Top row, per view (`views`): the share of each group's runs that reached the common target
    (`target` of the first group in `order`, the reference) against steps, and for the validation view
    against sampled completions too, with 'k of n' runs reaching it in the legend. Bottom row, per
    step: the zero-variance-group and truncated shares (`INVALID`) and the within-group reward spread
    (`SPREAD`), mean over each group's seeds, trailing mean over `SMOOTH` steps."""
    fig, axes = plt.subplots(2, 3, figsize=(15.0, 8.2))
    reference = order[0]
    validated, trained = views(validation)
    panels = (
        (validated, "step", axes[0, 0]),
        (validated, "completions", axes[0, 1]),
        (trained, "step", axes[0, 2]),
    )
    for view, axis, ax in panels:
        progressed = progress(metrics, view, by)
        level = target(progressed, by, reference, share)
        reached = reach(progressed, by, level)
        grid = np.unique(progressed[axis].to_numpy(dtype=float)).tolist()
        shares = reached_share(reached, by, axis, grid)
        for key in order:
            line = shares[shares[by] == key]
            if not len(line):
                continue
            k, n = int(line["k"].iloc[0]), int(line["n"].iloc[0])
            ax.step(line[axis], line["share"], where="post", label=f"{key} ({k} of {n})")
        _shade_unevaluated(ax, progressed[axis].to_numpy(dtype=float))
        ax.set_ylim(-0.03, 1.03)
        ax.set_xlabel("training step" if axis == "step" else "completions sampled")
        ax.set_ylabel("share of runs that reached the target")
        ax.set_title(f"{view.label}\ntarget {level:.3f} ({share:.0%} of {reference}'s gain)", fontsize=9)
        ax.legend(fontsize=6, ncol=2)
        ax.grid(alpha=0.3)
    lines = [*INVALID.items(), (SPREAD, "within-group reward std (mean over groups)")]
    for ax, (metric, label) in zip(axes[1], lines):
        if metric not in metrics:
            ax.set_title(f"{label}: not logged", fontsize=9)
            continue
        stats = curve(metrics, metric, by=by, smooth=SMOOTH)
        for key in order:
            g = stats[stats[by] == key]
            ax.plot(g["step"], g["mean"], lw=1.2, label=key)
        ax.set_title(f"{label}, trailing mean over {SMOOTH} steps", fontsize=9)
        ax.set_xlabel("training step")
        ax.grid(alpha=0.3)
    counts = metrics.groupby(by)["seed"].nunique().reindex(list(order)).dropna().astype(int).tolist()
    fig.suptitle(
        f"{title}: steps and completions to a common target, runs that never reach it counted (censored), "
        f"and the samples that carry no signal (colours as above); {seeds_shown(counts)} seeds per line",
        fontsize=10,
    )
    fig.tight_layout()
    return fig
