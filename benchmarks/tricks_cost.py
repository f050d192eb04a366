"""Cost of each training trick as a multiple of the baseline GRPO step, measured side by side.

Every configuration (grpo, grpo + one trick, all_tricks) runs in its own process (so peak memory is
its own), in interleaved rounds so that load from other jobs spreads over all of them. Prints the
median step time and its phases relative to grpo, forward/backward passes and peak RSS.
Usage: python benchmarks/tricks_cost.py [--steps 15] [--rounds 2]"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from grpo_lab.presets import TRICKS

PHASES = ["time/step_s", "time/sample_s", "time/logprob_s", "time/forward_backward_s", "time/optimizer_s"]


def run_once(name: str, overrides: dict, steps: int, out: Path) -> list[dict]:
    sets = [
        f"--set={k}={','.join(map(str, v)) if isinstance(v, (list, tuple)) else v}"
        for k, v in overrides.items()
    ]
    preset = "all_tricks" if name == "all_tricks" else "grpo"
    fixed = ["--set=progress=false", "--set=eval_every=1000", "--set=val_size=8", "--set=torch_threads=1"]
    cmd = [sys.executable, "-m", "grpo_lab.cli", "train", "--preset", preset, "--steps", str(steps)]
    cmd += ["--out", str(out), *fixed, *sets]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{name} failed:\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "reward" in r][1:]  # the first step carries one-off warm-up costs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    configs = {"grpo": {}, **TRICKS, "all_tricks": {}}
    rows: dict[str, list[dict]] = {name: [] for name in configs}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name, overrides in configs.items():
                rows[name] += run_once(name, overrides, args.steps, Path(tmp) / f"{name}-{r}")

    def median(name: str, key: str) -> float:
        return statistics.median(row.get(key, 0.0) for row in rows[name])

    base = {key: median("grpo", key) for key in PHASES}
    print(f"{'configuration':24s} {'step x':>7s} {'sample x':>8s} {'logprob s':>9s} {'fwd+bwd x':>9s} "
          f"{'fwd':>4s} {'bwd':>4s} {'peak RSS MB':>11s}")  # fmt: skip
    for name in configs:
        step, sample, fb = (
            median(name, k) for k in ("time/step_s", "time/sample_s", "time/forward_backward_s")
        )
        print(f"{name:24s} {step / base['time/step_s']:7.2f} {sample / base['time/sample_s']:8.2f} "
              f"{median(name, 'time/logprob_s'):9.3f} {fb / base['time/forward_backward_s']:9.2f} "
              f"{median(name, 'cost/forward_passes'):4.0f} {median(name, 'cost/backward_passes'):4.0f} "
              f"{max(r['cost/peak_rss_mb'] for r in rows[name]):11.0f}")  # fmt: skip
    print(f"baseline grpo: {base['time/step_s']:.3f} s/step median over {len(rows['grpo'])} steps")


if __name__ == "__main__":
    main()
