"""Named methods as presets: each is a small diff over `grpo`, and the config it produces is fully
explicit (every field is saved in config.json)."""

from dataclasses import dataclass, field
from typing import Any

from grpo_lab.config import Config


@dataclass(frozen=True)
class Preset:
    doc: str
    """what the method changes relative to GRPO, with its paper"""
    changes: dict[str, Any] = field(default_factory=dict)
    """config fields that differ from grpo"""


PRESETS: dict[str, Preset] = {
    "grpo": Preset(
        "DeepSeekMath GRPO (arXiv 2402.03300): group z-score advantage, PPO clip 0.2, "
        "k3 KL in the loss with beta 0.04, seq-mean-token-mean: the Config defaults."
    ),
}


def preset(name: str, **overrides: Any) -> Config:
    """The config of a named method, with any field overridden."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; valid: {', '.join(PRESETS)}")
    return Config.from_dict({"preset": name, **PRESETS[name].changes, **overrides})


def preset_diff(name: str) -> dict[str, tuple[Any, Any]]:
    """What a preset changes relative to grpo: field -> (grpo value, preset value)."""
    base, other = preset("grpo").to_dict(), preset(name).to_dict()
    return {k: (base[k], other[k]) for k in base if k != "preset" and base[k] != other[k]}
