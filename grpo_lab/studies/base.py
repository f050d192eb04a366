"""The study base: the one configuration every study derives from, per notebook profile.

It is GRPO set up so that every mechanism the studies compare can act (`docs/sources.md`, "a test
bed where every mechanism acts"):
- off-policy updates: each sampled batch is used for several optimizer steps (mini-batches of whole
  groups, and passes over the batch), so importance ratios depart from 1 and the clip ranges, the
  dual clip and clip-higher bind;
- long, variable answers: the `worked` task, whose completions run from 4 to about 45 tokens and can
  grow or shrink under training, gives the length tricks something to reshape;
- a learning rate at which entropy falls over a long run, so the entropy tricks and the collapse
  diagnostics have something to act on.
A study changes only what it compares; everything else is this base."""

from typing import Any

from grpo_lab.config import Config
from grpo_lab.presets import preset
from grpo_lab.profiles import PROFILES, Profile

TEST_BED: dict[str, Any] = {
    "task": "worked",
    "max_completion_length": 48,
    "num_mini_batches": 4,
    "num_iterations": 2,
    "learning_rate": 1e-4,
}
"""what the study base changes relative to the `grpo` preset"""


def base(profile: str | Profile = "full", name: str = "grpo", **changes: Any) -> Config:
    """The study base under `profile` (a name or a `Profile`): the preset `name` (a method compared
    on the test bed) with `TEST_BED`, the profile's steps, validation interval and size, no progress
    bar, then `changes`. Equal arguments give equal configs, so studies that ask for the same runs
    share them through the run store (`Profile.runs_dir()`)."""
    settings = _profile(profile)
    return preset(
        name,
        **TEST_BED,
        steps=settings.steps,
        eval_every=settings.eval_every,
        val_size=settings.val_size,
        progress=False,
        **changes,
    )


def _profile(profile: str | Profile) -> Profile:
    if isinstance(profile, Profile):
        return profile
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; valid: {', '.join(PROFILES)}")
    return PROFILES[profile]
