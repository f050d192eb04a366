"""Notebook profiles: 'smoke' runs every cell in seconds (CI); 'full' makes the figures.
Each study module states its own full-profile budget (`Budget`: seeds, steps, validation interval and
prompts) as a module constant and resolves it with `Budget.settings`; the notebook displays the
`Profile` it resolved, and the index of figures (`grpo_lab.figures`) reads the settings of every
figure from that display, so a study's runs must take their settings from that profile. The planner
(`grpo-lab plan`) resolves the same budgets, so it counts the runs the notebooks will ask for."""

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from grpo_lab.analysis.plots import project_root
from grpo_lab.analysis.scores import HEADLINE

RESULTS = "results"
"""the full profile's run store, relative to the project root"""
STORE_ENV = "GRPO_LAB_STORE"
"""the environment variable that names another run store for every profile"""


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
    eval_start: int = 0
    """no validation between step 0 and this step: the runs of a study scored on their tail
    (`analysis.scores.HEADLINE`) skip the evaluations its score never reads"""

    def runs_dir(self) -> Path:
        """Where runs are stored: the full profile's in the repository, `results/` (committed, so a
        profile that takes several sittings keeps what each trained, and a reader regenerates every
        figure without training), any other profile's in the scratch store `runs/NAME/` that git
        ignores; `GRPO_LAB_STORE` (a directory) replaces either, e.g. to retrain everything from
        nothing into a store of its own. Runs are keyed by their config, so notebooks share them."""
        chosen = os.environ.get(STORE_ENV)
        if chosen:
            return Path(chosen).expanduser().resolve()
        return project_root() / (RESULTS if self.name == "full" else f"runs/{self.name}")

    def figure_name(self, name: str) -> str:
        """Smoke figures get a suffix so they never overwrite the full-profile ones."""
        return name if self.name == "full" else f"{name}_{self.name}"


PROFILES = {
    "smoke": Profile("smoke", seeds=(0, 1), steps=4, eval_every=2, val_size=32),
    "full": Profile("full", seeds=(0, 1, 2), steps=200, eval_every=20, val_size=200),
}


def profile(
    name: str,
    seeds: Sequence[int] | None = None,
    steps: int | None = None,
    full_steps: int | None = None,
    eval_every: int | None = None,
    val_size: int | None = None,
    full_seeds: Sequence[int] | None = None,
    eval_start: int = 0,
) -> Profile:
    """A profile by name, with the notebook's own seeds or steps when it sets them. `full_steps` and
    `full_seeds` are the study's budget under the full profile (the smoke profile keeps its few steps
    and seeds); `eval_every` overrides the profile's validation interval under the full profile;
    `val_size` caps the validation prompts (a smaller held-out set for a study's many short runs;
    never more than the profile's own); `eval_start` (full profile only) skips the validations before
    that step."""
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; valid: {', '.join(PROFILES)}")
    base = PROFILES[name]
    full = name == "full"
    default_seeds = tuple(full_seeds) if full and full_seeds is not None else base.seeds
    return Profile(
        base.name,
        tuple(seeds) if seeds is not None else default_seeds,
        steps if steps is not None else (full_steps if full and full_steps is not None else base.steps),
        eval_every if full and eval_every is not None else base.eval_every,
        base.val_size if val_size is None else min(base.val_size, val_size),
        eval_start if full else 0,
    )


@dataclass(frozen=True)
class Budget:
    """A study's budget under the full profile: the module constant its `settings` resolves. Studies
    that ask for the same runs (02 and 12, 03 and 12, 01 and 09) resolve the same constant, so their
    runs stay shared through the store (`Profile.runs_dir()`)."""

    seeds: tuple[int, ...]
    """paired seeds per configuration"""
    steps: int
    """training steps per run"""
    eval_every: int | None = None
    """steps between validation passes; None: validate only before the first and after the last
    update, under every profile (a study whose outcome is the final validation)"""
    val_size: int | None = None
    """validation prompts at most (None: the profile's)"""
    scored_tail: bool = False
    """validate only where the headline score reads (`analysis.scores.HEADLINE`: the last part of the
    steps), besides step 0 for the gain, under the full profile: a study whose runs are scored"""

    def settings(self, name: str, seeds: Sequence[int] | None = None, steps: int | None = None) -> Profile:
        """The profile `name` with this budget under the full profile (the smoke profile keeps its own
        few seeds, steps and prompts); `seeds` and `steps` as the notebook sets them win."""
        tail = math.ceil(steps_of(self, name, steps) * (1 - HEADLINE.window)) if self.scored_tail else 0
        chosen = profile(name, seeds, steps, self.steps, self.eval_every, self.val_size, self.seeds, tail)
        return replace(chosen, eval_every=chosen.steps) if self.eval_every is None else chosen


def steps_of(budget: Budget, name: str, steps: int | None) -> int:
    """The steps of a run under profile `name`: the notebook's `steps`, else the budget's under the
    full profile, else the profile's own."""
    if steps is not None:
        return steps
    return budget.steps if name == "full" else PROFILES[name].steps
