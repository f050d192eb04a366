"""The effect of a change against a reference configuration, from each run's final value: the
ablation reading of Evaluation guide §6.2 Ablations ("switch off the KL term, switch off clipping,
move the KL: observe the direction of the statistics") and the "all on, then remove one at a time"
search for the trick that breaks training of Tricks review §5 Lessons (both in docs/sources.md).
Reads run scores only."""

from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from grpo_lab.analysis.stats import effect_interval, mean_interval

VERDICTS = ("lower", "higher", "no clear change", "too few runs", "no finished run")
"""how a group compares with the reference: its difference's interval below 0, above 0, across 0,
fewer than two runs on a side (no interval), or no run that finished (every one failed)"""


def difference_interval(
    x: np.ndarray, y: np.ndarray, confidence: float = 0.95
) -> tuple[float, float, float, float]:
    """Mean of `x` minus mean of `y` with Welch's t-interval (`stats.effect_interval`) and the
    two-sided p-value of Welch's t-test. Samples without spread give the difference as its own
    interval (p 0 when it is not 0, else 1); fewer than two finite values on a side give NaN
    interval and p-value."""
    diff, lo, hi = effect_interval(x, y, "difference", confidence)
    if not np.isfinite(lo):
        return diff, lo, hi, np.nan
    if lo == hi:
        return diff, lo, hi, float(diff == 0)
    x, y = (np.asarray(v, dtype=float) for v in (x, y))
    x, y = x[np.isfinite(x)], y[np.isfinite(y)]
    vx, vy = x.var(ddof=1) / len(x), y.var(ddof=1) / len(y)  # squared standard errors of the means
    df = (vx + vy) ** 2 / (vx**2 / (len(x) - 1) + vy**2 / (len(y) - 1))  # Welch-Satterthwaite
    return diff, lo, hi, float(2 * stats.t.sf(abs(diff) / np.sqrt(vx + vy), df))


def verdict(n: int, lo: float, hi: float) -> str:
    """The `VERDICTS` entry of a difference's interval [lo, hi] over n runs."""
    if n == 0:
        return "no finished run"
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return "too few runs"
    if hi < 0:
        return "lower"
    if lo > 0:
        return "higher"
    return "no clear change"


def versus_reference(
    finals: pd.DataFrame,
    metric: str,
    by: str,
    reference: Any,
    runs: pd.DataFrame | None = None,
    confidence: float = 0.95,
) -> pd.DataFrame:
    """Each group of `by` against the group `reference`, from one row per run in `finals` (e.g.
    `stats.final_values`): runs, mean with t-interval, whether the mean lies outside the reference's
    interval, the difference to the reference with Welch's interval and p-value, and the verdict
    (`VERDICTS`, read from the difference's interval). Given `runs` (one row per run with `by` and
    `status`, e.g. `SweepResult.runs`), also the number of failed runs: a run that stopped with an
    error has no final value and would otherwise just be missing. Rows keep the order of first
    appearance (in `runs` when given), the reference first."""
    values = {key: g[metric].to_numpy(dtype=float) for key, g in finals.groupby(by, sort=False)}
    failed = pd.Series(dtype=int)
    if runs is not None:
        failed = runs[runs["status"] == "failed"][by].value_counts()
        values.update({key: np.array([]) for key in runs[by] if key not in values})  # every run failed
    if reference not in values or not np.isfinite(values[reference]).any():
        found = ", ".join(map(str, values))
        raise ValueError(f"reference {reference!r} has no finished run with a {metric!r}; groups: {found}")
    _, ref_lo, ref_hi = mean_interval(values[reference], confidence)
    rows = []
    order = list(dict.fromkeys(runs[by])) if runs is not None else list(values)
    for key in [reference, *(k for k in order if k != reference)]:
        mean, lo, hi = mean_interval(values[key], confidence)
        diff, diff_lo, diff_hi, p = difference_interval(values[key], values[reference], confidence)
        row = {by: key, "n": int(np.isfinite(values[key]).sum())}
        if runs is not None:
            row["failed"] = int(failed.get(key, 0))
        row.update(mean=mean, lo=lo, hi=hi, outside_reference=bool(mean < ref_lo or mean > ref_hi))
        row.update(diff=diff, diff_lo=diff_lo, diff_hi=diff_hi, p=p)
        row["verdict"] = "reference" if key == reference else verdict(row["n"], diff_lo, diff_hi)
        rows.append(row)
    return pd.DataFrame(rows)
