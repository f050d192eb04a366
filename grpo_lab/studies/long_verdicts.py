"""The long-horizon verdicts (notebook 15; Evaluation guide §6.5 and §10: training must cover the phase
where the policy entropy clearly falls, and no method is judged by its early reward): every scheme of
the scheme study (`studies.schemes`) against grpo and against its matched comparator, on the study
base, at the horizon the pilot of notebook 05 fixed (`horizon_pilot.pilot`: the entropy down 40% and the
headline past its knee), paired on seeds under the scheme study's sequential rule, validated from
step 0 so that the curves show when a run turns. Each verdict is then set beside its 60-step one
(notebook 03's runs; `analysis.reversals`), and whether the early training reward predicts the end
is read on these runs.

The verdict table's rows are one family of comparisons (`FAMILY`, Holm's control of the family-wise error
rate, `analysis.multiplicity`): each row shows its raw word (the sequential rule's interval) beside the
word of that interval at its Holm level, and the markdown's caption names the family. Holm, as for the
verdict table of notebook 12 whose rows these are at another horizon: its words are read one claim at a
time (this scheme is worse than grpo at the long horizon), so a single false one is the error to bound.
The rows at 60 steps (`by_horizon`'s first table) are notebook 03's, whose family is notebook 12's.

- `settings` / `design` / `runs` / `run`: the profile of the stored pilot's horizon, the scheme
  study's design there, its runs under the sequential rule;
- `rate_design` / `run_scan` / `scan_table` / `next_runs`: the learning-rate scan at the horizon, which a
  tuned-rate table at the long horizon needs: the rate the 60-step scan tuned (notebook 16, x1/3 for 8 of
  9 schemes) is not the long horizon's (grpo scored 0.38 there at x1/3 against 0.48 at x1, seeds 0-1), so
  the horizon tunes its own, by one rule for every arm (`next_runs`), from `SCAN_START`;
  `scripts/long_rate_scan.py` trains it a piece at a time;
- `fresh_design` / `run_tuned` / `tuned_table`: every arm at its tuned rate on `FRESH_SEEDS`, the primary
  scheme table at the horizon;
- `table` (adjusted over its rows), `markdown` / `save_markdown`, `figure` (the forest plot),
  `figure_curves`, `by_horizon` (for `analysis.reversals.matrix`), `early_versus_final`."""

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd

from grpo_lab.analysis import horizon as trajectories
from grpo_lab.analysis import multiplicity, plots, power, tuning, verdict_table
from grpo_lab.analysis.scores import GREEDY, HEADLINE
from grpo_lab.comparisons import horizon_pilot, paired, scheme_arms, sequential_seeds
from grpo_lab.comparisons import tuned_table as tuned_rows
from grpo_lab.comparisons.bed import described
from grpo_lab.config import Config
from grpo_lab.experiments import SweepResult
from grpo_lab.experiments.designs import Point
from grpo_lab.experiments.store import is_current, run_dir
from grpo_lab.profiles import PROFILES, Budget, Profile
from grpo_lab.runlog import read_config

SEEDS = tuple(range(6))
"""paired seeds at most, under the scheme study's sequential rule (looks at 3 and 6 seeds)"""
EVAL_EVERY = 25
"""validation every this many steps from step 0, so that the curves show when a run turns, early as
late"""
CURVES = (HEADLINE.metric, GREEDY.metric, "val/pass@4", "entropy", "kl/exact", "completions/mean_length")
"""the curves drawn per scheme"""
SCAN_START = (1 / 3, 1.0)
"""where every arm's learning-rate scan at the horizon starts, as multiples of the shared rate, on the first
tuning seed: the rate the 60-step scan tuned for 8 of 9 schemes (x1/3, notebook 16) and the shared rate
(x1, the design's own runs); `next_runs` extends it"""
TUNING_SEEDS = (0, 1, 2)
"""the seeds the scan chooses each arm's rate on; the sequential rule's later seeds judge it"""
FRESH_SEEDS = tuple(s for s in SEEDS if s not in TUNING_SEEDS)
"""the seeds the tuned-rate table judges every arm on, none a rate was chosen on"""
SMOKE_ROUNDS = 1
"""under a profile other than the full one, the scan's rounds: a few steps' scores are noise, on which
the rule would extend a scan without end"""
TUNED_FAMILY = multiplicity.Family("the rows of the long-horizon tuned-rate table on fresh seeds", "holm")
"""the tuned-rate table's family and its error-rate control, as at 60 steps (notebook 16)"""
FAMILY = multiplicity.Family("every row of the long-horizon verdict table", "holm")
"""the table's family and its error-rate control (module doc)"""


def settings(profile: str, seeds: Sequence[int] | None = None, steps: int | None = None) -> Profile:
    """The study's profile: under the full profile, up to `SEEDS` of `steps` steps (default: the
    horizon the pilot's runs in the profile's store fix, `horizon_pilot.stored_horizon`; the pilot's length,
    an upper bound for `grpo-lab plan`, while they fix none), validated every `EVAL_EVERY`; the smoke
    profile's few otherwise."""
    if steps is None and profile == "full":
        pilot = horizon_pilot.pilot_settings(profile)
        steps = horizon_pilot.stored_horizon(pilot, PROFILES[profile].runs_dir()) or pilot.steps
    return Budget(SEEDS, steps or horizon_pilot.PILOT.steps, EVAL_EVERY).settings(profile, seeds, steps)


def design(settings: Profile) -> list[Point]:
    """Every scheme of the scheme study and its matched comparator (`scheme_arms.design`) at the horizon;
    an arm without a KL term logs the exact KL to the reference all the same (`kl_monitor`: a
    reference forward per step, nothing learned changes), so that every arm's KL and its volatility
    over the long horizon can be set side by side (Evaluation guide §4.2)."""
    return [monitored(p) for p in scheme_arms.design(settings)]


def rate_design(settings: Profile, factors: Sequence[float] = SCAN_START) -> list[Point]:
    """Every arm of `design` at each of `factors` of its own rate (to 6 significant digits, as the
    60-step scan writes them: a third of 3e-05 is 1e-05), labelled by arm, with columns `arm` and
    `factor`; at factor 1 the point is the design's own. A factor beyond `SCAN_START` extends the
    scan where an arm's best rate lies at its edge (`analysis.tuning.extension`)."""
    return [
        Point(
            f"{p.label}, lr {tuning.factor_name(factor)}",
            {"arm": p.label, "factor": factor},
            p.config.replace(learning_rate=at_rate(p.config, factor)),
        )
        for p in design(settings)
        for factor in factors
    ]


SCAN_REACH = range(-4, 3)
"""the powers of 3 a stored scan is looked for at (x1/81 to x9): `SCAN_START` and every extension the rule
may ask for (`next_runs` names one beyond it as an error)"""


def stored_scan(settings: Profile, store: str | Path, seeds: Sequence[int] = TUNING_SEEDS) -> SweepResult:
    """The scan's runs on `seeds` that `store` holds current (`rate_design` at every factor of `SCAN_REACH`),
    loaded, nothing trained: the scan so far, which `scan_table` reads."""
    return paired.run_seeded(held_scan(settings, store, seeds), store, progress=False)


def held_scan(settings: Profile, store: str | Path, seeds: Sequence[int]) -> list[tuple[Point, Config]]:
    """The scan's (point, seeded config) runs on `seeds` that `store` holds current, at every factor of
    `SCAN_REACH`."""
    factors = [tuning.STEP**k for k in SCAN_REACH]
    seeded = [(p, p.config.replace(seed=s)) for p in rate_design(settings, factors) for s in seeds]
    return [(p, c) for p, c in seeded if is_current(run_dir(c, store))]


def scan_scores(result: SweepResult) -> pd.DataFrame:
    """One row per run of a scan (`stored_scan`, or any result of `rate_design`'s points): its scores
    (`paired.scores`) with the point's arm, factor and learning rate."""
    columns = result.runs[["label", "arm", "factor"]].drop_duplicates("label")
    rates = {row.label: read_config(row.path)["learning_rate"] for row in result.runs.itertuples()}
    scored = paired.scores(result, {}).merge(columns, on="label", validate="many_to_one")
    return scored.assign(**{"learning rate": scored["label"].map(rates)})


def scan_table(result: SweepResult) -> pd.DataFrame:
    """One row per arm and factor of a scan's runs (`stored_scan`): arm, factor, learning rate, the
    tuning seeds stored at the rate (`seeds`, `n`), the mean headline, greedy accuracy and pass@4 over
    them, and the sd of their headline (`analysis.tuning.scan_means`)."""
    return scan_means(scan_scores(result))


def scan_means(scored: pd.DataFrame) -> pd.DataFrame:
    """`scan_table` of a scan's `scan_scores` (`analysis.tuning.scan_means`), arms in the scheme study's
    order."""
    return tuning.scan_means(scored, "arm").sort_values(["arm", "factor"], key=_arm_order, ignore_index=True)


def _arm_order(column: pd.Series) -> pd.Series:
    """Arms in the order of the scheme study, factors as they are."""
    return scheme_arms.order(column) if column.name == "arm" else column


def scan_spread(scan: pd.DataFrame) -> power.Spread:
    """The sd of one run's headline score at the horizon (`analysis.tuning.spread`: pooled over the scan's
    rates with two runs or more whose runs differ): what `analysis.tuning.settled` reads a lead against."""
    return tuning.spread(scan)


def scan_summary(scan: pd.DataFrame) -> pd.DataFrame:
    """Per arm of `scan_table`: its best factor so far, the seeds at it, whether it is bracketed and whether
    the bracket is settled on the seeds stored (`analysis.tuning.settled` against `scan_spread`), and the
    runs the scan needs next (`next_runs`)."""
    found = tuning.summary(scan, "arm", scan_spread(scan).sd, next_runs(scan))
    named = {"best": found["best"].map(tuning.factor_name)}
    named["next"] = found["next"].map(
        lambda runs: ", ".join(f"{tuning.factor_name(f)} seed {s}" for f, s in runs)
    )
    return found.assign(**named)


def next_runs(scan: pd.DataFrame, seeds: Sequence[int] = TUNING_SEEDS) -> list[tuple[str, float, int]]:
    """The (arm, factor, seed) runs the scan needs next (`analysis.tuning.next_runs`, one rule for every
    arm, against `scan_spread`, on the tuning `seeds`, within `SCAN_REACH`)."""
    reach = [tuning.STEP**k for k in SCAN_REACH]
    return tuning.next_runs(scan, "arm", scan_spread(scan).sd, seeds, reach)


def tuning_seeds(settings: Profile) -> tuple[int, ...]:
    """The scan's seeds: `TUNING_SEEDS` under the full profile, the profile's own otherwise."""
    return TUNING_SEEDS if settings.name == "full" else tuple(settings.seeds)


def fresh_seeds(settings: Profile) -> tuple[int, ...]:
    """The tuned-rate table's seeds: `FRESH_SEEDS` under the full profile; otherwise one seed after the
    profile's own, so that no run a rate was chosen on is judged again."""
    return FRESH_SEEDS if settings.name == "full" else (max(settings.seeds) + 1,)


def scan_points(settings: Profile, wanted: Sequence[tuple[str, float, int]]) -> list[tuple[Point, Config]]:
    """The (point of `rate_design`, seeded config) of each (arm, factor, seed) of `wanted` (`next_runs`)."""
    design = {
        (p.columns["arm"], p.columns["factor"]): p for p in rate_design(settings, [f for _, f, _ in wanted])
    }
    return [(design[a, f], design[a, f].config.replace(seed=s)) for a, f, s in wanted]


def train_scan(
    settings: Profile, wanted: Sequence[tuple[str, float, int]], root: str | Path, **options: Any
) -> SweepResult:
    """Train (or load) the scan's (arm, factor, seed) runs `wanted` (`next_runs`) into `root`; `options` as
    for `experiments.execute`."""
    return paired.run_seeded(scan_points(settings, wanted), root, **options)


def run_scan(settings: Profile, root: str | Path | None = None, **options: Any) -> SweepResult:
    """Train (or load) the scan by its rule into `root` (default: the profile's store): every arm at
    `SCAN_START` on the first tuning seed (`tuning_seeds`), then `next_runs` round after round until no arm
    needs another run (`SMOKE_ROUNDS` rounds under a profile other than the full one); the scan's runs
    (`stored_scan`). `options` as for `experiments.execute`."""
    root = settings.runs_dir() if root is None else root
    seeds = tuning_seeds(settings)
    wanted = [(p.columns["arm"], p.columns["factor"], seeds[0]) for p in rate_design(settings)]
    for done in itertools.count(1):
        train_scan(settings, wanted, root, **options)
        wanted = next_runs(scan_table(stored_scan(settings, root, seeds)), seeds)
        if not wanted or (settings.name != "full" and done >= SMOKE_ROUNDS):
            break
    return stored_scan(settings, root, seeds)


def scan_figure(scan: pd.DataFrame, settings: Profile) -> plt.Figure:
    """The scan (`scan_table`) per arm (`analysis.plots.rate_scan`): the headline score and greedy accuracy
    at each factor of the shared rate, the tuned factor starred: where the tuned rate lies, and what it
    costs in greedy accuracy."""
    shared = scan.loc[scan["factor"] == 1.0, "learning rate"].iloc[0]
    return plots.rate_scan(
        scan,
        tuned_factors(scan),
        f"learning-rate scan, {title(settings)}: mean over the tuning seeds stored at each rate "
        f"(their count\nbeside each point), x of the shared rate {shared:g}; star: the tuned rate, the "
        "best headline mean",
    )


def tuned_factors(scan: pd.DataFrame) -> dict[str, float]:
    """Arm -> its tuned factor: the best mean of its scan (`scan_table`)."""
    return tuning.best_rates(scan, "arm")


def fresh_runs(scan: pd.DataFrame, settings: Profile) -> list[tuple[str, float, int]]:
    """The tuned-rate table's (arm, tuned factor, fresh seed) runs of every arm of `scan` (`scan_table`)
    whose scan needs nothing more (`next_runs`): its rate is chosen, so its fresh seeds may run while other
    arms are still being scanned."""
    still = {arm for arm, _, _ in next_runs(scan, tuning_seeds(settings))}
    return [
        (arm, factor, seed)
        for arm, factor in tuned_factors(scan).items()
        if arm not in still
        for seed in fresh_seeds(settings)
    ]


def scan_runs(settings: Profile, store: str | Path | None) -> list[Config]:
    """The runs of the scan and of the tuned-rate table, as far as the rule can see from
    `store`: its stored runs, the runs it needs next (`next_runs`; more may follow them), and every arm at
    its best factor so far on `fresh_seeds`; with no store (or none stored), the scan's start on the first
    tuning seed and every arm's fresh seeds at x1/3 standing in for their cost. What
    `scripts/long_rate_scan.py --status` prices; `grpo-lab plan` counts the runs of notebook 15's cells."""
    seeds = tuning_seeds(settings)
    held = held_scan(settings, store, seeds) if store is not None else []
    if held and store is not None:
        scan = scan_table(paired.run_seeded(held, store, progress=False))
        wanted, factors = next_runs(scan, seeds), tuned_factors(scan)
    else:
        wanted = [(p.columns["arm"], p.columns["factor"], seeds[0]) for p in rate_design(settings)]
        factors = {p.label: SCAN_START[0] for p in design(settings)}
    fresh = fresh_design(settings, factors)
    return (
        [c for _, c in held]
        + [c for _, c in scan_points(settings, wanted)]
        + [p.config.replace(seed=s) for p in fresh for s in fresh_seeds(settings)]
    )


def fresh_design(settings: Profile, factors: Mapping[str, float]) -> list[Point]:
    """Every arm of `design` at its tuned factor (`factors`: arm -> factor of its shared rate, the best of
    a bracketed scan), labelled by the arm, for the `FRESH_SEEDS`: an arm tuned to x1 is the design's own
    point, so the sequential rule's stored runs on those seeds count. An error names the arms without a
    factor."""
    missing = [p.label for p in design(settings) if p.label not in factors]
    if missing:
        raise ValueError(f"no tuned factor for {missing}: bracket them first (scripts/long_rate_scan.py)")
    return [
        Point(p.columns["arm"], p.columns, p.config)
        for p in rate_design(settings, sorted(set(factors.values())))
        if p.columns["factor"] == factors[p.columns["arm"]]
    ]


def tuned_table(scan_result: SweepResult, fresh_result: SweepResult) -> pd.DataFrame:
    """The primary scheme table at the horizon (`comparisons.tuned_table.table`): every scheme row at the
    shared rate and at each side's tuned rate on the tuning seeds stored there (`scan_result`: the scan's
    runs), and at the tuned rates on the fresh seeds (`fresh_result`: the runs of
    `fresh_design`, `run_tuned`), the fresh rows one family under Holm (`TUNED_FAMILY`), against the margin
    of grpo's gain at the shared rate on the tuning seeds (`sequential_seeds.margin_of`)."""
    scan, fresh = scan_scores(scan_result), paired.scores(fresh_result, {})
    means = scan_means(scan)
    rates, closed = tuning.best_rates(means, "arm"), tuning.bracketed(means, "arm")
    shared = scan[scan["factor"] == 1.0].assign(label=lambda f: f["arm"])
    own = scan[scan["factor"] == scan["arm"].map(rates)].assign(label=lambda f: f["arm"])
    margin = sequential_seeds.margin_of(shared[shared["label"] == scheme_arms.REFERENCE])
    sides = {"shared": shared, "own best": own, "fresh seeds": fresh}
    return tuned_rows.table(sides, rates, closed, margin, TUNED_FAMILY)


def run_tuned(
    settings: Profile, scan: SweepResult, root: str | Path | None = None, **options: Any
) -> SweepResult:
    """Train (or load) every arm at its tuned factor (`tuned_factors` of the scan `run_scan` gave) on
    `fresh_seeds` into `root` (default: the profile's store), labelled by arm; `options` as for
    `experiments.execute`."""
    points = fresh_design(settings, tuned_factors(scan_table(scan)))
    where = settings.runs_dir() if root is None else root
    return paired.run_seeded(
        [(p, p.config.replace(seed=s)) for p in points for s in fresh_seeds(settings)], where, **options
    )


def tuned_markdown(rows: pd.DataFrame, settings: Profile) -> str:
    """`tuned_table` as GitHub markdown (`comparisons.tuned_table.markdown`) at the horizon's steps."""
    return tuned_rows.markdown(rows, TUNED_FAMILY, f"{settings.steps} steps")


def at_rate(config: Config, factor: float) -> float:
    """`config`'s learning rate times `factor`, to 6 significant digits."""
    return float(f"{config.learning_rate * factor:.6g}")


def monitored(point: Point) -> Point:
    """`point` with `kl_monitor` set where its run would not run the reference otherwise (an arm
    that already does logs the exact KL, and keeps its config, so its key)."""
    if point.config.reference_forward:
        return point
    return replace(point, config=point.config.replace(kl_monitor=True))


def runs(points: Sequence[Point], settings: Profile, root: str | Path | None = None) -> list[Config]:
    """The pilot's runs (`horizon`, so that the plan prices it before the horizon it fixes), then the
    design's under the sequential rule (`sequential_seeds.runs`, against the store `root`; None: an empty
    one), then the rate scan and the tuned table's fresh seeds as far as the rule sees from `root`
    (`scan_runs`)."""
    pilot = horizon_pilot.pilot_settings(settings.name)
    fixing = [p.config.replace(seed=s) for p in horizon_pilot.pilot_design(pilot) for s in pilot.seeds]
    return fixing + sequential_seeds.runs(points, settings, root) + scan_runs(settings, root)


def run(points: Sequence[Point], settings: Profile, **options: Any) -> SweepResult:
    """Train (or load) the design look by look under the sequential rule (`sequential_seeds.run`), once the
    stored pilot has fixed the horizon under the full profile (an error otherwise: the runs would
    have the pilot's length, not the horizon's). `options` as for `experiments.execute`."""
    if settings.name == "full":
        pilot = horizon_pilot.pilot_settings(settings.name)
        fixed = horizon_pilot.stored_horizon(pilot, settings.runs_dir())
        if fixed is None:
            raise ValueError(
                "the pilot has fixed no horizon (not stored, its entropy never fell far enough, or its "
                "knee lies in its last part: see horizon_pilot.pilot): lengthen horizon_pilot.PILOT and "
                "train it first"
            )
        if fixed != settings.steps:
            raise ValueError(f"the pilot fixes {fixed} steps, these settings have {settings.steps}")
    return sequential_seeds.run(points, settings, **options)


def table(result: SweepResult, settings: Profile) -> pd.DataFrame:
    """The verdict rows at the horizon (`sequential_seeds.rule_table`: the sequential rule against grpo's own
    gain at this horizon), adjusted over its rows (`FAMILY`, `analysis.multiplicity.adjust`): each row has its
    raw and its adjusted word."""
    return multiplicity.adjust(
        verdict_table.pooled_mdes(sequential_seeds.rule_table(result, settings)), FAMILY
    )


def markdown(verdict_rows: pd.DataFrame) -> str:
    """The table as GitHub markdown (`analysis.verdict_table.table_markdown`: the raw and the adjusted
    verdict) under its family's caption line (`FAMILY`) and the line that says its rate is the shared one
    (`scheme_arms.SHARED_RATE`)."""
    caption = FAMILY.caption(multiplicity.family_size(verdict_rows))
    return f"{caption}\n\n{scheme_arms.SHARED_RATE}\n\n{verdict_table.table_markdown(verdict_rows)}"


def save_markdown(verdict_rows: pd.DataFrame, name: str) -> Path:
    """Write `markdown` next to the figure `name` (`plots.save_markdown`)."""
    return plots.save_markdown(markdown(verdict_rows), name)


def figure(verdict_table: pd.DataFrame, settings: Profile) -> plt.Figure:
    """The verdict rows as a forest plot (`scheme_arms.figure`: its title names the steps, the horizon)."""
    return scheme_arms.figure(verdict_table, settings)


def title(settings: Profile) -> str:
    """What the study's figures say their runs are: the start, the bed and the steps."""
    return f"schemes at the long horizon, {described(settings)}, {settings.steps} steps"


def figure_curves(result: SweepResult, settings: Profile) -> plt.Figure:
    """The `CURVES` per scheme: mean and 95% t-interval over seeds (training curves smoothed over
    `horizon_pilot.SMOOTH` logged steps, validation never)."""
    shown = [m for m in CURVES if m in result.metrics]
    return plots.curves(result.metrics, shown, by="label", smooth=horizon_pilot.SMOOTH, title=title(settings))


def by_horizon(
    short: SweepResult, short_settings: Profile, long: SweepResult, settings: Profile
) -> dict[str, pd.DataFrame]:
    """The scheme verdicts at the scheme study's horizon (notebook 03's runs, under their settings) and
    at the long one (`sequential_seeds.rule_table` each: the sequential rule against that horizon's own grpo
    gain), keyed 'short, N steps' and 'long, M steps' (`analysis.reversals.matrix` reads the second
    against the first)."""
    return {
        f"short, {short_settings.steps} steps": sequential_seeds.rule_table(short, short_settings),
        f"long, {settings.steps} steps": sequential_seeds.rule_table(long, settings),
    }


def early_versus_final(
    result: SweepResult, settings: Profile, early_frac: float
) -> tuple[plt.Figure, pd.DataFrame]:
    """Each run's mean training reward over the first `early_frac` of its steps against its final
    validation accuracy, with Spearman's rank correlation across all runs and within a scheme
    (`analysis.horizon.rank_correlation`)."""
    early = trajectories.early_and_final(
        result.metrics, by="label", early="reward", final="val/accuracy", early_frac=early_frac
    )
    correlations = {
        "across all runs": trajectories.rank_correlation(early["early"], early["final"]),
        "within a scheme": trajectories.rank_correlation(
            early["early"], early["final"], groups=early["label"]
        ),
    }
    fig = plots.correlation_scatter(
        early,
        "early",
        "final",
        "label",
        correlations,
        xlabel=f"mean training reward over the first {early_frac:.0%} of steps",
        ylabel="final validation accuracy (fraction correct)",
        title=f"early reward against final validation accuracy (Spearman), {title(settings)}",
    )
    return fig, pd.DataFrame(correlations.values(), index=list(correlations))
