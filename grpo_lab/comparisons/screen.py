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
the full profile the design runs in `REPLICATES` blocks of 32 runs, each block with new seeds. Once it
is replicated, the main effects rest on pure error (`analysis.factorial.replicated_effects`: the 31
contrast columns fitted at once, the error the spread between the replicate runs of each design
point, 32 degrees of freedom per added block), so an active interaction chain is a finding of its
own (`contrasts`, `analysis.factorial.half_normal`) rather than noise in every interval. With one
block there is no pure error: the intervals rest on the pooled residual of the 15 interaction chains
(15 degrees of freedom: a large interaction widens every interval), and the table's `error term`
column and the figure's caption say so. `replicates_needed` sizes the replicates. Every margin is
`analysis.verdict_table.MARGIN_OF_GAIN` times grpo's gain on the study base (`reference_gain`, from the
caller: the verdict table's, or `stored_reference_gain`). The smoke profile runs the same 32 runs of
its few steps. Design -> runs -> measures -> table and figure:

- `FACTORS`, `design`: the factors and the 32 labelled configurations (seeds set by `run_seeds`);
- `run`: trains or loads the design over the profile's blocks through the run store;
- `scores`, `main_effects`, `contrasts`, `aliases`, `report`: a score per run, the main effects with
  intervals, MDEs and verdicts, every contrast column of the saturated fit (`analysis.factorial`),
  the alias structure;
- `FAMILY` / `adjusted` / `caption`: the main effects as one family of comparisons under Holm's control of
  the family-wise error rate (`analysis.multiplicity`): each factor's raw word beside the word of its
  interval at its Holm level (a screen asks which of 16 factors act, one claim at a time);
- `figure`: the main effects as a forest plot."""

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from grpo_lab.analysis import factorial, multiplicity
from grpo_lab.analysis.power import ALPHA
from grpo_lab.analysis.scores import HEADLINE, Score
from grpo_lab.analysis.verdict_table import MARGIN_OF_GAIN, gain
from grpo_lab.comparisons import paired, scheme_arms
from grpo_lab.comparisons.bed import base
from grpo_lab.config import Config
from grpo_lab.experiments import SweepResult
from grpo_lab.experiments.designs import Component, Point, factorial_aliases, factorial_points
from grpo_lab.experiments.store import Outcome, is_current, run_dir
from grpo_lab.experiments.sweeps import collect
from grpo_lab.presets import TRICKS
from grpo_lab.profiles import Budget, Profile
from grpo_lab.runlog import read_metrics

GROUP_REWARD_NORM: Component = ({"advantage": "grpo"}, {"advantage": "dr_grpo"})
"""grpo's std scaling of the group advantage: on is grpo's advantage, off the mean-centred advantage
without std scaling of Dr. GRPO (its `advantage` alone: its aggregation and KL are not part of it)"""
FACTORS: dict[str, Component] = {**TRICKS, "group_reward_norm": GROUP_REWARD_NORM}
"""the 16 factors of the screen: name -> the config changes that switch it on (or an (on, off) pair)"""
REPLICATES = 3
"""replicate blocks of the 32-run design under the full profile, each with new seeds (`run_seeds`):
with 2 or more the main effects rest on pure error; with 1 they fall back to the residual of the
interaction chains, and say so (`main_effects`)"""
FULL = Budget(seeds=tuple(range(REPLICATES)), steps=60, eval_every=5, scored_tail=True)
"""under the full profile: `REPLICATES` blocks of the 32 runs, 60 steps, validated every 5 steps in
the scored tail (the headline score's run, as the schemes'). Sized for the score pilot's run-to-run
sd (MDE 0.12 x grpo's gain); with one block the interactions of the runs made it 0.91 x grpo's gain
(`docs/studies.md`, "What the screen measured")"""
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
    the store `root` (default: the profile's) and current, against grpo's gain over its stored runs
    (`stored_reference_gain`); None otherwise. Nothing is trained: the leave-one-out
    (`studies.ablations`) reads which tricks to confirm from it."""
    chosen = settings(profile)
    seeded = run_seeds(design(chosen), chosen)
    where = Path(chosen.runs_dir() if root is None else root).resolve()
    if not all(is_current(run_dir(config, where)) for _, config in seeded):
        return None
    learned = stored_reference_gain(profile, where)
    if learned is None:
        return None
    loaded = {config.key(): Outcome(config.key(), "loaded") for _, config in seeded}
    return main_effects(scores(collect(seeded, loaded, where)), reference_gain=learned)


def stored_reference_gain(profile: str, root: str | Path | None = None) -> float | None:
    """grpo's gain on the study base in the headline score (`analysis.verdict_table.gain`), the gain every
    margin of the screen is a share of: over the scheme study's grpo runs under `profile`
    (`studies.schemes`, whose runs the verdict table reads; their first seeds are also the ablation
    study's base runs) that are current in the store `root` (default: the profile's); None when none
    is. Nothing is trained."""
    chosen = scheme_arms.settings(profile)
    reference = next(
        p.config
        for p in scheme_arms.design(chosen, [scheme_arms.REFERENCE])
        if p.label == scheme_arms.REFERENCE
    )
    where = Path(chosen.runs_dir() if root is None else root).resolve()
    found = [run_dir(reference.replace(seed=seed), where) for seed in chosen.seeds]
    logs = [read_metrics(path) for path in found if is_current(path)]
    learned = gain(
        pd.DataFrame({"score": [HEADLINE.of(m) for m in logs], "start": [HEADLINE.start(m) for m in logs]})
    )
    return learned if np.isfinite(learned) else None


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
    scored: pd.DataFrame,
    margin: float | None = None,
    factors: Sequence[str] = tuple(FACTORS),
    reference_gain: float | None = None,
) -> pd.DataFrame:
    """The main effect of every factor on the score, combined over the replicate blocks, with its 95%
    interval, MDE and verdict against `margin` (`analysis.factorial.replicated_effects`: on pure error
    when the design is replicated; with one block on the residual of the interaction chains, which the
    `error term` column says). `reference_gain` is grpo's gain on the study base (the caller's: the
    verdict table's, or `stored_reference_gain`), required: `margin` defaults to `MARGIN_OF_GAIN`
    times it, the margin of every verdict table, and the `gain` and `mde / gain` columns read the MDE
    against it."""
    chosen, learned = _margin(margin, reference_gain)
    table = factorial.replicated_effects(scored, chosen, factors)
    return table.assign(gain=learned, **{"mde / gain": table["mde"] / learned if learned > 0 else np.nan})


def contrasts(
    scored: pd.DataFrame,
    margin: float | None = None,
    factors: Sequence[str] = tuple(FACTORS),
    reference_gain: float | None = None,
) -> pd.DataFrame:
    """Every one of the design's 31 contrast columns fitted at once (`analysis.factorial.saturated`):
    the 16 main effects and the 15 chains of two-factor interactions, with intervals on pure error
    when the design is replicated (none with one block) and Lenth's pseudo standard error as the
    check that needs no replicate; `analysis.factorial.half_normal` of it is the half-normal plot
    that shows an active chain. `margin` and `reference_gain` as for `main_effects`."""
    chosen, learned = _margin(margin, reference_gain)
    return factorial.saturated(scored, chosen, factors).assign(gain=learned)


def _margin(margin: float | None, reference_gain: float | None) -> tuple[float, float]:
    """(the margin, grpo's gain): `margin`, by default `MARGIN_OF_GAIN` x `reference_gain`; an error
    without a finite reference gain."""
    if reference_gain is None or not np.isfinite(reference_gain):
        raise ValueError(
            f"the screen's margin and MDE / gain are read against grpo's gain on the study base "
            f"(MARGIN_OF_GAIN = {MARGIN_OF_GAIN} x it), not the screen's own runs': pass reference_gain "
            f"(e.g. screen.stored_reference_gain(profile), or analysis.verdict_table.gain of grpo's scored "
            f"runs), got {reference_gain!r}"
        )
    return (MARGIN_OF_GAIN * reference_gain if margin is None else margin), float(reference_gain)


def replicates_needed(sd: float, reference_gain: float, runs: int = 32, most: int = 64) -> int:
    """The fewest replicate blocks (at least 2: one leaves no pure error) of the `runs`-run design
    that give every main effect an MDE (`analysis.factorial.replicated_mde`, on pure error) of at most
    `MARGIN_OF_GAIN` x grpo's gain `reference_gain`, for a run-to-run sd `sd` (seed to seed, one
    configuration). An error when `most` replicates do not reach it."""
    if not (np.isfinite(reference_gain) and reference_gain > 0):
        raise ValueError(f"grpo's gain must be a finite number > 0, got {reference_gain!r}")
    target = MARGIN_OF_GAIN * reference_gain
    for replicates in range(2, most + 1):
        if factorial.replicated_mde(sd, runs, replicates) <= target:
            return replicates
    reached = factorial.replicated_mde(sd, runs, most)
    raise ValueError(
        f"{most} replicates of {runs} runs give an MDE of {reached:.3g} at sd {sd:g}, above the target "
        f"{target:.3g} ({MARGIN_OF_GAIN} x gain {reference_gain:g}); raise `most` or reduce the sd"
    )


def aliases(factors: Mapping[str, Component] = FACTORS) -> pd.DataFrame:
    """The alias structure of the screen's design: no main effect aliased with a two-factor
    interaction, and the 2FIs in 15 chains of 8."""
    return factorial_aliases(factors, resolution=4)


FAMILY = multiplicity.Family("the screen's factors", "holm")
"""the main effects' family and its error-rate control"""


def adjusted(effects: pd.DataFrame) -> pd.DataFrame:
    """`main_effects`' rows adjusted over the factors (`FAMILY`, `analysis.multiplicity.adjust`; each
    interval is a 95% one): `p`, the adjusted interval and `adjusted verdict` beside the raw ones."""
    return multiplicity.adjust(effects.assign(confidence=1 - ALPHA), FAMILY)


def caption(effects: pd.DataFrame) -> str:
    """The family line of `adjusted` effects: the factors in it and the control."""
    return FAMILY.caption(multiplicity.family_size(effects))


def report(table: pd.DataFrame, factors: Mapping[str, Component] = FACTORS) -> str:
    """The main-effects table with the design's alias structure, as printable text."""
    return factorial.report(table, aliases(factors))


def figure(table: pd.DataFrame, score: Score = HEADLINE, setting: str = "") -> plt.Figure:
    """The main effects with their 95% intervals (bars), the MDE (grey band around 0 per row) and the
    table's margin (dotted), drawn by `paired.forest_axes`; the caption says what the score averages,
    over what window, on how many runs and blocks and which variance the intervals rest on. `setting`
    says what the runs were (steps)."""
    fig, ax = paired.forest_axes(table, list(table["factor"]), "shared", 2)
    margin = float(table["margin"].iloc[0])
    ax.set_xlabel("main effect: mean score with the factor on minus off (95% t-interval)")
    runs, blocks, seeds = (int(table[c].max()) for c in ("runs", "blocks", "seeds"))
    variance = f"{table['variance'].iloc[0]}, {int(table['df'].iloc[0])} df"
    warning = f"\n{table['error term'].iloc[0]}" if "error term" in table else ""
    ax.set_title(
        f"factorial screen (resolution IV){'; ' + setting if setting else ''}: {runs} runs in {blocks} "
        f"block(s) of {runs // max(blocks, 1)}, {seeds} seeds\nscore: {score.caption()}\n"
        f"variance of the intervals: {variance}; grey: ± MDE (power 0.8); dotted: ± margin {margin:.3g}"
        f"{warning}",
        fontsize=9,
        color="tab:red" if table["variance"].iloc[0] != factorial.PURE_ERROR else "k",
    )
    fig.tight_layout()
    return fig
