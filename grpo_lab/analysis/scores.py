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
