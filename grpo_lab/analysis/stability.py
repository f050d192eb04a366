"""The stability figures of a run, from its log alone: what the evaluation guide calls the core
difference between the schemes (`docs/sources.md`, Evaluation guide §4.2 training stability, §4.3
sampling efficiency, §4.4 training-inference consistency): the variance of the training reward, the
volatility of the KL, the frequency of gradient spikes, how far entropy falls, how often the clip
binds, how wide the importance ratio spreads, how many groups carry no signal, and how many steps
validation accuracy takes to reach a threshold. One definition of each, used everywhere."""

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from grpo_lab.analysis.stats import (
    mean_interval,
    seeds_shown,
    spike_frequency,
    steps_to_threshold,
    volatility,
)

EDGE = 0.1
"""share of the training steps averaged at the start and at the end of a run (entropy decay)"""
THRESHOLD = 0.6
"""validation accuracy whose first crossing `steps_to_threshold` reports"""


def _training(run: pd.DataFrame) -> pd.DataFrame:
    return run[run["reward"].notna()].sort_values("step")


def _edges(values: pd.Series) -> tuple[float, float]:
    k = max(1, int(round(EDGE * len(values))))
    return float(values.iloc[:k].mean()), float(values.iloc[-k:].mean())


def reward_variance(run: pd.DataFrame) -> float:
    """Variance of the step-to-step training reward (the batch mean), around its own trend: the
    variance of the first differences divided by 2, so a rising reward is not counted as noise."""
    reward = _training(run)["reward"].to_numpy(dtype=float)
    return float(np.var(np.diff(reward), ddof=1) / 2) if len(reward) > 2 else np.nan


def kl_volatility(run: pd.DataFrame) -> float:
    """Standard deviation of the step-to-step changes of the KL to the reference (`stats.volatility`),
    on the exact KL (`kl/exact`) when logged, else on the run's own estimate; NaN without a reference."""
    train = _training(run)
    column = "kl/exact" if "kl/exact" in train and train["kl/exact"].notna().any() else "kl"
    if column not in train or train[column].isna().all():
        return np.nan
    return volatility(train[column].dropna().to_numpy())


def grad_spikes(run: pd.DataFrame) -> float:
    """Share of steps whose gradient norm exceeds median + 5 MAD (`stats.spike_frequency`)."""
    return spike_frequency(_training(run)["grad_norm"].dropna().to_numpy())


def entropy_decay(run: pd.DataFrame) -> float:
    """How far entropy fell: 1 - (mean over the last EDGE of the steps) / (mean over the first)."""
    start, end = _edges(_training(run)["entropy"])
    return 1 - end / start if start > 0 else np.nan


def clip_rate(run: pd.DataFrame) -> float:
    """Mean share of tokens (or sequences, for sequence-level surrogates) clipped per step."""
    return float(_training(run)["clip_ratio/region_mean"].mean())


def ratio_spread(run: pd.DataFrame) -> float:
    """Mean width of the importance ratio's 5-95% band per step (`ratio/p95 - ratio/p05`)."""
    train = _training(run)
    return float((train["ratio/p95"] - train["ratio/p05"]).mean())


def zero_variance_groups(run: pd.DataFrame) -> float:
    """Mean share of groups whose rewards are all equal (no learning signal)."""
    return float(_training(run)["frac_reward_zero_std"].mean())


def steps_to_accuracy(run: pd.DataFrame) -> float:
    """The first evaluated step at which validation accuracy reaches THRESHOLD (NaN if never)."""
    if "val/accuracy" not in run:
        return np.nan
    val = run.dropna(subset=["val/accuracy"]).sort_values("step")
    return steps_to_threshold(val["step"].to_numpy(), val["val/accuracy"].to_numpy(), THRESHOLD)


@dataclass(frozen=True)
class Figure:
    label: str
    """column title"""
    fn: Callable[[pd.DataFrame], float]
    lower_is_stabler: bool
    """whether a smaller value means a more stable run"""


STABILITY: dict[str, Figure] = {
    "reward_variance": Figure("reward variance", reward_variance, True),
    "kl_volatility": Figure("KL volatility", kl_volatility, True),
    "grad_spikes": Figure("gradient-spike share", grad_spikes, True),
    "entropy_decay": Figure("entropy decay", entropy_decay, True),
    "clip_rate": Figure("clip rate", clip_rate, True),
    "ratio_spread": Figure("ratio 5-95% width", ratio_spread, True),
    "zero_variance_groups": Figure("zero-variance groups", zero_variance_groups, True),
    "steps_to_accuracy": Figure(f"steps to accuracy {THRESHOLD}", steps_to_accuracy, True),
}
"""every stability figure by name"""


def table(metrics: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """One row per run (the `by` columns and its seed) with every stability figure."""
    rows = []
    for keys, run in metrics.groupby([*by, "seed"], sort=False):
        keys = keys if isinstance(keys, tuple) else (keys,)
        rows.append({**dict(zip([*by, "seed"], keys)), **{k: f.fn(run) for k, f in STABILITY.items()}})
    return pd.DataFrame(rows)


def figure(runs: pd.DataFrame, by: str, order: Sequence[str], title: str) -> plt.Figure:
    """One panel per stability figure: each arm's runs (dots) and their mean with a 95% t-interval
    (bar), arms in `order`; `runs` is `table(...)` output."""
    names = list(STABILITY)
    counts = [runs.loc[runs[by] == arm, "seed"].nunique() for arm in order]
    fig, axes = plt.subplots(2, -(-len(names) // 2), figsize=(3.2 * -(-len(names) // 2), 6.4), squeeze=False)
    for ax, name in zip(axes.flat, names):
        for i, arm in enumerate(order):
            values = runs.loc[runs[by] == arm, name].dropna().to_numpy(dtype=float)
            ax.plot(np.full(len(values), i), values, ".", color="0.6", ms=4)
            if len(values):
                mean, lo, hi = mean_interval(values)
                bar = [[mean - lo], [hi - mean]] if np.isfinite(lo) else None
                ax.errorbar(i, mean, yerr=bar, fmt="o", color="tab:blue", capsize=3)
        labels = [f"{a} ({n})" for a, n in zip(order, counts)]
        ax.set_xticks(range(len(order)), labels, rotation=60, fontsize=7)
        ax.set_title(STABILITY[name].label, fontsize=9)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(names) :]:
        ax.axis("off")
    fig.suptitle(
        f"{title}: each run (grey) and the mean with its 95% t-interval over {seeds_shown(counts)} seeds "
        "(each arm's count after its name)",
        fontsize=10,
    )
    fig.tight_layout()
    return fig


def ratio_bands(metrics: pd.DataFrame, by: str, order: Sequence[str], window: int, title: str) -> plt.Figure:
    """The importance ratio's logged 5%, 50% and 95% quantiles per step, one panel per arm: the mean
    over seeds, smoothed by a centred moving average over `window` training steps."""
    ncols = min(4, len(order))
    nrows = -(-len(order) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.2 * ncols, 2.6 * nrows), squeeze=False, sharey=True)
    train = metrics[metrics["reward"].notna()]
    for ax, arm in zip(axes.flat, order):
        runs = train[train[by] == arm]
        for q, style in (("p05", "--"), ("p50", "-"), ("p95", "--")):
            mean = runs.groupby("step")[f"ratio/{q}"].mean()
            ax.plot(mean.index, mean.rolling(window, center=True, min_periods=1).mean(), style, label=q)
        ax.set_title(f"{arm} ({runs['seed'].nunique()} seeds)", fontsize=9)
        ax.axhline(1, color="k", lw=0.5)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(order) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    caption = (
        f"importance-ratio quantiles per step, mean over each arm's seeds, moving average over {window} steps"
    )
    fig.suptitle(f"{title}: {caption}", fontsize=10)
    fig.tight_layout()
    return fig
