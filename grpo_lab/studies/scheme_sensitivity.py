"""Sensitivity per scheme (notebook 16; Evaluation guide §4.6, `docs/sources.md`: "cover the learning
rate, the clip threshold, the KL coefficient and the group size; is the outcome smooth around the
default, or is there a steep failure boundary?"), asked of every scheme of the scheme study
(`studies.schemes`), not of grpo alone (notebook 06 scans grpo's knobs on short runs).

Each knob is scaled around the scheme's own setting, the rest of its config fixed (one knob at a time,
the scheme study's 60-step runs on the study base, scored by the headline score over at least 3
paired seeds): the learning rate for every scheme; the clip bounds of its surrogate (each ratio
clip, GSPO's sequence clip, CISPO's IS-weight cap alike: a bound of `OPEN_SIDE` or more is the open
side of a one-sided clip and stays); the KL coefficient where the scheme has a KL term; the group
size at the same completions per step (so every setting costs the same, and the half group is
notebook 14's sparse-reward bed). At factor 1 every knob is the scheme study's own run, shared
through the store.

A failure edge (`edge_table`) is a setting that is worse than the knob's best, paired on seeds, by
more than the scheme study's margin (`MARGIN_OF_GAIN` x grpo's gain: the verdict 'worse', interval
and all), or that crashed: where the score falls beyond the seeds' noise, never where it rises.
`best_rate_table` sets each scheme's verdict at its own best learning rate beside its verdict at the
shared one. The best rate is chosen on the seeds it is judged on, so that verdict leans towards the
scheme; the confirmation (`confirm_design`) runs every scheme at its own best rate again on fresh
seeds (`fresh_seeds`), where the choice cannot favour it, and the table gives the verdict there too.

The learning rate is scanned from x1/9 to x3 so that every best rate is bracketed (`bracketed`), and
the verdict at the own best rates on the fresh seeds is the primary scheme table (`best_rate_table`).
The factorial screen's tricks are confirmed at grpo's tuned rate the same way: the screen runs every trick
at the shared rate, too high for grpo itself, where a trick that stabilizes training can look good for
stabilizing a rate that is simply too high; each trick the screen calls better or worse after Holm over
its factors (`screen_tricks`, at most `TRICKS_CONFIRMED`, the largest effects first) runs as grpo with
that trick on at grpo's tuned rate, paired with grpo there on the first `TRICK_SEEDS` fresh seeds.

- `settings` / `design` / `run`; `confirm_design` / `run_confirmation` on `fresh_seeds`; `runs`: what
  `grpo-lab plan` counts, the confirmation and the tricks included once the best rates can be read from
  the store;
- `scores`, `outcome_table`, `edge_table`, `figure`, `best_rates`, `bracketed`, `best_rate_table`;
- `screen_tricks`, `trick_design` / `run_tricks` / `trick_runs`, `trick_table`, `trick_markdown`."""

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd

from grpo_lab.analysis import multiplicity, power, stats, tuning, verdict_table
from grpo_lab.analysis.power import SIGN
from grpo_lab.analysis.stats import seeds_shown
from grpo_lab.comparisons import paired, scheme_arms, screen, sequential_seeds, tuned_table
from grpo_lab.comparisons.bed import base, described
from grpo_lab.config import Config
from grpo_lab.experiments import SweepResult, run_design
from grpo_lab.experiments.designs import Point
from grpo_lab.experiments.store import is_current, run_dir
from grpo_lab.presets import TRICKS
from grpo_lab.profiles import Profile

FULL = scheme_arms.FIRST_LOOK
"""under the full profile: the scheme study's runs over its first look, so that every factor-1 run is
one notebook 03 already holds"""
OPEN_SIDE = 0.5
"""a clip bound at least this large is the open side of a one-sided clip (CISPO's eps_low 0.999):
the clip knob leaves it open"""


def _scaled(value: float, factor: float) -> float:
    """value x factor to 6 significant digits, so that a third of 3e-05 reads 1e-05 in the config"""
    return float(f"{value * factor:.6g}")


def _learning_rate(config: Config, factor: float) -> dict[str, Any]:
    return {"learning_rate": _scaled(config.learning_rate, factor)}


def _clip(config: Config, factor: float) -> dict[str, Any]:
    bounds = {"eps_low": config.eps_low, "eps_high": config.eps_high}
    return {name: _scaled(eps, factor) for name, eps in bounds.items() if eps < OPEN_SIDE}


def _kl(config: Config, factor: float) -> dict[str, Any]:
    return {"kl_coef": _scaled(config.kl_coef, factor)}


def _has_kl(config: Config) -> bool:
    return config.kl_coef > 0 and config.kl_placement != "off"


def _group_size(config: Config, factor: float) -> dict[str, Any]:
    completions = config.prompts_per_step * config.group_size
    group = round(config.group_size * factor)
    if completions % group:
        raise ValueError(f"{completions} completions a step do not split into groups of {group}")
    return {"group_size": group, "prompts_per_step": completions // group}


def _always(config: Config) -> bool:
    return True


@dataclass(frozen=True)
class Knob:
    """A knob scaled around each scheme's own setting."""

    name: str
    label: str
    """the axis label"""
    factors: tuple[float, ...]
    """multiples of the scheme's own setting, 1 among them"""
    changes: Callable[[Config, float], dict[str, Any]]
    """the config fields a factor sets, from the scheme's config"""
    applies: Callable[[Config], bool] = _always
    """whether the scheme has the knob"""


KNOBS = (
    Knob("learning_rate", "learning rate", (1 / 9, 1 / 3, 1.0, 3.0), _learning_rate),
    Knob("clip", "clip bounds ε", (0.5, 1.0, 2.0), _clip),
    Knob("kl_coef", "KL coefficient β", (0.25, 1.0, 4.0), _kl, _has_kl),
    Knob("group_size", "group size (same completions a step)", (0.5, 1.0, 2.0), _group_size),
)
"""the knobs of §4.6, each scaled by its factors around the scheme's own value"""
SMOKE_FACTORS = {"learning_rate": (1.0, 3.0)}
"""under the smoke profile: two learning rates, the other knobs at the scheme's own setting"""
FRESH_SEEDS = 6
"""the confirmation's seeds under the full profile (1 under the smoke profile), after the profile's own:
the primary scheme table compares every arm at its own tuned rate on them"""


settings = FULL.settings
"""The study's profile: `FULL` under the full profile, the smoke profile's few otherwise; `seeds`
and `steps` as the notebook sets them."""


def knobs(settings: Profile) -> tuple[Knob, ...]:
    """`KNOBS` under the full profile; under the smoke profile each at `SMOKE_FACTORS` (1 alone where
    it names none)."""
    if settings.name == "full":
        return KNOBS
    return tuple(
        Knob(k.name, k.label, SMOKE_FACTORS.get(k.name, (1.0,)), k.changes, k.applies) for k in KNOBS
    )


def design(settings: Profile) -> list[Point]:
    """For each scheme of the scheme study (`scheme_arms.compared`, with its matched comparator) and each
    knob it has, one point per factor: label 'scheme knob xF', columns `scheme`, `knob` and `factor`.
    The factor-1 points of a scheme are one config (trained once, `scheme_arms.design`'s arm)."""
    points = []
    for arm in scheme_arms.design(settings):
        for knob in knobs(settings):
            if not knob.applies(arm.config):
                continue
            for factor in knob.factors:
                changed = knob.changes(arm.config, factor)
                config = arm.config if factor == 1 else base(settings, arm.label, **changed)
                columns = {"scheme": arm.label, "knob": knob.name, "factor": factor}
                points.append(Point(f"{arm.label} {knob.name} x{factor:g}", columns, config))
    return points


def run(
    points: Sequence[Point], settings: Profile, root: str | Path | None = None, **options: Any
) -> SweepResult:
    """Train (or load) the design over the profile's seeds into `root` (default: the profile's
    store); `options` as for `experiments.run_design`."""
    return run_design(points, settings.seeds, settings.runs_dir() if root is None else root, **options)


def fresh_seeds(settings: Profile) -> tuple[int, ...]:
    """The confirmation's seeds: `FRESH_SEEDS` (1 under the smoke profile) after the profile's own, so
    that no run the best rate was chosen on is reused."""
    count = FRESH_SEEDS if settings.name == "full" else 1
    first = max(settings.seeds) + 1
    return tuple(range(first, first + count))


def confirm_design(settings: Profile, rates: Mapping[str, float]) -> list[Point]:
    """Each scheme of `rates` (scheme -> learning-rate factor, `best_rates`) at that factor: the
    design's own point (the same config, to run over `fresh_seeds`)."""
    found = {(p.columns["scheme"], p.columns["factor"]): p for p in _rate_points(settings)}
    missing = [f"{scheme} x{factor:g}" for scheme, factor in rates.items() if (scheme, factor) not in found]
    if missing:
        factors = sorted({f for _, f in found})
        raise ValueError(
            f"no learning-rate point for {', '.join(missing)}; the design scans factors {factors} of the "
            f"schemes {sorted({s for s, _ in found})}"
        )
    return [found[(scheme, factor)] for scheme, factor in rates.items()]


def run_confirmation(
    settings: Profile, rates: Mapping[str, float], root: str | Path | None = None, **options: Any
) -> SweepResult:
    """Train (or load) `confirm_design` over `fresh_seeds` into `root` (default: the profile's store);
    `options` as for `experiments.run_design`."""
    where = settings.runs_dir() if root is None else root
    return run_design(confirm_design(settings, rates), fresh_seeds(settings), where, **options)


def stored_rates(settings: Profile, store: str | Path) -> dict[str, float] | None:
    """`best_rates` of the learning-rate runs in `store`; None while any of them is not stored."""
    points = _rate_points(settings)
    wanted = [p.config.replace(seed=seed) for p in points for seed in settings.seeds]
    if not all(is_current(run_dir(config, store)) for config in wanted):
        return None
    return best_rates(outcome_table(scores(run(points, settings, store, progress=False))))


def runs(points: Sequence[Point], settings: Profile, store: str | Path | None = None) -> list[Config]:
    """What `grpo-lab plan` counts: `points` over the profile's seeds, then the confirmation over
    `fresh_seeds`: at the best rates read from `store` (`stored_rates`) once they can be, and until then
    (or with no store) every scheme at the scan's lowest rate standing in for its cost (not at its own
    rate, whose runs on those seeds the scheme study already counts)."""
    stored = None if store is None else stored_rates(settings, store)
    rates = stored
    if rates is None:
        lowest = min(p.columns["factor"] for p in _rate_points(settings))
        rates = {p.columns["scheme"]: lowest for p in _rate_points(settings)}
    confirming = confirm_design(settings, rates)
    tricks = None
    if stored is not None and store is not None:
        effects = screen.stored_effects(settings.name, store)
        tricks = tuned_trick_points(settings, stored[scheme_arms.REFERENCE], effects)
    return (
        [p.config.replace(seed=seed) for p in points for seed in settings.seeds]
        + [p.config.replace(seed=seed) for p in confirming for seed in fresh_seeds(settings)]
        + trick_runs(tricks, settings)
    )


def _rate_points(settings: Profile) -> list[Point]:
    return [p for p in design(settings) if p.columns["knob"] == "learning_rate"]


def scores(result: SweepResult) -> pd.DataFrame:
    """One row per point and seed: the run's scores (`analysis.verdict_table.run_scores`) with the point's
    scheme, knob and factor."""
    scored = paired.scores(result, {})
    columns = result.runs[["label", "scheme", "knob", "factor"]].drop_duplicates("label")
    return scored.merge(columns, on="label", validate="many_to_one")


def margin(scored: pd.DataFrame) -> float:
    """The scheme study's margin: `MARGIN_OF_GAIN` x grpo's gain (`verdict_table.gain`) at its own
    settings, `sequential_seeds.MIN_MARGIN` where grpo learned nothing."""
    own = scored[(scored["scheme"] == scheme_arms.REFERENCE) & (scored["factor"] == 1.0)]
    return sequential_seeds.margin_of(own.drop_duplicates("seed"))


def outcome_table(scored: pd.DataFrame) -> pd.DataFrame:
    """Per scheme, knob and factor: runs, mean headline score with its 95% t-interval over seeds."""
    rows = []
    for (scheme, knob, factor), group in scored.groupby(["scheme", "knob", "factor"], sort=False):
        mean, lo, hi = stats.mean_interval(group["score"].to_numpy(dtype=float))
        rows.append(
            {"scheme": scheme, "knob": knob, "factor": factor, "n": int(group["score"].notna().sum()),
             "mean": mean, "lo": lo, "hi": hi}
        )  # fmt: skip
    return pd.DataFrame(rows).sort_values(["scheme", "knob", "factor"], key=_scheme_order, ignore_index=True)


def _scheme_order(column: pd.Series) -> pd.Series:
    return scheme_arms.order(column) if column.name == "scheme" else column


def edge_table(scored: pd.DataFrame, margin: float) -> pd.DataFrame:
    """Every failure edge of every scheme's knob, one row each: a factor whose score, paired on seeds
    with the knob's best factor (the highest mean), is `power.WORSE` against `margin` (its 95%
    interval below 0 and the drop beyond the margin), or that has no finite score (a crash). A drop
    within the seeds' noise is no edge, and a rise never is one. Columns: scheme, knob, factor, best
    factor, mean, best_mean, drop (best minus factor) with its 95% interval (lo, hi) and the seeds."""
    columns = ["scheme", "knob", "factor", "best factor", "mean", "best_mean", "drop", "lo", "hi", "n"]
    rows = []
    for (scheme, knob), group in scored.groupby(["scheme", "knob"], sort=False):
        per_seed = group.pivot_table(
            index="seed", columns="factor", values="score", aggfunc="first", dropna=False
        )
        means = per_seed.mean()  # NaN for a factor none of whose runs has a score
        best = float(means.idxmax()) if means.notna().any() else None
        for factor in sorted(per_seed.columns):
            if best is None or math.isnan(means[factor]):
                rows.append([scheme, knob, factor, best, math.nan, math.nan, math.nan, math.nan, math.nan, 0])
                continue
            if factor == best:
                continue
            change = power.paired(per_seed[factor], per_seed[best])
            if change.verdict(margin) == power.WORSE:
                rows.append([scheme, knob, factor, best, means[factor], means[best], -change.effect,
                             -change.high, -change.low, change.n])  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


def figure(scored: pd.DataFrame, margin: float, settings: Profile) -> plt.Figure:
    """A column per scheme, a row per knob (one y scale): the mean headline score with its 95%
    t-interval against the factor of the scheme's own setting (log scale), failure edges as red
    crosses; a knob the scheme lacks leaves its panel empty."""
    outcomes, found = outcome_table(scored), edge_table(scored, margin)
    names = [s for s in scheme_arms.SCHEMES if s in set(outcomes["scheme"])]
    rows = [k for k in KNOBS if k.name in set(outcomes["knob"])]
    fig, axes = plt.subplots(
        len(rows), len(names), figsize=(2.1 * len(names) + 1, 2.2 * len(rows) + 1), squeeze=False, sharey=True
    )
    for c, scheme in enumerate(names):
        axes[0, c].set_title(scheme, fontsize=10)
        for r, knob in enumerate(rows):
            ax = axes[r, c]
            t = outcomes[(outcomes["scheme"] == scheme) & (outcomes["knob"] == knob.name)]
            if c == 0:
                ax.set_ylabel(f"{knob.label}\nheadline score", fontsize=8)
            if t.empty:
                ax.set_axis_off()
                continue
            ax.errorbar(t["factor"], t["mean"], yerr=[t["mean"] - t["lo"], t["hi"] - t["mean"]],
                        fmt="o-", color="tab:blue", ms=3, lw=1, capsize=2)  # fmt: skip
            edges = found[(found["scheme"] == scheme) & (found["knob"] == knob.name)]
            ax.plot(edges["factor"], edges["mean"], "x", color="tab:red", ms=9, mew=2)
            ax.axvline(1.0, color="0.5", ls=":", lw=1)
            ax.set_xscale("log")
            factors = sorted(t["factor"])
            ax.set_xticks(factors, [f"x{f:.2g}" for f in factors], fontsize=7)
            ax.minorticks_off()
            ax.grid(alpha=0.3)
    seeds = seeds_shown(list(outcomes["n"]))
    fig.suptitle(
        f"sensitivity per scheme ({described(settings)}, {settings.steps} steps): mean headline score,\n"
        f"95% t-interval over {seeds} seeds; red x: a failure edge, worse than the knob's best by more "
        f"than the margin ({margin:.3f}), paired on seeds",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    return fig


def best_rates(outcomes: pd.DataFrame) -> dict[str, float]:
    """Scheme -> the learning-rate factor with its highest mean score (`analysis.tuning.best_rates`)."""
    return tuning.best_rates(outcomes[outcomes["knob"] == "learning_rate"], "scheme")


def bracketed(outcomes: pd.DataFrame) -> dict[str, bool]:
    """Scheme -> whether its best learning rate (`best_rates`) is bracketed (`analysis.tuning.bracketed`:
    a lower mean score on each side). A best rate at either end of the scan is not: the optimum may lie
    beyond it, and the scan must be extended before the rate is called tuned."""
    return tuning.bracketed(outcomes[outcomes["knob"] == "learning_rate"], "scheme")


FAMILY = multiplicity.Family("the rows of the tuned-rate table on fresh seeds", "holm")
"""the primary scheme table's family and its error-rate control"""


def best_rate_table(
    scored: pd.DataFrame, outcomes: pd.DataFrame, margin: float, fresh: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Each scheme row of the scheme study (`scheme_arms.arms`: against grpo and against its matched
    comparator) at the shared learning rate (every scheme at factor 1) and at each side's own best
    rate (`best_rates`, with whether each is `bracketed`), paired on seeds against `margin`: row, kind,
    the best factors of both sides, then effect, interval, seeds and verdict at each, and whether the
    verdict turns on the rate. With `fresh` (the `scores` of `run_confirmation`), the same at the own
    best rates on the fresh seeds (columns suffixed ' fresh seeds'), the primary comparison: every arm
    at its own tuned rate, the rate chosen on other seeds, the rows one family (`FAMILY`) with their
    adjusted words, the greedy effect and the row's notes (`verdict_table.notes`) beside them, and what
    becomes of the own-best verdict there (`on fresh seeds`, one of `reversals.CHANGES`: an undecided
    fresh verdict leaves it open, neither held nor undone): `comparisons.tuned_table.table`."""
    lr = scored[scored["knob"] == "learning_rate"]
    rates = best_rates(outcomes)
    sides = {
        "shared": lr[lr["factor"] == 1.0].assign(label=lambda f: f["scheme"]),
        "own best": lr[lr["factor"] == lr["scheme"].map(rates)].assign(label=lambda f: f["scheme"]),
    }
    if fresh is not None:
        sides["fresh seeds"] = fresh.assign(label=fresh["scheme"])
    return tuned_table.table(sides, rates, bracketed(outcomes), margin, FAMILY)


def best_rate_markdown(table: pd.DataFrame) -> str:
    """`best_rate_table` as GitHub markdown (`comparisons.tuned_table.markdown`, at this study's 60 steps)."""
    return tuned_table.markdown(table, FAMILY, "60 steps")


TRICKS_CONFIRMED = 6
"""the most tricks confirmed, the screen's largest directional effects first"""
TRICK_SEEDS = 3
"""the fresh seeds each confirmation runs on (the first of `fresh_seeds`)"""
TRICKS_FAMILY = multiplicity.Family("the screen's tricks confirmed at grpo's tuned rate", "holm")
"""the table's family and its error-rate control"""


def screen_tricks(effects: pd.DataFrame | None) -> list[str]:
    """The tricks of `presets.TRICKS` whose screen effect (`screen.main_effects`) shows a direction after
    Holm over the screen's factors (`screen.adjusted`), at most `TRICKS_CONFIRMED`, the largest effects
    first; none without the screen's effects."""
    if effects is None or not len(effects):
        return []
    adjusted = screen.adjusted(effects)
    found = adjusted[adjusted["adjusted verdict"].isin(list(SIGN)) & adjusted["factor"].isin(list(TRICKS))]
    ranked = found.assign(size=found["effect"].abs()).sort_values("size", ascending=False)
    return list(ranked["factor"])[:TRICKS_CONFIRMED]


def trick_seeds(settings: Profile) -> tuple[int, ...]:
    """The trick confirmation's seeds: the first `TRICK_SEEDS` fresh seeds of the scan (1 under the smoke
    profile)."""
    fresh = fresh_seeds(settings)
    return fresh[: TRICK_SEEDS if settings.name == "full" else 1]


def trick_design(settings: Profile, store: str | Path | None = None) -> list[Point] | None:
    """`tuned_trick_points` at grpo's tuned rate (`stored_rates` of the scan in `store`, default the
    profile's) for the screen's stored effects; None while the scan is not stored."""
    where = settings.runs_dir() if store is None else store
    rates = stored_rates(settings, where)
    if rates is None:
        return None
    return tuned_trick_points(
        settings, rates[scheme_arms.REFERENCE], screen.stored_effects(settings.name, where)
    )


def tuned_trick_points(settings: Profile, factor: float, effects: pd.DataFrame | None) -> list[Point]:
    """grpo at `factor` times its rate ('grpo') and each of `screen_tricks(effects)` switched on over it
    (labelled by the trick's name)."""
    lr = _scaled(base(settings).learning_rate, factor)
    points = [
        Point(scheme_arms.REFERENCE, {"trick": "none", "factor": factor}, base(settings, learning_rate=lr))
    ]
    for name in screen_tricks(effects):
        config = base(settings, learning_rate=lr, **TRICKS[name])
        points.append(Point(name, {"trick": name, "factor": factor}, config))
    return points


def trick_runs(points: Sequence[Point] | None, settings: Profile) -> list[Config]:
    """What `grpo-lab plan` counts: `points` over `trick_seeds`; before the scan is stored (`points` None),
    `TRICKS_CONFIRMED` tricks of `presets.TRICKS` over grpo at its own rate stand in for their cost."""
    if points is None:
        points = [Point(name, {}, base(settings, **TRICKS[name])) for name in list(TRICKS)[:TRICKS_CONFIRMED]]
    return [p.config.replace(seed=seed) for p in points for seed in trick_seeds(settings)]


def run_tricks(
    points: Sequence[Point], settings: Profile, root: str | Path | None = None, **options: Any
) -> SweepResult:
    """Train (or load) `points` over `trick_seeds` into `root` (default: the profile's store); `options`
    as for `experiments.run_design`."""
    return run_design(points, trick_seeds(settings), settings.runs_dir() if root is None else root, **options)


def trick_table(result: SweepResult, margin: float, effects: pd.DataFrame | None) -> pd.DataFrame:
    """Each trick against grpo at grpo's tuned rate, paired on seeds against `margin` (the scheme study's:
    `margin`), adjusted over the rows (`TRICKS_FAMILY`), with the screen's effect, interval and word at
    the shared rate beside it (`screen ...` columns; None without the screen's effects)."""
    scored = paired.scores(result, {})
    names = [label for label in dict.fromkeys(result.runs["label"]) if label != scheme_arms.REFERENCE]
    rows = [(name, "trick", name, scheme_arms.REFERENCE) for name in names]
    if not rows:
        return pd.DataFrame(columns=["row", "verdict", "adjusted verdict", "p"])
    compared = verdict_table.compare(scored, rows, margin=margin)
    out = multiplicity.adjust(verdict_table.pooled_mdes(compared), TRICKS_FAMILY)
    shown = effects.set_index("factor") if effects is not None else pd.DataFrame()
    for column in ("effect", "ci_low", "ci_high", "verdict"):
        out[f"screen {column}"] = [shown[column].get(n) if column in shown else None for n in out["row"]]
    return out


def trick_markdown(rows: pd.DataFrame) -> str:
    """`table` as GitHub markdown under its family's caption: per trick, the verdict at grpo's tuned rate
    (raw and adjusted), the greedy effect and notes, and the screen's word at the shared rate."""
    head = [
        "trick",
        "at grpo's tuned rate",
        "adjusted",
        "greedy effect",
        "notes",
        "screen at the shared rate",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows.to_dict("records"):
        tuned = (
            f"{verdict_table.WORDS.get(r['verdict'], 'undecided')}: {r['effect']:+.3f} "
            f"[{r['ci_low']:+.3f}, {r['ci_high']:+.3f}], {r['seeds']} seeds"
        )
        greedy = f"{r['greedy effect']:+.3f} [{r['greedy ci_low']:+.3f}, {r['greedy ci_high']:+.3f}]"
        at_screen = (
            f"{verdict_table.WORDS.get(r['screen verdict'], 'undecided')}: {r['screen effect']:+.3f} "
            f"[{r['screen ci_low']:+.3f}, {r['screen ci_high']:+.3f}]"
            if isinstance(r["screen effect"], float)
            else "n/a"
        )
        adjusted = verdict_table.WORDS.get(r["adjusted verdict"], "undecided")
        lines.append(
            "| " + " | ".join([r["row"], tuned, adjusted, greedy, verdict_table.notes(r), at_screen]) + " |"
        )
    family = TRICKS_FAMILY.caption(multiplicity.family_size(rows))
    caption = f"Screen tricks at grpo's tuned learning rate, 60 steps; {family}.\n\n"
    return caption + "\n".join(lines) + "\n"


def primary_tables(settings: Profile, **options: Any) -> tuple[pd.DataFrame, pd.DataFrame, float]:
    """The study's primary tables, trained or loaded as the notebook's cells do (`options` as for
    `experiments.run_design`): the tuned scheme table with its fresh seeds (`best_rate_table`), the tuned
    trick table (`trick_table`) and the margin both are judged against (`margin`). What another study
    sets its verdicts beside (notebook 18's transfer table)."""
    scored = scores(run(design(settings), settings, **options))
    bed_margin = margin(scored)
    outcomes = outcome_table(scored)
    confirmed = scores(run_confirmation(settings, best_rates(outcomes), **options))
    schemes = best_rate_table(scored, outcomes, bed_margin, confirmed)
    points = trick_design(settings)
    if points is None:
        raise RuntimeError("the scan is not stored after it ran: its runs did not reach the store")
    tricks = trick_table(
        run_tricks(points, settings, **options), bed_margin, screen.stored_effects(settings.name)
    )
    return schemes, tricks, bed_margin
