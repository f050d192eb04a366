"""The run store: one directory per run under a root, named by the hash of the config's fields set
away from their defaults (and of the sha256 of the embedded model's weights, when it is the model, and
of the task file's content, for `file:PATH` tasks). A trained run is sealed (`runlog.seal`) with
`BEHAVIOUR`, the version of what training computes; asking again for a run loads it only when it is
current (`state`): a run that is unfinished, unsealed, torn (a file missing or changed) or stale (of
another behaviour, or from other starting weights than today's) is reported and trained again, never
used. A failure is recorded in the run's
error.json (type, message, traceback) instead of being raised."""

import hashlib
import json
import os
import shutil
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from grpo_lab.config import Config
from grpo_lab.models.embedded import build_lock, embedded_dir, shipped_dir, start_sha256
from grpo_lab.runlog import (
    MANIFEST,
    read_config,
    read_metrics,
    read_start,
    run_state,
    seal,
    write_json_atomic,
)
from grpo_lab.tasks import task_identity
from grpo_lab.tasks.from_file import file_task_exists, is_file_task

ERROR = "error.json"
BEHAVIOUR = "37370dee3231"
"""the version of the training code's behaviour: the start of the sha256 of the golden test's data
(`tests/data/golden_metrics.json`), which changes exactly when a change alters what training
computes (`tests/test_trainer_golden.py` fails until this follows it). Stored runs sealed with
another version are stale, unless `COMPATIBLE` keeps them."""

COMPATIBLE: dict[str, Callable[[dict[str, Any]], bool]] = {
    # the mean |advantage| of the groups whose task rewards are all equal logged beside the rest
    "882c07607800": lambda c: True,
    # pass@k logged beside the sampled accuracy, now sampled at the fixed val_temperature (1.0) where
    # it took the sampling temperature times the learned one; CISPO's clip rate counts its own bound
    "b7cdc7a6e30f": lambda c: (
        c["temperature"] == 1.0 and not c["learnable_temperature"] and c["surrogate"] != "cispo"
    ),
    # presets renamed and added (today's `dapo_loss` was `dapo`; `dapo` is DAPO's full recipe): the
    # golden cases gain one, and nothing any config computes changed
    "73d873ccad68": lambda c: True,
}
"""earlier behaviour versions whose runs stay current for the configs (dicts) the predicate accepts:
a change that only adds logged metrics, or alters what training computes for some configs alone,
keeps the others' runs. `tests/test_trainer_golden.py` checks each entry: on every golden config the
predicate accepts, today's rows equal that version's on every metric it logged."""

NO_TRAIN = "GRPO_LAB_NO_TRAIN"
"""an environment variable: when set (to anything but '' or '0') nothing may be trained, and asking
for a run the store does not hold current raises `TrainingForbidden`; the check of the committed
figures (`grpo-lab figures --check`) sets it, so a gap in `results/` fails instead of training"""


class TrainingForbidden(RuntimeError):
    """A run had to be trained while `NO_TRAIN` forbids it."""


def refuse_training(configs: Sequence[Config], root: str | Path) -> None:
    """Raise `TrainingForbidden`, naming the runs, when `configs` (runs not current under `root`) is
    not empty and the environment sets `NO_TRAIN`."""
    if not configs or os.environ.get(NO_TRAIN, "") in ("", "0"):
        return
    named = ", ".join(run_dir(c, root).name for c in configs[:5])
    raise TrainingForbidden(
        f"{len(configs)} runs are not current in the store {root} and {NO_TRAIN} forbids training: "
        f"{named}{' ...' if len(configs) > 5 else ''}"
    )


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
    """The hash of the full config, a `file:PATH` task counted by the file's content and not its path
    (`tasks.task_identity`: a changed file is a new run, a moved one is not) and, on the embedded
    model, of the weights the run starts from: the sha256 of the shipped model's (`embedded.SHIPPED`:
    runs from different starts never share a key, so never meet in one comparison), else the name of
    the build (its task, architecture and warm-start settings; naming a run builds nothing), whose
    weights `state` checks against the run's record."""
    key = config.key(task=task_identity(config.task))
    if config.model != "embedded":
        return key
    digits = config.task_digits or None
    shipped = shipped_dir(config.task, digits)
    start = (
        start_sha256(config.task, digits) if shipped is not None else embedded_dir(config.task, digits).name
    )
    return hashlib.sha256(f"{key}/{start}".encode()).hexdigest()[:16]


def expected_start(config: dict[str, Any]) -> str | None:
    """The sha256 of the weights a run of `config` (a dict) must start from today: the embedded
    model's for its task; None for another model (its record is kept, not checked) and for a file
    task whose file is no longer where the run found it (its key, which includes the start, is what
    finds it then)."""
    task = config["task"]
    if config["model"] != "embedded" or (is_file_task(task) and not file_task_exists(task)):
        return None
    return start_sha256(task, config["task_digits"] or None)


def state(path: str | Path) -> tuple[str, str]:
    """(state, why) of the stored run at `path` (`runlog.RUN_STATES`): `runlog.run_state` under
    `BEHAVIOUR` (a run of a `COMPATIBLE` version whose config it accepts counts as current), then
    the start: a run that records no starting weights, or other ones than today's, is stale."""
    found, why = run_state(path, BEHAVIOUR)
    path = Path(path)
    if found == "stale":
        trained_by = json.loads((path / MANIFEST).read_text())["behaviour"]
        if trained_by in COMPATIBLE and COMPATIBLE[trained_by](read_config(path)):
            found, why = "current", ""
    if found != "current":
        return found, why
    start = read_start(path)
    if start is None:
        return "stale", f"{path} records no starting weights (config.json has no start)"
    expected = expected_start(read_config(path))
    if expected is not None and start["init_sha256"] != expected:
        return "stale", (
            f"{path} started from weights {start['init_sha256'][:16]}; today's embedded model of its task "
            f"is {expected[:16]}"
        )
    return "current", ""


def ensure(
    config: Config, root: str | Path, callbacks_factory: CallbacksFactory | None = None
) -> Literal["loaded", "trained"]:
    """'loaded' when a current run of `config` is stored under `root`; otherwise train it there
    (after discarding a half-written, torn or stale directory; its summary with the diagnostics'
    findings), seal it and return 'trained'.
    Training errors propagate. The run is trained under a lock on its directory: two processes that
    ask for the same run at once (two notebooks on one store, say) train it once, and the second
    loads it."""
    from grpo_lab.analysis.diagnostics import summary_findings
    from grpo_lab.training.trainer import train

    path = run_dir(config, root)
    if is_current(path):
        return "loaded"
    refuse_training([config], root)
    with build_lock(path):
        if is_current(path):
            return "loaded"
        shutil.rmtree(path, ignore_errors=True)
        callbacks = callbacks_factory(config, path) if callbacks_factory is not None else ()
        train(config, out=path, callbacks=callbacks, findings=summary_findings)
        seal(path, BEHAVIOUR)
    return "trained"


def is_current(path: str | Path) -> bool:
    """Whether the run at `path` may be used (`state`): sealed by this behaviour (or a compatible
    one), every file as sealed, started from today's weights."""
    return state(path)[0] == "current"


def unusable(paths: Iterable[Path]) -> dict[Path, str]:
    """The runs among `paths` that exist but may not be used (unsealed, torn or stale), with why:
    they are trained again, and a sweep says so (an unfinished one is only an interrupted attempt)."""
    found = {}
    for path in paths:
        found_state, why = state(path)
        if found_state in ("unsealed", "torn", "stale"):
            found[path] = f"{found_state}: {why}"
    return found


def describe_error(error: BaseException) -> str:
    """A failure's one-line description: its type and message."""
    return f"{type(error).__name__}: {error}"


def write_error(path: Path, error: BaseException) -> str:
    """Record a failed run in `path`/error.json; return its one-line description."""
    message = describe_error(error)
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


def record_failure(path: Path, error: BaseException) -> str:
    """`write_error`, under the run's build lock and only where no current run is stored: a process
    whose attempt failed (its worker died before it reached the lock, say) never writes into a run
    that another process is training or has sealed. The failure is reported all the same (its one-line
    description is returned)."""
    with build_lock(path):
        if is_current(path):
            return describe_error(error)
        return write_error(path, error)


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
        message = record_failure(run_dir(config, root), err)
        return Outcome(config.key(), "failed", message, time.perf_counter() - start)
    return Outcome(config.key(), status, None, time.perf_counter() - start)


def run_or_load(config: Config, root: str | Path) -> pd.DataFrame:
    """The metrics of `config`: loaded when a current run is stored under `root`, else trained
    (a half-written, torn or stale directory is discarded first)."""
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
