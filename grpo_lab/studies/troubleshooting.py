"""The Tricks review's troubleshooting (§4, `docs/sources.md`) as runnable scenarios (notebook 13):
each case the review describes is provoked on the study base (`comparisons.bed.base`), its diagnostic rule
(`analysis.diagnostics`) is read on the runs, and the remedy the review prescribes is run beside it,
paired on seeds.

- `SCENARIOS`: a fault (config over the base that should provoke the problem), the remedy (config
  over the fault, as the review words it), the rules that name the problem and the metric that shows
  it. A scenario whose fault does not provoke its problem (`table`: 'problem present' no) is inert:
  its fault needs retuning before its remedy means anything.
- `CONFLICT`: §4.3's three-configuration check of a trick against a reward term (the base, the base
  with the trick, the base with the reward term, and both), read as a 2x2 factorial: each alone and
  their interaction on the headline score and on the completion length; the loss components'
  gradient cosines are logged (`grad_cos_every`) so that `conflicting_objectives` can fire.
- `cosine_schemes`: each scheme of the scheme study whose loss carries a second component (a KL
  term) beside the base, with cosines logged: the clean runs on which `conflicting_objectives`'
  false alarms are counted (a scheme with one loss component logs no cosine).
- Left out: §4.1's loss above 1 with a large KL term. The review says it is not a fault (the loss adds
  a policy term and a KL term of different scales; follow the KL instead), and this bed cannot show
  it healthy: its reference is the policy's own start, so the KL term is the coefficient times a KL
  that the same coefficient holds down, and it grows only about as the coefficient's square root
  (`docs/studies.md`, "Troubleshooting scenarios", measures it and counts the stored losses above 1).

`settings` / `design` / `run` as in every study; `findings` (runs per rule), `table` (per scenario:
the problem present in the fault's runs and in the remedy's, the watched metric and the headline score
remedy minus fault), `conflict_table`, `figure`, and `detection` (the confusion table of every rule on
every arm: the base's row is each rule's false alarms here, a fault's row its detection of that case)."""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd

from grpo_lab.analysis import alarms, robustness
from grpo_lab.analysis.power import paired
from grpo_lab.analysis.scores import HEADLINE
from grpo_lab.analysis.stats import curve, seeds_shown
from grpo_lab.comparisons import scheme_arms
from grpo_lab.comparisons.bed import base, described
from grpo_lab.comparisons.cases import Scenario, registry
from grpo_lab.comparisons.point_sets import for_profile, variant_points
from grpo_lab.config import Config
from grpo_lab.experiments import SweepResult, run_design
from grpo_lab.experiments.designs import Point
from grpo_lab.presets import TRICKS
from grpo_lab.profiles import Budget, Profile

REFERENCE = "base"
"""the label of the study base, run beside every scenario"""


DRIFT: dict[str, Any] = {"learning_rate": 6e-5, "kl_coef": 0.004, "fault_reward_sigma": 1.0}
"""what makes the policy drift from the reference (§2.3: "too small a coefficient and the outputs drift
fast"): a KL coefficient a tenth of the base's at twice its learning rate, under a noisy reward (Gaussian
noise of sd 1, as the fault study's, `studies.fault_injection`), which keeps every group's rewards
apart and so keeps pushing the policy after the task's own signal is spent. Without the noise the push stops:
at learning rate 1e-4 and this coefficient the KL jumps within 10 steps and then stays level, because most
groups tie on reward (`docs/studies.md`, "Troubleshooting scenarios")"""
SCENARIOS = registry(
    {
        "KL rising without return": Scenario(
            "Tricks review §4.1",
            "KL keeps rising with no sign of falling back: the model drifts; raise the KL coefficient or "
            "lower the learning rate",
            DRIFT,
            remedy={"kl_coef": 0.04},
            rules=("kl_drift",),
            watch="kl/exact",
        ),
        "KL fluctuating violently": Scenario(
            "Tricks review §4.1",
            "KL swings from step to step: the groups' samples are unsteady; lower the sampling temperature",
            {"temperature": 1.5},
            remedy={"temperature": 0.8},
            rules=("kl_volatility",),
            watch="kl/exact",
        ),
        "entropy coefficient too large": Scenario(
            "Tricks review §4.2",
            "a collapse in mid-run from too large an entropy coefficient; set it to zero and the diversity "
            "comes back",
            {"entropy_coef": 0.05},
            remedy={"entropy_coef": 0.0},
            rules=("entropy_collapse", "entropy_rising", "template_collapse", "mode_collapse"),
            watch="entropy",
        ),
        "adaptive KL threshold too high": Scenario(
            "Tricks review §4.2",
            "the adaptive KL's threshold sits far above the safe range, so the coefficient reacts only after "
            "the policy has drifted; lower the threshold and slow the growth",
            {**DRIFT, "kl_schedule": "threshold", "kl_target": 1.0, "kl_growth": 0.2},
            remedy={"kl_target": 0.02, "kl_growth": 0.02},
            rules=("kl_drift",),
            watch="kl/exact",
        ),
    }
)
"""the review's §4 cases, each with its fault and remedy over the study base (the faults' strengths are
this module's choices, to be checked by 'problem present' in `table`)"""
REWARD_TERM: dict[str, Any] = {"rewards": ("correct", "verbose"), "reward_weights": (1.0, 0.5)}
"""§4.3's conflicting reward term: a format reward that pays for long answers (`tasks.hacking.verbose`)
beside the task's correctness"""
CONFLICT: dict[str, dict[str, Any]] = {
    "+ length_norm": dict(TRICKS["length_norm"]),
    "+ verbose reward": REWARD_TERM,
    "+ both": {**TRICKS["length_norm"], **REWARD_TERM},
}
"""§4.3's three-configuration check (with the base), plus both together: length normalization favours
short answers, the reward term long ones"""
GRAD_COS_EVERY = 5
"""steps between gradient-cosine measurements in the conflict check (a backward per loss component)"""
SMOKE_KEEP = 1
"""the smoke profile keeps only the first scenario and the first arm of the conflict check"""
FULL = Budget(seeds=(0, 1, 2), steps=100, eval_every=10)
"""under the full profile: 3 paired seeds of 100 steps, validated every 10 steps: the review's check
runs 500 steps per configuration; 100 is what a scenario needs for the trend rules (`kl_drift` reads
the last half of the run)"""


settings = FULL.settings
"""The study's profile: `FULL` under the full profile, the smoke profile's few otherwise."""


def scenarios(settings: Profile) -> dict[str, Scenario]:
    """`SCENARIOS` under the full profile; the first `SMOKE_KEEP` otherwise."""
    return for_profile(dict(SCENARIOS), settings, SMOKE_KEEP)


def conflict_arms(settings: Profile) -> dict[str, dict[str, Any]]:
    """`CONFLICT` under the full profile; the first `SMOKE_KEEP` otherwise."""
    return for_profile(dict(CONFLICT), settings, SMOKE_KEEP)


def cosine_schemes(settings: Profile) -> tuple[str, ...]:
    """The scheme study's schemes (`scheme_arms.compared`) other than the base's own whose loss has a KL
    term, so that the gradient of its policy term has a second component to be compared with."""
    return tuple(
        name
        for name in scheme_arms.compared(settings)
        if name != scheme_arms.REFERENCE and _kl_in_loss(base(settings, name))
    )


def _kl_in_loss(config: Config) -> bool:
    return config.kl_coef > 0 and config.kl_placement == "loss"


def cosines(label: str) -> str:
    """The label of `label`'s twin with gradient cosines logged."""
    return f"{label} (cosines)"


def labels(name: str, settings: Profile) -> tuple[str, str]:
    """The labels of a scenario's fault and remedy arms; a remedy that restores the base (the entropy
    coefficient back to 0) is the base's own runs, `REFERENCE`."""
    scenario = SCENARIOS[name]
    restored = base(settings).replace(**{**scenario.changes, **scenario.remedy}) == base(settings)
    return f"{name}: fault", REFERENCE if restored else f"{name}: remedy"


def variants(settings: Profile) -> dict[str, dict[str, Any]]:
    """Every arm but the base: each scenario's fault and remedy (the remedy over the fault, unless it
    restores the base: `labels`), and the
    conflict check's arms, which log gradient cosines (the base's twin with them is `REFERENCE +
    ' (cosines)'`, so the base itself stays the base of every other study)."""
    arms: dict[str, dict[str, Any]] = {}
    for name, scenario in scenarios(settings).items():
        fault, remedy = labels(name, settings)
        arms[fault] = dict(scenario.changes)
        if remedy != REFERENCE:
            arms[remedy] = {**scenario.changes, **scenario.remedy}
    logged = {"grad_cos_every": GRAD_COS_EVERY}
    arms[cosines(REFERENCE)] = logged
    arms |= {name: {**changes, **logged} for name, changes in conflict_arms(settings).items()}
    return arms


def design(settings: Profile) -> list[Point]:
    """The base (`REFERENCE`) and every arm of `variants`, on the study base; then each scheme of
    `cosine_schemes`, clean, with cosines logged (the clean runs of `conflicting_objectives`)."""
    points = variant_points(base(settings), variants(settings), REFERENCE)
    for name in cosine_schemes(settings):
        label = cosines(name)
        points.append(Point(label, {"variant": label}, base(settings, name, grad_cos_every=GRAD_COS_EVERY)))
    return points


def run(
    points: Sequence[Point], settings: Profile, root: str | Path | None = None, **options: Any
) -> SweepResult:
    """Train (or load) every point over the profile's seeds into `root` (default: the shared store);
    failures are recorded (a fault may break a run: that is a finding). `options` as for
    `experiments.run_design`."""
    return run_design(points, settings.seeds, settings.runs_dir() if root is None else root, **options)


def findings(result: SweepResult) -> pd.DataFrame:
    """How many runs of each arm each diagnostic rule fired on (rules as rows, arms as columns)."""
    runs = result.runs
    return robustness.rule_counts(robustness.run_findings(runs, ["label"]), runs, by="label")


def _fired(counts: pd.DataFrame, rules: Sequence[str], label: str) -> int:
    """The runs of `label` on which any of `rules` fired, at most its runs (a run counts once per rule,
    so the largest count is a lower bound and the sum an upper bound: the largest is shown)."""
    present = [r for r in rules if r in counts.index]
    if label not in counts.columns or not present:
        return 0
    return int(counts.loc[present, label].max())


def _per_run(result: SweepResult, label: str, fn: Any) -> pd.Series:
    metrics = result.metrics[result.metrics["label"] == label]
    return pd.Series({seed: fn(run) for seed, run in metrics.groupby("seed")}, dtype=float)


def _tail_mean(metric: str) -> Any:
    """A run's mean of `metric` over the training steps of its last half."""

    def of(run: pd.DataFrame) -> float:
        train = run.dropna(subset=[metric]) if metric in run else run.iloc[:0]
        if not len(train):
            return float("nan")
        return float(train.loc[train["step"] >= train["step"].max() / 2, metric].mean())

    return of


def table(result: SweepResult, settings: Profile) -> pd.DataFrame:
    """Per scenario: its source, its rules, on how many runs of the fault and of the remedy one fired
    (`fault fired`, `remedy fired`, out of `runs`), whether the problem is present (a rule fired on
    most fault runs: otherwise the scenario is inert), the watched metric over the last half of the
    runs for each arm and the paired headline-score effect of the remedy over the fault with its 95%
    interval."""
    counts = findings(result)
    rows = []
    for name, scenario in scenarios(settings).items():
        fault, remedy = labels(name, settings)
        n = int((result.runs["label"] == fault).sum())
        watched = _tail_mean(scenario.watch)
        score = paired(_per_run(result, remedy, HEADLINE.of), _per_run(result, fault, HEADLINE.of))
        fired = _fired(counts, scenario.rules, fault)
        rows.append(
            {
                "scenario": name,
                "source": scenario.source,
                "rules": ", ".join(scenario.rules),
                "runs": n,
                "fault fired": fired,
                "remedy fired": _fired(counts, scenario.rules, remedy),
                "problem present": bool(n and fired > n / 2),
                "watch": scenario.watch,
                "base watched": float(_per_run(result, REFERENCE, watched).mean()),
                "fault watched": float(_per_run(result, fault, watched).mean()),
                "remedy watched": float(_per_run(result, remedy, watched).mean()),
                "score effect": score.effect,
                "score ci_low": score.low,
                "score ci_high": score.high,
            }
        )
    return pd.DataFrame(rows)


def conflict_table(result: SweepResult, settings: Profile) -> pd.DataFrame:
    """§4.3's check: each arm of the conflict check against the base with cosines, paired on seeds, on
    the headline score and on the mean completion length over the last half of the runs, with the
    conflicting-objectives rule's count per arm."""
    reference = cosines(REFERENCE)
    counts = findings(result)
    length = _tail_mean("completions/mean_length")
    rows = []
    for arm in conflict_arms(settings):
        score = paired(_per_run(result, arm, HEADLINE.of), _per_run(result, reference, HEADLINE.of))
        longer = paired(_per_run(result, arm, length), _per_run(result, reference, length))
        rows.append(
            {
                "arm": arm,
                "seeds": score.n,
                "score effect": score.effect,
                "score ci_low": score.low,
                "score ci_high": score.high,
                "length effect": longer.effect,
                "length ci_low": longer.low,
                "length ci_high": longer.high,
                "conflicting_objectives fired": _fired(counts, ("conflicting_objectives",), arm),
            }
        )
    return pd.DataFrame(rows)


def arm_order(settings: Profile) -> list[str]:
    """The arms in reading order: the base, each scenario's fault then its remedy (a remedy that is the
    base is not repeated), the conflict check's base with cosines and its arms, the other schemes
    with cosines."""
    order = [REFERENCE]
    for name in scenarios(settings):
        order += [label for label in labels(name, settings) if label not in order]
    return order + [cosines(REFERENCE), *conflict_arms(settings), *map(cosines, cosine_schemes(settings))]


def detection(result: SweepResult, settings: Profile) -> tuple[plt.Figure, pd.DataFrame]:
    """The confusion table of the diagnostics over this study's arms (`analysis.alarms.confusion`, in
    `arm_order`): the share of each arm's runs each rule fired on. The base's row is each rule's false
    alarms on this design; a fault's row is its detection of that case, read on the scenario's own
    `rules`; a remedy's row says whether the rule goes quiet. A failed run has no logs to read and is
    left out of its row's n. Figure and table."""
    title = f"rules that fired per arm ({described(settings)}, {settings.steps} steps)"
    return alarms.detection(result.runs, "label", arm_order(settings), title)


def figure(result: SweepResult, settings: Profile) -> plt.Figure:
    """One panel per scenario: its watched metric per step for the base, the fault and the remedy (mean
    over seeds), titled with the runs its rules fired on; then the conflict check's completion length
    per arm."""
    chosen = scenarios(settings)
    counts = findings(result)
    panels = len(chosen) + 1
    fig, axes = plt.subplots(1, panels, figsize=(4.2 * panels, 3.6), squeeze=False)
    metrics = result.metrics[result.metrics["reward"].notna()]
    for ax, (name, scenario) in zip(axes[0], chosen.items()):
        fault, remedy = labels(name, settings)
        for label, colour in ((REFERENCE, "black"), (fault, "tab:red"), (remedy, "tab:green")):
            runs = metrics[metrics["label"] == label]
            if scenario.watch not in runs or runs[scenario.watch].isna().all():
                continue
            line = curve(runs, scenario.watch, smooth=5)
            ax.plot(line["step"], line["mean"], color=colour, label=label.split(": ")[-1])
        n = int((result.runs["label"] == fault).sum())
        ax.set_title(
            f"{name} ({scenario.source})\nrules fired: fault {_fired(counts, scenario.rules, fault)} of {n}, "
            f"remedy {_fired(counts, scenario.rules, remedy)} of {n}",
            fontsize=8,
        )
        ax.set_xlabel("training step")
        ax.set_ylabel(scenario.watch)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    ax = axes[0][-1]
    for arm in [cosines(REFERENCE), *conflict_arms(settings)]:
        runs = metrics[metrics["label"] == arm]
        if len(runs):
            line = curve(runs, "completions/mean_length", smooth=5)
            ax.plot(line["step"], line["mean"], label=arm)
    ax.set_title("§4.3 check: a trick against a reward term", fontsize=8)
    ax.set_xlabel("training step")
    ax.set_ylabel("completion length (tokens)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    seeds = result.runs.groupby("label")["seed"].nunique().tolist()
    fig.suptitle(
        f"the Tricks review's troubleshooting on the {described(settings)}, {settings.steps} steps: "
        f"mean over {seeds_shown(seeds)} seeds per line, trailing mean over 5 steps",
        fontsize=10,
    )
    fig.tight_layout()
    return fig
