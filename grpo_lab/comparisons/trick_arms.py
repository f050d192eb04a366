"""The ablation arms on the study bed, shared by the studies of 02 (which draws them), 08 (which times
the named conflicts) and 12 (whose verdict table reads the conflicts and the leave-one-out), arms
paired on seeds:

- the components of the objective (`VARIANTS`, one change each over the bed, and `RECALIBRATED`, the
  Evaluation guide's §7 remedy for the KL in the reward) against the bed (`REFERENCE`);
- the two combinations the Tricks review names as conflicts (`CONFLICTS`), each against the bed; a
  conflict's failed run is the outcome measured, not an error;
- the tricks' leave-one-out (every trick on, `ALL_ON`, then each left out), for the tricks the
  factorial screen (`comparisons.screen`) finds active (`confirmed`).

`settings` / `design` / `run` as in every study, `part` / `scores` for its results, and `allowance`
for the runs `grpo-lab plan` counts before the screen has chosen the tricks."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from grpo_lab.analysis.claim_checks import CRASH_STEPS
from grpo_lab.analysis.verdict_table import BETTER, WORSE
from grpo_lab.comparisons import paired, screen
from grpo_lab.comparisons.bed import base
from grpo_lab.comparisons.point_sets import for_profile, variant_points
from grpo_lab.config import Config
from grpo_lab.experiments import SweepResult
from grpo_lab.experiments.designs import Point, ablation_points
from grpo_lab.presets import TRICKS
from grpo_lab.profiles import Budget, Profile

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
(`comparisons.screen`) calls better or worse, the largest effects first"""


settings = FULL.settings
"""The study's profile: `FULL` under the full profile, the smoke profile's few otherwise;
`seeds` and `steps` as the notebook sets them."""


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
