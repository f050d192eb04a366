"""Build the warm-started models the studies use into the package (`grpo_lab/models/shipped/`), or
check that this machine rebuilds the shipped weights.

    python scripts/ship_models.py          # build every task of TASKS that has no shipped model
    python scripts/ship_models.py --check  # rebuild each shipped model here and say whether it matches

A shipped model is never replaced by this script: runs in `results/` are keyed by its weights'
sha256, so a new one makes every stored run of its task stale (delete its directory first, on
purpose, to ship another)."""

import argparse
import sys

from grpo_lab.models import embedded

TASKS = ("worked", "judge", "arith", "file:notebooks/data/reverse_digits.jsonl")
"""the tasks of the studies (the study base, the judge task, the README's example, notebook 11's)"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="rebuild each shipped model and compare")
    args = parser.parse_args()
    for task in TASKS:
        if args.check:
            print(embedded.check_rebuild(task))
            continue
        if embedded.shipped_dir(task) is not None:
            print(f"{task}: shipped already ({embedded.start_sha256(task)[:16]})")
            continue
        target = embedded.SHIPPED / embedded.embedded_dir(task).name
        embedded.build(task, None, target)
        print(f"{task}: built into {target} ({embedded.start_sha256(task)[:16]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
