"""Writing and reading a run directory:
- `config.json`: the full resolved config, the environment (versions, device, git commit) and the
  start (the sha256 of the initial policy's and the reference's weights)
- `metrics.jsonl`: one JSON object per step, flushed every step (a crash loses at most one step)
- `samples.jsonl`: a few completions with their rewards every K steps
- `summary.json`: written last, atomically; its presence marks a finished run
A run kept in a store is then sealed (`seal`): its metrics become `metrics.csv.gz`, its JSON records
(config, summary, samples and any other) are packed into `records.zip`, and `manifest.json` records the
behaviour version that trained it and every file's checksum, so a torn or stale run is told from a
current one (`run_state`). The readers (`read_config`, `read_summary`, `read_samples`, `read_record`)
find a record loose or packed, so they read a run being written and a sealed one alike; they know
nothing of the trainer, so they work on runs made anywhere."""

import gzip
import hashlib
import io
import json
import math
import os
import platform
import shutil
import subprocess
import warnings
import zipfile
from pathlib import Path
from typing import Any

import pandas as pd

CONFIG, METRICS, SAMPLES, SUMMARY = "config.json", "metrics.jsonl", "samples.jsonl", "summary.json"
METRICS_TABLE, MANIFEST, PACK = "metrics.csv.gz", "manifest.json", "records.zip"
PACKED_SUFFIXES = (".json", ".jsonl")
"""a sealed run's records of these suffixes (all but its manifest and its metrics) live in `PACK`, one
deterministic zip (`unzip -p RUN/records.zip config.json` reads one): a store keeps a thousand runs,
and on disk each file takes at least a block, several times a record's size"""
SIGNIFICANT_DIGITS = 6
"""digits a sealed run keeps of each float: far below any effect the studies report, and about a
fifth of the JSON lines' size"""
RUN_STATES = ("current", "missing", "unfinished", "unsealed", "torn", "stale")
"""what `run_state` tells: a sealed run of this behaviour whose files match; no directory; no
summary.json (interrupted or failed); finished but never sealed; a file missing or changed since
sealing; sealed by another behaviour version of the training code"""
MIN_FREE_BYTES = 64 * 2**20
"""refuse to start a run on a disk with less free space than this"""


def json_bytes(obj: Any) -> bytes:
    """`obj` as a record's JSON: indented, keys sorted, what JSON cannot hold as its string."""
    return json.dumps(obj, indent=2, sort_keys=True, default=str).encode()


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write to a temporary file then rename, so readers never see half a file."""
    write_bytes_atomic(path, json_bytes(obj))


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode())


def write_bytes_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _clean(value: Any) -> Any:
    """JSON has no NaN: non-finite floats are written as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def environment(device: str) -> dict[str, Any]:
    """Package versions, device and grpo_lab's git commit, for config.json."""
    import torch
    import transformers

    try:
        found = subprocess.run(
            ["git", "rev-parse", "--verify", "-q", "HEAD"],
            capture_output=True,
            text=True,
            cwd=Path(__file__).parent,
            timeout=5,
        )
        commit = found.stdout.strip() if found.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "device": device,
        "git_commit": commit or None,
        "platform": platform.platform(),
    }


class RunWriter:
    """Appends a run's records as training goes. With `resume_from`, an interrupted run's records
    are kept up to (not including) that step and appended to, so no line is duplicated or lost."""

    def __init__(
        self,
        out: str | Path,
        config: dict[str, Any],
        env: dict[str, Any],
        resume_from: int | None = None,
        start: dict[str, Any] | None = None,
    ) -> None:
        self.dir = Path(out)
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            free = shutil.disk_usage(self.dir).free
            if free < MIN_FREE_BYTES:
                raise OSError(
                    f"only {free / 2**20:.0f} MiB free on the disk of {self.dir}; a run needs at least "
                    f"{MIN_FREE_BYTES / 2**20:.0f} MiB for logs and checkpoints; free space or change --out"
                )
            has_metrics = (self.dir / METRICS).exists() and (self.dir / METRICS).stat().st_size
            if resume_from is None and has_metrics:
                raise FileExistsError(f"run directory {self.dir} already holds metrics; choose a new --out")
            if not resume_from or not (self.dir / CONFIG).exists():
                write_json_atomic(self.dir / CONFIG, {"config": config, "environment": env, "start": start})
            for name in (METRICS, SAMPLES):
                kept = [r for r in read_jsonl(self.dir / name) if r.get("step", 0) < (resume_from or 0)]
                write_text_atomic(self.dir / name, "".join(json.dumps(r) + "\n" for r in kept))
            self._metrics = open(self.dir / METRICS, "a")
            self._samples = open(self.dir / SAMPLES, "a")
        except (PermissionError, NotADirectoryError, FileExistsError) as err:
            if isinstance(err, FileExistsError) and "already holds metrics" in str(err):
                raise
            raise PermissionError(f"run directory {self.dir} is not writable: {err}") from err

    def log(self, row: dict[str, Any]) -> None:
        self._metrics.write(json.dumps({k: _clean(v) for k, v in row.items()}) + "\n")
        self._metrics.flush()

    def samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        for row in rows:
            self._samples.write(json.dumps({"step": step, **row}) + "\n")
        self._samples.flush()

    def finish(self, summary: dict[str, Any]) -> None:
        self._metrics.close()
        self._samples.close()
        write_json_atomic(self.dir / SUMMARY, {k: _clean(v) for k, v in summary.items()})

    def close(self) -> None:
        self._metrics.close()
        self._samples.close()


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Records of a JSONL file; a torn last line (a crash mid-write) is reported and skipped."""
    path = Path(path)
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    rows = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                warnings.warn(
                    f"{path}: skipped a torn last line (the run was interrupted mid-write)", stacklevel=2
                )
            else:
                raise ValueError(f"{path}: line {i + 1} is not valid JSON") from None
    return rows


def read_record(run_dir: str | Path, name: str) -> bytes | None:
    """The bytes of the record `name` (config.json, summary.json, ...) of the run at `run_dir`: the loose
    file while the run is written, the member of its `PACK` once it is sealed; None where it has none."""
    loose = Path(run_dir) / name
    if loose.is_file():
        return loose.read_bytes()
    return _packed(Path(run_dir)).get(name)


def replace_record(run_dir: str | Path, name: str, data: bytes) -> str:
    """Replace the record `name` of the run at `run_dir` where it is held, the loose file or its member
    of `PACK` (the pack written anew, atomically); returns the name of the file that changed. A
    FileNotFoundError where the run has no such record."""
    path = Path(run_dir)
    if (path / name).is_file():
        write_bytes_atomic(path / name, data)
        return name
    packed = _packed(path)
    if name not in packed:
        raise FileNotFoundError(f"{path} has no {name}, loose or in {PACK}")
    write_bytes_atomic(path / PACK, _zip({**packed, name: data}))
    return PACK


def records(run_dir: str | Path) -> dict[str, bytes]:
    """Every record of the run at `run_dir` by name, packed and loose (a loose file over a packed one of
    its name: it was written after the seal, and the next seal packs it)."""
    path = Path(run_dir)
    return {**_packed(path), **{f.name: f.read_bytes() for f in loose_records(path)}}


def _packed(path: Path) -> dict[str, bytes]:
    pack = path / PACK
    if not pack.is_file():
        return {}
    with zipfile.ZipFile(pack) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def loose_records(path: Path) -> list[Path]:
    """The run's files that a seal packs: records of `PACKED_SUFFIXES` but the manifest and the metrics
    (which the seal turns into `METRICS_TABLE`)."""
    return [
        f
        for f in sorted(path.iterdir())
        if f.is_file() and f.suffix in PACKED_SUFFIXES and f.name not in (MANIFEST, METRICS)
    ]


def _zip(members: dict[str, bytes]) -> bytes:
    """`members` as a zip whose bytes depend on them alone (sorted names, a fixed date, deflated)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name in sorted(members):
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, members[name], compresslevel=9)
    return buffer.getvalue()


def read_metrics(run_dir: str | Path) -> pd.DataFrame:
    """The per-step metrics of a run as a DataFrame (one row per step), from `metrics.csv.gz` once the
    run is sealed, else from `metrics.jsonl`."""
    table = Path(run_dir) / METRICS_TABLE
    if table.exists():
        try:
            return pd.read_csv(table)
        except pd.errors.EmptyDataError:  # a run that logged no step
            return pd.DataFrame()
    return pd.DataFrame(read_jsonl(Path(run_dir) / METRICS))


def has_metrics(run_dir: str | Path) -> bool:
    """Whether `run_dir` holds a run's metrics, sealed or not."""
    return (Path(run_dir) / METRICS_TABLE).exists() or (Path(run_dir) / METRICS).exists()


def seal(run_dir: str | Path, behaviour: str) -> None:
    """Make a finished run fit to keep: its metrics become `metrics.csv.gz` (a row per step, floats to
    `SIGNIFICANT_DIGITS`, gzipped without a timestamp so the same metrics give the same bytes; about
    a third of the plain table's size, so a store of a thousand runs stays small enough to commit),
    its loose JSON records join those already packed in `PACK`, then `manifest.json`, written
    atomically, records `behaviour` (the version of the training code that trained it), the number of
    metric rows and the sha256 of every other file in the directory; the packed loose files go last.
    Sealing a sealed run again packs what was written into it since (a cost record, say). Cut off
    anywhere, sealing a run sealed with its records loose leaves one its old manifest still describes,
    whose records read the same; a seal of a run that has a pack, cut off between the new pack and the
    new manifest, leaves a torn run: retrained, never misread."""
    path = Path(run_dir)
    if not is_finished(path):
        raise ValueError(f"{path} has no {SUMMARY}: only a finished run can be sealed")
    if (path / METRICS).exists():
        frame = pd.DataFrame(read_jsonl(path / METRICS))
        table = frame.to_csv(index=False, float_format=f"%.{SIGNIFICANT_DIGITS}g")
        write_bytes_atomic(path / METRICS_TABLE, gzip.compress(table.encode(), mtime=0))
        (path / METRICS).unlink()
    loose = loose_records(path)
    if loose:
        write_bytes_atomic(path / PACK, _zip(records(path)))
    rows = len(read_metrics(path))
    kept = [f for f in sorted(path.iterdir()) if f.is_file() and f.name != MANIFEST and f not in loose]
    files = {f.name: _sha256(f) for f in kept}
    write_json_atomic(path / MANIFEST, {"behaviour": behaviour, "rows": rows, "files": files})
    for file in loose:
        file.unlink()


def run_state(run_dir: str | Path, behaviour: str) -> tuple[str, str]:
    """(state, why) of the run at `run_dir` for the training code at version `behaviour`: one of
    `RUN_STATES`, and a sentence saying what is wrong ('' when current). Only a current run may be
    used; every other one is retrained."""
    path = Path(run_dir)
    if not path.is_dir():
        return "missing", f"{path} does not exist"
    if not is_finished(path):
        return "unfinished", f"{path} has no {SUMMARY} (interrupted or failed)"
    if not (path / MANIFEST).exists():
        return "unsealed", f"{path} has no {MANIFEST}: finished but never sealed"
    manifest = json.loads((path / MANIFEST).read_text())
    if manifest["rows"] and METRICS_TABLE not in manifest["files"]:
        return "stale", f"{path} was sealed in an older store format (its metrics are not in {METRICS_TABLE})"
    for name, digest in manifest["files"].items():
        if not (path / name).exists():
            return "torn", f"{path / name} is missing"
        if _sha256(path / name) != digest:
            return "torn", f"{path / name} does not match its checksum in {MANIFEST}"
    packed = _packed(path) if PACK in manifest["files"] else {}
    for file in loose_records(path):
        if file.name in packed and file.read_bytes() != packed[file.name]:
            return "torn", f"{file} was written over the record sealed in {PACK}"
    if manifest["behaviour"] != behaviour:
        return "stale", f"{path} was trained by behaviour {manifest['behaviour']}; the code is at {behaviour}"
    return "current", ""


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_json_record(run_dir: str | Path, name: str) -> Any:
    """The JSON record `name` of the run at `run_dir` (`read_record`), parsed; None where it has none."""
    found = read_record(run_dir, name)
    return None if found is None else json.loads(found)


def read_config(run_dir: str | Path) -> dict[str, Any]:
    """The run's config (a dict); a FileNotFoundError where the run has no config.json."""
    record = read_json_record(run_dir, CONFIG)
    if record is None:
        raise FileNotFoundError(f"{Path(run_dir)} has no {CONFIG}, loose or in {PACK}")
    return record["config"]


def has_config(run_dir: str | Path) -> bool:
    return read_record(run_dir, CONFIG) is not None


def read_start(run_dir: str | Path) -> dict[str, Any] | None:
    """The run's start: {"init_sha256", "reference_sha256", ...} (None for a run that recorded none,
    or that has no config.json)."""
    record = read_json_record(run_dir, CONFIG)
    return None if record is None else record.get("start")


def read_summary(run_dir: str | Path) -> dict[str, Any] | None:
    found: dict[str, Any] | None = read_json_record(run_dir, SUMMARY)
    return found


def read_samples(run_dir: str | Path) -> list[dict[str, Any]]:
    """The run's sampled completions (samples.jsonl, loose or packed; a torn last line of a run being
    written is skipped, as `read_jsonl` does)."""
    loose = Path(run_dir) / SAMPLES
    if loose.is_file():
        return read_jsonl(loose)
    found = _packed(Path(run_dir)).get(SAMPLES)
    return [] if found is None else [json.loads(line) for line in found.decode().splitlines() if line.strip()]


def is_finished(run_dir: str | Path) -> bool:
    return (Path(run_dir) / SUMMARY).exists() or SUMMARY in _packed(Path(run_dir))
