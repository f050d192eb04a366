"""Peak memory of each phase of a training step on a Qwen2-shaped model with Qwen2.5's vocabulary.

The model is `qwen_vocab_model.py`'s (random weights, vocabulary 151,936, hidden 256, 4 layers, tied
embeddings, about 43M parameters, a small BPE tokenizer), built once under `--model-dir` when absent.
Each configuration runs the real trainer (`grpo` preset, beta 0.04, completions forced to full length,
one thread) for two steps in a process of its own and reports the second (the first allocates the
optimizer's state, a one-off); around each phase (sampling and scoring, the no-grad log-probs of the old
policy and the reference, the updates: forward, backward and optimizer step) the process's peak RSS is
reset (`/proc/self/clear_refs`) and read back (`VmHWM`), so each phase reports its own high-water mark
and how far it rose above the RSS it started from.

Modes: `before` is the log-prob path this lab had before the chunked one (the plain path, and the
reference's full log-softmax kept for the exact KL, which the trainer used to take whenever the
tokenizer was small); `plain` the plain path without the exact KL; `chunked` the path large
vocabularies take now. Usage:

    python benchmarks/logprob_memory.py [--prompts 1 2 4] [--group-size 4] [--length 32]
                                        [--micro-batch-size 0] [--budget-mb 0] [--modes before plain chunked]
                                        [--model-dir DIR]"""

import argparse
import ctypes
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from qwen_vocab_model import build_model

MODES = ("before", "plain", "chunked")
PHASES = ("sample", "logprob", "update")
DEFAULT_DIR = Path.home() / ".cache" / "grpo_lab" / "qwen-vocab-random"


def rss_mb(field: str) -> float:
    """A memory field of this process (VmRSS, VmHWM) in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def trim_heap() -> None:
    """Give the pages glibc's malloc holds free back to the system (`malloc_trim(0)`; nothing elsewhere).
    Freed tensors under its mmap threshold (up to 32 MiB) stay in the heap, and how much of the phase
    before is still held when a phase starts varies from run to run of the same step (seen: the update
    of 16 rows peaked anywhere from 1.75 to 2.51 GB): trimmed first, a phase's peak is what it needs
    above the memory alive when it starts, not what the allocator happened to keep."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def measured(name: str, fn: Callable, record: dict[str, dict[str, float]]) -> Callable:
    """`fn` with its peak RSS recorded under `name`: the RSS it started from (the heap trimmed,
    `trim_heap`) and its high-water mark."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        trim_heap()
        start = rss_mb("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")  # the high-water mark restarts from the RSS now
        out = fn(*args, **kwargs)
        record[name] = {"start_mb": start, "peak_mb": rss_mb("VmHWM")}
        return out

    return wrapper


def child(
    mode: str, prompts: int, group_size: int, length: int, micro: int, model_dir: Path, budget_mb: int
) -> dict:
    """One training step in `mode` with `micro` rows a micro-batch (0: the trainer's choice, from
    `budget_mb` MiB of activations when given, else from `trainer.ACTIVATION_BUDGET`), each phase
    measured; the record of this process."""
    from grpo_lab import preset
    from grpo_lab.models import logprobs
    from grpo_lab.training import trainer

    if mode != "chunked":
        logprobs.PLAIN_MAX_VOCAB = 10**9
    if mode == "before":
        trainer.EXACT_KL_MAX_VOCAB = 10**9
    if budget_mb:
        trainer.ACTIVATION_BUDGET = budget_mb * 2**20
    record: dict[str, dict[str, float]] = {}
    trainer.sample_batch = measured("sample", trainer.sample_batch, record)
    trainer.Trainer._fixed_logprobs = measured("logprob", trainer.Trainer._fixed_logprobs, record)
    trainer.Trainer._update = measured("update", trainer.Trainer._update, record)
    config = preset(
        "grpo",
        model=str(model_dir),
        task="arith",
        steps=2,
        prompts_per_step=prompts,
        group_size=group_size,
        max_completion_length=length,
        kl_coef=0.04,
        micro_batch_size=micro,
        fault_long_frac=1.0,  # every completion runs to the full length
        eval_every=3,
        val_size=1,
        val_samples=0,
        torch_threads=1,
        device="cpu",
        progress=False,
    )
    run = trainer.Trainer(config)
    run.step()
    row = run.step()  # its phases overwrite the first step's in `record`
    times = {p: row[f"time/{k}"] for p, k in zip(PHASES, ("sample_s", "logprob_s", "train_s"))}
    return {
        "phases": record,
        "times": times,
        "rows": prompts * group_size,
        "micro": row.get("cost/micro_batch_size", micro or prompts * group_size),
        "peak_mb": row["cost/peak_rss_mb"],
    }


def run(
    mode: str, prompts: int, group_size: int, length: int, micro: int, model_dir: Path, budget_mb: int
) -> dict:
    """`child` in a process of its own."""
    cmd = [
        sys.executable,
        __file__,
        "--child",
        mode,
        "--group-size",
        str(group_size),
        "--length",
        str(length),
    ]
    cmd += ["--prompts", str(prompts), "--micro-batch-size", str(micro), "--model-dir", str(model_dir)]
    cmd += ["--budget-mb", str(budget_mb)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{mode} x {prompts} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--prompts", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument(
        "--micro-batch-size",
        type=int,
        default=0,
        help="rows a micro-batch (0: the trainer's: all, or the memory budget's when chunked)",
    )
    parser.add_argument(
        "--budget-mb",
        type=int,
        default=0,
        help="with --micro-batch-size 0: the activation budget in MiB (0: the trainer's ACTIVATION_BUDGET)",
    )
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--model-dir", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        out = child(
            args.child,
            args.prompts[0],
            args.group_size,
            args.length,
            args.micro_batch_size,
            args.model_dir,
            args.budget_mb,
        )
        print(json.dumps(out))
        return
    if not (args.model_dir / "config.json").exists():
        build_model(args.model_dir)
    phases = " ".join(f"{p + ' peak/+rise MB':>22s} {'s':>5s}" for p in PHASES)
    print(f"{'mode':8s} {'rows':>4s} {'micro':>5s} {phases} {'step peak MB':>12s}")
    for mode in args.modes:
        for prompts in args.prompts:
            r = run(
                mode,
                prompts,
                args.group_size,
                args.length,
                args.micro_batch_size,
                args.model_dir,
                args.budget_mb,
            )
            cells = []
            for p in PHASES:
                m = r["phases"][p]
                cells.append(
                    f"{m['peak_mb']:10.0f} /{m['peak_mb'] - m['start_mb']:+10.0f} {r['times'][p]:5.1f}"
                )
            peak = max(m["peak_mb"] for m in r["phases"].values())  # the clear_refs resets move ru_maxrss too
            print(f"{mode:8s} {r['rows']:4d} {r['micro']:5d} {' '.join(cells)} {peak:12.0f}", flush=True)


if __name__ == "__main__":
    main()
