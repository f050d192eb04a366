"""GPU check: the real trainer's seconds per step, tokens per second and peak memory on a CUDA machine,
for several models in one run at a realistic completion length (512 new tokens by default).

The models are any names or paths the trainer accepts: by default the embedded model and SmolLM2-135M
(`smollm2-135m`), plus the Qwen2-shaped random model with Qwen2.5's 151,936-token vocabulary when
`--qwen-vocab DIR` names it (built by `python benchmarks/qwen_vocab_model.py DIR`). Each model runs
the `grpo` preset on `arith` with its work as `grpo-lab bench` defines it (`grpo_lab.bench.config_for`,
completions forced to full length: EOS suppressed, `fault_long_frac=1.0`), so every step samples,
scores and trains on prompts x group size x max-new-tokens completion tokens, whatever the model.

Reported per model: the median seconds per step after one warm-up step (and its phases), completion
tokens per second of a whole step, the micro-batch size (completions per forward and backward), the
forward passes per step, and the peak memory of that model's run (load, warm-up and steps): CUDA's
allocator peak (`torch.cuda.max_memory_allocated`) on GPU, the process's peak RSS (`VmHWM`) on CPU.
Before each model the peak is reset (`torch.cuda.reset_peak_memory_stats`; on CPU writing 5 to
`/proc/self/clear_refs`, which restarts `VmHWM` from the RSS of that moment), so an earlier model's
peak cannot hide a later one's; the memory in use at the reset is reported beside it (`start_mb`).

On CUDA the trainer samples and trains under bf16 autocast with TF32 for the float32 matmuls left
outside it; `--activation-checkpointing` recomputes each decoder layer in the backward.

Time on one H100 (an estimate, not measured: no GPU was at hand when this was written): the defaults
(8 prompts x 8 completions x 512 tokens, 1 + 4 steps, beta 0.04) take about 0.5 s a step on the
embedded model, 1 s on the Qwen-vocabulary model and 3 to 5 s on SmolLM2-135M (512 sequential decode
steps through 30 layers dominate), so about 1 to 2 minutes in all with loading, well within 5.

Usage (GPU): python benchmarks/qwen_vocab_model.py /tmp/qwen-vocab
             python benchmarks/gpu_check.py --qwen-vocab /tmp/qwen-vocab [--steps 4] [--json gpu_check.json]
CPU smoke (tiny models, seconds): python benchmarks/gpu_check.py --device cpu --models PATH [PATH ...]
             --max-new-tokens 4 --prompts 2 --group-size 2 --steps 2"""

import argparse
import gc
import json
import statistics
import time
from pathlib import Path

import torch
from transformers import AutoConfig

import grpo_lab.training.trainer
from grpo_lab.bench import StepClock, Work, config_for, step_seconds
from grpo_lab.models.loading import load_policy

DEFAULT_MODELS = ["embedded", "smollm2-135m"]
"""measured when --models is not given (the Qwen-vocabulary model joins them with --qwen-vocab)"""
CHECKPOINTED: list[str] = []
"""models loaded with activation checkpointing on (to check that the switch reached the trainer)"""


def with_activation_checkpointing(*args, **kwargs):
    """The trainer's `load_policy` with per-layer recomputation in the backward (until the config has
    a field for it)."""
    CHECKPOINTED.append(args[0])
    return load_policy(*args, **kwargs, activation_checkpointing=True)


def memory_mb(field: str) -> float:
    """A memory field of this process's /proc/self/status (VmRSS, VmHWM) in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def reset_peak(device: str) -> float:
    """Restart the peak-memory count for the next model; the memory in use now (MB)."""
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        return torch.cuda.memory_allocated() / 2**20
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM restarts from the RSS now
    return memory_mb("VmRSS")


def peak(device: str) -> float:
    """Peak memory (MB) since the last `reset_peak`."""
    return torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else memory_mb("VmHWM")


def measure(model: str, args: argparse.Namespace) -> dict:
    """One model's figures over `args.steps` steps after one warm-up step (see the module doc)."""
    total = args.steps + 1
    work = Work(
        model=model,
        prompts=args.prompts,
        group_size=args.group_size,
        completion_length=args.max_new_tokens,
        force_length=True,
    )
    config = config_for(work, args.beta, total).replace(
        device=args.device,
        lora=args.lora and model != "embedded",
        micro_batch_size=args.micro_batch_size,
    )
    start_mb = reset_peak(args.device)
    clock = StepClock(total)
    start = time.perf_counter()
    metrics = grpo_lab.training.trainer.train(config, callbacks=[clock])
    wall = time.perf_counter() - start
    peak_mb = peak(args.device)
    if args.activation_checkpointing and config.model not in CHECKPOINTED:
        raise RuntimeError("the trainer no longer loads its model through "
                           "grpo_lab.training.trainer.load_policy: "
                           "activation checkpointing could not be switched on")  # fmt: skip
    steps = metrics.dropna(subset=["reward"]).iloc[1:]
    step_s = statistics.median(step_seconds(clock.stamps, 0))
    mean_length = float(steps["completions/mean_length"].mean())
    tokens = config.batch_size * mean_length  # completion tokens sampled and trained on per step
    return {
        "model": model,
        "path": config.model,
        "vocab": AutoConfig.from_pretrained(config.model).vocab_size,
        "step_s": step_s,
        "tokens_per_s": tokens / step_s,
        "sample_s": float(steps["time/sample_s"].median()),
        "logprob_s": float(steps["time/logprob_s"].median()),
        "forward_backward_s": float(steps["time/forward_backward_s"].median()),
        "forward_passes": float(steps["cost/forward_passes"].iloc[-1]),
        "completions": config.batch_size,
        "mean_length": mean_length,
        "micro_batch_size": config.micro_batch_size or config.batch_size,
        "peak_mb": peak_mb,
        "start_mb": start_mb,
        "wall_s": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=DEFAULT_MODELS, help="names or paths (%(default)s)")
    parser.add_argument("--qwen-vocab", default=None, help="the Qwen-vocabulary model's directory (last)")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--steps", type=int, default=4, help="measured steps per model (after one warm-up)")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=512, help="every completion's length")
    parser.add_argument("--micro-batch-size", type=int, default=0, help="completions a micro-batch (0: all)")
    parser.add_argument("--beta", type=float, default=0.04, help="KL coefficient (0: no reference forward)")
    parser.add_argument("--lora", action="store_true", help="train the HF models through a LoRA adapter")
    parser.add_argument(
        "--activation-checkpointing", action="store_true", help="recompute layers in backward"
    )
    parser.add_argument("--json", default="gpu_check.json", help="where the figures are written")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device visible to torch; use --device cpu for a smoke test")
    if args.activation_checkpointing:
        grpo_lab.training.trainer.load_policy = with_activation_checkpointing
    models = args.models + ([args.qwen_vocab] if args.qwen_vocab else [])
    cuda = args.device == "cuda"
    device = torch.cuda.get_device_name() if cuda else "cpu"
    memory = "CUDA max_memory_allocated" if cuda else "peak RSS (VmHWM)"
    print(
        f"device {device}, torch {torch.__version__}, bf16 autocast {cuda}, TF32 {cuda}, "
        f"activation checkpointing {args.activation_checkpointing}, {args.prompts} prompts x "
        f"G {args.group_size} x {args.max_new_tokens} tokens (forced), beta {args.beta}, "
        f"1 + {args.steps} steps; memory: {memory}"
    )
    results = []
    for model in models:
        r = measure(model, args)
        results.append(r)
        phases = (
            f"sample {r['sample_s']:.3f}, log-probs {r['logprob_s']:.3f}, "
            f"forward+backward {r['forward_backward_s']:.3f}"
        )
        print(
            f"{model} (vocab {r['vocab']}): {r['step_s']:.3f} s/step ({phases}), "
            f"{r['tokens_per_s']:.0f} tokens/s, peak {r['peak_mb']:.0f} MB (from {r['start_mb']:.0f}), "
            f"micro-batch {r['micro_batch_size']} of {r['completions']}, mean length {r['mean_length']:.1f}, "
            f"{r['forward_passes']:.0f} forward passes/step, {r['wall_s']:.0f} s in all",
            flush=True,
        )
    report = {"device": device, "torch": torch.__version__, "memory": memory, "args": vars(args)}
    with open(args.json, "w") as f:
        json.dump({**report, "results": results}, f, indent=2)
    print(f"written to {args.json}")


if __name__ == "__main__":
    main()
