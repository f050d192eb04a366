"""Robustness to injected faults and the diagnostics each condition sets off, read from run logs:
the fault-injection step of Evaluation guide §6.4 Fault injection (docs/sources.md: "construct reward
noise, extreme long answers, repeated samples, and check each scheme's fault tolerance").

- `robustness_table`: the outcome of each scheme against each fault's level, the clean runs at level
  0 of every fault, for robustness curves (`plots.robustness`);
- `degradation`: each faulty condition's change from the same scheme's clean runs, paired over seeds,
  with its interval, the spread of its per-seed changes and its minimum detectable effect (read from
  a spread of enough seeds by `power.spread_mde`);
- `run_findings`, `rule_counts`: `diagnostics.diagnose_run` on every run of a study, and how many runs
  of each condition each rule fired on (`plots.rule_heatmap`)."""

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from grpo_lab.analysis import multiplicity
from grpo_lab.analysis.diagnostics import diagnose_run
from grpo_lab.analysis.power import ALPHA, paired
from grpo_lab.analysis.stats import mean_interval
from grpo_lab.config import Config

CLEAN = "none"
"""the `fault` and `level` of a scheme's run without any fault"""
CLEAN_CONDITION = "clean"
"""the `condition` of a scheme's run without any fault"""
MARGIN = 0.05
"""the change of final validation accuracy a study is sized to detect (its target minimum detectable
effect): a verdict of 'no difference' rules out a change larger than this"""
RUN_FAILED = "run_failed"
"""the rule name `run_findings` gives a run that stopped with an error (its error.json)"""


def condition_label(fault: str, level: Any) -> str:
    """'reward_sigma=0.5' for the field fault_reward_sigma at 0.5; 'clean' without a fault."""
    return CLEAN_CONDITION if fault == CLEAN else f"{fault.removeprefix('fault_')}={level}"


def robustness_table(
    finals: pd.DataFrame,
    metric: str,
    faults: Mapping[str, Sequence[Any]],
    scheme: str = "scheme",
    confidence: float = 0.95,
) -> pd.DataFrame:
    """One row per fault field of `faults` (as given to `comparisons.point_sets.fault_points`), scheme and
    level, in the design's order: runs, mean and t-interval of `metric` over the runs in `finals` (one row per
    run with the columns `scheme`, `fault`, `level`, e.g. `stats.final_values`). Each fault's first level is
    the clean runs, at the field's clean value (its Config default): robustness curves start from the same
    point. Levels are matched as strings, as the design writes them."""
    for column in (scheme, "fault", "level"):
        if column not in finals:
            raise ValueError(f"finals has no {column!r} column; columns: {', '.join(finals.columns)}")
    clean_values = Config().to_dict()
    clean = finals[finals["fault"] == CLEAN]
    rows = []
    for name, levels in faults.items():
        if name not in clean_values:
            raise ValueError(f"unknown fault field {name!r}")
        for scheme_name in dict.fromkeys(finals[scheme]):
            runs = finals[(finals[scheme] == scheme_name) & (finals["fault"] == name)]
            steps = [(clean_values[name], clean[clean[scheme] == scheme_name])]
            steps += [(level, runs[runs["level"] == str(level)]) for level in levels]
            for level, group in steps:
                mean, lo, hi = mean_interval(group[metric].to_numpy(dtype=float), confidence)
                ids = {"fault": name, scheme: scheme_name, "level": level}
                rows.append({**ids, "n": len(group), "mean": mean, "lo": lo, "hi": hi})
    return pd.DataFrame(rows)


def degradation(
    finals: pd.DataFrame, metric: str, scheme: str = "scheme", margin: float = MARGIN
) -> pd.DataFrame:
    """Per scheme and faulty condition (rows of `finals` with `scheme`, `condition`, `fault`, `seed`),
    the change of `metric` from the scheme's clean run of the same seed: a faulty run and its clean
    run share the prompts and sampling streams, so the comparison is paired over seeds
    (`power.paired`: mean difference, 95% t-interval, the sd of the per-seed changes `sd`, minimum
    detectable effect `mde` from that sd). The verdict is `Paired.verdict(margin)` ('worse' when the
    fault lowers the metric); `summary` is 'diff [lo, hi]' for wide tables; `confidence` (0.95), `df`
    (n - 1) and `margin` say what the interval is and what it was judged against
    (`analysis.multiplicity.adjust` reads them). `mde` rests on the row's own seeds, however few:
    `spread_mde` gives one that does not."""
    rows = []
    for name, runs in finals.groupby(scheme, sort=False):
        clean = runs[runs["fault"] == CLEAN].set_index("seed")[metric]
        if not len(clean):
            raise ValueError(f"scheme {name!r} has no clean run to compare its faulty runs with")
        for condition, group in runs[runs["fault"] != CLEAN].groupby("condition", sort=False):
            result = paired(group.set_index("seed")[metric], clean)
            interval = {
                "diff": result.effect,
                "lo": result.low,
                "hi": result.high,
                "sd": result.sd,
                "mde": result.mde,
                "confidence": 1 - ALPHA,
                "df": result.n - 1,
                "margin": margin,
            }
            summary = f"{result.effect:+.3f} [{result.low:+.3f}, {result.high:+.3f}]"
            ids = {scheme: name, "condition": condition, "n": result.n}
            rows.append({**ids, **interval, "verdict": result.verdict(margin), "summary": summary})
    return pd.DataFrame(rows)


def adjusted(table: pd.DataFrame, family: multiplicity.Family) -> pd.DataFrame:
    """`table` (`degradation`'s rows: diff, lo, hi, confidence, df, margin, verdict) adjusted over its rows
    as `family` (`analysis.multiplicity.adjust`): `p`, `adjusted confidence`, `adjusted lo`, `adjusted hi`
    and `adjusted verdict` beside each row's raw ones."""
    named = table.rename(columns={"diff": "effect", "lo": "ci_low", "hi": "ci_high"})
    out = multiplicity.adjust(named, family)
    back = {"effect": "diff", "ci_low": "lo", "ci_high": "hi"}
    return out.rename(columns={**back, **{f"adjusted {k}": f"adjusted {v}" for k, v in back.items()}})


def run_findings(runs: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """Every diagnostic finding of every run in `runs` (one row per run with `path`, `status` and
    `columns`, e.g. `SweepResult.runs`): one row per finding with `columns`, `seed`, `rule`,
    `severity` and `message`. A failed run gives one row with the rule 'run_failed' and its error."""
    rows = []
    for run in runs.to_dict("records"):
        ids = {c: run[c] for c in (*columns, "seed")}
        if run["status"] == "failed":
            rows.append({**ids, "rule": RUN_FAILED, "severity": "error", "message": str(run.get("error"))})
            continue
        for finding in diagnose_run(Path(run["path"])):
            rows.append({**ids, "rule": finding.rule, "severity": finding.level, "message": finding.message})
    return pd.DataFrame(rows, columns=[*columns, "seed", "rule", "severity", "message"])


def rule_counts(findings: pd.DataFrame, runs: pd.DataFrame, by: str) -> pd.DataFrame:
    """How many runs of each value of `by` (the columns, in their order in `runs`) each rule fired
    on. A run is identified by every column of `findings` but the rule, severity and message (e.g.
    scheme, condition and seed), so runs that share a value of `by` and a seed (different schemes)
    count separately and a cell is out of `runs[by].value_counts()`; a run counts once per rule.
    Rows: rules in the order they first fired, rules that never fired left out."""
    order = list(dict.fromkeys(runs[by]))
    ids = [c for c in findings.columns if c not in ("rule", "severity", "message")]
    fired = findings.drop_duplicates([*ids, "rule"])
    counts = fired.groupby(["rule", by]).size().unstack(by, fill_value=0)
    counts = counts.reindex(index=list(dict.fromkeys(fired["rule"])), columns=order, fill_value=0)
    return counts.astype(int)
