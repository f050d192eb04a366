"""Sweeps, ablations and sensitivity scans over seeds: each returns a `SweepResult`, one tidy
DataFrame of metrics (a row per run and step) plus a row per run (status, error, summary).

Execution options (keywords of every function here, see `execution.execute`): `workers`
(default one process per core; 1 trains in this process), `backend` ('local' or 'ray'), `address`
(Ray cluster), `progress`, `callbacks_factory`. Re-running a design trains only what is missing."""

import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from grpo_lab.config import Config
from grpo_lab.experiments.designs import Component, Point, ablation_points, grid_points
from grpo_lab.experiments.execution import execute
from grpo_lab.experiments.store import Outcome, run_dir
from grpo_lab.runlog import read_metrics, read_summary


@dataclass(frozen=True)
class SweepResult:
    metrics: pd.DataFrame
    """a row per run and step: label, the design's columns, seed, key (config hash), then the metrics"""
    runs: pd.DataFrame
    """a row per run: label, columns, seed, key, status ('loaded', 'trained' or 'failed'), error,
    seconds, path, then the fields of its summary.json"""

    @property
    def failures(self) -> pd.DataFrame:
        """The failed runs (their error.json holds the traceback)."""
        return self.runs[self.runs["status"] == "failed"]

    def counts(self) -> dict[str, int]:
        """Runs per status: {'loaded': n, 'trained': n, 'failed': n}."""
        found = self.runs["status"].value_counts()
        return {status: int(found.get(status, 0)) for status in ("loaded", "trained", "failed")}


def sweep(
    base: Config, grid: Mapping[str, Sequence[Any]], seeds: Iterable[int], root: str | Path, **options: Any
) -> SweepResult:
    """Every combination of `grid` (config field -> values; the key 'preset' takes preset names, each
    built with the base's own changes to its preset, see `designs.grid_points`) over `seeds`."""
    return run_design(grid_points(base, grid), seeds, root, **options)


def ablate(
    base: Config,
    components: Mapping[str, Component],
    seeds: Iterable[int],
    root: str | Path,
    mode: str = "leave-one-out",
    **options: Any,
) -> SweepResult:
    """An ablation over `components`, name -> (on_overrides, off_overrides) or name -> on_overrides
    (off: the Config defaults), e.g. `{"kl": ({"kl_coef": 0.04}, {"kl_coef": 0.0})}` or `presets.TRICKS`.
    'leave-one-out' switches each off from 'all' (every component on); 'add-one-in' switches each on
    from 'none' (see `designs.ablation_points`). The `component` column names the switched component."""
    return run_design(ablation_points(base, components, mode), seeds, root, **options)


def sensitivity(
    base: Config, param: str, values: Sequence[Any], seeds: Iterable[int], root: str | Path, **options: Any
) -> SweepResult:
    """One field `param` scanned over `values`; analyse with `stats.sensitivity_table` and
    `stats.failure_edges`."""
    return sweep(base, {param: values}, seeds, root, **options)


def run_design(
    points: Sequence[Point], seeds: Iterable[int], root: str | Path, **options: Any
) -> SweepResult:
    """Run every point of a design over `seeds` (finished runs are loaded) and collect the results;
    failures are recorded, listed in `failures` and reported with a warning."""
    seeds, root = list(seeds), Path(root).resolve()
    if not seeds:
        raise ValueError("need at least one seed")
    runs = [(point, point.config.replace(seed=s)) for point in points for s in seeds]
    outcomes = execute([config for _, config in runs], root, **options)
    result = collect(runs, outcomes, root)
    if len(result.failures):
        failed = "; ".join(f"{r.label} seed {r.seed}: {r.error}" for r in result.failures.itertuples())
        warnings.warn(f"{len(result.failures)} of {len(result.runs)} runs failed: {failed}", stacklevel=3)
    return result


def collect(
    runs: list[tuple[Point, Config]], outcomes: Mapping[str, Outcome], root: str | Path
) -> SweepResult:
    """The tidy metrics and the per-run table of runs executed under `root`."""
    frames, rows = [], []
    for point, config in runs:
        path = run_dir(config, root)
        outcome = outcomes[config.key()]
        ids = {"label": point.label, **point.columns, "seed": config.seed, "key": config.key()}
        rows.append(
            {
                **ids,
                "status": outcome.status,
                "error": outcome.error,
                "seconds": outcome.seconds,
                "path": str(path),
                **(read_summary(path) or {}),
            }
        )
        if outcome.status != "failed":
            frames.append(_with_ids(read_metrics(path), ids))
    empty = pd.DataFrame(columns=["label", *runs[0][0].columns, "seed", "key", "step"])
    metrics = pd.concat(frames, ignore_index=True) if frames else empty
    return SweepResult(metrics, pd.DataFrame(rows))


def _with_ids(frame: pd.DataFrame, ids: dict[str, Any]) -> pd.DataFrame:
    """`frame` with the identifying columns first (a swept field replaces a metric of the same name)."""
    rest = frame.drop(columns=list(ids), errors="ignore")
    first = pd.DataFrame({name: [value] * len(rest) for name, value in ids.items()}, index=rest.index)
    return pd.concat([first, rest], axis=1)  # one block: inserting column by column fragments the frame
