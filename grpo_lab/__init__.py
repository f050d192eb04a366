"""grpo_lab: evaluate GRPO objective variants and training tricks on small causal LMs.

`Trainer` and `train` load on first use (PEP 562), so importing a lower layer (`grpo_lab.analysis`,
`grpo_lab.runlog`) never loads the trainer or a model library."""

from typing import Any

from grpo_lab.config import Config
from grpo_lab.objective import aggregate, clipped_surrogate, group_advantages, kl_estimate
from grpo_lab.presets import PRESETS, preset, preset_diff
from grpo_lab.runlog import read_metrics, read_summary

LAZY = {"Trainer", "train"}
"""the public names of `grpo_lab.training.trainer`, imported when first asked for"""


def __getattr__(name: str) -> Any:
    if name in LAZY:
        from grpo_lab.training import trainer

        return getattr(trainer, name)
    raise AttributeError(f"module 'grpo_lab' has no attribute {name!r}")


__all__ = [
    "PRESETS",
    "Config",
    "Trainer",
    "aggregate",
    "clipped_surrogate",
    "group_advantages",
    "kl_estimate",
    "preset",
    "preset_diff",
    "read_metrics",
    "read_summary",
    "train",
]
