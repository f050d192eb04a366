"""The factorial screen of the training tricks: every trick of `presets.TRICKS` and group reward
normalization as the 16 factors of a two-level fractional factorial design of resolution IV in 32
runs, on the study base, replicated in blocks. Every run trains with a seed of its own (`run_seeds`:
run i of block b has seed `SEED_STRIDE` x b + i), so a main effect rests on 16 seeds on each side:
the score pilot found no correlation between arms that share a seed (`docs/studies.md`), so sharing
seeds would buy nothing and would leave each effect resting on one seed per block.

Leave-one-out spends each run on one effect: with r seeds a trick's effect is a paired difference
of variance 2 sigma^2 / r. Here every run informs every main effect (mean score with the factor on
minus off, variance 4 sigma^2 / N over N runs), and at resolution IV no main effect is aliased with a
two-factor interaction (Box, Hunter & Hunter, "Statistics for Experimenters", 2nd ed., ch. 6). Under
the full profile the design runs once (`FULL`: one block of 32 runs), and the main effects rest on the
pooled residual variance of the runs (`analysis.factorial`: 15 degrees of freedom, the two-factor
interaction chains, so a large interaction widens every interval rather than biasing an effect). The
smoke profile runs the same 32 runs of its few steps. Design -> runs -> measures -> table and figure:

- `FACTORS`, `design`: the factors and the 32 labelled configurations (seeds set by `run_seeds`);
- `run`: trains or loads the design over the profile's blocks through the run store;
- `scores`, `main_effects`, `aliases`, `report`: a score per run, the main effects with intervals,
  MDEs and verdicts (`analysis.factorial`), the alias structure;
- `figure`: the main effects as a forest plot."""

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from grpo_lab.analysis import factorial
from grpo_lab.analysis.scores import HEADLINE, Score
from grpo_lab.analysis.verdicts import MARGIN_OF_GAIN, gain
from grpo_lab.config import Config
from grpo_lab.experiments import SweepResult
from grpo_lab.experiments.designs import Component, Point, factorial_aliases, factorial_points
from grpo_lab.experiments.store import Outcome, is_current, run_dir
from grpo_lab.experiments.sweeps import collect
from grpo_lab.presets import TRICKS
from grpo_lab.profiles import Budget, Profile
from grpo_lab.studies import paired
from grpo_lab.studies.base import base

GROUP_REWARD_NORM: Component = ({"advantage": "grpo"}, {"advantage": "dr_grpo"})
"""grpo's std scaling of the group advantage: on is grpo's advantage, off the mean-centred advantage
without std scaling of Dr. GRPO (its `advantage` alone: its aggregation and KL are not part of it)"""
FACTORS: dict[str, Component] = {**TRICKS, "group_reward_norm": GROUP_REWARD_NORM}
"""the 16 factors of the screen: name -> the config changes that switch it on (or an (on, off) pair)"""
FULL = Budget(seeds=(0,), steps=60, eval_every=5, scored_tail=True)
"""under the full profile: one block of the 32 runs, 60 steps, validated every 5 steps in the
scored tail (the headline score's run, as the schemes'). Sized for the score pilot's run-to-run sd
(MDE 0.12 x grpo's gain); the interactions of the runs made it 0.95 x gain (`docs/studies.md`, "What
the screen measured")"""
SEED_STRIDE = 1000
"""run i of block b trains with seed SEED_STRIDE x b + i (a block holds fewer runs than this)"""
SMOKE_SEEDS = (0,)
"""the seed block under any other profile: the whole design once"""
SMOKE_STEPS = 2
"""the steps of each run under any other profile: the 32 runs exercise every factor in seconds"""


def settings(profile: str, seeds: Sequence[int] | None = None, steps: int | None = None) -> Profile:
    """The screen's profile: `FULL` under the full profile, one block (`SMOKE_SEEDS`) of
    `SMOKE_STEPS` steps otherwise; `seeds` and `steps` as the notebook sets them win."""
    full = profile == "full"
    chosen_seeds = seeds if seeds is not None or full else SMOKE_SEEDS
    return FULL.settings(profile, chosen_seeds, steps if steps is not None or full else SMOKE_STEPS)


def design(settings: Profile, factors: Mapping[str, Component] = FACTORS, **changes: Any) -> list[Point]:
    """The resolution IV design of `factors` over the study base (`changes` apply to every run):
    32 points for the 16 `FACTORS`, labelled 'r01' ... 'r32', each with its factor -> on/off values."""
    return factorial_points(base(settings, **changes), factors, resolution=4)


def run_seeds(points: Sequence[Point], settings: Profile) -> list[tuple[Point, Config]]:
    """Every run of the design in every block of `settings.seeds`: (point, its config with the run's
    own seed, `SEED_STRIDE` x block + the point's index)."""
    if len(points) >= SEED_STRIDE:
        raise ValueError(f"a block holds at most {SEED_STRIDE - 1} runs, got {len(points)}")
    blocks = settings.seeds
    return [(p, p.config.replace(seed=SEED_STRIDE * b + i)) for b in blocks for i, p in enumerate(points)]


def runs(points: Sequence[Point], settings: Profile, root: str | Path | None = None) -> list[Config]:
    """The configs the design trains (what `grpo-lab plan` counts; `root`, the store, is part of the
    studies' common signature: the screen's runs do not depend on what is stored)."""
    return [config for _, config in run_seeds(points, settings)]


def run(
    points: Sequence[Point], settings: Profile, root: str | Path | None = None, **options: Any
) -> SweepResult:
    """Train (or load) the design over the profile's blocks into `root` (default: the profile's run
    store), each run with its own seed (`run_seeds`); a failed run is an error, as a missing run would
    unbalance its block. `options` as for `experiments.execute`."""
    return paired.run_seeded(
        run_seeds(points, settings), settings.runs_dir() if root is None else root, **options
    )


def stored_effects(profile: str, root: str | Path | None = None) -> pd.DataFrame | None:
    """The screen's main effects (`main_effects`) under `profile` when every run of its design is in
    the store `root` (default: the profile's) and current; None otherwise. Nothing is trained: the
    leave-one-out (`studies.ablations`) reads which tricks to confirm from it."""
    chosen = settings(profile)
    seeded = run_seeds(design(chosen), chosen)
    where = Path(chosen.runs_dir() if root is None else root).resolve()
    if not all(is_current(run_dir(config, where)) for _, config in seeded):
        return None
    loaded = {config.key(): Outcome(config.key(), "loaded") for _, config in seeded}
    return main_effects(scores(collect(seeded, loaded, where)))


def scores(
    result: SweepResult, score: Score = HEADLINE, factors: Sequence[str] = tuple(FACTORS)
) -> pd.DataFrame:
    """A row per run: `run` (its label), `seed` (its block), `run_seed` (the seed it trained with),
    a bool column per factor, `score`
    (`score.of` the run's metrics: NaN where the run did not log the score's metric, which
    `main_effects` refuses) and `start` (the metric at the first evaluation, before any update)."""
    names = list(factors)
    missing = [f for f in names if f not in result.metrics.columns]
    if missing:
        raise ValueError(
            f"the runs have no column for factor(s) {missing}: are they the runs of a factorial design "
            f"of these factors? Columns: {list(result.metrics.columns)[:20]}"
        )
    rows = []
    for (label, seed), metrics in result.metrics.groupby(["label", "seed"], sort=False):
        first = metrics.iloc[0]
        values = {f: bool(first[f]) for f in names}
        block = int(seed) // SEED_STRIDE
        scored_run = {"score": score.of(metrics), "start": score.start(metrics)}
        rows.append({"run": label, "seed": block, factorial.RUN_SEED: seed, **values, **scored_run})
    scored = pd.DataFrame(rows, columns=["run", "seed", factorial.RUN_SEED, *names, "score", "start"])
    return scored.astype({f: bool for f in names})


def main_effects(
    scored: pd.DataFrame, margin: float | None = None, factors: Sequence[str] = tuple(FACTORS)
) -> pd.DataFrame:
    """The main effect of every factor on the score, combined over the seed blocks, with its 95%
    interval, MDE and verdict against `margin` (`analysis.factorial.main_effects`). `margin` defaults
    to `MARGIN_OF_GAIN` times what the runs learn (`analysis.verdicts.gain`: the mean over every run
    of the design, the average configuration, of its score minus its start), the effect of interest
    of every verdict table; the `gain` column gives it."""
    learned = gain(scored)
    chosen = MARGIN_OF_GAIN * learned if margin is None else margin
    return factorial.main_effects(scored, chosen, factors).assign(gain=learned)


def aliases(factors: Mapping[str, Component] = FACTORS) -> pd.DataFrame:
    """The alias structure of the screen's design: no main effect aliased with a two-factor
    interaction, and the 2FIs in 15 chains of 8."""
    return factorial_aliases(factors, resolution=4)


def report(table: pd.DataFrame, factors: Mapping[str, Component] = FACTORS) -> str:
    """The main-effects table with the design's alias structure, as printable text."""
    return factorial.report(table, aliases(factors))


def figure(table: pd.DataFrame, score: Score = HEADLINE, setting: str = "") -> plt.Figure:
    """The main effects with their 95% intervals (bars), the MDE (grey band around 0 per row) and the
    table's margin (dotted); the caption says what the score averages, over what window, on how many runs and
    blocks and which variance the intervals rest on. `setting` says what the runs were (steps)."""
    rows = table.iloc[::-1]
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(rows) + 2))
    y = np.arange(len(rows))
    mde = rows["mde"].clip(upper=1)
    ax.barh(y, 2 * mde, left=-mde, color="0.9", label="± MDE")
    for yi, r in zip(y, rows.itertuples()):
        if np.isfinite(r.ci_low):
            ax.errorbar(r.effect, yi, xerr=[[r.effect - r.ci_low], [r.ci_high - r.effect]], fmt="none",
                        ecolor=paired.VERDICT_COLORS.get(r.verdict, "0.4"), capsize=3)  # fmt: skip
        ax.plot(r.effect, yi, "o", color=paired.VERDICT_COLORS.get(r.verdict, "0.4"))
    ax.axvline(0, color="k", lw=0.8)
    margin = float(table["margin"].iloc[0])
    for x in (-margin, margin):
        ax.axvline(x, color="k", lw=0.8, ls=":")
    ax.set_yticks(y, list(rows["factor"]))
    ax.set_xlabel("main effect: mean score with the factor on minus off (95% t-interval)")
    runs, blocks, seeds = (int(table[c].max()) for c in ("runs", "blocks", "seeds"))
    variance = f"{table['variance'].iloc[0]}, {int(table['df'].iloc[0])} df"
    ax.set_title(
        f"factorial screen (resolution IV){'; ' + setting if setting else ''}: {runs} runs in {blocks} "
        f"block(s) of {runs // max(blocks, 1)}, {seeds} seeds\nscore: {score.caption()}\n"
        f"variance of the intervals: {variance}; grey: ± MDE (power 0.8); dotted: ± margin {margin:.3g}",
        fontsize=9,
    )
    fig.tight_layout()
    return fig
