"""Whether the problem a method targets is present in a test bed, measured from the run logs, never
assumed (`docs/sources.md`, Evaluation guide §8: long answers, sparse rewards with little
within-group discrimination, strict train-inference consistency). A verdict on a bed where the
targeted problem is absent measures the method's cost without its benefit; each check below says,
from the reference method's own runs, whether the bed has the problem.

- `length_bias`: the Dr. GRPO length bias, incorrect answers growing longer under grpo's per-sequence
  normalization than under dr_grpo's from their common start (paired on seeds, the interval above 0);
- `sparse_signal`: most groups give one reward to all early in training;
- `inconsistency`: the sampler is not the trained policy (the log-probability gap between them).

Each returns a `Presence`; `present` runs them all on one bed's runs. Reads run logs only (one row per
run and step, with `seed`, and `label` for `present`)."""

import math
from dataclasses import dataclass

import pandas as pd

from grpo_lab.analysis.power import paired
from grpo_lab.analysis.stats import mean_interval

EARLY = 0.2
"""the early part of a run: this share of its training steps"""
SPARSE_SHARE = 0.5
"""`sparse_signal`: the early zero-variance group share at or above which the bed is sparse"""
GAP_MIN = 0.01
"""`inconsistency`: the mean |log-prob gap| between sampler and trainer per token at or above which
the sampler is not the trained policy"""
INCORRECT_LENGTH = "completions/incorrect_mean_length"


@dataclass(frozen=True)
class Presence:
    """A bed's measured answer to 'is the problem there?'."""

    problem: str
    """the problem checked"""
    value: float
    """the measured figure"""
    low: float
    high: float
    """its 95% interval over seeds (NaN when the figure has none)"""
    threshold: float
    """the figure's bound for the problem to count as present"""
    present: bool
    """whether the problem is there: the figure (its interval's lower end, where it has one) is past
    the bound"""
    measure: str
    """what the figure is, in words"""


def _training(runs: pd.DataFrame, column: str) -> pd.DataFrame:
    if column not in runs:
        raise ValueError(f"the runs do not log {column!r}: the check cannot be made")
    return runs.dropna(subset=[column]).sort_values("step")


def _edges(run: pd.DataFrame, column: str) -> tuple[float, float]:
    """The mean of `column` over the first and the last `EARLY` share of a run's logged steps."""
    k = max(1, int(round(EARLY * len(run))))
    return float(run[column].iloc[:k].mean()), float(run[column].iloc[-k:].mean())


def late(runs: pd.DataFrame, column: str) -> pd.Series:
    """Per seed: `column` over the last `EARLY` of the run."""
    train = _training(runs, column)
    return pd.Series({seed: _edges(run, column)[1] for seed, run in train.groupby("seed")}, dtype=float)


def length_bias(per_sequence: pd.DataFrame, dr_grpo: pd.DataFrame, control: str = "grpo") -> Presence:
    """The Dr. GRPO length bias: how much longer the incorrect answers are under the per-sequence
    normalization (the runs of `control`: grpo, or its matched form `grpo_no_kl`, which differs from
    dr_grpo in the normalizations alone, not also in the KL term) than under dr_grpo over the last
    `EARLY` of the runs (tokens), paired on seeds; present when the interval lies above 0. Both arms of
    a seed sample the same completions at step 0 (one start, one sampler stream), so this is the
    difference of their growth from that common start; a growth measured from each arm's own first
    `EARLY` would subtract what the arm had already changed in those steps."""
    effect = paired(late(per_sequence, INCORRECT_LENGTH), late(dr_grpo, INCORRECT_LENGTH))
    return Presence(
        f"length bias (Dr. GRPO; {control} against dr_grpo)",
        effect.effect,
        effect.low,
        effect.high,
        0.0,
        bool(math.isfinite(effect.low) and effect.low > 0),
        f"incorrect answers' length late in the run under {control} minus under dr_grpo (tokens; one "
        "start), paired on seeds",
    )


def sparse_signal(runs: pd.DataFrame) -> Presence:
    """Little within-group discrimination: the share of groups whose rewards are all equal over the
    first `EARLY` of the run, mean over seeds; present when it is at least `SPARSE_SHARE`."""
    train = _training(runs, "frac_reward_zero_std")
    early = pd.Series(
        {s: _edges(r, "frac_reward_zero_std")[0] for s, r in train.groupby("seed")}, dtype=float
    )
    value, low, high = mean_interval(early.to_numpy())
    return Presence(
        "sparse reward",
        value,
        low,
        high,
        SPARSE_SHARE,
        bool(value >= SPARSE_SHARE),
        f"share of zero-variance groups over the first {EARLY:.0%} of the steps",
    )


def inconsistency(runs: pd.DataFrame) -> Presence:
    """The sampler is not the trained policy: the mean |log-prob gap| per token between the sampler's
    log-probs and the trainer's (`is/logp_gap_mean`) over the run, mean over seeds; present when its
    interval's lower end is at least `GAP_MIN`."""
    train = _training(runs, "is/logp_gap_mean")
    gaps = train.groupby("seed")["is/logp_gap_mean"].mean()
    value, low, high = mean_interval(gaps.to_numpy())
    return Presence(
        "train-inference inconsistency",
        value,
        low,
        high,
        GAP_MIN,
        bool(low >= GAP_MIN),
        "mean |log-prob gap| per token between the sampler and the trained policy",
    )


def table(checks: list[Presence]) -> pd.DataFrame:
    """The checks as rows."""
    return pd.DataFrame([vars(c) for c in checks])


def present(runs: pd.DataFrame, reference: str, length_pair: tuple[str, str] | None = None) -> pd.DataFrame:
    """Whether a bed has each problem (`table`), from its runs (`label` names the arm): the sparse signal
    and the inconsistency from `reference`'s runs, and first, where both arms of `length_pair`
    (the per-sequence arm, dr_grpo's) have runs, the length bias between them."""
    own = runs[runs["label"] == reference]
    checks = [sparse_signal(own), inconsistency(own)]
    if length_pair is not None and set(length_pair) <= set(runs["label"]):
        per_sequence, dr_grpo = (runs[runs["label"] == label] for label in length_pair)
        checks.insert(0, length_bias(per_sequence, dr_grpo, length_pair[0]))
    return table(checks)
