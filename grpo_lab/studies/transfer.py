"""The transfer study (notebook 18): do the lab's verdicts, found on the embedded 1M-parameter character
model, hold on a real pretrained language model? Its bed is `comparisons.pretrained_bed`
(SmolLM2-135M-Instruct on the `word` task, its weights pinned by their sha256); its arms, rows, rate scan
and verdict design are `comparisons.transfer_arms`.

- `settings` / `design` / `run`: the bed's costed pilot, grpo at each of `pretrained_bed.PILOT_RATES` on
  the pilot's seed: the bed's start (greedy accuracy before the first update), what grpo gains, the best
  rate bracketed, and what a step costs in each phase;
- `pilot_table` (`pretrained_bed.pilot_table`), `conditions` (the start and gain conditions the bed must
  meet, read from its own runs), `figure` (the pilot's validation curves and answer length per rate);
- `problems_present` (`analysis.problems` on the bed: the Dr. GRPO length bias between grpo_no_kl and
  dr_grpo, a sparse signal, a sampler that is not the trained policy) and `published_effects` (three
  effects the papers report, each with its paired interval, one family under Holm: `PUBLISHED_FAMILY`),
  read from the study's verdict runs;
- `transfer_runs`: the whole transfer study as far as the store lets its scan's rule see, which
  `scripts/transfer_study.py --status` prices before it is run.

The pilot's runs are the scan's runs of grpo on seed 0 (the same configurations, shared through the store)."""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd

from grpo_lab.analysis import multiplicity, plots, problems, tuning
from grpo_lab.analysis.power import ALPHA, paired
from grpo_lab.analysis.scores import HEADLINE, final_entropy
from grpo_lab.comparisons import pretrained_bed, transfer_arms
from grpo_lab.config import Config
from grpo_lab.experiments import SweepResult, run_design
from grpo_lab.experiments.designs import Point
from grpo_lab.profiles import Profile

START_RANGE = (0.2, 0.6)
"""the greedy accuracy the bed must start in (issue 52): room to learn, and a format the model can meet"""
PILOT_CURVES = ("val/accuracy", "val/sampled_accuracy", "val/pass@4", "completions/mean_length")
"""the pilot's curves: greedy accuracy, the headline's sampled accuracy, pass@4 and the answers' length"""

settings = transfer_arms.settings
"""The study's profile: `transfer_arms.STUDY` (the pilot's 30 steps, validated every 10 on 96 prompts, on
the tuning seeds) under the full profile, the smoke profile's few otherwise."""


def pilot_seeds(settings: Profile) -> tuple[int, ...]:
    """The pilot's seeds: `pretrained_bed.PILOT`'s under the full profile, the profile's first otherwise."""
    return pretrained_bed.PILOT.seeds if settings.name == "full" else tuple(settings.seeds[:1])


def design(settings: Profile) -> list[Point]:
    """The pilot: grpo on the bed at each of `pretrained_bed.PILOT_RATES` (`pretrained_bed.pilot_design`)."""
    return pretrained_bed.pilot_design(settings)


def run(
    points: Sequence[Point], settings: Profile, root: str | Path | None = None, **options: Any
) -> SweepResult:
    """Train (or load) `points` over `pilot_seeds` into `root` (default: the profile's store); `options` as
    for `experiments.run_design`."""
    return run_design(points, pilot_seeds(settings), settings.runs_dir() if root is None else root, **options)


def pilot_table(result: SweepResult) -> pd.DataFrame:
    """`pretrained_bed.pilot_table` of the pilot's runs, with each run's learning rate."""
    table = pretrained_bed.pilot_table(result)
    rates = result.runs.drop_duplicates("label").set_index("label")["learning_rate"]
    return table.assign(**{"learning rate": table["run"].map(rates)})


def conditions(table: pd.DataFrame) -> pd.DataFrame:
    """The bed's conditions read from its pilot (`pilot_table`): every run starts at a greedy accuracy within
    `START_RANGE`, and the best rate (by headline) is bracketed and gains on both greedy accuracy and the
    headline; one row per condition with the measured value and whether it holds."""
    by_rate = table.groupby("learning rate")[["headline", "gain", "greedy start", "greedy end"]].mean()
    best = float(by_rate["headline"].idxmax())
    low, high = START_RANGE
    starts = table["greedy start"]
    rows = [
        (f"start: greedy accuracy in [{low:g}, {high:g}]", f"{starts.min():.3f} to {starts.max():.3f}",
         bool(starts.between(low, high).all())),
        ("best rate bracketed (a lower headline on each side)", f"{best:g}",
         best not in (by_rate.index.min(), by_rate.index.max())),
        ("gain at the best rate: headline", f"{by_rate.loc[best, 'gain']:+.3f}",
         bool(by_rate.loc[best, "gain"] > 0)),
        ("gain at the best rate: greedy accuracy",
         f"{by_rate.loc[best, 'greedy start']:.3f} -> {by_rate.loc[best, 'greedy end']:.3f}",
         bool(by_rate.loc[best, "greedy end"] > by_rate.loc[best, "greedy start"])),
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=["condition", "measured", "holds"])


def figure(result: SweepResult, settings: Profile) -> plt.Figure:
    """The pilot's `PILOT_CURVES` per learning rate (validation points as logged; the length smoothed over
    3 steps), titled with the bed's model, task and start."""
    shown = [m for m in PILOT_CURVES if m in result.metrics]
    title = f"the pilot of the {pretrained_bed.described(settings)}"
    return plots.curves(result.metrics, shown, by="label", smooth=3, ncols=2, title=title)


def runs(points: Sequence[Point], settings: Profile, store: str | Path | None = None) -> list[Config]:
    """What `grpo-lab plan` counts for the notebook: `points` over `pilot_seeds`."""
    return [p.config.replace(seed=s) for p in points for s in pilot_seeds(settings)]


def transfer_runs(settings: Profile, store: str | Path | None) -> list[Config]:
    """The transfer study's runs as far as its scan's rule sees from `store`: the scan's stored runs and
    those it needs next (`transfer_arms.scan_runs`: every tuned arm at the scan's rates on the first tuning
    seed, then extensions and further seeds by the rule), then every arm at its best rate so far (the
    middle rate where none is stored) on the fresh seeds; more may follow where a scan extends or a bracket
    takes another seed."""
    held = [] if store is None else transfer_arms.held_scan(settings, store)
    best = {arm: transfer_arms.rate(1.0) for arm in transfer_arms.TUNED}
    scan = None
    if held and store is not None:
        scan = transfer_arms.scan_table(transfer_arms.stored_scan(settings, store))
        best |= {arm: transfer_arms.rate(f) for arm, f in tuning.best_rates(scan, "arm").items()}
    wanted = transfer_arms.scan_points(settings, transfer_arms.scan_runs(settings, scan))
    verdicts = transfer_arms.verdict_design(settings, best)
    return (
        [c for _, c in held]
        + [c for _, c in wanted]
        + [p.config.replace(seed=s) for p in verdicts for s in transfer_arms.fresh_seeds(settings)]
    )


def problems_present(result: SweepResult) -> pd.DataFrame:
    """Whether the bed has the problems the schemes target (`analysis.problems.present`): a sparse signal
    and a sampler that is not the trained policy in grpo's runs, and the Dr. GRPO length bias between
    grpo_no_kl's runs and dr_grpo's, which differ in the normalizations alone."""
    return problems.present(result.metrics, transfer_arms.REFERENCE, ("grpo_no_kl", "dr_grpo"))


PUBLISHED_FAMILY = multiplicity.Family("the published effects read on the pretrained bed", "holm")
"""the published effects are one family under Holm: each is read as a claim that the bed reproduces"""
REPRODUCES, OPPOSITE, OPEN = "reproduces", "opposite", "undecided"
"""a published effect's word: its interval lies on the paper's side of 0, on the other side, or holds 0"""


def _per_seed(result: SweepResult, label: str, measure: Any) -> pd.Series:
    runs = result.metrics[result.metrics["label"] == label]
    return pd.Series({int(seed): measure(run) for seed, run in runs.groupby("seed")}, dtype=float)


def published_effects(result: SweepResult) -> pd.DataFrame:
    """Three effects the papers behind the arms report (`docs/sources.md`), each read on the bed as a
    paired difference over seeds with its 95% interval and its interval at its Holm level over the three
    (`PUBLISHED_FAMILY`), in the direction the paper reports (a positive effect reproduces it):
    - DAPO (2503.14476): clip-higher keeps the policy's entropy above the symmetric clip's (the final
      entropy, `analysis.scores.final_entropy`, of clip_higher minus grpo's);
    - Dr. GRPO (2503.20783): under the per-sequence mean the incorrect answers grow longer than under
      its own aggregation (late incorrect-answer length of grpo_no_kl minus dr_grpo's, one start);
    - GSPO (2507.18071): the sequence-level ratio trains better than the token ratio (the headline of gspo
      minus grpo's).
    A row whose arms `result` lacks is left out."""
    measures = (
        ("DAPO", "2503.14476", "clip-higher keeps the entropy above the symmetric clip's",
         "final entropy (nats)", "clip_higher", "grpo", final_entropy),
        ("Dr. GRPO", "2503.20783", "incorrect answers grow longer under the per-sequence mean than its own",
         "late incorrect-answer length (tokens)", "grpo_no_kl", "dr_grpo",
         lambda run: float(problems.late(run, problems.INCORRECT_LENGTH).iloc[0])),
        ("GSPO", "2507.18071", "the sequence-level ratio trains better than the token ratio",
         "headline score", "gspo", "grpo", HEADLINE.of),
    )  # fmt: skip
    labels = set(result.metrics["label"])
    rows = []
    for paper, arxiv, claim, measure, treatment, control, of in measures:
        if not {treatment, control} <= labels:
            continue
        effect = paired(_per_seed(result, treatment, of), _per_seed(result, control, of))
        rows.append(
            {"paper": paper, "arxiv": arxiv, "claim": claim, "measure": measure, "treatment": treatment,
             "control": control, "effect": effect.effect, "ci_low": effect.low, "ci_high": effect.high,
             "n": effect.n, "confidence": 1 - ALPHA, "df": effect.n - 1}
        )  # fmt: skip
    table = pd.DataFrame(rows)
    if table.empty:
        raise ValueError(f"no published effect has both its arms in the result, which holds {sorted(labels)}")
    wide = multiplicity.intervals(
        table["effect"], table["ci_low"], table["ci_high"], table["confidence"], table["df"], PUBLISHED_FAMILY
    )
    table = pd.concat([table, wide[["adjusted ci_low", "adjusted ci_high"]]], axis=1)
    table["word"] = [_direction(lo, hi) for lo, hi in zip(table["ci_low"], table["ci_high"])]
    table["adjusted word"] = [
        _direction(lo, hi) for lo, hi in zip(table["adjusted ci_low"], table["adjusted ci_high"])
    ]
    return table


def _direction(low: float, high: float) -> str:
    """`REPRODUCES` when the interval lies above 0, `OPPOSITE` below it, `OPEN` otherwise."""
    return REPRODUCES if low > 0 else OPPOSITE if high < 0 else OPEN
