"""Train (or load) the transfer study on the pretrained bed (`grpo_lab.comparisons.transfer_arms`) a piece
at a time: a run of SmolLM2-135M costs about 23 minutes on one core, so the study takes many sittings,
and every finished run stays in the store.

- `--status` trains nothing: it prints the scan so far (`scan_table`), each tuned arm's best rate, whether
  it is bracketed and settled and the runs it needs next (`tuned_rates`), and the core-hours of what the
  scan's rule sees still to train (`grpo_lab.studies.transfer.transfer_runs`).
- `--scan` trains the runs the scan needs next for `--arms` (`scan_runs`: by the lab's one rule, the next
  rate where a best is at an end and seed 1 where a bracket is not settled, then every tuned arm not yet
  begun at the scan's rates on seed 0); `--max-runs N` trains the first N of them, a piece that fits a
  sitting (a run cut off by the end of a sitting is lost, a finished one stays).
- `--verdicts` trains, on the fresh seeds, every arm whose rate the scan has chosen
  (`grpo_lab.studies.transfer.chosen_rates`: a tuned arm whose scan needs no further run, a trick once
  grpo's is chosen; the others are named and wait), then prints the bed's verdict table over the rows
  whose arms have all their fresh seeds stored (`verdicts`, `bed_table`), as notebook 18 reads it.

The plan is printed before anything trains; runs already stored are loaded.

    python scripts/transfer_study.py (--status | --scan | --verdicts) [--arms grpo cispo ...]
        [--max-runs N] [--workers 2] [--store results]
"""

import argparse

import pandas as pd

from grpo_lab import plan
from grpo_lab.comparisons import paired
from grpo_lab.comparisons import transfer_arms as transfer
from grpo_lab.config import Config
from grpo_lab.experiments.designs import Point
from grpo_lab.experiments.store import is_current, run_dir
from grpo_lab.studies import transfer as transfer_study


def train(seeded: list[tuple[Point, Config]], store: str, workers: int) -> None:
    """Print the plan of `seeded` with its core-hours, then train (or load) it."""
    pending = [(p, c) for p, c in seeded if not is_current(run_dir(c, store))]
    hours = sum(plan.run_seconds(c, plan.load_calibration()) for _, c in pending) / 3600
    print(f"{len(seeded)} runs, {len(pending)} to train ({hours:.1f} core-hours):", flush=True)
    for point, config in pending:
        print(f"  {point.label}, seed {config.seed}", flush=True)
    paired.run_seeded(seeded, store, workers=workers, progress=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    stage = parser.add_mutually_exclusive_group(required=True)
    stage.add_argument("--status", action="store_true")
    stage.add_argument("--scan", action="store_true")
    stage.add_argument("--verdicts", action="store_true")
    parser.add_argument("--arms", nargs="*", default=list(transfer.ARMS))
    parser.add_argument("--max-runs", type=int, default=None)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--store", default="results")
    args = parser.parse_args()
    unknown = sorted(set(args.arms) - set(transfer.ARMS))
    if unknown:
        raise SystemExit(f"--arms {unknown}: not arms of the study, which has {list(transfer.ARMS)}")
    if args.max_runs is not None and args.max_runs < 1:
        raise SystemExit(f"--max-runs {args.max_runs}: give a count of runs of 1 or more")
    settings = transfer.settings("full")
    held = transfer.held_scan(settings, args.store)
    scan = transfer.scan_table(transfer.stored_scan(settings, args.store)) if held else None
    if args.status:
        if scan is not None:
            with pd.option_context("display.width", 200, "display.max_rows", None):
                shown = scan.round({"factor": 4, "mean": 4, "greedy": 4, "pass@4": 4, "sd": 4})
                print(
                    shown.to_string(index=False),
                    transfer.tuned_rates(scan, transfer.rates(settings)).to_string(index=False),
                    sep="\n\n",
                )
            print(
                f"\na lead is read against {transfer.scan_spread(scan).words()} of one run's headline score"
            )
        else:
            print("no run of the scan is stored")
        runs = {run_dir(c, args.store): c for c in transfer_study.transfer_runs(settings, args.store)}
        pending = [c for where, c in runs.items() if not is_current(where)]
        hours = sum(plan.run_seconds(c, plan.load_calibration()) for c in pending) / 3600
        print(
            f"as the scan's rule sees it now, the study has {len(runs)} runs, {len(pending)} to train: "
            f"{hours:.1f} core-hours (more where a scan extends or a bracket takes another seed)"
        )
        return
    if args.scan:
        wanted = [run for run in transfer.scan_runs(settings, scan) if run[0] in args.arms]
        train(transfer.scan_points(settings, wanted)[: args.max_runs], args.store, args.workers)
        return
    if scan is None:
        raise SystemExit("no run of the scan is stored; run --scan first")
    chosen = transfer_study.chosen_rates(scan, settings)
    waiting = [a for a in args.arms if a not in chosen]
    if waiting:
        print(f"no rate chosen yet for {waiting}: their verdict runs wait for the scan (--scan)")
    points = [transfer.verdict_point(settings, a, lr) for a, lr in chosen.items() if a in args.arms]
    seeded = [(p, p.config.replace(seed=s)) for s in transfer.fresh_seeds(settings) for p in points]
    left = [(p, c) for p, c in seeded if not is_current(run_dir(c, args.store))]
    if left:
        train(left[: args.max_runs], args.store, args.workers)
    judged = transfer_study.verdicts(settings, scan, args.store)
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        print(transfer_study.bed_table(judged).round(4).to_string(index=False))


if __name__ == "__main__":
    main()
