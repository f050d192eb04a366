"""The score pilot: which headline score decides a comparison for the fewest core-seconds.

Trains a few arms of the study base (`grpo_lab.comparisons.bed.base("full")`) over paired seeds and, every
`--eval-every` steps, evaluates each run richly enough that every candidate score can be computed
afterwards from the same runs: greedy accuracy on two halves of `--prompts` validation prompts, and
the correctness of `--samples` completions per prompt at the sampling temperature on all of them
(from the evaluation's own seed, `evaluation.sampling_seed`: common random numbers across arms and
seeds). Each evaluation part is timed. A candidate (greedy or sampled, k samples, n prompts, a tail
window, an evaluation interval, a run length) is then a function of these records, and its paired
sd, grpo's gain, and its cost per run in core-seconds come out of one table (`docs/studies.md`,
"The headline score").

    python benchmarks/score_pilot.py run --store pilot-runs --seeds 0 1 2 3 --steps 100
    python benchmarks/score_pilot.py table --store pilot-runs

Runs are written one JSON file each, atomically, so an interrupted pilot resumes where it stopped.
A benchmark, not a test: its figures depend on the machine and on what else it runs."""

import argparse
import json
import math
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

ARMS = {
    "grpo": ("grpo", {}),
    "scheme_a": ("scheme_a", {}),
    "length_penalty": ("grpo", {"length_penalty": 0.05}),
}
"""the compared arms: one scheme pair (scheme_a against grpo) and one trick (grpo with the length
penalty of `presets.TRICKS` against grpo); name -> (preset, changes over the study base)"""
COMPARISONS = (("scheme_a", "grpo"), ("length_penalty", "grpo"))


def train_one(
    arm: str, seed: int, steps: int, eval_every: int, prompts: int, samples: int, out: str, common: dict
) -> str:
    """Train one arm on one seed with the rich evaluation every `eval_every` steps; write its record.
    `common` holds config changes applied to every arm (a study base variant, such as its learning
    rate)."""
    import torch

    from grpo_lab.comparisons.bed import base
    from grpo_lab.models.evaluation import evaluate, sampled_correct, sampling_seed
    from grpo_lab.training.trainer import Trainer

    torch.set_num_threads(1)
    name, changes = ARMS[arm]
    quiet = dict(steps=steps, eval_every=steps + 1, val_size=1, val_samples=0, seed=seed)
    config = base("full", name, **{**common, **changes, **quiet})
    trainer = Trainer(config)
    val = trainer.task.validation(prompts)
    half = prompts // 2
    evals, train_s = [], 0.0

    def rich_eval(step: int) -> dict:
        c, model, tok, task = trainer.config, trainer.model, trainer.tok, trainer.task
        args = dict(max_new_tokens=c.max_completion_length, reward_names=trainer.reward_names)
        t0 = time.perf_counter()
        first = evaluate(model, tok, task, val[:half], reward_weights=trainer.reward_weights, **args)
        second = evaluate(model, tok, task, val[half:], reward_weights=trainer.reward_weights, **args)
        t1 = time.perf_counter()
        hits = sampled_correct(
            model, tok, task, val, samples, c.max_completion_length, c.temperature, sampling_seed(step)
        )  # (n, k)
        t2 = time.perf_counter()
        return {
            "step": step,
            "greedy": [first["val/accuracy"], second["val/accuracy"]],
            "sampled": ["".join("1" if h else "0" for h in row) for row in hits.tolist()],
            "greedy_s": t1 - t0,
            "sampled_s": t2 - t1,
        }

    rows = []
    while not trainer.done:
        if trainer.step_index % eval_every == 0:
            evals.append(rich_eval(trainer.step_index))
        t0 = time.perf_counter()
        row = trainer.step()
        train_s += time.perf_counter() - t0
        rows.append(
            {
                k: row.get(k)
                for k in (
                    "step",
                    "time/step_s",
                    "clip_ratio/region_mean",
                    "completions/mean_length",
                    "reward",
                )
            }
        )
    evals.append(rich_eval(trainer.step_index))
    record = {
        "arm": arm,
        "seed": seed,
        "steps": steps,
        "config": config.to_dict(),
        "train_s": train_s,
        "evals": evals,
        "rows": rows,
    }
    path = Path(out) / f"{arm}-seed{seed}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, path)
    return str(path)


@dataclass(frozen=True)
class Candidate:
    """A headline-score candidate computed from the pilot's records."""

    kind: str
    """'greedy' or 'sampled'"""
    prompts: int
    samples: int
    """k (sampled only)"""
    window: float
    """tail of the run averaged; 0: the last evaluation alone"""
    eval_every: int
    steps: int
    """the run length the score is read at (a prefix of the pilot's runs)"""

    def name(self) -> str:
        what = "greedy" if self.kind == "greedy" else f"sampled k={self.samples}"
        window = "last eval" if self.window == 0 else f"mean of last {self.window:.0%}"
        return f"{what}, {self.prompts} prompts, {window}, every {self.eval_every}, {self.steps} steps"

    def evals_at(self, record: dict) -> list[dict]:
        """The evaluations this candidate would have run (its interval, up to its run length)."""
        return [e for e in record["evals"] if e["step"] <= self.steps and e["step"] % self.eval_every == 0]

    def value(self, e: dict) -> float:
        if self.kind == "greedy":
            parts = e["greedy"] if self.prompts > len(e["sampled"]) // 2 else e["greedy"][:1]
            return float(np.mean(parts))
        rows = e["sampled"][: self.prompts]
        return float(np.mean([[c == "1" for c in r[: self.samples]] for r in rows]))

    def score(self, record: dict) -> float:
        evals = self.evals_at(record)
        if self.window == 0:
            return self.value(evals[-1])
        tail = [e for e in evals if e["step"] >= (1 - self.window) * self.steps]
        return float(np.mean([self.value(e) for e in tail]))

    def start(self, record: dict) -> float:
        return self.value(record["evals"][0])

    def eval_seconds(self, record: dict) -> float:
        """Core-seconds of this candidate's evaluations in one run (proportional to the prompts and
        completions it decodes; one evaluation before training and the rest at its interval)."""
        evals = self.evals_at(record)
        total = len(record["evals"][0]["sampled"])
        per = [
            e["greedy_s"] * min(1.0, self.prompts / total)
            if self.kind == "greedy"
            else e["sampled_s"] * (self.prompts / total) * (self.samples / len(e["sampled"][0]))
            for e in evals
        ]
        return float(np.sum(per))


def candidates(steps: int, prompts: int, samples: int, eval_every: int) -> list[Candidate]:
    half = prompts // 2
    lengths = sorted({steps, int(round(steps * 0.6 / eval_every)) * eval_every})
    out = []
    for n in lengths:
        out += [
            Candidate("greedy", half, 1, 0, eval_every, n),
            Candidate("greedy", half, 1, 0.5, eval_every, n),
            Candidate("greedy", prompts, 1, 0.5, eval_every, n),
            Candidate("sampled", half, samples, 0, eval_every, n),
            Candidate("sampled", half, 1, 0.5, eval_every, n),
            Candidate("sampled", half, 2, 0.5, eval_every, n),
            Candidate("sampled", half, samples, 0.5, eval_every, n),
            Candidate("sampled", half, samples, 0.5, 2 * eval_every, n),
            Candidate("sampled", prompts, samples, 0.5, eval_every, n),
            Candidate("sampled", half // 2, samples, 0.5, eval_every, n),
            Candidate("sampled", half, samples, 0.3, eval_every, n),
        ]
    return out


def table(store: Path, target: float = 0.15) -> pd.DataFrame:
    """Per candidate and comparison: the paired sd of the effect, grpo's gain, sd / gain, the cost
    of one run (training plus this score's evaluations, core-seconds), the seeds a paired comparison
    needs for an MDE of `target` x gain, and the core-seconds of that decided comparison."""
    from grpo_lab.analysis.power import paired, seeds_needed

    records = [json.loads(p.read_text()) for p in sorted(store.glob("*.json"))]
    by = {(r["arm"], r["seed"]): r for r in records}
    steps = max(r["steps"] for r in records)
    first = records[0]
    k = len(first["evals"][0]["sampled"][0])
    n = len(first["evals"][0]["sampled"])
    every = first["evals"][1]["step"] - first["evals"][0]["step"]
    train_per_step = float(np.median([r["train_s"] / r["steps"] for r in records]))
    out = []
    for cand in candidates(steps, n, k, every):
        grpo = {s: r for (a, s), r in by.items() if a == "grpo"}
        gain = float(np.mean([cand.score(r) - cand.start(r) for r in grpo.values()]))
        run_s = train_per_step * cand.steps + float(np.mean([cand.eval_seconds(r) for r in records]))
        for treat, control in COMPARISONS:
            seeds = sorted(s for (a, s) in by if a == treat and (control, s) in by)
            t = pd.Series({s: cand.score(by[(treat, s)]) for s in seeds})
            c = pd.Series({s: cand.score(by[(control, s)]) for s in seeds})
            p = paired(t, c)
            need = seeds_needed(p.sd, target * gain) if gain > 0 else math.inf
            out.append(
                {
                    "candidate": cand.name(),
                    "comparison": f"{treat} - {control}",
                    "seeds": p.n,
                    "effect": p.effect,
                    "paired_sd": p.sd,
                    "gain": gain,
                    "sd_over_gain": p.sd / gain if gain > 0 else math.inf,
                    "run_core_s": run_s,
                    "seeds_for_target": need,
                    "core_s_per_decision": 2 * need * run_s,
                }
            )
    return pd.DataFrame(out)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="train the pilot's runs (resumable)")
    r.add_argument("--store", required=True)
    r.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    r.add_argument("--steps", type=int, default=100)
    r.add_argument("--eval-every", type=int, default=10)
    r.add_argument("--prompts", type=int, default=400)
    r.add_argument("--samples", type=int, default=4)
    r.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    r.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    r.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="FIELD=JSON",
        help="config changes applied to every arm, values as JSON (learning_rate=6e-5)",
    )
    t = sub.add_parser("table", help="the candidates' table from the stored runs")
    t.add_argument("--store", required=True)
    t.add_argument("--target", type=float, default=0.15, help="the MDE target as a fraction of grpo's gain")
    args = parser.parse_args()
    store = Path(args.store)
    if args.command == "table":
        pd.set_option("display.width", 250)
        print(table(store, args.target).round(4).to_string(index=False))
        return
    store.mkdir(parents=True, exist_ok=True)
    jobs = [
        (arm, seed)
        for seed in args.seeds
        for arm in args.arms
        if not (store / f"{arm}-seed{seed}.json").exists()
    ]
    print(
        f"score pilot: {len(jobs)} runs to train of {args.steps} steps on {args.workers} workers", flush=True
    )
    common = {}
    for item in args.set:
        field, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--set takes FIELD=JSON, got {item!r}")
        common[field] = json.loads(value)
    fixed = (args.steps, args.eval_every, args.prompts, args.samples, str(store), common)
    with ProcessPoolExecutor(args.workers) as pool:
        futures = [pool.submit(train_one, arm, seed, *fixed) for arm, seed in jobs]
        for done, future in enumerate(futures, 1):
            print(f"[{done}/{len(jobs)}] {future.result()}", flush=True)


if __name__ == "__main__":
    main()
