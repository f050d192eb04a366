"""Long-horizon readings of run logs, for the advice to "train long enough to cover the stage where
policy entropy falls clearly, and not judge schemes by early reward alone" (docs/sources.md,
Evaluation guide §6.5 Long horizon and §10 Advice): how far entropy fell, where validation peaked
and how much it lost after, and whether a run's early reward predicts its final outcome (a rank
correlation across runs with a permutation p-value and a bootstrap interval)."""

from collections.abc import Iterator, Sequence
from typing import NamedTuple

import numpy as np
import pandas as pd
from scipy import stats as sps

from grpo_lab.analysis.stats import _keys, mean_interval


def _runs(
    df: pd.DataFrame, metric: str, by: str | Sequence[str] | None
) -> Iterator[tuple[dict, pd.DataFrame]]:
    """(keys, finite rows of `metric` sorted by step) of each run (a group of `by` and seed)."""
    keys = [*_keys(by), "seed"]
    if metric not in df:
        raise ValueError(f"metric {metric!r} was not logged; columns: {', '.join(df.columns)}")
    # A stable sort and sorted groups: the runs come in one order whatever the order of `df`'s rows, so
    # a seeded bootstrap over them (`rank_correlation`) gives one interval.
    data = df[np.isfinite(pd.to_numeric(df[metric], errors="coerce"))].sort_values("step", kind="stable")
    for key, run in data.groupby(keys, sort=True):
        yield dict(zip(keys, key)), run


def start_end(
    df: pd.DataFrame, metric: str, by: str | Sequence[str] | None = None, frac: float = 0.1
) -> pd.DataFrame:
    """Per run: the mean of `metric` over its first and over its last `frac` of logged values (at
    least one each), and their `ratio` end / start (0.6: it fell by 40%)."""
    if not 0 < frac <= 0.5:
        raise ValueError(f"frac must be in (0, 0.5], got {frac}")
    rows = []
    for ids, run in _runs(df, metric, by):
        values = run[metric].to_numpy(dtype=float)
        w = max(1, round(frac * len(values)))
        start, end = float(values[:w].mean()), float(values[-w:].mean())
        rows.append({**ids, "start": start, "end": end, "ratio": end / start if start else np.nan})
    return pd.DataFrame(rows)


def early_and_final(
    df: pd.DataFrame,
    by: str | Sequence[str] | None = None,
    early: str = "reward",
    final: str = "val/accuracy",
    early_frac: float = 0.2,
) -> pd.DataFrame:
    """Per run: `early`, the mean of the metric `early` over the run's first `early_frac` of training
    steps (steps below early_frac x the number of steps), and `final`, the last logged value of the
    metric `final`."""
    if not 0 < early_frac < 1:
        raise ValueError(f"early_frac must be in (0, 1), got {early_frac}")
    finals = {tuple(ids.values()): float(run[final].iloc[-1]) for ids, run in _runs(df, final, by)}
    rows = []
    for ids, run in _runs(df, early, by):
        cutoff = early_frac * (run["step"].max() + 1)
        early_mean = float(run.loc[run["step"] < cutoff, early].mean())
        rows.append({**ids, "early": early_mean, "final": finals.get(tuple(ids.values()), np.nan)})
    return pd.DataFrame(rows)


def peak_and_drop(
    df: pd.DataFrame, metric: str = "val/accuracy", by: str | Sequence[str] | None = None
) -> pd.DataFrame:
    """Per run: the best logged value of `metric` (`best`), the step where it was first reached, the
    last value (`final`) and what the run lost after its peak (`drop` = best - final): a late
    divergence shows as an early peak and a large drop."""
    rows = []
    for ids, run in _runs(df, metric, by):
        values = run[metric].to_numpy(dtype=float)
        best = int(np.argmax(values))
        peak = {"best": float(values[best]), "best_step": int(run["step"].iloc[best])}
        rows.append({**ids, **peak, "final": float(values[-1]), "drop": float(values[best] - values[-1])})
    return pd.DataFrame(rows)


def fall_step(
    df: pd.DataFrame,
    metric: str = "entropy",
    by: str | Sequence[str] | None = None,
    fall: float = 0.4,
    window: int = 20,
) -> pd.DataFrame:
    """Per run: `start`, the mean of `metric` over its first `window` logged values; `fall_step`, the
    first step where the trailing mean over `window` values is at or below (1 - `fall`) x start (NaN
    if it never is); and `ratio`, the last trailing mean over the start. The trailing mean keeps a
    single noisy step from counting as the fall."""
    if not 0 < fall < 1:
        raise ValueError(f"fall must be in (0, 1), got {fall}")
    rows = []
    for ids, run in _runs(df, metric, by):
        trailing = run[metric].astype(float).rolling(window, min_periods=1).mean().to_numpy()  # (steps,)
        start = float(run[metric].astype(float).iloc[:window].mean())
        below = np.flatnonzero(trailing <= (1 - fall) * start)
        step = float(run["step"].iloc[below[0]]) if below.size else np.nan
        rows.append(
            {**ids, "start": start, "fall_step": step, "ratio": trailing[-1] / start if start else np.nan}
        )
    return pd.DataFrame(rows)


def knee(curve: pd.DataFrame, value: str = "mean", reach: float = 0.9) -> dict[str, float]:
    """The knee of a rising curve (`step` and `value` columns, e.g. the across-seed mean of a
    validation metric from `stats.curve`): the first step where it has made `reach` of its rise from
    its first value to its maximum. After it the curve has at most 1 - `reach` of its rise left: the
    run has passed its fast phase. Also `peak_step`, `first`, `peak` and `last`; the knee is NaN for
    a curve that never rises."""
    c = curve.sort_values("step")
    values = c[value].to_numpy(dtype=float)  # (evaluations,)
    first, peak = float(values[0]), float(np.nanmax(values))
    at_peak = float(c["step"].iloc[int(np.nanargmax(values))])
    reached = np.flatnonzero(values >= first + reach * (peak - first)) if peak > first else np.array([], int)
    step = float(c["step"].iloc[reached[0]]) if len(reached) else np.nan
    return {"knee_step": step, "peak_step": at_peak, "first": first, "peak": peak, "last": float(values[-1])}


def summarize(
    per_run: pd.DataFrame, columns: Sequence[str], by: str | Sequence[str], confidence: float = 0.95
) -> pd.DataFrame:
    """Across the runs of each group of `by` in a per-run table (groups sorted): 'mean [lo, hi]'
    (t-interval) of each of `columns`, and the number of runs."""
    keys = _keys(by)
    rows = []
    for key, group in per_run.groupby(keys):
        row = dict(zip(keys, key))
        for column in columns:
            mean, lo, hi = mean_interval(group[column].to_numpy(dtype=float), confidence)
            row[column] = f"{mean:.3f} [{lo:.3f}, {hi:.3f}]"
        row["runs"] = len(group)
        rows.append(row)
    return pd.DataFrame(rows).set_index(keys)


class Correlation(NamedTuple):
    """A Spearman rank correlation across runs."""

    rho: float
    lo: float
    """bootstrap percentile interval (runs resampled, within groups when given)"""
    hi: float
    p: float
    """two-sided permutation p-value (y shuffled across runs, within groups when given)"""
    n: int
    """number of runs (pairs with both values finite)"""


def _spearman_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman's rho of each row pair of x and y (R, n), NaN where a row has no spread."""
    rx, ry = sps.rankdata(x, axis=-1), sps.rankdata(y, axis=-1)
    rx, ry = rx - rx.mean(-1, keepdims=True), ry - ry.mean(-1, keepdims=True)
    norm = np.sqrt((rx**2).sum(-1) * (ry**2).sum(-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(norm > 0, (rx * ry).sum(-1) / np.where(norm > 0, norm, 1.0), np.nan)


def _centred(values: np.ndarray, codes: np.ndarray, n_groups: int) -> np.ndarray:
    """Each row of `values` (R, n) minus the mean of its group (codes (R, n) in [0, n_groups))."""
    rows = np.arange(values.shape[0])[:, None]
    sums = np.zeros((values.shape[0], n_groups))
    counts = np.zeros_like(sums)
    np.add.at(sums, (rows, codes), values)
    np.add.at(counts, (rows, codes), 1.0)
    return values - (sums / np.maximum(counts, 1.0))[rows, codes]


def rank_correlation(
    x: Sequence[float],
    y: Sequence[float],
    groups: Sequence | None = None,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    n_permutations: int = 5000,
    seed: int = 0,
) -> Correlation:
    """Spearman's rho between `x` and `y` (one pair per run), with a percentile bootstrap interval
    and a two-sided permutation p-value. With `groups` (each run's configuration), x and y are first
    centred on their group means, so rho measures whether runs that do better than their own
    configuration's average early also end better: the part of the prediction the configuration
    does not explain. Resampling and shuffling then stay within groups. NaN with fewer than 3 runs."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xs.shape != ys.shape or xs.ndim != 1:
        raise ValueError(f"x and y must be 1-D of the same length, got shapes {xs.shape} and {ys.shape}")
    labels = np.zeros(len(xs), dtype=int) if groups is None else pd.factorize(pd.Series(list(groups)))[0]
    if len(labels) != len(xs):
        raise ValueError(f"groups has {len(labels)} entries for {len(xs)} runs")
    keep = np.isfinite(xs) & np.isfinite(ys)
    xs, ys, labels = xs[keep], ys[keep], labels[keep]
    n = len(xs)
    if n < 3:
        return Correlation(np.nan, np.nan, np.nan, np.nan, n)
    n_groups = int(labels.max()) + 1
    members = [np.flatnonzero(labels == g) for g in range(n_groups)]

    def rho_of(index: np.ndarray, shuffled: np.ndarray) -> np.ndarray:
        codes = labels[index]
        return _spearman_rows(_centred(xs[index], codes, n_groups), _centred(ys[shuffled], codes, n_groups))

    rng = np.random.default_rng(seed)
    identity = np.arange(n)[None, :]
    rho = float(rho_of(identity, identity)[0])
    perms = np.tile(identity, (n_permutations, 1))
    for idx in members:
        perms[:, idx] = rng.permuted(np.tile(idx, (n_permutations, 1)), axis=1)
    null = rho_of(np.tile(identity, (n_permutations, 1)), perms)
    p = float((np.sum(np.abs(null) >= abs(rho) - 1e-12) + 1) / (n_permutations + 1))
    boot = np.empty((n_resamples, n), dtype=int)
    for idx in members:
        boot[:, idx] = rng.choice(idx, size=(n_resamples, len(idx)))
    draws = rho_of(boot, boot)
    alpha = (1 - confidence) / 2
    lo, hi = np.nanquantile(draws, [alpha, 1 - alpha]) if np.isfinite(draws).any() else (np.nan, np.nan)
    return Correlation(rho, float(lo), float(hi), p, n)
