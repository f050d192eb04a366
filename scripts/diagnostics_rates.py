"""Print the measured tables of docs/diagnostics.md from a run store, so that the doc's numbers are
regenerated rather than typed: how each calibrated threshold follows from the clean runs, every
rule's false alarms on the clean runs of the study base and of each scheme, the rules that fire on
the other clean runs, and the share of each injected fault's runs each rule fires on.

Reads the store's current runs only (`experiments.store.is_current`); trains nothing.

    python scripts/diagnostics_rates.py [STORE] [--figure PATH]   # default STORE: results/
"""

import argparse
import re
from pathlib import Path

import pandas as pd

from grpo_lab.analysis import alarms
from grpo_lab.analysis.diagnostics import Thresholds
from grpo_lab.analysis.robustness import CLEAN_CONDITION, condition_label
from grpo_lab.comparisons.bed import base
from grpo_lab.experiments.store import is_current
from grpo_lab.studies import fault_injection, sensitivity
from grpo_lab.studies.claims import FAILURE_GRID

KNOBS = {f for scan in sensitivity.SCANS for f in scan.fields} | set(FAILURE_GRID) | {"task"}
"""fields whose change puts a clean run among the knob sweeps (sensitivity, the claims' failure grid)
or on another task, rather than among the tricks and components"""


def table(frame: pd.DataFrame) -> str:
    """A DataFrame as a markdown table (index as the first column), floats to 3 digits."""
    frame = frame.reset_index()
    cells = [[f"{v:.3g}" if isinstance(v, float) else str(v) for v in row] for row in frame.to_numpy()]
    lines = ["| " + " | ".join(map(str, frame.columns)) + " |", "|" + "---|" * len(frame.columns)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in cells])


def touches(changes: str, fields: set[str]) -> bool:
    """Whether a run's `changes` (alarms.changes) sets any of `fields`."""
    return any(re.search(rf"(^| ){re.escape(f)}=", changes) for f in fields)


def calibration(clean: pd.DataFrame) -> pd.DataFrame:
    """Per calibrated field: its rule, the runs that rule can judge on the even seeds, the 99th
    percentile of its number there, `alarms.calibrate` of them, the default in `Thresholds`, and the
    largest number on the odd seeds (the held-out check)."""
    numbers = alarms.statistics(clean)
    even = clean["seed"] % 2 == 0
    rows = {}
    for field, probe in alarms.PROBES.items():
        values = numbers[field]
        rows[field] = {
            "rule": probe.rule,
            "runs (even seeds)": int(values[even].count()),
            "99th percentile": float(values[even].quantile(0.99)),
            "calibrated": alarms.calibrate(values[even]),
            "default": float(getattr(Thresholds(), field)),
            "runs (odd seeds)": int(values[~even].count()),
            "largest (odd seeds)": float(values[~even].max()),
        }
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("threshold")


def false_alarm_table(clean: pd.DataFrame, fired: pd.DataFrame) -> pd.DataFrame:
    """`alarms.false_alarms` on the clean runs each rule could judge (`alarms.judged_rules`: n is
    smaller for a rule that reads columns logged only on request), with the rate on the even and odd
    seeds beside it."""
    known, judged = alarms.confirmed(clean), alarms.judged_rules(clean)
    out = alarms.false_alarms(fired, known, judged=judged)
    for name, keep in (("even", clean["seed"] % 2 == 0), ("odd", clean["seed"] % 2 == 1)):
        rates = alarms.false_alarms(fired[keep], known, judged=judged)["rate"]
        out[f"rate ({name} seeds, n={int(keep.sum())})"] = rates
    return out


def share_cells(confusion: pd.DataFrame) -> pd.DataFrame:
    """A `alarms.confusion` table as 'fired/n' cells, rules that never fire left out."""
    n = confusion["n"]
    shares = confusion.drop(columns="n")
    shares = shares.loc[:, (shares > 0).any()]
    counts = shares.mul(n, axis=0).round().astype(int)
    return counts.apply(lambda column: column.astype(str) + "/" + n.astype(str))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("store", nargs="?", default="results")
    parser.add_argument("--figure", type=Path, help="also save the fault study's detection heatmap here")
    args = parser.parse_args()

    runs = alarms.collect_runs(args.store, lambda name: base("full", name=name).to_dict(), is_current)
    fired = alarms.fired_rules(runs)
    clean = runs["condition"] == CLEAN_CONDITION
    on_base = clean & (runs["changes"] == "")
    sweeps = clean & ~on_base & runs["changes"].map(lambda c: touches(c, KNOBS))
    tricks = clean & ~on_base & ~sweeps
    injected = [condition_label(f, v) for f, levels in fault_injection.FAULTS.items() for v in levels]
    study = alarms.fault_study(runs, injected)
    order = [CLEAN_CONDITION, *injected]
    confusion = alarms.confusion(fired.loc[study.index], study["condition"], order)

    population = f"the clean runs of the study base and of each scheme (n = {int(on_base.sum())})"
    other = pd.DataFrame(
        {
            f"tricks and components (n={int(tricks.sum())})": fired[tricks].sum(),
            f"knob sweeps and other tasks (n={int(sweeps.sum())})": fired[sweeps].sum(),
        }
    )
    sections = {
        f"Calibration on {population}": calibration(runs[on_base]),
        f"False alarms on {population}": false_alarm_table(runs[on_base], fired[on_base]),
        "Other clean runs: runs each rule fired on": other[(other > 0).any(axis=1)].rename_axis("rule"),
        f"Detection per injected fault (the fault study, {len(study)} runs)": share_cells(confusion),
    }
    print(f"<!-- python scripts/diagnostics_rates.py {args.store}: {len(runs)} current runs -->")
    for heading, frame in sections.items():
        print(f"\n### {heading}\n\n{table(frame)}")
    if args.figure:
        firing = ["n", *(rule for rule in alarms.RULE_NAMES if confusion[rule].any())]
        title = "diagnostic rules that fired per injected fault"
        alarms.figure(confusion[firing], title).savefig(args.figure, dpi=150, bbox_inches="tight")


if __name__ == "__main__":
    main()
