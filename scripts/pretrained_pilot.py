"""Train (or load) the costed pilot of the pretrained bed (`grpo_lab.comparisons.pretrained_bed`) and
print its table: per learning rate of `PILOT_RATES`, the start and end of greedy and sampled accuracy and
pass@4, the headline score and its gain, the answers' length, the seconds a step spends in each phase
and each run's wall-clock minutes as trained here (one run at a time, one torch thread). The runs go to
the store like every study's; a run trained here records its minutes in `docs/pilot/pretrained/`, so the
cost of a run is read, not typed, in `docs/studies.md`.

    python scripts/pretrained_pilot.py [--rates 3e-06 ...] [--seeds 0 ...] [--store results]
"""

import argparse
import json
from dataclasses import replace
from pathlib import Path

import pandas as pd

from grpo_lab.comparisons import pretrained_bed
from grpo_lab.experiments import run_design
from grpo_lab.experiments.store import is_current, run_dir

MINUTES = Path("docs/pilot/pretrained")
"""where each run trained here records its wall-clock minutes"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", type=float, nargs="*", default=None, help="default: PILOT_RATES")
    parser.add_argument("--seeds", type=int, nargs="*", default=None, help="default: the pilot's")
    parser.add_argument("--store", default="results")
    args = parser.parse_args()
    settings = pretrained_bed.pilot_settings("full")
    seeds = args.seeds if args.seeds else list(settings.seeds)
    design = pretrained_bed.pilot_design(settings)
    if args.rates:
        unknown = sorted(set(args.rates) - {p.columns["learning_rate"] for p in design})
        if unknown:
            raise SystemExit(f"--rates {unknown}: not in the pilot's rates {pretrained_bed.PILOT_RATES}")
        design = [p for p in design if p.columns["learning_rate"] in args.rates]
    print(f"pilot: {len(design)} rates x seeds {seeds}, {settings.steps} steps each", flush=True)
    MINUTES.mkdir(parents=True, exist_ok=True)
    for point in design:
        for seed in seeds:
            config = point.config.replace(seed=seed)
            if is_current(run_dir(config, args.store)):
                continue
            single = [replace(point, config=config)]
            trained = run_design(single, [seed], args.store, workers=1, progress=False)
            minutes = float(trained.runs["seconds"].iloc[0]) / 60  # the executor's own timing of the run
            record = {"run": run_dir(config, args.store).name, "minutes": round(minutes, 2)}
            (MINUTES / f"{record['run']}.json").write_text(json.dumps(record) + "\n")
            print(f"{point.label}, seed {seed}: {minutes:.1f} min", flush=True)
    result = run_design(design, seeds, args.store, workers=1, progress=False)
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        print(pretrained_bed.pilot_table(result).round(3).to_string(index=False))


if __name__ == "__main__":
    main()
