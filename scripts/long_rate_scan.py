"""Train (or load) the learning-rate scan at the long horizon (`grpo_lab.studies.long_verdicts.rate_design`
over `TUNING_SEEDS`), a piece at a time: the scan costs about 24 core-hours (54 runs of 800 steps beside
the stored shared-rate runs), more than one sitting, and every finished run stays in the store. The arms
come in the order given (default: grpo first, whose rates the others are read against), each arm's runs
at x3 before x1/3; the plan is printed before anything trains, and runs already stored are loaded.

    python scripts/long_rate_scan.py [--arms grpo cispo ...] [--workers 2] [--store results]
"""

import argparse

from grpo_lab.comparisons import paired
from grpo_lab.experiments.store import is_current, run_dir
from grpo_lab.studies import long_verdicts

ORDER = ("grpo", "cispo", "grpo_no_kl", "dr_grpo", "dapo_loss", "gspo", "scheme_a", "scheme_c", "scheme_b")
"""the default order: grpo, then the arms whose shared-rate verdicts moved most at the horizon"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arms", nargs="*", default=list(ORDER))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--store", default="results")
    args = parser.parse_args()
    settings = long_verdicts.settings("full")
    scan = long_verdicts.rate_design(settings)
    known = {p.columns["arm"] for p in scan}
    unknown = sorted(set(args.arms) - known)
    if unknown:
        raise SystemExit(f"--arms {unknown}: not arms of the design, which has {sorted(known)}")
    by_factor = sorted(long_verdicts.RATE_FACTORS, key=lambda f: (f == 1.0, -f))
    seeded = [
        (p, p.config.replace(seed=seed))
        for arm in args.arms
        for factor in by_factor
        for p in scan
        if p.columns["arm"] == arm and p.columns["factor"] == factor
        for seed in long_verdicts.TUNING_SEEDS
    ]
    pending = [(p, c) for p, c in seeded if not is_current(run_dir(c, args.store))]
    print(f"{len(seeded)} runs of {settings.steps} steps, {len(pending)} to train:", flush=True)
    for point, config in pending:
        print(f"  {point.label}, seed {config.seed} (lr {config.learning_rate:g})", flush=True)
    paired.run_seeded(seeded, args.store, workers=args.workers, progress=True)


if __name__ == "__main__":
    main()
