"""The run store: one directory per run under a root, named by the hash of the full config (and of
the embedded model's build, when it is the model, and of the task file's content, for `file:PATH`
tasks). Asking
again for a finished run (one with summary.json) loads it instead of training; a directory without
summary.json (an interrupted or failed attempt) is discarded and trained again. A failure is
recorded in the run's error.json (type, message, traceback) instead of being raised."""

import hashlib
import json
import shutil
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from grpo_lab.config import Config
from grpo_lab.models.embedded import build_lock, embedded_dir
from grpo_lab.runlog import is_finished, read_metrics, write_json_atomic
from grpo_lab.tasks import task_fingerprint

ERROR = "error.json"

CallbacksFactory = Callable[[Config, Path], Sequence[Any]]
"""(config, run directory) -> the trainer callbacks of that run; a module-level function, so that it
can be sent to worker processes (see grpo_lab.tracking.tensorboard_callbacks)"""


@dataclass(frozen=True)
class Outcome:
    """What became of one run of a sweep."""

    key: str
    """the config's hash"""
    status: Literal["loaded", "trained", "failed"]
    """'loaded' (found finished in the store), 'trained' (by this attempt) or 'failed' (error.json)"""
    error: str | None = None
    """'Type: message' of a failure"""
    seconds: float = 0.0
    """wall time of this attempt (0 for a loaded run)"""


def run_dir(config: Config, root: str | Path) -> Path:
    """Where `config` is stored under `root`: readable prefix, then `run_key`."""
    return Path(root) / f"{config.preset}-seed{config.seed}-{run_key(config)}"


def run_key(config: Config) -> str:
    """The hash of the full config and, on the embedded model, of which build of it the run trains (a
    store kept across a change to the default model or its warm start never hands back runs of the old
    one) and, for a `file:PATH` task, of the file's content (a changed file is a new run)."""
    parts = [config.key()]
    if config.model == "embedded":
        parts.append(embedded_dir(config.task, config.task_digits or None).name)
    fingerprint = task_fingerprint(config.task)
    if fingerprint is not None:
        parts.append(f"file:{fingerprint}")
    if len(parts) == 1:
        return parts[0]
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:16]


def ensure(
    config: Config, root: str | Path, callbacks_factory: CallbacksFactory | None = None
) -> Literal["loaded", "trained"]:
    """'loaded' when a finished run of `config` is stored under `root`; otherwise train it there
    (after discarding a half-written directory) and return 'trained'. Training errors propagate.
    The run is trained under a lock on its directory: two processes that ask for the same run at once
    (two notebooks on one store, say) train it once, and the second loads it."""
    from grpo_lab.trainer import train

    path = run_dir(config, root)
    if is_finished(path):
        return "loaded"
    with build_lock(path):
        if is_finished(path):
            return "loaded"
        shutil.rmtree(path, ignore_errors=True)
        callbacks = callbacks_factory(config, path) if callbacks_factory is not None else ()
        train(config, out=path, callbacks=callbacks)
    return "trained"


def write_error(path: Path, error: BaseException) -> str:
    """Record a failed run in `path`/error.json; return its one-line description."""
    message = f"{type(error).__name__}: {error}"
    path.mkdir(parents=True, exist_ok=True)
    write_json_atomic(
        path / ERROR,
        {
            "type": type(error).__name__,
            "message": str(error),
            "traceback": "".join(traceback.format_exception(error)),
        },
    )
    return message


def read_error(path: str | Path) -> dict[str, str] | None:
    """The error.json of a failed run, if any."""
    file = Path(path) / ERROR
    return json.loads(file.read_text()) if file.exists() else None


def attempt(config: Config, root: str | Path, callbacks_factory: CallbacksFactory | None = None) -> Outcome:
    """`ensure` one run, recording a failure in error.json instead of raising it."""
    start = time.perf_counter()
    try:
        status = ensure(config, root, callbacks_factory)
    except Exception as err:
        message = write_error(run_dir(config, root), err)
        return Outcome(config.key(), "failed", message, time.perf_counter() - start)
    return Outcome(config.key(), status, None, time.perf_counter() - start)


def run_or_load(config: Config, root: str | Path) -> pd.DataFrame:
    """The metrics of `config`: loaded when a finished run is stored under `root`, else trained
    (a half-written directory from an interrupted run is discarded first)."""
    ensure(config, root)
    return read_metrics(run_dir(config, root)).assign(seed=config.seed, preset=config.preset)


def run_seeds(
    config: Config, seeds: Iterable[int], root: str | Path, label: str | None = None
) -> pd.DataFrame:
    """One tidy DataFrame (a row per run and step) of `config` over several seeds, trained in this
    process one after the other; a failure is raised (use `sweep` to record failures and go on)."""
    frames = [run_or_load(config.replace(seed=s), root) for s in seeds]
    df = pd.concat(frames, ignore_index=True)
    return df.assign(label=label or config.preset)
