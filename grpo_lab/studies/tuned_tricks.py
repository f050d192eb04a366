"""The factorial screen's decided tricks confirmed at grpo's tuned learning rate (notebook 16): the screen
(`comparisons.screen`, notebook 02) runs every trick at the shared rate 3e-5, which the scheme study's
learning-rate scan (`studies.scheme_sensitivity`) finds too high for grpo itself, and a trick that
stabilizes training can look good for stabilizing a rate that is simply too high. So each trick the
screen calls better or worse (a direction its interval shows after the screen's own Holm control over
its factors), at most `CONFIRM` of them, the largest effects first, runs as grpo with that trick on at
grpo's tuned rate, paired on seeds with grpo at that rate (the scan's own runs), on seeds the rate was
not chosen on (`scheme_sensitivity.fresh_seeds`, the first `SEEDS`). The rows are one family under
Holm, each with its raw and adjusted word and the screen's word beside it.

- `tricks`: the screen's directional tricks (from the store: none until the screen is stored);
- `design` / `run` / `runs`: the trick arms and grpo at grpo's tuned rate (None until the scan is
  stored), and what `grpo-lab plan` counts;
- `table` / `markdown`: the verdicts at the tuned rate beside the screen's."""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from grpo_lab.analysis import multiplicity, verdict_table
from grpo_lab.analysis.power import ALPHA, SIGN
from grpo_lab.comparisons import paired, scheme_arms, screen
from grpo_lab.comparisons.bed import base
from grpo_lab.config import Config
from grpo_lab.experiments import SweepResult, run_design
from grpo_lab.experiments.designs import Point
from grpo_lab.presets import TRICKS
from grpo_lab.profiles import Profile
from grpo_lab.studies import scheme_sensitivity

CONFIRM = 6
"""the most tricks confirmed, the screen's largest directional effects first"""
SEEDS = 3
"""the fresh seeds each confirmation runs on (the first of `scheme_sensitivity.fresh_seeds`)"""
FAMILY = multiplicity.Family("the screen's tricks confirmed at grpo's tuned rate", "holm")
"""the table's family and its error-rate control"""
SCREEN_FAMILY = multiplicity.Family("the screen's factors", "holm")
"""the family the screen's own words are adjusted over before a trick is picked"""

settings = scheme_sensitivity.settings
"""The study's profile: the scheme sensitivity study's (its 60-step bed and its learning-rate scan)."""


def tricks(effects: pd.DataFrame | None) -> list[str]:
    """The tricks of `presets.TRICKS` whose screen effect (`screen.main_effects`) shows a direction after
    Holm over the screen's factors (`SCREEN_FAMILY`), at most `CONFIRM`, the largest effects first; none
    without the screen's effects."""
    if effects is None or not len(effects):
        return []
    table = effects.assign(confidence=1 - ALPHA)
    adjusted = multiplicity.adjust(table, SCREEN_FAMILY)
    found = adjusted[adjusted["adjusted verdict"].isin(list(SIGN)) & adjusted["factor"].isin(list(TRICKS))]
    ranked = found.assign(size=found["effect"].abs()).sort_values("size", ascending=False)
    return list(ranked["factor"])[:CONFIRM]


def seeds(settings: Profile) -> tuple[int, ...]:
    """The confirmation's seeds: the first `SEEDS` fresh seeds of the scan (1 under the smoke profile)."""
    fresh = scheme_sensitivity.fresh_seeds(settings)
    return fresh[: SEEDS if settings.name == "full" else 1]


def design(settings: Profile, store: str | Path | None = None) -> list[Point] | None:
    """grpo at its tuned rate (`scheme_sensitivity.stored_rates` of the scan in `store`, default the
    profile's) and each of `tricks` (the screen's stored effects) switched on over it: labels 'grpo' and
    the trick's name; None while the scan is not stored."""
    where = settings.runs_dir() if store is None else store
    rates = scheme_sensitivity.stored_rates(settings, where)
    if rates is None:
        return None
    factor = rates[scheme_arms.REFERENCE]
    lr = scheme_sensitivity._scaled(base(settings).learning_rate, factor)
    chosen = tricks(screen.stored_effects(settings.name, where))
    points = [
        Point(scheme_arms.REFERENCE, {"trick": "none", "factor": factor}, base(settings, learning_rate=lr))
    ]
    for name in chosen:
        config = base(settings, learning_rate=lr, **TRICKS[name])
        points.append(Point(name, {"trick": name, "factor": factor}, config))
    return points


def runs(points: Sequence[Point] | None, settings: Profile, store: str | Path | None = None) -> list[Config]:
    """What `grpo-lab plan` counts: `points` over `seeds`; before the scan is stored (`points` None),
    `CONFIRM` tricks of `presets.TRICKS` over grpo at its own rate stand in for the cost of the arms."""
    if points is None:
        points = [Point(name, {}, base(settings, **TRICKS[name])) for name in list(TRICKS)[:CONFIRM]]
    return [p.config.replace(seed=seed) for p in points for seed in seeds(settings)]


def run(
    points: Sequence[Point], settings: Profile, root: str | Path | None = None, **options: Any
) -> SweepResult:
    """Train (or load) `points` over `seeds` into `root` (default: the profile's store); `options` as
    for `experiments.run_design`."""
    return run_design(points, seeds(settings), settings.runs_dir() if root is None else root, **options)


def table(result: SweepResult, margin: float, effects: pd.DataFrame | None) -> pd.DataFrame:
    """Each trick against grpo at grpo's tuned rate, paired on seeds against `margin` (the scheme study's,
    `scheme_sensitivity.margin`), adjusted over the rows (`FAMILY`), with the screen's effect, interval
    and word at the shared rate beside it (`screen` columns; NaN without the screen's effects)."""
    scored = paired.scores(result, {})
    names = [label for label in dict.fromkeys(result.runs["label"]) if label != scheme_arms.REFERENCE]
    rows = [(name, "trick", name, scheme_arms.REFERENCE) for name in names]
    if not rows:
        return pd.DataFrame(columns=["row", "verdict", "adjusted verdict", "p"])
    compared = verdict_table.compare(scored, rows, margin=margin)
    out = multiplicity.adjust(verdict_table.pooled_mdes(compared), FAMILY)
    shown = effects.set_index("factor") if effects is not None else pd.DataFrame()
    for column in ("effect", "ci_low", "ci_high", "verdict"):
        out[f"screen {column}"] = [shown[column].get(n) if column in shown else None for n in out["row"]]
    return out


def markdown(rows: pd.DataFrame) -> str:
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
    family = FAMILY.caption(multiplicity.family_size(rows))
    caption = f"Screen tricks at grpo's tuned learning rate, 60 steps; {family}.\n\n"
    return caption + "\n".join(lines) + "\n"
