"""The long-horizon study (notebook 05): the study base (`studies.base`) trained long at several
learning rates. Measures: the training and validation curves, how far the entropy falls (start, end,
decay rate), the path in the entropy-reward plane, each run's best and final validation accuracy, the
diagnostic rules that fire, and whether the early training reward predicts the final validation
accuracy (rank correlation across and within learning rates)."""

from collections.abc import Sequence

import matplotlib.pyplot as plt
import pandas as pd

from grpo_lab import experiments, profiles
from grpo_lab.analysis import horizon, plots, robustness, stats
from grpo_lab.experiments import SweepResult
from grpo_lab.studies.base import base
from grpo_lab.studies.designs import for_profile

PARAM = "learning_rate"
CURVES = ("reward", "val/accuracy", "entropy", "kl/exact", "completions/mean_length", "grad_norm")
SMOOTH = 10
"""training curves: trailing mean over this many logged steps (validation is never smoothed)"""
PHASE_SMOOTH = 20
"""the entropy-reward path: trailing mean over this many steps"""


def settings(
    profile: str, seeds: Sequence[int], steps: int | None, full_steps: int, eval_every: int, keep: int
) -> profiles.Profile:
    """The study's profile with its own `seeds` (the first `keep` under smoke), `full_steps` steps
    validated every `eval_every` steps under the full profile."""
    chosen = profiles.profile(profile, list(seeds), steps, full_steps=full_steps, eval_every=eval_every)
    kept = list(for_profile(list(seeds), chosen, keep))
    return profiles.profile(profile, kept, steps, full_steps=full_steps, eval_every=eval_every)


def run(settings: profiles.Profile, learning_rates: Sequence[float]) -> SweepResult:
    """The study base at each learning rate over the profile's seeds (the shared store)."""
    return experiments.sensitivity(
        base(settings), PARAM, list(learning_rates), settings.seeds, root=settings.runs_dir()
    )


def figure_curves(metrics: pd.DataFrame, settings: profiles.Profile) -> plt.Figure:
    """The `CURVES` by learning rate."""
    title = f"study base on {base(settings).task} by learning rate, {settings.steps} steps"
    return plots.curves(metrics, [m for m in CURVES if m in metrics], by=PARAM, smooth=SMOOTH, title=title)


def entropy(metrics: pd.DataFrame) -> pd.DataFrame:
    """Per learning rate: the token entropy at the start and the end, their ratio and the fitted
    decay rate (`stats.run_table`), mean and interval over seeds."""
    per_run = horizon.start_end(metrics, "entropy", by=PARAM).merge(
        stats.run_table(metrics, by=PARAM)[[PARAM, "seed", "entropy_decay"]]
    )
    return horizon.summarize(per_run, ["start", "end", "ratio", "entropy_decay"], by=PARAM)


def figure_phase(metrics: pd.DataFrame) -> plt.Figure:
    """The path of each learning rate in the entropy-reward plane."""
    return plots.phase(
        metrics, "entropy", "reward", by=PARAM, smooth=PHASE_SMOOTH, title="entropy against reward"
    )


def peaks(metrics: pd.DataFrame) -> pd.DataFrame:
    """Per learning rate: the best validation accuracy of a run, its step, the final one, the drop."""
    per_run = horizon.peak_and_drop(metrics, "val/accuracy", by=PARAM)
    return horizon.summarize(per_run, ["best", "best_step", "final", "drop"], by=PARAM)


def diagnostics(result: SweepResult) -> tuple[plt.Figure, pd.DataFrame]:
    """The rules that fired, by learning rate (each cell out of that learning rate's runs), and the
    findings."""
    findings = robustness.run_findings(result.runs, [PARAM])
    counts = robustness.rule_counts(findings, result.runs, by=PARAM)
    totals = result.runs[PARAM].value_counts()
    fig = plots.rule_heatmap(counts, totals, title="diagnostics that fired, by learning rate (runs out of n)")
    return fig, findings


def early_versus_final(metrics: pd.DataFrame, early_frac: float) -> tuple[plt.Figure, pd.DataFrame]:
    """Each run's mean training reward over the first `early_frac` of its steps against its final
    validation accuracy, with Spearman's rank correlation across all runs and within a learning
    rate (`horizon.rank_correlation`)."""
    early = horizon.early_and_final(
        metrics, by=PARAM, early="reward", final="val/accuracy", early_frac=early_frac
    )
    correlations = {
        "across all runs": horizon.rank_correlation(early["early"], early["final"]),
        "within a learning rate": horizon.rank_correlation(
            early["early"], early["final"], groups=early[PARAM]
        ),
    }
    fig = plots.correlation_scatter(
        early,
        "early",
        "final",
        PARAM,
        correlations,
        xlabel=f"mean training reward over the first {early_frac:.0%} of steps",
        ylabel="final validation accuracy (fraction correct)",
        title="early reward against final validation accuracy (Spearman)",
    )
    return fig, pd.DataFrame(correlations.values(), index=list(correlations))
