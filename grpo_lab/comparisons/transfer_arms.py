"""The transfer study's arms and rows (its notebook to come): do the lab's verdicts, found on the
embedded 1M-parameter character model, hold on a real pretrained language model? Each row is judged on
the pretrained bed (`comparisons.pretrained_bed`: SmolLM2-135M-Instruct on the `word` task) as the base
judges it, single variable against its comparator, every arm at its own tuned rate, and is set beside
the base's verdict in the reversal table's words (`analysis.reversals`: held, reversed, appears,
vanishes, settled, open).

- `ARMS` / `ROWS`: the arms (a preset and what it changes on the bed) and the rows compared: the base's
  scheme rows (against grpo, and against grpo_no_kl where the scheme also drops the KL), DAPO's full
  recipe and its two objective components alone (its other two are tricks, its dropped KL is
  grpo_no_kl), and the tricks the screen decided;
- `settings` / `scan_design`: the learning-rate scan of every arm whose change is to the objective
  (`TUNED`) at each of `RATES` on the tuning seeds; grpo's runs on seed 0 are the bed's pilot's, the same
  configurations;
- `stored_scan` / `scan_table` / `scan_runs` / `tuned_rates`: the scan so far, its mean scores, the runs
  it needs next by the lab's one scan rule (`analysis.tuning.next_runs`, as at the long horizon), and each
  tuned arm's best rate with whether it is bracketed and settled; a trick runs at grpo's tuned rate, as
  the base's tuned tricks do;
- `fresh_seeds` / `verdict_design`: every arm at its tuned rate, on seeds no rate was chosen on, the
  sequential rule's first look (`FRESH_SEEDS`);
- `table`: the rows whose arms are stored, one family under Holm (`FAMILY`);
- `transfer_table`: each row of `ROWS` with the base's verdict beside the bed's and the change between
  them, a row the base never judged or the bed has not yet marked as such.

Every run of the study is a run of the bed's configuration with one thing changed, so the runs of two
studies that ask for the same configuration are shared through the store, the pilot's included."""

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from grpo_lab.analysis import multiplicity, power, reversals, tuning, verdict_table
from grpo_lab.comparisons import paired, pretrained_bed
from grpo_lab.comparisons.point_sets import for_profile
from grpo_lab.config import Config
from grpo_lab.experiments import SweepResult
from grpo_lab.experiments.designs import Point
from grpo_lab.experiments.store import is_current, run_dir
from grpo_lab.presets import PRESETS, TRICKS
from grpo_lab.profiles import Budget, Profile

REFERENCE = "grpo"
"""the arm every row's margin is read from (its gain), and whose tuned rate the tricks run at"""
DAPO = PRESETS["dapo"].changes
REFILL_ROUNDS = {"dynamic_sampling_max_rounds": 32}
"""the cap on dynamic sampling's extra rounds for the arms that use it (4 by default): the bed's policy
saturates, so few groups keep mixed rewards. DAPO's recipe at 1e-5, seed 0, used all 4 extra rounds at
steps 1 and 24 and stopped at step 25 with 3 of its 4 groups filled from 20 prompts. verl's cap
(`filter_groups.max_num_gen_batches`) is unlimited by default. 32 draws up to 132 prompts a step; a round
drawn costs its sampling, and the row's cost column counts it"""
ARMS: dict[str, tuple[str, dict[str, Any]]] = {
    "grpo": ("grpo", {}),
    "grpo_no_kl": ("grpo_no_kl", {}),
    "dr_grpo": ("dr_grpo", {}),
    "dapo": ("dapo", REFILL_ROUNDS),
    "clip_higher": ("grpo", {"eps_high": DAPO["eps_high"]}),
    "token_mean": ("grpo", {"aggregation": DAPO["aggregation"]}),
    "gspo": ("gspo", {}),
    "cispo": ("cispo", {}),
    "dynamic_sampling": ("grpo", {**TRICKS["dynamic_sampling"], **REFILL_ROUNDS}),
    "overlong_shaping": ("grpo", TRICKS["overlong_shaping"]),
    "adaptive_entropy": ("grpo", TRICKS["adaptive_entropy"]),
    "dynamic_group_size": ("grpo", TRICKS["dynamic_group_size"]),
}
"""arm -> (preset, the fields it changes over that preset on the bed): the schemes by their presets,
DAPO's clip-higher and token-level loss alone over grpo at the recipe's own values, the tricks at
`presets.TRICKS`' levels; the arms that sample dynamically refill up to `REFILL_ROUNDS`"""
TUNED = ("grpo", "grpo_no_kl", "dr_grpo", "dapo", "clip_higher", "token_mean", "gspo", "cispo")
"""the arms whose change is to the objective, each scanned for its own rate; a trick runs at grpo's"""
ROWS: tuple[tuple[str, str, str, str], ...] = (
    ("grpo_no_kl", "scheme", "grpo_no_kl", "grpo"),
    ("dr_grpo", "scheme", "dr_grpo", "grpo"),
    ("dr_grpo", "scheme vs grpo_no_kl", "dr_grpo", "grpo_no_kl"),
    ("dapo", "scheme", "dapo", "grpo"),
    ("dapo", "scheme vs grpo_no_kl", "dapo", "grpo_no_kl"),
    ("clip_higher", "component", "clip_higher", "grpo"),
    ("token_mean", "component", "token_mean", "grpo"),
    ("gspo", "scheme", "gspo", "grpo"),
    ("gspo", "scheme vs grpo_no_kl", "gspo", "grpo_no_kl"),
    ("cispo", "scheme", "cispo", "grpo"),
    ("cispo", "scheme vs grpo_no_kl", "cispo", "grpo_no_kl"),
    ("dynamic_sampling", "trick", "dynamic_sampling", "grpo"),
    ("overlong_shaping", "trick", "overlong_shaping", "grpo"),
    ("adaptive_entropy", "trick", "adaptive_entropy", "grpo"),
    ("dynamic_group_size", "trick", "dynamic_group_size", "grpo"),
)
"""the compared rows (row, kind, treatment, control), keyed as the base's tables key theirs (row and kind:
`analysis.reversals.KEYS`): a scheme's rows as in the tuned scheme table (notebook 16), a trick's as in
its tuned trick table"""
RATES = pretrained_bed.PILOT_RATES
"""the scan's learning rates, 1e-6, 3e-6 and 1e-5: the pilot's, around its best at four mini-batches
(3e-6 scored above 1e-6 and 1e-5 on seed 0; `docs/studies.md`); an arm whose best is at an end is scanned
one step of 3 further (`tuned_rates`' 'next rate')"""
TUNING_SEEDS = (0, 1)
"""the seeds each arm's rate is chosen on, by the lab's one rule (`next_runs`): seed 0 first, seed 1 at
every rate of an arm whose bracket is not settled; after seed 1 the best mean is the rate"""
FRESH_SEEDS = (2, 3, 4)
"""the seeds every row is judged on, none of them a tuning seed: the sequential rule's first look"""
STUDY = Budget(
    seeds=TUNING_SEEDS,
    steps=pretrained_bed.PILOT.steps,
    eval_every=pretrained_bed.PILOT.eval_every,
    val_size=pretrained_bed.PILOT.val_size,
)
"""the pilot's runs (30 steps, validated every 10 on 96 prompts) on the tuning seeds"""
SMOKE_ARMS = 2
"""the smoke profile's arms: the first this many of `ARMS` (grpo and grpo_no_kl)"""
FAMILY = multiplicity.Family("every row of the transfer study's table on the pretrained bed", "holm")
"""the bed's verdict table is one family under Holm, as the base's tuned scheme table is"""
settings = STUDY.settings
"""The study's profile: `STUDY` under the full profile, the smoke profile's few otherwise."""


def arms(settings: Profile) -> dict[str, tuple[str, dict[str, Any]]]:
    """`ARMS` under the full profile; the first `SMOKE_ARMS` under any other."""
    return for_profile(ARMS, settings, SMOKE_ARMS)


def arm_config(settings: Profile, arm: str, learning_rate: float) -> Config:
    """The bed's configuration of `arm` (`ARMS`) at `learning_rate` (`pretrained_bed.base`)."""
    if arm not in ARMS:
        raise ValueError(f"unknown arm {arm!r}; valid: {', '.join(ARMS)}")
    name, changes = ARMS[arm]
    return pretrained_bed.base(settings, name, learning_rate=learning_rate, **changes)


def rates(settings: Profile) -> tuple[float, ...]:
    """`RATES` under the full profile; the middle one under any other."""
    return RATES if settings.name == "full" else RATES[len(RATES) // 2 : len(RATES) // 2 + 1]


def factor(learning_rate: float) -> float:
    """A rate as a multiple of the middle of `RATES` (`analysis.tuning` reads scans by factor)."""
    return learning_rate / RATES[len(RATES) // 2]


def rate(factor: float) -> float:
    """The learning rate at `factor` times the middle of `RATES`, to 6 significant digits."""
    return float(f"{factor * RATES[len(RATES) // 2]:.6g}")


def scan_design(settings: Profile, extra: Mapping[str, float] | None = None) -> list[Point]:
    """Every tuned arm among `arms(settings)` at each of `rates(settings)`, and at `extra[arm]` besides
    (a rate that extends its scan), labelled 'arm, lr R', with columns `arm`, `learning_rate`, `factor`."""
    points = []
    for arm in (a for a in TUNED if a in arms(settings)):
        for lr in sorted({*rates(settings), *([extra[arm]] if extra and arm in extra else [])}):
            columns = {"arm": arm, "learning_rate": lr, "factor": factor(lr)}
            points.append(Point(f"{arm}, lr {lr:g}", columns, arm_config(settings, arm, lr)))
    return points


SCAN_REACH = 2
"""how many steps of 3 a scan may extend beyond either end of `RATES` (`reach`)"""


def reach() -> list[float]:
    """The factors a scan may reach: those of `RATES`, and `SCAN_REACH` steps of 3 below the lowest and
    above the highest, where the rule extends a best rate found at an end (1.1e-7 to 9e-5)."""
    low, high = factor(min(RATES)), factor(max(RATES))
    beyond = [f for k in range(1, SCAN_REACH + 1) for f in (low / tuning.STEP**k, high * tuning.STEP**k)]
    return sorted({*(factor(lr) for lr in RATES), *beyond})


def stored_scan(settings: Profile, store: str | Path) -> SweepResult:
    """The scan's runs on the profile's seeds that `store` holds current (`held_scan`), loaded, nothing
    trained: the scan so far, which `scan_table` reads. An error where it holds none."""
    held = held_scan(settings, store)
    if not held:
        raise ValueError(f"no run of the transfer study's scan is stored in {store}")
    return paired.run_seeded(held, store, progress=False)


def held_scan(settings: Profile, store: str | Path) -> list[tuple[Point, Config]]:
    """The scan's (point, seeded config) runs on the profile's seeds that `store` holds current: every
    tuned arm at every rate it may reach (`reach`)."""
    extra = [{arm: rate(f) for arm in TUNED} for f in reach()]
    points = {p.label: p for more in extra for p in scan_design(settings, more)}.values()
    seeded = [(p, p.config.replace(seed=s)) for p in points for s in settings.seeds]
    return [(p, c) for p, c in seeded if is_current(run_dir(c, store))]


def scan_scores(result: SweepResult) -> pd.DataFrame:
    """One row per run of a scan (`stored_scan`): its scores (`paired.scores`) with the point's arm, factor
    and learning rate."""
    columns = result.runs[["label", "arm", "learning_rate", "factor"]].drop_duplicates("label")
    scored = paired.scores(result, {}).merge(columns, on="label", validate="many_to_one")
    return scored.rename(columns={"learning_rate": "learning rate"})


def scan_table(result: SweepResult) -> pd.DataFrame:
    """Per tuned arm and rate of a scan's runs (`analysis.tuning.scan_means`): the factor, learning rate,
    the seeds stored at the rate, the mean headline score, greedy accuracy and pass@4 over them, and the sd
    of their headline."""
    return tuning.scan_means(scan_scores(result), "arm")


def scan_spread(scan: pd.DataFrame) -> power.Spread:
    """The sd of one run's headline score on the bed (`analysis.tuning.spread`: pooled over the scan's
    rates with two runs or more whose runs differ): what a lead is read against
    (`analysis.tuning.settled`)."""
    return tuning.spread(scan)


def next_runs(scan: pd.DataFrame, start: Sequence[float] = RATES) -> list[tuple[str, float, int]]:
    """The (arm, factor, seed) runs the scan needs next: first, for an arm `scan` holds without one of the
    starting rates `start` on the first tuning seed (a piece trained in a sitting may stop between them),
    the rates it lacks; then, for the arms that hold all of them, the lab's one rule
    (`analysis.tuning.next_runs`: extend a best rate at an end on seed 0, add the next tuning seed to a
    best rate and a neighbour it does not lead beyond the noise of `scan_spread`), within `reach`."""
    first = TUNING_SEEDS[0]
    held = {
        arm: [f for f, seeds in zip(rows["factor"], rows["seeds"]) if first in seeds]
        for arm, rows in scan.groupby("arm", sort=False)
    }
    lacking = [
        (arm, factor(lr), first)
        for arm, factors in held.items()
        for lr in start
        if not any(math.isclose(factor(lr), f, rel_tol=1e-9) for f in factors)
    ]
    whole = scan[~scan["arm"].isin({arm for arm, _, _ in lacking})]
    ruled = tuning.next_runs(whole, "arm", scan_spread(scan).sd, TUNING_SEEDS, reach()) if len(whole) else []
    return lacking + ruled


def scan_runs(settings: Profile, scan: pd.DataFrame | None) -> list[tuple[str, float, int]]:
    """The runs the scan needs next: `next_runs` for the arms `scan` (`scan_table`; None: nothing stored)
    holds, then every tuned arm of `arms(settings)` it lacks at each of `rates(settings)` on the first
    tuning seed. An arm begun is finished first: its seed 1 gives the seed-to-seed sd that settles every
    other arm's bracket, and a study trained a piece per sitting then leaves fewer arms half-scanned."""
    held = set() if scan is None else set(scan["arm"])
    begin = [
        (arm, factor(lr), settings.seeds[0])
        for arm in TUNED
        if arm in arms(settings) and arm not in held
        for lr in rates(settings)
    ]
    return ([] if scan is None else next_runs(scan, rates(settings))) + begin


def scan_points(settings: Profile, wanted: Sequence[tuple[str, float, int]]) -> list[tuple[Point, Config]]:
    """The (point, seeded config) of each (arm, factor, seed) of `wanted` (`scan_runs`), as `scan_design`
    labels them."""
    found = []
    for arm, f, seed in wanted:
        lr = rate(f)
        columns = {"arm": arm, "learning_rate": lr, "factor": factor(lr)}
        point = Point(f"{arm}, lr {lr:g}", columns, arm_config(settings, arm, lr))
        found.append((point, point.config.replace(seed=seed)))
    return found


def tuned_rates(scan: pd.DataFrame, start: Sequence[float] = RATES) -> pd.DataFrame:
    """Per tuned arm of `scan_table`: its best learning rate, the seeds stored there, whether the best is
    bracketed (a lower mean on each side) and settled (`analysis.tuning.settled` against `scan_spread`),
    and the runs the scan needs next (`next_runs` from the starting rates `start`), empty once the rate is
    chosen."""
    found = tuning.summary(scan, "arm", scan_spread(scan).sd, next_runs(scan, start))
    named = found.assign(
        best=found["best"].map(rate),
        next=found["next"].map(lambda runs: ", ".join(f"{rate(f):g} seed {s}" for f, s in runs)),
    )
    return named.rename(columns={"best": "best rate"})


def fresh_seeds(settings: Profile) -> tuple[int, ...]:
    """The verdict's seeds: `FRESH_SEEDS` under the full profile, the first seed after the profile's own
    otherwise; never a seed a rate was chosen on."""
    if settings.name == "full":
        return FRESH_SEEDS
    return (max(settings.seeds) + 1,)


def verdict_design(settings: Profile, best: Mapping[str, float]) -> list[Point]:
    """Every arm of `arms(settings)` at its tuned rate (`best`: tuned arm -> rate, `tuned_rates`' best rate):
    a tuned arm at its own, a trick at `REFERENCE`'s; labelled by the arm. An error names the tuned arms
    `best` lacks."""
    chosen = arms(settings)
    missing = [a for a in TUNED if a in chosen and a not in best]
    if missing:
        raise ValueError(f"no tuned rate for {missing}: scan them first (scan_runs, tuned_rates)")
    return [verdict_point(settings, arm, best[arm] if arm in TUNED else best[REFERENCE]) for arm in chosen]


def verdict_point(settings: Profile, arm: str, learning_rate: float) -> Point:
    """`arm` at `learning_rate` as the verdict runs label it: by the arm, with its column `arm`."""
    return Point(arm, {"arm": arm}, arm_config(settings, arm, learning_rate))


def table(result: SweepResult) -> pd.DataFrame:
    """The rows of `ROWS` whose arms `result` holds, paired on seeds against `MARGIN_OF_GAIN` times
    `REFERENCE`'s gain (`analysis.verdict_table.compare`; each row's activity is its own mechanism's,
    measured in the treatment's runs), adjusted over those rows as one family (`FAMILY`)."""
    labels = set(result.runs["label"])
    rows = [r for r in ROWS if r[2] in labels and r[3] in labels]
    if REFERENCE not in labels or not rows:
        raise ValueError(f"no row of the study has its runs: the result holds {sorted(labels)}")
    measured: dict[str, list[str]] = {}
    for name, _, treatment, _ in rows:
        measured.setdefault(treatment, []).append(name)
    scored = paired.scores(result, measured)
    learned = verdict_table.gain(scored[scored["label"] == REFERENCE])
    compared = verdict_table.compare(scored, rows, reference_gain=learned)
    return multiplicity.adjust(verdict_table.pooled_mdes(compared), FAMILY)


RAW = "raw verdict"
"""`transfer_table`'s column (suffixed by the side) of the word read from the row's own 95% interval"""
NO_BASE_ROW = "no base row"
"""`transfer_table`'s change where the base never judged the row (DAPO's full recipe and its components)"""
NOT_RUN = "not run yet"
"""`transfer_table`'s change where the bed's runs of the row are not stored yet"""


def transfer_table(
    base: pd.DataFrame,
    bed: pd.DataFrame,
    names: tuple[str, str] = ("base", "pretrained"),
    word: str = "adjusted verdict",
) -> pd.DataFrame:
    """Every row of `ROWS`, in its order: the base's verdict columns (`analysis.reversals.CARRIED`, and
    `RAW`) beside the bed's, suffixed by `names`, and the change between the two
    (`analysis.reversals.change`), each side's verdict read from its column `word` (default: the word at
    the table's adjusted level, since advice rests on adjusted decisions; `RAW` keeps the word of the
    row's own 95% interval, which the effect's interval is); `NO_BASE_ROW` where `base` lacks the row,
    `NOT_RUN` where `bed` does. Each effect stays in its own bed's score units and margin: the two beds'
    scores are not on one scale."""
    keys = pd.DataFrame([(r, k) for r, k, _, _ in ROWS], columns=reversals.KEYS)
    joined = keys
    for frame, name in zip((base, bed), names):
        missing = [c for c in (*reversals.KEYS, *reversals.CARRIED, word) if c not in frame]
        if missing:
            raise ValueError(f"the {name!r} table lacks the columns {missing}: give verdict tables")
        carried = (*reversals.CARRIED, RAW)
        shown = frame.assign(**{RAW: frame["verdict"]}, verdict=frame[word])[[*reversals.KEYS, *carried]]
        renamed = shown.rename(columns={c: f"{c} ({name})" for c in carried})
        joined = joined.merge(renamed, on=reversals.KEYS, how="left", validate="one_to_one")
    before, after = joined[f"verdict ({names[0]})"], joined[f"verdict ({names[1]})"]
    joined["change"] = [
        NO_BASE_ROW if pd.isna(b) else NOT_RUN if pd.isna(a) else reversals.change(b, a)
        for b, a in zip(before, after)
    ]
    return joined
