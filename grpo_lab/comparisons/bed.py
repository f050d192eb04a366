"""The study base: the one configuration every study derives from, per notebook profile.

It is GRPO set up as a test bed where every mechanism the studies compare can act:
- off-policy updates: each sampled batch is used for several optimizer steps (mini-batches of whole
  groups, and passes over the batch), so importance ratios depart from 1 and the clip ranges, the
  dual clip and clip-higher bind;
- long, variable answers: the `worked` task, whose completions run from 4 to about 45 tokens and can
  grow or shrink under training, gives the length tricks something to reshape;
- grpo's own learning rate: two passes of four mini-batches (eight optimizer steps per batch) are
  enough for the clip to bind on more than 1% of the tokens;
- 8 prompts x 8 completions, so each optimizer step sees two whole groups: with one group per
  mini-batch (4 prompts) the step costs half as much but the run learns a fifth as much in the
  headline score (`docs/studies.md`, "A cheaper step").
A study changes only what it compares; everything else is this base."""

from typing import Any

from grpo_lab.config import Config
from grpo_lab.models.embedded import start_sha256
from grpo_lab.presets import preset
from grpo_lab.profiles import PROFILES, Budget, Profile

TEST_BED: dict[str, Any] = {
    "task": "worked",
    "max_completion_length": 48,
    "prompts_per_step": 8,
    "group_size": 8,
    "num_mini_batches": 4,
    "num_iterations": 2,
}
"""what the study base changes relative to the `grpo` preset"""
QUICK_BATCH: dict[str, Any] = {"prompts_per_step": 4, "group_size": 4, "dynamic_sampling_max_rounds": 16}
"""under any profile but the full one (smoke): a quarter of the batch, so every cell runs in seconds;
the full profile, the figures and the activity test use the base's own batch. Groups of 4 more often
give one reward to all, so dynamic sampling may draw more rounds to fill the batch: at 4 rounds two
of the smoke screen's 32 runs stopped on a machine whose kernels round differently (AVX2)"""
BASE_RUNS = Budget(seeds=(0, 1, 2), steps=60, eval_every=5, scored_tail=True)
"""the base over seeds under the full profile (01's runs, whose arms 09's claims share): 3 seeds of 60
steps, validated before the first update and every 5 steps in the scored tail, as the schemes' first
look (`comparisons.scheme_arms.FIRST_LOOK`), so they are the schemes' grpo runs and cost nothing more"""


def base(profile: str | Profile = "full", name: str = "grpo", **changes: Any) -> Config:
    """The study base under `profile` (a name or a `Profile`): the preset `name` (a method compared
    on the test bed) with `TEST_BED`, the profile's steps, validation interval and size (for the
    greedy and the sampled accuracy alike), no progress
    bar (and `QUICK_BATCH` under a profile other than the full one), then `changes`. Equal arguments
    give equal configs, so studies that ask for the same runs share them through the run store
    (`Profile.runs_dir()`)."""
    settings = _profile(profile)
    profile_fields = dict(
        steps=settings.steps,
        eval_every=settings.eval_every,
        eval_start=settings.eval_start,
        val_size=settings.val_size,
        val_sampled_size=settings.val_size,
        progress=False,
    )
    quick = QUICK_BATCH if settings.name != "full" else {}
    return preset(name, **{**TEST_BED, **quick, **profile_fields, **changes})


def described(profile: str | Profile = "full") -> str:
    """Which start and bed a study's runs used, for a figure's title: the base's task and the first
    hex digits of the weights every run on it starts from (`embedded.start_sha256`), e.g. 'study base:
    worked task, start a601a710'."""
    config = base(profile)
    start = (
        start_sha256(config.task, config.task_digits or None) if config.model == "embedded" else config.model
    )
    return f"study base: {config.task} task, start {start[:8]}"


def _profile(profile: str | Profile) -> Profile:
    if isinstance(profile, Profile):
        return profile
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; valid: {', '.join(PROFILES)}")
    return PROFILES[profile]
