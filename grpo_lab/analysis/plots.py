"""Figures: across-seed curves with intervals, interval charts against a reference, robustness
curves, rule heatmaps, correlation scatters; every figure is written by one function, `save`, with
the data it draws beside it (`figure_data`), so that a regenerated figure can be compared with a
committed one by what it shows rather than by its pixels, and with the record of what wrote it
(`provenance`: notebook, profile, commit), from which the index of figures is built."""

import datetime
import json
import math
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg") if matplotlib.get_backend().lower() in ("", "agg") else None
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.collections import PathCollection  # noqa: E402
from matplotlib.image import AxesImage  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from grpo_lab.analysis.horizon import Correlation  # noqa: E402
from grpo_lab.analysis.stats import curve, mean_interval, seeds_shown  # noqa: E402
from grpo_lab.analysis.tuning import factor_name  # noqa: E402
from grpo_lab.runlog import write_text_atomic  # noqa: E402

TITLES = {
    "reward": "training reward",
    "val/accuracy": "validation accuracy (greedy)",
    "val/sampled_accuracy": "validation accuracy (sampled)",
    "val/pass@4": "validation pass@4",
    "kl": "KL to reference",
    "kl/exact": "exact KL to reference",
    "entropy": "token entropy",
    "clip_ratio/region_mean": "clip ratio",
    "grad_norm": "gradient norm (pre-clip)",
    "completions/mean_length": "completion length (tokens)",
    "rewards/correct/mean": "task reward (before shaping)",
}
UNITS = {
    "reward": "mean reward per completion",
    "val/accuracy": "fraction of prompts correct",
    "val/sampled_accuracy": "fraction of samples correct",
    "val/pass@4": "fraction of prompts, 1 of 4 samples correct",
    "val/reward": "mean reward per prompt",
    "kl": "nats per token",
    "kl/exact": "nats per token",
    "entropy": "nats per token",
    "clip_ratio/region_mean": "fraction of tokens",
    "grad_norm": "L2 norm",
    "completions/mean_length": "tokens",
    "rewards/correct/mean": "fraction of completions correct",
}
"""the y-axis label (the unit) of each metric's panel"""
VERDICT_COLORS = {"lower": "tab:red", "higher": "tab:green", "reference": "black"}
"""marker colours of `effects.versus_reference` verdicts; any other verdict is grey"""
OTHER = "tab:gray"
FAULT_TITLES = {
    "fault_reward_sigma": "reward noise (Gaussian sigma)",
    "fault_reward_flip": "reward flips (probability)",
    "fault_long_frac": "forced to max length (share)",
    "fault_junk_frac": "junk padding (share)",
    "fault_repeat_k": "repeated samples (k of G)",
    "fault_stale_k": "stale sampler (updates behind)",
    "fault_sampler_dtype": "sampler precision",
}


def project_root() -> Path:
    """The checkout this package lives in (where figures/ and runs/ are), else the working directory."""
    for base in (Path.cwd(), *Path.cwd().parents):
        if (base / "pyproject.toml").exists() and (base / "grpo_lab").is_dir():
            return base
    return Path.cwd()


FIGURES_DIR = "GRPO_LAB_FIGURES"
"""an environment variable: the directory `save` writes to when none is given (default: figures/ of
the checkout); the check of the committed figures regenerates them into a scratch directory"""
DIGITS = 6
"""significant digits of the numbers in a figure's data (the run logs keep 6)"""


PROVENANCE = "provenance"
"""the key of a figure's data that records what wrote it (`provenance`); the rest is what it draws"""
UNKNOWN = "unknown"
"""what `provenance` records for what the process writing a figure was not told"""
NOTEBOOK_ENV = "GRPO_LAB_NOTEBOOK"
PROFILE_ENV = "GRPO_LAB_PROFILE"
COMMIT_ENV = "GRPO_LAB_COMMIT"
"""environment variables `grpo-lab figures` sets while it executes a notebook (its kernel inherits
them): the notebook's name (its file's stem), the profile it injected and the commit it runs on"""


def save(fig: plt.Figure, name: str, directory: str | Path | None = None) -> Path:
    """Write a figure as NAME.png under figures/ (or `directory`, or `FIGURES_DIR`), with NAME.json,
    the data it draws (`figure_data`) and the record of what wrote it (under `PROVENANCE`): the only
    place figures are written."""
    path = _figures_dir(directory) / f"{name}.png"
    fig.savefig(path, dpi=130, bbox_inches="tight")
    record = {**figure_data(fig), PROVENANCE: provenance()}
    data = json.dumps(record, indent=1, sort_keys=True, allow_nan=False)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(data + "\n")
    tmp.replace(path.with_suffix(".json"))
    return path


def provenance() -> dict[str, str]:
    """What writes a figure now: the notebook and profile `grpo-lab figures` is executing (from
    `NOTEBOOK_ENV`, `PROFILE_ENV`), the commit it runs on (`COMMIT_ENV`, else this package's checkout
    as `git_commit` reads it) and the time (UTC). A figure saved elsewhere, e.g. from JupyterLab,
    records `UNKNOWN` for what the process was not told rather than a guess."""
    return {
        "notebook": os.environ.get(NOTEBOOK_ENV) or UNKNOWN,
        "profile": os.environ.get(PROFILE_ENV) or UNKNOWN,
        "commit": os.environ.get(COMMIT_ENV) or git_commit(Path(__file__).parent),
        "written": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def git_commit(root: Path) -> str:
    """The commit checked out at `root`, with '+dirty' when tracked files have uncommitted changes;
    `UNKNOWN` outside a git checkout."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True, text=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True, text=True
        )
    except OSError:
        return UNKNOWN
    if head.returncode:
        return UNKNOWN
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def save_markdown(text: str, name: str, directory: str | Path | None = None) -> Path:
    """Write a table that goes with a figure as NAME.md where `save` writes the figure NAME (the index
    of figures, figures/README.md, includes it)."""
    path = _figures_dir(directory) / f"{name}.md"
    write_text_atomic(path, text)
    return path


def _figures_dir(directory: str | Path | None) -> Path:
    """`directory`, else `FIGURES_DIR`, else figures/ of the checkout; created if missing."""
    default = os.environ.get(FIGURES_DIR) or project_root() / "figures"
    out = Path(directory if directory is not None else default)
    out.mkdir(parents=True, exist_ok=True)
    return out


def figure_data(fig: plt.Figure) -> dict[str, Any]:
    """What a drawn figure shows, panel by panel: titles, axis labels, the text of non-numeric tick
    labels (the categories), the points of every line, the offsets of scattered markers, the vertices
    of other collections (error bars, bands), the rectangles of bars, the values of heatmaps and the
    texts; numbers to `DIGITS` significant digits, NaN as None. Numeric tick labels are left out: they
    follow from the data and change with matplotlib's tick placement."""
    fig.canvas.draw()  # tick labels exist only once drawn
    return {
        "title": fig.get_suptitle(),
        "axes": [_axes_data(ax) for ax in fig.axes],
    }


def _axes_data(ax: plt.Axes) -> dict[str, Any]:
    collections = [
        _numbers(c.get_offsets())
        if isinstance(c, PathCollection)
        else [_numbers(p.vertices) for p in c.get_paths()]
        for c in ax.collections
    ]
    return {
        "title": ax.get_title(),
        "xlabel": ax.get_xlabel(),
        "ylabel": ax.get_ylabel(),
        "xticklabels": _categories(ax.get_xticklabels()),
        "yticklabels": _categories(ax.get_yticklabels()),
        "lines": [_numbers(line.get_xydata()) for line in ax.lines],
        "collections": collections,
        "bars": [
            _numbers([p.get_x(), p.get_y(), p.get_width(), p.get_height()])
            for p in ax.patches
            if isinstance(p, Rectangle)
        ],
        "images": [
            _numbers(np.ma.filled(np.ma.asarray(im.get_array(), dtype=float), np.nan)) for im in ax.images
        ],
        "texts": [t.get_text() for t in ax.texts],
    }


def _categories(labels: Sequence[Any]) -> list[str]:
    texts = [label.get_text() for label in labels]
    return [] if all(_is_number(t) for t in texts) else texts


def _is_number(text: str) -> bool:
    try:
        float(text.replace("\N{MINUS SIGN}", "-").replace("%", "").replace("$", "") or "0")
    except ValueError:
        return False
    return True


def _numbers(values: Any) -> Any:
    """`values` (an array or nested lists) as nested lists of floats to `DIGITS` digits, NaN as None."""
    array = np.asarray(values, dtype=float)
    if array.ndim == 0:
        value = float(array)
        return None if not math.isfinite(value) else float(f"{value:.{DIGITS}g}")
    return [_numbers(v) for v in array]


def curves(
    df: pd.DataFrame,
    metrics: list[str],
    by: str | None = None,
    smooth: int = 1,
    ncols: int = 3,
    title: str = "",
) -> plt.Figure:
    """One panel per metric: across-seed mean (line) and 95% interval (band) against the step.
    Training metrics may be smoothed (a trailing mean over `smooth` logged steps within each run,
    before the across-seed mean); evaluation metrics (`val/...`) never are: each point is the value
    logged at that evaluation step. The title says both, and over how many runs; where the lines have
    different numbers of seeds, each legend entry gives its own."""
    nrows = -(-len(metrics) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.0 * nrows), squeeze=False)
    runs = df.groupby(by)["seed"].nunique() if by and "seed" in df else pd.Series(dtype=int)
    counted = runs.nunique() > 1
    for ax, metric in zip(axes.flat, metrics):
        evaluated = is_evaluation(metric)
        stats = curve(df, metric, by=by, smooth=1 if evaluated else smooth)
        groups = stats.groupby(by) if by else [(None, stats)]
        for label, g in groups:
            g = broken_at_gaps(g) if evaluated else g
            shown = f"{label} ({runs[label]} seeds)" if counted else label
            line = ax.plot(
                g["step"], g["mean"], label=shown, lw=1.5, marker="o" if evaluated else None, ms=3
            )[0]
            ax.fill_between(g["step"], g["lo"], g["hi"], color=line.get_color(), alpha=0.2, lw=0)
        name = TITLES.get(metric, metric)
        ax.set_title(name if evaluated or smooth <= 1 else f"{name}, {smooth}-step mean", fontsize=10)
        ax.set_xlabel("step")
        ax.set_ylabel(UNITS.get(metric, ""))
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(metrics) :]:
        ax.axis("off")
    fig.suptitle(f"{title}\n{curves_caption(df, metrics, by, smooth)}".strip(), fontsize=10)
    fig.tight_layout()
    if by:
        _legend_below(fig, axes.flat[0], title=by, max_columns=6)
    return fig


GAP = 2.0
"""an evaluation curve is broken where two evaluations lie more than this many times its median
interval apart (a study validated at step 0 and then only in its scored tail)"""


def broken_at_gaps(stats: pd.DataFrame) -> pd.DataFrame:
    """`stats` (`stats.curve` of one line) with a row of NaNs inserted inside every gap between
    evaluations wider than `GAP` x the median interval, so that the line is not drawn across steps
    where nothing was measured."""
    g = stats.sort_values("step").reset_index(drop=True)
    gaps = g["step"].diff().to_numpy()[1:]  # (evaluations - 1,)
    if len(gaps) < 2:
        return g
    wide = np.flatnonzero(gaps > GAP * np.median(gaps))
    if not wide.size:
        return g
    holes = pd.DataFrame({"step": (g["step"].to_numpy()[wide] + g["step"].to_numpy()[wide + 1]) / 2})
    return pd.concat([g, holes], ignore_index=True).sort_values("step", kind="stable").reset_index(drop=True)


def _legend_below(fig: plt.Figure, ax: plt.Axes, title: str, max_columns: int | None = None) -> None:
    """The legend of `ax`'s lines, centred below the figure's panels so that it never hides a curve:
    one row, or rows of `max_columns` entries."""
    handles, labels = ax.get_legend_handles_labels()
    columns = len(labels) if max_columns is None else min(len(labels), max_columns)
    fig.legend(
        handles,
        labels,
        title=title,
        loc="upper center",
        bbox_to_anchor=(0.5, 0.0),
        ncol=columns,
        fontsize=8,
        title_fontsize=8,
    )


def is_evaluation(metric: str) -> bool:
    """A metric logged at validation passes only (`val/...`), not at every training step."""
    return metric.startswith("val/")


def curves_caption(df: pd.DataFrame, metrics: Sequence[str], by: str | None, smooth: int) -> str:
    """What `curves` draws: the runs behind each line, what is smoothed and over how many steps."""
    groups = (
        df.groupby(by)["seed"].nunique() if by else pd.Series([df["seed"].nunique() if "seed" in df else 1])
    )
    if groups.max() == 1:
        parts = ["one run per line (no interval)"]
    else:
        parts = [f"mean and 95% t-interval over {seeds_shown(groups.tolist())} seeds per line"]
    if smooth > 1 and any(not is_evaluation(m) for m in metrics):
        parts.append(f"training metrics: trailing mean over {smooth} logged steps within each run")
    if any(is_evaluation(m) for m in metrics):
        parts.append("validation: the value at each evaluation step (dots), unsmoothed")
    return "; ".join(parts)


def quantile_bands(df: pd.DataFrame, prefix: str = "ratio", title: str = "importance ratio") -> plt.Figure:
    """The logged quantiles (p05, p50, p95) and max of a ratio over training, averaged over seeds."""
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for q, style in (("p50", "-"), ("p05", "--"), ("p95", "--"), ("max", ":")):
        stats = curve(df, f"{prefix}/{q}")
        if len(stats):
            ax.plot(stats["step"], stats["mean"], style, label=q)
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def _interval_rows(ax: plt.Axes, table: pd.DataFrame, label: str, verdict: str | None) -> None:
    """Mean and interval of each row of `table` as a dot with a horizontal bar, first row on top;
    the row whose verdict is 'reference' sets a shaded band (its interval) and a dashed line."""
    y = np.arange(len(table))[::-1]
    colors = [VERDICT_COLORS.get(v, OTHER) for v in (table[verdict] if verdict else ["other"] * len(table))]
    reference = table[table[verdict] == "reference"] if verdict else table.iloc[:0]
    if len(reference):
        ref = reference.iloc[0]
        ax.axvspan(ref["lo"], ref["hi"], color="black", alpha=0.08, lw=0)
        ax.axvline(ref["mean"], color="black", ls="--", lw=0.8)
    err = np.array([table["mean"] - table["lo"], table["hi"] - table["mean"]])
    for yi, (_, row), color, lo, hi in zip(y, table.iterrows(), colors, *err):
        ax.errorbar(row["mean"], yi, xerr=[[lo], [hi]], fmt="o", color=color, capsize=3, ms=5)
    ax.set_yticks(y, [str(v) for v in table[label]], fontsize=8)
    ax.set_ylim(-0.7, len(table) - 0.3)
    ax.grid(axis="x", alpha=0.3)


def _verdict_legend(ax: plt.Axes, table: pd.DataFrame, verdict: str | None) -> None:
    if not verdict:
        return
    shown = list(dict.fromkeys(table[verdict]))
    handles = [
        plt.Line2D([], [], marker="o", ls="", color=VERDICT_COLORS.get(v, OTHER), label=v) for v in shown
    ]
    ax.legend(
        handles=handles,
        title="vs reference",
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        fontsize=7,
        title_fontsize=7,
    )


def intervals(
    table: pd.DataFrame,
    label: str,
    xlabel: str,
    title: str = "",
    verdict: str | None = "verdict",
) -> plt.Figure:
    """A dot chart: one row per row of `table` (columns `label`, mean, lo, hi, e.g. from
    `effects.versus_reference`), the mean as a dot and its 95% interval as a bar. With a `verdict`
    column, the reference row's interval is a shaded band and the dots are coloured by verdict."""
    fig, ax = plt.subplots(figsize=(7.0, max(2.4, 1.0 + 0.32 * len(table))))
    _interval_rows(ax, table, label, verdict)
    _verdict_legend(ax, table, verdict)
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def ablation(
    df: pd.DataFrame,
    table: pd.DataFrame,
    by: str,
    metric: str,
    outcome: str,
    smooth: int = 5,
    title: str = "",
) -> plt.Figure:
    """Left: the across-seed mean curve of `metric` for each group of `by`; the reference (black)
    and the groups whose verdict in `table` (from `effects.versus_reference`) is 'lower' or 'higher'
    in colour with 95% bands, the others thin and grey. Right: `intervals` of the final `outcome`."""
    fig, (left, right) = plt.subplots(
        1, 2, figsize=(12.5, max(4.0, 1.2 + 0.3 * len(table))), gridspec_kw={"width_ratios": [1.1, 1]}
    )
    verdicts = dict(zip(table[by], table["verdict"]))
    stats = curve(df, metric, by=by, smooth=smooth)
    for key, g in stats.groupby(by, sort=False):
        v = verdicts.get(key, "other")
        if v in VERDICT_COLORS:
            line = left.plot(g["step"], g["mean"], color=VERDICT_COLORS[v], lw=1.8, label=f"{key} ({v})")[0]
            left.fill_between(g["step"], g["lo"], g["hi"], color=line.get_color(), alpha=0.15, lw=0)
        else:
            left.plot(g["step"], g["mean"], color=OTHER, lw=0.7, alpha=0.6)
    left.plot([], [], color=OTHER, lw=0.7, label="others (no clear change)")
    left.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
    left.set_xlabel("step")
    left.set_ylabel(UNITS.get(metric, metric))
    left.set_title(f"{TITLES.get(metric, metric)}, smoothed over {smooth} steps", fontsize=10)
    left.grid(alpha=0.3)
    _interval_rows(right, table, by, "verdict")
    _verdict_legend(right, table, "verdict")
    right.set_xlabel(f"final {TITLES.get(outcome, outcome)}, {UNITS.get(outcome, '')}")
    right.set_title("final value: mean and 95% t-interval", fontsize=10)
    seeds = seeds_shown(df.groupby(by)["seed"].nunique().tolist())
    fig.suptitle(f"{title} ({seeds} seeds per line)".strip(), fontsize=11)
    fig.tight_layout()
    return fig


def robustness(
    table: pd.DataFrame, ylabel: str, scheme: str = "scheme", ncols: int = 3, title: str = ""
) -> plt.Figure:
    """One panel per fault of `table` (from `robustness.robustness_table`): the final outcome of each
    scheme (a line, slightly offset sideways so that the bars do not overlap) against the fault's
    level, with 95% t-intervals; the first level is the clean runs."""
    faults = list(dict.fromkeys(table["fault"]))
    schemes = list(dict.fromkeys(table[scheme]))
    nrows = -(-len(faults) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.0 * ncols, 3.1 * nrows), squeeze=False, sharey=True)
    offsets = np.linspace(-0.12, 0.12, len(schemes)) if len(schemes) > 1 else np.zeros(1)
    for ax, fault in zip(axes.flat, faults):
        part = table[table["fault"] == fault]
        levels = list(dict.fromkeys(part["level"]))
        for offset, name in zip(offsets, schemes):
            g = part[part[scheme] == name]
            x = np.array([levels.index(v) for v in g["level"]]) + offset
            err = np.array([g["mean"] - g["lo"], g["hi"] - g["mean"]])
            ax.errorbar(x, g["mean"], yerr=err, marker="o", ms=4, capsize=2, lw=1.2, label=name)
        ax.set_xticks(range(len(levels)), [str(v) for v in levels])
        ax.set_xlim(-0.4, len(levels) - 0.6)
        ax.set_title(FAULT_TITLES.get(fault, fault), fontsize=10)
        ax.set_xlabel("fault level (first: clean)")
        ax.grid(alpha=0.3)
    for ax in axes[:, 0]:
        ax.set_ylabel(ylabel)
    for ax in list(axes.flat)[len(faults) :]:
        ax.axis("off")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    _legend_below(fig, axes.flat[0], title=scheme)
    return fig


def rule_heatmap(counts: pd.DataFrame, totals: Mapping[str, int], title: str = "") -> plt.Figure:
    """Rules (rows) against conditions (columns) of `robustness.rule_counts`: each cell's shade is
    the share of the condition's runs (`totals`: runs per column) the rule fired on, its text the
    count."""
    columns = list(counts.columns)
    if counts.empty:
        fig, ax = plt.subplots(figsize=(5.0, 1.2))
        runs = sum(int(totals[c]) for c in columns)
        ax.text(0.5, 0.5, f"no rule fired on any of the {runs} runs", ha="center", va="center")
        ax.axis("off")
        ax.set_title(title, fontsize=10)
        return fig
    fig, ax = plt.subplots(figsize=(max(5.0, 2.6 + 0.62 * len(columns)), 1.8 + 0.36 * len(counts)))
    image = _count_cells(ax, counts, totals)
    ax.set_xlabel(str(counts.columns.name or ""))
    ax.set_ylabel("diagnostic rule")
    fig.colorbar(image, ax=ax, label="share of runs", fraction=0.04, pad=0.02)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def _count_cells(ax: plt.Axes, counts: pd.DataFrame, totals: Mapping[str, int]) -> AxesImage:
    """`counts` (rules against conditions) on `ax`: each cell shaded by its share of the column's runs
    (`totals`: runs per column) on a 0-1 scale, its text the count; columns labelled with their runs."""
    columns = list(counts.columns)
    n = np.array([totals[c] for c in columns], dtype=float)
    share = counts.to_numpy(dtype=float) / np.maximum(n, 1.0)
    image = ax.imshow(share, cmap="Reds", vmin=0.0, vmax=1.0, aspect="auto")
    for (i, j), value in np.ndenumerate(counts.to_numpy()):
        color = "white" if share[i, j] > 0.6 else "black"
        ax.text(j, i, str(value), ha="center", va="center", fontsize=7, color=color)
    names = [f"{c} (n={totals[c]})" for c in columns]
    ax.set_xticks(range(len(columns)), names, rotation=40, ha="right", fontsize=7)
    ax.set_yticks(range(len(counts)), list(counts.index), fontsize=7)
    return image


def rule_heatmaps(
    counts: Mapping[str, pd.DataFrame], totals: Mapping[str, Mapping[str, int]], title: str = ""
) -> plt.Figure:
    """`rule_heatmap` once per panel (e.g. per scheme), stacked with the same rows: `counts[panel]`
    from `robustness.rule_counts` on that panel's runs alone, `totals[panel]` its runs per column, so
    each cell is out of the runs that panel really has."""
    panels = list(counts)
    rules = list(dict.fromkeys(r for c in counts.values() for r in c.index))
    if not rules:
        runs = sum(int(v) for t in totals.values() for v in t.values())
        fig, ax = plt.subplots(figsize=(5.0, 1.2))
        ax.text(0.5, 0.5, f"no rule fired on any of the {runs} runs", ha="center", va="center")
        ax.axis("off")
        ax.set_title(title, fontsize=10)
        return fig
    columns = max(len(c.columns) for c in counts.values())
    height = len(panels) * (1.6 + 0.3 * len(rules)) + 0.6
    size = (max(5.0, 2.8 + 0.62 * columns), height)
    fig, axes = plt.subplots(len(panels), 1, figsize=size, squeeze=False, layout="constrained")
    for ax, panel in zip(axes[:, 0], panels):
        image = _count_cells(ax, counts[panel].reindex(rules, fill_value=0), totals[panel])
        ax.set_title(str(panel), fontsize=9)
    fig.colorbar(image, ax=list(axes[:, 0]), label="share of runs", fraction=0.03, pad=0.02)
    fig.suptitle(title, fontsize=10)
    return fig


def scheme_summary(
    finals: pd.DataFrame,
    metric: str,
    aggregate: pd.DataFrame,
    improvement: pd.DataFrame,
    by: str,
    strata: str,
    baseline: str,
    order: Sequence[str] | None = None,
    title: str = "",
) -> plt.Figure:
    """Three panels with the methods of `by` as rows (in `order`, top to bottom; default: the
    aggregate's): (a) the final `metric` on each stratum (task), mean and 95% t-interval over its runs
    in `finals`; (b) the interquartile mean over all runs with its stratified bootstrap interval
    (`stats.aggregate_table`), the baseline's interval shaded; (c) the probability of improving on
    the baseline with its interval (`stats.improvement_table`)."""
    methods = list(order) if order is not None else list(aggregate[by])
    aggregate = aggregate.set_index(by).reindex(methods).reset_index()
    y = np.arange(len(methods))[::-1]
    fig, axes = plt.subplots(1, 3, figsize=(13.0, max(3.2, 1.6 + 0.38 * len(methods))), sharey=True)
    tasks = list(dict.fromkeys(finals[strata]))
    offsets = np.linspace(-0.25, 0.25, len(tasks)) if len(tasks) > 1 else np.zeros(1)
    for offset, task in zip(offsets, tasks):
        part = finals[finals[strata] == task]
        points = [mean_interval(part.loc[part[by] == m, metric].to_numpy(dtype=float)) for m in methods]
        mean, lo, hi = (np.array(v) for v in zip(*points))
        axes[0].errorbar(mean, y + offset, xerr=[mean - lo, hi - mean], fmt="o", ms=4, capsize=2, label=task)
    axes[0].set_xlabel(f"final {TITLES.get(metric, metric)}, {UNITS.get(metric, '')}")
    axes[0].set_title("(a) per task: mean, 95% t-interval", fontsize=10)
    base = aggregate[aggregate[by] == baseline].iloc[0]
    axes[1].axvspan(base["iqm_lo"], base["iqm_hi"], color="black", alpha=0.08, lw=0)
    axes[1].axvline(base["iqm"], color="black", ls="--", lw=0.8)
    err = [aggregate["iqm"] - aggregate["iqm_lo"], aggregate["iqm_hi"] - aggregate["iqm"]]
    axes[1].errorbar(aggregate["iqm"], y, xerr=err, fmt="o", color="tab:blue", capsize=3)
    axes[1].set_xlabel(f"IQM of the final {TITLES.get(metric, metric)}")
    axes[1].set_title("(b) all tasks: IQM, 95% stratified bootstrap", fontsize=10)
    poi = improvement.set_index(by).reindex(methods)
    err = [poi["poi"] - poi["poi_lo"], poi["poi_hi"] - poi["poi"]]
    axes[2].axvline(0.5, color="black", ls="--", lw=0.8)
    axes[2].errorbar(poi["poi"], y, xerr=err, fmt="o", color="tab:purple", capsize=3)
    axes[2].set_xlim(-0.02, 1.02)
    axes[2].set_xlabel(f"P(run of the method > run of {baseline})")
    axes[2].set_title(f"(c) probability of improvement over {baseline}", fontsize=10)
    axes[0].set_yticks(y, methods, fontsize=8)
    for ax in axes:
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    _legend_below(fig, axes[0], title=f"{strata} (panel a)")
    return fig


def correlation_scatter(
    per_run: pd.DataFrame,
    x: str,
    y: str,
    hue: str,
    correlations: Mapping[str, Correlation],
    xlabel: str,
    ylabel: str,
    title: str = "",
) -> plt.Figure:
    """One dot per run of `per_run` (x against y), coloured by `hue`, with the rank correlations
    given (name -> `horizon.Correlation`) written in a box: rho, interval, p-value and runs."""
    fig, ax = plt.subplots(figsize=(6.2, 4.4))
    for key, g in per_run.groupby(hue):
        ax.scatter(g[x], g[y], s=28, label=str(key), alpha=0.85)
    lines = [
        f"{name}: rho = {c.rho:.2f} [{c.lo:.2f}, {c.hi:.2f}], p = {c.p:.3f}, n = {c.n}"
        for name, c in correlations.items()
    ]
    box = {"boxstyle": "round", "facecolor": "white", "alpha": 0.85, "lw": 0.5}
    ax.text(0.02, 0.98, "\n".join(lines), transform=ax.transAxes, va="top", fontsize=7, bbox=box)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(title=hue, fontsize=7, title_fontsize=7, loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def phase(df: pd.DataFrame, x: str, y: str, by: str, smooth: int = 10, title: str = "") -> plt.Figure:
    """The path of each group of `by` in the plane of two metrics over training: each run thin, the
    across-seed mean bold (both trailing means over `smooth` logged steps, or the shortest run's
    length, drawn once the window is full), a circle at the start and a square at the end."""
    fig, ax = plt.subplots(figsize=(6.2, 4.4))
    data = df.dropna(subset=[x, y]).sort_values("step")
    window = min(smooth, int(data.groupby([by, "seed"]).size().min()))  # a window no run is shorter than
    for key, group in data.groupby(by):
        runs = [
            run[[x, y]].rolling(window, min_periods=window).mean().dropna().to_numpy()
            for _, run in group.groupby("seed")
        ]
        color = ax.plot([], [])[0].get_color()
        for path in runs:
            ax.plot(path[:, 0], path[:, 1], color=color, lw=0.5, alpha=0.35)
        length = min(len(p) for p in runs)
        mean = np.mean([p[:length] for p in runs], axis=0)
        ax.plot(mean[:, 0], mean[:, 1], color=color, lw=2.0, label=f"{key}")
        ax.plot(*mean[0], "o", color=color, ms=6)
        ax.plot(*mean[-1], "s", color=color, ms=6)
    ax.set_xlabel(f"{TITLES.get(x, x)} ({UNITS.get(x, '')})")
    ax.set_ylabel(f"{TITLES.get(y, y)} ({UNITS.get(y, '')})")
    runs = data.groupby(by)["seed"].nunique()
    seeds = f"{runs.min()}" if runs.min() == runs.max() else f"{runs.min()} to {runs.max()}"
    caption = f"trailing mean over {window} steps; thin: each run, bold: mean of {seeds} seeds"
    ax.set_title(f"{title}\n(circle: start, square: end; {caption})".strip(), fontsize=9)
    ax.legend(title=by, fontsize=7, title_fontsize=7, loc="best")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def rate_scan(scan: pd.DataFrame, best: dict[str, float], title: str) -> plt.Figure:
    """A column per arm of a learning-rate scan (`analysis.tuning.scan_means` by `arm`, with `factor`,
    `mean`, `greedy` and `n`), the headline score above and greedy accuracy below (one y scale per row,
    one x range): the mean over the tuning seeds stored at each factor of the scan's reference rate (log
    scale), their count beside each point, the arm's tuned factor (`best`) starred in both rows and the
    reference rate dotted, titled `title`."""
    arms = list(dict.fromkeys(scan["arm"]))
    factors = sorted(set(scan["factor"]))
    width = max(1.9 * len(arms) + 1, 8.0)  # room for the two-line title over a scan of few arms
    fig, axes = plt.subplots(2, len(arms), figsize=(width, 5.2), squeeze=False, sharey="row")
    for c, arm in enumerate(arms):
        t = scan[scan["arm"] == arm]
        axes[0, c].set_title(arm, fontsize=9)
        for r, (column, label) in enumerate((("mean", "headline score"), ("greedy", "greedy accuracy"))):
            ax = axes[r, c]
            ax.plot(t["factor"], t[column], "o-", color="tab:blue", ms=3, lw=1)
            for f, y, n in zip(t["factor"], t[column], t["n"]):
                ax.annotate(str(n), (f, y), xytext=(3, 3), textcoords="offset points", fontsize=6)
            tuned = t[t["factor"] == best[arm]]
            ax.plot(tuned["factor"], tuned[column], "*", color="tab:orange", ms=10)
            ax.axvline(1.0, color="0.5", ls=":", lw=1)
            ax.set_xscale("log")
            ax.set_xlim(factors[0] / 1.6, factors[-1] * 1.6)
            ax.set_xticks(factors, [factor_name(f) for f in factors], fontsize=6)
            ax.minorticks_off()
            ax.grid(alpha=0.3)
            if c == 0:
                ax.set_ylabel(label, fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.92))
    return fig
