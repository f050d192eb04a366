"""Give the runs of a store that predate start records (`config.json` without "start") the sha256 of
the weights they started from, where their own log proves it, and key them by it.

A run trained before runs recorded their start logged its step-0 validation: greedy accuracy and
reward on its validation prompts and the sampled accuracy of 4 completions per prompt from a fixed
sampling stream (`evaluation.sampling_seed`). That evaluation is a deterministic function of the
starting weights, so this script evaluates today's shipped model under each run's validation
settings and compares the three numbers as the run stored them (6 significant digits):

- equal: the run started from the shipped model. Its config.json gets the start (with "evidence"
  saying how it was established), it is sealed again under the behaviour that trained it, and its
  directory is renamed to today's key (`store.run_dir`).
- different: the run started from other weights (a warm start built elsewhere). It is removed: it
  must be trained again from the shipped model, and `grpo-lab plan` then lists it to train.

    python scripts/migrate_starts.py [STORE]   # default: results/
"""

import json
import shutil
import sys
from pathlib import Path

from grpo_lab.config import Config
from grpo_lab.experiments.store import expected_start, run_dir
from grpo_lab.runlog import (
    CONFIG,
    MANIFEST,
    read_config,
    read_json_record,
    read_metrics,
    seal,
    write_json_atomic,
)
from grpo_lab.tasks.from_file import file_task_exists, is_file_task
from grpo_lab.training.trainer import Trainer

FINGERPRINT = ("val/accuracy", "val/reward", "val/sampled_accuracy")
"""the step-0 validation numbers a run's start is recognised by"""
SETTINGS = (
    "task", "task_digits", "val_size", "val_samples", "val_sampled_size", "max_completion_length",
    "rewards", "reward_weights", "model",
)  # fmt: skip
"""the config fields the step-0 validation depends on"""


def stored(value: float) -> float:
    """A float as a sealed run keeps it."""
    return float(f"{value:.6g}")


def relocated(config: dict) -> dict:
    """`config` with a file task that is no longer at its recorded path found under the repository's
    notebooks/data/ by its name (runs keep the absolute path of the machine that trained them)."""
    task = config["task"]
    if not is_file_task(task) or file_task_exists(task):
        return config
    local = Path("notebooks/data") / Path(task).name
    if not local.exists():
        raise FileNotFoundError(f"task file of {task!r} is neither there nor at {local}")
    return {**config, "task": f"file:{local.resolve()}"}


def main(root: Path) -> int:
    fingerprints: dict[str, dict[str, float]] = {}
    kept, removed = 0, []
    for path in sorted(p for p in root.iterdir() if (p / MANIFEST).exists()):
        record = read_json_record(path, CONFIG)
        if record.get("start") is not None:
            continue
        config = relocated(read_config(path))
        setting = json.dumps({k: config[k] for k in SETTINGS}, sort_keys=True)
        if setting not in fingerprints:
            trainer = Trainer(Config.from_dict({**config, "progress": False}))
            fingerprints[setting] = {k: stored(v) for k, v in trainer.validate().items() if k in FINGERPRINT}
        first = read_metrics(path).sort_values("step").iloc[0]
        logged = {k: float(first[k]) for k in FINGERPRINT if k in first.index}
        if first["step"] != 0 or logged != fingerprints[setting]:
            removed.append(f"{path.name}: step-0 {logged} != shipped {fingerprints[setting]}")
            shutil.rmtree(path)
            continue
        sha = expected_start(config)
        uses_reference = config["lora"] or Config.from_dict(config).uses_reference
        record["start"] = {
            "init_sha256": sha,
            "reference_sha256": sha if uses_reference else None,
            "evidence": f"step-0 {', '.join(FINGERPRINT)} equal to the shipped model's (recorded afterwards)",
        }
        write_json_atomic(path / CONFIG, record)  # over the packed one: the seal packs it
        seal(path, json.loads((path / MANIFEST).read_text())["behaviour"])
        target = run_dir(Config.from_dict(config), root)  # a file task is keyed by its content
        if target != path:
            path.rename(target)
        kept += 1
    print(f"{kept} runs given their start; {len(removed)} removed (another start):")
    print("\n".join(removed))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "results")))
