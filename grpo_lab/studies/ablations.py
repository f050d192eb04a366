"""The ablation study (notebook 02), three designs on the study base (`studies.base`), arms paired
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

The factorial screen of the trick factors is `studies.screen`, a study of its own in the same
notebook. `settings` / `design` / `run`, then the measures (`scores`, `table`, `conflicts`,
`diagnostics`) and the figures (`figure`, `figure_curves`, `figure_stability`)."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from grpo_lab.analysis import plots, robustness, stability, verdicts
from grpo_lab.analysis.claims import CRASH_STEPS
from grpo_lab.analysis.power import BETTER, WORSE
from grpo_lab.analysis.stats import curve, seeds_shown
from grpo_lab.config import Config
from grpo_lab.experiments import SweepResult
from grpo_lab.experiments.designs import Point, ablation_points
from grpo_lab.presets import TRICKS
from grpo_lab.profiles import Budget, Profile
from grpo_lab.studies import paired, screen
from grpo_lab.studies.base import base, described
from grpo_lab.studies.designs import for_profile, variant_points

REFERENCE = "grpo"
"""the label of the study base: the reference of the components and of the conflicts"""
ALL_ON = "all"
"""the leave-one-out reference: every trick on"""
VARIANTS: dict[str, dict[str, Any]] = {
    "no KL": {"kl_coef": 0.0, "kl_placement": "off", "kl_monitor": True},
    "no clipping": {"surrogate": "no_clip"},
    "KL in reward": {"kl_placement": "reward"},
}
"""the components of the objective, each changed alone over the base (the KL estimators are 07's
study, `studies.kl_estimators`); the arm without a KL term logs the exact KL to the reference all the
same (`kl_monitor`), so that its KL can be drawn beside the others'"""
KL_IN_REWARD = "KL in reward"
"""the component that moves the KL into the reward"""
RECALIBRATED = "KL in reward, recalibrated"
"""the Evaluation guide's §7 remedy, run over `KL_IN_REWARD` and judged against it alone: the
advantage's group mean subtracted as before, but divided by the batch's std (`lite_ppo`'s
normalization) where grpo divides by each group's, so that a group whose task rewards are all equal
keeps its KL differences at their own small scale instead of being raised to the unit scale of a
real signal"""
RECALIBRATION: dict[str, Any] = {**VARIANTS[KL_IN_REWARD], "advantage": "lite_ppo"}
"""the config fields `RECALIBRATED` sets over the base"""


@dataclass(frozen=True)
class Conflict:
    """A combination of tricks a document reports to break training, run over the base."""

    changes: Mapping[str, Any]
    """the config fields it sets over the base"""
    source: str
    """document and section (as docs/sources.md names them)"""
    reported: str
    """what the document says happens"""


CONFLICTS: dict[str, Conflict] = {
    "batch norm on group norm": Conflict(
        TRICKS["batch_reward_norm"],
        "Tricks review §2.2 PPO tricks ported to GRPO",
        "a U-shaped, unstable curve",
    ),
    "group norm + dynamic KL + length norm": Conflict(
        {**TRICKS["dynamic_kl"], **TRICKS["length_norm"]},
        "Tricks review §2.1 Length normalization",
        f"a crash within {CRASH_STEPS} steps",
    ),
}
"""the named conflicts, each paired against the base (whose advantage is grpo's group normalization)"""
PARTS = ("components", "conflicts", "tricks")
"""the `part` column of the design: which of the three designs a point belongs to"""
SMOKE_VARIANTS = 1
"""the smoke profile changes only the first this many components"""
SMOKE_TRICKS = 2
"""the smoke profile's leave-one-out covers the first this many tricks (the same in 02 and 12)"""
FULL = Budget(seeds=(0, 1, 2), steps=60, eval_every=5, scored_tail=True)
"""under the full profile: 3 paired seeds of 60 steps, validated every 5 steps in the scored tail
(the headline score's run; the base's runs are the schemes' grpo runs): the conflicts report large
effects (a crash, an unstable curve), which the sequential rule decides at its first look, and the
leave-one-out confirms what the screen finds (`docs/studies.md`, "Sizing the full profile")"""
CONFIRM = 2
"""under the full profile the leave-one-out confirms at most this many tricks: those the screen
(`studies.screen`) calls better or worse, the largest effects first"""
CURVES = ("val/accuracy", "reward", "kl/exact", "entropy", "clip_ratio/region_mean", "grad_norm")
"""the metrics drawn against the step"""
SMOOTH = 5
"""training curves: trailing mean over this many logged steps"""


def settings(profile: str, seeds: Sequence[int] | None = None, steps: int | None = None) -> Profile:
    """The study's profile: `FULL` under the full profile, the smoke profile's few otherwise;
    `seeds` and `steps` as the notebook sets them."""
    return FULL.settings(profile, seeds, steps)


def variants(settings: Profile) -> dict[str, dict[str, Any]]:
    """`VARIANTS` under the full profile; the first `SMOKE_VARIANTS` under any other."""
    return for_profile(VARIANTS, settings, SMOKE_VARIANTS)


def tricks(settings: Profile) -> list[str]:
    """The tricks the leave-one-out covers. Under the full profile: the tricks the screen found
    active (`confirmed`), none until the screen is in the store; the first `SMOKE_TRICKS` of
    `presets.TRICKS` otherwise."""
    if settings.name == "full":
        return confirmed(screen.stored_effects(settings.name))
    return for_profile(list(TRICKS), settings, SMOKE_TRICKS)


def confirmed(effects: pd.DataFrame | None) -> list[str]:
    """The tricks of `presets.TRICKS` the screen calls better or worse (`screen.main_effects`: an
    interval that excludes 0 around an effect beyond the margin; one within it is 'smaller than the
    margin' and not worth confirming), at most `CONFIRM`, the largest effects first; none without
    the screen's effects."""
    if effects is None:
        return []
    active = effects[effects["verdict"].isin([BETTER, WORSE]) & effects["factor"].isin(list(TRICKS))]
    ranked = active.assign(size=active["effect"].abs()).sort_values("size", ascending=False)
    return list(ranked["factor"])[:CONFIRM]


def allowance(settings: Profile) -> list[Config]:
    """What `grpo-lab plan` counts for the leave-one-out runs not yet chosen: under the full profile,
    while the screen is not in the store, `CONFIRM` leave-one-out arms (the first tricks of
    `presets.TRICKS` stand in for their cost) over the seeds; nothing otherwise."""
    if settings.name != "full" or screen.stored_effects(settings.name) is not None:
        return []
    stand_ins = [p for p in trick_points(settings, list(TRICKS)[:CONFIRM]) if p.label != ALL_ON]
    return [p.config.replace(seed=seed) for p in stand_ins for seed in settings.seeds]


def component_points(settings: Profile) -> list[Point]:
    """The base (`REFERENCE`), then each component variant, then `RECALIBRATED` where the variants
    include the one it recalibrates (`KL_IN_REWARD`)."""
    changes = variants(settings)
    if KL_IN_REWARD in changes:
        changes = {**changes, RECALIBRATED: RECALIBRATION}
    points = variant_points(base(settings), changes, REFERENCE)
    return [Point(p.label, {"part": "components", "arm": p.label}, p.config) for p in points]


def conflict_points(settings: Profile) -> list[Point]:
    """Each conflict of `CONFLICTS` over the base (the base itself is the components' reference)."""
    return [
        Point(name, {"part": "conflicts", "arm": name}, base(settings, **conflict.changes))
        for name, conflict in CONFLICTS.items()
    ]


def trick_points(settings: Profile, names: Sequence[str] | None = None) -> list[Point]:
    """Every trick of `presets.TRICKS` on over the base ('all'), then each trick of `names` (default:
    `tricks(settings)`) left out ('-name')."""
    chosen = tricks(settings) if names is None else list(names)
    unknown = sorted(set(chosen) - set(TRICKS))
    if unknown:
        raise ValueError(f"unknown trick(s) {unknown}; valid: {', '.join(TRICKS)}")
    wanted = {ALL_ON, *(f"-{t}" for t in chosen)}
    points = [p for p in ablation_points(base(settings), TRICKS, "leave-one-out") if p.label in wanted]
    return [Point(p.label, {"part": "tricks", "arm": p.label}, p.config) for p in points]


def design(settings: Profile) -> list[Point]:
    """The three designs in one: components (with the base), conflicts, tricks; the `part` column
    says which, `arm` names the point."""
    return component_points(settings) + conflict_points(settings) + trick_points(settings)


def run(
    points: Sequence[Point], settings: Profile, root: str | Path | None = None, **options: Any
) -> SweepResult:
    """Train (or load) the design over the profile's seeds into `root` (default: the profile's run
    store). A failed run of a component or a trick arm is an error (a verdict needs every arm); a
    conflict's failed run is recorded: a crash is what the document reports. `options` as for
    `experiments.run_design`."""
    return paired.run(points, settings, root, may_fail=CONFLICTS, **options)


def part(result: SweepResult, name: str) -> SweepResult:
    """The runs of one part of the design ('components', 'conflicts' or 'tricks')."""
    if name not in PARTS:
        raise ValueError(f"unknown part {name!r}; valid: {', '.join(PARTS)}")
    return SweepResult(
        result.metrics[result.metrics["part"] == name], result.runs[result.runs["part"] == name]
    )


def scores(result: SweepResult) -> pd.DataFrame:
    """One row per finished run with its scores; the runs with every trick on also carry every
    trick's activity measure (where each trick is on)."""
    labels = set(result.runs["label"])
    return paired.scores(result, {ALL_ON: [t for t in TRICKS if f"-{t}" in labels]})


def table(scored: pd.DataFrame, margin: float | None = None) -> pd.DataFrame:
    """The verdict rows: each component variant and each conflict against the base (a conflict only
    where some of its runs finished), then each trick (all on against all but that one), paired on
    seeds; `RECALIBRATED` against `KL_IN_REWARD` (kind 'recalibration': the normalization alone).
    The `kind` column says which ('component', 'recalibration', 'conflict', 'trick'); `margin` as for
    `analysis.verdicts.compare` (None: a share of the reference's gain)."""
    labels = set(scored["label"])
    arms = [(v, "component", v, REFERENCE) for v in VARIANTS if v in labels]
    if {RECALIBRATED, KL_IN_REWARD} <= labels:
        arms.append((RECALIBRATED, "recalibration", RECALIBRATED, KL_IN_REWARD))
    arms += [(c, "conflict", c, REFERENCE) for c in CONFLICTS if c in labels]
    arms += [(t, "trick", ALL_ON, f"-{t}") for t in TRICKS if f"-{t}" in labels]
    return verdicts.compare(scored, arms, margin=margin)


def reference_gain(scored: pd.DataFrame) -> float:
    """grpo's gain on the study base in the headline score (`analysis.verdicts.gain` over the base's
    runs, `REFERENCE`, of `scores`): the gain the screen's margin and `MDE / gain` are read against
    (`screen.main_effects`); an error without those runs."""
    base_runs = scored[scored["label"] == REFERENCE]
    if base_runs.empty:
        raise ValueError(
            f"no runs of the base {REFERENCE!r} among the scored labels {sorted(set(scored['label']))}"
        )
    return verdicts.gain(base_runs)


def crashed(run: pd.DataFrame, steps: int) -> bool:
    """Whether a run of `steps` steps crashed early: it stopped, or logged a non-finite loss or
    reward, within its first `CRASH_STEPS` steps (all of them in a shorter run, such as a smoke run:
    `analysis.claims.crashed_early` with the window cut to the run's length)."""
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


def figure(verdict_table: pd.DataFrame, kind: str, settings: Profile) -> plt.Figure:
    """The verdict rows of one `kind` ('component', 'conflict' or 'trick') as a forest plot."""
    titles = {
        "component": f"components of the objective vs {REFERENCE}",
        "conflict": f"conflicting tricks vs {REFERENCE}",
        "trick": "every trick on, then one left out",
    }
    if kind not in titles:
        raise ValueError(f"unknown kind {kind!r}; valid: {', '.join(titles)}")
    rows = verdict_table[verdict_table["kind"] == kind]
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
