"""The study on a user's own task (notebook 11): every compared preset on the study base with the
user's task, reward functions and model, each against the first preset (grpo) as paired per-seed
differences (the same seed gives every scheme the same prompts), and the verdict table of the
studies (`analysis.verdict_table`) on that task.

`settings` / `design` / `run` as in every study; `design` also takes the user's task, rewards, model
and presets (the notebook's parameters; their defaults are this module's constants, so the planner,
`grpo-lab plan`, counts the runs of the example task). Then `finals`, `paired_differences`, `scores`,
`table` and the figures (`figure`, `figure_verdicts`, `figure_curves`).

The verdict table is one family (`FAMILY`, Holm's control of the family-wise error rate, as the lab's
verdict table of notebook 12): each row shows its raw word beside the word of its interval at its Holm
level, and `caption` names the family."""

import hashlib
import json
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from transformers.utils import logging as hf_logging

from grpo_lab.analysis import multiplicity, plots, verdict_table
from grpo_lab.analysis.activity import ACTIVITY
from grpo_lab.analysis.effects import verdict
from grpo_lab.analysis.plots import project_root
from grpo_lab.analysis.scores import GREEDY, HEADLINE
from grpo_lab.analysis.stats import mean_interval
from grpo_lab.comparisons import paired
from grpo_lab.comparisons.bed import base
from grpo_lab.comparisons.point_sets import for_profile
from grpo_lab.experiments import SweepResult
from grpo_lab.experiments.designs import Point, grid_points
from grpo_lab.models.embedded import cache_root, llama_arch, new_llama
from grpo_lab.models.tokenizer import CHARSET, build_char_tokenizer
from grpo_lab.profiles import Budget, Profile
from grpo_lab.tasks.from_file import PREFIX, is_file_task

SMOKE_ARCH = llama_arch(width=32, mlp=64, layers=2, heads=2)
"""a random ~60k-parameter Llama: what the smoke profile trains when no model is named (no warm start)"""
EXAMPLE_TASK = "file:notebooks/data/reverse_digits.jsonl"
"""the task when none is named: 'reverse 864:' with the reversed digits as answer and solution, for
every three-digit number (900 prompts, about 90 held out by the prompt's hash): enough for the warm
start to generalise to held-out prompts, which the 20-prompt file of the unit tests is not"""
FAMILY = multiplicity.Family("every preset against the first, the rows of this verdict table", "holm")
"""the verdict table's family and its error-rate control"""
PRESETS = ("grpo", "dr_grpo", "dapo_loss", "gspo", "cispo", "lite_ppo")
"""the compared presets when none are named; the first is the reference"""
SMOKE_KEEP = 2
"""the smoke profile compares only the first this many presets"""
METRIC = HEADLINE.metric
"""the validation metric of the compared score: every figure of the study reads the headline score
(`analysis.scores.HEADLINE`), the verdict table's too; greedy accuracy is drawn beside it"""
SCORE = "score"
"""the column of `finals` that holds each run's headline score"""
FULL = Budget(seeds=(0, 1, 2), steps=20, eval_every=10, val_size=100)
"""under the full profile: 3 seeds of 20 steps, validated every 10 steps on at most 100 prompts"""


settings = FULL.settings
"""The study's profile: `FULL` under the full profile, the smoke profile's few otherwise;
`seeds` and `steps` as the notebook sets them."""


def compared(settings: Profile, presets: Sequence[str] | None = None) -> list[str]:
    """`presets` (default `PRESETS`), only the first `SMOKE_KEEP` under the smoke profile."""
    return for_profile(list(PRESETS if presets is None else presets), settings, SMOKE_KEEP)


def design(
    settings: Profile,
    task: str | None = None,
    rewards: Sequence[str] = (),
    model: str | None = None,
    presets: Sequence[str] | None = None,
) -> list[Point]:
    """Each compared preset (`compared`) on the study base with `task` (default `EXAMPLE_TASK`),
    the reward functions `rewards` (empty: the task's default) and `model` (`study_model`); the
    `preset` column names it."""
    config = base(
        settings,
        task=study_task(task_name(task)),
        rewards=tuple(rewards),
        model=study_model(model, settings),
    )
    return grid_points(config, {"preset": compared(settings, presets)})


def run(
    points: Sequence[Point], settings: Profile, root: str | Path | None = None, **options: Any
) -> SweepResult:
    """Train (or load) the design over the profile's seeds into `root` (default: the shared store);
    a failed run is an error that lists every failure (a comparison needs every preset). `options` as
    for `experiments.run_design`."""
    return paired.run(points, settings, root, **options)


def finals(result: SweepResult) -> pd.DataFrame:
    """Each run's headline score (`SCORE`, `analysis.scores.HEADLINE`: what the verdict table
    compares) and its greedy accuracy over the same window (`greedy`), by preset."""
    rows = [
        {"preset": preset, "seed": seed, SCORE: HEADLINE.of(run), "greedy": GREEDY.of(run)}
        for (preset, seed), run in result.metrics.groupby(["preset", "seed"], sort=False)
    ]
    return pd.DataFrame(rows)


def study_task(task: str) -> str:
    """`task`, with a relative `file:PATH` taken from the project root (a notebook's kernel may run in
    notebooks/ or in the root), so every run of the study names the same file."""
    if not is_file_task(task):
        return task
    path = Path(task[len(PREFIX) :]).expanduser()
    return task if path.is_absolute() else f"{PREFIX}{project_root() / path}"


def study_model(model: str | None, settings: Profile) -> str:
    """`model` when one is named; otherwise the embedded model (warm-started on the task's `solution`
    column) under the full profile, and under any other profile a tiny random Llama with the
    character tokenizer (`smoke_model`), so a smoke run needs no warm start."""
    if model is not None:
        return model
    return "embedded" if settings.name == "full" else str(smoke_model())


def smoke_model() -> Path:
    """A tiny random Llama with the character tokenizer, saved with save_pretrained under the cache
    (built once, atomically) and loaded like any user model."""
    spec = {"arch": SMOKE_ARCH, "tokenizer": CHARSET, "seed": 0}
    key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]
    path = cache_root() / "models" / f"smoke-random-{key}"
    if (path / "config.json").exists():
        return path
    tokenizer = build_char_tokenizer()
    torch.manual_seed(0)
    model = new_llama(tokenizer, SMOKE_ARCH, max_position_embeddings=128)
    path.parent.mkdir(parents=True, exist_ok=True)
    hf_logging.disable_progress_bar()
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=".building-"))
    tokenizer.save_pretrained(tmp)
    model.save_pretrained(tmp)
    try:
        tmp.rename(path)
    except OSError:  # another process built it first: keep theirs
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def paired_differences(
    finals: pd.DataFrame, metric: str, by: str, reference: str, confidence: float = 0.95
) -> pd.DataFrame:
    """Each group of `by` minus `reference` on the same seed, from one row per run in `finals` (e.g.
    `stats.final_values`): seeds paired, the mean difference with its t-interval, and the verdict
    (`effects.VERDICTS`; 'too few runs' under two pairs). The reference comes first, at 0."""
    table = finals.pivot_table(index="seed", columns=by, values=metric, aggfunc="first")
    if reference not in table:
        raise ValueError(f"reference {reference!r} has no run; groups: {', '.join(map(str, table.columns))}")
    order = [reference, *(k for k in dict.fromkeys(finals[by]) if k != reference)]
    rows = []
    for key in order:
        diffs = (table[key] - table[reference]).to_numpy(dtype=float)
        diffs = diffs[np.isfinite(diffs)]
        mean, lo, hi = mean_interval(diffs, confidence)
        if len(diffs) < 2:
            lo = hi = np.nan
        judged = "reference" if key == reference else verdict(len(diffs), lo, hi)
        rows.append({by: key, "pairs": len(diffs), "mean": mean, "lo": lo, "hi": hi, "verdict": judged})
    return pd.DataFrame(rows)


def scores(result: SweepResult) -> pd.DataFrame:
    """One row per run with its verdict scores and its preset's activity measure (where it has one)."""
    labels = [label for label in result.runs["label"].unique() if label in ACTIVITY]
    return paired.scores(result, {label: [label] for label in labels})


def table(scored: pd.DataFrame, reference: str, margin: float | None = None) -> pd.DataFrame:
    """The verdict rows: every other preset against `reference`, paired on seeds; `margin` as for
    `analysis.verdict_table.compare` (None: a share of the reference's gain); adjusted over its rows
    (`FAMILY`, `analysis.multiplicity.adjust`): each row has its raw and its adjusted word."""
    labels = [label for label in scored["label"].unique() if label != reference]
    rows = verdict_table.compare(scored, [(p, "scheme", p, reference) for p in labels], margin=margin)
    return multiplicity.adjust(rows, FAMILY)


def caption(verdict_rows: pd.DataFrame) -> str:
    """The verdict table's family line (`FAMILY`): the rows in it and its control."""
    return FAMILY.caption(multiplicity.family_size(verdict_rows))


def task_name(task: str | None) -> str:
    """The task as a figure names it: `task`, or `EXAMPLE_TASK` when none is named."""
    return EXAMPLE_TASK if task is None else task


def figure(differences: pd.DataFrame, settings: Profile, task: str | None = None) -> plt.Figure:
    """The paired differences (`paired_differences`) as a dot chart with their intervals."""
    reference = differences["preset"].iloc[0]
    return plots.intervals(
        differences,
        "preset",
        f"headline score ({HEADLINE.caption()}) minus {reference}'s, same seed",
        title=f"{task_name(task)}: {settings.steps} steps, {len(settings.seeds)} seeds",
    )


def figure_verdicts(verdict_rows: pd.DataFrame, settings: Profile, task: str | None = None) -> plt.Figure:
    """The verdict table as a forest plot (`paired.forest`)."""
    return paired.forest(verdict_rows, f"{settings.steps} steps", f"presets on {task_name(task)}")


def figure_curves(result: SweepResult, task: str | None = None) -> plt.Figure:
    """Validation accuracy, training reward and KL to the reference per preset."""
    shown = [METRIC, GREEDY.metric, "reward", "kl"]
    return plots.curves(result.metrics, shown, by="preset", title=task_name(task))
