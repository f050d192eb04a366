"""`grpo-lab bench`: the cost of one GRPO step, measured side by side on the same model files, prompts,
group size, completion length, beta, rows per forward and number of updates.

- grpo_lab: the real trainer (`grpo_lab.training.trainer.train`) on a `grpo` config;
- TRL: `GRPOTrainer` with its fastest settings for that work (no gradient checkpointing, no vLLM,
  one generation and one update per step, the same beta and loss type), when trl is installed;
- the bare bound: a plain KV-cached sampling loop through the transformers model plus one forward
  and backward over the sampled batch (plus a reference forward when the KL is on), nothing else.

Each measurement runs in a process of its own (spawned, so no system inherits another's memory or
imports, and dying with the process that runs the bench), in interleaved rounds (load from other jobs
spreads over all of them). Each reports the median time between consecutive steps after a warm-up step
(model loading, validation and trainer set-up are never counted), completion tokens per second, and its
peak memory: the child's high-water RSS on a CPU (model loading included, the same for every system),
`torch.cuda.max_memory_allocated` from a reset before loading on a GPU. With `pool_runs`, a small
sweep (on the embedded model by default) is also run with one worker and with the local pool, and their
wall times compared.

`arms` (`grpo-lab bench --arms ...`) instead times methods and tricks against one another on the study
base (`comparisons.bed.base`), each arm's steps in a process of its own on one torch thread, in
interleaved rounds, beside each step's cost by count (`analysis.step_cost`): the quiet-machine time the
verdict table's cost sets beside its counts, never step times logged under load.

A benchmark, not a test: the figures depend on the machine and on what else it runs."""

import contextlib
import dataclasses
import functools
import hashlib
import json
import logging
import math
import multiprocessing
import os
import platform
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, cast

import pandas as pd
import torch
from transformers import PreTrainedTokenizerBase

from grpo_lab.config import Config
from grpo_lab.experiments.execution import die_with
from grpo_lab.models.embedded import build_lock, cache_root, llama_arch, new_llama
from grpo_lab.models.loading import load_policy, resolve_model_path
from grpo_lab.models.logprobs import completion_logits, token_logprobs
from grpo_lab.models.sampler import encode_prompts, sample
from grpo_lab.presets import preset
from grpo_lab.tasks import make_task
from grpo_lab.threads import torch_threads

BENCH_4M_ARCH = llama_arch(width=256, mlp=1024, layers=4, heads=16)
"""the ~4.2M-parameter model: the embedded model's architecture at twice its width"""
QWEN_VOCAB = 151_936
"""Qwen2.5's vocabulary: the output rows of the large-vocabulary model the targets name"""
SPEEDUP_VS_TRL = {"embedded": 1.5, "4m": 1.2, "smollm2-135m": 1.5, "qwen-vocab": 1.5}
"""the least speed-up of a step over TRL's that a report checks for, by model kind (`model_kind`)"""
MEMORY_VS_TRL = {"smollm2-135m": 0.5, "qwen-vocab": 0.5}
"""the most peak memory relative to TRL's that a report checks for, by model kind"""
SYSTEMS = ("grpo_lab", "trl", "bare")
OVER_BARE_BOUND = 1.2
"""the most a grpo_lab step may take relative to the bare bound's"""
POOL_SPEEDUP = 1.7
"""the least speed-up of the local pool's sweep over one worker's"""
ARM_SETS = ("schemes", "tricks", "leave-one-out")
"""the named lists of arms `arm_set` gives: the scheme comparison's (grpo first), grpo and each trick
switched on over it, and every trick on then each left out (the verdict table's trick rows)"""
HALF_BED: dict[str, Any] = {"prompts_per_step": 4}
"""the cheaper test bed the study base is timed against: half its prompts, so each of its four
mini-batches is one group (eight optimizer steps of 8 completions instead of 16)"""


@dataclasses.dataclass(frozen=True)
class Work:
    """The work of one step, the same for every system measured."""

    model: str
    """'embedded', '4m', a pretrained model's name ('smollm2-135m') or a Hugging Face model path / id"""
    task: str = "arith"
    prompts: int = 8
    """distinct prompts per step"""
    group_size: int = 8
    completion_length: int = 24
    """max_completion_length"""
    force_length: bool = False
    """suppress EOS so that every completion has exactly `completion_length` tokens on every side"""
    rows_per_forward: int = 0
    """completions in one forward and backward, on every side (grpo_lab's micro_batch_size, TRL's
    per_device_train_batch_size with gradient accumulation over the batch); 0: the whole batch"""
    device: str = "cpu"
    """'cpu' or 'cuda'"""

    def __post_init__(self) -> None:
        rows = self.prompts * self.group_size
        if self.rows_per_forward < 0 or (self.rows_per_forward and rows % self.rows_per_forward):
            raise ValueError(
                f"rows_per_forward {self.rows_per_forward} must divide the batch of {rows} completions "
                "(or be 0: the whole batch)"
            )
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"device {self.device!r}: valid are 'cpu' and 'cuda'")

    @property
    def rows(self) -> int:
        """completions per step"""
        return self.prompts * self.group_size

    @property
    def per_forward(self) -> int:
        """completions per forward and backward"""
        return self.rows_per_forward or self.rows


def bench_4m_path() -> Path:
    """The ~4.2M-parameter Llama (random init, seed 0, the character tokenizer), built on first use
    (by one process at a time, see `build_lock`)."""
    from grpo_lab.models.tokenizer import CHARSET, build_char_tokenizer

    key = hashlib.sha256(json.dumps([BENCH_4M_ARCH, CHARSET]).encode()).hexdigest()[:12]
    path = cache_root() / "models" / f"bench-4m-{key}"
    if (path / "config.json").exists():
        return path
    with build_lock(path):
        if not (path / "config.json").exists():
            tok = build_char_tokenizer()
            with torch.random.fork_rng():
                torch.manual_seed(0)
                model = new_llama(tok, BENCH_4M_ARCH, max_position_embeddings=256)
            tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=".building-"))
            model.save_pretrained(tmp)
            tok.save_pretrained(tmp)
            tmp.rename(path)
    return path


def model_path(work: Work) -> str:
    """A local path or hub id every system loads the model from."""
    if work.model == "4m":
        return str(bench_4m_path())
    return resolve_model_path(work.model, work.task, None)


def config_for(work: Work, beta: float, steps: int, seed: int = 0) -> Config:
    """The grpo_lab config of this work: the `grpo` preset with beta as the KL coefficient and
    validation only at the two ends (it is not part of a step)."""
    return preset(
        "grpo",
        model=model_path(work),
        task=work.task,
        steps=steps,
        seed=seed,
        prompts_per_step=work.prompts,
        group_size=work.group_size,
        max_completion_length=work.completion_length,
        kl_coef=beta,
        fault_long_frac=1.0 if work.force_length else 0.0,
        micro_batch_size=work.per_forward,
        eval_every=steps + 1,
        val_size=1,
        val_samples=0,
        device=work.device,
        progress=False,
    )


def step_seconds(stamps: list[float], warmup: int) -> list[float]:
    """Times between consecutive step ends, the first `warmup` steps left out."""
    return [b - a for a, b in zip(stamps[warmup:], stamps[warmup + 1 :])]


class StepClock:
    """Trainer callback: the time at the end of each of the `steps` training steps."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.stamps: list[float] = []

    def on_step(self, step: int, row: dict) -> None:
        if step < self.steps:  # the last call carries the final validation, not a step
            self.stamps.append(time.perf_counter())

    def on_end(self, summary: dict) -> None:
        pass


def run_grpo_lab(work: Work, beta: float, steps: int, warmup: int, seed: int) -> dict:
    """Steps of the real trainer: their times and the trainer's own phase breakdown (medians)."""
    from grpo_lab.training.trainer import train

    total = steps + warmup + 1
    clock = StepClock(total)
    metrics = train(config_for(work, beta, total, seed), callbacks=[clock])
    rows = metrics.dropna(subset=["reward"]).iloc[warmup + 1 :]
    phases = ["time/sample_s", "time/logprob_s", "time/forward_backward_s", "time/optimizer_s"]
    return {
        "step_s": step_seconds(clock.stamps, warmup),
        "phases": {k.split("/")[1]: float(rows[k].median()) for k in phases},
        "mean_length": float(rows["completions/mean_length"].mean()),
    }


def run_bare(work: Work, beta: float, steps: int, warmup: int, seed: int) -> dict:
    """The bare bound: transformers KV-cached sampling, a forward and backward over the batch (in
    chunks of `rows_per_forward`), and a reference forward when beta > 0; no rewards, advantages,
    optimizer or logging. The sampling temperature is grpo_lab's config's for the same work."""
    device = torch.device(work.device)
    temperature = config_for(work, beta, steps + warmup + 1, seed).temperature
    policy = load_policy(model_path(work), work.task, None, device, need_reference=beta > 0)
    model, tok = policy.model, cast(PreTrainedTokenizerBase, policy.tokenizer)
    task = make_task(work.task, None)
    generator = torch.Generator().manual_seed(seed)
    n = work.prompts * work.group_size
    forced = torch.ones(n, dtype=torch.bool) if work.force_length else None
    stamps, parts, lengths = [time.perf_counter()], [], []
    for step in range(steps + warmup + 1):
        examples = task.batch(seed, step, work.prompts)
        ids, mask = encode_prompts(tok, [ex.prompt for ex in examples], device)
        t0 = time.perf_counter()
        model.eval()
        rollout = sample(
            model,
            ids,
            mask,
            group_size=work.group_size,
            max_new_tokens=work.completion_length,
            temperature=temperature,
            eos_id=tok.eos_token_id,
            pad_id=tok.pad_token_id,
            generator=generator,
            suppress_eos=forced,
            path="transformers",
        )
        model.train()
        t1 = time.perf_counter()
        chunks = [rollout.select(rows) for rows in torch.arange(n).split(work.per_forward)]
        tokens = rollout.completion_mask.sum()
        for chunk in chunks:
            logp = token_logprobs(
                completion_logits(model, chunk, temperature, path="transformers"), chunk.completion_ids
            )  # (R, T)
            (-(logp * chunk.completion_mask).sum() / tokens).backward()
        model.zero_grad(set_to_none=True)
        t2 = time.perf_counter()
        reference_s = 0.0
        if beta > 0:
            with torch.no_grad(), policy.as_reference() as ref:
                for chunk in chunks:
                    completion_logits(ref, chunk, temperature, path="transformers")
            reference_s = time.perf_counter() - t2
        stamps.append(time.perf_counter())
        parts.append((t1 - t0, t2 - t1, reference_s))
        lengths.append(float(rollout.lengths.mean()))
    kept = parts[warmup + 1 :]
    return {
        "step_s": step_seconds(stamps[1:], warmup),
        "phases": {
            name: statistics.median(p[i] for p in kept)
            for i, name in enumerate(["sample_s", "forward_backward_s", "reference_s"])
        },
        "mean_length": statistics.mean(lengths[warmup + 1 :]),
        "params": sum(p.numel() for p in model.parameters()),
    }


def trl_available() -> bool:
    try:
        import trl  # noqa: F401
    except ImportError:
        return False
    return True


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """TRL and transformers warnings off while TRL is set up and runs."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            yield
        finally:
            hf_logging.set_verbosity(level)


def run_trl(work: Work, beta: float, steps: int, warmup: int, seed: int, out: Path) -> dict:
    """TRL's GRPOTrainer on the same work with its fastest settings for it (see the module doc), at
    the learning rate and temperature of grpo_lab's config for that work."""
    from datasets import Dataset
    from transformers import AutoTokenizer, PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    class Clock(TrainerCallback):
        """The time at each step end, and TRL's mean completion length of that step."""

        def __init__(self) -> None:
            self.stamps: list[float] = []
            self.lengths: list[float] = []
            self.metrics: dict = {}

        def on_step_end(self, args, state, control, **kwargs):
            self.stamps.append(time.perf_counter())
            self.lengths.append(self.metrics.get("completions/mean_length", [math.nan])[-1])

    total = steps + warmup + 1
    config = config_for(work, beta, total, seed)
    task = make_task(work.task, None)
    rows = [ex for step in range(total) for ex in task.batch(seed, step, work.prompts)]  # our prompt order
    dataset = Dataset.from_list([{"prompt": ex.prompt, "answer": ex.answer} for ex in rows])
    path = model_path(work)
    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    args = GRPOConfig(
        output_dir=str(out),
        per_device_train_batch_size=work.per_forward,
        num_generations=work.group_size,
        max_completion_length=work.completion_length,
        generation_kwargs={"min_new_tokens": work.completion_length} if work.force_length else None,
        beta=beta,
        loss_type="grpo",  # grpo_lab's seq-mean-token-mean
        num_iterations=1,
        gradient_accumulation_steps=work.rows // work.per_forward,  # one generation, one update a step
        gradient_checkpointing=False,
        activation_checkpointing=False,
        use_vllm=False,
        max_steps=total,
        learning_rate=config.learning_rate,
        lr_scheduler_type="constant",
        temperature=config.temperature,
        shuffle_dataset=False,
        use_cpu=work.device == "cpu",
        bf16=False,
        logging_strategy="no",
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        seed=seed,
    )
    clock = Clock()
    # already TRL's reward signature; TRL annotates the rewards returned as a list, and iterates over them
    rewards: list[Any] = [task.rewards[name] for name in task.default_rewards]
    with _quiet():
        trainer = GRPOTrainer(
            model=path,
            reward_funcs=rewards,
            args=args,
            train_dataset=dataset,
            processing_class=tok,
            callbacks=[clock],
        )
        trainer.remove_callback(PrinterCallback)  # it prints the end-of-training summary
        assert trainer.model is not None  # loaded from `path`
        if trainer.model.is_activation_checkpointing:
            raise RuntimeError("TRL's model has activation checkpointing on: not its fastest setting")
        clock.metrics = trainer._metrics["train"]  # TRL's per-step metrics (cleared when it logs)
        trainer.train()
    return {
        "step_s": step_seconds(clock.stamps, warmup),
        "mean_length": statistics.mean(clock.lengths[warmup + 1 :]),
    }


def pool_throughput(
    runs: int, steps: int, model: str = "embedded", task: str = "arith", workers: int = 2
) -> dict:
    """Wall time of the same sweep (the `grpo` preset, `runs` seeds of `steps` steps with the preset's
    own validation) on one worker (this process, one torch thread, like each pool worker) and on the
    local pool of `workers`: first as a fresh process's first pool (its workers start from scratch),
    then again (the fork server that starts them is up)."""
    from grpo_lab.experiments.execution import execute

    configs = [
        preset("grpo", model=model, task=task, steps=steps, seed=s, progress=False) for s in range(runs)
    ]
    one_thread = functools.partial(torch_threads, 1)  # this process trains like a pool worker
    setups: dict[str, tuple[int, Callable[[], contextlib.AbstractContextManager[None]]]] = {
        "one_worker_s": (1, one_thread),
        "pool_s": (workers, contextlib.nullcontext),
    }
    setups["pool_warm_s"] = setups["pool_s"]
    seconds = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, (n, setting) in setups.items():
            start = time.perf_counter()
            with setting():
                outcomes = execute(configs, Path(tmp) / label, workers=n, progress=False)
            seconds[label] = time.perf_counter() - start
            failed = [o.error for o in outcomes.values() if o.status == "failed"]
            if failed:
                raise RuntimeError(f"the pool benchmark's runs failed: {failed[0]}")
    return {
        "model": model,
        "runs": runs,
        "steps": steps,
        "workers": workers,
        **seconds,
        "speedup": seconds["one_worker_s"] / seconds["pool_s"],
        "speedup_warm": seconds["one_worker_s"] / seconds["pool_warm_s"],
    }


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


def model_facts(path: str) -> tuple[int, int]:
    """The parameter count and the output layer's rows of the model at `path`, read from its config
    (the weights are not loaded)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(path)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters()), int(model.get_output_embeddings().weight.shape[0])


def model_kind(model: str, vocab: int) -> str:
    """The key of the targets (`SPEEDUP_VS_TRL`, `MEMORY_VS_TRL`) that apply to a model: its name for
    the named ones, 'qwen-vocab' for a model with Qwen2.5's output rows, else 'other' (no target)."""
    if model in ("embedded", "4m", "smollm2-135m"):
        return model
    return "qwen-vocab" if vocab == QWEN_VOCAB else "other"


def peak_memory_mb(device: str) -> float:
    """This process's peak memory in MiB: its high-water RSS on a CPU (Linux reports KiB, macOS bytes),
    CUDA's allocator peak since the last reset on a GPU."""
    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def measure(system: str, work: Work, beta: float, steps: int, warmup: int, seed: int, threads: int) -> dict:
    """One system's steps, in the process that calls it (a fresh one: `in_own_process`): the system's
    figures plus its peak memory and completion tokens per second."""
    if work.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    logging.getLogger("datasets").setLevel(logging.ERROR)
    with torch_threads(threads), tempfile.TemporaryDirectory() as tmp:
        if system == "grpo_lab":
            result = run_grpo_lab(work, beta, steps, warmup, seed)
        elif system == "bare":
            result = run_bare(work, beta, steps, warmup, seed)
        else:
            result = run_trl(work, beta, steps, warmup, seed, Path(tmp))
    result["peak_mb"] = peak_memory_mb(work.device)
    result["tokens_per_s"] = work.rows * result["mean_length"] / _median(result["step_s"])
    return result


def in_own_process(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` in a freshly spawned process that dies with this one (nothing inherited: its
    memory peak is its own); its exception, if any, is raised here."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        max_workers=1, mp_context=context, initializer=die_with, initargs=(os.getpid(),)
    ) as pool:
        return pool.submit(fn, *args).result()


def bench(
    model: str = "embedded",
    steps: int = 5,
    rounds: int = 2,
    warmup: int = 1,
    betas: tuple[float, ...] = (0.0, 0.04),
    force_length: bool | None = None,
    completion_length: int = 24,
    prompts: int = 8,
    group_size: int = 8,
    rows_per_forward: int = 0,
    device: str = "cpu",
    trl: bool = True,
    bare: bool = True,
    pool_runs: int = 0,
    pool_steps: int = 100,
    pool_model: str = "embedded",
    threads: int = 0,
) -> dict:
    """Measure and return every figure (see the module doc); `force_length` None: on for every model
    but the embedded one, whose natural lengths are the studies' work. `threads` (0: torch's default)
    is each measuring process's torch threads."""
    if steps < 2 or rounds < 1 or warmup < 0:
        raise ValueError(f"need steps >= 2, rounds >= 1, warmup >= 0; got {steps}, {rounds}, {warmup}")
    force = model != "embedded" if force_length is None else force_length
    work = Work(
        model=model,
        prompts=prompts,
        group_size=group_size,
        completion_length=completion_length,
        force_length=force,
        rows_per_forward=rows_per_forward,
        device=device,
    )
    path = model_path(work)  # built here, once, before any measuring process needs it
    params, vocab = model_facts(path)
    with_trl = trl and trl_available()
    systems = [s for s, on in zip(SYSTEMS, (True, with_trl, bare)) if on]
    raw: dict = {b: {s: [] for s in systems} for b in betas}
    for r in range(rounds):
        for beta in betas:
            for system in systems:
                result = in_own_process(measure, system, work, beta, steps, warmup, r, threads)
                raw[beta][system].append(result)
    rows = []
    for beta in betas:
        row: dict[str, Any] = {"beta": beta}
        for system in systems:
            results = raw[beta][system]
            row[f"{system}_s"] = _median([x for res in results for x in res["step_s"]])
            row[f"{system}_tokens_per_s"] = statistics.median(res["tokens_per_s"] for res in results)
            row[f"{system}_peak_mb"] = max(res["peak_mb"] for res in results)
            row[f"{system}_mean_length"] = statistics.mean(res["mean_length"] for res in results)
            if "phases" in results[0]:
                row[f"{system}_phases"] = {
                    k: statistics.median(res["phases"][k] for res in results) for k in results[0]["phases"]
                }
        if bare:
            row["over_bare_bound"] = row["grpo_lab_s"] / row["bare_s"]
        if with_trl:
            row["speedup_vs_trl"] = row["trl_s"] / row["grpo_lab_s"]
            row["memory_vs_trl"] = row["grpo_lab_peak_mb"] / row["trl_peak_mb"]
        rows.append(row)
    report = {
        "work": {**dataclasses.asdict(work), "path": path, "params": params, "vocab": vocab},
        "kind": model_kind(model, vocab),
        "steps": steps,
        "rounds": rounds,
        "warmup": warmup,
        "threads": threads or torch.get_num_threads(),
        "systems": systems,
        "trl": with_trl,
        "rows": rows,
        "raw_step_s": {str(b): {s: [res["step_s"] for res in raw[b][s]] for s in systems} for b in betas},
        "raw_peak_mb": {str(b): {s: [res["peak_mb"] for res in raw[b][s]] for s in systems} for b in betas},
        "environment": _environment(),
    }
    if pool_runs:
        with torch_threads(threads):
            pool_work = dataclasses.replace(work, model=pool_model)
            report["pool"] = pool_throughput(pool_runs, pool_steps, model_path(pool_work), work.task)
    report["targets"] = targets(report)
    return report


def study_step(rounds: int = 3, steps: int = 6, warmup: int = 1, threads: int = 1) -> dict:
    """The study base's step (`comparisons.bed.base("full")`) against the half batch's (`HALF_BED` over
    it), both the real trainer on the embedded model, timed in interleaved rounds on `threads`
    torch threads (the median time between consecutive step ends after `warmup` steps; validation
    is never inside it). Returns both medians, their ratio and the phase medians."""
    from grpo_lab.comparisons.bed import base
    from grpo_lab.training.trainer import train

    if steps < 2 or rounds < 1 or warmup < 0:
        raise ValueError(f"need steps >= 2, rounds >= 1, warmup >= 0; got {steps}, {rounds}, {warmup}")
    total = steps + warmup + 1
    quiet: dict[str, Any] = dict(steps=total, eval_every=total + 1, val_size=1, val_samples=0, progress=False)
    beds = {"study_base": base("full", **quiet), "half_batch": base("full", **{**HALF_BED, **quiet})}
    shown = ("prompts_per_step", "group_size", "num_iterations", "num_mini_batches", "max_completion_length")
    raw: dict[str, list[dict]] = {name: [] for name in beds}
    with torch_threads(threads):
        for r in range(rounds):
            for name, config in beds.items():
                clock = StepClock(total)
                metrics = train(config.replace(seed=r), callbacks=[clock])
                rows = metrics.dropna(subset=["reward"]).iloc[warmup + 1 :]
                phases = ["time/sample_s", "time/logprob_s", "time/train_s"]
                raw[name].append(
                    {
                        "step_s": step_seconds(clock.stamps, warmup),
                        "phases": {k.split("/")[1]: float(rows[k].median()) for k in phases},
                    }
                )
    out: dict[str, Any] = {"rounds": rounds, "steps": steps, "threads": threads}
    for name, results in raw.items():
        out[name] = {
            "step_s": _median([x for res in results for x in res["step_s"]]),
            "phases": {
                k: statistics.median(res["phases"][k] for res in results) for k in results[0]["phases"]
            },
            "config": {k: getattr(beds[name], k) for k in shown},
        }
    out["ratio"] = out["half_batch"]["step_s"] / out["study_base"]["step_s"]
    return out


def format_study_step(report: dict) -> str:
    """The study-step comparison as plain text."""
    lines = [
        f"study base and half batch: median of {report['rounds']} interleaved rounds x "
        f"{report['steps']} steps, {report['threads']} torch thread(s)"
    ]
    for name in ("study_base", "half_batch"):
        r = report[name]
        phases = ", ".join(f"{k} {v:.3f}" for k, v in r["phases"].items())
        setup = ", ".join(f"{k}={v}" for k, v in r["config"].items())
        lines.append(f"{name:>10}: {r['step_s']:.3f} s a step ({phases}); {setup}")
    lines.append(f"half batch / study base: {report['ratio']:.2f}")
    return "\n".join(lines)


def targets(report: dict) -> dict:
    """Each threshold (SPEEDUP_VS_TRL and MEMORY_VS_TRL for the report's model kind, OVER_BARE_BOUND,
    POOL_SPEEDUP) that applies to what this report measured: the threshold, the worst value measured,
    and whether it is met."""
    found = {}
    rows = report["rows"]
    speedup = SPEEDUP_VS_TRL.get(report["kind"])
    if speedup is not None and report["trl"]:
        worst = min(r["speedup_vs_trl"] for r in rows)
        found["speedup_vs_trl"] = {"at_least": speedup, "worst": worst, "met": worst >= speedup}
    memory = MEMORY_VS_TRL.get(report["kind"])
    if memory is not None and report["trl"]:
        worst = max(r["memory_vs_trl"] for r in rows)
        found["memory_vs_trl"] = {"at_most": memory, "worst": worst, "met": worst <= memory}
    if "bare" in report["systems"]:
        worst = max(r["over_bare_bound"] for r in rows)
        found["over_bare_bound"] = {
            "at_most": OVER_BARE_BOUND,
            "worst": worst,
            "met": worst <= OVER_BARE_BOUND,
        }
    if "pool" in report:
        value = report["pool"]["speedup"]
        found["pool_speedup"] = {"at_least": POOL_SPEEDUP, "worst": value, "met": value >= POOL_SPEEDUP}
    return found


def _environment() -> dict:
    import transformers

    versions = {"torch": torch.__version__, "transformers": transformers.__version__}
    if trl_available():
        import trl

        versions["trl"] = trl.__version__
    return {**versions, "python": platform.python_version(), "cpus": os.cpu_count()}


def format_report(report: dict) -> str:
    """The figures as a plain-text table: a line per beta and system."""
    w = report["work"]
    length = f"{'exactly' if w['force_length'] else 'at most'} {w['completion_length']} tokens"
    per_forward = w["rows_per_forward"] or w["prompts"] * w["group_size"]
    lines = [
        f"model {w['model']} ({w['params'] / 1e6:.2f}M params, vocabulary {w['vocab']:,}), task {w['task']}, "
        f"{w['prompts']} prompts x G {w['group_size']}, completions of {length}, {per_forward} rows per "
        f"forward, {w['device']}, {report['threads']} torch threads, median of {report['rounds']} x "
        f"{report['steps']} steps, each system in its own process",
        "",
        f"{'beta':>5} {'system':>8} {'s/step':>8} {'tokens/s':>9} {'peak MB':>9} {'mean length':>11}",
    ]
    for r in report["rows"]:
        for system in report["systems"]:
            lines.append(
                f"{r['beta']:5.2f} {system:>8} {r[f'{system}_s']:8.3f} {r[f'{system}_tokens_per_s']:9.1f} "
                f"{r[f'{system}_peak_mb']:9,.0f} {r[f'{system}_mean_length']:11.1f}"
            )
        ratios = []
        if report["trl"]:
            ratios += [
                f"TRL/ours time {r['speedup_vs_trl']:.2f}",
                f"ours/TRL memory {r['memory_vs_trl']:.2f}",
            ]
        if "bare" in report["systems"]:
            ratios.append(f"ours/bare time {r['over_bare_bound']:.2f}")
        if ratios:
            lines.append(f"{'':>5} {', '.join(ratios)}")
    lines.append("")
    for r in report["rows"]:
        for system in report["systems"]:
            if f"{system}_phases" in r:
                phases = ", ".join(f"{k} {v:.3f}" for k, v in r[f"{system}_phases"].items())
                lines.append(f"beta {r['beta']:.2f} {system} phases (s): {phases}")
    if "pool" in report:
        p = report["pool"]
        lines += [
            "",
            f"sweep of {p['runs']} runs x {p['steps']} steps ({p['model']}): one worker (1 thread) "
            f"{p['one_worker_s']:.1f} s; pool of {p['workers']} {p['pool_s']:.1f} s (speed-up "
            f"{p['speedup']:.2f}); again, fork server up, {p['pool_warm_s']:.1f} s ({p['speedup_warm']:.2f})",
        ]
    lines.append("")
    for name, t in report["targets"].items():
        bound = f">= {t['at_least']}" if "at_least" in t else f"<= {t['at_most']}"
        lines.append(
            f"target {name} {bound}: measured {t['worst']:.2f} -> {'met' if t['met'] else 'NOT met'}"
        )
    return "\n".join(lines)


def arm_set(name: str) -> tuple[str, ...]:
    """The arms of a named set (`ARM_SETS`), the reference first."""
    from grpo_lab.presets import TRICKS

    if name == "schemes":
        from grpo_lab.comparisons.scheme_arms import SCHEMES

        return SCHEMES
    if name == "tricks":
        return ("grpo", *TRICKS)
    if name == "leave-one-out":
        from grpo_lab.comparisons.trick_arms import ALL_ON

        return (ALL_ON, *(f"-{t}" for t in TRICKS))
    raise ValueError(f"unknown set of arms {name!r}; valid: {', '.join(ARM_SETS)}")


def arm_configs(names: Sequence[str], profile: str = "full", **changes: Any) -> dict[str, Config]:
    """Each arm on the study base (`comparisons.bed.base` under `profile`), then `changes`: a preset's
    name is that method ('cispo'), a trick's (`presets.TRICKS`) that trick switched on over grpo, 'all'
    every trick on, and '-name' every trick on but that one (`experiments.designs.ablation_points`, as
    the verdict table's leave-one-out rows)."""
    from grpo_lab.comparisons.bed import base
    from grpo_lab.experiments.designs import ablation_points
    from grpo_lab.presets import PRESETS, TRICKS

    if not names or len(set(names)) != len(names):
        raise ValueError(f"give each arm once, at least one; got {list(names)}")
    bed = base(profile, **changes)
    configs = {}
    for name in names:
        if name in PRESETS:
            configs[name] = base(profile, name, **changes)
        elif name in TRICKS:
            configs[name] = bed.replace(**{**TRICKS[name], **changes})
        elif name == "all" or (name.startswith("-") and name[1:] in TRICKS):
            ablation = {p.label: p.config for p in ablation_points(bed, TRICKS)}
            configs[name] = ablation[name].replace(**changes)
        else:
            raise ValueError(
                f"unknown arm {name!r}; valid: a preset ({', '.join(PRESETS)}), a trick "
                f"({', '.join(TRICKS)}), 'all' or '-' and a trick"
            )
    return configs


def time_arm(config: Config, steps: int, warmup: int, threads: int) -> dict:
    """One arm's `steps` timed steps after `warmup` (validation only outside them), in the process that
    calls it (a fresh one: `in_own_process`) on `threads` torch threads: the times between consecutive
    step ends, the trainer's phase medians, and the logged token counts of every step
    (`analysis.step_cost.TOKEN_COLUMNS`)."""
    from grpo_lab.analysis.step_cost import TOKEN_COLUMNS
    from grpo_lab.training.trainer import train

    total = steps + warmup + 1
    clock = StepClock(total)
    quiet: dict[str, Any] = dict(steps=total, eval_every=total + 1, val_size=1, val_samples=0, progress=False)
    with torch_threads(threads):
        metrics = train(config.replace(**quiet), callbacks=[clock])
    rows = metrics.dropna(subset=["reward"])
    phases = ["time/sample_s", "time/logprob_s", "time/train_s"]
    return {
        "step_s": step_seconds(clock.stamps, warmup),
        "phases": {k.split("/")[1]: float(rows[k].iloc[warmup + 1 :].median()) for k in phases},
        "tokens": rows[["reward", *TOKEN_COLUMNS]].to_dict("list"),
    }


def arms(
    names: Sequence[str],
    profile: str = "full",
    rounds: int = 3,
    steps: int = 5,
    warmup: int = 1,
    threads: int = 1,
    **changes: Any,
) -> dict:
    """Time the arms `names` (`arm_configs`, with `changes` over every arm) side by side: in each round
    every arm runs once with the round's seed in a process of its own (`time_arm`), in the arms' order and
    reversed in the next round, so that load from other jobs, steady or drifting, spreads over all of
    them. Per arm: the median step time over every round's timed steps and its ratio to the first arm's,
    with the step's cost by count (`analysis.step_cost.step_cost` over all its rounds' steps) and its
    FLOPs as a multiple of the first arm's."""
    from grpo_lab.analysis import step_cost
    from grpo_lab.models.size import model_size

    if steps < 1 or rounds < 1 or warmup < 0:
        raise ValueError(f"need steps >= 1, rounds >= 1, warmup >= 0; got {steps}, {rounds}, {warmup}")
    configs = arm_configs(names, profile, **changes)
    order = list(configs)
    raw: dict[str, list[dict]] = {name: [] for name in order}
    for r in range(rounds):
        for name in order if r % 2 == 0 else order[::-1]:
            raw[name].append(in_own_process(time_arm, configs[name].replace(seed=r), steps, warmup, threads))
    costs = {}
    for name, results in raw.items():
        size = model_size(configs[name])
        tokens = pd.concat([pd.DataFrame(res["tokens"]) for res in results], ignore_index=True)
        costs[name] = step_cost.step_cost(
            configs[name], tokens, params=size.matmul, trained_params=size.trained
        )
    medians = {name: _median([x for res in results for x in res["step_s"]]) for name, results in raw.items()}
    first = order[0]
    rows = [
        {
            "arm": name,
            "step_s": medians[name],
            "ratio": medians[name] / medians[first],
            "phases": {
                k: statistics.median(res["phases"][k] for res in results) for k in results[0]["phases"]
            },
            "cost": costs[name].to_dict(),
            "flops_ratio": step_cost.flops_ratio(costs[name], costs[first]),
            "cost_cell": step_cost.cost_cell(costs[name], costs[first]),
        }
        for name, results in raw.items()
    ]
    return {
        "profile": profile,
        "changes": changes,
        "rounds": rounds,
        "steps": steps,
        "warmup": warmup,
        "threads": threads,
        "reference": first,
        "rows": rows,
        "raw_step_s": {name: [res["step_s"] for res in results] for name, results in raw.items()},
        "environment": _environment(),
    }


def format_arms(report: dict) -> str:
    """The arms' times and counts as plain text: a line per arm, its multiples of the first arm's."""
    changes = ", ".join(f"{k}={v}" for k, v in report["changes"].items())
    lines = [
        f"arms on the study base ({report['profile']} profile{'; ' + changes if changes else ''}): median of "
        f"{report['rounds']} interleaved rounds x {report['steps']} steps, {report['threads']} torch "
        "thread(s), each arm in its own process",
        "",
        f"{'arm':>24} {'s/step':>8} {'time x':>7} {'fwd':>4} {'bwd':>4} {'sampled':>8} {'trained':>8} "
        f"{'GFLOPs':>8} {'FLOPs x':>8}",
    ]
    for r in report["rows"]:
        c = r["cost"]
        lines.append(
            f"{r['arm']:>24} {r['step_s']:8.3f} {r['ratio']:7.2f} {c['forward_passes']:4d} "
            f"{c['backward_passes']:4d} {c['sampled_tokens']:8.0f} {c['trained_tokens']:8.0f} "
            f"{c['flops'] / 1e9:8.3f} {r['flops_ratio']:8.2f}"
        )
    lines.append(f"(time x and FLOPs x: multiples of {report['reference']}'s)")
    return "\n".join(lines)
