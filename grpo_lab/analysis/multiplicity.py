"""Error-rate control over the rows of a table: each table is a family of comparisons, and a word
read from one row's 95% interval among 32, 48 or 126 rows is a test among many (with 72 independent
null comparisons at 5%, about 3.6 say 'better' or 'worse' by chance alone).

A table names its family and its control (`Family`), and every row carries its raw word (from its own
interval) beside its adjusted word (from its interval at the level the control gives it):

- `holm`: Holm's step-down procedure (Holm, "A Simple Sequentially Rejective Multiple Test Procedure",
  Scandinavian Journal of Statistics 6, 1979), which controls the family-wise error rate (the chance
  of any false directional word in the table) at alpha. The rows' p-values are sorted; the i-th
  smallest of m is tested at alpha / (m - i + 1) until one fails, and every later row at that
  failing level. A row's adjusted interval is its interval at that level, so a row Holm rejects
  excludes 0 on its adjusted interval, and the others do not.
- `bh`: Benjamini and Hochberg's step-up procedure ("Controlling the False Discovery Rate", JRSS B 57,
  1995), which controls the expected share of false directional words among those said at alpha. With
  R of m rows selected, every row's adjusted interval is its interval at level R alpha / m (alpha / m
  when none is), the false-coverage-rate interval of Benjamini and Yekutieli ("False Discovery
  Rate-Adjusted Multiple Confidence Intervals for Selected Parameters", JASA 100, 2005).
- `bonferroni`: every row at alpha / m: simultaneous intervals, which cover all m effects at once with
  probability at least 1 - alpha whatever the words read from them. The control for a table whose
  words are not read against 0 (a claim's region, `analysis.claim_checks`): Holm's order comes from
  tests of no effect, and only simultaneous intervals bound the error of any word read from them.

The control is of the directional claims (an adjusted interval that excludes 0). 'better' / 'worse'
(the whole adjusted interval beyond the margin) and 'no difference' (the whole adjusted interval
inside it) are read from the same, wider intervals, so each is at least as hard to reach as before
adjustment.

A row's p-value comes from its own interval: an interval of confidence 1 - a0 with d degrees of
freedom around effect e has standard error s = half-width / t(1 - a0/2, d), and the two-sided p of
e / s on d degrees of freedom is scaled by alpha / a0 so that it is at most alpha exactly when the
row's own interval excludes 0 (a sequential row's interval is already at its look's adjusted level
a0 < alpha; a plain row has a0 = alpha and keeps its p). The control's level for the row, a, becomes
the row's adjusted level a0 a / alpha. A row without a finite interval (too few seeds) is left out of
the family, and a zero-width interval (identical scores) keeps its raw word."""

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray
from scipy import stats

from grpo_lab.analysis.power import ALPHA, TOO_FEW_SEEDS, word, zero_width


def holm(p: ArrayLike, alpha: float = ALPHA) -> NDArray[np.float64]:
    """Each p-value's Holm level: alpha / (m - i + 1) for the i-th smallest while every smaller one
    passed its own, then the first failing level for the rest (a row passes when p <= its level)."""
    p = np.asarray(p, dtype=float)
    m, levels = len(p), np.empty(len(p))
    failed_at = None
    for rank, i in enumerate(np.argsort(p, kind="stable")):
        level = alpha / (m - rank)
        if failed_at is None and p[i] > level:
            failed_at = level
        levels[i] = level if failed_at is None else failed_at
    return levels


def benjamini_hochberg(p: ArrayLike, alpha: float = ALPHA) -> NDArray[np.float64]:
    """Every p-value's Benjamini-Hochberg level R alpha / m, R the largest k with the k-th smallest
    p <= k alpha / m (alpha / m when there is none): a row passes when p <= that level."""
    p = np.asarray(p, dtype=float)
    m = len(p)
    ranked = np.sort(p)
    passing = np.nonzero(ranked <= alpha * np.arange(1, m + 1) / m)[0]
    selected = int(passing[-1]) + 1 if len(passing) else 1
    return np.full(m, selected * alpha / m)


def bonferroni(p: ArrayLike, alpha: float = ALPHA) -> NDArray[np.float64]:
    """alpha / m for each of the m p-values, whatever their values."""
    p = np.asarray(p, dtype=float)
    return np.full(len(p), alpha / max(len(p), 1))


CONTROLS: dict[str, Callable[[ArrayLike, float], NDArray[np.float64]]] = {
    "holm": holm,
    "bh": benjamini_hochberg,
    "bonferroni": bonferroni,
}
"""each control: p-values and alpha -> the level each row is tested at"""
CONTROL_NAMES = {
    "holm": "Holm (family-wise error rate)",
    "bh": "Benjamini-Hochberg (false-discovery rate)",
    "bonferroni": "Bonferroni (simultaneous intervals, family-wise error rate)",
}
"""how a caption names each control and the rate it controls"""


@dataclass(frozen=True)
class Family:
    """The family of comparisons a table controls its error rate over."""

    what: str
    """the rows the family holds, in words (e.g. 'the 32 rows of the verdict table')"""
    control: str = "holm"
    """a key of CONTROLS"""
    alpha: float = ALPHA
    """the controlled rate"""

    def __post_init__(self) -> None:
        if self.control not in CONTROLS:
            raise ValueError(f"unknown error-rate control {self.control!r}; valid: {', '.join(CONTROLS)}")
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must lie in (0, 1), got {self.alpha!r}")

    def caption(self, rows: int) -> str:
        """One line for the table's caption: the family, its size and its control."""
        return (
            f"family: {self.what} ({rows} comparisons); {CONTROL_NAMES[self.control]} at {self.alpha:g}: "
            "'adjusted' is the word read from each row's interval at its adjusted level"
        )


def p_values(
    effect: ArrayLike,
    low: ArrayLike,
    high: ArrayLike,
    confidence: ArrayLike,
    df: ArrayLike,
    alpha: float = ALPHA,
) -> NDArray[np.float64]:
    """Each row's two-sided p-value of 'no effect' read off its interval (module doc), scaled by
    alpha / (1 - confidence) and capped at 1; NaN where the interval is not finite or has zero width."""
    e, lo, hi = (np.asarray(x, dtype=float) for x in (effect, low, high))
    own = 1 - np.asarray(confidence, dtype=float)
    d = np.asarray(df, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        se = (hi - lo) / 2 / stats.t.isf(own / 2, d)
        p = 2 * stats.t.sf(np.abs(e) / se, d) * alpha / own
    bad = ~np.isfinite(lo) | ~np.isfinite(hi) | ~np.isfinite(d) | zero_width(lo, hi)
    return np.where(bad, np.nan, np.minimum(p, 1.0))


def intervals(
    effect: ArrayLike,
    low: ArrayLike,
    high: ArrayLike,
    confidence: ArrayLike,
    df: ArrayLike,
    family: Family,
    member: ArrayLike | None = None,
) -> pd.DataFrame:
    """Each row's interval at the level `family`'s control gives it: columns `p` (`p_values`), `member`
    (in the family: a finite p, and `member` where given), `adjusted confidence`, `adjusted ci_low` and
    `adjusted ci_high` (a row outside the family keeps its own interval)."""
    p = p_values(effect, low, high, confidence, df, family.alpha)
    inside = np.isfinite(p) & (np.ones(len(p), bool) if member is None else np.asarray(member, bool))
    levels = np.full(len(p), np.nan)
    if inside.any():
        levels[inside] = CONTROLS[family.control](p[inside], family.alpha)
    own = 1 - np.asarray(confidence, dtype=float)
    adjusted = own * levels / family.alpha  # (rows,)
    d = np.asarray(df, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        widen = stats.t.isf(adjusted / 2, d) / stats.t.isf(own / 2, d)
    lo, hi = np.asarray(low, dtype=float), np.asarray(high, dtype=float)
    half = (hi - lo) / 2 * widen
    centre = np.asarray(effect, dtype=float)
    return pd.DataFrame(
        {
            "p": p,
            "member": inside,
            "adjusted confidence": np.where(inside, 1 - adjusted, 1 - own),
            "adjusted ci_low": np.where(inside, centre - half, lo),
            "adjusted ci_high": np.where(inside, centre + half, hi),
        }
    )


def adjust(table: pd.DataFrame, family: Family) -> pd.DataFrame:
    """`table` (a row per comparison with `effect`, `ci_low`, `ci_high`, `confidence`, `df`, `margin`
    and `verdict`) with the family's adjustment: `p` (`p_values`), `adjusted confidence`, `adjusted
    ci_low` / `adjusted ci_high` (the row's interval at its adjusted level, `intervals`) and `adjusted
    verdict` (`power.word` of that interval; a row outside the family, too few seeds among them, keeps
    its verdict)."""
    missing = [
        c for c in ("effect", "ci_low", "ci_high", "confidence", "df", "margin", "verdict") if c not in table
    ]
    if missing:
        raise ValueError(f"a table to adjust needs the columns {missing}")
    out = table.copy()
    found = intervals(
        out["effect"],
        out["ci_low"],
        out["ci_high"],
        out["confidence"],
        out["df"],
        family,
        (out["verdict"] != TOO_FEW_SEEDS).to_numpy(),
    )
    for column in ("p", "adjusted confidence", "adjusted ci_low", "adjusted ci_high"):
        out[column] = found[column].to_numpy()
    out["adjusted verdict"] = [
        word(lo, hi, margin) if inside else verdict
        for lo, hi, margin, inside, verdict in zip(
            out["adjusted ci_low"], out["adjusted ci_high"], out["margin"], found["member"], out["verdict"]
        )
    ]
    return out


def family_size(table: pd.DataFrame) -> int:
    """The comparisons of an adjusted table that are in its family (a finite p). An empty table, whose
    columns pandas holds as objects, has none."""
    return int(np.isfinite(table["p"].astype(float)).sum()) if "p" in table else 0


def raw_and_adjusted(raw: str, adjusted: str) -> str:
    """A table cell with both words: the raw one alone when they agree, else 'raw → adjusted'."""
    return raw if raw == adjusted else f"{raw} → {adjusted}"
