"""The headline comparisons and their verdict table (`docs/sources.md`, Evaluation guide §6.3 and
Tricks review §3.1): every scheme against `grpo`, and every trick left out of all tricks on, on the
study base, with arms paired on seeds (the same seed gives every arm the same prompts and sampling
streams). Design -> runs -> measures -> table and figure:

- `scheme_points` / `trick_points`: the designs (labelled configurations, seeds set later);
- `run`: trains or loads a design over the seeds through the run store;
- `scheme_scores` / `trick_scores` / `table`: per-run scores (final accuracy, stability, cost,
  activity) and the verdict table (`analysis.verdicts.compare`);
- `figure`: the table as a forest plot of effects with their MDEs."""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from grpo_lab import profiles
from grpo_lab.analysis import verdicts
from grpo_lab.analysis.plots import project_root
from grpo_lab.experiments import SweepResult, run_design
from grpo_lab.experiments.designs import Point, ablation_points
from grpo_lab.presets import TRICKS
from grpo_lab.profiles import Profile
from grpo_lab.runlog import read_config, write_text_atomic
from grpo_lab.studies.base import base

SCHEMES = ("grpo", "scheme_a", "scheme_b", "scheme_c", "dr_grpo", "dapo", "gspo", "cispo")
"""the compared schemes; `grpo` is the reference"""
REFERENCE = "grpo"
ALL_ON = "all"
"""the leave-one-out reference: every trick on"""


def settings(
    profile: str,
    seeds: Sequence[int] | None,
    steps: int | None,
    full_seeds: Sequence[int],
    full_steps: int,
    eval_every: int,
) -> Profile:
    """A headline study's profile: under the full profile its own seeds and steps (unless `seeds` or
    `steps` are given), validated every `eval_every` steps; the smoke profile keeps its own few."""
    chosen = seeds if seeds is not None else (full_seeds if profile == "full" else None)
    return profiles.profile(
        profile, list(chosen) if chosen is not None else None, steps, full_steps, eval_every
    )


def scheme_points(settings: Profile, schemes: Sequence[str] = SCHEMES, **changes: Any) -> list[Point]:
    """Each scheme on the study base (`changes` apply to all), labelled by its preset name."""
    if REFERENCE not in schemes:
        raise ValueError(f"the schemes must include the reference {REFERENCE!r}, got {list(schemes)}")
    return [Point(name, {"arm": name}, base(settings, name, **changes)) for name in schemes]


def trick_points(settings: Profile, tricks: Sequence[str] | None = None, **changes: Any) -> list[Point]:
    """All tricks of `presets.TRICKS` on over the study base ('all'), then each left out ('-name')."""
    chosen = {k: v for k, v in TRICKS.items() if tricks is None or k in tricks}
    unknown = sorted(set(tricks or ()) - set(TRICKS))
    if unknown:
        raise ValueError(f"unknown trick(s) {unknown}; valid: {', '.join(TRICKS)}")
    points = ablation_points(base(settings, **changes), chosen, "leave-one-out")
    return [Point(p.label, {"arm": p.label}, p.config) for p in points]


def run(
    points: Sequence[Point], settings: Profile, root: str | Path | None = None, **options: Any
) -> SweepResult:
    """Train (or load) a design over the profile's seeds into `root` (default: the profile's run
    store); a failed run is an error here: a verdict needs every arm. `options` as for
    `experiments.run_design`."""
    result = run_design(points, settings.seeds, settings.runs_dir() if root is None else root, **options)
    if len(result.failures):
        failed = result.failures[["label", "seed", "error"]].to_string(index=False)
        raise RuntimeError(f"{len(result.failures)} runs failed:\n{failed}")
    return result


def scheme_scores(result: SweepResult) -> pd.DataFrame:
    """One row per scheme run with its scores and its scheme's activity measure."""
    configs = _configs(result)
    return verdicts.run_scores(result.metrics, configs, {label: [label] for label in configs})


def trick_scores(result: SweepResult) -> pd.DataFrame:
    """One row per leave-one-out run with its scores; the runs with every trick on also carry every
    trick's activity measure (where each trick is on)."""
    configs = _configs(result)
    return verdicts.run_scores(result.metrics, configs, {ALL_ON: [t for t in TRICKS if f"-{t}" in configs]})


def variant_scores(result: SweepResult) -> pd.DataFrame:
    """One row per run of a design of variants (`studies.variant_points`) with its scores; variants
    have no activity measure of their own."""
    return verdicts.run_scores(result.metrics, _configs(result), {})


def compare_variants(scored: pd.DataFrame, reference: str, margin: float = verdicts.MARGIN) -> pd.DataFrame:
    """Every variant against `reference`, paired on seeds (rows in the order the runs came)."""
    labels = [label for label in scored["label"].unique() if label != reference]
    return verdicts.compare(scored, [(v, "variant", v, reference) for v in labels], margin=margin)


def table(*scored: pd.DataFrame, margin: float = verdicts.MARGIN) -> pd.DataFrame:
    """The verdict table of the scored runs (`scheme_scores`, `trick_scores`, or both): schemes
    against grpo, then tricks (all on against all but that one)."""
    runs = pd.concat(scored, ignore_index=True)
    labels = set(runs["label"])
    arms = [(s, "scheme", s, REFERENCE) for s in SCHEMES if s in labels and s != REFERENCE]
    arms += [(t, "trick", ALL_ON, f"-{t}") for t in TRICKS if f"-{t}" in labels]
    return verdicts.compare(runs, arms, margin=margin)


def figure(verdict_table: pd.DataFrame, runs: str, margin: float = verdicts.MARGIN) -> plt.Figure:
    """Effects on final validation accuracy with 95% intervals (bars), the MDE (grey band around 0
    per row) and the margin (dotted), schemes and tricks; `runs` says what the runs were (steps)."""
    rows = verdict_table.iloc[::-1]
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(rows) + 1.5))
    y = np.arange(len(rows))
    ax.barh(y, 2 * rows["mde"].clip(upper=1), left=-rows["mde"].clip(upper=1), color="0.9", label="± MDE")
    colors = {"better": "tab:green", "worse": "tab:red", "no difference > margin": "tab:blue"}
    for yi, r in zip(y, rows.itertuples()):
        bar = [[r.effect - r.ci_low], [r.ci_high - r.effect]]
        ax.errorbar(r.effect, yi, xerr=bar, fmt="o", color=colors.get(r.verdict, "0.4"), capsize=3)
    ax.axvline(0, color="k", lw=0.8)
    for x in (-margin, margin):
        ax.axvline(x, color="k", lw=0.8, ls=":")
    ax.set_yticks(y, [f"{r.row} ({r.kind})" for r in rows.itertuples()])
    ax.set_xlabel("paired effect on final validation accuracy (95% t-interval over seeds)")
    seeds = f"{verdict_table['seeds'].min()}-{verdict_table['seeds'].max()}"
    ax.set_title(
        f"schemes vs grpo, tricks left out of all on; {runs}; {seeds} paired seeds per comparison\n"
        f"grey: ± minimum detectable effect (power 0.8); dotted: ± margin {margin}",
        fontsize=9,
    )
    fig.tight_layout()
    return fig


def _configs(result: SweepResult) -> dict[str, dict]:
    """Label -> the config dict of its runs (seeds aside, equal for every run of a label)."""
    return {row.label: read_config(row.path) for row in result.runs.itertuples()}


def save_markdown(verdict_table: pd.DataFrame, name: str) -> Path:
    """Write the table as markdown to figures/<name>.md, next to its figure (the figures index
    includes it)."""
    path = project_root() / "figures" / f"{name}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, verdicts.markdown(verdict_table))
    return path
