"""Claims as pre-declared tests, read from run logs: a claim names the configurations to compare, a
per-run metric, how the effect is measured and the range of effects it asserts; the catalogue of the
claims of the Evaluation guide and the Tricks review (docs/sources.md) and the runs they need are the
claims study's (`grpo_lab.studies.claims`).

Decision rule (one for every claim): the arms of a claim share their seeds (the same prompts and
sampling streams), so the effect is estimated on per-seed pairs (`power.paired`): a 'difference' is
the mean of the per-seed differences; a 'relative' effect is the per-seed log-ratio
log(treatment / control), whose mean and t-interval are mapped back by exp(x) - 1 (a geometric-mean
relative change, symmetric on the log scale where ratios are); a 'value' is the treatment's own
per-seed score. Each effect has its 95% t-interval and its minimum detectable effect (MDE, 80% power
at the 5% level, in the effect's own units). The interval is compared with the claimed region, an
open interval of effects: *supported* when it lies inside, *not supported* when they do not overlap,
*inconclusive* otherwise, or when the interval rests on fewer than 3 seeds or has zero width (as
every verdict of the lab); the MDE says whether more seeds could settle it. Nothing here is written
by hand.

The catalogue is one family (`FAMILY`): each claim also has its interval at the Bonferroni level (alpha
over the claims with an interval, `analysis.multiplicity.intervals`, on the scale where the interval is
symmetric: the log-ratio for a relative effect) and the verdict read from it. Bonferroni, not Holm: a
claim is read against its own region, not against no effect, and only simultaneous intervals bound
the chance that any verdict of the table is wrong whatever the regions.
"""

import math
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from grpo_lab.analysis import multiplicity
from grpo_lab.analysis.power import ALPHA, MIN_SEEDS, paired, zero_width
from grpo_lab.analysis.scores import HEADLINE, Score
from grpo_lab.analysis.stats import EFFECTS, volatility
from grpo_lab.registry import Registry

VERDICTS = ("supported", "not supported", "inconclusive")
DESIGNS = ("training", "cost")
"""how a claim's runs are made: 'training' runs of the headline studies' profile (shared with 01-03),
or 'cost' runs timed one after the other (shared with 08)"""


@dataclass(frozen=True)
class Region:
    """The effects a claim asserts: the open interval (low, high); +-inf for a one-sided claim."""

    low: float = -math.inf
    high: float = math.inf

    def __post_init__(self) -> None:
        if not self.low < self.high:
            raise ValueError(f"a claimed region needs low < high, got ({self.low}, {self.high})")

    def describe(self) -> str:
        if math.isinf(self.low):
            return f"< {self.high:g}"
        if math.isinf(self.high):
            return f"> {self.low:g}"
        return f"in ({self.low:g}, {self.high:g})"


def greater(margin: float = 0.0) -> Region:
    """The treatment raises the metric by more than `margin`."""
    return Region(margin, math.inf)


def less(margin: float = 0.0) -> Region:
    """The treatment lowers the metric by more than `margin`."""
    return Region(-math.inf, 0.0 - margin)  # 0.0 - 0.0 is 0.0, not -0.0


def between(low: float, high: float) -> Region:
    """The effect lies in (low, high), e.g. 'costs 15-20% more': between(0.15, 0.20) on a relative effect."""
    return Region(low, high)


def equivalent(margin: float) -> Region:
    """No effect beyond +-margin (a no-op)."""
    return Region(-margin, margin)


def noninferior(margin: float) -> Region:
    """The treatment loses less than `margin` ('without losing accuracy')."""
    return Region(-margin, math.inf)


def at_most(bound: float) -> Region:
    """The (treatment's) value stays below `bound`."""
    return Region(-math.inf, bound)


def verdict(low: float, high: float, region: Region, n: int) -> str:
    """'supported' when the interval [low, high] of `n` paired seeds lies inside the open region,
    'not supported' when it does not meet the region, else 'inconclusive'. As for every verdict of
    the lab (`power.Paired.verdict`), fewer than `power.MIN_SEEDS` seeds, an undefined interval or
    a zero-width one (every seed gave the same value: three runs that all stall or none that
    crashes) decide nothing: 'inconclusive'."""
    if low > high:
        raise ValueError(f"an interval needs low <= high, got [{low}, {high}]")
    if n < MIN_SEEDS or not (np.isfinite(low) and np.isfinite(high)) or zero_width(low, high):
        return "inconclusive"
    if region.low < low and high < region.high:
        return "supported"
    if high <= region.low or low >= region.high:
        return "not supported"
    return "inconclusive"


# --- per-run metrics -------------------------------------------------------------------------------

RunMetric = Callable[[pd.DataFrame], float]
RUN_METRICS: Registry[RunMetric] = Registry("claim metric")
"""metric name -> fn(one run's metrics, a row per step) -> the run's score"""


def _column(run: pd.DataFrame, column: str) -> pd.Series:
    """The logged values of `column` in step order; a clear error when the run never logged it."""
    if column not in run or run[column].notna().sum() == 0:
        raise ValueError(f"the run never logged {column!r}: this metric needs it")
    return run.sort_values("step")[column].dropna()


def _training(run: pd.DataFrame, column: str) -> pd.Series:
    """`column` on the training steps (rows with a reward), in step order."""
    return _column(run[run["reward"].notna()], column)


def _last_quarter(values: pd.Series) -> float:
    return float(values.tail(max(1, len(values) // 4)).mean())


HEADLINE_REWARD = Score("val/reward", HEADLINE.window)
"""the validation reward (greedy decoding; the judge's score on `judge`) over the headline score's
window: a claim about the judge's reward is scored as the accuracy claims are"""
WINDOWED = {"headline_score": HEADLINE, "headline_reward": HEADLINE_REWARD}
"""the metrics that average a validation column over a window of the run's evaluations"""


def _windowed(run: pd.DataFrame, score: Score) -> float:
    """`score` of one run; a clear error when the run never logged its column."""
    _column(run, score.metric)
    return score.of(run)


@RUN_METRICS.register("headline_score")
def headline_score(run: pd.DataFrame) -> float:
    """The headline score every verdict uses (`analysis.scores.HEADLINE`): the sampled validation
    accuracy, mean over the evaluations in the last half of the run's steps, which a single final
    evaluation would leave to one checkpoint's swing."""
    return _windowed(run, HEADLINE)


@RUN_METRICS.register("headline_reward")
def headline_reward(run: pd.DataFrame) -> float:
    """The validation reward over the headline score's window (`HEADLINE_REWARD`)."""
    return _windowed(run, HEADLINE_REWARD)


@RUN_METRICS.register("mean_reward")
def mean_reward(run: pd.DataFrame) -> float:
    """Training reward averaged over every step: the area under the learning curve per step, which
    is lower when learning is slower."""
    return float(_training(run, "reward").mean())


@RUN_METRICS.register("final_kl")
def final_kl(run: pd.DataFrame) -> float:
    """Exact per-token KL to the reference, mean over the last quarter of the steps."""
    return _last_quarter(_training(run, "kl/exact"))


@RUN_METRICS.register("kl_volatility")
def kl_volatility(run: pd.DataFrame) -> float:
    """KL volatility: the standard deviation of the step-to-step changes of the exact per-token KL
    to the reference (`stats.volatility`), the KL fluctuation of Evaluation guide §4.2 Training
    stability."""
    return volatility(_training(run, "kl/exact").to_numpy())


@RUN_METRICS.register("final_length")
def final_length(run: pd.DataFrame) -> float:
    """Completion length in tokens, mean over the last quarter of the steps."""
    return _last_quarter(_training(run, "completions/mean_length"))


@RUN_METRICS.register("clipped_frac")
def clipped_frac(run: pd.DataFrame) -> float:
    """Share of advantages changed by advantage clipping, mean over the steps."""
    return float(_training(run, "advantages/clipped_frac").mean())


@RUN_METRICS.register("early_entropy")
def early_entropy(run: pd.DataFrame) -> float:
    """Token entropy of the samples, mean over the first half of the steps (early exploration)."""
    values = _training(run, "entropy")
    return float(values.head(max(1, len(values) // 2)).mean())


@RUN_METRICS.register("group_diversity")
def group_diversity(run: pd.DataFrame) -> float:
    """Mean pairwise normalized edit distance between the completions of a group, over the steps
    where diversity was measured."""
    return float(_training(run, "diversity/edit_distance_group").mean())


@RUN_METRICS.register("step_time")
def step_time(run: pd.DataFrame) -> float:
    """Seconds per training step, the first (warm-up) step left out."""
    rows = run[run["reward"].notna() & (run["step"] > 0)]
    return float(_column(rows, "time/step_s").mean())


CRASH_STEPS = 5
"""a run 'crashed early' when it stopped, or logged a non-finite loss or reward, within this many steps"""
KL_BOUND = 1.0
"""nats per token: a run whose exact KL to the reference ends above this has drifted off (diverged)"""
STALL_GAIN = 0.02
"""a run whose headline score rose by no more than this above its first evaluation (the sampled
accuracy before any update) converged prematurely (learned nothing within the budget)"""


@RUN_METRICS.register("final_temperature")
def final_temperature(run: pd.DataFrame) -> float:
    """The learned sampling temperature, mean over the last quarter of the steps ("late in training")."""
    return _last_quarter(_training(run, "temperature/learned"))


@RUN_METRICS.register("crashed_early")
def crashed_early(run: pd.DataFrame) -> float:
    """1 when the run stopped, or logged a non-finite loss or reward, within `CRASH_STEPS` steps, else
    0 (a failed run, with no log, scores 1: see `ON_FAILURE`)."""
    rows = run[run["reward"].notna()] if "reward" in run else run.iloc[:0]
    early = rows[rows["step"] < CRASH_STEPS]
    finite = np.isfinite(early[["loss", "reward"]].to_numpy(dtype=float)).all() if "loss" in early else True
    return float(len(early) < CRASH_STEPS or not finite)


@RUN_METRICS.register("diverged_or_stalled")
def diverged_or_stalled(run: pd.DataFrame) -> float:
    """1 when the run diverged (a non-finite training reward, or a final exact KL above `KL_BOUND`) or
    converged prematurely (its headline score up by no more than `STALL_GAIN` from step 0's, or no
    evaluation in the score's window), else 0: the tricks review's "diverges or converges
    prematurely". The gain is the headline score's, not the last evaluation's: a single greedy
    checkpoint swings by more than `STALL_GAIN` from one evaluation to the next."""
    reward = _training(run, "reward")
    if not np.isfinite(reward.to_numpy()).all() or final_kl(run) > KL_BOUND:
        return 1.0
    gain = _windowed(run, HEADLINE) - HEADLINE.start(run)
    return float(not gain > STALL_GAIN)


ON_FAILURE = {"crashed_early": 1.0, "diverged_or_stalled": 1.0}
"""the score of a run that failed (no log to read) on the metrics where failing is the outcome
measured; on every other metric a failed run has no score and leaves its seed's pair"""


# --- claims ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """One testable claim and its pre-declared test."""

    name: str
    statement: str
    """what the document asserts, as tested here"""
    source: str
    """document and section"""
    metric: str
    """a `RUN_METRICS` name: the score of each run"""
    effect: str
    """'difference' or 'relative' (treatment against control) or 'value' (treatment alone)"""
    region: Region
    """the effects the claim asserts"""
    treatment: Mapping[str, Any]
    """config fields changed over the design's base config"""
    control: Mapping[str, Any] | None = field(default_factory=dict)
    """config fields of the comparison arm ({}: the base itself; None for effect 'value')"""
    design: str = "training"
    """'training' (the headline studies' runs on the study base, `studies.baseline`'s settings) or
    'cost' (`studies.cost`)"""
    grid: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    """configurations the claim is about (field -> values): each arm runs at every combination, and
    a seed's score is the mean over them (e.g. the share of configurations that fail)"""
    reading: str = ""
    """how the region reads the document's number, where a choice was needed"""

    def __post_init__(self) -> None:
        if self.metric not in RUN_METRICS:
            raise ValueError(
                f"claim {self.name!r}: unknown metric {self.metric!r}; valid: {RUN_METRICS.names()}"
            )
        if self.effect not in EFFECTS:
            raise ValueError(
                f"claim {self.name!r}: unknown effect {self.effect!r}; valid: {', '.join(EFFECTS)}"
            )
        if self.design not in DESIGNS:
            raise ValueError(
                f"claim {self.name!r}: unknown design {self.design!r}; valid: {', '.join(DESIGNS)}"
            )
        if (self.control is None) != (self.effect == "value"):
            raise ValueError(f"claim {self.name!r}: effect 'value' takes no control, the others need one")

    def arms(self) -> dict[str, Mapping[str, Any]]:
        """'treatment' and, unless the effect is a value, 'control': arm -> config overrides."""
        out = {"treatment": self.treatment}
        if self.control is not None:
            out["control"] = self.control
        return out


def arm_label(overrides: Mapping[str, Any]) -> str:
    """A readable, canonical name of a configuration given by its overrides ('base' for none)."""
    return ", ".join(f"{k}={v}" for k, v in sorted(overrides.items())) or "base"


def effect(claim: Claim, scores: pd.DataFrame) -> dict[str, float]:
    """The paired effect of one claim from its scores (rows: arm, seed, score): n, effect, low,
    high, sd and mde (see the module docstring for each kind of effect)."""
    arm = {a: g.groupby("seed")["score"].mean() for a, g in scores.groupby("arm")}
    treatment = arm.get("treatment", pd.Series(dtype=float))
    if claim.effect == "value":
        return paired(treatment, pd.Series(0.0, index=treatment.index)).as_dict()
    control = arm.get("control", pd.Series(dtype=float))
    if claim.effect == "difference":
        return paired(treatment, control).as_dict()
    logs = [np.log(x.where(x > 0)) for x in (treatment, control)]
    on_logs = paired(*logs).as_dict()
    mapped = {k: math.expm1(on_logs[k]) for k in ("effect", "low", "high", "mde")}
    return {**on_logs, **mapped}


FAMILY = multiplicity.Family("every claim of the catalogue", "bonferroni")
"""the claims table's family and its error-rate control (module doc)"""


def evaluate(claims: Sequence[Claim], scores: pd.DataFrame) -> pd.DataFrame:
    """The table of claims: per claim, its test (metric, effect, claimed region and how it reads the
    document), the arms' mean scores, the paired effect with its 95% interval, the seeds paired (n),
    the minimum detectable effect and the verdict of `verdict`; then the family's (`FAMILY`, `adjusted`)
    `adjusted low`, `adjusted high` and `adjusted verdict`."""
    rows = []
    for claim in claims:
        mine = scores[scores["claim"] == claim.name]
        means = mine.groupby("arm")["score"].mean()
        paired_effect = effect(claim, mine)
        row = {
            "claim": claim.name,
            "statement": claim.statement,
            "source": claim.source,
            "metric": claim.metric,
            "effect": claim.effect,
            "claimed": claim.region.describe(),
            "reading": claim.reading,
            "treatment": float(means.get("treatment", np.nan)),
            "control": float(means.get("control", np.nan)),
            "estimate": paired_effect["effect"],
            "low": paired_effect["low"],
            "high": paired_effect["high"],
            "n": paired_effect["n"],
            "mde": paired_effect["mde"],
            "verdict": verdict(
                paired_effect["low"], paired_effect["high"], claim.region, int(paired_effect["n"])
            ),
        }
        rows.append(row)
    return adjusted(pd.DataFrame(rows), claims)


def adjusted(table: pd.DataFrame, claims: Sequence[Claim]) -> pd.DataFrame:
    """`table` (`evaluate`'s rows) with each claim's interval at its `FAMILY` level (`adjusted low`,
    `adjusted high`, `adjusted confidence`), whether it is in the family (`in family`) and the verdict
    read from it (`adjusted verdict`). A relative
    effect's interval is widened on the log-ratio scale, where it is symmetric; a claim without a finite
    interval or with too few seeds stays out of the family and keeps its verdict."""
    relative = (table["effect"] == "relative").to_numpy()
    on_scale = {
        c: np.where(relative, np.log1p(table[c].to_numpy(dtype=float)), table[c])
        for c in ("estimate", "low", "high")
    }
    n = table["n"].to_numpy(dtype=float)
    found = multiplicity.intervals(
        on_scale["estimate"],
        on_scale["low"],
        on_scale["high"],
        np.full(len(table), 1 - ALPHA),
        n - 1,
        FAMILY,
        n >= MIN_SEEDS,
    )
    out = table.copy()
    low, high = found["adjusted ci_low"].to_numpy(), found["adjusted ci_high"].to_numpy()
    out["adjusted low"] = np.where(relative, np.expm1(low), low)
    out["adjusted high"] = np.where(relative, np.expm1(high), high)
    out["adjusted confidence"] = found["adjusted confidence"].to_numpy()
    out["in family"] = found["member"].to_numpy()
    regions = {c.name: c.region for c in claims}
    out["adjusted verdict"] = [
        verdict(lo, hi, regions[name], int(k)) if inside else raw
        for lo, hi, name, k, inside, raw in zip(
            out["adjusted low"], out["adjusted high"], out["claim"], n, found["member"], out["verdict"]
        )
    ]
    return out


def caption(table: pd.DataFrame) -> str:
    """The claims table's family line (`FAMILY`): the claims in it and its control."""
    return FAMILY.caption(int(table["in family"].sum()))


COLORS = {"supported": "tab:green", "not supported": "tab:red", "inconclusive": "0.45"}
UNITS = {
    "difference": "treatment - control",
    "relative": "treatment / control (log scale)",
    "value": "treatment value",
}


def figure(table: pd.DataFrame, claims: Sequence[Claim], ncols: int = 4) -> plt.Figure:
    """One small panel per claim: the effect (point) and its interval (bar), the claimed region
    shaded green, no effect dashed; the verdict in the title's colour. Each panel has its own scale;
    a relative effect is drawn as the ratio treatment / control on a log axis. The caption says over
    how many seeds, and what each windowed metric of the table (`WINDOWED`) averages over which window."""
    by_name = {c.name: c for c in claims}
    nrows = -(-len(table) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 2.2 * nrows), squeeze=False)
    for ax, row in zip(axes.flat, table.itertuples()):
        region = by_name[row.claim].region
        ratio = row.effect == "relative"
        shift = 1.0 if ratio else 0.0  # relative effect e is drawn as the ratio 1 + e
        low, high, estimate = row.low + shift, row.high + shift, row.estimate + shift
        bounds = [region.low + shift, region.high + shift]
        ends = [v for v in (low, high, estimate, *bounds, shift) if np.isfinite(v) and (v > 0 or not ratio)]
        if ratio:
            ax.set_xscale("log")
            ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.xaxis.set_minor_formatter(NullFormatter())
            left, right = min(ends) / 1.3, max(ends) * 1.3
        else:
            span = (max(ends) - min(ends)) or 1.0
            left, right = min(ends) - 0.25 * span, max(ends) + 0.25 * span
        ax.axvspan(max(bounds[0], left), min(bounds[1], right), color="tab:green", alpha=0.15, lw=0)
        ax.axvline(shift, color="0.3", ls="--", lw=0.8)
        color = COLORS[row.verdict]
        if np.isfinite(row.low):
            ax.plot([low, high], [0, 0], color=color, lw=3)
        ax.plot([estimate], [0], "o", color=color, ms=7)
        ax.set_xlim(left, right)
        ax.set_ylim(-1, 1)
        ax.set_yticks([])
        ax.set_xlabel(f"{row.metric}: {UNITS[row.effect]}", fontsize=7)
        ax.tick_params(axis="x", labelsize=7)
        name = "\n".join(textwrap.wrap(row.claim.replace("_", " "), 34))
        heading = f"{name}\n{row.verdict} (claimed {row.claimed}; MDE {row.mde:.3g})"
        ax.set_title(heading, fontsize=8, color=color)
        ax.grid(alpha=0.3, axis="x")
    for ax in list(axes.flat)[len(table) :]:
        ax.axis("off")
    n = int(table["n"].max()) if len(table) else 0
    lines = [
        "claims of the Evaluation guide and the Tricks review: paired effect and 95% t-interval over "
        f"up to {n} seeds; green band: the claimed effects; MDE: minimum detectable effect (80% power, "
        "5% level)",
        *(f"{name}: {score.caption()}" for name, score in WINDOWED.items() if name in set(table["metric"])),
    ]
    fig.suptitle("\n".join(lines), fontsize=10)
    fig.tight_layout()
    return fig
