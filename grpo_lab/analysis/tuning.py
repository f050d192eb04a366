"""Reading a learning-rate scan (validity.md, "Fair tuning"): every arm is compared at its own best rate,
chosen on tuning seeds, and a best rate at the edge of the scanned range is not a best rate: the scan is
extended until the score falls on both sides.

Every function reads a table of scan means with one row per arm and factor (the multiple of the arm's
own rate): the arm's column (named by the caller), `factor` and `mean` (the mean score over the tuning
seeds; NaN where no run finished, and then left out). Reads numbers only."""

import math

import pandas as pd

STEP = 3.0
"""the scan's spacing: each rate is 3 times the one below it, as in every scan of the lab"""
SETTLED_GAP_SDS = 3.0
"""a bracket is settled when the best rate's lead over each neighbour is at least this many standard
deviations of the difference of two rates' means (`settled`): a wrong order then has a chance of about
0.1%, so the bracket needs no more tuning seeds"""


def _scanned(means: pd.DataFrame, by: str) -> dict[str, pd.Series]:
    """Arm -> its finite means indexed by factor, lowest factor first."""
    found = means[means["mean"].notna()]
    return {str(arm): t.set_index("factor")["mean"].sort_index() for arm, t in found.groupby(by, sort=False)}


def best_rates(means: pd.DataFrame, by: str) -> dict[str, float]:
    """Arm -> the factor with its highest mean score."""
    return {arm: float(m.idxmax()) for arm, m in _scanned(means, by).items()}


def bracketed(means: pd.DataFrame, by: str) -> dict[str, bool]:
    """Arm -> whether its best rate (`best_rates`) is bracketed: the nearest rate scanned on each side of it
    has a lower mean score. A best rate at either end of the scan is not: the optimum may lie beyond it."""
    found = {}
    for arm, m in _scanned(means, by).items():
        best = m.idxmax()
        below, above = m[m.index < best], m[m.index > best]
        found[arm] = bool(len(below) and len(above) and below.iloc[-1] < m[best] > above.iloc[0])
    return found


def extension(means: pd.DataFrame, by: str) -> dict[str, float | None]:
    """Arm -> the factor the scan needs next to bracket its best rate: `STEP` beyond the end of the scan
    where the best rate lies (below it when the best is the lowest rate scanned or the only one, else
    above it), None
    where the best rate is bracketed."""
    ends: dict[str, float | None] = {}
    for arm, m in _scanned(means, by).items():
        if bracketed(means[means[by] == arm], by)[arm]:
            ends[arm] = None
            continue
        best = float(m.idxmax())
        ends[arm] = best / STEP if best == float(m.index.min()) else best * STEP
    return ends


def settled(means: pd.DataFrame, by: str, sd: float, gap_sds: float = SETTLED_GAP_SDS) -> dict[str, bool]:
    """Arm -> whether its bracket is settled on the seeds it has: its best rate is bracketed and leads
    each neighbour by at least `gap_sds` x sd x sqrt(2 / n), the standard deviation of the difference of
    two means over its `n` seeds (column `n` of `means`, one count per arm: its rates' paired seeds)
    when one seed's score has standard deviation `sd` (a spread pooled over the scan's rates). A NaN `sd`
    settles nothing."""
    closed = bracketed(means, by)
    found = {}
    for arm, m in _scanned(means, by).items():
        if not closed[arm] or not math.isfinite(sd):
            found[arm] = False
            continue
        n = int(means.loc[means[by] == arm, "n"].min())
        best = m.idxmax()
        neighbours = [m[m.index < best].iloc[-1], m[m.index > best].iloc[0]]
        lead = m[best] - max(neighbours)
        found[arm] = bool(lead >= gap_sds * sd * math.sqrt(2 / n))
    return found


def factor_name(factor: float) -> str:
    """A scan factor as the scans print it: x3, x1, x1/3, x1/9 (a power of `STEP`), else x0.5."""
    power = math.log(factor, STEP)
    if abs(power - round(power)) < 1e-6:
        n = round(power)
        return f"x{STEP**n:g}" if n >= 0 else f"x1/{STEP**-n:g}"
    return f"x{factor:.2g}"
