"""The pilot that fixes the long horizon (Evaluation guide §6.5: cover the phase where entropy clearly
falls), shared by 05 (which runs and draws it) and 15 (which compares every scheme at the horizon it
fixes): the study bed at its own learning rate over seeds, long, validated from step 0.

`pilot_settings` / `pilot_design` give its runs; `pilot` reads the horizon from them (the later of
the entropy's fall and the headline's knee, rounded up to `HORIZON_ROUND`), and `stored_horizon` reads
it from a run store. `PARAM` and `SMOOTH` are the column and the curve smoothing both notebooks use."""

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from grpo_lab.analysis import horizon, stats
from grpo_lab.analysis.scores import GREEDY, HEADLINE
from grpo_lab.comparisons.bed import base
from grpo_lab.experiments.designs import Point, grid_points
from grpo_lab.experiments.store import is_current, run_dir
from grpo_lab.profiles import Budget, Profile
from grpo_lab.runlog import read_metrics

PARAM = "learning_rate"
SMOOTH = 10
"""training curves: trailing mean over this many logged steps (validation is never smoothed)"""
PILOT = Budget(seeds=(0, 1, 2), steps=1000, eval_every=20)
"""the pilot that fixes the long horizon (Evaluation guide §6.5: cover the phase where entropy clearly
falls): the study base at its own learning rate over 3 seeds and 1000 steps, validated every 20 steps
from step 0 so that the curve shows when a run turns"""
ENTROPY_FALL = 0.4
"""the entropy must have fallen by this share of its start (trailing mean over `FALL_WINDOW` steps)"""
FALL_WINDOW = 20
"""logged steps of the trailing mean that decides the entropy's fall"""
KNEE_REACH = 0.9
"""the knee of the headline's across-seed curve: the first evaluation at this share of its rise from
step 0 to its maximum (`analysis.horizon.knee`)"""
PASSED = 0.8
"""the pilot has passed the knee only if the knee lies within this share of its steps (the rest of the
run then shows the curve after it)"""
HORIZON_ROUND = 100
"""the horizon is the later of the median fall step and the knee, rounded up to a multiple of this"""


def pilot_settings(profile: str, seeds: Sequence[int] | None = None, steps: int | None = None) -> Profile:
    """The pilot's profile: `PILOT` under the full profile, the smoke profile's few otherwise."""
    return PILOT.settings(profile, seeds, steps)


def pilot_design(settings: Profile) -> list[Point]:
    """The study base at its own learning rate (the column `learning_rate` names it)."""
    study_base = base(settings)
    return grid_points(study_base, {PARAM: [study_base.learning_rate]})


def pilot(metrics: pd.DataFrame) -> tuple[pd.DataFrame, int | None]:
    """What fixes the horizon, from the pilot's runs: per seed, the entropy's start, the step where its
    trailing mean has fallen by `ENTROPY_FALL` and its end ratio; then the knee, peak step, first,
    peak and last value of the across-seed mean of the headline metric and of greedy accuracy
    (`analysis.horizon.knee`). The horizon is the later of the median fall step and the headline's
    knee, rounded up to `HORIZON_ROUND`; None when the entropy never fell that far or the knee lies
    beyond `PASSED` of the pilot's steps (the pilot is then too short to fix one)."""
    fall = horizon.fall_step(metrics, "entropy", fall=ENTROPY_FALL, window=FALL_WINDOW)
    fall.insert(0, "reading", "entropy")
    knees = []
    for metric in (HEADLINE.metric, GREEDY.metric):
        mean = stats.curve(metrics, metric)
        knees.append(
            {"reading": metric, "runs": int(mean["n"].max()), **horizon.knee(mean, reach=KNEE_REACH)}
        )
    table = pd.concat([fall, pd.DataFrame(knees)], ignore_index=True)
    fall_at, knee_at = fall["fall_step"].median(), knees[0]["knee_step"]
    if pd.isna(fall_at) or pd.isna(knee_at) or knee_at > PASSED * metrics["step"].max():
        return table, None
    return table, int(-(-max(fall_at, knee_at) // HORIZON_ROUND) * HORIZON_ROUND)


def stored_horizon(settings: Profile, root: str | Path | None) -> int | None:
    """The horizon the pilot's runs under `settings` fix (`pilot`), read from the store `root`; None
    when any of them is not current there (or `root` is None) or the pilot fixes none."""
    if root is None:
        return None
    frames = []
    for point in pilot_design(settings):
        for seed in settings.seeds:
            path = run_dir(point.config.replace(seed=seed), root)
            if not is_current(path):
                return None
            frames.append(read_metrics(path).assign(seed=seed, **point.columns))
    return pilot(pd.concat(frames, ignore_index=True))[1]
