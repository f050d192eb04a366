"""The primary scheme table at tuned rates, shared by the studies that tune a learning rate per arm (notebook
16 at 60 steps, notebook 15 at the long horizon): every scheme row of the scheme study (`scheme_arms.arms`)
at the shared rate, at each side's own best rate on the seeds the rate was chosen on, and, the primary
comparison, at those rates on fresh seeds, where the choice cannot favour an arm (validity.md, "Fair
tuning"): its rows one family with their adjusted words, the greedy effect and each row's notes beside
them, and what becomes of the tuning-seed verdict there (`analysis.reversals.change`).

Each side is a frame of scored runs (`paired.scores`) labelled by arm; the rates are factors of each arm's
own rate, with whether each best rate is bracketed (`analysis.tuning`)."""

import functools
import math
from collections.abc import Mapping

import pandas as pd

from grpo_lab.analysis import multiplicity, power, reversals, verdict_table
from grpo_lab.comparisons import scheme_arms

KEPT = ("effect", "ci_low", "ci_high", "seeds", "verdict")
"""the columns each side of the table carries, suffixed by the side's name"""


def table(
    sides: Mapping[str, pd.DataFrame],
    rates: Mapping[str, float],
    bracketed: Mapping[str, bool],
    margin: float,
    family: multiplicity.Family,
) -> pd.DataFrame:
    """The scheme rows of the arms of `sides['shared']` (scored runs at the shared rate), paired on seeds
    against `margin` (every row's gain the reference's at the shared rate): row, kind, the best factors
    of both sides (`rates`) and whether each is bracketed, then effect, interval, seeds and verdict on
    each side (`sides`: 'shared', 'own best' and, optionally, 'fresh seeds'; columns suffixed by the
    side), and whether the verdict turns on the rate. With 'fresh seeds', those rows are `family`, with
    their adjusted words, the greedy effect and the notes (`verdict_table.notes`), and `on fresh seeds`
    says what becomes of the own-best verdict there (an undecided fresh verdict leaves it open)."""
    shared = sides["shared"]
    rows = scheme_arms.arms(set(shared["label"]))
    learned = verdict_table.gain(shared[shared["label"] == scheme_arms.REFERENCE])
    found = []
    for side, frame in sides.items():
        compared = verdict_table.compare(frame, rows, margin=margin, reference_gain=learned)
        columns = list(KEPT)
        if side == "fresh seeds":
            compared = multiplicity.adjust(compared, family)
            compared["notes"] = [verdict_table.notes(r) for r in compared.to_dict("records")]
            columns += ["adjusted verdict", "greedy effect", "greedy ci_low", "greedy ci_high", "notes"]
        found.append(compared[["row", "kind", *columns]].rename(columns={c: f"{c} {side}" for c in columns}))
    out = functools.reduce(lambda left, right: left.merge(right, on=["row", "kind"]), found)
    out.insert(2, "treatment rate x", [rates[treatment] for _, _, treatment, _ in rows])
    out.insert(3, "control rate x", [rates[control] for _, _, _, control in rows])
    out.insert(4, "treatment bracketed", [bracketed[treatment] for _, _, treatment, _ in rows])
    out.insert(5, "control bracketed", [bracketed[control] for _, _, _, control in rows])
    out["turns on the rate"] = out["verdict shared"] != out["verdict own best"]
    if "fresh seeds" in sides:
        out["on fresh seeds"] = list(
            map(reversals.change, out["verdict own best"], out["verdict fresh seeds"])
        )
    return out


def markdown(rows: pd.DataFrame, family: multiplicity.Family, horizon: str) -> str:
    """`table` as GitHub markdown. Where it has the fresh seeds, the primary comparison comes first, under
    a caption that names the `horizon` and the `family`: per row, the tuned rates of both sides (and
    whether each is bracketed), the verdict and effect [95% CI] at them on the fresh seeds, its adjusted
    word, the greedy effect and the notes; then the own-best verdict on the seeds the rates were chosen on
    and what becomes of it, and last the verdict at the shared rate, the sensitivity at one common rate,
    and whether it turns on the rate."""
    fresh = "verdict fresh seeds" in rows
    head = ["row", "kind", "tuned rates (treatment, control)"]
    head += (
        ["at the tuned rates, fresh seeds", "adjusted", "greedy effect, fresh seeds", "notes"]
        if fresh
        else []
    )
    head += ["at the tuned rates, tuning seeds"] + (["tuning verdict on fresh seeds"] if fresh else [])
    head += ["at the shared rate (sensitivity)", "verdict turns on the rate"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    sides = ("shared", "own best", "fresh seeds") if fresh else ("shared", "own best")
    for r in rows.to_dict("records"):
        at = {side: _reading(r, side) for side in sides}
        rates = ", ".join(
            f"x{r[f'{side} rate x']:.2g}" + ("" if r[f"{side} bracketed"] else " (not bracketed)")
            for side in ("treatment", "control")
        )
        cells = [r["row"], r["kind"], rates]
        if fresh:
            greedy = _interval(
                r["greedy effect fresh seeds"],
                r["greedy ci_low fresh seeds"],
                r["greedy ci_high fresh seeds"],
            )
            adjusted = verdict_table.WORDS.get(r["adjusted verdict fresh seeds"], "undecided")
            cells += [at["fresh seeds"], adjusted, greedy, r["notes fresh seeds"]]
        cells.append(at["own best"])
        if fresh:
            cells.append(r["on fresh seeds"])
        cells += [at["shared"], "yes" if r["turns on the rate"] else "no"]
        lines.append("| " + " | ".join(cells) + " |")
    caption = ""
    if fresh:
        size = int(rows["verdict fresh seeds"].ne(power.TOO_FEW_SEEDS).sum())
        caption = (
            "Primary scheme table: every arm at its own tuned learning rate (the best of the scan, chosen on "
            f"the tuning seeds, judged on fresh seeds), {horizon}; "
            f"{family.caption(size)}. The shared-rate column is the sensitivity at one common rate.\n\n"
        )
    return caption + "\n".join(lines) + "\n"


def _reading(row: dict, side: str) -> str:
    """One side's verdict, effect, interval and seeds as a cell; a side with too few paired seeds for an
    interval says so rather than print an undecided word over an interval of NaN."""
    effect, seeds = row[f"effect {side}"], row[f"seeds {side}"]
    if row[f"verdict {side}"] == power.TOO_FEW_SEEDS:
        return f"{power.TOO_FEW_SEEDS}: {effect:+.3f}, {seeds} seed{'s' if seeds != 1 else ''}, no interval"
    reading = _interval(effect, row[f"ci_low {side}"], row[f"ci_high {side}"])
    return f"{verdict_table.WORDS.get(row[f'verdict {side}'], 'undecided')}: {reading}, {seeds} seeds"


def _interval(effect: float, low: float, high: float) -> str:
    """An effect with its interval, or with 'no interval' where too few seeds gave none (NaN ends)."""
    if math.isnan(low) or math.isnan(high):
        return f"{effect:+.3f}, no interval"
    return f"{effect:+.3f} [{low:+.3f}, {high:+.3f}]"
