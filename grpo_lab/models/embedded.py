"""The embedded default model: a ~1M-parameter Llama with a character tokenizer, warm-started
by a short supervised fine-tune on the task's reference solutions until its greedy validation
accuracy is moderate (GRPO learns from groups with mixed rewards). The models of the tasks the
studies use ship with the package (`SHIPPED`, each with the sha256 of its weights): a warm start stops
on a threshold that kernels rounding differently can cross one check apart, so a rebuild on another
machine may give other weights, and every run must start from the same ones. Any other task's model is
built once per (task, model config), saved with `save_pretrained`, and always loaded back through
`from_pretrained`; one process builds it, any other that needs it meanwhile waits for it
(`build_lock`) and loads it."""

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import random
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TypedDict

import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.utils import logging as hf_logging

from grpo_lab.models.evaluation import evaluate
from grpo_lab.models.sampler import positions
from grpo_lab.models.tokenizer import CHARSET, build_char_tokenizer
from grpo_lab.models.weights import weights_sha256
from grpo_lab.tasks import Task, make_task, task_identity
from grpo_lab.tasks.from_file import is_file_task, task_path
from grpo_lab.threads import torch_threads


def llama_arch(width: int, mlp: int, layers: int, heads: int) -> dict[str, int]:
    """The shape of every Llama this package builds from scratch (`new_llama`): hidden size `width`, an
    MLP of `mlp` units, `layers` decoder layers, `heads` attention heads each with its own key-value
    head (no grouped-query attention). The dict, in this key order, is hashed into cached models' names."""
    return dict(
        hidden_size=width,
        intermediate_size=mlp,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
    )


ARCH = llama_arch(width=128, mlp=512, layers=4, heads=16)
"""the embedded model's ~1M-parameter shape"""


class WarmStart(TypedDict):
    """The settings of the supervised warm start (a dict: they are hashed into the cache key and
    written to warm_start.json as they are)."""

    lr: float
    batch_size: int
    """examples per step (drawn with replacement from a task with fewer training problems)"""
    target_accuracy: float
    """greedy validation accuracy at which the warm start stops"""
    eval_every: int
    max_steps: int
    val_size: int
    max_new_tokens: int
    """validation completion length at least (more for tasks with longer reference solutions)"""
    seed: int
    threads: int
    """torch threads the warm start runs on, whatever the caller's"""


WARM_START: WarmStart = {
    "lr": 1e-3,
    "batch_size": 64,
    "target_accuracy": 0.3,
    "eval_every": 25,
    "max_steps": 2000,
    "val_size": 200,
    "max_new_tokens": 24,
    "seed": 0,
    "threads": 2,
}
FILE_TASK_EVAL_EVERY = 5
"""a file task's warm start validates every this many steps (not `WARM_START`'s 25): a user's task
may jump from near 0 to near 1 between two checks 25 steps apart (the example task of notebook 11
went from 0.22 at step 75 to 0.98 at step 100), which leaves the compared schemes nothing to learn;
the built-in tasks keep `WARM_START`, so their models and every run on them are unchanged"""
FORMAT_VERSION = 2
SHIPPED = Path(__file__).parent / "shipped"
"""the shipped warm-started models, one directory each under the name `embedded_dir` gives (the hash
of the task's data, tokenizer, architecture and warm-start settings); `scripts/ship_models.py`
builds them and checks a rebuild against them"""
RECORD = "warm_start.json"
"""the file of a built model that records its warm start and `weights_sha256`, written last"""


def warm_start(task: str) -> WarmStart:
    """The warm-start settings of a task: `WARM_START`, validated every `FILE_TASK_EVAL_EVERY` steps
    for a file task."""
    if not is_file_task(task):
        return WARM_START
    settings = WARM_START.copy()
    settings["eval_every"] = FILE_TASK_EVAL_EVERY
    return settings


def cache_root() -> Path:
    return Path(os.environ.get("GRPO_LAB_CACHE", Path.home() / ".cache" / "grpo_lab"))


def embedded_path(task: str, digits: int | None = None, built: Task | None = None) -> Path:
    """Directory of the warm-started model for a task: the shipped one when the package has it, else
    the cached build, built on first use (under `build_lock`, so a process that finds it being built
    waits and loads it instead of building it again). `built` is the task `task` names as the caller
    built it for the embedded model (`make_task(task, digits)`, the trainer's): its problems name the
    model (`embedded_dir`) instead of a second build of the task."""
    shipped = shipped_dir(task, digits, built)
    if shipped is not None:
        return shipped
    path = embedded_dir(task, digits, built)
    if not (path / RECORD).exists():
        with build_lock(path):
            if not (path / RECORD).exists():
                build(task, digits, path)
    return path


def shipped_dir(task: str, digits: int | None = None, built: Task | None = None) -> Path | None:
    """The shipped model of the task under today's settings, or None when the package has none
    (`built`: as for `embedded_path`)."""
    path = SHIPPED / embedded_dir(task, digits, built).name
    return path if (path / RECORD).exists() else None


def start_sha256(task: str, digits: int | None = None) -> str:
    """The sha256 of the embedded model's weights for a task (`weights.weights_sha256`), which every
    run on it starts from: the shipped model's recorded value, else the cached build's (built first
    when missing; a build from before the record existed is hashed once)."""
    return recorded_sha256(embedded_path(task, digits))


@functools.cache
def recorded_sha256(path: Path) -> str:
    """The sha256 of the weights that the built or shipped model at `path` records (its `RECORD`), which
    a model loaded from there must have: what `start_sha256` reads, for a caller that holds the path."""
    record = json.loads((path / RECORD).read_text())
    if "weights_sha256" in record:
        return str(record["weights_sha256"])
    from transformers import AutoModelForCausalLM

    return weights_sha256(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32))


def check_rebuild(task: str, digits: int | None = None) -> str:
    """Build the task's model afresh on this machine (in a temporary directory) and say whether it
    has the shipped weights: a machine whose kernels round differently can stop the warm start at
    another check and build another model, which runs never use (they start from the shipped one)."""
    shipped = shipped_dir(task, digits)
    if shipped is None:
        raise ValueError(f"no shipped model for task {task!r} (digits {digits}); shipped: "
                         f"{', '.join(sorted(p.name for p in SHIPPED.iterdir() if p.is_dir()))}")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        built = Path(tmp) / shipped.name
        build(task, digits, built)
        ours = json.loads((built / RECORD).read_text())
    theirs = json.loads((shipped / RECORD).read_text())
    if ours["weights_sha256"] == theirs["weights_sha256"]:
        return f"{task}: this machine builds the shipped weights ({theirs['weights_sha256'][:16]})"
    return (
        f"{task}: this machine builds OTHER weights than the shipped model: sha256 "
        f"{ours['weights_sha256'][:16]} after {ours['steps']} steps (greedy accuracy "
        f"{ours['history'][-1]['val/accuracy']}) against the shipped {theirs['weights_sha256'][:16]} after "
        f"{theirs['steps']} steps; runs start from the shipped one"
    )


@contextlib.contextmanager
def build_lock(path: Path) -> Iterator[None]:
    """Hold the exclusive right to build the cached artifact `path` (an flock on a lock file beside
    it, released however this process ends): two processes never build the same artifact at once,
    which on a few cores makes both take several times as long as one. Re-check for `path` inside."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f".{path.name}.lock", "a") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        yield


def embedded_dir(task: str, digits: int | None = None, built: Task | None = None) -> Path:
    """Where the warm-started model for a task is (or will be) cached: named by a hash of the task's
    data, the tokenizer, the architecture and the warm-start settings, so any change to them names a
    new model (a file task by its file's name and content, not its path). Builds nothing but the task
    itself, once per process, when the caller has not (`built`: as for `embedded_path`)."""
    spec = {
        "task": task_identity(task),
        "digits": digits,
        "problems": _problems_fingerprint(task, digits) if built is None else _fingerprint(built),
        "tokenizer": CHARSET,
        "arch": ARCH,
        "warm_start": warm_start(task),
        "version": FORMAT_VERSION,
    }
    key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]
    name = f"file_{task_path(task).name}" if is_file_task(task) else task
    return cache_root() / "models" / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', name)[-48:]}-{key}"


def _fingerprint(task: Task) -> str:
    """A hash of every problem of the task (the cache key covers the data itself, not just its name)."""
    return hashlib.sha256("\n".join(p.prompt + p.solution for p in task.problems).encode()).hexdigest()


@functools.cache
def _problems_fingerprint(task: str, digits: int | None) -> str:
    """`_fingerprint` of the task a name gives, built once per process: the run store asks for
    it for every run of a sweep."""
    return _fingerprint(make_task(task, digits))


def new_llama(tokenizer, arch: dict, max_position_embeddings: int) -> LlamaForCausalLM:
    """A freshly initialised Llama with the character tokenizer's vocabulary and special tokens and
    tied embeddings (seed torch first for a reproducible initialisation)."""
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        max_position_embeddings=max_position_embeddings,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
        **arch,
    )
    return LlamaForCausalLM(config)


def _sft_batch(tokenizer, examples, device):
    """Prompt + solution + EOS, loss only on the solution and EOS tokens."""
    ids, labels = [], []
    for ex in examples:
        p = tokenizer(ex.prompt, add_special_tokens=False)["input_ids"]
        s = tokenizer(ex.solution, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        ids.append(p + s)
        labels.append([-100] * len(p) + s)
    width = max(map(len, ids))
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([[pad] * (width - len(x)) + x for x in ids], device=device)  # (B, L)
    label_ids = torch.tensor([[-100] * (width - len(x)) + x for x in labels], device=device)  # (B, L)
    mask = (
        torch.arange(width, device=device)[None]
        >= torch.tensor([width - len(x) for x in ids], device=device)[:, None]
    ).long()
    return input_ids, label_ids, mask


def build(task_name: str, digits: int | None, path: Path) -> None:
    """Train and save the warm-started model at `path` (atomically: a half-built one never appears).
    The task is built here from its name, with its own rewards and none of a run's: the warm start
    stops on the task's correctness check, which for a file task follows a run's first reward
    (`tasks.from_file`), so a run's task could stop it elsewhere and cache other weights under the
    same name."""
    cfg = warm_start(task_name)
    task = make_task(task_name, digits)
    tokenizer = build_char_tokenizer()
    # exactly this many threads, whatever the caller runs with (a one-thread sweep worker, say): CPU
    # float reductions depend on the thread count, so the cached model must not depend on who built it
    with torch_threads(cfg["threads"]):
        torch.manual_seed(cfg["seed"])
        model = new_llama(tokenizer, ARCH, max_position_embeddings=128)
        opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"])
        rng = random.Random(cfg["seed"])
        val = task.validation(cfg["val_size"])
        # long-answer tasks need room for their longest reference solution (and its EOS)
        max_new_tokens = max(cfg["max_new_tokens"], 1 + max(len(ex.solution) for ex in task.problems))
        names = task.default_rewards
        weights = (1.0,) * len(names)
        start, history, step = time.perf_counter(), [], 0
        for step in range(1, cfg["max_steps"] + 1):
            size = cfg["batch_size"]  # a small file task has fewer problems than a batch: with replacement
            batch = (
                rng.sample(task.train, size) if size <= len(task.train) else rng.choices(task.train, k=size)
            )
            input_ids, labels, mask = _sft_batch(tokenizer, batch, "cpu")
            loss = model(
                input_ids=input_ids,
                attention_mask=mask,
                position_ids=positions(mask),
                labels=labels,
            ).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % cfg["eval_every"] == 0:
                metrics = evaluate(model, tokenizer, task, val, max_new_tokens, names, weights)
                history.append({"step": step, "loss": loss.item(), **metrics})
                if metrics["val/accuracy"] >= cfg["target_accuracy"]:
                    break
    path.parent.mkdir(parents=True, exist_ok=True)
    hf_logging.disable_progress_bar()
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=".building-"))
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    record = {
        "task": task_name,
        "digits": digits,
        "steps": step,
        "seconds": time.perf_counter() - start,
        "params": sum(p.numel() for p in model.parameters()),
        "history": history,
        "weights_sha256": weights_sha256(model),
        **cfg,
    }
    (tmp / RECORD).write_text(json.dumps(record, indent=2))
    try:
        tmp.rename(path)
    except OSError:  # another process built it first: keep theirs
        shutil.rmtree(tmp, ignore_errors=True)
