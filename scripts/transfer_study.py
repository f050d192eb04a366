"""Train (or load) the transfer study on the pretrained bed (`grpo_lab.comparisons.transfer_arms`) a piece
at a time: a run of SmolLM2-135M costs about half an hour on one core, so the study takes many sittings,
and every finished run stays in the store.

- `--status` trains nothing: it prints the scan so far (`scan_table`) and each tuned arm's best rate,
  whether it is bracketed and the rate it needs next (`tuned_rates`).
- `--scan` trains the rate scan (`scan_design`) of `--arms` on `--seeds` (default: the tuning seeds), at
  the scan's rates and at each arm's next rate where its best is not bracketed yet.
- `--verdicts` trains every arm at its tuned rate on the fresh seeds (`verdict_design`), once every tuned
  arm's best rate is bracketed (an error names those that are not), and prints the bed's verdict table.

The plan is printed before anything trains; runs already stored are loaded.

    python scripts/transfer_study.py (--status | --scan | --verdicts) [--arms grpo cispo ...]
        [--seeds 0 1] [--workers 2] [--store results]
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
    """Print the plan of `seeded`, then train (or load) it."""
    pending = [(p, c) for p, c in seeded if not is_current(run_dir(c, store))]
    hours = sum(plan.run_seconds(c, plan.load_calibration()) for _, c in pending) / 3600
    print(
        f"{len(seeded)} runs of {seeded[0][1].steps} steps, {len(pending)} to train ({hours:.1f} core-hours):"
    )
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
    parser.add_argument("--seeds", nargs="*", type=int, default=None)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--store", default="results")
    args = parser.parse_args()
    unknown = sorted(set(args.arms) - set(transfer.ARMS))
    if unknown:
        raise SystemExit(f"--arms {unknown}: not arms of the study, which has {list(transfer.ARMS)}")
    settings = transfer.settings("full")
    held = transfer.held_scan(settings, args.store)
    scan = transfer.scan_table(transfer.stored_scan(settings, args.store)) if held else None
    tuned = (
        transfer.tuned_rates(scan)
        if scan is not None
        else pd.DataFrame(columns=["arm", "best rate", "bracketed", "next rate"])
    )
    if args.status:
        if scan is None:
            print("no run of the scan is stored")
            return
        with pd.option_context("display.width", 200, "display.max_rows", None):
            print(scan.round(4).to_string(index=False), tuned.to_string(index=False), sep="\n\n")
        runs = {run_dir(c, args.store): c for c in transfer_study.transfer_runs(settings, args.store)}
        pending = [c for where, c in runs.items() if not is_current(where)]
        hours = sum(plan.run_seconds(c, plan.load_calibration()) for c in pending) / 3600
        print(
            f"\nas the scan's rule sees it now, the study has {len(runs)} runs, {len(pending)} to train: "
            f"{hours:.1f} core-hours (more where a scan extends)"
        )
        return
    if args.scan:
        after = dict(zip(tuned["arm"], tuned["next rate"]))
        beyond = {arm: float(lr) for arm, lr in after.items() if pd.notna(lr)}
        seeds = args.seeds if args.seeds is not None else list(transfer.TUNING_SEEDS)
        points = [p for p in transfer.scan_design(settings, beyond) if p.columns["arm"] in args.arms]
        train([(p, p.config.replace(seed=s)) for s in seeds for p in points], args.store, args.workers)
        return
    open_arms = list(tuned.loc[~tuned["bracketed"].astype(bool), "arm"])
    missing = sorted(set(transfer.TUNED) - set(tuned["arm"]))
    if open_arms or missing:
        raise SystemExit(f"not bracketed yet: {open_arms + missing}; run --scan first")
    best = dict(zip(tuned["arm"], tuned["best rate"]))
    points = [p for p in transfer.verdict_design(settings, best) if p.label in args.arms]
    seeds = args.seeds if args.seeds is not None else list(transfer.fresh_seeds(settings))
    seeded = [(p, p.config.replace(seed=s)) for s in seeds for p in points]
    train(seeded, args.store, args.workers)
    result = paired.run_seeded(seeded, args.store, progress=False)
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        print(transfer.table(result).round(4).to_string(index=False))


if __name__ == "__main__":
    main()
