"""Running configurations over seeds, with a store keyed by the hash of the full config: asking
again for a finished run loads it instead of training, so re-executing a notebook is cheap.

- `run_seeds` / `run_or_load`: one configuration, in this process (failures raise)
- `factorial_points`, `factorial_matrix`, `factorial_aliases`: a two-level fractional factorial
  design of resolution IV (or III) over components, its runs x factors matrix and alias structure
- `sweep`, `ablate`, `sensitivity`: designs over seeds, run in a process pool or on Ray, resumable,
  failures recorded (`SweepResult.failures`, each run's error.json)
To watch one run live, pass callbacks to `grpo_lab.train(config, callbacks=[...])` (grpo_lab.tracking);
a sweep takes `callbacks_factory` (e.g. `tracking.tensorboard_callbacks`)."""

from grpo_lab.experiments.designs import (
    ablation_points,
    factorial_aliases,
    factorial_matrix,
    factorial_points,
    grid_points,
    preset_overrides,
)
from grpo_lab.experiments.execution import execute
from grpo_lab.experiments.store import Outcome, read_error, run_dir, run_or_load, run_seeds
from grpo_lab.experiments.sweeps import SweepResult, ablate, run_design, sensitivity, sweep

__all__ = [
    "Outcome",
    "SweepResult",
    "ablate",
    "ablation_points",
    "execute",
    "factorial_aliases",
    "factorial_matrix",
    "factorial_points",
    "grid_points",
    "preset_overrides",
    "read_error",
    "run_design",
    "run_dir",
    "run_or_load",
    "run_seeds",
    "sensitivity",
    "sweep",
]
