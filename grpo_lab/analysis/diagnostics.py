"""Automatic diagnostics of a run's logs (the trainer's per-step diversity metrics are `tasks.diversity`).

The rules implement the reading rules of the lab's two design documents, summarized in docs/sources.md:
the Evaluation guide (§4 evaluation dimensions, §6 method, §7 reading the results, §9 risks) and the
Tricks review (§1.2 what the tricks repair, §2 the evaluations, §4 troubleshooting). Each rule's
docstring names the sections it implements, and its `Finding.suggestion` quotes, in translation, the
check the document recommends. A rule whose columns are missing, or whose run is too short to judge,
says nothing.
"""

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
from scipy import stats

from grpo_lab.runlog import (
    METRICS,
    METRICS_TABLE,
    has_config,
    has_metrics,
    read_config,
    read_metrics,
    read_samples,
)
from grpo_lab.tasks.diversity import template_share

# --- findings and thresholds ---------------------------------------------------------------------

Level = Literal["info", "warning", "error"]
LEVELS: tuple[Level, ...] = ("error", "warning", "info")


@dataclass(frozen=True)
class Finding:
    rule: str
    level: Level
    """error: the run is broken (non-finite values, collapse into one template); warning: a documented
    risk sign; info: context worth knowing"""
    message: str
    steps: tuple[int, int]
    """first and last training step where the rule saw the problem"""
    evidence: dict[str, Any]
    """the numbers the rule decided on (JSON-serializable)"""
    suggestion: str
    """the check the documents recommend, quoted"""


@dataclass(frozen=True)
class Thresholds:
    """Every number a rule decides with; the defaults suit the lab's tiny runs (tens to hundreds of steps).
    The fields that say "calibrated" were set by `alarms.calibrate` (1.2 x the 99th percentile of the
    rule's number over clean runs, rounded up to two significant digits) on the even seeds of the clean
    runs of the study base and of each scheme in results/, and checked on the odd seeds;
    docs/diagnostics.md gives every rule's false-alarm rate on those runs (scripts/diagnostics_rates.py)."""

    min_steps: int = 5
    """rules need at least this many logged training steps"""
    val_points_min: int = 4
    """validation stall needs at least this many validation measurements"""
    val_gain_min: float = 0.02
    """validation stall: the best validation accuracy of the second half must beat the first by this..."""
    val_z: float = 1.645
    """...after adding this many standard errors of the change: one-sided 5%, the false-alarm rate
    asked of every rule, on a run whose true gain is `val_gain_min` (less on a better one). The fault
    study validates on 50 prompts (sd of a change about 0.1) and the headline studies on 200 (0.05)"""
    trend_min_steps: int = 20
    """KL drift needs at least this many logged steps (its half-run trend is meaningless before)"""
    window_frac: float = 0.1
    """the "start" and "end" of a run are its first and last window_frac of steps..."""
    window_min: int = 3
    """...and at least this many steps"""
    clip_rate_high: float = 0.2
    """a step's clip rate (`clip_ratio/region_mean`) above this is high..."""
    clip_persist_frac: float = 0.3
    """...and the rate is persistently high when at least this share of a window's steps are high..."""
    clip_window: int = 20
    """...in some window of this many consecutive steps (the whole run when shorter)..."""
    clip_rise_min: float = 1.6
    """...whose median rate is at least this multiple of the run's start (its first window's mean).
    Calibrated: GSPO's sequence clip (eps 3e-4 to 4e-4) binds on 0.48-0.62 of the tokens from its first
    steps by design; its clean runs' high windows run at 0.89-1.27 x their start (even seeds' 99th
    percentile 1.26)"""
    ratio_mean_tol: float = 0.05
    """the median over steps of |ratio/mean - 1| may not exceed this"""
    ratio_std_max: float = 0.16
    """the median over steps of ratio/std may not exceed this (one on-policy update: exactly 0).
    Calibrated: the study base reuses each batch for eight optimizer steps, so its clean runs spread by
    design, grpo's at a median 0.062-0.079 and every scheme's at 0.017-0.127 (even seeds' 99th
    percentile 0.126, odd seeds at most 0.109)"""
    kl_floor: float = 1e-3
    """KL levels below this are too small to call drifting or volatile"""
    kl_drift_growth: float = 0.28
    """drift: the last quarter's mean KL exceeds the third quarter's by at least this relative amount...
    Calibrated: under a KL penalty the exact KL of a clean run keeps climbing slowly, and the clean runs
    whose last half rises significantly grow 11-28% over that quarter (even seeds' 99th percentile
    0.23), the long ones (500-1000 steps) 11-19%"""
    kl_drift_t: float = 3.0
    """...and the slope over the last half is positive with a t-statistic of at least this"""
    kl_warmup_frac: float = 0.2
    """KL volatility ignores this first share of the run (the KL starts at 0 and climbs)"""
    kl_volatility_max: float = 0.64
    """volatility: std of step-to-step KL changes over the mean KL, at most this. Calibrated on the exact
    KL, which the rule reads when logged: 0.08-0.56 over the clean runs (even seeds' 99th percentile
    0.53, odd seeds at most 0.47). The estimate `kl` carries its own sampling noise (k1's above
    all: scheme_b, rloo); on an estimate (a vocabulary too large for the exact KL) this threshold is not
    calibrated"""
    entropy_collapse_frac: float = 0.2
    """collapse: the entropy (rolling median of 3) falls below this fraction of its start value..."""
    entropy_collapse_within: float = 0.5
    """...within this first fraction of the run"""
    entropy_rise_factor: float = 2.0
    """runaway entropy: the end value exceeds this multiple of the start and is still rising"""
    grad_spike_k: float = 6.0
    """a gradient-norm spike exceeds the median + k x MAD (MAD scaled to a Gaussian std)..."""
    grad_spike_ratio: float = 4.3
    """...and also this multiple of the median. Calibrated: gradient norms are heavy-tailed, and the
    largest of a clean run beyond the spikes its length allows (`grad_spike_allowance`) is 1.4-5.6 x
    its median, both over the steps with a gradient (even seeds' 99th percentile 3.57, which
    calibrates to 4.3; three odd-seed runs reach it and fire, 3 of the 210 clean runs)"""
    grad_spike_min_steps: int = 10
    """spike detection needs this many steps for a stable median"""
    grad_spike_allowance: float = 0.01
    """...and the rule fires only on more spikes than this share of the run's steps (rounded down: none
    below 100 steps). The largest of n heavy-tailed gradient norms grows with n: clean runs of 800 to
    1000 steps show 1 to 6 steps above the limit, so a long run is judged by how often it spikes, a
    short one by whether it does"""
    zero_std_max: float = 0.5
    """the mean share of groups whose rewards are all equal (no learning signal) may not exceed this"""
    identical_group_max: float = 0.5
    """mode collapse: at the end, the share of groups with all-identical completions reaches this..."""
    distinct_drop_frac: float = 0.5
    """...or within-group distinct-2 ends below this fraction of its start"""
    template_max: float = 0.5
    """template collapse: `template_share` across prompts at the end reaches this"""
    template_min_prompts: int = 3
    """the samples-based template check needs completions of at least this many prompts"""
    length_growth_max: float = 2.0
    """length explosion: the end's mean completion length exceeds this multiple of the start's"""
    length_shrink_min: float = 0.5
    """length collapse: the end's mean length falls below this fraction of the start's"""
    truncation_max: float = 0.3
    """the share of completions cut at max_completion_length at the end may not exceed this"""
    kl_reward_scale_max: float = 0.5
    """KL in the reward: the median |kl_reward/mean| / reward_std may not exceed this"""
    logp_gap_max: float = 0.002
    """sampler-trainer mismatch: the median is/logp_gap_mean may not exceed this (nats per token)..."""
    ess_min: float = 0.8
    """...and the median normalized effective sample size is/ess may not fall below this"""
    grad_cos_min: float = -0.2
    """conflicting objectives: a grad_cos/<a>__<b> mean over the run below this pulls apart..."""
    grad_cos_alpha: float = 0.01
    """...when a one-sided t-test also puts the mean below zero at this level..."""
    grad_cos_min_points: int = 8
    """...and at least this many values were logged"""


@dataclass(frozen=True)
class RunView:
    """What every rule reads: training rows sorted by step, samples, config and thresholds."""

    metrics: pd.DataFrame
    samples: list[dict]
    config: dict
    th: Thresholds


Rule = Callable[[RunView], list[Finding]]

# --- series helpers --------------------------------------------------------------------------------


def training_rows(metrics: pd.DataFrame) -> pd.DataFrame:
    """The rows of training steps, sorted by step: rows with anything besides `step` and `val/*`."""
    if "step" not in metrics:
        return pd.DataFrame({"step": pd.Series(dtype=int)})
    logged = [c for c in metrics.columns if c != "step" and not c.startswith("val/")]
    rows = metrics[metrics[logged].notna().any(axis=1)] if logged else metrics.iloc[:0]
    return rows.sort_values("step").reset_index(drop=True)


def _series(m: pd.DataFrame, column: str) -> pd.Series | None:
    """A column's finite values indexed by step; None when missing or empty."""
    if column not in m:
        return None
    s = pd.Series(pd.to_numeric(m[column], errors="coerce").to_numpy(float), index=m["step"].to_numpy())
    s = s[np.isfinite(s.to_numpy())]
    return s if len(s) else None


def _edge(n: int, th: Thresholds) -> int:
    """Length of the start and end windows of an n-step series."""
    return min(n, max(th.window_min, round(th.window_frac * n)))


def _span(s: pd.Series) -> tuple[int, int]:
    return int(s.index[0]), int(s.index[-1])


# --- the documents' checks, quoted (translated) ----------------------------------------------------

_CLIP = (
    '[Evaluation guide §7] "If the clip-trigger rate stays high, the ratio distribution has drifted: '
    'check sampler synchronization and the learning rate first, rather than blaming the objective." '
    '[Evaluation guide §4.4] "Too high a clip ratio means the policy updates too fast or the sampling '
    'policy lags: adjust the learning rate or the sampler synchronization frequency."'
)
_COLLAPSE = (
    '[Tricks review §4.2] "Mid-run collapse, where the model suddenly answers every input with the same '
    "templated content, usually comes from an over-strong intervention: set the entropy coefficient to "
    "zero and rerun; if diversity recovers, the entropy term was too heavy. An adaptive-KL trigger set "
    'too high also reacts late: lower the threshold but slow the growth, intervening early and gently."'
)
_LENGTH = (
    '[Tricks review §1.2] "When a longer output earns more reward, outputs grow ever more verbose": look '
    "for a length incentive among the reward terms; consider length normalization or a length penalty. "
    '[Evaluation guide §7] "Length-weighted loss coefficients may help long answers but can amplify the '
    'variance of long sequences."'
)
_NONFINITE = (
    '[Tricks review §2.1] "With all three tricks on, the loss blew up to NaN within 5 steps; switching '
    'them off one at a time found the culprit." [Tricks review §5] "Turn every candidate trick on in a '
    'tiny run, then switch them off one by one to find the one that makes training collapse."'
)
CHECKS: dict[str, str] = {
    "clip_rate": _CLIP,
    "importance_ratio": '[Evaluation guide §4.4] "Monitor the ratio distribution: whether its mean departs '
    'from 1, whether its variance is too large, and the clip-trigger ratio." ' + _CLIP,
    "kl_drift": (
        '[Tricks review §4.1] "If the KL keeps rising with no sign of falling back, the model is '
        'drifting: increase the KL coefficient or lower the learning rate."'
    ),
    "kl_volatility": (
        '[Tricks review §4.1] "If the KL fluctuates sharply, the within-group sampling quality is '
        'unstable: lower the sampling temperature a little to make sampling more deterministic." '
        '[Evaluation guide §7] "A slightly higher mean reward with markedly larger KL fluctuation may be '
        'bought with stability; judge it over a longer run."'
    ),
    "entropy_collapse": (
        '[Tricks review §4.2] "The most common cause is an entropy coefficient set too large: set it to '
        'zero and rerun; if output diversity recovers quickly, the entropy term was too heavy." [Tricks '
        'review §2.2] "When entropy falls too fast, increase the exploration noise." [Evaluation guide '
        '§9] "Policy-entropy collapse and reward over-optimization need continuous monitoring."'
    ),
    "entropy_rising": (
        '[Tricks review §1.2] "Keep the policy from drifting too far from the reference, or it collapses '
        'into gibberish": check the entropy bonus, the sampling temperature and the KL coefficient.'
    ),
    "grad_spikes": (
        '[Evaluation guide §4.2] "Training stability: the variance of the training reward, how fast '
        'policy entropy falls, how much the KL fluctuates, how often the gradient norm spikes": compare '
        "the spike steps with their samples (extremely long or junk answers), the learning rate and "
        "max_grad_norm."
    ),
    "zero_variance_groups": (
        '[Evaluation guide §4.3] "If a scheme is sensitive to within-group reward discrimination, sparse '
        'rewards may need a larger group size." [Evaluation guide §7] "Be careful with sparse rewards, or'
        ' add reward shaping": raise group_size; make the task easier when the mean reward is near 0, '
        "harder when it is near its maximum."
    ),
    "mode_collapse": _COLLAPSE,
    "template_collapse": _COLLAPSE,
    "length_explosion": _LENGTH,
    "length_collapse": _LENGTH,
    "truncation": _LENGTH + " Or raise max_completion_length if the answers need the room.",
    "kl_reward_scale": (
        '[Evaluation guide §7] "If the reward scale changes markedly after moving the KL term into the '
        "reward, recalibrate the advantage normalization, or the within-group relative advantages may be "
        'distorted." [Evaluation guide §4.2] "Where the KL term sits changes the reward scale and with it'
        ' the numerical stability after advantage normalization."'
    ),
    "sampler_mismatch": (
        '[Tricks review §1.2] "Parallel or asynchronous sampling means the update data was not sampled by'
        ' the current policy; importance sampling and clipping correct this staleness." [Evaluation guide'
        ' §4.4] "The importance ratio measures how far the current policy is from the sampling policy": '
        "check sampler precision and synchronization, or turn on an is_correction (tis_*, mis_*)."
    ),
    "conflicting_objectives": (
        '[Tricks review §4.3] "List the new trick and the existing reward terms one by one and check '
        "whether their gradient directions roughly agree: run base GRPO, base GRPO plus the new trick, "
        "and the new reward term alone on a small dataset and compare their convergence direction and "
        'output style; combine them only if they point the same way."'
    ),
    "nonfinite_skipped": _NONFINITE,
    "nonfinite": _NONFINITE,
    "validation_stall": (
        '[Evaluation guide §10] "No scheme should be judged by the short-term reward curve alone; combine'
        ' clip rate, KL fluctuation and validation generalization." [Evaluation guide §6.4] Reward noise:'
        " check that the reward is correct (label noise or flipped rewards make the training reward "
        "uninformative), then the learning rate and the group size."
    ),
}
"""Per rule name, the check the documents suggest: every Finding's `suggestion`."""


def _finding(rule: str, level: Level, message: str, steps: tuple[int, int], evidence: dict) -> Finding:
    clean = {k: round(float(v), 6) if isinstance(v, (float, np.floating)) else v for k, v in evidence.items()}
    return Finding(rule, level, message, (int(steps[0]), int(steps[1])), clean, CHECKS[rule])


# --- rules: each reads a RunView and returns its findings ------------------------------------------


def rule_clip_rate(run: RunView) -> list[Finding]:
    """[Evaluation guide §4.4, §7] Clip rate persistently high: in some window of `clip_window` steps, at
    least `clip_persist_frac` of the steps clip more than `clip_rate_high` of the tokens, and the
    window's median rate is at least `clip_rise_min` times the run's start (the ratio distribution has
    drifted: a surrogate that clips that much from its first steps by design, as GSPO's sequence clip
    does, has not)."""
    th, s = run.th, _series(run.metrics, "clip_ratio/region_mean")
    if s is None or len(s) < th.min_steps:
        return []
    w = min(th.clip_window, len(s))
    share = (s > th.clip_rate_high).astype(float).rolling(w).mean().to_numpy()  # window ending at each step
    end = int(np.nanargmax(share))
    window = s.iloc[end - w + 1 : end + 1]
    start = float(s.iloc[: _edge(len(s), th)].mean())
    if share[end] < th.clip_persist_frac or window.median() < th.clip_rise_min * start:
        return []
    message = (
        f"clip rate above {th.clip_rate_high} on {share[end]:.0%} of {w} consecutive steps "
        f"(median {window.median():.3f}, {start:.3f} at the start)"
    )
    evidence = {
        "share_high": share[end],
        "median_clip_rate": window.median(),
        "start_clip_rate": start,
        "window_steps": w,
    }
    return [_finding("clip_rate", "warning", message, _span(window), evidence)]


def rule_importance_ratio(run: RunView) -> list[Finding]:
    """[Evaluation guide §4.4] The importance ratio's distribution: its mean away from 1 (median |ratio/mean -
    1| above `ratio_mean_tol`) or its spread too large (median ratio/std above `ratio_std_max`)."""
    th = run.th
    mean, std = _series(run.metrics, "ratio/mean"), _series(run.metrics, "ratio/std")
    if mean is None or len(mean) < th.min_steps:
        return []
    dev = float((mean - 1.0).abs().median())
    spread = float(std.median()) if std is not None else 0.0
    if dev <= th.ratio_mean_tol and spread <= th.ratio_std_max:
        return []
    message = f"importance ratio off: median |mean - 1| = {dev:.3f}, median std = {spread:.3f}"
    evidence = {"median_abs_mean_minus_1": dev, "median_std": spread}
    return [_finding("importance_ratio", "warning", message, _span(mean), evidence)]


def rule_kl_drift(run: RunView) -> list[Finding]:
    """[Tricks review §4.1] KL rising without levelling off: over the last half the slope is positive with
    t >= `kl_drift_t`, and the last quarter still exceeds the third by `kl_drift_growth` (no plateau)."""
    th, s = run.th, _series(run.metrics, "kl")
    if s is None or len(s) < th.trend_min_steps:
        return []
    half = s.iloc[len(s) // 2 :]
    third, last = half.iloc[: len(half) // 2], half.iloc[len(half) // 2 :]
    fit = stats.linregress(half.index.to_numpy(float), half.to_numpy())
    t = fit.slope / fit.stderr if fit.stderr > 0 else math.copysign(math.inf, fit.slope)
    growth = (last.mean() - third.mean()) / max(abs(third.mean()), th.kl_floor)
    if not (t >= th.kl_drift_t and growth >= th.kl_drift_growth and last.mean() > th.kl_floor):
        return []
    message = (
        f"KL still rising at the end: +{growth:.0%} from the third to the last quarter "
        f"(slope {fit.slope:.2e}/step, t = {t:.1f}), no plateau"
    )
    evidence = {"slope_per_step": fit.slope, "t_stat": t, "quarter_growth": growth, "kl_end": last.mean()}
    return [_finding("kl_drift", "warning", message, _span(half), evidence)]


def rule_kl_volatility(run: RunView) -> list[Finding]:
    """[Tricks review §4.1; Evaluation guide §4.2, §7] KL volatile: after the first `kl_warmup_frac` of the
    run, the std of the step-to-step KL changes exceeds `kl_volatility_max` times the mean KL level.
    Reads the exact KL (`kl/exact`) where the trainer logs it, else the run's estimate (`kl`): the
    estimators' own sampling noise (k1's above all) is not the policy's volatility."""
    th = run.th
    source = "kl/exact" if _series(run.metrics, "kl/exact") is not None else "kl"
    s = _series(run.metrics, source)
    if s is None or len(s) < th.min_steps:
        return []
    tail = s.iloc[int(th.kl_warmup_frac * len(s)) :]
    level = float(tail.abs().mean())
    if len(tail) < 4 or level < th.kl_floor:
        return []
    volatility = float(tail.diff().std()) / level
    if volatility <= th.kl_volatility_max:
        return []
    message = f"KL volatile: step-to-step changes have std {volatility:.2f} x its mean level {level:.4f}"
    evidence = {"relative_diff_std": volatility, "kl_mean": level, "source": source}
    return [_finding("kl_volatility", "warning", message, _span(tail), evidence)]


def rule_entropy(run: RunView) -> list[Finding]:
    """[Evaluation guide §4.2, §9; Tricks review §2.2, §4.2] Entropy falling too fast: below
    `entropy_collapse_frac` of its start within the first `entropy_collapse_within` of the run; or rising
    without bound: the end above `entropy_rise_factor` times the start and still above the window before
    it."""
    th, s = run.th, _series(run.metrics, "entropy")
    if s is None or len(s) < th.min_steps:
        return []
    w = _edge(len(s), th)
    start, end = float(s.iloc[:w].mean()), float(s.iloc[-w:].mean())
    if start <= 0:
        return []
    smooth = s.rolling(3, min_periods=1).median().to_numpy()
    below = np.flatnonzero(smooth < th.entropy_collapse_frac * start)
    if below.size and below[0] < th.entropy_collapse_within * len(s):
        at = int(s.index[below[0]])
        message = (
            f"entropy fell below {th.entropy_collapse_frac:.0%} of its start ({start:.3f}) by step {at}, "
            f"{below[0] / len(s):.0%} into the run (end {end:.3f})"
        )
        evidence = {"entropy_start": start, "entropy_end": end, "collapse_step": at}
        return [_finding("entropy_collapse", "warning", message, (int(s.index[0]), at), evidence)]
    before = float(s.iloc[-2 * w : -w].mean()) if len(s) >= 2 * w else start
    if end > th.entropy_rise_factor * start and end > before:
        message = (
            f"entropy rising without bound: {start:.3f} at the start, {end:.3f} at the end, still rising"
        )
        evidence = {"entropy_start": start, "entropy_end": end, "entropy_before_end": before}
        return [_finding("entropy_rising", "warning", message, _span(s), evidence)]
    return []


def rule_grad_spikes(run: RunView) -> list[Finding]:
    """[Evaluation guide §4.2, §6] Gradient-norm spikes: more steps than `grad_spike_allowance` of the run
    above median + `grad_spike_k` x MAD and above `grad_spike_ratio` x the median; reports their count
    and steps, and `excess`, the largest norm beyond the allowance (the one that made the rule fire).
    Only steps with a gradient count: a step whose groups all tie on reward has none (norm exactly 0,
    without a KL term), and a run that collapsed into such steps would otherwise have a median of 0
    and every remaining step as a "spike" (`zero_variance_groups` names that problem)."""
    th, s = run.th, _series(run.metrics, "grad_norm")
    if s is None:
        return []
    s = s[s > 0]
    if len(s) < th.grad_spike_min_steps:
        return []
    median = float(s.median())
    mad = 1.4826 * float((s - median).abs().median())  # scaled to a Gaussian std
    limit = max(median + th.grad_spike_k * mad, th.grad_spike_ratio * median)
    allowed = int(th.grad_spike_allowance * len(s))
    spikes = s[s > limit]
    if len(spikes) <= allowed:
        return []
    steps = [int(i) for i in spikes.index]
    shown = ", ".join(map(str, steps[:10])) + (" ..." if len(steps) > 10 else "")
    message = (
        f"{len(steps)} gradient-norm spike(s) above {limit:.3g} (median {median:.3g}; "
        f"{allowed} allowed in {len(s)} steps) at steps {shown}"
    )
    excess = float(s.nlargest(allowed + 1).iloc[-1])
    evidence = {
        "count": len(steps),
        "steps": steps,
        "limit": limit,
        "median": median,
        "max": spikes.max(),
        "allowed": allowed,
        "excess": excess,
    }
    return [_finding("grad_spikes", "warning", message, (steps[0], steps[-1]), evidence)]


def rule_zero_variance_groups(run: RunView) -> list[Finding]:
    """[Evaluation guide §4.3, §7, §8] Too many groups without reward variance (no learning signal): the mean
    `frac_reward_zero_std` exceeds `zero_std_max`."""
    th, s = run.th, _series(run.metrics, "frac_reward_zero_std")
    if s is None or len(s) < th.min_steps or s.mean() <= th.zero_std_max:
        return []
    evidence = {"mean_frac_zero_std": s.mean()}
    reward = _series(run.metrics, "reward")
    if reward is not None:
        evidence["mean_reward"] = reward.mean()
    message = f"{s.mean():.0%} of the groups have identical rewards on average: they give no gradient"
    return [_finding("zero_variance_groups", "warning", message, _span(s), evidence)]


def rule_mode_collapse(run: RunView) -> list[Finding]:
    """[Tricks review §4.2, §2.2] Diversity within groups lost: at the end, at least `identical_group_max` of
    the groups are all-identical, or within-group distinct-2 fell below `distinct_drop_frac` of its start."""
    th, m = run.th, run.metrics
    identical = _series(m, "diversity/identical_group_frac")
    distinct = _series(m, "diversity/distinct2_group")
    if identical is None or distinct is None or len(identical) < th.min_steps:
        return []
    w = _edge(len(identical), th)
    ident_end = float(identical.iloc[-w:].mean())
    d_start, d_end = float(distinct.iloc[:w].mean()), float(distinct.iloc[-w:].mean())
    if ident_end < th.identical_group_max and d_end >= th.distinct_drop_frac * d_start:
        return []
    message = (
        f"completions within groups became near-identical: {ident_end:.0%} of the groups all-identical "
        f"at the end, within-group distinct-2 {d_start:.3f} -> {d_end:.3f}"
    )
    evidence = {"identical_group_frac_end": ident_end, "distinct2_start": d_start, "distinct2_end": d_end}
    return [_finding("mode_collapse", "warning", message, _span(identical.iloc[-w:]), evidence)]


def _sample_groups(samples: list[dict]) -> tuple[list[list[str]], tuple[int, int]] | None:
    """Completions by prompt over the last half of the sampled steps, and those steps' span."""
    steps = sorted({int(r["step"]) for r in samples if "step" in r and "completion" in r})
    if not steps:
        return None
    late = set(steps[len(steps) // 2 :])
    by_prompt: dict[str, list[str]] = {}
    for r in samples:
        if r.get("step") in late and "completion" in r:
            by_prompt.setdefault(str(r.get("prompt")), []).append(str(r["completion"]))
    return list(by_prompt.values()), (min(late), max(late))


def rule_template_collapse(run: RunView) -> list[Finding]:
    """[Tricks review §4.2] Collapse into one template: the same completion answers many different prompts.
    Reads `diversity/template_frac` (end window mean >= `template_max`); without it, the completions in
    samples.jsonl over the last half of the sampled steps (at least `template_min_prompts` prompts)."""
    th, s = run.th, _series(run.metrics, "diversity/template_frac")
    if s is not None:
        if len(s) < th.min_steps:
            return []
        w = _edge(len(s), th)
        share, steps, source = float(s.iloc[-w:].mean()), _span(s.iloc[-w:]), "diversity/template_frac"
    else:
        found = _sample_groups(run.samples)
        if found is None or len(found[0]) < th.template_min_prompts:
            return []
        share, steps, source = template_share(found[0]), found[1], "samples"
    if share < th.template_max:
        return []
    message = f"one completion answers most prompts (template share {share:.2f} from {source})"
    return [
        _finding("template_collapse", "error", message, steps, {"template_share": share, "source": source})
    ]


def rule_length(run: RunView) -> list[Finding]:
    """[Tricks review §1.2, §2.1; Evaluation guide §7] Mean completion length exploding (end above
    `length_growth_max` x start) or collapsing (end below `length_shrink_min` x start)."""
    th, s = run.th, _series(run.metrics, "completions/mean_length")
    if s is None or len(s) < th.min_steps:
        return []
    w = _edge(len(s), th)
    start, end = float(s.iloc[:w].mean()), float(s.iloc[-w:].mean())
    if start > 0 and end > th.length_growth_max * start:
        rule, change = "length_explosion", "exploded"
    elif end < th.length_shrink_min * start:
        rule, change = "length_collapse", "collapsed"
    else:
        return []
    message = f"completion length {change}: {start:.1f} -> {end:.1f} tokens"
    return [
        _finding(rule, "warning", message, _span(s), {"mean_length_start": start, "mean_length_end": end})
    ]


def rule_truncation(run: RunView) -> list[Finding]:
    """[Tricks review §1.2, §2.1] Many completions cut at the length budget: the end window's mean
    `completions/clipped_ratio` exceeds `truncation_max`."""
    th, s = run.th, _series(run.metrics, "completions/clipped_ratio")
    if s is None or len(s) < th.min_steps:
        return []
    w = _edge(len(s), th)
    end = float(s.iloc[-w:].mean())
    if end <= th.truncation_max:
        return []
    message = f"{end:.0%} of the completions hit max_completion_length at the end of the run"
    return [_finding("truncation", "warning", message, _span(s.iloc[-w:]), {"clipped_ratio_end": end})]


def accuracy_change_sd(accuracy: float, prompts: int | None) -> float:
    """The sd of the difference of two accuracies near `accuracy`, each measured on `prompts` prompts:
    binomial and independent, which overstates it for the same prompts measured twice (the validation
    set is fixed), so a test against it errs towards silence; 0 when `prompts` is unknown."""
    return math.sqrt(2 * accuracy * (1 - accuracy) / prompts) if prompts else 0.0


def rule_validation_stall(run: RunView) -> list[Finding]:
    """[Evaluation guide §6.4, §10] Training does not carry over to validation: the best `val/accuracy` of the
    second half of the run beats the first measurement by less than `val_gain_min` even after adding
    `val_z` standard errors of the difference of two accuracies over the config's `val_size` prompts
    (binomial, at the first accuracy; 0 without a config): a gain hidden by the validation set's own
    noise is not a stall. The signature of noisy or flipped rewards, a learning rate too low or too
    high, or groups without signal."""
    th, s = run.th, _series(run.metrics, "val/accuracy")
    if s is None or len(s) < th.val_points_min:
        return []
    first, best_late = float(s.iloc[0]), float(s.iloc[len(s) // 2 :].max())
    noise = accuracy_change_sd(first, run.config.get("val_size"))
    if best_late + th.val_z * noise >= first + th.val_gain_min:
        return []
    message = (
        f"validation accuracy did not improve: {first:.3f} at the start, at best {best_late:.3f} later "
        f"(noise sd of the change {noise:.3f})"
    )
    evidence = {"val_first": first, "val_best_late": best_late, "change_sd": noise}
    return [_finding("validation_stall", "warning", message, _span(s), evidence)]


def rule_kl_reward_scale(run: RunView) -> list[Finding]:
    """[Evaluation guide §4.2, §7] KL moved into the reward changes the reward scale: with kl_placement
    "reward" (or no config), the median per-step |kl_reward/mean| / reward_std exceeds
    `kl_reward_scale_max`."""
    th = run.th
    if run.config and run.config.get("kl_placement") != "reward":
        return []
    kl, spread = _series(run.metrics, "kl_reward/mean"), _series(run.metrics, "reward_std")
    if kl is None or spread is None:
        return []
    both = pd.concat([kl.abs(), spread], axis=1, join="inner")  # (steps, 2)
    if len(both) < th.min_steps:
        return []
    penalty, std = both.iloc[:, 0], both.iloc[:, 1]
    ratio = float((penalty / std.clip(lower=1e-8)).median())
    if ratio <= th.kl_reward_scale_max:
        return []
    message = f"the KL penalty in the reward is {ratio:.2f} x the within-group reward std (median over steps)"
    evidence = {
        "median_ratio": ratio,
        "median_kl_reward": penalty.median(),
        "median_reward_std": std.median(),
    }
    return [_finding("kl_reward_scale", "warning", message, _span(penalty), evidence)]


def rule_sampler_mismatch(run: RunView) -> list[Finding]:
    """[Tricks review §1.2 (stale-policy bias); Evaluation guide §4.4] Sampler and trainer disagree: the
    median is/logp_gap_mean exceeds `logp_gap_max`, or the median is/ess falls below `ess_min`."""
    th = run.th
    gap, ess = _series(run.metrics, "is/logp_gap_mean"), _series(run.metrics, "is/raw_ess")
    ess = ess if ess is not None else _series(run.metrics, "is/ess")
    present = [s for s in (gap, ess) if s is not None]
    if not present or len(present[0]) < th.min_steps:
        return []
    gap_med = float(gap.median()) if gap is not None else 0.0
    ess_med = float(ess.median()) if ess is not None else 1.0
    if gap_med <= th.logp_gap_max and ess_med >= th.ess_min:
        return []
    message = (
        f"sampler and trainer disagree: median log-prob gap {gap_med:.3f}/token, median ESS {ess_med:.2f}"
    )
    evidence = {"median_logp_gap": gap_med, "median_ess": ess_med}
    return [_finding("sampler_mismatch", "warning", message, _span(present[0]), evidence)]


def rule_conflicting_objectives(run: RunView) -> list[Finding]:
    """[Tricks review §4.3] Two objectives pulling apart over the run: the logged values of a
    `grad_cos/<a>__<b>` column (at least `grad_cos_min_points`) average below `grad_cos_min`, and a
    one-sided t-test puts their mean below zero at level `grad_cos_alpha`. A cosine measured on one
    batch is noise around its mean (sd 0.2-0.3 on the study base), so a short stretch below the
    threshold happens by chance; the review's check is about the direction over the run."""
    th, found = run.th, []
    for column in sorted(c for c in run.metrics.columns if c.startswith("grad_cos/")):
        s = _series(run.metrics, column)
        if s is None or len(s) < th.grad_cos_min_points:
            continue
        mean = float(s.mean())
        test = stats.ttest_1samp(s.to_numpy(), 0.0, alternative="less")
        if not (mean < th.grad_cos_min and test.pvalue < th.grad_cos_alpha):
            continue
        a, _, b = column.removeprefix("grad_cos/").partition("__")
        message = (
            f"gradients of {a} and {b} point apart: their cosine averages {mean:.2f} over {len(s)} "
            f"logged steps (below {th.grad_cos_min}; below zero with p = {test.pvalue:.1g})"
        )
        evidence = {"pair": f"{a} vs {b}", "points": len(s), "mean_cos": mean, "p_value": float(test.pvalue)}
        found.append(_finding("conflicting_objectives", "warning", message, _span(s), evidence))
    return found


def rule_nonfinite(run: RunView) -> list[Finding]:
    """[Tricks review §2.1, §5] Non-finite values: steps skipped for a non-finite loss or gradient
    (`nonfinite/skipped_steps` > 0) are a warning; a non-finite loss, gradient norm, entropy or KL on
    any other training step is an error (the logs store non-finite numbers as null)."""
    m, found, skipped = run.metrics, [], set()
    count = _series(m, "nonfinite/skipped_steps")
    if count is not None and count.max() > 0:
        rises = count.diff().fillna(count.iloc[0])
        skipped = {int(i) for i in rises.index[rises > 0]}
        message = f"{int(count.max())} step(s) skipped for a non-finite loss or gradient"
        evidence = {"skipped_steps": int(count.max()), "steps": sorted(skipped)}
        found.append(
            _finding("nonfinite_skipped", "warning", message, (min(skipped), max(skipped)), evidence)
        )
    for column in ("loss", "grad_norm", "entropy", "kl"):
        if column not in m or m[column].isna().all():
            continue
        values = pd.to_numeric(m[column], errors="coerce").to_numpy(float)
        bad = [int(st) for st, v in zip(m["step"], values) if not np.isfinite(v) and int(st) not in skipped]
        if bad:
            message = f"non-finite {column} at {len(bad)} training step(s): {', '.join(map(str, bad[:10]))}"
            found.append(
                _finding("nonfinite", "error", message, (bad[0], bad[-1]), {"column": column, "steps": bad})
            )
    return found


RULES: tuple[Rule, ...] = (
    rule_nonfinite,
    rule_template_collapse,
    rule_mode_collapse,
    rule_entropy,
    rule_kl_drift,
    rule_kl_volatility,
    rule_kl_reward_scale,
    rule_clip_rate,
    rule_importance_ratio,
    rule_sampler_mismatch,
    rule_grad_spikes,
    rule_zero_variance_groups,
    rule_length,
    rule_truncation,
    rule_conflicting_objectives,
    rule_validation_stall,
)
"""Every rule `diagnose` runs."""


# --- entry points ----------------------------------------------------------------------------------


def diagnose(
    metrics: pd.DataFrame,
    samples: list[dict] | None = None,
    config: dict | None = None,
    thresholds: Thresholds = Thresholds(),
) -> list[Finding]:
    """Run every rule on a run's metrics (one row per step, as `read_metrics` or `train` give them; the
    final validation-only row is ignored), optional samples.jsonl records and config; findings sorted by
    level (errors first), then by step."""
    view = RunView(training_rows(metrics), list(samples or []), dict(config or {}), thresholds)
    found = [finding for rule in RULES for finding in rule(view)]
    return sorted(found, key=lambda f: (LEVELS.index(f.level), f.steps))


def summary_findings(metrics: pd.DataFrame, config: dict[str, Any]) -> list[dict[str, Any]]:
    """`diagnose` on a finished run's metrics and config, as the records its summary.json keeps under
    `findings`: the trainer's `findings` argument (the training core imports no analysis, so the
    callers above it hand this in; the run store does for every run it trains)."""
    return [asdict(f) for f in diagnose(metrics, config=config)]


def diagnose_run(run_dir: str | Path, thresholds: Thresholds = Thresholds()) -> list[Finding]:
    """`diagnose` a run directory: its metrics (sealed or not), samples.jsonl and config.json."""
    run_dir = Path(run_dir)
    if not has_metrics(run_dir):
        raise ValueError(f"{run_dir} is not a run directory: it has no {METRICS} nor {METRICS_TABLE}")
    config = read_config(run_dir) if has_config(run_dir) else None
    return diagnose(read_metrics(run_dir), read_samples(run_dir), config, thresholds)


def _format_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list) and len(value) > 10:
        return f"[{', '.join(map(str, value[:10]))}, ...]"
    return str(value)


def format_findings(findings: list[Finding]) -> str:
    """A plain-text report, one block per finding, for `grpo-lab diagnose RUN_DIR`."""
    if not findings:
        return f"no findings: all {len(RULES)} checks passed or had too little data to judge"
    counts = Counter(f.level for f in findings)
    tally = ", ".join(f"{counts[level]} {level}" for level in LEVELS if counts[level])
    lines = [f"{len(findings)} finding(s): {tally}"]
    for f in findings:
        evidence = ", ".join(f"{k}={_format_value(v)}" for k, v in f.evidence.items())
        lines += [
            "",
            f"[{f.level}] {f.rule}, steps {f.steps[0]}-{f.steps[1]}: {f.message}",
            f"    evidence: {evidence}",
            f"    check: {f.suggestion}",
        ]
    return "\n".join(lines)
