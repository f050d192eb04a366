"""The scheme study (notebook 03): every compared scheme on the study base (`studies.base`) against
`grpo`, the Evaluation guide's main comparison (§6.3: replace the objective under the same data and
hyper-parameters, repeat over seeds), with arms paired on seeds (the same seed gives every scheme the
same prompts and sampling streams). A scheme whose preset also changes what is not its own mechanism
(dr_grpo, dapo, gspo and cispo drop the KL) is compared with its matched comparator too
(`presets.matched_comparator`: `grpo_no_kl`), an arm of the design trained on the same seeds, so that
one of its rows reads the mechanism alone. Its runs are also the scheme rows of the verdict table of
`studies.verdicts` (notebook 12), which asks for the same design.

- `settings` / `design`: the profile of `FULL` and each scheme of `SCHEMES`, with its matched
  comparator, on the base;
- `comparisons` / `arms`: the pairs the study judges and the verdict rows they give;
- `run`: trains or loads the design through the run store (every arm is needed), seeds added under
  the sequential rule (`sequential_seeds`);
- `scores` / `table`: per-run scores (final accuracy, stability, cost, activity) and the verdict
  table, each scheme against `REFERENCE` and against its matched comparator;
- `figure`: the table as a forest plot; `figure_curves`: the training curves per scheme;
  `figure_efficiency` / `efficiency_summary`: steps and completions to a common target, censored runs
  counted, and the samples without signal (`analysis.efficiency`); `problems_present`: whether the
  base has the problems the schemes target (`analysis.problems`)."""

from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from grpo_lab.analysis import efficiency, plots, problems, sequential, verdicts
from grpo_lab.analysis.power import MIN_SEEDS
from grpo_lab.analysis.scores import HEADLINE
from grpo_lab.analysis.verdicts import MARGIN_OF_GAIN
from grpo_lab.config import Config
from grpo_lab.experiments import SweepResult
from grpo_lab.experiments.designs import Point
from grpo_lab.experiments.store import is_current, run_dir
from grpo_lab.presets import matched_comparator
from grpo_lab.profiles import Budget, Profile
from grpo_lab.runlog import read_metrics
from grpo_lab.studies import paired
from grpo_lab.studies.base import base, described
from grpo_lab.studies.designs import for_profile

SCHEMES = ("grpo", "scheme_a", "scheme_b", "scheme_c", "dr_grpo", "dapo", "gspo", "cispo", "grpo_no_kl")
"""the compared schemes (presets); `grpo` is the reference and `grpo_no_kl` the matched comparator of
the four that drop the KL, itself compared with grpo (what dropping the KL does)"""
REFERENCE = "grpo"
SMOKE_SCHEMES = 2
"""the smoke profile compares the first this many schemes"""
LOOK_BLOCK = 3
"""seeds added between two looks of the sequential rule"""
MIN_MARGIN = 1e-9
"""the sequential rule's margin when the reference learned nothing (its gain is 0 or less)"""
FULL = Budget(seeds=tuple(range(9)), steps=60, eval_every=5, scored_tail=True)
"""under the full profile: up to 9 paired seeds of 60 steps, validated every 5 steps in the scored
tail: the score pilot's sd of the headline score puts a scheme comparison's MDE within 0.15 of grpo's
gain at 9 seeds; the sequential rule stops a clear comparison earlier (`docs/studies.md`, "Sizing
the full profile")"""
FIRST_LOOK = Budget(
    seeds=tuple(range(MIN_SEEDS)), steps=FULL.steps, eval_every=FULL.eval_every, scored_tail=True
)
"""the scheme study's runs over its first look (`MIN_SEEDS` seeds): the budget of the studies that vary
one thing around each scheme's own run (16's knobs, 17's faults), so that their unvaried runs are 03's"""
CURVES = (
    "val/accuracy",
    "reward",
    "kl/exact",
    "entropy",
    "clip_ratio/region_mean",
    "completions/mean_length",
)
"""the metrics drawn against the step"""
RATIO_WINDOW = 25
"""training steps in the moving average of the importance-ratio quantiles"""


def settings(profile: str, seeds: Sequence[int] | None = None, steps: int | None = None) -> Profile:
    """The study's profile: `FULL` under the full profile, the smoke profile's few otherwise;
    `seeds` and `steps` as the notebook sets them."""
    return FULL.settings(profile, seeds, steps)


def compared(settings: Profile) -> tuple[str, ...]:
    """`SCHEMES` under the full profile; the first `SMOKE_SCHEMES` under any other."""
    return for_profile(SCHEMES, settings, SMOKE_SCHEMES)


def with_comparators(schemes: Sequence[str]) -> tuple[str, ...]:
    """`schemes`, then the matched comparator (`presets.matched_comparator`) of each that is not
    among them, once each."""
    return tuple(dict.fromkeys([*schemes, *map(matched_comparator, schemes)]))


def design(settings: Profile, schemes: Sequence[str] | None = None, **changes: Any) -> list[Point]:
    """Each scheme (default: `compared(settings)`) and its matched comparator (`with_comparators`) on
    the study base, labelled by its preset name (`changes` apply to every arm)."""
    schemes = compared(settings) if schemes is None else tuple(schemes)
    if REFERENCE not in schemes:
        raise ValueError(f"the schemes must include the reference {REFERENCE!r}, got {list(schemes)}")
    return [Point(name, {"arm": name}, base(settings, name, **changes)) for name in with_comparators(schemes)]


def comparisons(labels: Sequence[str]) -> list[tuple[str, str]]:
    """The (treatment, control) pairs judged among the arms `labels`, in their order: each arm against
    `REFERENCE`, followed by the arm against its matched comparator when that is another arm."""
    pairs = []
    for label in labels:
        comparator = matched_comparator(label)
        if label != REFERENCE:
            pairs.append((label, REFERENCE))
        if comparator != REFERENCE and comparator in labels:
            pairs.append((label, comparator))
    return pairs


def arms(labels: Collection[str]) -> list[tuple[str, str, str, str]]:
    """The verdict rows (`analysis.verdicts.compare`'s arms: row, kind, treatment, control) of the
    `SCHEMES` among `labels`, in that order: each scheme against `REFERENCE` (kind 'scheme') and
    against its matched comparator (kind 'scheme vs <comparator>': its own mechanism alone). Both rows
    of a scheme carry its name, hence its activity measure."""
    pairs = comparisons([s for s in SCHEMES if s in labels])
    return [(t, "scheme" if c == REFERENCE else f"scheme vs {c}", t, c) for t, c in pairs]


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
    """The study's margin from the reference's scored runs (`verdicts.gain`): `MARGIN_OF_GAIN` x its
    gain, `MIN_MARGIN` when it learned nothing."""
    return max(MARGIN_OF_GAIN * verdicts.gain(reference), MIN_MARGIN)


def order(column: pd.Series) -> pd.Series:
    """A sort key that puts scheme names in the order of `SCHEMES`."""
    return column.map({name: i for i, name in enumerate(SCHEMES)})


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


def scores(result: SweepResult) -> pd.DataFrame:
    """One row per run with its scores and its scheme's activity measure."""
    return paired.scores(result, {label: [label] for label in result.runs["label"].unique()})


def table(scored: pd.DataFrame, margin: float | None = None) -> pd.DataFrame:
    """The verdict rows of the scored runs (`arms`): each scheme against `REFERENCE` and against its
    matched comparator, paired on seeds, in the order of `SCHEMES`. Every row's gain is the
    reference's (`analysis.verdicts.gain`), as in the sequential rule, and `margin` defaults to
    `MARGIN_OF_GAIN` times it."""
    learned = verdicts.gain(scored[scored["label"] == REFERENCE])
    rows = arms(set(scored["label"]))
    return verdicts.compare(scored, rows, margin=margin, reference_gain=learned)


def verdict_rule(settings: Profile, margin: float) -> verdicts.Rule | None:
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
    return verdicts.Rule(rule(margin, cap), looks(settings))


def rule_table(result: SweepResult, settings: Profile) -> pd.DataFrame:
    """The verdict rows of a run of the design (`arms`) as the verdict table decides them: by the
    sequential rule (`verdict_rule` under `settings`, the settings it was run with) against
    `MARGIN_OF_GAIN` times the reference's gain over its runs; plain paired rows under a profile too
    small for a look."""
    scored = scores(result)
    learned = verdicts.gain(scored[scored["label"] == REFERENCE])
    margin = MARGIN_OF_GAIN * learned
    rows = arms(set(scored["label"]))
    chosen = verdict_rule(settings, margin)
    if chosen is None:
        return verdicts.compare(scored, rows, margin=margin, reference_gain=learned)
    return verdicts.compare(scored, rows, reference_gain=learned, protocol="sequential", rule=chosen)


def figure(verdict_table: pd.DataFrame, settings: Profile) -> plt.Figure:
    """The verdict table as a forest plot (`paired.forest`)."""
    return paired.forest(
        verdict_table, f"{described(settings)}, {settings.steps} steps", f"schemes vs {REFERENCE}"
    )


def title(settings: Profile) -> str:
    """What every figure of the study says its runs are: the start, the bed and the steps."""
    return f"schemes on the {described(settings)}, {settings.steps} steps"


def figure_curves(result: SweepResult, settings: Profile) -> plt.Figure:
    """The `CURVES` per scheme: mean and 95% t-interval over seeds."""
    shown = [m for m in CURVES if m in result.metrics]
    return plots.curves(result.metrics, shown, by="label", title=title(settings))


def efficiency_summary(result: SweepResult, settings: Profile) -> pd.DataFrame:
    """Per scheme and view of `analysis.efficiency` (validation score, training batches): runs, runs
    that reached the common target (`efficiency.TARGET_SHARE` of grpo's gain in the headline metric),
    and the median step and completions at which they did (NaN when half or more never did)."""
    order = compared(settings)
    tables = []
    for view in efficiency.views(HEADLINE.metric):
        progressed = efficiency.progress(result.metrics, view, "label")
        level = efficiency.target(progressed, "label", REFERENCE)
        reached = efficiency.reach(progressed, "label", level)
        tables.append(efficiency.summary(reached, "label", order).assign(view=view.metric, target=level))
    return pd.concat(tables, ignore_index=True)


def problems_present(result: SweepResult) -> pd.DataFrame:
    """Whether the study base has the problems the schemes target (`analysis.problems`), from grpo's
    runs (and, for the length bias dr_grpo targets, dr_grpo's against its matched comparator's, which
    differ in the normalizations alone): a row whose problem is absent measures the scheme's cost
    without its benefit."""
    metrics = result.metrics
    grpo = metrics[metrics["label"] == REFERENCE]
    checks = [problems.sparse_signal(grpo), problems.inconsistency(grpo)]
    comparator = matched_comparator("dr_grpo")
    if {"dr_grpo", comparator} <= set(metrics["label"]):
        per_sequence, dr_grpo = (metrics[metrics["label"] == label] for label in (comparator, "dr_grpo"))
        checks.insert(0, problems.length_bias(per_sequence, dr_grpo, comparator))
    return problems.table(checks)


def figure_efficiency(result: SweepResult, settings: Profile) -> plt.Figure:
    """Sample efficiency per scheme (`efficiency.figure`) on the headline metric, grpo the reference."""
    return efficiency.figure(result.metrics, "label", compared(settings), HEADLINE.metric, title(settings))
