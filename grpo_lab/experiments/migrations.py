"""Store maintenance: packing the records of runs sealed before `runlog.PACK` (`pack_store`), and renaming
a preset in a run store (`rename_preset`).

A run sealed before records were packed keeps config.json, summary.json, samples.jsonl and the rest
loose, a disk block each: `pack_store` seals each such run again under the behaviour version its
manifest records, which packs them, after checking that every file is as sealed (a torn run is left
as it is, and said so) and before checking that its records and store state are unchanged.

A run directory is named by its preset and keyed by the hash of its config (`store.run_dir`), which
holds the preset's name, so a preset renamed in `grpo_lab.presets` would orphan the runs stored under
the old name: they are moved to the name and key the new one gives, their config.json (loose or
packed) says the new name, and their seal (`runlog.seal`) records the new checksum of the file that
holds it, keeping the behaviour version that trained them and every other file as they were (a
preset's name is informational: renaming it changes nothing that was computed). Each run is moved on
its own and atomically (a hidden copy of hard links in the store, changed, checked, then renamed into
place), and the runs moved before a failure stay moved: running the rename again finishes the rest.
`dry_run` lists what would be done, moving nothing."""

import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from grpo_lab.config import Config
from grpo_lab.experiments.store import run_dir, state
from grpo_lab.presets import PRESETS
from grpo_lab.runlog import (
    CONFIG,
    MANIFEST,
    PACK,
    json_bytes,
    loose_records,
    read_json_record,
    records,
    replace_record,
    run_state,
    seal,
    write_json_atomic,
)
from grpo_lab.tasks.from_file import PREFIX, file_task_exists, is_file_task

RENAMING = ".renaming"
"""suffix of the hidden copy a run is changed in, in the store, before it is renamed into place"""


def pack_store(root: str | Path, *, dry_run: bool = False) -> list[tuple[Path, bool, str]]:
    """Pack the loose records of every sealed run in the store `root` (`runlog.seal` again, under the
    behaviour its manifest records); returns (run, whether it is (or would be) packed, what was done or
    why not) for each run that has loose records, in the directories' order; with `dry_run`, what
    would be done, changing nothing. A run whose files do not match its manifest (torn) is skipped; one
    being trained (its lock held) stops the packing with a ValueError, the runs packed so far staying
    packed."""
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"run store {root} is not a directory")
    done = []
    for path in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if not (path / MANIFEST).exists() or not loose_records(path):
            continue
        manifest = json.loads((path / MANIFEST).read_text())
        found, why = run_state(path, manifest["behaviour"])
        if found != "current":
            done.append((path, False, f"left loose: {found}: {why}"))
            continue
        if dry_run:
            done.append((path, True, f"would pack {len(loose_records(path))} records"))
            continue
        with _locked(path):
            before, state_before = records(path), state(path)
            seal(path, manifest["behaviour"])
            if records(path) != before or state(path) != state_before:
                raise ValueError(f"{path}: packing changed its records or its store state; look at it")
        done.append((path, True, f"packed {len(before)} records"))
    return done


@dataclass(frozen=True)
class Rename:
    """What `rename_preset` does (or, in a dry run, would do) with one run directory of the old preset."""

    source: Path
    """the run's directory, named by the old preset"""
    target: Path
    """its directory under the new preset's name and key (the source itself when kept)"""
    action: Literal["move", "finish", "keep"]
    """'move' the run; 'finish' a move that was interrupted after the run reached the target (the
    source, whose files the target holds, is removed); 'keep' a run of today's old preset"""
    state: str
    """the run's store state (`store.state`: 'current', 'stale', ...), the same after the move"""
    note: str = ""
    """why it is kept, or which file a missing task file was found as"""

    def describe(self) -> str:
        """One line for a listing."""
        if self.action == "keep":
            return f"keep   {self.source.name} ({self.note})"
        verb = "move  " if self.action == "move" else "finish"
        note = f"; {self.note}" if self.note else ""
        return f"{verb} {self.source.name} -> {self.target.name} ({self.state}{note})"


def rename_preset(
    root: str | Path,
    old: str,
    new: str,
    *,
    dry_run: bool = False,
    task_dirs: Sequence[str | Path] | None = None,
) -> list[Rename]:
    """Rename preset `old` to `new` in the run store `root`: every run directory whose config.json says
    `"preset": old` gets the config `new` names (`store.run_dir`), config.json saying `new`, and, when
    sealed, its manifest's checksum of config.json (behaviour, rows and every other checksum kept); its
    store state (`store.state`) is checked to be what it was. Returns what was done per run (`Rename`),
    in the directories' order; with `dry_run`, what would be done, changing nothing.

    Refused, before anything is moved (a ValueError naming every run concerned): `new` not a preset, or
    `old` itself; a target that exists and is not this run's finished move; a run whose directory is not
    where its own config puts it today (it cannot be found under either name: move it out of the store).
    When `old` is still a preset and differs from `new` in some fields, a run whose config agrees with
    today's `old` on them is kept (a run of today's preset), one that agrees with `new` is moved, and one
    that agrees with neither is refused. A run being trained by another process (its lock held) stops
    the rename with a ValueError; the runs moved before it stay moved.

    The key of a `file:PATH` task counts the file's content: where the recorded file is gone, a file at a
    tail of its path under one of `task_dirs` (default: the project root) stands in for it, if it gives
    the run's own key."""
    root = Path(root)
    plans = plan_rename(root, old, new, task_dirs=task_dirs)
    if dry_run:
        return plans
    for plan in plans:
        if plan.action != "keep":
            _apply(plan, old, new)
    return plans


def plan_rename(
    root: str | Path, old: str, new: str, *, task_dirs: Sequence[str | Path] | None = None
) -> list[Rename]:
    """What `rename_preset` would do in `root` (its dry run); refusals are raised here."""
    root = Path(root)
    if new not in PRESETS:
        raise ValueError(f"unknown preset {new!r} to rename {old!r} to; valid: {', '.join(PRESETS)}")
    if old == new:
        raise ValueError(f"preset {old!r} renamed to itself")
    if not root.is_dir():
        raise ValueError(f"run store {root} is not a directory")
    searched = [Path(d) for d in task_dirs] if task_dirs is not None else [_project_root()]
    told = _told_apart(old, new)
    plans, problems = [], []
    for source in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        config = _config(source)
        if config is None or config.get("preset") != old:
            continue
        try:
            plans.append(_plan_one(source, config, old, new, told, searched))
        except ValueError as error:
            problems.append(f"{source.name}: {error}")
    if problems:
        raise ValueError(
            f"renaming preset {old!r} to {new!r} in {root} refused for {len(problems)} runs (nothing "
            "moved):\n  " + "\n  ".join(problems)
        )
    return plans


def _told_apart(old: str, new: str) -> dict[str, tuple[Any, Any]]:
    """The fields in which today's presets `old` and `new` differ, with (old's value, new's value): a
    run's values there say which of the two it is a run of. None when `old` is no preset today."""
    if old not in PRESETS:
        return {}
    old_config = Config.from_dict({"preset": old, **PRESETS[old].changes}).to_dict()
    new_config = Config.from_dict({"preset": new, **PRESETS[new].changes}).to_dict()
    return {
        k: (old_config[k], new_config[k])
        for k in old_config
        if k != "preset" and old_config[k] != new_config[k]
    }


def _plan_one(
    source: Path,
    config: dict[str, Any],
    old: str,
    new: str,
    told: dict[str, tuple[Any, Any]],
    searched: Sequence[Path],
) -> Rename:
    found_state = state(source)[0]
    if told:
        like_old = all(config.get(k) == v for k, (v, _) in told.items())
        like_new = all(config.get(k) == v for k, (_, v) in told.items())
        if like_old and not like_new:
            fields = ", ".join(f"{k}={v!r}" for k, (v, _) in told.items())
            return Rename(source, source, "keep", found_state, f"a run of today's {old}: {fields}")
        if not like_new:
            fields = ", ".join(f"{k}={config.get(k)!r}" for k in told)
            raise ValueError(f"its {fields} are neither today's {old!r} nor {new!r}: which is it a run of?")
    keyed, note = _keyed_config(source, config, searched)
    if run_dir(keyed, source.parent) != source:
        raise ValueError(
            f"its config is stored today under {run_dir(keyed, source.parent).name}, not here (another "
            "start or an older key): it cannot be found under either name, move it out of the store"
        )
    target = run_dir(keyed.replace(preset=new), source.parent)
    if not target.exists():
        return Rename(source, target, "move", found_state, note)
    if _is_moved_copy(source, target, new):
        return Rename(
            source, target, "finish", found_state, "the target already holds it: the source is removed"
        )
    raise ValueError(f"the target {target.name} exists and holds another run; remove one of them")


def _keyed_config(source: Path, config: dict[str, Any], searched: Sequence[Path]) -> tuple[Config, str]:
    """The run's config to compute its key with, and a note: itself, or, for a `file:PATH` task whose
    file is gone, with a stand-in file (a tail of PATH under a searched directory) that gives the run's
    own key."""
    task = config["task"]
    if not is_file_task(task) or file_task_exists(task):
        return Config.from_dict(config), ""
    parts = Path(task[len(PREFIX) :]).expanduser().parts
    tails = [Path(*parts[i:]) for i in range(len(parts)) if not Path(*parts[i:]).is_absolute()]
    tried = []
    for base in searched:
        for tail in tails:
            candidate = base / tail
            if not candidate.exists():
                continue
            tried.append(str(candidate))
            keyed = Config.from_dict({**config, "task": f"{PREFIX}{candidate}"})
            if run_dir(keyed, source.parent) == source:
                return keyed, f"task file {task[len(PREFIX) :]} found as {candidate}"
    looked = f"; tried {', '.join(tried)}, whose content gives another key" if tried else ""
    raise ValueError(
        f"its task file {task[len(PREFIX) :]} is gone and no file at a tail of that path under "
        f"{', '.join(map(str, searched))} gives its key{looked}: name the directory that holds it "
        "(task_dirs, --task-dir)"
    )


def _apply(plan: Rename, old: str, new: str) -> None:
    """Move one run (or finish its interrupted move) under both runs' build locks."""
    source, target = plan.source, plan.target
    with _locked(source), _locked(target):
        if plan.action == "finish":
            shutil.rmtree(source)
            return
        if target.exists():
            raise ValueError(f"{target} appeared while renaming {source.name}; nothing of it was moved")
        before = state(source)
        work = source.parent / f".{target.name}{RENAMING}"
        shutil.rmtree(work, ignore_errors=True)  # an earlier attempt's copy, never yet in place
        _link_copy(source, work)
        try:
            _rewrite(work, old, new)
            after = state(work)
            if after[0] != before[0]:
                raise ValueError(
                    f"{source.name} would change from {before[0]} to {after[0]} ({after[1]}); nothing moved"
                )
            os.rename(work, target)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        shutil.rmtree(source)


def _rewrite(path: Path, old: str, new: str) -> None:
    """config.json of the run at `path` (loose or packed) with preset `new` instead of `old`, and the
    manifest's checksum of the file that holds it when the manifest held that file's old checksum (a
    torn record stays torn)."""
    record = read_json_record(path, CONFIG)
    if record["config"]["preset"] != old:
        raise ValueError(f"{path.name}'s {CONFIG} says preset {record['config']['preset']!r}, not {old!r}")
    record["config"]["preset"] = new
    held = CONFIG if (path / CONFIG).is_file() else PACK
    was = hashlib.sha256((path / held).read_bytes()).hexdigest()
    replace_record(path, CONFIG, json_bytes(record))
    manifest_file = path / MANIFEST
    if not manifest_file.exists():
        return
    manifest = json.loads(manifest_file.read_text())
    if manifest["files"].get(held) == was:
        manifest["files"][held] = hashlib.sha256((path / held).read_bytes()).hexdigest()
        write_json_atomic(manifest_file, manifest)


def _is_moved_copy(source: Path, target: Path, new: str) -> bool:
    """Whether `target` is `source` moved (a move interrupted before the source was removed): the same
    files and records, the same bytes but for config.json, which says `new`, the pack that holds it and
    the manifest."""
    was, now = _contents(source), _contents(target)
    if set(was) != set(now) or CONFIG not in was:
        return False
    record = json.loads(was[CONFIG])
    record["config"]["preset"] = new
    if json.loads(now[CONFIG]) != record:
        return False
    return all(was[n] == now[n] for n in set(was) - {CONFIG, PACK, MANIFEST})


def _contents(path: Path) -> dict[str, bytes]:
    """The run's files and its records (packed ones too) by name."""
    return {**{p.name: p.read_bytes() for p in path.iterdir() if p.is_file()}, **records(path)}


def _link_copy(source: Path, work: Path) -> None:
    """A copy of the run directory `source` at `work` whose files are hard links (copies where the
    file system has none); files are replaced there, never written into, so the source stays intact."""

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(source, work, copy_function=link)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """The build lock of the run at `path` (`embedded.build_lock`'s file), taken without waiting: a
    ValueError when another process holds it (it is training that run now)."""
    with ExitStack() as stack:
        file = stack.enter_context(open(path.parent / f".{path.name}.lock", "a"))
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ValueError(
                f"{path.name} is being trained by another process now: rename again once it is done "
                "(the runs moved so far stay moved)"
            ) from None
        yield


def _config(path: Path) -> dict[str, Any] | None:
    """The config of the run at `path`, None where it has no config.json (loose or packed)."""
    record = read_json_record(path, CONFIG)
    return None if record is None else record["config"]


def _project_root() -> Path:
    from grpo_lab.analysis.plots import project_root

    return project_root()
