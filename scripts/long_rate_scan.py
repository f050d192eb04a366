"""Train (or load) the learning-rate scan at the long horizon (`grpo_lab.studies.long_verdicts.rate_design`
over `TUNING_SEEDS`), a piece at a time: an 800-step run costs about 18 core-minutes, the scan some dozens of
them, more than one sitting, and every finished run stays in the store.

- `--status` trains nothing: it prints the scan so far (`long_verdicts.scan_table`, `scan_summary`:
  each arm's best rate, whether it is bracketed, the factor it needs next).
- `--next` trains, for each arm of `--arms`, the runs it needs next (`long_verdicts.next_runs`): the next
  factor on seed 0 where its best rate lies at the scan's edge, else the next tuning seed at its best
  rate and at each neighbour it does not lead beyond the seed noise.
- `--fresh` trains the tuned-rate table's fresh seeds (`long_verdicts.fresh_runs`) of every arm whose
  rate is chosen (its scan needs nothing more), while the others are still scanned.
- otherwise the `--factors` given (written as 1/3) for each arm of `--arms` on `--seeds` (default: the
  tuning seeds).

The runs come seed by seed, then arm by arm in the order given (default: grpo first, whose rates the
others are read against), then factor by factor (lowest first); the plan is printed before anything
trains, and runs already stored are loaded.

    python scripts/long_rate_scan.py [--status | --next | --fresh | --factors 1/3 3] [--arms grpo cispo ...]
        [--seeds 0 1 2] [--workers 2] [--store results]
"""

import argparse
from fractions import Fraction

import pandas as pd

from grpo_lab import plan
from grpo_lab.experiments.store import is_current, run_dir
from grpo_lab.studies import long_verdicts

ORDER = ("grpo", "cispo", "grpo_no_kl", "dr_grpo", "dapo_loss", "gspo", "scheme_a", "scheme_c", "scheme_b")
"""the default order: grpo, then the arms whose shared-rate verdicts moved most at the horizon"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arms", nargs="*", default=list(ORDER))
    chosen = parser.add_mutually_exclusive_group()
    chosen.add_argument("--status", action="store_true", help="print the scan so far; train nothing")
    chosen.add_argument("--next", action="store_true", help="train the runs each arm needs next")
    chosen.add_argument(
        "--fresh", action="store_true", help="train the fresh seeds of every arm whose rate is chosen"
    )
    chosen.add_argument(
        "--factors",
        nargs="*",
        default=[str(Fraction(f).limit_denominator(9)) for f in long_verdicts.SCAN_START],
    )
    parser.add_argument("--seeds", nargs="*", type=int, default=list(long_verdicts.TUNING_SEEDS))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--store", default="results")
    args = parser.parse_args()
    settings = long_verdicts.settings("full")
    known = {p.label for p in long_verdicts.design(settings)}
    unknown = sorted(set(args.arms) - known)
    if unknown:
        raise SystemExit(f"--arms {unknown}: not arms of the design, which has {sorted(known)}")
    if args.status or args.next or args.fresh:
        scan = long_verdicts.scan_table(long_verdicts.stored_scan(settings, args.store))
        if args.status:
            summary = long_verdicts.scan_summary(scan)
            spread = long_verdicts.scan_spread(scan)
            with pd.option_context("display.width", 200, "display.max_rows", None):
                shown = scan.round({"factor": 4, "mean": 4, "sd": 4, "greedy": 4, "pass@4": 4})
                shown["learning rate"] = shown["learning rate"].map("{:g}".format)
                print(shown.to_string(index=False), summary.to_string(index=False), sep="\n\n")
            print(f"\na lead is read against {spread.words()} of one run's headline score")
            left = [
                c
                for c in long_verdicts.scan_runs(settings, args.store)
                if not is_current(run_dir(c, args.store))
            ]
            hours = sum(plan.run_seconds(c, plan.load_calibration()) for c in left) / 3600
            print(
                f"as the rule sees it now, the scan and the tuned table have {len(left)} runs to train, "
                f"{hours:.1f} core-hours (more where a scan extends or a bracket takes another seed)"
            )
            return
        chosen_runs = (
            long_verdicts.fresh_runs(scan, settings) if args.fresh else long_verdicts.next_runs(scan)
        )
        wanted = [run for run in chosen_runs if run[0] in args.arms]
    else:
        wanted = [
            (arm, float(Fraction(f)), seed) for seed in args.seeds for arm in args.arms for f in args.factors
        ]
    order = {arm: i for i, arm in enumerate(args.arms)}
    wanted.sort(key=lambda run: (run[2], order[run[0]], run[1]))
    seeded = long_verdicts.scan_points(settings, wanted)
    pending = [(p, c) for p, c in seeded if not is_current(run_dir(c, args.store))]
    calibration = plan.load_calibration()
    hours = sum(plan.run_seconds(c, calibration) for _, c in pending) / 3600
    print(
        f"{len(wanted)} runs of {settings.steps} steps, {len(pending)} to train ({hours:.1f} core-hours):",
        flush=True,
    )
    for point, config in pending:
        print(f"  {point.label}, seed {config.seed} (lr {config.learning_rate:g})", flush=True)
    long_verdicts.train_scan(settings, wanted, args.store, workers=args.workers, progress=True)


if __name__ == "__main__":
    main()
