"""Robustness to injected faults and the diagnostics each condition sets off, read from run logs:
the fault-injection step of Evaluation guide §6.4 Fault injection (docs/sources.md: "construct reward
noise, extreme long answers, repeated samples, and check each scheme's fault tolerance").

- `robustness_table`: the outcome of each scheme against each fault's level, the clean runs at level
  0 of every fault, for robustness curves (`plots.robustness`);
- `degradation`: each faulty condition's change from the same scheme's clean runs, paired over seeds,
  with its interval, the spread of its per-seed changes and its minimum detectable effect;
- `pooled_spread`, `spread_mde`: the minimum detectable effect of a table's rows from a spread that
  rests on enough seeds: a row's own sd from `MIN_SPREAD_SEEDS` seeds up, below that the sd pooled
  over the table's rows;
- `run_findings`, `rule_counts`: `diagnostics.diagnose_run` on every run of a study, and how many runs
  of each condition each rule fired on (`plots.rule_heatmap`)."""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from grpo_lab.analysis.diagnostics import diagnose_run
from grpo_lab.analysis.power import ALPHA, mde_factor, paired
from grpo_lab.analysis.stats import mean_interval
from grpo_lab.config import Config

CLEAN = "none"
"""the `fault` and `level` of a scheme's run without any fault"""
CLEAN_CONDITION = "clean"
"""the `condition` of a scheme's run without any fault"""
MARGIN = 0.05
"""the change of final validation accuracy a study is sized to detect (its target minimum detectable
effect): a verdict of 'no difference' rules out a change larger than this"""
MIN_SPREAD_SEEDS = 5
"""the fewest seeds a row's own sd of its per-seed differences may give its minimum detectable effect
(or the seeds it would need) from: with 3 seeds the sd has 2 degrees of freedom and its 95% interval
runs from 0.52 to 6.3 times the estimate (chi-square), so an MDE of 0.002 may be one of 0.02; with 5
seeds (4 df), from 0.60 to 2.9 times. Below it, `spread_mde` uses the sd pooled over the table's rows"""
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


@dataclass(frozen=True)
class Spread:
    """The sd of per-seed paired differences pooled over the rows of a table."""

    sd: float
    """sqrt(sum (n_i - 1) sd_i^2 / sum (n_i - 1)) over the rows with a spread (n_i >= 2, finite sd)"""
    df: int
    """its degrees of freedom, sum (n_i - 1)"""
    rows: int
    """the rows pooled"""

    def words(self) -> str:
        """How a table says it, e.g. 'the sd pooled over 54 rows (0.0123, 108 df)'."""
        return f"the sd pooled over {self.rows} rows ({self.sd:.3g}, {self.df} df)"


def pooled_spread(n: ArrayLike, sd: ArrayLike) -> Spread:
    """The pooled sd of rows of `n` paired seeds whose per-seed differences have sd `sd` (the pooled
    variance, each row weighted by its degrees of freedom n - 1): one spread for every row, which
    assumes the rows share it, in exchange for sum (n_i - 1) degrees of freedom instead of n_i - 1.
    NaN with 0 df where no row has a spread."""
    seeds, spread = np.asarray(n, dtype=float), np.asarray(sd, dtype=float)
    kept = (seeds >= 2) & np.isfinite(spread)
    df = int((seeds[kept] - 1).sum())
    if not df:
        return Spread(math.nan, 0, 0)
    return Spread(math.sqrt(float(((seeds[kept] - 1) * spread[kept] ** 2).sum()) / df), df, int(kept.sum()))


def spread_mde(table: pd.DataFrame, least: int = MIN_SPREAD_SEEDS) -> pd.DataFrame:
    """`table` (a row per paired comparison with its seeds `n` and the sd of its per-seed differences
    `sd`) with each row's minimum detectable effect `mde` (`power.mde_factor(n) * sd / sqrt(n)`: the
    row's own test at its seeds) from a spread that rests on at least `least` seeds: the row's own sd
    from `least` seeds up, else the sd pooled over every row of the table (`pooled_spread`), provided
    that has at least `least - 1` degrees of freedom (else NaN: no spread to read one from). Adds
    `mde sd` (the sd used) and `mde from` ('own', 'pooled' or 'none')."""
    pooled = pooled_spread(table["n"], table["sd"])
    seeds, own_sd = table["n"].to_numpy(dtype=int), table["sd"].to_numpy(dtype=float)
    own = (seeds >= least) & np.isfinite(own_sd)
    shared = ~own & (seeds >= 2) & (pooled.df >= least - 1)
    sd = np.where(own, own_sd, np.where(shared, pooled.sd, math.nan))
    source = np.where(own, "own", np.where(shared, "pooled", "none"))
    factor = np.array([mde_factor(int(k)) for k in seeds])  # inf below 2 seeds, where sd is NaN
    with np.errstate(invalid="ignore"):
        mde = factor * sd / np.sqrt(np.maximum(seeds, 1))
    return table.assign(mde=mde, **{"mde sd": sd, "mde from": source})


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
