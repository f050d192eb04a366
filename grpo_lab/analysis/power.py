"""Paired comparisons over seeds, their power and the minimum detectable effect (power analysis
over seeds as in Colas, Sigaud and Oudeyer, "How Many Random Seeds?", arXiv:1806.08295).

Two arms that share a seed share the prompts and the sampling streams, so their per-seed difference
d_i = y_i(treatment) - y_i(control) removes the between-seed variance. The effect is mean(d) with
the t-interval mean(d) +- t(1 - alpha/2, n - 1) sd(d) / sqrt(n); the minimum detectable effect at
level alpha and power 1 - beta is (t(1 - alpha/2, n - 1) + t(1 - beta, n - 1)) sd(d) / sqrt(n).
A verdict reads the whole interval against a margin fixed before the data (the effect of interest), as
in equivalence testing (Lakens, "Equivalence Tests", Social Psychological and Personality Science 8,
2017): 'better' / 'worse' when the whole interval lies beyond +margin / -margin; 'no difference' when it
lies inside +-margin; 'better, size unsure' / 'worse, size unsure' when it excludes 0 but crosses the
margin (a difference whose sign is shown but not whether it matters); 'undecided' when it holds 0 and
reaches beyond the margin. The point estimate never decides a word. No verdict rests on fewer
than MIN_SEEDS seeds or on a zero-width interval (`zero_width`). Adding seeds until an interval decides
needs a group-sequential boundary: `grpo_lab.analysis.sequential`."""

import math
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray
from scipy import stats

ALPHA, POWER = 0.05, 0.8
"""the level of every test and the power the minimum detectable effect is computed for"""
BETTER, WORSE = "better", "worse"
"""the whole interval lies above +margin (below -margin)"""
BETTER_UNSURE, WORSE_UNSURE = "better, size unsure", "worse, size unsure"
"""the interval lies above (below) 0 but crosses +margin (-margin): the sign is shown, not the size"""
NO_DIFFERENCE = "no difference"
"""the whole interval lies inside +-margin (whether or not it holds 0)"""
UNDECIDED, TOO_FEW_SEEDS = "undecided", "too few seeds"
"""an interval that holds 0 and reaches beyond the margin; fewer than MIN_SEEDS seeds"""
VERDICTS = (BETTER, WORSE, BETTER_UNSURE, WORSE_UNSURE, NO_DIFFERENCE, UNDECIDED, TOO_FEW_SEEDS)
"""every verdict of a paired comparison, a factorial effect and the sequential rule"""
DECIDED = (BETTER, WORSE, BETTER_UNSURE, WORSE_UNSURE, NO_DIFFERENCE)
"""the verdicts that decide something: all but undecided and too few seeds"""
SIGN = {BETTER: 1, BETTER_UNSURE: 1, WORSE: -1, WORSE_UNSURE: -1}
"""the direction each directional verdict shows (its interval excludes 0 on that side)"""
MIN_SEEDS = 3
"""the fewest paired seeds any verdict rests on: with 2 the t-interval has one degree of freedom, its
standard deviation is one difference of two numbers, and two seeds that happen to agree give an
interval of (nearly) zero width"""
MIN_SPREAD_SEEDS = 5
"""the fewest seeds a row's own sd of its per-seed differences may give its minimum detectable effect
(or the seeds it would need) from: with 3 seeds the sd has 2 degrees of freedom and its 95% interval
runs from 0.52 to 6.3 times the estimate (chi-square), so an MDE of 0.002 may be one of 0.02; with 5
seeds (4 df), from 0.60 to 2.9 times. Below it, `spread_mde` uses the sd pooled over the table's rows"""
ZERO_WIDTH_RTOL = 1e-12
"""an interval whose width is at most this fraction of its largest end (in absolute value) has zero
width: its only width is the rounding of differences that were in fact equal"""


@dataclass(frozen=True)
class Paired:
    """The paired comparison of a treatment with a control over the seeds both have."""

    n: int
    """seeds present in both arms"""
    effect: float
    """mean of the per-seed differences"""
    low: float
    high: float
    """the 95% t-interval of the effect"""
    sd: float
    """standard deviation of the per-seed differences"""
    mde: float
    """minimum detectable effect at level ALPHA and power POWER with these n seeds"""

    def verdict(self, margin: float) -> str:
        """The `VERDICTS` entry of this comparison against `margin` (`word`), 'too few seeds' when
        n < MIN_SEEDS.

        A zero-width interval (every seed gave the same difference, sd 0: e.g. two arms whose scores
        are identical because the mechanism under test never acted) is 'undecided': its width says
        nothing about the spread of the difference over seeds, only that these few seeds agreed, so it
        can neither exclude 0 nor show that the effect is within the margin."""
        if self.n < MIN_SEEDS or not math.isfinite(self.low):
            return TOO_FEW_SEEDS
        if zero_width(self.low, self.high):
            return UNDECIDED
        return word(self.low, self.high, margin)

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def word(low: float, high: float, margin: float) -> str:
    """The verdict of a (non-degenerate) interval [low, high] against `margin`, read from the whole
    interval: better / worse when it lies beyond +-margin, no difference when it lies inside +-margin,
    better / worse, size unsure when it excludes 0 but crosses the margin, undecided otherwise."""
    if low > margin:
        return BETTER
    if high < -margin:
        return WORSE
    if -margin <= low and high <= margin:
        return NO_DIFFERENCE
    if low > 0:
        return BETTER_UNSURE
    if high < 0:
        return WORSE_UNSURE
    return UNDECIDED


def zero_width(low: ArrayLike, high: ArrayLike) -> NDArray[np.bool_]:
    """Whether each interval [low, high] has zero width, up to the rounding of ZERO_WIDTH_RTOL
    (elementwise over arrays; NaN ends are not zero-width)."""
    lo, hi = np.asarray(low, dtype=float), np.asarray(high, dtype=float)
    return np.asarray(hi - lo <= ZERO_WIDTH_RTOL * np.maximum(np.abs(lo), np.abs(hi)))


def mde_factor(n: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """t(1 - alpha/2, n - 1) + t(power, n - 1): times sd(d) / sqrt(n), the minimum detectable effect."""
    if n < 2:
        return math.inf
    return float(stats.t.ppf(1 - alpha / 2, n - 1) + stats.t.ppf(power, n - 1))


def paired(treatment: pd.Series, control: pd.Series, confidence: float = 1 - ALPHA) -> Paired:
    """Compare two arms given as one value per seed (Series indexed by seed); only the seeds both
    have count, and non-finite values are dropped pairwise."""
    both = pd.concat({"t": treatment, "c": control}, axis=1, join="inner").astype(float)
    both = both[np.isfinite(both).all(axis=1)]
    d = (both["t"] - both["c"]).to_numpy()
    n = len(d)
    if n < 2:
        effect = float(d.mean()) if n else math.nan
        return Paired(n, effect, math.nan, math.nan, math.nan, math.inf)
    sd = float(d.std(ddof=1))
    se = sd / math.sqrt(n)
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * se
    return Paired(n, float(d.mean()), float(d.mean() - half), float(d.mean() + half), sd, mde_factor(n) * se)


def seeds_needed(sd: float, mde: float, alpha: float = ALPHA, power: float = POWER, most: int = 200) -> int:
    """The fewest seeds n >= MIN_SEEDS (the fewest a verdict rests on) whose minimum detectable effect
    with paired sd `sd` is at most `mde` (the t quantiles depend on n, so this iterates); `most` when
    even that many do not reach it."""
    if mde <= 0:
        raise ValueError(f"the target minimum detectable effect must be > 0, got {mde}")
    if sd == 0:
        return MIN_SEEDS
    for n in range(MIN_SEEDS, most + 1):
        if mde_factor(n, alpha, power) * sd / math.sqrt(n) <= mde:
            return n
    return most


@dataclass(frozen=True)
class Spread:
    """The sd of per-seed paired differences pooled over the rows of a table."""

    sd: float
    """sqrt(sum (n_i - 1) sd_i^2 / sum (n_i - 1)) over the rows with a spread (n_i >= 2, finite sd)"""
    df: int
    """its degrees of freedom, sum (n_i - 1)"""
    rows: int
    """the rows pooled"""

    def words(self) -> str:
        """How a table says it, e.g. 'the sd pooled over 54 rows (0.0123, 108 df)'."""
        return f"the sd pooled over {self.rows} rows ({self.sd:.3g}, {self.df} df)"


def pooled_spread(n: ArrayLike, sd: ArrayLike) -> Spread:
    """The pooled sd of rows of `n` paired seeds whose per-seed differences have sd `sd` (the pooled
    variance, each row weighted by its degrees of freedom n - 1): one spread for every row, which
    assumes the rows share it, in exchange for sum (n_i - 1) degrees of freedom instead of n_i - 1.
    NaN with 0 df where no row has a spread."""
    seeds, spread = np.asarray(n, dtype=float), np.asarray(sd, dtype=float)
    kept = (seeds >= 2) & np.isfinite(spread)
    df = int((seeds[kept] - 1).sum())
    if not df:
        return Spread(math.nan, 0, 0)
    return Spread(math.sqrt(float(((seeds[kept] - 1) * spread[kept] ** 2).sum()) / df), df, int(kept.sum()))


def spread_mde(table: pd.DataFrame, least: int = MIN_SPREAD_SEEDS) -> pd.DataFrame:
    """`table` (a row per paired comparison with its seeds `n` and the sd of its per-seed differences
    `sd`) with each row's minimum detectable effect `mde` (`power.mde_factor(n) * sd / sqrt(n)`: the
    row's own test at its seeds) from a spread that rests on at least `least` seeds: the row's own sd
    from `least` seeds up, else the sd pooled over every row of the table (`pooled_spread`), provided
    that has at least `least - 1` degrees of freedom (else NaN: no spread to read one from). Adds
    `mde sd` (the sd used) and `mde from` ('own', 'pooled' or 'none')."""
    pooled = pooled_spread(table["n"], table["sd"])
    seeds, own_sd = table["n"].to_numpy(dtype=int), table["sd"].to_numpy(dtype=float)
    own = (seeds >= least) & np.isfinite(own_sd)
    shared = ~own & (seeds >= 2) & (pooled.df >= least - 1)
    sd = np.where(own, own_sd, np.where(shared, pooled.sd, math.nan))
    source = np.where(own, "own", np.where(shared, "pooled", "none"))
    factor = np.array([mde_factor(int(k)) for k in seeds])  # inf below 2 seeds, where sd is NaN
    with np.errstate(invalid="ignore"):
        mde = factor * sd / np.sqrt(np.maximum(seeds, 1))
    return table.assign(mde=mde, **{"mde sd": sd, "mde from": source})
