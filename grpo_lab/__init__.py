"""grpo_lab: evaluate GRPO objective variants and training tricks on small causal LMs."""

from grpo_lab.config import Config
from grpo_lab.objective import aggregate, clipped_surrogate, group_advantages, kl_estimate
from grpo_lab.presets import PRESETS, preset, preset_diff
from grpo_lab.runlog import read_metrics, read_summary
from grpo_lab.trainer import Trainer, train

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
