"""The transfer study (notebook 18): do the lab's verdicts, found on the embedded 1M-parameter character
model, hold on a real pretrained language model? Its bed is `comparisons.pretrained_bed`
(SmolLM2-135M-Instruct on the `word` task, its weights pinned by their sha256); its arms, rows, rate scan
and verdict design are `comparisons.transfer_arms`.

- `settings` / `design` / `run`: the bed's costed pilot, grpo at each of `pretrained_bed.PILOT_RATES` on
  the pilot's seeds: the bed's start (greedy accuracy before the first update), what grpo gains, the best
  rate bracketed, and what a step costs in each phase;
- `pilot_table` (`pretrained_bed.pilot_table`), `conditions` (the start and gain conditions the bed must
  meet, read from its own runs), `figure` (the pilot's validation curves and answer length per rate);
- `problems_present` (`analysis.problems` on the bed: the Dr. GRPO length bias between grpo_no_kl and
  dr_grpo, a sparse signal, a sampler that is not the trained policy) and `published_effects` (three
  effects the papers report, each with its paired interval, one family under Holm: `PUBLISHED_FAMILY`),
  read from the study's verdict runs;
- `scan` / `scan_table` / `tuned_rates` / `scan_spread` / `scan_figure` / `noise`: the learning-rate scan
  as far as the store holds it (trained a piece a sitting by `scripts/transfer_study.py`, loaded here,
  nothing trained), each tuned arm's best rate and the runs the lab's scan rule needs next, the sd a lead
  is read against, and the bed's noise: each candidate score's seed-to-seed sd over grpo's runs at its
  best rate against what grpo gains there;
- `chosen_rates` / `verdicts` / `bed_table`: each arm whose rate the scan has chosen, its verdict runs
  on the fresh seeds as far as the store holds them (nothing trained), and the bed's verdict table over
  the rows whose arms are stored (`transfer_arms.table`, one family under Holm);
- `base_rows` / `transfer_table` / `transfer_markdown`: the base's verdicts on the same rows, from
  notebook 16's primary tables (its tuned scheme table's fresh seeds and its tuned trick table), and the
  transfer table (`transfer_arms.transfer_table`: the base's adjusted word beside the bed's, and the
  change) as markdown;
- `transfer_runs`: the whole transfer study as far as the store lets its scan's rule see, which
  `scripts/transfer_study.py --status` prices before it is run.

The pilot's runs are the scan's runs of grpo on seeds 0 and 1 (the same configurations, shared through the
store)."""

import math
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd

from grpo_lab.analysis import multiplicity, plots, power, problems, reversals, scores, tuning, verdict_table
from grpo_lab.analysis.power import ALPHA, paired
from grpo_lab.analysis.scores import HEADLINE, final_entropy
from grpo_lab.comparisons import paired as paired_runs
from grpo_lab.comparisons import pretrained_bed, transfer_arms
from grpo_lab.config import Config
from grpo_lab.experiments import SweepResult, run_design
from grpo_lab.experiments.designs import Point
from grpo_lab.experiments.store import is_current, run_dir
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
    `START_RANGE`, and the best rate (by the headline's mean over the pilot's seeds) is bracketed and gains
    on both greedy accuracy and the headline (means over those seeds); one row per condition with the
    measured value and whether it holds."""
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


def scan(settings: Profile, store: str | Path | None = None) -> SweepResult:
    """The scan's runs on the profile's seeds that `store` (default: the profile's) holds, loaded, nothing
    trained (`transfer_arms.stored_scan`): grpo's pilot runs are among them, so a notebook that ran the
    pilot has a scan to read."""
    return transfer_arms.stored_scan(settings, settings.runs_dir() if store is None else store)


scan_table = transfer_arms.scan_table
scan_spread = transfer_arms.scan_spread
transfer_table = transfer_arms.transfer_table


def tuned_rates(table: pd.DataFrame, settings: Profile) -> pd.DataFrame:
    """Each tuned arm's best rate so far in the scan `table` (`scan_table`), whether it is bracketed and
    settled, and the runs the rule needs next from the profile's starting rates
    (`transfer_arms.tuned_rates`); empty `next` once the rate is chosen."""
    return transfer_arms.tuned_rates(table, transfer_arms.rates(settings))


def scan_figure(table: pd.DataFrame, settings: Profile) -> plt.Figure:
    """The scan so far (`scan_table`) per arm (`analysis.plots.rate_scan`): the headline score and greedy
    accuracy at each rate, as a factor of the middle rate, each arm's best headline mean starred."""
    middle = transfer_arms.rate(1.0)
    return plots.rate_scan(
        table,
        tuning.best_rates(table, "arm"),
        f"learning-rate scan as stored, {pretrained_bed.described(settings)}, {settings.steps} steps: mean "
        f"over the tuning seeds stored at each rate (their count\nbeside each point), x of {middle:g}; star: "
        "the best headline mean so far",
    )


NOISE_SEEDS = (3, 6)
"""`noise`'s seed counts: the sequential rule's first and second looks"""


def noise(result: SweepResult, table: pd.DataFrame) -> pd.DataFrame:
    """What decides a comparison on the bed (`analysis.scores.examine`, as notebook 12 reads the base): for
    each candidate score, its seed-to-seed sd over `transfer_arms.REFERENCE`'s runs at its best rate in
    `table` (`scan_table` of `result`, the scan's runs) among the rates with two seeds or more (any rate
    where none has two), what grpo gains there, their ratio, and its
    Spearman correlation with the final entropy across every run of the scan; with the rate, and the
    smallest paired effect `NOISE_SEEDS` seeds would detect (`analysis.power.mde_factor`) as a fraction
    of the gain, were two arms' runs on a seed no more alike than two seeds of one arm (sd(d) = sqrt(2) sd:
    what pairing gains is not measured until the verdict runs exist). The margin is 0.15 of the gain."""
    reference = transfer_arms.REFERENCE
    mine = table[table["arm"] == reference]
    spread = mine[mine["n"] >= 2]
    best = tuning.best_rates(spread if len(spread) else mine, "arm")[reference]
    runs = result.runs[(result.runs["arm"] == reference) & (result.runs["factor"] == best)]
    metrics = result.metrics[result.metrics["label"].isin(runs["label"])]
    found = scores.examine(result.metrics, metrics).assign(
        arm=reference, **{"learning rate": f"{transfer_arms.rate(best):g}"}
    )
    for n in NOISE_SEEDS:
        found[f"mde / gain, {n} seeds"] = power.mde_factor(n) * math.sqrt(2 / n) * found["sd / gain"]
    return found


def chosen_rates(table: pd.DataFrame, settings: Profile) -> dict[str, float]:
    """Arm -> its learning rate, for the arms whose rate the scan (`scan_table`) has chosen: a tuned arm
    whose scan needs no further run (`tuned_rates`), at its best rate, and every trick at
    `transfer_arms.REFERENCE`'s once that is chosen. An arm still being scanned is left out: a verdict run
    at a provisional rate would be judged at a rate no rule chose."""
    tuned = tuned_rates(table, settings)
    chosen = {
        arm: float(lr) for arm, lr, needs in zip(tuned["arm"], tuned["best rate"], tuned["next"]) if not needs
    }
    if transfer_arms.REFERENCE in chosen:
        reference = chosen[transfer_arms.REFERENCE]
        chosen |= {arm: reference for arm in transfer_arms.ARMS if arm not in transfer_arms.TUNED}
    return chosen


def verdicts(settings: Profile, table: pd.DataFrame, store: str | Path | None = None) -> SweepResult | None:
    """The verdict runs `store` (default: the profile's) holds, loaded, nothing trained: every arm of
    `arms(settings)` with a chosen rate (`chosen_rates` of the scan `table`) whose runs on every fresh seed
    (`transfer_arms.fresh_seeds`) are stored at that rate; None where no arm has them all. An arm with some
    fresh seeds stored waits for the rest: a row is judged on the seeds the design gives it."""
    where = settings.runs_dir() if store is None else store
    chosen = {a: lr for a, lr in chosen_rates(table, settings).items() if a in transfer_arms.arms(settings)}
    held = []
    for arm, lr in chosen.items():
        point = transfer_arms.verdict_point(settings, arm, lr)
        seeded = [(point, point.config.replace(seed=s)) for s in transfer_arms.fresh_seeds(settings)]
        if all(is_current(run_dir(c, where)) for _, c in seeded):
            held += seeded
    return paired_runs.run_seeded(held, where, progress=False) if held else None


VERDICT_COLUMNS = (*reversals.KEYS, *reversals.CARRIED, "adjusted verdict")
"""the columns of a verdict table that `transfer_arms.transfer_table` reads"""


def bed_table(result: SweepResult | None) -> pd.DataFrame:
    """The bed's verdict table (`transfer_arms.table`: the rows whose arms `result` holds, one family under
    Holm); with no such row (or no `result`), an empty table with `VERDICT_COLUMNS`, every row then
    'not run yet' in the transfer table."""
    labels = set() if result is None else set(result.runs["label"])
    if transfer_arms.REFERENCE not in labels or not any({t, c} <= labels for *_, t, c in transfer_arms.ROWS):
        return pd.DataFrame(columns=list(VERDICT_COLUMNS))
    assert result is not None
    return transfer_arms.table(result)


def base_rows(schemes: pd.DataFrame, tricks: pd.DataFrame, margin: float) -> pd.DataFrame:
    """The base's verdicts in `VERDICT_COLUMNS`, from notebook 16's primary tables at 60 steps: the fresh-seed
    side of its tuned scheme table (`schemes`: `scheme_sensitivity.best_rate_table` with the confirmation's
    scores, its rows judged against `margin`) and its tuned trick table (`tricks`:
    `scheme_sensitivity.trick_table`). Each keeps the words of its own family (the scheme rows' Holm
    family, the tricks' Holm family)."""
    side = " fresh seeds"
    carried = [c for c in (*reversals.CARRIED, "adjusted verdict") if c != "margin"]
    missing = [f"{c}{side}" for c in carried if f"{c}{side}" not in schemes]
    if missing:
        raise ValueError(
            f"the scheme table lacks {missing}: give best_rate_table with the fresh seeds' scores"
        )
    scheme = schemes[reversals.KEYS].assign(**{c: schemes[f"{c}{side}"] for c in carried}, margin=margin)
    return pd.concat([scheme, tricks], ignore_index=True)[list(VERDICT_COLUMNS)]


def transfer_markdown(table: pd.DataFrame, settings: Profile) -> str:
    """The transfer table (`transfer_arms.transfer_table` of `base_rows` and `bed_table`) as GitHub markdown
    under its caption: per row, each side's adjusted word (its raw word beside it where that differs) with
    its effect, 95% interval and seeds in its own bed's score units and margin, and the change between the
    adjusted words (`analysis.reversals.change`)."""
    head = ["row", "kind", "base (60 steps)", "pretrained bed", "change"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in table.to_dict("records"):
        cells = [_side(r, name) for name in ("base", "pretrained")]
        lines.append(f"| {r['row']} | {r['kind']} | {cells[0]} | {cells[1]} | {r['change']} |")
    caption = (
        f"Verdicts on the base (embedded character model, notebook 16's tuned tables at 60 steps) beside "
        f"the {pretrained_bed.described(settings)}, {settings.steps} steps; each word the adjusted one of "
        f"its own family under Holm (base: the tuned scheme rows, the tuned tricks; bed: "
        f"{transfer_arms.FAMILY.what}), the raw word of the row's 95% interval beside it where it differs; "
        "each effect in its own bed's headline units against its own margin. Change between the adjusted "
        "words: held, reversed, appears, vanishes, settled, open (the bed undecided)."
    )
    return "\n".join([caption, "", *lines]) + "\n"


def _side(row: dict, name: str) -> str:
    """One side's cell: the adjusted word, effect, interval, seeds and margin, or why there is none."""
    verdict = row[f"verdict ({name})"]
    if pd.isna(verdict):
        return transfer_arms.NO_BASE_ROW if name == "base" else transfer_arms.NOT_RUN
    low, high = row[f"ci_low ({name})"], row[f"ci_high ({name})"]
    interval = "no interval" if pd.isna(low) else f"[{low:+.3f}, {high:+.3f}]"
    word, raw = (verdict_table.WORDS.get(v, v) for v in (verdict, row[f"{transfer_arms.RAW} ({name})"]))
    before = "" if raw == word else f" (raw: {raw})"
    return (
        f"{word}{before}: {row[f'effect ({name})']:+.3f} {interval}, {int(row[f'seeds ({name})'])} seeds, "
        f"margin {row[f'margin ({name})']:.3f}"
    )


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


def problems_present(result: SweepResult | None) -> pd.DataFrame:
    """Whether the bed has the problems the schemes target (`analysis.problems.present`): a sparse signal
    and a sampler that is not the trained policy in grpo's runs, and the Dr. GRPO length bias between
    grpo_no_kl's runs and dr_grpo's, which differ in the normalizations alone, where `result` (`verdicts`)
    holds both. Without grpo's runs (or any `result`), the empty table: no check is made on runs that are
    not stored yet."""
    if result is None or transfer_arms.REFERENCE not in set(result.metrics["label"]):
        return pd.DataFrame(columns=[f.name for f in fields(problems.Presence)])
    return problems.present(result.metrics, transfer_arms.REFERENCE, ("grpo_no_kl", "dr_grpo"))


PUBLISHED_FAMILY = multiplicity.Family("the published effects read on the pretrained bed", "holm")
"""the published effects are one family under Holm: each is read as a claim that the bed reproduces"""
PUBLISHED_COLUMNS = (
    "paper", "arxiv", "claim", "measure", "treatment", "control", "effect", "ci_low", "ci_high", "n",
    "confidence", "df", "adjusted ci_low", "adjusted ci_high", "word", "adjusted word",
)  # fmt: skip
"""`published_effects`' columns"""
REPRODUCES, OPPOSITE, OPEN = "reproduces", "opposite", "undecided"
"""a published effect's word: its interval lies on the paper's side of 0, on the other side, or holds 0"""


def _per_seed(result: SweepResult, label: str, measure: Any) -> pd.Series:
    runs = result.metrics[result.metrics["label"] == label]
    return pd.Series({int(seed): measure(run) for seed, run in runs.groupby("seed")}, dtype=float)


def published_effects(result: SweepResult | None) -> pd.DataFrame:
    """Three effects the papers behind the arms report (`docs/sources.md`), each read on the bed as a
    paired difference over seeds with its 95% interval and its interval at its Holm level over the three
    (`PUBLISHED_FAMILY`), in the direction the paper reports (a positive effect reproduces it):
    - DAPO (2503.14476): clip-higher keeps the policy's entropy above the symmetric clip's (the final
      entropy, `analysis.scores.final_entropy`, of clip_higher minus grpo's);
    - Dr. GRPO (2503.20783): under the per-sequence mean the incorrect answers grow longer than under
      its own aggregation (late incorrect-answer length of grpo_no_kl minus dr_grpo's, one start);
    - GSPO (2507.18071): the sequence-level ratio trains better than the token ratio (the headline of gspo
      minus grpo's).
    A row whose arms `result` (`verdicts`) lacks is left out; with none (or no `result`), the empty table
    with `PUBLISHED_COLUMNS`."""
    measures = (
        ("DAPO", "2503.14476", "clip-higher keeps the entropy above the symmetric clip's",
         "final entropy (nats)", "clip_higher", "grpo", final_entropy),
        ("Dr. GRPO", "2503.20783", "incorrect answers grow longer under the per-sequence mean than its own",
         "late incorrect-answer length (tokens)", "grpo_no_kl", "dr_grpo",
         lambda run: float(problems.late(run, problems.INCORRECT_LENGTH).iloc[0])),
        ("GSPO", "2507.18071", "the sequence-level ratio trains better than the token ratio",
         "headline score", "gspo", "grpo", HEADLINE.of),
    )  # fmt: skip
    labels = set() if result is None else set(result.metrics["label"])
    rows = []
    for paper, arxiv, claim, measure, treatment, control, of in measures:
        if result is None or not {treatment, control} <= labels:
            continue
        effect = paired(_per_seed(result, treatment, of), _per_seed(result, control, of))
        rows.append(
            {"paper": paper, "arxiv": arxiv, "claim": claim, "measure": measure, "treatment": treatment,
             "control": control, "effect": effect.effect, "ci_low": effect.low, "ci_high": effect.high,
             "n": effect.n, "confidence": 1 - ALPHA, "df": effect.n - 1}
        )  # fmt: skip
    if not rows:
        return pd.DataFrame(columns=list(PUBLISHED_COLUMNS))
    table = pd.DataFrame(rows)
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
