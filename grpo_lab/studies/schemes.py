"""The scheme study (notebook 03): every compared scheme on the study base (`studies.base`) against
`grpo`, the Evaluation guide's main comparison (§6.3: replace the objective under the same data and
hyper-parameters, repeat over seeds), with arms paired on seeds (the same seed gives every scheme the
same prompts and sampling streams). Its runs are also the scheme rows of the verdict table of
`studies.verdicts` (notebook 12), which asks for the same design.

- `settings` / `design`: the profile of `FULL` and each scheme of `SCHEMES` on the base;
- `run`: trains or loads the design through the run store (every arm is needed);
- `scores` / `table`: per-run scores (final accuracy, stability, cost, activity) and the verdict
  table, each scheme against `REFERENCE`;
- `figure`: the table as a forest plot; `figure_curves`: the training curves per scheme."""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from grpo_lab.analysis import plots, sequential, verdicts
from grpo_lab.analysis.power import MIN_SEEDS
from grpo_lab.analysis.scores import HEADLINE
from grpo_lab.analysis.verdicts import MARGIN_OF_GAIN
from grpo_lab.config import Config
from grpo_lab.experiments import SweepResult
from grpo_lab.experiments.designs import Point
from grpo_lab.experiments.store import is_current, run_dir
from grpo_lab.profiles import Budget, Profile
from grpo_lab.runlog import read_metrics
from grpo_lab.studies import paired
from grpo_lab.studies.base import base
from grpo_lab.studies.designs import for_profile

SCHEMES = ("grpo", "scheme_a", "scheme_b", "scheme_c", "dr_grpo", "dapo", "gspo", "cispo")
"""the compared schemes (presets); `grpo` is the reference"""
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


def design(settings: Profile, schemes: Sequence[str] | None = None, **changes: Any) -> list[Point]:
    """Each scheme (default: `compared(settings)`) on the study base, labelled by its preset name
    (`changes` apply to every arm)."""
    schemes = compared(settings) if schemes is None else tuple(schemes)
    if REFERENCE not in schemes:
        raise ValueError(f"the schemes must include the reference {REFERENCE!r}, got {list(schemes)}")
    return [Point(name, {"arm": name}, base(settings, name, **changes)) for name in schemes]


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
    """Arm label -> the seeds the sequential rule has it train so far, and the arms it has not
    decided yet. Look by look (`looks`), every arm not yet decided (and the reference, while any is)
    takes the look's seeds; at a look whose runs are all current in the store `root` (None: an empty
    store), each such arm's paired differences in the headline score are judged by
    `analysis.sequential.decide` against `MARGIN_OF_GAIN` x the reference's gain, and a decided arm
    (better, worse, no difference) takes no more seeds. The seeds stop at the first look whose runs
    are not all stored: its undecided arms may take more at later looks. No arm is open once the
    last look is stored."""
    labels = [p.label for p in points]
    configs = {p.label: p.config for p in points}
    seeds, planned = settings.seeds, looks(settings)
    chosen: dict[str, tuple[int, ...]] = {label: () for label in labels}
    active = set(labels) - {REFERENCE}
    for n in planned:
        for label in active | {REFERENCE}:
            chosen[label] = seeds[:n]
        stored = {
            (label, seed): _stored_score(configs[label].replace(seed=seed), root)
            for label in active | {REFERENCE}
            for seed in seeds[:n]
        }
        found = {key: score for key, score in stored.items() if score is not None}
        if len(found) < len(stored):
            return chosen, frozenset(active)
        if n == planned[-1]:
            break
        reference = [found[(REFERENCE, seed)] for seed in seeds[:n]]
        margin = MARGIN_OF_GAIN * float(np.mean([score - start for score, start in reference]))
        # a reference that learned nothing leaves no margin: then no arm is called "no difference"
        margin = max(margin, MIN_MARGIN)
        rule = sequential.Plan(margin=margin, min_seeds=MIN_SEEDS, block=LOOK_BLOCK, max_seeds=len(seeds))
        for label in sorted(active):
            differences = [found[(label, s)][0] - found[(REFERENCE, s)][0] for s in seeds[:n]]
            if sequential.decide(rule, differences).decision != sequential.CONTINUE:
                active.discard(label)
        if not active:
            break
    return chosen, frozenset()


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
    decided, every remaining seed of the arms still undecided: an upper bound until it stops."""
    chosen, open_arms = sequential_seeds(points, settings, root)
    if open_arms:
        for label in (*open_arms, REFERENCE):
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
    """The verdict rows of the scored runs: each scheme against `REFERENCE`, paired on seeds, in the
    order of `SCHEMES`; `margin` as for `analysis.verdicts.compare` (None: a share of the reference's
    gain)."""
    labels = set(scored["label"])
    arms = [(s, "scheme", s, REFERENCE) for s in SCHEMES if s in labels and s != REFERENCE]
    return verdicts.compare(scored, arms, margin=margin)


def figure(verdict_table: pd.DataFrame, settings: Profile) -> plt.Figure:
    """The verdict table as a forest plot (`paired.forest`)."""
    return paired.forest(verdict_table, f"{settings.steps} steps", f"schemes vs {REFERENCE}")


def figure_curves(result: SweepResult, settings: Profile) -> plt.Figure:
    """The `CURVES` per scheme: mean and 95% t-interval over seeds."""
    shown = [m for m in CURVES if m in result.metrics]
    title = f"schemes on the study base, {settings.steps} steps"
    return plots.curves(result.metrics, shown, by="label", title=title)
