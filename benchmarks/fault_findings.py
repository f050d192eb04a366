"""Which diagnostic rules each fault injector triggers on the embedded default model.

Runs the baseline and one run per injector (same seed, same prompts), then prints the findings of
each run. Usage: python benchmarks/fault_findings.py [--steps 60] [--out runs/faults]"""

import argparse
from pathlib import Path

from grpo_lab import preset
from grpo_lab.analysis.diagnostics import diagnose_run
from grpo_lab.experiments import run_dir, run_or_load

INJECTORS = {
    "baseline": {},
    "reward_noise": {"fault_reward_sigma": 1.0},
    "label_flips": {"fault_reward_flip": 0.4},
    "extreme_lengths": {"fault_long_frac": 0.5},
    "junk_padding": {"fault_junk_frac": 0.5},
    "repeated_samples": {"fault_repeat_k": 7},
    "stale_policy": {"fault_stale_k": 4, "learning_rate": 1e-4},
    "low_precision_sampler": {"fault_sampler_dtype": "bfloat16"},
    "length_hacking": {"task": "scratchpad", "rewards": ("correct", "length_bonus"), "learning_rate": 1e-4},
    "conflicting_rewards": {"rewards": ("correct", "verbose"), "grad_cos_every": 5, "learning_rate": 1e-4},
    "kl_in_reward": {"kl_placement": "reward", "kl_coef": 2.0},
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--out", default="runs/faults")
    args = parser.parse_args()
    for name, changes in INJECTORS.items():
        config = preset("grpo", steps=args.steps, eval_every=20, val_size=100, progress=False, **changes)
        run_or_load(config, Path(args.out) / name)
        findings = diagnose_run(run_dir(config, Path(args.out) / name))
        rules = ", ".join(f"{f.rule} ({f.level})" for f in findings) or "none"
        print(f"{name:22s} -> {rules}")


if __name__ == "__main__":
    main()
