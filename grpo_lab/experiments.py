"""Running configurations over seeds, with a store keyed by the hash of the full config: asking
again for a finished run loads it instead of training, so re-executing a notebook is cheap."""

import shutil
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from grpo_lab.config import Config
from grpo_lab.runlog import is_finished, read_metrics


def run_dir(config: Config, root: str | Path) -> Path:
    return Path(root) / f"{config.preset}-seed{config.seed}-{config.key()}"


def run_or_load(config: Config, root: str | Path) -> pd.DataFrame:
    """The metrics of `config`: loaded when a finished run is stored under `root`, else trained
    (a half-written directory from an interrupted run is discarded first)."""
    from grpo_lab.trainer import train

    path = run_dir(config, root)
    if not is_finished(path):
        shutil.rmtree(path, ignore_errors=True)
        train(config, out=path)
    return read_metrics(path).assign(seed=config.seed, preset=config.preset)


def run_seeds(
    config: Config, seeds: Iterable[int], root: str | Path, label: str | None = None
) -> pd.DataFrame:
    """One tidy DataFrame (a row per run and step) of `config` over several seeds."""
    frames = [run_or_load(config.replace(seed=s), root) for s in seeds]
    df = pd.concat(frames, ignore_index=True)
    return df.assign(label=label or config.preset)
