"""How often each diagnostic rule fires where it should not, and where it should, over a run store.

The rules of `diagnostics` are only useful if they tell a fault from a healthy run: a rule that fires
on most clean runs says nothing when it fires on a faulty one. This module measures both sides from
stored runs, reading each run's config to tell what it is (nothing is trained):

- `collect_runs`: the finished runs under a store, each classified from its config as clean (no fault
  injected; with its preset and the fields it changes from a reference, e.g. the study base) or
  faulted (with its condition, `robustness.condition_label`);
- `fired_rules`: `diagnostics.diagnose_run` on each run, as one boolean column per rule;
- `confirmed` and `false_alarms`: per rule, the share of clean runs it fired on without other
  evidence of its claim, with its count and an exact upper confidence bound (a rate of 0 out of 12
  runs is not a rate of 0);
- `fault_study` and `confusion`: the runs of a fault-injection design (faulted runs and the clean
  runs of the same design) and the share of each condition's runs each rule fired on;
- `detection` and `figure`: that confusion table over a design's runs, and as a heatmap with counts;
- `PROBES`, `statistics` and `calibrate`: the number each calibrated threshold is compared with, per
  run, and the calibration rule that turns the clean runs' numbers into a threshold.
"""

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from scipy import stats

from grpo_lab.analysis.diagnostics import CHECKS, Thresholds, accuracy_change_sd, diagnose_run
from grpo_lab.analysis.robustness import CLEAN_CONDITION, condition_label
from grpo_lab.config import Config, field_sections
from grpo_lab.runlog import MANIFEST, is_finished, read_config, read_metrics

RULE_NAMES: tuple[str, ...] = tuple(CHECKS)
"""every rule name a finding can carry, in `CHECKS`' order: the columns of `fired_rules`"""
FAULT_PREFIX = "fault_"
FAULT_MODIFIERS = ("fault_group_fraction",)
"""fault fields that only shape another fault (which groups reward noise and flips reach): a run
with only these away from their defaults injects nothing and is clean"""
NOT_THE_METHOD = ("run", "logging")
"""config sections that say how a run is run and logged (seed, steps, validation, checkpoints), not
what it trains: left out of a run's `changes`"""
MEASUREMENT_ONLY = ("kl_monitor",)
"""fields of other sections that add a measurement and change nothing learned (the exact KL logged
without a KL term): left out of a run's `changes` too"""
NEEDS = {"conflicting_objectives": "grad_cos/"}
"""rules that read columns a run logs only when asked (`grad_cos_every`), by the columns' prefix"""
ID_COLUMNS = ["run", "path", "preset", "task", "seed", "steps", "condition", "changes"]
"""the columns of `collect_runs`"""


def sealed(path: Path) -> bool:
    """A finished run kept by a store: summary.json and manifest.json (a run still being written, or
    one that failed, has neither)."""
    return is_finished(path) and (path / MANIFEST).exists()


def condition(config: Mapping[str, Any]) -> str:
    """The run's fault condition: 'clean' when no fault field (but `FAULT_MODIFIERS`) is away from
    its default, else the labels of the fields that are ('reward_sigma=1.0'), joined by '+' in
    the config's order, modifiers included."""
    defaults = Config().to_dict()
    away = {
        name: value
        for name, value in config.items()
        if name.startswith(FAULT_PREFIX) and name in defaults and value != defaults[name]
    }
    if not set(away) - set(FAULT_MODIFIERS):
        return CLEAN_CONDITION
    return "+".join(condition_label(name, value) for name, value in away.items())


def changes(config: Mapping[str, Any], reference: Mapping[str, Any]) -> str:
    """The fields of the method where `config` differs from `reference`, 'name=value' (the value as
    compact JSON) joined by spaces in the config's order ('' when none): fields of the
    `NOT_THE_METHOD` sections, fault fields and fields the reference lacks are left out."""
    sections = field_sections()
    skipped = {name for section in NOT_THE_METHOD for name in sections.get(section, [])} | set(
        MEASUREMENT_ONLY
    )
    return " ".join(
        f"{name}={json.dumps(value, separators=(',', ':'))}"
        for name, value in config.items()
        if name not in skipped
        and not name.startswith(FAULT_PREFIX)
        and name in reference
        and value != reference[name]
    )


def collect_runs(
    root: str | Path,
    reference: Callable[[str], Mapping[str, Any]] | None = None,
    usable: Callable[[Path], bool] = sealed,
) -> pd.DataFrame:
    """One row per run directory under `root` that `usable` accepts (default: `sealed`; a store's
    own currency check, e.g. `experiments.store.is_current`, narrows it to runs of today's code),
    sorted by name, with `ID_COLUMNS`: `condition` (`condition`) and `changes` against
    `reference(preset)` (the config dict a clean run of that preset is compared with, e.g. the study
    base of the preset; default: `Config`'s defaults). A clean run whose `changes` is '' is the
    reference itself, whatever its seed and length."""
    rows = []
    for path in sorted(p for p in Path(root).iterdir() if p.is_dir() and usable(p)):
        config = read_config(path)
        against = reference(config["preset"]) if reference is not None else Config().to_dict()
        rows.append(
            {
                "run": path.name,
                "path": str(path),
                "preset": config["preset"],
                "task": config["task"],
                "seed": int(config["seed"]),
                "steps": int(config["steps"]),
                "condition": condition(config),
                "changes": changes(config, against),
            }
        )
    return pd.DataFrame(rows, columns=ID_COLUMNS)


def fired_rules(runs: pd.DataFrame, thresholds: Thresholds | None = None) -> pd.DataFrame:
    """`diagnose_run` on each run of `runs` (a `path` column, e.g. `collect_runs`) under `thresholds`
    (default: `Thresholds()`): one row per run (the same index), one boolean column per rule of
    `RULE_NAMES`, True where the rule gave at least one finding."""
    rows = []
    for path in runs["path"]:
        found = {f.rule for f in diagnose_run(path, thresholds if thresholds is not None else Thresholds())}
        rows.append([rule in found for rule in RULE_NAMES])
    return pd.DataFrame(rows, index=runs.index, columns=list(RULE_NAMES), dtype=bool)


def judged_rules(runs: pd.DataFrame) -> pd.DataFrame:
    """Whether each rule had what it reads on each run of `runs` (a `path` column): one row per run,
    one boolean column per rule of `RULE_NAMES`. Every rule reads columns every run logs but those of
    `NEEDS`, which judge only a run that logged one of their columns: a rule that cannot fire on a run
    says nothing about its false alarms there."""
    flags = pd.DataFrame(True, index=runs.index, columns=list(RULE_NAMES))
    for index, path in runs["path"].items():
        columns = read_metrics(path).columns
        for rule, prefix in NEEDS.items():
            flags.loc[index, rule] = any(str(c).startswith(prefix) for c in columns)
    return flags


def upper_bound(fired_runs: int, runs: int, confidence: float = 0.95) -> float:
    """One-sided Clopper-Pearson upper confidence bound of a rate seen on `fired_runs` of `runs`: exact,
    so it never undercovers, which matters at the few dozen runs a store holds (NaN without runs)."""
    if runs == 0:
        return float("nan")
    if fired_runs >= runs:
        return 1.0
    return float(stats.beta.ppf(confidence, fired_runs + 1, runs - fired_runs))


def confirmed(runs: pd.DataFrame, z: float = Thresholds.val_z) -> pd.DataFrame:
    """Where a rule's claim about a run is shown true by evidence the rule does not read: one row per
    run of `runs` (a `path` column), one boolean column per rule of `RULE_NAMES`. A clean run can fail
    on its own (a method that does not learn on the task, as cispo collapses on the study base), and a
    rule is right to fire there. The evidence is the validation stall's: its claim, "validation
    accuracy did not improve", is shown true of a run whose final `val/accuracy` (the validation after
    the last step, a row the rules leave out) is below its first by more than `z` sds of the change
    (`accuracy_change_sd` over the config's `val_size`): a significant fall. Such a run failed, so
    every rule's warning on it (a runaway entropy, groups without signal) is confirmed too; on the
    other runs no rule has an independent check (all False)."""
    flags = pd.DataFrame(False, index=runs.index, columns=list(RULE_NAMES))
    for index, path in runs["path"].items():
        metrics = read_metrics(path)
        if "val/accuracy" not in metrics:
            continue
        accuracy = metrics.sort_values("step")["val/accuracy"].dropna()
        if len(accuracy) < 2:
            continue
        first, final = float(accuracy.iloc[0]), float(accuracy.iloc[-1])
        sd = accuracy_change_sd(first, read_config(path).get("val_size"))
        flags.loc[index] = bool(final + z * sd < first)
    return flags


def false_alarms(
    clean: pd.DataFrame,
    known: pd.DataFrame | None = None,
    confidence: float = 0.95,
    judged: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Per rule (rows, `clean`'s columns in order), on the clean runs of `clean` (rows of
    `fired_rules`, selected by the caller) that the rule could judge (`judged`, rows of
    `judged_rules`; all without it): `n` runs, `fired` on how many, how many of those the rule's
    claim is `confirmed` on (`known`, rows of `confirmed`; none without it), the rest `false`, their
    `rate` out of `n` and its one-sided `upper` bound at `confidence` (`upper_bound`); NaN where the
    rule judged no run."""
    judged = clean | True if judged is None else judged.loc[clean.index, clean.columns]
    n = judged.sum().astype(int)
    fired = clean & judged
    hits = fired.sum().astype(int)
    true = hits * 0 if known is None else (fired & known.loc[clean.index, clean.columns]).sum().astype(int)
    false = hits - true
    return pd.DataFrame(
        {
            "n": n,
            "fired": hits,
            "confirmed": true,
            "false": false,
            "rate": (false / n.where(n > 0)).astype(float),
            "upper": [upper_bound(int(k), int(m), confidence) for k, m in zip(false, n)],
        },
        index=pd.Index(clean.columns, name="rule"),
    )


def fault_study(runs: pd.DataFrame, conditions: Sequence[str] | None = None) -> pd.DataFrame:
    """The runs of a fault-injection design among `runs` (`collect_runs`): the faulted runs (with
    `conditions`, those of these fault conditions only: a test bed that samples stale by design is no
    injected fault) whose design (same preset, task, steps and `changes`) also has clean runs, and
    those clean runs, which are its clean condition. A faulted run without a clean run of its design
    is part of another study (a troubleshooting scenario drives its drift with reward noise at its own
    learning rate) and is left out, as are the clean runs of other studies."""
    faulted = runs[runs["condition"] != CLEAN_CONDITION]
    if conditions is not None:
        faulted = faulted[faulted["condition"].isin(conditions)]
    design = ["preset", "task", "steps", "changes"]
    clean = runs[runs["condition"] == CLEAN_CONDITION]
    faulted = faulted[_of_designs(faulted, clean, design)]
    return pd.concat([clean[_of_designs(clean, faulted, design)], faulted]).sort_index()


def _of_designs(runs: pd.DataFrame, others: pd.DataFrame, design: list[str]) -> np.ndarray:
    """Which of `runs` share their `design` columns with one of `others` (a mask aligned with `runs`)."""
    keys = set(others[design].itertuples(index=False, name=None))
    return np.array([key in keys for key in runs[design].itertuples(index=False, name=None)], dtype=bool)


def confusion(fired_runs: pd.DataFrame, by: pd.Series, order: Sequence[str] | None = None) -> pd.DataFrame:
    """The share of each group's runs each rule fired on: `fired_runs` (rows of `fired_rules`) grouped by
    `by` (aligned with it, e.g. the runs' `condition`), one row per group (in `order`, default: the
    order of first appearance) with its run count `n` first, then one column per rule."""
    groups = list(order) if order is not None else list(dict.fromkeys(by))
    shares = fired_runs.groupby(by, sort=False).mean().reindex(groups)
    counts = by.value_counts().reindex(groups).fillna(0).astype(int)
    return pd.concat([counts.rename("n"), shares], axis=1).rename_axis(by.name)


def detection(
    runs: pd.DataFrame, by: str, order: Sequence[str], title: str
) -> tuple[plt.Figure, pd.DataFrame]:
    """The `confusion` table of a design's runs (`status` and `path` columns) grouped by the column
    `by`, groups in `order` (those with runs), and its `figure`; a failed run has no logs to read and
    is left out of its group's n."""
    finished = runs[runs["status"] != "failed"].reset_index(drop=True)
    present = set(finished[by])
    table = confusion(fired_rules(finished), finished[by], order=[g for g in order if g in present])
    return figure(table, title=title), table


def figure(table: pd.DataFrame, title: str = "") -> plt.Figure:
    """A `confusion` table as a heatmap: groups (rows) against rules (columns), each cell shaded by the
    share of the group's runs the rule fired on and labelled with the count of those runs; rows
    labelled with their `n` (a group without runs draws as 0). The title says how many runs each row
    holds (one number when all rows hold the same), after `title`."""
    n = table["n"].astype(int)
    shares = table.drop(columns="n").fillna(0.0)
    counts = np.rint(shares.to_numpy(dtype=float) * n.to_numpy()[:, None]).astype(int)  # (groups, rules)
    fig, ax = plt.subplots(figsize=(max(5.0, 2.8 + 0.5 * shares.shape[1]), 1.6 + 0.36 * len(shares)))
    image = ax.imshow(shares.to_numpy(dtype=float), cmap="Reds", vmin=0.0, vmax=1.0, aspect="auto")
    for (i, j), count in np.ndenumerate(counts):
        color = "white" if shares.iat[i, j] > 0.6 else "black"
        ax.text(j, i, str(count), ha="center", va="center", fontsize=7, color=color)
    ax.set_xticks(range(shares.shape[1]), list(shares.columns), rotation=40, ha="right", fontsize=7)
    ax.set_yticks(range(len(shares)), [f"{g} (n={k})" for g, k in n.items()], fontsize=7)
    ax.set_ylabel(str(table.index.name or ""))
    fig.colorbar(image, ax=ax, label="share of runs the rule fired on", fraction=0.04, pad=0.02)
    sizes = sorted(set(n))
    per_row = f"{sizes[0]} runs per row" if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]} runs per row"
    ax.set_title(f"{title} ({per_row}; cells: runs the rule fired on)" if title else per_row, fontsize=9)
    fig.tight_layout()
    return fig


# --- calibration: the number each threshold is compared with, and the rule that sets it -------------


@dataclass(frozen=True)
class Probe:
    """How to read, from a run's finding, the number a calibrated threshold is compared with."""

    rule: str
    """the rule whose finding carries it"""
    statistic: Callable[[Mapping[str, Any]], float]
    """the number, from the finding's evidence"""


PROBES: dict[str, Probe] = {
    "ratio_std_max": Probe("importance_ratio", lambda e: e["median_std"]),
    "kl_drift_growth": Probe("kl_drift", lambda e: e["quarter_growth"]),
    "kl_volatility_max": Probe("kl_volatility", lambda e: e["relative_diff_std"]),
    "grad_spike_ratio": Probe("grad_spikes", lambda e: e["excess"] / e["median"]),
    "clip_rise_min": Probe("clip_rate", lambda e: e["median_clip_rate"] / e["start_clip_rate"]),
}
"""per calibrated field of `Thresholds`: its rule and number (the run's median ratio std; the rise of
its KL from the third to the last quarter, where its last half's slope is significant; its KL
volatility; its largest gradient norm beyond the spikes its length allows, over the median, both over
the steps that had a gradient; the clip rate of its most persistently high window over its start)"""
PROBING = Thresholds(
    ratio_std_max=0.0,
    kl_drift_growth=0.0,
    kl_volatility_max=0.0,
    grad_spike_k=0.0,
    grad_spike_ratio=0.0,
    clip_rise_min=0.0,
)
"""thresholds under which each rule of `PROBES` fires on every run it can judge, so that its finding
reports the number (the clip rule still needs a persistently high window: only those runs have a
rise to compare)"""


def statistics(runs: pd.DataFrame) -> pd.DataFrame:
    """Per run of `runs` (a `path` column), the number of each `PROBES` field (columns), read from the
    findings under `PROBING`: NaN where the rule cannot judge the run (too short, column missing)."""
    rows = []
    for path in runs["path"]:
        evidence = {f.rule: f.evidence for f in diagnose_run(path, PROBING)}
        rows.append(
            [
                probe.statistic(evidence[probe.rule]) if probe.rule in evidence else math.nan
                for probe in PROBES.values()
            ]
        )
    return pd.DataFrame(rows, index=runs.index, columns=list(PROBES), dtype=float)


def calibrate(values: pd.Series, quantile: float = 0.99, margin: float = 1.2) -> float:
    """The calibration rule: `margin` times the `quantile` of `values` (a statistic over clean runs,
    NaN left out), rounded up to two significant digits, so that a clean run fires only beyond the
    tail the clean runs showed, with room for runs they did not (NaN without values)."""
    finite = values.dropna().to_numpy(dtype=float)
    if not len(finite):
        return math.nan
    raw = margin * float(np.quantile(finite, quantile))
    if raw <= 0:
        return 0.0
    scale = 10.0 ** (1 - math.floor(math.log10(raw)))  # two significant digits
    return math.ceil(round(raw * scale, 9)) / scale
