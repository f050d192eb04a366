"""Checkpoints of a training run: everything needed to continue exactly where it stopped (weights,
optimizer, controllers, random states, data position), written atomically so a kill at any moment
leaves either the previous checkpoint or the new one, never half of one."""

import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from grpo_lab.runlog import read_config

CHECKPOINT = "checkpoint.pt"


def rng_states(*generators: torch.Generator) -> dict[str, Any]:
    """Python, numpy and torch random states, plus the given generators'."""
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "generators": [g.get_state() for g in generators],
    }


def restore_rng_states(states: dict[str, Any], *generators: torch.Generator) -> None:
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if states["cuda"]:
        torch.cuda.set_rng_state_all(states["cuda"])
    for g, state in zip(generators, states["generators"], strict=True):
        g.set_state(state)


def save(run_dir: str | Path, state: dict[str, Any]) -> None:
    """Write the checkpoint next to the run log (temporary file, fsync, then rename)."""
    path = Path(run_dir) / CHECKPOINT
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def to_resume(run_dir: str | Path | None, config: dict[str, Any]) -> dict[str, Any] | None:
    """The checkpoint a resumed run continues from (None when the run wrote none); refuses a run
    directory whose starting config differs from `config` (a `Config.to_dict()`)."""
    if run_dir is None:
        raise ValueError("resume needs the run directory (out) of the interrupted run")
    saved = load(run_dir)
    if saved is not None and read_config(run_dir) != config:
        differ = sorted(k for k, v in read_config(run_dir).items() if config.get(k) != v)
        raise ValueError(f"cannot resume {run_dir}: its config differs from this one in {differ}")
    return saved


def load(run_dir: str | Path) -> dict[str, Any] | None:
    """The run's last checkpoint, or None when it has none."""
    path = Path(run_dir) / CHECKPOINT
    return torch.load(path, weights_only=False) if path.exists() else None


def states(parts: dict[str, Any]) -> dict[str, Any]:
    """Each part's `state_dict()` by name (None for a part that is None: a trick switched off)."""
    return {name: part.state_dict() if part is not None else None for name, part in parts.items()}


def load_states(parts: dict[str, Any], saved: dict[str, Any]) -> None:
    """Give each part (not None) its saved state back."""
    for name, part in parts.items():
        if part is not None:
            part.load_state_dict(saved[name])
