"""GPU check: steps per second and peak memory of the real trainer on a CUDA machine, for the embedded
model and for a ~0.5B-parameter Hugging Face model given by path. Finishes within 5 minutes on one
modern GPU (the embedded model is built first when it is not cached: about a minute).

On CUDA the trainer samples and trains under bf16 autocast; this script also turns TF32 on for the
float32 matmuls left outside autocast, and with --activation-checkpointing recomputes each decoder
layer in the backward (the lean forward honours the model's own switch). Every step runs one
policy forward and backward plus one reference forward when the KL is on (`forward passes` in the
output): no redundant forward. Peak memory is CUDA's allocator peak for each model on its own.

Usage: python benchmarks/gpu_check.py --model-path /path/to/Qwen2.5-0.5B [--steps 8] [--lora]
       [--activation-checkpointing] [--json out.json]
CPU smoke test (tiny model, seconds): python benchmarks/gpu_check.py --device cpu --skip-embedded
       --model-path <a tiny Llama> --steps 2"""

import argparse
import gc
import json
import statistics
import time

import torch

import grpo_lab.training.trainer
from grpo_lab import preset
from grpo_lab.bench import StepClock, step_seconds
from grpo_lab.models.loading import load_policy

CHECKPOINTED: list[str] = []
"""models loaded with activation checkpointing on (to check that the switch reached the trainer)"""


def with_activation_checkpointing(*args, **kwargs):
    """The trainer's `load_policy` with per-layer recomputation in the backward (until the config has
    a field for it)."""
    CHECKPOINTED.append(args[0])
    return load_policy(*args, **kwargs, activation_checkpointing=True)


def measure(model: str, args: argparse.Namespace, device: str) -> dict:
    """Median step time, phases and peak memory of `args.steps` steps after one warm-up step."""
    total = args.steps + 1
    config = preset(
        "grpo",
        model=model,
        task="arith",
        steps=total,
        device=device,
        lora=args.lora and model != "embedded",
        kl_coef=args.beta,
        prompts_per_step=args.prompts,
        group_size=args.group_size,
        max_completion_length=args.completion_length,
        eval_every=total + 1,
        val_size=4,
        progress=False,
    )
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    clock = StepClock(total)
    start = time.perf_counter()
    metrics = grpo_lab.training.trainer.train(config, callbacks=[clock])
    wall = time.perf_counter() - start
    if args.activation_checkpointing and model not in CHECKPOINTED:
        raise RuntimeError("the trainer no longer loads its model through "
                           "grpo_lab.training.trainer.load_policy: "
                           "activation checkpointing could not be switched on")  # fmt: skip
    steps = metrics.dropna(subset=["reward"]).iloc[1:]
    step_s = statistics.median(step_seconds(clock.stamps, 0))
    peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else float("nan")
    return {
        "model": model,
        "steps_per_s": 1 / step_s,
        "step_s": step_s,
        "sample_s": float(steps["time/sample_s"].median()),
        "logprob_s": float(steps["time/logprob_s"].median()),
        "forward_backward_s": float(steps["time/forward_backward_s"].median()),
        "forward_passes": float(steps["cost/forward_passes"].iloc[-1]),
        "mean_length": float(steps["completions/mean_length"].mean()),
        "peak_gib": peak,
        "peak_rss_mb": float(steps["cost/peak_rss_mb"].max()),
        "wall_s": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-path", default=None, help="a ~0.5B Hugging Face model directory (or hub id)")
    parser.add_argument("--skip-embedded", action="store_true", help="measure only --model-path")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--steps", type=int, default=8, help="measured steps per model (after one warm-up)")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--completion-length", type=int, default=24)
    parser.add_argument("--beta", type=float, default=0.04, help="KL coefficient (0: no reference forward)")
    parser.add_argument("--lora", action="store_true", help="train the HF model through a LoRA adapter")
    parser.add_argument(
        "--activation-checkpointing", action="store_true", help="recompute layers in backward"
    )
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device visible to torch; use --device cpu for a smoke test")
    if args.skip_embedded and not args.model_path:
        raise SystemExit("--skip-embedded needs --model-path: nothing to measure")
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # fp32 matmuls outside autocast
        torch.backends.cudnn.allow_tf32 = True
    if args.activation_checkpointing:
        grpo_lab.training.trainer.load_policy = with_activation_checkpointing
    models = ([] if args.skip_embedded else ["embedded"]) + ([args.model_path] if args.model_path else [])
    name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    cuda = args.device == "cuda"
    print(
        f"device {name}, torch {torch.__version__}, bf16 autocast {cuda}, TF32 {cuda}, "
        f"activation checkpointing {args.activation_checkpointing}, {args.prompts} prompts x "
        f"G {args.group_size}, <= {args.completion_length} tokens, beta {args.beta}"
    )
    results = []
    for model in models:
        r = measure(model, args, args.device)
        results.append(r)
        memory = (
            f"peak {r['peak_gib']:.2f} GiB"
            if args.device == "cuda"
            else f"peak RSS {r['peak_rss_mb']:.0f} MB"
        )
        phases = (
            f"sample {r['sample_s']:.3f}, log-probs {r['logprob_s']:.3f}, "
            f"forward+backward {r['forward_backward_s']:.3f}"
        )
        print(
            f"{model}: {r['steps_per_s']:.2f} steps/s ({r['step_s']:.3f} s/step: {phases}), "
            f"{r['forward_passes']:.0f} forward passes/step, mean length {r['mean_length']:.1f}, {memory}, "
            f"{r['wall_s']:.0f} s in all"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
