"""The timed cost runs, shared by 08 (which draws them), 09 (whose cost claims read them) and 12 (whose
verdict table's `cost x` column is their step-time multiple): each scheme and training trick as
multiples of the baseline GRPO step, Evaluation guide §4.7 Cost structure ("recorded as relative
multiples from controlled runs, never invented").

Timing in a process pool is noisy (two runs share the cores), so cost runs are trained here, one
after the other in this process on one torch thread, in interleaved rounds (round r runs every
configuration once with seed r, so slow periods of the machine spread over all of them; every other
round runs them in reverse order, so a load that drifts steadily over a pair of rounds weighs as much
on the first configurations as on the last: `timing_order`), and the first step of each run
(one-off warm-up) is left out. Peak memory is the peak over the run of the process's resident memory
(CUDA: allocated memory), reset before each run and reported above the memory the process held
before it.

`settings` / `design` / `run` as in every study, but `run` trains in this process, one run after the
other, instead of in the pool, and the seeds are the rounds; `multiples` reads a run's cost as a
multiple of the baseline's."""

import ctypes
import gc
import json
import math
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from grpo_lab.analysis.plots import project_root
from grpo_lab.analysis.stats import effect_interval
from grpo_lab.comparisons.bed import base as study_base
from grpo_lab.comparisons.trick_arms import CONFLICTS
from grpo_lab.config import Config
from grpo_lab.experiments.designs import Point, grid_points, preset_overrides
from grpo_lab.experiments.store import BEHAVIOUR, ensure, is_current, refuse_training, run_dir
from grpo_lab.presets import TRICKS, preset
from grpo_lab.profiles import Budget, Profile
from grpo_lab.runlog import read_json_record, read_metrics, seal, write_json_atomic
from grpo_lab.threads import torch_threads
from grpo_lab.training.trainer import train

BASELINE = "grpo"
SCHEMES = (
    "grpo",
    "bnpo",
    "dr_grpo",
    "dapo_loss",
    "lite_ppo",
    "gspo",
    "gspo_token",
    "cispo",
    "sapo",
    "gmpo",
    "gpg",
    "rloo",
    "reinforce_pp",
    "scheme_a",
    "scheme_b",
    "scheme_c",
)
"""the named methods (presets) whose cost is measured"""
SMOKE_SCHEMES = ("grpo", "dr_grpo")
SMOKE_TRICKS = ("learnable_temperature", "temperature_noise")
FULL = Budget(seeds=(0, 1, 2), steps=6, val_size=8)
"""under the full profile: 3 interleaved rounds (the fewest any verdict rests on, `power.MIN_SEEDS`,
so 09's cost claims can be decided) of 6 steps per configuration (the first is dropped:
five timed steps per round), validated only at the ends (outside the timed steps; cost runs are not
scored) on 8 prompts"""
RESTING_FILE = "cost.json"
"""written into a cost run's directory: the process memory before the run started (MB)"""
PEAK_OVER_REST = "cost/peak_over_rest_mb"


settings = FULL.settings
"""The cost study's profile: `FULL` under the full profile, the smoke profile's few steps
otherwise, validated only at the ends on at most 8 prompts; its seeds are the interleaved rounds
(`seeds` and `steps` as the notebook sets them)."""


def base_config(settings: Profile) -> Config:
    """The study base (`comparisons.bed.base`) under the cost profile (`settings`)."""
    return study_base(settings)


def points(
    base: Config,
    schemes: Sequence[str],
    tricks: Sequence[str],
    all_tricks: bool = True,
    conflicts: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[Point]:
    """The cost design: each scheme (preset, with the base's own changes), each trick switched on
    over the base (`presets.TRICKS`), each of `conflicts` (name -> its changes over the base), and
    every trick at once (`all_tricks`). The `kind` column says which ('scheme', 'trick' or
    'conflict'); a conflict whose changes are a trick's is the same run, timed once."""
    unknown = sorted(set(tricks) - set(TRICKS))
    if unknown:
        raise ValueError(f"unknown trick(s) {unknown}; valid: {', '.join(TRICKS)}")
    design = [
        Point(p.label, {"kind": "scheme"}, p.config) for p in grid_points(base, {"preset": list(schemes)})
    ]
    design += [Point(name, {"kind": "trick"}, base.replace(**TRICKS[name])) for name in tricks]
    design += [
        Point(name, {"kind": "conflict"}, base.replace(**changes))
        for name, changes in (conflicts or {}).items()
    ]
    if all_tricks:
        design.append(Point("all_tricks", {"kind": "trick"}, preset("all_tricks", **preset_overrides(base))))
    return design


def design(settings: Profile) -> list[Point]:
    """Every scheme, trick and named conflict (`trick_arms.CONFLICTS`), and all tricks at once, under
    the full profile; two schemes and two tricks under any other, on the study base of `settings`."""
    base = base_config(settings)
    if settings.name == "full":
        conflicts = {name: conflict.changes for name, conflict in CONFLICTS.items()}
        return points(base, SCHEMES, list(TRICKS), conflicts=conflicts)
    return points(base, SMOKE_SCHEMES, SMOKE_TRICKS, all_tricks=False)


def run(design: Sequence[Point], settings: Profile, root: str | Path | None = None) -> pd.DataFrame:
    """Train every point of `design` once per seed of `settings` (a round per seed, rounds
    interleaved) in this process on one torch thread, after an unrecorded warm-up run; finished runs
    under `root` (default: the shared store) are loaded, not re-measured. Returns the tidy metrics
    (label, the point's columns, seed, then a row per step) with `cost/peak_over_rest_mb`, the run's
    peak memory above what the process held before it (NaN where that is unknown)."""
    seeds = settings.seeds
    if not seeds:
        raise ValueError("need at least one seed (round)")
    root = Path(settings.runs_dir() if root is None else root).resolve()
    pending = [c for c in timing_order(design, seeds) if not is_current(run_dir(c, root))]
    refuse_training(pending, root)
    with torch_threads(1):  # as in a pool worker; not Config.torch_threads, which changes the run's key
        if pending:  # the first run of a process also pays for lazy loading: do it once, unrecorded
            train(pending[0].replace(steps=2, eval_every=2), out=None)
        for config in pending:
            if not is_current(run_dir(config, root)):  # a design may list one config twice
                resting = reset_peak_memory()
                ensure(config, root)
                write_json_atomic(run_dir(config, root) / RESTING_FILE, {"resting_mb": resting})
                seal(run_dir(config, root), BEHAVIOUR)  # the manifest covers the resting memory too
    frames = []
    for seed in seeds:
        for point in design:
            path = run_dir(point.config.replace(seed=seed), root)
            frame = read_metrics(path).assign(label=point.label, seed=seed, **point.columns)
            frame[PEAK_OVER_REST] = frame["cost/peak_rss_mb"] - _resting(path)
            frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def timing_order(design: Sequence[Point], seeds: Sequence[int]) -> list[Config]:
    """The runs in the order they are timed: a round per seed, the design's order in the first round
    and reversed in the next, and so on."""
    rounds = [design if i % 2 == 0 else design[::-1] for i in range(len(seeds))]
    return [p.config.replace(seed=s) for s, points in zip(seeds, rounds) for p in points]


def reset_peak_memory() -> float:
    """Reset the peak-memory counter the trainer reads and return the memory held now (MB): CUDA's
    allocator peak on GPU; on Linux the process's peak resident set (writing 5 to
    /proc/self/clear_refs resets it, and getrusage's ru_maxrss with it), after returning freed heap
    to the system. NaN, with a warning, where the peak cannot be reset."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
        return torch.cuda.memory_allocated() / 2**20
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)  # glibc keeps freed memory resident otherwise
        Path("/proc/self/clear_refs").write_text("5")
        status = Path("/proc/self/status").read_text().splitlines()
    except (OSError, AttributeError):
        warnings.warn(
            "peak memory cannot be reset on this platform: memory multiples are left out", stacklevel=2
        )
        return math.nan
    rss_kb = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return rss_kb / 1024


def _resting(path: Path) -> float:
    record = read_json_record(path, RESTING_FILE)
    return math.nan if record is None else float(record["resting_mb"])


def timed(df: pd.DataFrame) -> pd.DataFrame:
    """The training steps that count for cost: every run's steps but its first (warm-up)."""
    return df[df["reward"].notna() & (df["step"] > 0)]


def per_run(df: pd.DataFrame, column: str) -> pd.DataFrame:
    """One value of a cost column per run (label, seed): its mean over the timed steps, or its
    maximum for a peak."""
    runs = timed(df).groupby(["label", "seed"])[column]
    return (runs.max() if column.startswith("cost/peak") else runs.mean()).reset_index()


def multiples(df: pd.DataFrame, column: str = "time/step_s", confidence: float = 0.95) -> pd.DataFrame:
    """Per configuration: `column` as a multiple of the baseline's, with a Welch t-interval of the
    ratio of run means over the rounds (`stats.effect_interval`, 'relative', plus one)."""
    runs = per_run(df, column)
    if BASELINE not in set(runs["label"]):
        raise ValueError(f"the cost design has no {BASELINE!r} run to compare against")
    reference = runs.loc[runs["label"] == BASELINE, column].to_numpy()
    rows = []
    for label in dict.fromkeys(df["label"]):  # design order
        group = runs[runs["label"] == label]
        point, lo, hi = effect_interval(group[column].to_numpy(), reference, "relative", confidence)
        rows.append({"label": label, "multiple": 1 + point, "lo": 1 + lo, "hi": 1 + hi, "n": len(group)})
    return pd.DataFrame(rows)


QUIET = ("docs/bench/arms_schemes.json", "docs/bench/arms_tricks.json")
"""the committed `grpo-lab bench --arms-of schemes|tricks --json` reports, relative to the checkout: every
arm timed side by side with grpo in one run on a quiet machine (`bench.arms`)"""


def quiet_multiples(paths: Sequence[str | Path] | None = None) -> pd.DataFrame:
    """Per arm of the quiet bench reports (`QUIET` under the checkout by default; a report that is not
    there is skipped): its step time as a multiple of the report's first arm (grpo), columns `label`,
    `multiple`, `report`. An arm in two reports keeps the first's."""
    rows = []
    for path in [project_root() / p for p in QUIET] if paths is None else map(Path, paths):
        if not Path(path).exists():
            continue
        report = json.loads(Path(path).read_text())
        if report.get("reference") != BASELINE:
            raise ValueError(
                f"{path}: a quiet report must time every arm against {BASELINE!r}, "
                f"not {report.get('reference')!r}"
            )
        rows += [
            {"label": r["arm"], "multiple": float(r["ratio"]), "report": str(path)} for r in report["rows"]
        ]
    return pd.DataFrame(rows, columns=["label", "multiple", "report"]).drop_duplicates("label")
