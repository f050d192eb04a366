"""The scheme study (notebook 03): every compared scheme on the study base (`studies.base`) against
`grpo`, the Evaluation guide's main comparison (§6.3: replace the objective under the same data and
hyper-parameters, repeat over seeds), with arms paired on seeds (the same seed gives every scheme the
same prompts and sampling streams). Its runs are also the scheme rows of the verdict table of
`studies.verdicts` (notebook 12), which asks for the same design.

- `settings` / `design`: the profile of `FULL` and each scheme of `SCHEMES` on the base;
- `run`: trains or loads the design through the run store (every arm is needed);
- `scores` / `table`: per-run scores (final accuracy, stability, cost, activity) and the verdict
  table, each scheme against `REFERENCE`;
- `figure`: the table as a forest plot; `figure_curves`: the training curves per scheme."""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd

from grpo_lab.analysis import plots, verdicts
from grpo_lab.experiments import SweepResult
from grpo_lab.experiments.designs import Point
from grpo_lab.profiles import Budget, Profile
from grpo_lab.studies import paired
from grpo_lab.studies.base import base
from grpo_lab.studies.designs import for_profile

SCHEMES = ("grpo", "scheme_a", "scheme_b", "scheme_c", "dr_grpo", "dapo", "gspo", "cispo")
"""the compared schemes (presets); `grpo` is the reference"""
REFERENCE = "grpo"
SMOKE_SCHEMES = 2
"""the smoke profile compares the first this many schemes"""
FULL = Budget(seeds=tuple(range(9)), steps=60, eval_every=5, scored_tail=True)
"""under the full profile: up to 9 paired seeds of 60 steps, validated every 5 steps in the scored
tail: the score pilot's sd of the headline score puts a scheme comparison's MDE within 0.15 of grpo's
gain at 9 seeds; the sequential rule stops a clear comparison earlier (`docs/studies.md`, "Sizing
the full profile")"""
CURVES = (
    "val/accuracy",
    "reward",
    "kl/exact",
    "entropy",
    "clip_ratio/region_mean",
    "completions/mean_length",
)
"""the metrics drawn against the step"""
RATIO_WINDOW = 25
"""training steps in the moving average of the importance-ratio quantiles"""


def settings(profile: str, seeds: Sequence[int] | None = None, steps: int | None = None) -> Profile:
    """The study's profile: `FULL` under the full profile, the smoke profile's few otherwise;
    `seeds` and `steps` as the notebook sets them."""
    return FULL.settings(profile, seeds, steps)


def compared(settings: Profile) -> tuple[str, ...]:
    """`SCHEMES` under the full profile; the first `SMOKE_SCHEMES` under any other."""
    return for_profile(SCHEMES, settings, SMOKE_SCHEMES)


def design(settings: Profile, schemes: Sequence[str] | None = None, **changes: Any) -> list[Point]:
    """Each scheme (default: `compared(settings)`) on the study base, labelled by its preset name
    (`changes` apply to every arm)."""
    schemes = compared(settings) if schemes is None else tuple(schemes)
    if REFERENCE not in schemes:
        raise ValueError(f"the schemes must include the reference {REFERENCE!r}, got {list(schemes)}")
    return [Point(name, {"arm": name}, base(settings, name, **changes)) for name in schemes]


def run(
    points: Sequence[Point], settings: Profile, root: str | Path | None = None, **options: Any
) -> SweepResult:
    """Train (or load) the design over the profile's seeds into `root` (default: the profile's run
    store); a failed run is an error (a verdict needs every arm). `options` as for
    `experiments.run_design`."""
    return paired.run(points, settings, root, **options)


def scores(result: SweepResult) -> pd.DataFrame:
    """One row per run with its scores and its scheme's activity measure."""
    return paired.scores(result, {label: [label] for label in result.runs["label"].unique()})


def table(scored: pd.DataFrame, margin: float | None = None) -> pd.DataFrame:
    """The verdict rows of the scored runs: each scheme against `REFERENCE`, paired on seeds, in the
    order of `SCHEMES`; `margin` as for `analysis.verdicts.compare` (None: a share of the reference's
    gain)."""
    labels = set(scored["label"])
    arms = [(s, "scheme", s, REFERENCE) for s in SCHEMES if s in labels and s != REFERENCE]
    return verdicts.compare(scored, arms, margin=margin)


def figure(verdict_table: pd.DataFrame, settings: Profile) -> plt.Figure:
    """The verdict table as a forest plot (`paired.forest`)."""
    return paired.forest(verdict_table, f"{settings.steps} steps", f"schemes vs {REFERENCE}")


def figure_curves(result: SweepResult, settings: Profile) -> plt.Figure:
    """The `CURVES` per scheme: mean and 95% t-interval over seeds."""
    shown = [m for m in CURVES if m in result.metrics]
    title = f"schemes on the study base, {settings.steps} steps"
    return plots.curves(result.metrics, shown, by="label", title=title)
