"""The sequential rule over the scheme arms (`comparisons.scheme_arms`): how many paired seeds each
comparison takes, look by look, and how a verdict table applies the same rule. Every study that runs
or reads the scheme comparison (03, 12, 14, 15, 16, 17) asks for its runs through `runs` / `run`, so
they are the same runs in the store.

- `looks` / `rule` / `margin_of`: the seed counts at which the rule looks, its plan against a margin,
  and the margin of a reference's scored runs (`MARGIN_OF_GAIN` x its gain, `MIN_MARGIN` at least);
- `sequential_seeds`: the seeds each arm has taken so far against a store, and the arms still open;
- `runs` / `run`: the runs the rule needs (what `grpo-lab plan` counts) and training them look by look;
- `verdict_rule` / `rule_table`: the rule as a verdict table applies it, and a run's verdict rows."""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from grpo_lab.analysis import sequential, verdict_table
from grpo_lab.analysis.power import MIN_SEEDS
from grpo_lab.analysis.scores import HEADLINE
from grpo_lab.analysis.verdict_table import MARGIN_OF_GAIN
from grpo_lab.comparisons import paired
from grpo_lab.comparisons.scheme_arms import REFERENCE, arms, comparisons, scores
from grpo_lab.config import Config
from grpo_lab.experiments import SweepResult
from grpo_lab.experiments.designs import Point
from grpo_lab.experiments.store import is_current, run_dir
from grpo_lab.profiles import Profile
from grpo_lab.runlog import read_metrics

LOOK_BLOCK = 3
"""seeds added between two looks of the sequential rule"""
MIN_MARGIN = 1e-9
"""the sequential rule's margin when the reference learned nothing (its gain is 0 or less)"""


def looks(settings: Profile) -> tuple[int, ...]:
    """The seed counts at which the sequential rule looks at every comparison: every `LOOK_BLOCK`
    seeds from `power.MIN_SEEDS` up to the profile's seeds (the cap), under the full profile; one
    look at all of them otherwise (the smoke profile's two seeds decide nothing anyway)."""
    cap = len(settings.seeds)
    if settings.name != "full" or cap < MIN_SEEDS:
        return (cap,)
    return sequential.Plan(margin=1.0, min_seeds=MIN_SEEDS, block=LOOK_BLOCK, max_seeds=cap).looks()


def sequential_seeds(
    points: Sequence[Point], settings: Profile, root: str | Path | None
) -> tuple[dict[str, tuple[int, ...]], frozenset[str]]:
    """Arm label -> the seeds the sequential rule has it train so far, and the arms of the
    comparisons it has not decided yet. Look by look (`looks`), both arms of every comparison not
    yet decided (`comparisons`: each arm against the reference, and against its matched comparator)
    take the look's seeds; at a look whose runs are all current in the store `root` (None: an empty
    store), each such comparison's paired differences in the headline score are judged by
    `analysis.sequential.decide` against `MARGIN_OF_GAIN` x the reference's gain over its seeds so
    far, and a decided comparison (better, worse, no difference) takes no more seeds: an arm goes on
    while any of its comparisons does. The seeds stop at the first look whose runs are not all
    stored: the arms of its undecided comparisons may take more at later looks. No arm is open once
    the last look is stored."""
    configs = {p.label: p.config for p in points}
    seeds, planned = settings.seeds, looks(settings)
    chosen: dict[str, tuple[int, ...]] = {label: () for label in configs}
    pending = comparisons(list(configs))
    found: dict[tuple[str, int], tuple[float, float]] = {}
    for n in planned:
        taking = {label for pair in pending for label in pair}
        for label in taking:
            chosen[label] = seeds[:n]
        for label in taking:
            for seed in seeds[:n]:
                score = _stored_score(configs[label].replace(seed=seed), root)
                if score is None:
                    return chosen, frozenset(taking)
                found[(label, seed)] = score
        if n == planned[-1]:
            break
        rule = _rule([found[(REFERENCE, seed)] for seed in chosen[REFERENCE]], len(seeds))
        pending = [
            (t, c)
            for t, c in pending
            if sequential.decide(rule, [found[(t, s)][0] - found[(c, s)][0] for s in seeds[:n]]).decision
            == sequential.CONTINUE
        ]
        if not pending:
            break
    return chosen, frozenset()


def _rule(reference: Sequence[tuple[float, float]], cap: int) -> sequential.Plan:
    """The sequential rule of every comparison (`rule`), its margin `MARGIN_OF_GAIN` x the gain of
    the reference's runs (their (score, start) pairs), up to `cap` seeds."""
    return rule(MARGIN_OF_GAIN * float(np.mean([score - start for score, start in reference])), cap)


def rule(margin: float, cap: int) -> sequential.Plan:
    """The study's sequential plan: first look at `MIN_SEEDS` seeds, `LOOK_BLOCK` seeds between looks,
    up to `cap`, against `margin` or `MIN_MARGIN` when that is smaller (a reference that learned
    nothing leaves no margin: then no comparison is called "no difference")."""
    return sequential.Plan(
        margin=max(margin, MIN_MARGIN), min_seeds=MIN_SEEDS, block=LOOK_BLOCK, max_seeds=cap
    )


def margin_of(reference: pd.DataFrame) -> float:
    """The study's margin from the reference's scored runs (`verdict_table.gain`): `MARGIN_OF_GAIN` x its
    gain, `MIN_MARGIN` when it learned nothing."""
    return max(MARGIN_OF_GAIN * verdict_table.gain(reference), MIN_MARGIN)


def _stored_score(config: Config, root: str | Path | None) -> tuple[float, float] | None:
    """(headline score, its start) of the current run of `config` in the store `root`; None when
    it is not there (or `root` is None, an empty store)."""
    if root is None or not is_current(run_dir(config, root)):
        return None
    metrics = read_metrics(run_dir(config, root))
    return HEADLINE.of(metrics), HEADLINE.start(metrics)


def runs(points: Sequence[Point], settings: Profile, root: str | Path | None = None) -> list[Config]:
    """The runs the design needs (what `grpo-lab plan` counts): the sequential rule's seeds so far
    (`sequential_seeds`, against the store `root`; None: an empty one) and, while it has not
    decided, every remaining seed of the arms of its undecided comparisons: an upper bound until it
    stops."""
    chosen, open_arms = sequential_seeds(points, settings, root)
    for label in open_arms:
        chosen[label] = settings.seeds
    return [p.config.replace(seed=seed) for p in points for seed in chosen[p.label]]


def run(
    points: Sequence[Point], settings: Profile, root: str | Path | None = None, **options: Any
) -> SweepResult:
    """Train (or load) the design into `root` (default: the profile's run store), look by look
    under the sequential rule (`sequential_seeds`): each look's runs are trained, then the decided
    arms stop. A failed run is an error (a verdict needs every arm). `options` as for
    `experiments.execute`. The result holds the runs the rule used, so each verdict row counts the
    seeds it took."""
    where = Path(settings.runs_dir() if root is None else root).resolve()
    while True:
        chosen, open_arms = sequential_seeds(points, settings, where)
        seeded = [(p, p.config.replace(seed=seed)) for p in points for seed in chosen[p.label]]
        result = paired.run_seeded(seeded, where, **options)
        if not open_arms:
            return result
        if result.counts()["trained"] == 0:
            raise RuntimeError(
                f"the store {where} does not hold the runs of this look as current; see grpo-lab plan"
            )


def verdict_rule(settings: Profile, margin: float) -> verdict_table.Rule | None:
    """The sequential rule the study follows under `settings` (`sequential_seeds`) as a verdict
    table applies it: the plan it builds (`rule`: first look at `power.MIN_SEEDS` seeds, `LOOK_BLOCK`
    seeds between looks, the profile's seeds as the cap) and the looks it makes (`looks`), with the
    table's one `margin`; None when the profile has fewer seeds than a look needs (the smoke
    profile's two), so the rule never looks. The study judges each look against grpo's gain over that
    look's seeds; a table judges every row against grpo's gain over all its seeds, so a comparison the
    study stopped as 'no difference' reads 'undecided' where that margin is narrower (the other
    decisions exclude 0 whatever the margin)."""
    cap = len(settings.seeds)
    if cap < MIN_SEEDS:
        return None
    return verdict_table.Rule(rule(margin, cap), looks(settings))


def rule_table(result: SweepResult, settings: Profile) -> pd.DataFrame:
    """The verdict rows of a run of the design (`arms`) as the verdict table decides them: by the
    sequential rule (`verdict_rule` under `settings`, the settings it was run with) against
    `MARGIN_OF_GAIN` times the reference's gain over its runs; plain paired rows under a profile too
    small for a look."""
    scored = scores(result)
    learned = verdict_table.gain(scored[scored["label"] == REFERENCE])
    margin = MARGIN_OF_GAIN * learned
    rows = arms(set(scored["label"]))
    chosen = verdict_rule(settings, margin)
    if chosen is None:
        return verdict_table.compare(scored, rows, margin=margin, reference_gain=learned)
    return verdict_table.compare(scored, rows, reference_gain=learned, protocol="sequential", rule=chosen)
