"""Statistics of run metrics, read from logs (nothing here imports the trainer):
- per run: final-window mean, area under the curve, steps to a threshold, stability figures
- across seeds: mean with a t-interval, interquartile mean, stratified bootstrap intervals and the
  probability of improvement (Agarwal et al. 2021, "Deep RL at the Edge of the Statistical Precipice")
- sensitivity to a parameter (outcome with intervals, failure edges) and cost relative to a baseline
- the effect of a treatment on run scores (difference, relative change) with a Welch t-interval"""

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
from scipy import integrate, stats


def _keys(by: str | Sequence[str] | None) -> list[str]:
    """Grouping columns as a list."""
    return [by] if isinstance(by, str) else list(by or [])


def mean_interval(values: np.ndarray, confidence: float = 0.95) -> tuple[float, float, float]:
    """Mean and Student-t confidence interval of independent runs (collapses to the mean for one run)."""
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    if len(values) == 0:
        return np.nan, np.nan, np.nan
    mean = float(values.mean())
    sem = stats.sem(values) if len(values) >= 2 else 0.0
    if not sem > 0:  # one run, or all runs equal: zero spread
        return mean, mean, mean
    lo, hi = stats.t.interval(confidence, len(values) - 1, loc=mean, scale=sem)
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
    keys = _keys(by)
    data = df.dropna(subset=[metric])[[*keys, "seed", "step", metric]].sort_values("step")
    if smooth > 1:
        data[metric] = data.groupby([*keys, "seed"])[metric].transform(
            lambda s: s.rolling(smooth, min_periods=1).mean()
        )
    rows = []
    for key, group in data.groupby([*keys, "step"]):
        mean, lo, hi = mean_interval(group[metric].to_numpy(), confidence)
        ids = dict(zip([*keys, "step"], key if isinstance(key, tuple) else (key,)))
        rows.append({**ids, "mean": mean, "lo": lo, "hi": hi, "n": len(group)})
    return pd.DataFrame(rows)


def final_values(
    df: pd.DataFrame, metric: str, by: str | list[str] | None = None, window: int = 1
) -> pd.DataFrame:
    """Per run: the mean of `metric` over its last `window` logged values."""
    keys = _keys(by)
    data = df.dropna(subset=[metric]).sort_values("step")
    out = data.groupby([*keys, "seed"])[metric].apply(lambda s: s.tail(window).mean())
    return out.reset_index()


def summary_table(
    df: pd.DataFrame, metrics: list[str], by: str | list[str] | None = None, window: int = 1
) -> pd.DataFrame:
    """Across-seed mean and interval of each metric's final value, one row per group."""
    keys = _keys(by)
    rows: dict[Any, dict[str, Any]] = {}
    for metric in metrics:
        finals = final_values(df, metric, keys, window)
        for key, group in finals.groupby(keys) if keys else [((), finals)]:
            mean, lo, hi = mean_interval(group[metric].to_numpy())
            rows.setdefault(key, {})[metric] = f"{mean:.3f} [{lo:.3f}, {hi:.3f}]"
            rows[key]["seeds"] = len(group)
    index: pd.Index | None = None
    if keys:
        index = pd.MultiIndex.from_tuples(list(rows), names=keys)
        if len(keys) == 1:
            index = index.get_level_values(0)
    return pd.DataFrame(list(rows.values()), index=index)


# --- per run ---------------------------------------------------------------------------------------


def area_under_curve(steps: np.ndarray, values: np.ndarray) -> float:
    """Trapezoidal area under `values` against `steps` (scipy.integrate.trapezoid)."""
    return float(integrate.trapezoid(np.asarray(values, dtype=float), x=np.asarray(steps, dtype=float)))


def steps_to_threshold(steps: np.ndarray, values: np.ndarray, threshold: float, above: bool = True) -> float:
    """The first step at which `values` reaches `threshold` (>=, or <= with `above=False`); NaN if never."""
    steps, values = np.asarray(steps), np.asarray(values, dtype=float)
    hit = values >= threshold if above else values <= threshold
    return float(steps[hit][0]) if hit.any() else np.nan


def volatility(values: np.ndarray) -> float:
    """Standard deviation of the step-to-step changes (KL volatility when given the KL curve)."""
    changes = np.diff(np.asarray(values, dtype=float))
    return float(np.std(changes, ddof=1)) if len(changes) >= 2 else np.nan


def spike_frequency(values: np.ndarray, k: float = 5.0) -> float:
    """Share of values above median + k x MAD (median absolute deviation, unscaled): gradient spikes."""
    values = np.asarray(values, dtype=float)
    if len(values) == 0:
        return np.nan
    bound = np.median(values) + k * stats.median_abs_deviation(values)
    return float(np.mean(values > bound))


def decay_rate(steps: np.ndarray, values: np.ndarray) -> float:
    """Slope of a least-squares line through log(values) against step (-0.01: about 1% decay per step);
    non-positive values are left out. Entropy decay rate when given the entropy curve."""
    steps, values = np.asarray(steps, dtype=float), np.asarray(values, dtype=float)
    keep = values > 0
    if keep.sum() < 2:
        return np.nan
    return float(stats.linregress(steps[keep], np.log(values[keep])).slope)


def run_table(
    df: pd.DataFrame,
    by: str | list[str] | None = None,
    metric: str = "reward",
    window: int = 10,
    threshold: float | None = None,
    spike_k: float = 5.0,
) -> pd.DataFrame:
    """One row per run (each `by` group and seed): of `metric`, the mean of its last `window` logged
    values (`final`), the area under its curve (`auc`) and, given a `threshold`, the first step that
    reaches it; then the stability figures: variance of the training reward (`reward_var`), KL
    volatility (`kl_volatility`), share of steps whose grad_norm exceeds median + spike_k x MAD
    (`grad_spike_freq`) and entropy decay rate (`entropy_decay`). NaN where a metric was not logged."""
    keys = _keys(by)
    rows = []
    for key, run in df.sort_values("step").groupby([*keys, "seed"]):
        steps, values = _series(run, metric)
        row = dict(zip([*keys, "seed"], key))
        row["final"] = float(values[-window:].mean()) if len(values) else np.nan
        row["auc"] = area_under_curve(steps, values)
        if threshold is not None:
            row["steps_to_threshold"] = steps_to_threshold(steps, values, threshold)
        reward = _series(run, "reward")[1]
        row["reward_var"] = float(np.var(reward, ddof=1)) if len(reward) >= 2 else np.nan
        row["kl_volatility"] = volatility(_series(run, "kl")[1])
        row["grad_spike_freq"] = spike_frequency(_series(run, "grad_norm")[1], spike_k)
        row["entropy_decay"] = decay_rate(*_series(run, "entropy"))
        rows.append(row)
    return pd.DataFrame(rows)


def _series(run: pd.DataFrame, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of the finite logged values of `metric` in one run (empty if never logged)."""
    if metric not in run:
        return np.array([]), np.array([])
    data = run[["step", metric]].astype(float)
    data = data[np.isfinite(data[metric])]
    return data["step"].to_numpy(), data[metric].to_numpy()


# --- across seeds ----------------------------------------------------------------------------------


def iqm(values: np.ndarray, axis: int | None = None) -> float | np.ndarray:
    """Interquartile mean: the mean of the middle 50% (scipy.stats.trim_mean, 25% cut at each end)."""
    return stats.trim_mean(np.asarray(values, dtype=float), 0.25, axis=axis)


STATISTICS: dict[str, Callable[..., Any]] = {"mean": np.mean, "iqm": iqm}
"""aggregate statistics of run scores, each called as f(values, axis=...)"""


def bootstrap_interval(
    samples: np.ndarray | Sequence[np.ndarray],
    statistic: str = "iqm",
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """Point estimate and percentile bootstrap interval (scipy.stats.bootstrap) of `statistic`
    ('iqm' or 'mean') of run scores. `samples` is one array of runs, or a list of arrays, one per
    task: then the runs are resampled within each task (stratified bootstrap) and the statistic is
    taken over all runs pooled, as in rliable. Collapses to the point with fewer than 2 runs per task."""
    strata = _strata(samples)
    func = STATISTICS[statistic]

    def pooled(*xs: np.ndarray, axis: int = -1) -> np.ndarray:
        return func(np.concatenate(xs, axis=axis), axis=axis)

    point = float(pooled(*strata))
    if min(len(s) for s in strata) < 2:
        return point, point, point
    return (point, *_bootstrap(strata, pooled, confidence, n_resamples, seed))


def probability_of_improvement(
    x: np.ndarray | Sequence[np.ndarray],
    y: np.ndarray | Sequence[np.ndarray],
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """P(X > Y) + P(X = Y) / 2 for run scores `x` of one configuration against `y` of another: the
    Mann-Whitney U statistic of x divided by n x m, with a percentile bootstrap interval. Given one
    array per task in each (same task order), the per-task values are averaged and the bootstrap is
    stratified. Collapses to the point with fewer than 2 runs in some sample."""
    xs, ys = _strata(x), _strata(y)
    if len(xs) != len(ys):
        raise ValueError(f"x has {len(xs)} tasks and y {len(ys)}: they must match")

    def poi(*samples: np.ndarray, axis: int = -1) -> np.ndarray:
        pairs = zip(samples[: len(xs)], samples[len(xs) :])
        return np.mean(
            [
                stats.mannwhitneyu(a, b, axis=axis, method="asymptotic").statistic
                / (a.shape[axis] * b.shape[axis])
                for a, b in pairs
            ],
            axis=0,
        )

    point = float(poi(*xs, *ys))
    if min(len(s) for s in (*xs, *ys)) < 2:
        return point, point, point
    return (point, *_bootstrap([*xs, *ys], poi, confidence, n_resamples, seed))


def aggregate_table(
    finals: pd.DataFrame,
    metric: str,
    by: str | list[str] | None = None,
    strata: str | None = None,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> pd.DataFrame:
    """Across runs of each group of `by` (one row per run in `finals`, e.g. from `final_values` or
    `run_table`): number of runs, mean and IQM of `metric`, each with a bootstrap interval,
    stratified over the column `strata` (e.g. 'task') when given."""
    keys = _keys(by)
    rows = []
    for key, group in finals.groupby(keys) if keys else [((), finals)]:
        samples = _by_stratum(group, metric, strata)
        row = dict(zip(keys, key if isinstance(key, tuple) else (key,)))
        row["n"] = sum(len(s) for s in samples)
        for name in STATISTICS:
            point, lo, hi = bootstrap_interval(samples, name, confidence, n_resamples, seed)
            row.update({name: point, f"{name}_lo": lo, f"{name}_hi": hi})
        rows.append(row)
    return pd.DataFrame(rows)


def improvement_table(
    finals: pd.DataFrame,
    metric: str,
    by: str,
    baseline: Any,
    strata: str | None = None,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> pd.DataFrame:
    """Probability of improvement in `metric` of every group of `by` over the group `baseline`
    (one row per run in `finals`), with bootstrap intervals; stratified over `strata` when given."""
    if baseline not in set(finals[by]):
        raise ValueError(f"baseline {baseline!r} is not a value of {by!r}")
    reference = _by_stratum(finals[finals[by] == baseline], metric, strata)
    rows = []
    for value, group in finals[finals[by] != baseline].groupby(by):
        point, lo, hi = probability_of_improvement(
            _by_stratum(group, metric, strata), reference, confidence, n_resamples, seed
        )
        rows.append({by: value, "poi": point, "poi_lo": lo, "poi_hi": hi})
    return pd.DataFrame(rows)


def _strata(samples: np.ndarray | Sequence[np.ndarray]) -> list[np.ndarray]:
    """One 1-D array per stratum: a flat array of numbers is a single stratum."""
    if np.ndim(next(iter(samples), 0.0)) == 0:
        return [np.asarray(samples, dtype=float)]
    return [np.asarray(s, dtype=float) for s in samples]


def _by_stratum(group: pd.DataFrame, metric: str, strata: str | None) -> list[np.ndarray]:
    """The finite values of `metric`, one array per value of the column `strata` (sorted)."""
    data = group.dropna(subset=[metric])
    if strata is None:
        return [data[metric].to_numpy(dtype=float)]
    return [g[metric].to_numpy(dtype=float) for _, g in data.groupby(strata)]


def _bootstrap(
    samples: list[np.ndarray], statistic: Callable[..., Any], confidence: float, n_resamples: int, seed: int
) -> tuple[float, float]:
    """Percentile bootstrap interval, each sample resampled on its own (a stratified bootstrap)."""
    result = stats.bootstrap(
        samples,
        statistic,
        n_resamples=n_resamples,
        vectorized=True,
        confidence_level=confidence,
        method="percentile",
        random_state=np.random.default_rng(seed),
    )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


# --- sensitivity -----------------------------------------------------------------------------------


class Edge(NamedTuple):
    """A parameter value where the outcome fails: its mean lies more than a margin below the best
    value's, or no run at it finished with a finite outcome (a crash)."""

    value: Any
    """the failing parameter value"""
    best: Any
    """the value with the highest mean outcome"""
    mean: float
    """mean outcome at `value` (NaN: a crash)"""
    best_mean: float
    """mean outcome at `best`"""

    @property
    def drop(self) -> float:
        """How far below the best the outcome falls (NaN for a crash)."""
        return self.best_mean - self.mean


def sensitivity_table(
    df: pd.DataFrame, param: str, metric: str, window: int = 1, confidence: float = 0.95
) -> pd.DataFrame:
    """The outcome (each run's mean of its last `window` values of `metric`) against the parameter
    column `param`: per value, the number of runs, mean with t-interval and IQM, sorted by value."""
    finals = final_values(df, metric, param, window)
    rows = []
    for value, group in finals.groupby(param):
        mean, lo, hi = mean_interval(group[metric].to_numpy(), confidence)
        rows.append(
            {param: value, "n": len(group), "mean": mean, "lo": lo, "hi": hi, "iqm": iqm(group[metric])}
        )
    return pd.DataFrame(rows).sort_values(param, ignore_index=True)


def failure_edges(table: pd.DataFrame, param: str, margin: float, column: str = "mean") -> list[Edge]:
    """The values of `param` (sorted) where the outcome fails (Evaluation guide §4.6's "steep failure
    boundary"): `column` more than `margin` below its highest value, or NaN (no finite run: a crash).
    A value where the outcome rises is never one, however steep the rise."""
    ordered = table.sort_values(param)
    values, means = ordered[param].to_list(), ordered[column].to_numpy(dtype=float)
    if not np.isfinite(means).any():
        return [Edge(v, None, math.nan, math.nan) for v in values]
    top = int(np.nanargmax(means))
    best, peak = values[top], float(means[top])
    failing = [(v, float(m)) for v, m in zip(values, means) if not np.isfinite(m) or peak - m > margin]
    return [Edge(v, best, m, peak) for v, m in failing]


# --- cost ------------------------------------------------------------------------------------------

PEAK_PREFIX = "cost/peak"
"""per-step columns that hold a running peak (memory): a run's value is their maximum, not their mean"""
TOKEN_COUNTS = ("cost/tokens", "cost/sampled_tokens")
"""per-step token counts, the first one logged is used for tokens per second"""


def cost_table(df: pd.DataFrame, baseline_label: Any, by: str = "label") -> pd.DataFrame:
    """Cost per configuration (a group of `by`), averaged over its runs: the per-step mean of every
    logged `time/*` phase (seconds) and `cost/*` count, the run's peak memory (every `cost/peak*`
    column, max over steps), tokens per second (a token count over `time/step_s`); then each as a
    multiple of the `baseline_label` group's, in columns suffixed '_x'. Metrics that were not logged
    are left out."""
    runs = df.groupby([by, "seed"])
    measures = {}
    for column in sorted(c for c in df.columns if c.startswith(("time/", "cost/"))):
        measures[column] = runs[column].max() if column.startswith(PEAK_PREFIX) else runs[column].mean()
    tokens = next((c for c in TOKEN_COUNTS if c in df), None)
    if tokens is not None and "time/step_s" in df:
        measures["tokens_per_s"] = runs[tokens].sum() / runs["time/step_s"].sum()
    table = pd.DataFrame(measures).groupby(level=by).mean()
    if baseline_label not in table.index:
        raise ValueError(
            f"baseline {baseline_label!r} is not a value of {by!r}: {', '.join(map(str, table.index))}"
        )
    return table.join((table / table.loc[baseline_label]).add_suffix("_x"))


# --- effect of a treatment -------------------------------------------------------------------------

EFFECTS = ("difference", "relative", "value")
"""how a treatment's run scores are compared: mean(treatment) - mean(control), mean(treatment) /
mean(control) - 1, or mean(treatment) alone (no control)"""


def effect_interval(
    treatment: np.ndarray, control: np.ndarray | None, effect: str, confidence: float = 0.95
) -> tuple[float, float, float]:
    """Point estimate and `confidence` interval of the effect of a treatment on run scores (one score
    per run, e.g. per seed): 'difference' with a Welch t-interval; 'relative' from a Welch t-interval
    of log(mean_t / mean_c) (delta method, both means must be positive); 'value' the treatment's
    mean with a t-interval (`control` must be None). A t-interval rather than a percentile bootstrap,
    because with three runs per arm the bootstrap interval is far too narrow (it cannot leave the
    range of the few observed means). NaN interval with fewer than two finite runs in an arm."""
    if effect not in EFFECTS:
        raise ValueError(f"unknown effect {effect!r}; valid: {', '.join(EFFECTS)}")
    t = _finite(treatment)
    if effect == "value":
        if control is not None:
            raise ValueError("effect 'value' looks at the treatment alone: pass control=None")
        if len(t) < 2:
            return (float(t.mean()) if len(t) else np.nan), np.nan, np.nan
        return mean_interval(t, confidence)
    if control is None:
        raise ValueError(f"effect {effect!r} compares two arms: pass the control's scores")
    c = _finite(control)
    if len(t) == 0 or len(c) == 0:
        return np.nan, np.nan, np.nan
    mt, mc = float(t.mean()), float(c.mean())
    if effect == "relative" and (mt <= 0 or mc <= 0):
        raise ValueError(f"a relative effect needs positive means, got {mt:g} (treatment), {mc:g} (control)")
    point = mt - mc if effect == "difference" else mt / mc - 1
    if min(len(t), len(c)) < 2:
        return point, np.nan, np.nan
    vt, vc = t.var(ddof=1) / len(t), c.var(ddof=1) / len(c)  # squared standard errors of the means
    if effect == "relative":  # standard errors of log(mean) by the delta method
        vt, vc = vt / mt**2, vc / mc**2
    center = mt - mc if effect == "difference" else np.log(mt / mc)
    se = np.sqrt(vt + vc)
    if se == 0:
        return point, point, point
    df = (vt + vc) ** 2 / (vt**2 / (len(t) - 1) + vc**2 / (len(c) - 1))  # Welch-Satterthwaite
    half = stats.t.ppf(0.5 + confidence / 2, df) * se
    lo, hi = center - half, center + half
    if effect == "relative":
        lo, hi = np.expm1(lo), np.expm1(hi)
    return point, float(lo), float(hi)


def _finite(values: np.ndarray | None) -> np.ndarray:
    values = np.asarray(values, dtype=float)
    return values[np.isfinite(values)]


def seeds_shown(counts: Sequence[int]) -> str:
    """How many seeds the lines of a figure have: 'N' when all agree, else 'M to N'."""
    low, high = min(counts, default=0), max(counts, default=0)
    return f"{low}" if low == high else f"{low} to {high}"
