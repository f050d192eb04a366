"""Notebook profiles: 'smoke' runs every cell in seconds (CI); 'full' makes the figures.
Each notebook states its own full-profile budget (steps, seeds, validation prompts) when it calls
`profile`, and displays the `Profile` it resolved: the index of figures (`grpo_lab.figures`) reads the
settings of every figure from it, so a study's runs must take their settings from that profile."""

from dataclasses import dataclass
from pathlib import Path

from grpo_lab.analysis.plots import project_root


@dataclass(frozen=True)
class Profile:
    name: str
    seeds: tuple[int, ...]
    """seeds per configuration"""
    steps: int
    """training steps per run"""
    eval_every: int
    """steps between validation passes"""
    val_size: int
    """validation prompts"""

    def runs_dir(self, notebook: str = "shared") -> Path:
        """Where runs are stored (kept apart per profile so smoke never shadows full). Runs are keyed
        by their config, so notebooks that share the default 'shared' store reuse each other's runs."""
        return project_root() / "runs" / self.name / notebook

    def figure_name(self, name: str) -> str:
        """Smoke figures get a suffix so they never overwrite the full-profile ones."""
        return name if self.name == "full" else f"{name}_{self.name}"


PROFILES = {
    "smoke": Profile("smoke", seeds=(0, 1), steps=4, eval_every=2, val_size=32),
    "full": Profile("full", seeds=(0, 1, 2), steps=200, eval_every=20, val_size=200),
}


def profile(
    name: str,
    seeds: list[int] | None = None,
    steps: int | None = None,
    full_steps: int | None = None,
    eval_every: int | None = None,
    val_size: int | None = None,
) -> Profile:
    """A profile by name, with the notebook's own seeds or steps when it sets them. `full_steps` is
    the notebook's budget under the full profile (the smoke profile keeps its few steps);
    `eval_every` overrides the profile's validation interval under the full profile; `val_size` caps
    the validation prompts (a smaller held-out set for a study's many short runs; never more than the
    profile's own)."""
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; valid: {', '.join(PROFILES)}")
    base = PROFILES[name]
    default_steps = full_steps if name == "full" and full_steps is not None else base.steps
    return Profile(
        base.name,
        tuple(seeds) if seeds is not None else base.seeds,
        steps if steps is not None else default_steps,
        eval_every if name == "full" and eval_every is not None else base.eval_every,
        base.val_size if val_size is None else min(base.val_size, val_size),
    )
