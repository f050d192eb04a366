"""The ablation study (notebook 02), three designs on the study base (`comparisons.bed.base`), arms paired
on seeds (the same seed gives every arm the same prompts and sampling streams):

- components of the objective (Evaluation guide §6.2 Ablations: switch off the KL term, switch off
  clipping, move the KL, and watch each statistic's direction): `VARIANTS`, one change each over the
  base, against the base (`REFERENCE`);
- the tricks' leave-one-out, the Tricks review's own protocol (§5: "every trick on, then each
  removed"): every trick of `presets.TRICKS` on over the base ('all'), then each left out
  ('-name'); a row is what switching the trick on adds to the others. These runs are also the trick
  rows of `studies.verdicts` (notebook 12);
- the two combinations the Tricks review names as conflicts (`CONFLICTS`), each run over the base on
  its own and paired against it: batch reward normalization on top of group normalization (§2.2: a
  U-shaped, unstable curve), and group normalization with a dynamic (per-token, entropy-weighted) KL
  and length normalization all on (§2.1: a crash within 5 steps; group normalization is grpo's own
  advantage). A conflict run that fails is the outcome measured, not an error.

The arms and their design are the comparisons layer's (`comparisons.trick_arms`: 08 and 12 ask for
the same runs), as is the factorial screen of the trick factors (`comparisons.screen`), which the same
notebook runs. `settings` / `design` / `run` / `scores` come from there; this module holds the
notebook's measures (`table`, `conflicts`, `diagnostics`) and figures (`figure`, `figure_curves`,
`figure_kl_placement`, `figure_stability`).

Every row is judged against the bed's one margin: `MARGIN_OF_GAIN` times what grpo learns over the
scheme study's runs on the study base (`scheme_arms.reference_gain`, the notebook passes it), the
margin of the verdict table (notebook 12) whose rows these are, and of the screen. The table's rows are
one family (`FAMILY`, Holm's control of the family-wise error rate, `analysis.multiplicity`): each row
shows its raw word beside the word of its interval at its Holm level, and `caption` names the family."""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from grpo_lab.analysis import multiplicity, plots, robustness, stability, verdict_table
from grpo_lab.analysis.claim_checks import CRASH_STEPS
from grpo_lab.analysis.stats import curve, seeds_shown
from grpo_lab.comparisons import paired
from grpo_lab.comparisons.bed import described
from grpo_lab.comparisons.trick_arms import (
    ALL_ON,
    CONFLICTS,
    FULL,
    KL_IN_REWARD,
    RECALIBRATED,
    REFERENCE,
    VARIANTS,
    allowance,
    design,
    part,
    run,
    scores,
    settings,
    trick_points,
)
from grpo_lab.experiments import SweepResult
from grpo_lab.presets import TRICKS
from grpo_lab.profiles import Profile

__all__ = [
    "ALL_ON",
    "CONFLICTS",
    "CURVES",
    "FULL",
    "KL_IN_REWARD",
    "KL_PLACEMENTS",
    "RECALIBRATED",
    "FAMILY",
    "REFERENCE",
    "SMOOTH",
    "VARIANTS",
    "allowance",
    "caption",
    "conflicts",
    "crashed",
    "described",
    "design",
    "diagnostics",
    "figure",
    "figure_curves",
    "figure_kl_placement",
    "figure_stability",
    "part",
    "run",
    "scores",
    "settings",
    "table",
    "trick_points",
]

CURVES = ("val/accuracy", "reward", "kl/exact", "entropy", "clip_ratio/region_mean", "grad_norm")
"""the metrics drawn against the step"""
SMOOTH = 5
"""training curves: trailing mean over this many logged steps"""


FAMILY = multiplicity.Family("every row of the ablation table", "holm")
"""the ablation table's family and its error-rate control"""


def table(scored: pd.DataFrame, reference_gain: float, margin: float | None = None) -> pd.DataFrame:
    """The verdict rows: each component variant and each conflict against the base (a conflict only
    where some of its runs finished), then each trick (all on against all but that one), paired on
    seeds; `RECALIBRATED` against `KL_IN_REWARD` (kind 'recalibration': the normalization alone).
    The `kind` column says which ('component', 'recalibration', 'conflict', 'trick'). `reference_gain` is
    what grpo learns on the bed (`scheme_arms.reference_gain`): every row's `MDE / gain` is read against it,
    and `margin` defaults to `MARGIN_OF_GAIN` times it. Adjusted over its rows (`FAMILY`): each row has its
    raw and its adjusted word."""
    labels = set(scored["label"])
    arms = [(v, "component", v, REFERENCE) for v in VARIANTS if v in labels]
    if {RECALIBRATED, KL_IN_REWARD} <= labels:
        arms.append((RECALIBRATED, "recalibration", RECALIBRATED, KL_IN_REWARD))
    arms += [(c, "conflict", c, REFERENCE) for c in CONFLICTS if c in labels]
    arms += [(t, "trick", ALL_ON, f"-{t}") for t in TRICKS if f"-{t}" in labels]
    chosen = verdict_table.MARGIN_OF_GAIN * reference_gain if margin is None else margin
    rows = verdict_table.compare(scored, arms, margin=chosen, reference_gain=reference_gain)
    return multiplicity.adjust(rows, FAMILY)


def caption(verdict_rows: pd.DataFrame) -> str:
    """The ablation table's family line (`FAMILY`): the rows in it and its control."""
    return FAMILY.caption(multiplicity.family_size(verdict_rows))


def crashed(run: pd.DataFrame, steps: int) -> bool:
    """Whether a run of `steps` steps crashed early: it stopped, or logged a non-finite loss or
    reward, within its first `CRASH_STEPS` steps (all of them in a shorter run, such as a smoke run:
    `analysis.claim_checks.crashed_early` with the window cut to the run's length)."""
    window = min(CRASH_STEPS, steps)
    rows = run[run["reward"].notna() & (run["step"] < window)]
    return len(rows) < window or not np.isfinite(rows[["loss", "reward"]].to_numpy(dtype=float)).all()


def conflicts(result: SweepResult, settings: Profile) -> pd.DataFrame:
    """Per conflict and the base: what the document reports, the runs, those that failed and those
    that crashed early (`crashed`; a failed run counts as crashed)."""
    rows = []
    for label in (REFERENCE, *CONFLICTS):
        runs = result.runs[result.runs["label"] == label]
        failed = int((runs["status"] == "failed").sum())
        logs = result.metrics[result.metrics["label"] == label]
        early = sum(crashed(run, settings.steps) for _, run in logs.groupby("seed")) + failed
        conflict = CONFLICTS.get(label)
        rows.append(
            {
                "arm": label,
                "reported": conflict.reported if conflict else "(the study base)",
                "source": conflict.source if conflict else "",
                "runs": len(runs),
                "failed": failed,
                f"crashed within {CRASH_STEPS} steps": early,
            }
        )
    return pd.DataFrame(rows).set_index("arm")


def diagnostics(result: SweepResult, name: str) -> pd.DataFrame:
    """How many runs of each arm of part `name` each automatic diagnostic rule fired on
    (`run_failed` counts the runs that stopped with an error)."""
    runs = part(result, name).runs
    return robustness.rule_counts(robustness.run_findings(runs, ["label"]), runs, by="label")


def figure(verdict_rows: pd.DataFrame, kind: str, settings: Profile) -> plt.Figure:
    """The verdict rows of one `kind` ('component', 'conflict' or 'trick') as a forest plot."""
    titles = {
        "component": f"components of the objective vs {REFERENCE}",
        "conflict": f"conflicting tricks vs {REFERENCE}",
        "trick": "every trick on, then one left out",
    }
    if kind not in titles:
        raise ValueError(f"unknown kind {kind!r}; valid: {', '.join(titles)}")
    rows = verdict_rows[verdict_rows["kind"] == kind]
    return paired.forest(rows, f"{described(settings)}, {settings.steps} steps", titles[kind])


def figure_curves(result: SweepResult, name: str, settings: Profile) -> plt.Figure:
    """The `CURVES` of each arm of part `name` (the conflicts with the base beside them)."""
    labels = list(part(result, name).runs["label"].unique())
    if name == "conflicts":
        labels = [REFERENCE, *labels]
    metrics = result.metrics[result.metrics["label"].isin(labels)]
    shown = [m for m in CURVES if m in metrics]
    title = f"{name} on the {described(settings)}, {settings.steps} steps"
    return plots.curves(metrics, shown, by="label", smooth=SMOOTH, title=title)


KL_PLACEMENTS = (REFERENCE, KL_IN_REWARD, RECALIBRATED, "no KL")
"""the arms of the KL-placement figure: the KL in the loss (the base), in the reward (as it is, and
with the advantage normalization recalibrated), and off"""


def figure_kl_placement(result: SweepResult, settings: Profile) -> plt.Figure:
    """What moving the KL into the reward does to the signal (Evaluation guide §7), per step for the
    KL in the loss (the base), in the reward, in the reward with the advantage normalization
    recalibrated (`RECALIBRATED`), and off (`KL_PLACEMENTS`, those the runs have): the reward the
    advantage is computed from (the task's, plus the summed KL penalty where it sits in the reward:
    `kl_reward/mean`), the mean |advantage|, the share of groups whose task rewards are all equal,
    the mean |advantage| within those groups (0 for an advantage of the task reward alone: with the
    KL in the reward it is the KL's differences, normalized), and the exact KL to the reference; a
    panel names the arms whose runs did not log its metric; mean over each arm's seeds, trailing
    mean over `SMOOTH` steps."""
    metrics = part(result, "components").metrics  # the base is the first component
    arms = [a for a in KL_PLACEMENTS if a in set(metrics["label"])]
    metrics = metrics[metrics["label"].isin(arms)]
    train = metrics[metrics["reward"].notna()].copy()
    if "kl_reward/mean" in train:
        train["reward with the KL"] = train["rewards/correct/mean"] + train["kl_reward/mean"]
    panels = [
        ("rewards/correct/mean", "task reward per completion"),
        ("advantages/abs_mean", "mean |advantage| per completion"),
        ("frac_reward_zero_std", "groups whose task rewards are all equal (share)"),
        ("advantages/zero_std_abs_mean", "mean |advantage| in those groups"),
        ("kl/exact", "exact KL to the reference (nats per token)"),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.8))
    colours = dict(zip(KL_PLACEMENTS, ("black", "tab:red", "tab:orange", "tab:blue")))
    for ax, (metric, label) in zip(axes, panels):
        missing = []
        for arm in arms:
            runs = train[train["label"] == arm]
            if metric not in runs or runs[metric].isna().all():
                missing.append(arm)
                continue
            line = curve(runs, metric, smooth=SMOOTH)
            ax.plot(line["step"], line["mean"], color=colours[arm], label=arm)
            if (
                metric == "rewards/correct/mean"
                and "reward with the KL" in runs
                and runs["reward with the KL"].notna().any()
            ):
                shaped = curve(runs, "reward with the KL", smooth=SMOOTH)
                ax.plot(
                    shaped["step"],
                    shaped["mean"],
                    color=colours[arm],
                    ls="--",
                    label=f"{arm}: task + KL reward",
                )
        ax.set_title(label + (f"\nnot logged: {', '.join(missing)}" if missing else ""), fontsize=9)
        ax.set_xlabel("training step")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    counts = train.groupby("label")["seed"].nunique().reindex(arms).tolist()
    fig.suptitle(
        f"KL in the loss, in the reward (as it is and recalibrated), off: {described(settings)}, "
        f"{settings.steps} steps; mean over "
        f"{seeds_shown(counts)} seeds per line, trailing mean over {SMOOTH} steps",
        fontsize=10,
    )
    fig.tight_layout()
    return fig


def figure_stability(result: SweepResult, settings: Profile) -> plt.Figure:
    """Every stability figure of each component variant's runs, the base first."""
    components = part(result, "components")
    per_run = stability.table(components.metrics, by=["label"])
    order = list(components.runs["label"].unique())
    return stability.figure(
        per_run, "label", order, f"stability, {described(settings)}, {settings.steps} steps"
    )
