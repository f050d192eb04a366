"""The studies on a user's own task (notebook 11): where its file is, which model a profile trains,
and each scheme against grpo as paired per-seed differences (the same seed gives every scheme the
same prompts)."""

import hashlib
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from transformers.utils import logging as hf_logging

from grpo_lab.analysis.effects import verdict
from grpo_lab.analysis.plots import project_root
from grpo_lab.analysis.stats import mean_interval
from grpo_lab.models.embedded import cache_root, new_llama
from grpo_lab.models.tokenizer import CHARSET, build_char_tokenizer
from grpo_lab.profiles import Profile
from grpo_lab.tasks.from_file import PREFIX, is_file_task

SMOKE_ARCH = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=2,
)
"""a random ~60k-parameter Llama: what the smoke profile trains when no model is named (no warm start)"""


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
