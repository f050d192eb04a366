"""Paired comparisons over seeds, their power and the minimum detectable effect (power analysis
over seeds as in Colas, Sigaud and Oudeyer, "How Many Random Seeds?", arXiv:1806.08295).

Two arms that share a seed share the prompts and the sampling streams, so their per-seed difference
d_i = y_i(treatment) - y_i(control) removes the between-seed variance. The effect is mean(d) with
the t-interval mean(d) +- t(1 - alpha/2, n - 1) sd(d) / sqrt(n); the minimum detectable effect at
level alpha and power 1 - beta is (t(1 - alpha/2, n - 1) + t(1 - beta, n - 1)) sd(d) / sqrt(n).
A verdict compares the interval with a margin (the effect of interest): an interval above or below
0 is a difference; one that contains 0 and lies within +-margin is "no difference larger than the
margin"; anything else says only that the design could not tell."""

import math
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
from scipy import stats

ALPHA, POWER = 0.05, 0.8
"""the level of every test and the power the minimum detectable effect is computed for"""
VERDICTS = ("better", "worse", "no difference > margin", "undecided", "too few seeds")


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
        """better / worse (interval above / below 0), 'no difference > margin' (interval inside
        [-margin, margin]), 'undecided' (neither), 'too few seeds' (n < 2)."""
        if self.n < 2 or not math.isfinite(self.low):
            return "too few seeds"
        if self.low > 0:
            return "better"
        if self.high < 0:
            return "worse"
        if -margin <= self.low and self.high <= margin:
            return "no difference > margin"
        return "undecided"

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


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
    """The fewest seeds n >= 2 whose minimum detectable effect with paired sd `sd` is at most `mde`
    (the t quantiles depend on n, so this iterates); `most` when even that many do not reach it."""
    if mde <= 0:
        raise ValueError(f"the target minimum detectable effect must be > 0, got {mde}")
    if sd == 0:
        return 2
    for n in range(2, most + 1):
        if mde_factor(n, alpha, power) * sd / math.sqrt(n) <= mde:
            return n
    return most
