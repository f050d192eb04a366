"""The scheme study (notebook 03): every compared scheme on the study base (`comparisons.bed.base`) against
`grpo`, the Evaluation guide's main comparison (§6.3: replace the objective under the same data and
hyper-parameters, repeat over seeds), with arms paired on seeds (the same seed gives every scheme the
same prompts and sampling streams). A scheme whose preset also changes what is not its own mechanism
(dr_grpo, dapo_loss, gspo and cispo drop the KL) is compared with its matched comparator too
(`presets.matched_comparator`: `grpo_no_kl`), an arm of the design trained on the same seeds, so that
one of its rows reads the mechanism alone. Its runs are also the scheme rows of the verdict table of
`studies.verdicts` (notebook 12), which asks for the same design.

The arms, their design and verdict rows are the comparisons layer's (`comparisons.scheme_arms`), as
is the sequential rule that seeds them (`comparisons.sequential_seeds`), since seven other studies
ask for the same runs; this module gives the notebook its names for them and its own figures:
- `settings` / `design`: the profile of `FULL` and each scheme of `SCHEMES`, with its matched
  comparator, on the base;
- `run` / `runs`: trains or loads the design through the run store (every arm is needed), seeds
  added under the sequential rule;
- `scores` / `table`: per-run scores (final accuracy, stability, cost, activity) and the verdict
  table, each scheme against `REFERENCE` and against its matched comparator;
- `figure`: the table as a forest plot; `figure_curves`: the training curves per scheme;
  `figure_efficiency` / `efficiency_summary`: steps and completions to a common target, censored runs
  counted, and the samples without signal (`analysis.efficiency`); `problems_present`: whether the
  base has the problems the schemes target (`analysis.problems`)."""

import matplotlib.pyplot as plt
import pandas as pd

from grpo_lab.analysis import efficiency, plots, problems
from grpo_lab.analysis.scores import HEADLINE
from grpo_lab.comparisons.bed import described
from grpo_lab.comparisons.scheme_arms import (
    FULL,
    REFERENCE,
    SCHEMES,
    compared,
    design,
    figure,
    scores,
    settings,
    table,
)
from grpo_lab.comparisons.sequential_seeds import run, runs
from grpo_lab.experiments import SweepResult
from grpo_lab.presets import matched_comparator
from grpo_lab.profiles import Profile

__all__ = [
    "CURVES",
    "FULL",
    "RATIO_WINDOW",
    "REFERENCE",
    "SCHEMES",
    "compared",
    "described",
    "design",
    "efficiency_summary",
    "figure",
    "figure_curves",
    "figure_efficiency",
    "problems_present",
    "run",
    "runs",
    "scores",
    "settings",
    "table",
    "title",
]


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


def title(settings: Profile) -> str:
    """What every figure of the study says its runs are: the start, the bed and the steps."""
    return f"schemes on the {described(settings)}, {settings.steps} steps"


def figure_curves(result: SweepResult, settings: Profile) -> plt.Figure:
    """The `CURVES` per scheme: mean and 95% t-interval over seeds."""
    shown = [m for m in CURVES if m in result.metrics]
    return plots.curves(result.metrics, shown, by="label", title=title(settings))


def efficiency_summary(result: SweepResult, settings: Profile) -> pd.DataFrame:
    """Per scheme and view of `analysis.efficiency` (validation score, training batches): runs, runs
    that reached the common target (`efficiency.TARGET_SHARE` of grpo's gain in the headline metric),
    and the median step and completions at which they did (NaN when half or more never did)."""
    order = compared(settings)
    tables = []
    for view in efficiency.views(HEADLINE.metric):
        progressed = efficiency.progress(result.metrics, view, "label")
        level = efficiency.target(progressed, "label", REFERENCE)
        reached = efficiency.reach(progressed, "label", level)
        tables.append(efficiency.summary(reached, "label", order).assign(view=view.metric, target=level))
    return pd.concat(tables, ignore_index=True)


def problems_present(result: SweepResult) -> pd.DataFrame:
    """Whether the study base has the problems the schemes target (`analysis.problems`), from grpo's
    runs (and, for the length bias dr_grpo targets, dr_grpo's against its matched comparator's, which
    differ in the normalizations alone): a row whose problem is absent measures the scheme's cost
    without its benefit."""
    return problems.present(result.metrics, REFERENCE, (matched_comparator("dr_grpo"), "dr_grpo"))


def figure_efficiency(result: SweepResult, settings: Profile) -> plt.Figure:
    """Sample efficiency per scheme (`efficiency.figure`) on the headline metric, grpo the reference."""
    return efficiency.figure(result.metrics, "label", compared(settings), HEADLINE.metric, title(settings))
