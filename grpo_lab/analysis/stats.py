"""Across-seed statistics of run metrics."""

import numpy as np
import pandas as pd
from scipy import stats


def mean_interval(values: np.ndarray, confidence: float = 0.95) -> tuple[float, float, float]:
    """Mean and Student-t confidence interval of independent runs (collapses to the mean for one run)."""
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    if len(values) == 0:
        return np.nan, np.nan, np.nan
    mean = float(values.mean())
    if len(values) < 2:
        return mean, mean, mean
    lo, hi = stats.t.interval(confidence, len(values) - 1, loc=mean, scale=stats.sem(values))
    if not np.isfinite(lo):  # all runs equal: zero spread
        lo = hi = mean
    return mean, float(lo), float(hi)


def curve(
    df: pd.DataFrame,
    metric: str,
    by: str | list[str] | None = None,
    smooth: int = 1,
    confidence: float = 0.95,
) -> pd.DataFrame:
    """Mean and interval across seeds of `metric` at each step (per group of `by`).
    `smooth` > 1 first applies a trailing rolling mean of that many logged points within each run."""
    keys = [by] if isinstance(by, str) else list(by or [])
    data = df.dropna(subset=[metric])[[*keys, "seed", "step", metric]].sort_values("step")
    if smooth > 1:
        data[metric] = data.groupby([*keys, "seed"])[metric].transform(
            lambda s: s.rolling(smooth, min_periods=1).mean()
        )
    rows = []
    for key, group in data.groupby([*keys, "step"]):
        mean, lo, hi = mean_interval(group[metric].to_numpy(), confidence)
        rows.append({**dict(zip([*keys, "step"], key if isinstance(key, tuple) else (key,))),
                     "mean": mean, "lo": lo, "hi": hi, "n": len(group)})  # fmt: skip
    return pd.DataFrame(rows)


def final_values(
    df: pd.DataFrame, metric: str, by: str | list[str] | None = None, window: int = 1
) -> pd.DataFrame:
    """Per run: the mean of `metric` over its last `window` logged values."""
    keys = [by] if isinstance(by, str) else list(by or [])
    data = df.dropna(subset=[metric]).sort_values("step")
    out = data.groupby([*keys, "seed"])[metric].apply(lambda s: s.tail(window).mean())
    return out.reset_index()


def summary_table(
    df: pd.DataFrame, metrics: list[str], by: str | list[str] | None = None, window: int = 1
) -> pd.DataFrame:
    """Across-seed mean and interval of each metric's final value, one row per group."""
    keys = [by] if isinstance(by, str) else list(by or [])
    rows = {}
    for metric in metrics:
        finals = final_values(df, metric, keys, window)
        for key, group in finals.groupby(keys) if keys else [((), finals)]:
            mean, lo, hi = mean_interval(group[metric].to_numpy())
            rows.setdefault(key, {})[metric] = f"{mean:.3f} [{lo:.3f}, {hi:.3f}]"
            rows[key]["seeds"] = len(group)
    index = pd.Index(list(rows), name=",".join(keys) or None) if keys else None
    return pd.DataFrame(list(rows.values()), index=index)
