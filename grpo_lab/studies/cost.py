"""The cost study (notebook 08): each scheme and training trick as multiples of the baseline GRPO step,
Evaluation guide §4.7 Cost structure (docs/sources.md: sampling, forward and backward compute,
memory), "recorded as relative multiples from controlled runs, never invented".

The timed runs (`settings` / `design` / `run`, trained in this process one after the other in
interleaved rounds, the seeds being the rounds) and their `multiples` are the comparisons layer's
(`comparisons.timing`: 09 and 12 read the same runs); this module holds the notebook's measures
(`table`, `baseline_absolute`) and `figure`."""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import TwoSlopeNorm

from grpo_lab.analysis.stats import cost_table
from grpo_lab.comparisons.timing import (
    BASELINE,
    FULL,
    PEAK_OVER_REST,
    base_config,
    design,
    multiples,
    run,
    settings,
    timed,
)

__all__ = [
    "BASELINE",
    "FULL",
    "KIND_COLORS",
    "KIND_NAMES",
    "PEAK_OVER_REST",
    "PHASES",
    "TICKS",
    "base_config",
    "baseline_absolute",
    "design",
    "figure",
    "multiples",
    "run",
    "settings",
    "table",
    "timed",
]

PHASES = {
    "time/step_s": "step",
    "time/sample_s": "sampling",
    "time/logprob_s": "old/ref log-probs",
    "time/forward_backward_s": "forward + backward",
    "time/optimizer_s": "optimizer",
    "cost/forward_passes": "forward passes",
    "cost/backward_passes": "backward passes",
    PEAK_OVER_REST: "peak memory",
}
"""the cost columns shown, with their short names"""
KIND_COLORS = {"scheme": "tab:blue", "trick": "tab:orange", "conflict": "tab:red"}
"""the colour of each kind of configuration in the figure"""
KIND_NAMES = {"scheme": "scheme (preset)", "trick": "trick over GRPO", "conflict": "named conflict over GRPO"}
"""the legend's name for each kind"""
TICKS = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0)
"""where the step-time axis is labelled (multiples)"""


def _spaced(ticks: list[float], gap: float) -> list[float]:
    """Ticks at least `gap` apart in log2 (1 always kept), so that their labels do not overlap."""
    kept = [1.0]
    for t in sorted(ticks, key=lambda t: abs(np.log2(t))):
        if all(abs(np.log2(t / k)) >= gap for k in kept):
            kept.append(t)
    return sorted(kept)


def table(df: pd.DataFrame) -> pd.DataFrame:
    """Each configuration's cost (mean over its runs of the per-step means, peaks as maxima) as a
    multiple of the baseline, one column per entry of `PHASES` that was logged, in design order,
    after its kind ('scheme', 'trick' or 'conflict')."""
    costs = cost_table(timed(df), BASELINE)
    present = [c for c in PHASES if c in costs]
    out = costs[[f"{c}_x" for c in present]].set_axis([PHASES[c] for c in present], axis=1)
    order = list(dict.fromkeys(df["label"]))
    out = out.loc[order]
    kinds = df.drop_duplicates("label").set_index("label")["kind"]
    return out.assign(kind=kinds.loc[order].to_numpy())[["kind", *out.columns]]


def baseline_absolute(df: pd.DataFrame) -> pd.Series:
    """The baseline's own cost per step (seconds, passes, MB): what the multiples multiply."""
    costs = cost_table(timed(df), BASELINE)
    present = [c for c in PHASES if c in costs]
    return costs.loc[BASELINE, present].set_axis([PHASES[c] for c in present])


def figure(df: pd.DataFrame, title: str = "cost relative to GRPO") -> plt.Figure:
    """Left: the step time of each configuration as a multiple of GRPO's, with a 95% interval over
    the rounds (log scale). Right: every phase, pass count and the peak memory as multiples (colour
    on a log2 scale, value written in the cell)."""
    steps = multiples(df).set_index("label")
    cells = table(df)
    labels = list(cells.index)
    n = len(labels)
    fig, (left, right) = plt.subplots(
        1, 2, figsize=(13, 1.2 + 0.32 * n), gridspec_kw={"width_ratios": [1, 1.6]}, sharey=True
    )
    y = np.arange(n)
    colors = [KIND_COLORS[k] for k in cells["kind"]]
    s = steps.loc[labels]
    bars = [s["multiple"] - s["lo"], s["hi"] - s["multiple"]]
    left.errorbar(s["multiple"], y, xerr=bars, fmt="none", ecolor="0.4", lw=1, capsize=2)
    left.scatter(s["multiple"], y, c=colors, zorder=3, s=22)
    left.axvline(1.0, color="0.3", ls="--", lw=1)
    left.set_xscale("log", base=2)
    low, high = min(s["lo"].min(), s["multiple"].min()), max(s["hi"].max(), s["multiple"].max())
    ticks = _spaced([t for t in TICKS if low / 1.3 <= t <= high * 1.3], np.log2(high / low) / 8)
    left.set_xticks(ticks, [f"{t:g}" for t in ticks])
    left.minorticks_off()
    left.set_yticks(y, labels, fontsize=8)
    left.invert_yaxis()
    left.set_xlabel("step time / GRPO step time (log scale)")
    left.set_title("step time (95% interval over rounds)", fontsize=10)
    left.grid(alpha=0.3, axis="x")
    for kind in dict.fromkeys(cells["kind"]):
        left.scatter([], [], c=KIND_COLORS[kind], label=KIND_NAMES[kind])
    fig.legend(loc="lower left", ncol=3, fontsize=8, frameon=False)
    values = cells.drop(columns="kind").to_numpy(dtype=float)
    shown = np.log2(np.clip(np.nan_to_num(values, nan=1.0), 1 / 16, 16))
    image = right.imshow(shown, aspect="auto", cmap="RdBu_r", norm=TwoSlopeNorm(0.0, -2.0, 2.0))
    for (i, j), v in np.ndenumerate(values):
        right.text(j, i, "n/a" if np.isnan(v) else f"{v:.2f}", ha="center", va="center", fontsize=7)
    columns = list(cells.columns[1:])
    right.set_xticks(np.arange(len(columns)), columns, rotation=30, ha="right", fontsize=8)
    right.set_title("multiple of GRPO per phase (colour: log2)", fontsize=10)
    bar = fig.colorbar(image, ax=right, fraction=0.04, pad=0.02)
    bar.set_ticks([-2, -1, 0, 1, 2], labels=["1/4", "1/2", "1", "2", "4"])
    seeds = df["seed"].nunique()
    fig.suptitle(f"{title} ({seeds} interleaved rounds, first step of each run dropped)", fontsize=11)
    fig.tight_layout(rect=(0, 0.4 / (1.2 + 0.32 * n), 1, 1))
    return fig
