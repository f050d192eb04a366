"""Sequential seeds: add seeds in blocks until a paired comparison is decided, under a group-sequential
boundary that keeps the type I error at alpha.

"Add seeds until the 95% interval excludes 0" tests the same hypothesis again at every look: with five
looks its type I error is about 0.14, not 0.05 (Armitage, McPherson & Rowe 1969; 0.155 with t-intervals at
3, 6, ..., 15 seeds, by `simulate`). A group-sequential boundary asks for more at the early looks so that
the chance of ever crossing it under the null is alpha: O'Brien & Fleming (1979) boundaries are very
strict early and close to the fixed design's at the last look (the maximum number of seeds is about 1.02x
the fixed design's; the expected number about 0.75x when the effect is real); Jennison & Turnbull, Group
Sequential Methods (2000), is the reference.

The boundary here is Lan & DeMets (1983) alpha spending: a look at information fraction
t = seeds / max_seeds may have spent at most alpha(t) of the type I error in all, with the
O'Brien-Fleming-type function alpha(t) = 4 - 4 Phi(z(1 - alpha/4) / sqrt(t)) (alpha/2 on each side, each
spent by Lan & DeMets' 2 - 2 Phi(z(1 - a/2) / sqrt(t)) with a = alpha/2; with five equal looks it gives
the z boundaries 4.877, 3.357, 2.680, 2.290, 2.031), or the Pocock-type alpha log(1 + (e - 1) t).
Spending, rather than the classical O'Brien-Fleming constant for K equal looks, gives a valid boundary for
whatever seed counts the looks actually have: a failed run leaves a look with fewer seeds than planned,
and the last look (the cap) spends whatever is left. The z boundaries follow from the recursive numerical
integration of Armitage, McPherson & Rowe (1969) for the running sum of the differences, a Brownian
motion in information time.

The per-seed differences d_i have an unknown variance, so each look uses a t statistic with n - 1 degrees
of freedom. Each look's z boundary is converted to its nominal two-sided level p_k = 2 (1 - Phi(z_k)), and
the look decides with the t-interval mean(d) +- t(1 - gamma p_k / 2, n - 1) sd(d) / sqrt(n) (the
significance-level approach of Jennison & Turnbull 2000, ch. 11). With gamma = 1 the type I error is 0.052
to 0.058 in the plans tried (3 to 24 seeds), as t statistics of successive looks are less correlated than
z statistics; gamma (`calibration`) is set once per plan by a simulation under the null so that the type I
error stays at or below alpha. `simulate` gives the operating characteristics of any plan; the tests hold
the rule to a type I error of at most alpha with normal and heavy-tailed differences.

A look stops when that adjusted interval excludes 0 (it rejects the null) or lies inside +-margin
(futility), and words what it stopped on from the whole adjusted interval (`power.word`): 'better' /
'worse' when it lies beyond +-margin, 'better, size unsure' / 'worse, size unsure' when it excludes 0
but crosses the margin, 'no difference' when it lies inside +-margin. The type I error counts the
directional words (an interval that excludes 0 on one side); an interval inside +-margin that excludes 0
words no direction. Futility can only lower the type I error of the
efficacy decision: the efficacy boundary is computed as if the comparison never stopped for futility
(non-binding), and stopping for futility only removes later chances to cross it. Judging futility on the
adjusted, wider interval also bounds the chance that a look calls a true effect of +-margin 'no
difference' by half that look's level. No look decides on fewer than `min_seeds` (at least
`power.MIN_SEEDS`) seeds or on a zero-width interval (every seed gave the same difference: e.g. two arms
with identical scores because the mechanism never acted); such a look continues, or is 'undecided' at the
cap, and says why."""

import functools
import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import NDArray
from scipy import optimize, stats

from grpo_lab.analysis.power import (
    ALPHA,
    BETTER,
    BETTER_UNSURE,
    MIN_SEEDS,
    NO_DIFFERENCE,
    UNDECIDED,
    WORSE,
    WORSE_UNSURE,
    mde_factor,
    zero_width,
)

CONTINUE = "continue"
DECISIONS = (CONTINUE, BETTER, WORSE, NO_DIFFERENCE, UNDECIDED, BETTER_UNSURE, WORSE_UNSURE)
"""a look's decision, in the order of the integer codes of the vectorised rule; the decided ones are
the verdicts of `power.VERDICTS`, so the verdict table reads them as it reads a fixed design's"""


def _obrien_fleming(alpha: float, t: NDArray[np.float64]) -> NDArray[np.float64]:
    return np.asarray(4 * stats.norm.sf(stats.norm.isf(alpha / 4) / np.sqrt(t)))


def _pocock(alpha: float, t: NDArray[np.float64]) -> NDArray[np.float64]:
    return np.asarray(alpha * np.log1p((math.e - 1) * t))


SPENDING: dict[str, Callable[[float, NDArray[np.float64]], NDArray[np.float64]]] = {
    "obrien_fleming": _obrien_fleming,
    "pocock": _pocock,
}
"""Lan & DeMets (1983) spending functions: the two-sided type I error spent by information fraction t
(0 < t <= 1), alpha at t = 1. O'Brien-Fleming-type spends almost nothing at the first looks and keeps
the last look close to the fixed design's; Pocock-type spends evenly and stops earlier on large
effects at the price of a stricter last look."""

NOISE: dict[str, Callable[[np.random.Generator, tuple[int, int]], NDArray[np.float64]]] = {
    "normal": lambda rng, shape: rng.standard_normal(shape),
    "laplace": lambda rng, shape: rng.laplace(scale=1 / math.sqrt(2), size=shape),
    "t3": lambda rng, shape: rng.standard_t(3, size=shape) / math.sqrt(3),
}
"""standardised (mean 0, variance 1) distributions of the per-seed differences for `simulate`: normal,
and two with heavier tails (Laplace; Student's t with 3 degrees of freedom, infinite fourth moment)"""

_GRID = 401
"""points per look of the numerical integration (z boundaries to about 1e-4)"""
CALIBRATION_REPS, CALIBRATION_SEED = 200_000, 1983
"""null comparisons simulated to calibrate a plan's levels (`calibration`), and their numpy seed"""
CALIBRATION_TARGET = 0.95
"""the calibration aims the type I error at this fraction of alpha: the rest covers its Monte Carlo
error (standard error about 0.0005 at alpha 0.05) so that the type I error stays at or below alpha"""


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


@dataclass(frozen=True)
class Plan:
    """A group-sequential plan for one paired comparison: the first look at `min_seeds` seeds, then a
    look after every `block` new seeds, and a last look at `max_seeds` (the cap)."""

    margin: float
    """the effect of interest: an adjusted interval inside +-margin is 'no difference', one beyond it
    'better' or 'worse', one that excludes 0 and crosses it 'better / worse, size unsure'"""
    min_seeds: int = MIN_SEEDS
    """seeds at the first look (at least power.MIN_SEEDS)"""
    block: int = 3
    """seeds added between looks"""
    max_seeds: int = 15
    """the cap: the last look, which spends whatever type I error is left"""
    alpha: float = ALPHA
    """two-sided type I error of the whole plan"""
    boundary: str = "obrien_fleming"
    """the spending function, a key of SPENDING"""

    def __post_init__(self) -> None:
        if not (isinstance(self.margin, numbers.Real) and math.isfinite(self.margin) and self.margin > 0):
            raise ValueError(f"margin must be a finite number > 0, got {self.margin!r}")
        for name in ("min_seeds", "block", "max_seeds"):
            if not _is_int(getattr(self, name)):
                raise ValueError(f"{name} must be an integer, got {getattr(self, name)!r}")
        if self.min_seeds < MIN_SEEDS:
            raise ValueError(f"min_seeds must be >= {MIN_SEEDS}, got {self.min_seeds}")
        if self.block < 1:
            raise ValueError(f"block must be >= 1, got {self.block}")
        if self.max_seeds < self.min_seeds:
            raise ValueError(f"max_seeds ({self.max_seeds}) must be >= min_seeds ({self.min_seeds})")
        if not (isinstance(self.alpha, numbers.Real) and 0 < self.alpha < 1):
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha!r}")
        if self.boundary not in SPENDING:
            raise ValueError(f"unknown boundary {self.boundary!r}; known: {sorted(SPENDING)}")

    def looks(self) -> tuple[int, ...]:
        """The seed counts of the planned looks: min_seeds, min_seeds + block, ..., max_seeds."""
        return (*range(self.min_seeds, self.max_seeds, self.block), self.max_seeds)


def z_boundaries(plan: Plan, seeds: Sequence[int], final: bool = False) -> NDArray[np.float64]:
    """The two-sided z boundary of each look made at these seed counts (increasing, each >= 1), by
    Lan-DeMets spending with information fraction min(seeds / max_seeds, 1), the last look at fraction 1
    when `final`. A look that adds no information gets an infinite boundary (it cannot decide)."""
    n = np.asarray(seeds, dtype=float)
    if n.ndim != 1 or not len(n) or (n < 1).any() or (np.diff(n) < 0).any():
        raise ValueError(f"looks need increasing seed counts >= 1, got {list(seeds)}")
    t = np.minimum(n / plan.max_seeds, 1.0)
    if final:
        t[-1] = 1.0
    spend = np.diff(SPENDING[plan.boundary](plan.alpha, t), prepend=0.0)
    bounds = np.full(len(t), np.inf)
    # the running sum S (S / sqrt(t) is the z statistic) on a grid: the probability of each grid point
    # on paths that have not crossed yet (S = 0 before the first look)
    grid, mass, before = np.zeros(1), np.ones(1), 0.0
    for k, (tk, spent) in enumerate(zip(t, spend)):
        if tk <= before or spent <= 0:
            continue
        step = math.sqrt(tk - before)
        bounds[k] = optimize.brentq(_crossing, 1e-9, 40.0, args=(tk, step, grid, mass, spent), xtol=1e-10)
        new = np.linspace(-1, 1, _GRID) * bounds[k] * math.sqrt(tk)
        weights = np.full(_GRID, new[1] - new[0])
        weights[[0, -1]] /= 2
        density = stats.norm.pdf((new[:, None] - grid[None, :]) / step) @ mass / step
        grid, mass, before = new, weights * density, tk
    return bounds


def _crossing(
    b: float, t: float, step: float, grid: NDArray[np.float64], mass: NDArray[np.float64], spent: float
) -> float:
    """The probability of crossing +-b at information t from the not-yet-crossed paths (`mass` on
    `grid`) after a Brownian step of sd `step`, less the type I error `spent` there: 0 at the boundary."""
    edge = b * math.sqrt(t)
    out = stats.norm.cdf((-edge - grid) / step) + stats.norm.sf((edge - grid) / step)
    return float(np.sum(mass * out)) - spent


def nominal_levels(plan: Plan, seeds: Sequence[int], final: bool = False) -> NDArray[np.float64]:
    """Each look's normal-theory nominal two-sided level 2 (1 - Phi(z_k)) (see `z_boundaries`)."""
    return np.asarray(2 * stats.norm.sf(z_boundaries(plan, seeds, final)))


@functools.lru_cache(maxsize=64)
def calibration(plan: Plan) -> float:
    """The factor gamma by which every look's normal-theory nominal level is multiplied before it is
    turned into a t quantile with n - 1 degrees of freedom: the t statistics of successive looks are
    less correlated than the z statistics the boundary is computed for, so the plain conversion rejects
    too often under the null (about 0.052 with looks at 3, 6, ..., 15 seeds and 0.056 at 3, 4, ..., 10;
    Jennison & Turnbull 2000, ch. 11, note that it is only approximate). gamma is chosen once per plan
    by simulating CALIBRATION_REPS null comparisons with normal differences (the t statistics do not
    depend on the scale), as the largest factor whose simulated type I error at the planned looks is at
    most CALIBRATION_TARGET * alpha. Futility plays no part: it is non-binding and can only lower the
    type I error."""
    n = np.asarray(plan.looks())
    nominal = nominal_levels(plan, plan.looks(), final=True)
    rng = np.random.default_rng(CALIBRATION_SEED)
    t = np.empty((CALIBRATION_REPS, len(n)), dtype=np.float32)
    for start in range(0, CALIBRATION_REPS, 50_000):
        d = rng.standard_normal((min(50_000, CALIBRATION_REPS - start), plan.max_seeds))
        total, squares = d.cumsum(axis=1)[:, n - 1], (d * d).cumsum(axis=1)[:, n - 1]
        t[start : start + len(d)] = np.abs(total / n) / np.sqrt((squares - total**2 / n) / (n - 1) / n)
    allowed = CALIBRATION_TARGET * plan.alpha * CALIBRATION_REPS

    def rejected(gamma: float) -> int:
        return int((t > stats.t.isf(np.minimum(gamma * nominal, 1) / 2, n - 1)).any(axis=1).sum())

    low, high = 1e-3, 1 / float(nominal.max())
    for _ in range(40):
        middle = math.sqrt(low * high)
        low, high = (middle, high) if rejected(middle) <= allowed else (low, middle)
    return low


def levels(plan: Plan, seeds: Sequence[int], final: bool = False) -> NDArray[np.float64]:
    """Each look's two-sided level for the t-interval that decides there: gamma (`calibration`) times
    the normal-theory nominal level of the spending boundary at the seed counts the looks have. Looks at
    seed counts other than the planned ones (failed runs) keep the plan's gamma."""
    return np.array(_levels(plan, tuple(int(n) for n in seeds), final))


@functools.lru_cache(maxsize=1024)
def _levels(plan: Plan, seeds: tuple[int, ...], final: bool) -> tuple[float, ...]:
    return tuple(np.minimum(calibration(plan) * nominal_levels(plan, seeds, final), 1.0).tolist())


def _rule(
    mean: NDArray[np.float64],
    sd: NDArray[np.float64],
    n: int,
    level: float,
    margin: float,
    final: bool,
) -> tuple[NDArray[np.int_], NDArray[np.float64]]:
    """The decision codes (indices into DECISIONS) of looks with n seeds at two-sided error level
    `level`, and the adjusted half-widths: the one rule that `decide` and `simulate` share."""
    se = sd / math.sqrt(n)
    plain = stats.t.isf(ALPHA / 2, n - 1) * se
    flat = zero_width(mean - plain, mean + plain)
    with np.errstate(invalid="ignore"):
        half = np.where(flat, 0.0, stats.t.isf(level / 2, n - 1) * se)
    low, high = mean - half, mean + half
    decided = ~flat & np.isfinite(half)
    code = np.full(mean.shape, DECISIONS.index(UNDECIDED if final else CONTINUE))
    code[decided & (low > 0)] = DECISIONS.index(BETTER_UNSURE)
    code[decided & (high < 0)] = DECISIONS.index(WORSE_UNSURE)
    code[decided & (low > margin)] = DECISIONS.index(BETTER)
    code[decided & (high < -margin)] = DECISIONS.index(WORSE)
    code[decided & (low >= -margin) & (high <= margin)] = DECISIONS.index(NO_DIFFERENCE)
    return code, half


@dataclass(frozen=True)
class Look:
    """One look at the per-seed differences available so far."""

    decision: str
    """one of DECISIONS"""
    seeds: int
    """seeds the look used (finite differences)"""
    look: int
    """1-based number of this look among the plan's looks (0: fewer than min_seeds, not a look)"""
    effect: float
    """mean of the per-seed differences"""
    low: float
    high: float
    """the adjusted interval: the t-interval at the look's level"""
    level: float
    """the look's two-sided error level p (`levels`): the adjusted interval has confidence 1 - p (NaN
    when it is not a look)"""
    plain_low: float
    plain_high: float
    """the plain 95% t-interval (`power.paired`'s), for reading alongside a fixed design"""
    sd: float
    """standard deviation of the per-seed differences"""
    mde: float
    """minimum detectable effect of a fixed design with these seeds (`power.mde_factor`)"""
    reason: str
    """why the look decided what it did"""


def decide(
    plan: Plan,
    differences: pd.Series | Sequence[float] | NDArray[np.float64],
    earlier: Sequence[int] | None = None,
    final: bool | None = None,
) -> Look:
    """The decision at this look, given the per-seed differences so far (treatment - control, in seed
    order; non-finite values, e.g. failed runs, are dropped). `earlier`: the seed counts of the looks
    already made (default: the plan's planned looks below this one); `final`: whether no more seeds will
    come (default: the cap is reached)."""
    d = np.asarray(differences, dtype=float)
    d = d[np.isfinite(d)]
    n = len(d)
    final = n >= plan.max_seeds if final is None else final
    done = UNDECIDED if final else CONTINUE
    effect = float(d.mean()) if n else math.nan
    sd = float(d.std(ddof=1)) if n > 1 else math.nan
    mde = mde_factor(n) * sd / math.sqrt(n) if n > 1 else math.inf
    if n < plan.min_seeds:
        why = f"{n} seeds: no look decides on fewer than min_seeds = {plan.min_seeds}"
        return Look(done, n, 0, effect, math.nan, math.nan, math.nan, math.nan, math.nan, sd, mde, why)
    before = [s for s in plan.looks() if s < n] if earlier is None else list(earlier)
    level = float(levels(plan, [*before, n], final)[-1])
    se = sd / math.sqrt(n)
    plain = float(stats.t.isf(ALPHA / 2, n - 1)) * se
    code, half = _rule(np.array([effect]), np.array([sd]), n, level, plan.margin, final)
    decision, h = DECISIONS[int(code[0])], float(half[0])
    if bool(zero_width(effect - plain, effect + plain)):
        why = f"zero-width interval: all {n} seeds gave the same difference {effect:+.4g}; it cannot decide"
    elif decision in (BETTER, WORSE):
        why = f"the interval at level {1 - level:.6g} lies beyond +-{plan.margin:g}"
    elif decision in (BETTER_UNSURE, WORSE_UNSURE):
        why = f"the interval at level {1 - level:.6g} excludes 0 but crosses +-{plan.margin:g}"
    elif decision == NO_DIFFERENCE:
        why = f"the interval at level {1 - level:.6g} lies inside +-{plan.margin:g}"
    elif final:
        why = f"cap of {plan.max_seeds} seeds reached: the interval at level {1 - level:.6g} decides nothing"
    else:
        why = f"the interval at level {1 - level:.6g} decides nothing yet"
    look = len(before) + 1
    return Look(
        decision, n, look, effect, effect - h, effect + h, level, effect - plain, effect + plain, sd, mde, why
    )


@dataclass(frozen=True)
class Sequential:
    """The outcome of `run_sequential`: the last look and every look before it."""

    history: tuple[Look, ...]
    seeds: tuple[int, ...]
    """every seed asked for, in order"""
    differences: pd.Series
    """the per-seed differences the last look used, indexed by seed"""

    @property
    def last(self) -> Look:
        return self.history[-1]

    @property
    def decision(self) -> str:
        return self.last.decision


def run_sequential(
    plan: Plan, differences_for: Callable[[list[int]], pd.Series], first_seed: int = 0
) -> Sequential:
    """Ask `differences_for` for seeds in blocks (first_seed, first_seed + 1, ...: min_seeds, then
    `block` at a time up to max_seeds in all) until a look decides or the cap is reached.
    `differences_for(seeds)` trains or loads those seeds of both arms and returns their per-seed
    differences (treatment - control) as a Series indexed by seed; a seed it leaves out or gives a
    non-finite value (a failed run) does not count, and no replacement is asked for: the cap bounds
    the seeds asked for, and the spending boundary adapts to the seeds the looks actually have."""
    seeds: list[int] = []
    parts: list[pd.Series] = []
    history: list[Look] = []
    for size in plan.looks():
        new = list(range(first_seed + len(seeds), first_seed + size))
        answer = pd.Series(differences_for(new), dtype=float)
        stray = set(answer.index) - set(new)
        if stray:
            raise ValueError(f"differences_for({new}) returned seeds it was not asked for: {sorted(stray)}")
        seeds += new
        parts.append(answer[np.isfinite(answer)])
        got = pd.concat(parts)
        final = size == plan.max_seeds
        earlier = [h.seeds for h in history if h.look]
        if not final and earlier and len(got) == earlier[-1]:
            continue  # every new run failed: nothing new to look at
        history.append(decide(plan, got, earlier=earlier, final=final))
        if history[-1].decision != CONTINUE:
            break
    return Sequential(tuple(history), tuple(seeds), got)


@dataclass(frozen=True)
class Operating:
    """Operating characteristics of a plan for one true effect and sd, by simulation."""

    effect: float
    sd: float
    noise: str
    reps: int
    better: float
    worse: float
    better_unsure: float
    worse_unsure: float
    no_difference: float
    undecided: float
    """rates of each final decision over the simulated comparisons"""
    expected_seeds: float
    """mean seeds used when the comparison stopped"""
    stopped_early: float
    """rate of stopping before the cap"""

    @property
    def rejection(self) -> float:
        """rate of the directional decisions (better, worse, and either size unsure: an interval that
        excludes 0 and does not lie inside +-margin): the type I error when the effect is 0"""
        return self.better + self.worse + self.better_unsure + self.worse_unsure

    @property
    def mc_se(self) -> float:
        """Monte Carlo standard error of `rejection`"""
        return math.sqrt(self.rejection * (1 - self.rejection) / self.reps)


def simulate(
    plan: Plan,
    effect: float,
    sd: float,
    reps: int = 20_000,
    seed: int = 0,
    noise: str = "normal",
    per_look: Sequence[float] | None = None,
) -> Operating:
    """Simulate `reps` comparisons whose per-seed differences are effect + sd * noise (a key of NOISE)
    under the plan, vectorised over comparisons, with the same rule as `decide` at the planned looks.
    `per_look` replaces the plan's per-look levels (`levels`): e.g. 0.05 at every look is the naive "add seeds
    until the 95% interval excludes 0" rule, to see its inflated type I error."""
    if noise not in NOISE:
        raise ValueError(f"unknown noise {noise!r}; known: {sorted(NOISE)}")
    looks = plan.looks()
    level = levels(plan, looks, final=True) if per_look is None else np.asarray(per_look, dtype=float)
    if level.shape != (len(looks),):
        raise ValueError(f"per_look needs one level per look ({len(looks)}), got {len(level)}")
    d = effect + sd * NOISE[noise](np.random.default_rng(seed), (reps, plan.max_seeds))
    code = np.zeros(reps, dtype=int)
    used = np.zeros(reps, dtype=int)
    for k, n in enumerate(looks):
        open_ = code == DECISIONS.index(CONTINUE)
        if not open_.any():
            break
        part = d[open_, :n]
        now, _ = _rule(
            part.mean(axis=1), part.std(axis=1, ddof=1), n, float(level[k]), plan.margin, k == len(looks) - 1
        )
        code[open_], used[open_] = now, n
    rate = np.bincount(code, minlength=len(DECISIONS)) / reps
    return Operating(
        effect,
        sd,
        noise,
        reps,
        better=float(rate[DECISIONS.index(BETTER)]),
        worse=float(rate[DECISIONS.index(WORSE)]),
        better_unsure=float(rate[DECISIONS.index(BETTER_UNSURE)]),
        worse_unsure=float(rate[DECISIONS.index(WORSE_UNSURE)]),
        no_difference=float(rate[DECISIONS.index(NO_DIFFERENCE)]),
        undecided=float(rate[DECISIONS.index(UNDECIDED)]),
        expected_seeds=float(used.mean()),
        stopped_early=float((used < plan.max_seeds).mean()),
    )
