"""Fault injection with power (notebook 17; Evaluation guide §6.4, `docs/sources.md`): every scheme of
the scheme study (`studies.schemes`, with its matched comparator) clean and under each fault of
notebook 04 (`point_sets.FAULTS`), on the scheme study's 60-step runs and its headline score, so that a
robustness effect has a score whose paired sd is known, an interval within the score's range and an
MDE. Notebook 04 keeps its 8-step runs: they are what its diagnostics read (faults act from the first
step), not a robustness verdict.

Two questions per fault:
- `changes`: what the fault does to each scheme, the score under the fault minus the clean score,
  paired on seeds (a faulty run and its clean run share the prompts and sampling streams);
- `relative`: whether a scheme withstands the fault better than grpo and than its matched comparator:
  the difference of the two schemes' changes, paired on seeds (each seed's
  (scheme faulty - scheme clean) - (control faulty - control clean)); positive: the scheme loses less.
Both are judged against the scheme study's margin (`MARGIN_OF_GAIN` x grpo's clean gain). A run that
fails under a fault is counted (`crashes`) and has no score.

Each of the two tables is a family of comparisons whose error rate is controlled over its rows
(`analysis.multiplicity`): a row shows its raw word (its own 95% interval) beside the word of its
interval at the level its table's control gives it, and the table's caption names the family and the
control. They are two families, not one of all the rows: they answer two questions (what a fault does
to a scheme; whether one scheme withstands it better than another), each read on its own.

- `RELATIVE_FAMILY`, Holm (the family-wise error rate): its words are read one claim at a time
  (scheme_b withstands flipped rewards better than grpo), and most of its comparisons are expected to
  be null (a scheme's mechanism seldom touches the fault): with 72 rows of 3 seeds about 3.6 raw
  directional words come from chance alone, and a single false one is the error to bound.
- `CHANGES_FAMILY`, Benjamini-Hochberg (the false-discovery rate): the faults are built to hurt, so
  most of its nulls are false and its words are read as a set, the map of where the faults bite; the
  error worth bounding is the share of false 'worse' among those it says, not the chance of any one.
  Under Holm, with 3 seeds (2 degrees of freedom, whose t quantile at Holm's first level of 0.05 / 54
  is about 33 against 4.3 at 0.05), a fault that lowers every seed by 0.06 to 0.10 would read
  undecided, a screen that could not find what it was built to find.

Every MDE and seeds-needed figure rests on a spread of at least `power.MIN_SPREAD_SEEDS` seeds:
a row's own sd from that many seeds up, else the sd pooled over its table's rows
(`power.spread_mde`), which the table says: with 3 seeds an sd has 2 degrees of freedom, and an
MDE of 0.002 from three differences that happen to agree is not a property of the fault.

- `settings` / `design` / `run`;
- `scores`, `margin`, `changes`, `relative`, `crashes`, `figure`, `markdown`."""

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from grpo_lab.analysis import multiplicity, power, robustness, verdict_table
from grpo_lab.analysis.robustness import CLEAN, CLEAN_CONDITION
from grpo_lab.analysis.stats import seeds_shown
from grpo_lab.comparisons import paired, point_sets, scheme_arms, sequential_seeds
from grpo_lab.comparisons.bed import base, described
from grpo_lab.comparisons.point_sets import for_profile
from grpo_lab.experiments import SweepResult, run_design
from grpo_lab.experiments.designs import Point
from grpo_lab.profiles import Profile

COLUMNS = ["scheme", "fault", "level", "condition"]
"""the design's columns that identify a condition (as notebook 04's)"""
FULL = scheme_arms.FIRST_LOOK
"""under the full profile: the scheme study's runs over its first look, so that every clean run is one
notebook 03 already holds"""
SEEDS_SHOWN = 200
"""`relative`'s seeds_needed is inf beyond this many seeds"""
CHANGES_FAMILY = multiplicity.Family("every scheme's change under every fault, the rows of this table", "bh")
"""the family of `changes`' rows and its control (module doc)"""
RELATIVE_FAMILY = multiplicity.Family(
    "every scheme row's change against its control's under every fault, the rows of this table", "holm"
)
"""the family of `relative`'s rows and its control (module doc)"""
RELATIVE_COLUMNS = ["row", "kind", "treatment", "control", "condition", "n", "diff", "lo", "hi", "sd"]
"""`relative`'s columns before its interval's level, margin, verdict and MDE"""


settings = FULL.settings
"""The study's profile: `FULL` under the full profile, the smoke profile's few otherwise; `seeds`
and `steps` as the notebook sets them."""


def injected(settings: Profile) -> dict[str, list[Any]]:
    """Notebook 04's faults (`point_sets.FAULTS`) under the full profile, the first alone otherwise."""
    return for_profile(dict(point_sets.FAULTS), settings, point_sets.SMOKE_FAULTS)


def design(settings: Profile) -> list[Point]:
    """Each scheme of the scheme study with its matched comparator (`scheme_arms.design`'s arms: their
    clean configs are its runs), clean and under each level of each fault of `injected`, one fault at
    a time; columns `COLUMNS` as in notebook 04 (`robustness.condition_label`)."""
    points = []
    for arm in scheme_arms.design(settings):
        clean = {"scheme": arm.label, "fault": CLEAN, "level": CLEAN, "condition": CLEAN_CONDITION}
        points.append(Point(f"{arm.label}, clean", clean, arm.config))
        for fault, levels in injected(settings).items():
            for level in levels:
                condition = robustness.condition_label(fault, level)
                columns = {"scheme": arm.label, "fault": fault, "level": str(level), "condition": condition}
                points.append(
                    Point(f"{arm.label}, {condition}", columns, base(settings, arm.label, **{fault: level}))
                )
    return points


def run(
    points: Sequence[Point], settings: Profile, root: str | Path | None = None, **options: Any
) -> SweepResult:
    """Train (or load) every point over the profile's seeds into `root` (default: the profile's store);
    a run that fails under a fault is recorded, not raised (`crashes` counts it). `options` as for
    `experiments.run_design`."""
    return run_design(points, settings.seeds, settings.runs_dir() if root is None else root, **options)


def scores(result: SweepResult) -> pd.DataFrame:
    """One row per finished run: its scores (`analysis.verdict_table.run_scores`) with `COLUMNS`."""
    scored = paired.scores(result, {})
    columns = result.runs[["label", *COLUMNS]].drop_duplicates("label")
    return scored.merge(columns, on="label", validate="many_to_one")


def crashes(result: SweepResult) -> pd.DataFrame:
    """Per scheme and condition, the runs that failed (`SweepResult.failures`) out of all."""
    runs = result.runs.assign(failed=result.runs["status"] == "failed")
    table = runs.groupby(["scheme", "condition"], sort=False)["failed"].agg(failed="sum", runs="size")
    return table.reset_index()


def margin(scored: pd.DataFrame) -> float:
    """The scheme study's margin: `MARGIN_OF_GAIN` x grpo's clean gain (`verdict_table.gain`),
    `sequential_seeds.MIN_MARGIN` where grpo learned nothing."""
    clean = scored[(scored["scheme"] == scheme_arms.REFERENCE) & (scored["condition"] == CLEAN_CONDITION)]
    return sequential_seeds.margin_of(clean)


def changes(scored: pd.DataFrame, margin: float) -> pd.DataFrame:
    """What each fault does to each scheme's score, paired on seeds with the scheme's clean runs
    (`robustness.degradation`: diff, 95% interval, the sd of the per-seed changes, verdict against
    `margin`), the schemes in the scheme study's order; the MDE from a spread of enough seeds
    (`power.spread_mde`: `mde`, `mde sd`, `mde from`) and the table adjusted over its rows
    (`CHANGES_FAMILY`, `robustness.adjusted`)."""
    table = robustness.degradation(scored, "score", margin=margin)
    table = table.sort_values("scheme", key=scheme_arms.order, kind="stable", ignore_index=True)
    return robustness.adjusted(power.spread_mde(table), CHANGES_FAMILY)


def relative(scored: pd.DataFrame, margin: float) -> pd.DataFrame:
    """Per scheme row of the scheme study (`scheme_arms.arms`: against grpo, and against its matched
    comparator) and fault condition, the scheme's change under the fault minus the control's, paired
    on seeds (`power.paired` of the two changes per seed): positive, the scheme loses less. Columns:
    row, kind, treatment, control, condition, n, diff, lo, hi, sd (of the per-seed differences),
    confidence, df, margin, verdict (against `margin`); mde, mde sd and mde from
    (`power.spread_mde`: below `power.MIN_SPREAD_SEEDS` seeds, from the sd pooled over the
    table's rows); seeds_needed: the paired seeds whose MDE would reach `margin` at that spread
    (`power.seeds_needed`; inf beyond `SEEDS_SHOWN`), what deciding the row would take; and the
    table's adjustment over its rows (`RELATIVE_FAMILY`, `robustness.adjusted`)."""
    change = _per_seed_changes(scored)
    rows = []
    for name, kind, treatment, control in scheme_arms.arms(set(scored["scheme"])):
        for condition in dict.fromkeys(change.loc[change["scheme"] == treatment, "condition"]):
            t = _series(change, treatment, condition)
            c = _series(change, control, condition)
            result = power.paired(t, c)
            rows.append(
                {"row": name, "kind": kind, "treatment": treatment, "control": control,
                 "condition": condition, "n": result.n, "diff": result.effect, "lo": result.low,
                 "hi": result.high, "sd": result.sd, "confidence": 1 - power.ALPHA, "df": result.n - 1,
                 "margin": margin, "verdict": result.verdict(margin)}
            )  # fmt: skip
    columns = [*RELATIVE_COLUMNS, "confidence", "df", "margin", "verdict"]
    table = power.spread_mde(pd.DataFrame(rows, columns=columns))
    table["seeds_needed"] = [_seeds_for(sd, margin) for sd in table["mde sd"]]
    return robustness.adjusted(table, RELATIVE_FAMILY)


def _seeds_for(sd: float, margin: float) -> float:
    """The seeds whose MDE reaches `margin` at the paired spread `sd`: NaN without a spread, inf
    beyond `SEEDS_SHOWN`."""
    if not np.isfinite(sd):
        return math.nan
    n = power.seeds_needed(sd, margin, most=SEEDS_SHOWN + 1)  # SEEDS_SHOWN + 1: not reached
    return float(n) if n <= SEEDS_SHOWN else math.inf


def _per_seed_changes(scored: pd.DataFrame) -> pd.DataFrame:
    """Per scheme, faulty condition and seed: the score minus the scheme's clean score of that seed."""
    clean = scored[scored["condition"] == CLEAN_CONDITION].set_index(["scheme", "seed"])["score"]
    faulty = scored[scored["condition"] != CLEAN_CONDITION]
    lost = faulty["score"].to_numpy() - clean.reindex(pd.MultiIndex.from_frame(faulty[["scheme", "seed"]]))
    return faulty[["scheme", "condition", "seed"]].assign(change=np.asarray(lost, dtype=float))


def _series(change: pd.DataFrame, scheme: str, condition: str) -> pd.Series:
    found = change[(change["scheme"] == scheme) & (change["condition"] == condition)]
    return found.set_index("seed")["change"]


def figure(changed: pd.DataFrame, margin: float, settings: Profile) -> plt.Figure:
    """A panel per fault condition: each scheme's change of the headline score under it (the
    effect with its 95% interval, coloured by its raw verdict, and a thin line over its interval at
    its adjusted level, `CHANGES_FAMILY`), its MDE (`changes`: from a spread of enough seeds) as a grey
    bar around 0 and the margin as dotted lines; the title gives the seeds the rows rest on and where
    their MDE's spread comes from."""
    conditions = list(dict.fromkeys(changed["condition"]))
    size = (max(2.6 * len(conditions) + 1.5, 8), 0.32 * changed["scheme"].nunique() + 2.2)
    fig, axes = plt.subplots(1, len(conditions), figsize=size, squeeze=False, sharey=True)
    names = [s for s in scheme_arms.SCHEMES if s in set(changed["scheme"])][::-1]
    y = {name: i for i, name in enumerate(names)}
    for ax, condition in zip(axes[0], conditions):
        rows = changed[changed["condition"] == condition]
        for r in rows.to_dict("records"):
            at = y[r["scheme"]]
            if np.isfinite(r["mde"]):
                ax.barh(at, 2 * r["mde"], left=-r["mde"], height=0.6, color="0.88", zorder=1)
            colour = verdict_table.VERDICT_COLORS.get(r["verdict"], "0.5")
            if "adjusted lo" in r and np.isfinite([r["adjusted lo"], r["adjusted hi"]]).all():
                ax.hlines(at, r["adjusted lo"], r["adjusted hi"], color=colour, lw=0.8, alpha=0.6, zorder=2)
            ax.errorbar(r["diff"], at, xerr=[[r["diff"] - r["lo"]], [r["hi"] - r["diff"]]], fmt="o",
                        color=colour, ms=4, capsize=2, zorder=3)  # fmt: skip
        for edge in (-margin, margin):
            ax.axvline(edge, color="0.4", ls=":", lw=1)
        ax.axvline(0, color="0.2", lw=0.8)
        ax.set_title(condition, fontsize=9)
        ax.set_xlabel("change of the headline score", fontsize=8)
        ax.grid(axis="x", alpha=0.3)
    axes[0, 0].set_yticks(range(len(names)), names, fontsize=8)
    seeds = seeds_shown(list(changed["n"]))
    fig.suptitle(
        f"what each fault does to each scheme ({described(settings)}, {settings.steps} steps, {seeds} paired "
        f"seeds):\nfault minus clean, 95% interval coloured by raw verdict, thin line: the interval at its "
        f"{multiplicity.CONTROL_NAMES[CHANGES_FAMILY.control]} level over the {len(changed)} rows;\n"
        f"grey: MDE ({_spread_source(changed)}); dotted: the "
        f"margin ({margin:.3f})",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.88))
    return fig


def _spread_source(table: pd.DataFrame) -> str:
    """Where a table's MDEs come from, in a few words: 'own sd' or 'sd pooled over N rows' (both
    where both occur)."""
    sources = set(table["mde from"]) if "mde from" in table else {"own"}
    pooled = power.pooled_spread(table["n"], table["sd"]) if "sd" in table else None
    said = []
    if "own" in sources:
        said.append(f"own sd from {power.MIN_SPREAD_SEEDS} seeds up")
    if "pooled" in sources and pooled is not None:
        said.append(f"below {power.MIN_SPREAD_SEEDS} seeds, sd pooled over {pooled.rows} rows")
    return "; ".join(said) or "none"


def spread_words(table: pd.DataFrame, needed: bool = False) -> str:
    """A line for a table's caption: where its MDE (and, `needed`, its seeds-needed figure) comes
    from, e.g. 'MDE: every row rests on fewer than 5 seeds, so from the sd pooled over 54 rows (0.0123,
    108 df), which assumes the rows share one spread; marked (pooled)'."""
    what = "MDE and seeds needed" if needed else "MDE"
    pooled = power.pooled_spread(table["n"], table["sd"])
    counts = table["mde from"].value_counts()
    least = power.MIN_SPREAD_SEEDS
    parts = []
    if counts.get("own", 0):
        parts.append(f"{counts['own']} rows of {least} seeds or more from their own sd")
    if counts.get("pooled", 0):
        parts.append(
            f"{counts['pooled']} rows of fewer than {least} seeds from {pooled.words()}, which assumes the "
            "rows share one spread (marked 'pooled')"
        )
    if counts.get("none", 0):
        parts.append(f"{counts['none']} rows without a spread to read one from (n/a)")
    return f"{what}: " + ("; ".join(parts) or "no rows") + "."


def _figure(value: float, source: str, digits: str = ".3f") -> str:
    """An MDE or seeds-needed cell: 'n/a', '> SEEDS_SHOWN' or the value, '(pooled)' after it where
    its spread is the table's pooled one."""
    if not np.isfinite(value):
        return "n/a" if math.isnan(value) else f"> {SEEDS_SHOWN}"
    return f"{value:{digits}}" + (" (pooled)" if source == "pooled" else "")


def _adjusted_interval(r: dict) -> str:
    """A row's interval at its adjusted level, e.g. '[-0.150, -0.012] at 99.91%'; 'n/a' without one."""
    low, high = r.get("adjusted lo", math.nan), r.get("adjusted hi", math.nan)
    if not np.isfinite([low, high]).all():
        return "n/a"
    return f"[{low:+.3f}, {high:+.3f}] at {100 * r['adjusted confidence']:.4g}%"


def markdown(changed: pd.DataFrame, compared: pd.DataFrame, failed: pd.DataFrame) -> str:
    """The two tables as GitHub markdown, each under its caption: its family and error-rate control
    (`CHANGES_FAMILY`, `RELATIVE_FAMILY`) and where its MDEs come from (`spread_words`). Per condition
    and scheme the change [95% CI], the interval at its adjusted level, MDE, seeds, failed runs, and
    the raw and adjusted verdicts; then per condition and scheme row the relative robustness with
    the seeds its MDE would need to reach the margin."""
    lost = {(r.scheme, r.condition): f"{r.failed}/{r.runs}" for r in failed.itertuples()}
    lines = [
        CHANGES_FAMILY.caption(multiplicity.family_size(changed)),
        "",
        spread_words(changed),
        "",
        "| condition | scheme | change [95% CI] | adjusted CI | MDE | seeds | failed runs | verdict "
        "| adjusted verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in changed.to_dict("records"):
        failures = lost.get((r["scheme"], r["condition"]), "0")
        lines.append(
            f"| {r['condition']} | {r['scheme']} | {r['summary']} | {_adjusted_interval(r)} "
            f"| {_figure(r['mde'], r['mde from'])} | {r['n']} | {failures} | {r['verdict']} "
            f"| {r['adjusted verdict']} |"
        )
    lines += [
        "",
        RELATIVE_FAMILY.caption(multiplicity.family_size(compared)),
        "",
        spread_words(compared, needed=True),
        "",
        "| condition | row | kind | scheme's change minus the control's [95% CI] | adjusted CI | MDE | seeds "
        "| seeds for an MDE at the margin | verdict | adjusted verdict |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in compared.to_dict("records"):
        shown = f"{r['diff']:+.3f} [{r['lo']:+.3f}, {r['hi']:+.3f}]"
        needed = _figure(r["seeds_needed"], r["mde from"], ".0f")
        lines.append(
            f"| {r['condition']} | {r['row']} | {r['kind']} | {shown} | {_adjusted_interval(r)} "
            f"| {_figure(r['mde'], r['mde from'])} | {r['n']} | {needed} | {r['verdict']} "
            f"| {r['adjusted verdict']} |"
        )
    return "\n".join(lines) + "\n"
