"""The headline score of a run: one number per run that the paired comparisons, the factorial screen
and the sequential rule compare.

A run's score is the mean of one validation metric over a tail window of its evaluations (the
evaluations at or after `1 - window` of the run's steps). Averaging evaluations removes the
evaluation-to-evaluation swing of a single checkpoint (Andrychowicz et al. 2020; Heineman et al.
2025, "Signal and Noise"); which metric and window decide most per core-second was measured by the
score pilot (`docs/studies.md`, "The headline score"). Reads run logs only."""

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Score:
    """A run's score: the mean of `metric` over the evaluations in the last `window` of the run."""

    metric: str
    """the validation column averaged (e.g. 'val/sampled_accuracy', 'val/accuracy')"""
    window: float
    """the tail of the run whose evaluations count, as a fraction of its steps (0 < window <= 1)"""

    def __post_init__(self) -> None:
        if not 0 < self.window <= 1:
            raise ValueError(f"the score window must be in (0, 1], got {self.window}")

    def of(self, run: pd.DataFrame) -> float:
        """The score of one run's metrics (its rows, one per step; NaN when it has no evaluation of
        `metric` in the window, or none at all)."""
        if self.metric not in run.columns:
            return math.nan
        evals = run.dropna(subset=[self.metric])
        if not len(evals):
            return math.nan
        last = float(run["step"].max())
        tail = evals[evals["step"] >= (1 - self.window) * last - 1e-9]
        return float(np.mean(tail[self.metric])) if len(tail) else math.nan

    def start(self, run: pd.DataFrame) -> float:
        """`metric` at the run's first evaluation (before any update; NaN without one)."""
        if self.metric not in run.columns:
            return math.nan
        evals = run.dropna(subset=[self.metric]).sort_values("step")
        return float(evals[self.metric].iloc[0]) if len(evals) else math.nan

    def caption(self) -> str:
        """What the score is, for a figure's caption or a table's header."""
        return f"mean {self.metric} over the evaluations in the last {self.window:.0%} of each run's steps"


HEADLINE = Score("val/sampled_accuracy", 0.5)
"""the headline score every verdict uses (chosen by the score pilot, `docs/studies.md`)"""
GREEDY = Score("val/accuracy", 0.5)
"""greedy accuracy over the same window, logged beside the headline score"""
PASS_AT_4 = Score("val/pass@4", 0.5)
"""pass@4 at the validation temperature over the same window: what sharpening alone cannot raise"""
CANDIDATES = {"sampled accuracy": HEADLINE, "greedy accuracy": GREEDY, "pass@4": PASS_AT_4}
"""the scores the headline was chosen among (`examine`, `docs/studies.md` "The headline score")"""
ENTROPY_TAIL = 0.1
"""a run's final entropy: the mean token entropy of its training batches over this last share of steps"""


def final_entropy(run: pd.DataFrame) -> float:
    """The mean `entropy` of the run's training steps in its last `ENTROPY_TAIL` (NaN without any)."""
    train = run.dropna(subset=["entropy"]) if "entropy" in run.columns else run.iloc[:0]
    if not len(train):
        return math.nan
    last = float(train["step"].max())
    return float(train.loc[train["step"] >= (1 - ENTROPY_TAIL) * last, "entropy"].mean())


def examine(
    spread: pd.DataFrame, reference: pd.DataFrame, candidates: dict[str, Score] = CANDIDATES
) -> pd.DataFrame:
    """For each candidate score, what decides a headline: its seed-to-seed sd over the `reference`
    runs (one configuration over seeds, a row per run and step with `seed`), what the reference
    learns in it (`gain`: mean score minus start), their ratio (the noise a comparison must beat, in
    units of what there is to learn), and its Spearman correlation with the final entropy across the
    `spread` runs (many configurations, a row per run and step with `label` and `seed`): a score that
    tracks entropy this closely rewards sharpening, whatever it says of learning. A candidate the runs
    did not log has NaN and `runs` 0."""
    rows = []
    for name, score in candidates.items():
        ref = [(score.of(run), score.start(run)) for _, run in reference.groupby("seed")]
        values = np.array([v for v, _ in ref], dtype=float)
        starts = np.array([s for _, s in ref], dtype=float)
        per_run = pd.DataFrame(
            [(score.of(run), final_entropy(run)) for _, run in spread.groupby(["label", "seed"])],
            columns=["score", "entropy"],
        ).dropna()
        gain = float(np.nanmean(values - starts)) if np.isfinite(values).any() else math.nan
        sd = float(np.nanstd(values, ddof=1)) if np.isfinite(values).sum() > 1 else math.nan
        rho = float(per_run["score"].rank().corr(per_run["entropy"].rank())) if len(per_run) > 2 else math.nan
        rows.append(
            {
                "score": name,
                "what": score.caption(),
                "gain": gain,
                "sd": sd,
                "sd / gain": sd / gain if gain > 0 else math.nan,
                "spearman with final entropy": rho,
                "runs": len(per_run),
            }
        )
    return pd.DataFrame(rows)
