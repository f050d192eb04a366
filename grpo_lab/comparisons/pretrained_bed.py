"""The pretrained bed: the one configuration the transfer study derives from, on a real pretrained
language model instead of the embedded character model of the study base (`comparisons.bed`).

It is GRPO on SmolLM2-135M-Instruct (`models.pretrained`, its weights pinned by their sha256 in the
registry, no hub needed) and the `word` task (`tasks.word_problems`: GSM8K-style one- and two-step
word problems the project generates itself, rendered with the model's chat template, the answer read
from the completion's end), set up so that the model starts with room to learn and a run stays cheap:
- the model starts at about a quarter of the validation prompts right (greedy, lenient reading) and
  none of the two-step ones, and its samples at temperature 1 are mostly wrong, so it samples, and is
  scored, at `TEMPERATURE` (0.7), where most groups hold a correct answer;
- 4 prompts x 8 completions of at most 48 tokens a step, one pass over the batch in four mini-batches of
  one group each: the later mini-batches are one to three updates off-policy, so the importance ratios
  leave 1 and the clip binds (a scheme whose mechanism is a clip must be able to act) at no extra pass.
  Two mini-batches left it nearly inert: over the first 8 steps at 1e-5 the clip bound on 0.13% of the
  tokens (0.04% above 1 + eps) against 0.59% (0.16%) at four (`docs/pilot/pretrained/`, `docs/studies.md`);
- full fine-tuning at a learning rate chosen by the pilot's scan (`PILOT_RATES`), one torch thread.
A study changes only what it compares; everything else is this bed. `PILOT` is the costed pilot that
fixes the rate and checks the bed's start and gain (`scripts/pretrained_pilot.py` trains it)."""

from typing import Any

import pandas as pd

from grpo_lab.analysis.scores import HEADLINE
from grpo_lab.config import Config
from grpo_lab.experiments import SweepResult
from grpo_lab.experiments.designs import Point
from grpo_lab.models.pretrained import PRETRAINED
from grpo_lab.presets import preset
from grpo_lab.profiles import Budget, Profile

MODEL = "smollm2-135m"
"""the pretrained model (`models.pretrained.PRETRAINED`)"""
TEMPERATURE = 0.7
"""the sampling temperature of training and of the sampled validation (the headline's)"""
PRETRAINED_BED: dict[str, Any] = {
    "model": MODEL,
    "task": "word",
    "prompts_per_step": 4,
    "group_size": 8,
    "max_completion_length": 48,
    "temperature": TEMPERATURE,
    "val_temperature": TEMPERATURE,
    "num_iterations": 1,
    "num_mini_batches": 4,
    "torch_threads": 1,
}
"""what the bed changes relative to the `grpo` preset"""
SMOKE_BATCH: dict[str, Any] = {"prompts_per_step": 4, "group_size": 2, "max_completion_length": 16}
"""under any profile but the full one: a small batch of short answers (a group per mini-batch still), so a
smoke run takes seconds"""
VAL_SAMPLED_SHARE = 2
"""the sampled validation (k completions a prompt) covers the first 1 / this of the greedy one's prompts:
at 4 samples a prompt it costs twice the greedy pass, not four times"""
PILOT = Budget(seeds=(0, 1), steps=30, eval_every=10, val_size=96)
"""the costed pilot: 30 steps, validated before the first update and every 10 steps on 96 prompts (48 of
them sampled 4 times), on two seeds, so that its conditions are read over the seed noise (seed 1 came
after seed 0 had fixed the rates; both are the transfer scan's tuning seeds of grpo)"""
PILOT_RATES = (1e-6, 3e-6, 1e-5)
"""the pilot's learning rates for full fine-tuning of a 135M model: at two mini-batches a step, the first
pilot's scan from 1e-6 to 3e-5 (`docs/studies.md`) put the best at 1e-5, bracketed by 3e-6 and 3e-5 on one
seed; four mini-batches take four updates a batch, and their pilot scores 3e-6 above both 1e-5 and 1e-6,
which bracket it (the transfer study's scan extends a best rate found at either end)"""


def base(settings: Profile, name: str = "grpo", **changes: Any) -> Config:
    """The bed under `settings`: the preset `name` with `PRETRAINED_BED`, the profile's steps and
    validation (greedy on `val_size` prompts, sampled on 1 / `VAL_SAMPLED_SHARE` of them), no progress bar,
    `SMOKE_BATCH` under a profile other than the full one, then `changes`. Equal arguments give equal
    configs, so studies that ask for the same runs share them through the run store."""
    profile_fields = dict(
        steps=settings.steps,
        eval_every=settings.eval_every,
        eval_start=settings.eval_start,
        val_size=settings.val_size,
        val_sampled_size=max(1, settings.val_size // VAL_SAMPLED_SHARE),
        progress=False,
    )
    quick = SMOKE_BATCH if settings.name != "full" else {}
    return preset(name, **{**PRETRAINED_BED, **quick, **profile_fields, **changes})


def start_sha256() -> str:
    """The sha256 of the weights every run on the bed starts from (the registry's pin: a conversion that
    gives other weights fails)."""
    return PRETRAINED[MODEL].weights_sha256


def described(settings: Profile) -> str:
    """Which start and bed a study's runs used, for a figure's title, e.g. 'pretrained bed: word task,
    smollm2-135m, start cf955087'."""
    config = base(settings)
    return f"pretrained bed: {config.task} task, {config.model}, start {start_sha256()[:8]}"


def pilot_settings(profile: str) -> Profile:
    """The pilot's profile: `PILOT` under the full profile, the smoke profile's few steps otherwise."""
    return PILOT.settings(profile)


def pilot_design(settings: Profile) -> list[Point]:
    """grpo on the bed at each of `PILOT_RATES` (the smoke profile: the middle one), labelled by rate."""
    rates = PILOT_RATES if settings.name == "full" else PILOT_RATES[1:2]
    return [
        Point(f"grpo, lr {lr:g}", {"learning_rate": lr}, base(settings, learning_rate=lr)) for lr in rates
    ]


PILOT_COLUMNS = {
    "val/accuracy": "greedy",
    "val/sampled_accuracy": "sampled",
    "val/pass@4": "pass@4",
}
"""the validation columns the pilot table shows at the start and at the end of each run"""


def pilot_table(result: SweepResult) -> pd.DataFrame:
    """One row per pilot run: its rate and seed, each of `PILOT_COLUMNS` at step 0 and at the last
    evaluation, the headline score (`analysis.scores.HEADLINE`) and its gain over the start, the mean
    completion length at the first and last steps, and the mean seconds a training step spent in each
    phase (sampling, fixed log-probs, forward and backward) and in all."""
    rows = []
    for (label, seed), run in result.metrics.groupby(["label", "seed"], sort=False):
        run = run.sort_values("step")
        evals = run.dropna(subset=["val/accuracy"])
        first, last = evals.iloc[0], evals.iloc[-1]
        lengths = run["completions/mean_length"].dropna()
        row: dict[str, Any] = {"run": label, "seed": int(seed), "last step": int(last["step"])}
        for column, name in PILOT_COLUMNS.items():
            row[f"{name} start"], row[f"{name} end"] = float(first[column]), float(last[column])
        row["headline"], row["gain"] = HEADLINE.of(run), HEADLINE.of(run) - HEADLINE.start(run)
        row["length start"], row["length end"] = float(lengths.iloc[0]), float(lengths.iloc[-1])
        for phase in ("sample", "logprob", "train", "step"):
            row[f"{phase} s"] = float(run[f"time/{phase}_s"].mean())
        rows.append(row)
    return pd.DataFrame(rows)
