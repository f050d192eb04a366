"""How a comparison's verdict changes between two conditions of the same comparison: another test bed
(a scenario of the Evaluation guide §8, where "relative rankings can reverse between environments")
or a longer horizon (§6.5: no method is judged by its early reward). Each row of two verdict tables
(`analysis.verdict_table.compare`, keyed by row and kind) is read as one of `CHANGES`:

- `HELD`: both decide the same direction (better or worse, the size sure or not), or both find no
  difference;
- `REVERSED`: both decide a direction, opposite ones;
- `APPEARS`: only the second decides a direction (the first found none, or had not decided);
- `VANISHES`: the first decided a direction, the second finds none beyond the margin;
- `SETTLED`: the first had not decided, the second finds no effect beyond the margin;
- `OPEN`: the second has not decided (undecided, too few seeds), so nothing can be said yet.

A row's category is its verdict as the verdict table words it (`shown`); it can change while the
change reads `HELD` (better, its size sure, to better, size unsure) or `OPEN` (decided, then not), so
`table` marks every changed category apart from the change (`CATEGORY_CHANGED`).

`matrix` reads every condition against a reference one (the base, the short horizon), `summary` says in
words how many verdicts reversed and how many rows changed category, and `figure` draws the matrix:
one row per comparison, one column per condition, one colour scale in score units for every column
with the margins marked, every changed category framed in the style of its change."""

import textwrap
from collections.abc import Mapping

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.patches import Patch, Rectangle
from matplotlib.typing import LineStyleType
from numpy.typing import ArrayLike

from grpo_lab.analysis.power import NO_DIFFERENCE, SIGN
from grpo_lab.analysis.verdict_table import WORDS

HELD, REVERSED, APPEARS, VANISHES, SETTLED, OPEN = (
    "held",
    "reversed",
    "appears",
    "vanishes",
    "settled",
    "open",
)
CHANGES = (HELD, REVERSED, APPEARS, VANISHES, SETTLED, OPEN)
"""what can happen to a verdict between two conditions"""
DIRECTED = tuple(SIGN)
"""verdicts that decide a direction (the interval excludes 0: better or worse, its size sure or not)"""
NONE_BEYOND = (NO_DIFFERENCE,)
"""the verdict that decides there is no effect beyond the margin"""
KEYS = ["row", "kind"]
"""what identifies a comparison in both tables"""
CARRIED = ("effect", "ci_low", "ci_high", "seeds", "margin", "verdict")
"""the columns each side brings, suffixed by its condition's name"""
CATEGORY_CHANGED = "category changed"
"""`table`'s column: whether the row's verdict reads in other words (`shown`) in the second condition"""
SCALE_MARGINS = 2.0
"""`figure`'s colour scale: the paired effect in score units, one scale for every column, clipped at
+-this many times the largest margin in the figure (the cells keep their numbers)"""
FRAMES: dict[str, tuple[str, LineStyleType, float]] = {
    REVERSED: ("black", "-", 3.0),
    APPEARS: ("black", "--", 2.2),
    VANISHES: ("darkviolet", ":", 2.6),
    SETTLED: ("darkviolet", "-.", 2.0),
    HELD: ("tab:green", "-", 1.8),
    OPEN: ("dimgrey", (0, (4, 1, 1, 1, 1, 1)), 1.8),
}
"""`figure` frames every cell whose category changed against the reference, in the style (edge colour,
line style, line width) of its change: one style per change, in the legend's order"""
FRAME_LABELS = {
    REVERSED: "reversed: a direction, the other one",
    APPEARS: "appears: a direction only here",
    VANISHES: "vanishes: a direction, then no difference",
    SETTLED: "settled: undecided, then no difference",
    HELD: "held: one direction, its size sure in one only",
    OPEN: "open: decided, then undecided",
}
"""what each frame says in `figure`'s legend"""


def change(before: str, after: str) -> str:
    """The change (one of `CHANGES`) from the verdict `before` to the verdict `after` (each one of
    `power.VERDICTS`). It says nothing of a category that changed within `HELD` or `OPEN`: `table`'s
    `CATEGORY_CHANGED` does."""
    if after in DIRECTED:
        if before in DIRECTED:
            return HELD if SIGN[before] == SIGN[after] else REVERSED
        return APPEARS
    if after in NONE_BEYOND:
        if before in DIRECTED:
            return VANISHES
        return HELD if before in NONE_BEYOND else SETTLED
    return OPEN


def table(before: pd.DataFrame, after: pd.DataFrame, names: tuple[str, str]) -> pd.DataFrame:
    """The rows both verdict tables have (matched on `KEYS`, in `before`'s order), each side's
    `CARRIED` columns suffixed ' (<name>)' by `names` (before's, after's), and the `change` between
    their verdicts, and whether the verdict's words changed (`CATEGORY_CHANGED`). A row only one side
    has is an error: the two conditions must judge the same comparisons."""
    if names[0] == names[1]:
        raise ValueError(f"the two conditions need different names, got {names[0]!r} twice")
    sides = []
    for frame, name in zip((before, after), names):
        missing = [c for c in (*KEYS, *CARRIED) if c not in frame]
        if missing:
            raise ValueError(f"the {name!r} table lacks the columns {missing}: give verdict tables")
        sides.append(frame[[*KEYS, *CARRIED]].rename(columns={c: f"{c} ({name})" for c in CARRIED}))
    keys = [set(zip(side["row"], side["kind"])) for side in sides]
    lonely = sorted(keys[0] ^ keys[1])
    if lonely:
        listed = ", ".join(f"{r} ({k})" for r, k in lonely)
        raise ValueError(f"rows in one table only, so the conditions judge different comparisons: {listed}")
    joined = sides[0].merge(sides[1], on=KEYS, how="left")
    pairs = list(zip(joined[f"verdict ({names[0]})"], joined[f"verdict ({names[1]})"]))
    joined["change"] = [change(b, a) for b, a in pairs]
    joined[CATEGORY_CHANGED] = [shown(b) != shown(a) for b, a in pairs]
    return joined.reset_index(drop=True)


def matrix(by_condition: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Every condition's verdict table against the first one's, the reference (`table`), one row per
    (condition, comparison) with the column `condition`; only the comparisons both tables hold are
    read (a condition may judge extra arms, e.g. what its own check needs), so the reference's rows
    that a condition lacks are left out of that condition's part."""
    names = list(by_condition)
    if len(names) < 2:
        raise ValueError(f"a matrix needs a reference and at least one other condition, got {names}")
    reference = by_condition[names[0]]
    parts = []
    for name in names[1:]:
        other = by_condition[name]
        shared = reference.merge(other[KEYS], on=KEYS)
        mine = other.merge(shared[KEYS], on=KEYS)
        parts.append(table(shared, mine, (names[0], "condition")).assign(condition=name))
    return pd.concat(parts, ignore_index=True)


def shown(verdict: str) -> str:
    """A verdict as the verdict table words it (`analysis.verdict_table.WORDS`, else 'undecided'):
    its category."""
    return WORDS.get(verdict, "undecided")


def cell(row: Mapping) -> str:
    """A comparison's verdict in the verdict table's words (`shown`) and its effect, e.g.
    'better +0.015'."""
    return f"{shown(row['verdict'])} {row['effect']:+.3f}"


def summary(changed: pd.DataFrame, listed: bool = False) -> str:
    """What `matrix` (or `table`) found, in words read from it: how many verdicts reversed (each one
    named), then per condition how many of its rows changed category (`CATEGORY_CHANGED`); `listed`:
    each changed row named, with its words before and after and its change. E.g. 'no verdict reversed;
    6 of 12 rows changed category'. Never says that nothing changed where a category did."""
    conditions = list(dict.fromkeys(changed["condition"])) if "condition" in changed else [None]
    before, after = [c for c in changed.columns if str(c).startswith("verdict (")][:2]
    several = len(conditions) > 1

    def where(r: Mapping) -> str:
        return f"{r['row']} ({r['kind']})" + (f" on {r['condition']}" if several else "")

    flipped = changed[changed["change"] == REVERSED].to_dict("records")
    if flipped:
        verb = "verdict" if len(flipped) == 1 else "verdicts"
        head = f"{len(flipped)} {verb} reversed ({', '.join(where(r) for r in flipped)})"
    else:
        head = "no verdict reversed"
    parts = []
    for condition in conditions:
        part = changed if condition is None else changed[changed["condition"] == condition]
        moved = part[part[CATEGORY_CHANGED].astype(bool)].to_dict("records")
        text = f"{len(moved)} of {len(part)} " + (f"on {condition}" if several else "rows changed category")
        if listed and moved:
            each = (
                f"{r['row']} ({r['kind']}) {shown(r[before])} to {shown(r[after])}, {r['change']}"
                for r in moved
            )
            text += f" ({'; '.join(each)})"
        parts.append(text)
    return f"{head}; " + (f"rows that changed category: {', '.join(parts)}" if several else parts[0])


def _distinct(values: ArrayLike) -> list[float]:
    """The finite `values` in increasing order, those within rounding of one another counted once."""
    out: list[float] = []
    for v in sorted(float(x) for x in np.ravel(np.asarray(values, dtype=float)) if np.isfinite(x)):
        if not out or not np.isclose(v, out[-1], rtol=1e-9, atol=0.0):
            out.append(v)
    return out


def _number(x: float) -> str:
    return f"{x:.2g}"


def margin_words(margins: ArrayLike) -> str:
    """The margins of a column in words: 'margin 0.0071' when one, 'margins 0.006 to 0.011' when
    several (two significant digits), 'no margin' when none is finite."""
    distinct = _distinct(margins)
    if not distinct:
        return "no margin"
    if len(distinct) == 1:
        return f"margin {_number(distinct[0])}"
    return f"margins {_number(distinct[0])} to {_number(distinct[-1])}"


def figure(by_condition: Mapping[str, pd.DataFrame], changed: pd.DataFrame, title: str) -> plt.Figure:
    """The matrix: one row per comparison of the reference (the first condition), one column per
    condition, each cell's verdict word, effect and seeds written in it (and its margin, where the
    figure's cells have more than one). Every cell is coloured by its paired effect in score units on
    one scale shared by every column, symmetric and clipped at +-`SCALE_MARGINS` times the largest
    margin, so that one effect has one colour whatever its row's margin; the colour bar marks each
    margin (a line at +-each, ticked when there are at most two), each column's label names its margin.
    Every cell whose category changed against the reference (`CATEGORY_CHANGED` of `changed`, the
    `matrix`) is framed in its change's style (`FRAMES`, named in the legend with how many cells each
    frames); the title carries `summary`."""
    names = list(by_condition)
    reference = by_condition[names[0]]
    rows = [f"{r} ({k})" for r, k in zip(reference["row"], reference["kind"])]
    values = np.full((len(rows), len(names)), np.nan)
    margins = np.full((len(rows), len(names)), np.nan)
    seeds: list[list[Mapping | None]] = [[None for _ in names] for _ in rows]
    for j, name in enumerate(names):
        for r in by_condition[name].to_dict("records"):
            key = f"{r['row']} ({r['kind']})"
            if key in rows:
                i = rows.index(key)
                values[i, j], margins[i, j] = r["effect"], r["margin"]
                seeds[i][j] = r
    distinct = _distinct(margins.ravel())
    if distinct:
        vmax = SCALE_MARGINS * distinct[-1]
        scale = f"clipped at +-{_number(vmax)} = {SCALE_MARGINS:g} x the largest margin"
    else:
        largest = np.nanmax(np.abs(values)) if np.isfinite(values).any() else 0.0
        vmax = float(largest) or 1.0
        scale = f"up to +-{_number(vmax)}, the largest effect (no margin given)"
    several = len(distinct) > 1
    fig_width = 2.3 * len(names) + 2.5
    fig, ax = plt.subplots(figsize=(fig_width, 0.6 * len(rows) + 2.4))
    image = ax.imshow(values, cmap="RdBu", vmin=-vmax, vmax=vmax, aspect="auto")
    for i, line in enumerate(seeds):
        for j, r in enumerate(line):
            if r is None:
                continue
            below = (
                f"{r['seeds']} seeds, margin {_number(r['margin'])}" if several else f"({r['seeds']} seeds)"
            )
            dark = np.isfinite(values[i, j]) and abs(values[i, j]) > 0.6 * vmax  # white on the darkest
            ax.text(j, i, f"{cell(r)}\n{below}", ha="center", va="center", fontsize=6,
                    color="white" if dark else "black")  # fmt: skip
    counts = dict.fromkeys(CHANGES, 0)
    pad = 0.04  # inside the cell, so that two framed neighbours keep two frames
    for r in changed.to_dict("records"):
        key = f"{r['row']} ({r['kind']})"
        where = r.get("condition", names[-1])
        if not r[CATEGORY_CHANGED] or key not in rows or where not in names:
            continue
        i, j = rows.index(key), names.index(where)
        colour, style, width = FRAMES[r["change"]]
        ax.add_patch(
            Rectangle((j - 0.5 + pad, i - 0.5 + pad), 1 - 2 * pad, 1 - 2 * pad, fill=False,
                      edgecolor=colour, linestyle=style, linewidth=width)
        )  # fmt: skip
        counts[r["change"]] += 1
    labels = [f"{name}\n{margin_words(margins[:, j])}" for j, name in enumerate(names)]
    ax.set_xticks(range(len(names)), labels, fontsize=8)
    ax.set_yticks(range(len(rows)), rows, fontsize=7)
    bar = fig.colorbar(
        image, ax=ax, extend="both" if np.nanmax(np.abs(values), initial=0) > vmax else "neither"
    )
    for m in distinct:
        for side in (-m, m):
            bar.ax.axhline(side, color="black", linewidth=1.0, linestyle="--")
    marked = distinct if len(distinct) <= 2 else [distinct[0], distinct[-1]]
    ticks = sorted({-vmax, vmax, 0.0, *marked, *(-m for m in marked)})
    bar.set_ticks(ticks, labels=[f"{t:+.2g}" if t else "0" for t in ticks])
    bar.ax.tick_params(labelsize=7)
    bar.set_label(
        textwrap.fill(
            f"paired effect on the headline score (score units), one scale for every column, {scale}; "
            "dashed: +- the margin" + ("s" if several else ""),
            60,
        ),
        fontsize=8,
    )
    handles = [
        Patch(fill=False, edgecolor=FRAMES[c][0], linestyle=FRAMES[c][1], linewidth=FRAMES[c][2],
              label=f"{FRAME_LABELS[c]} ({counts[c]})")
        for c in FRAMES
    ]  # fmt: skip
    ax.legend(
        handles=handles,
        title=f"framed: the category changed against {names[0]} (cells)",
        title_fontsize=7,
        fontsize=7,
        ncol=3 if len(names) >= 4 else 2,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.7 / (0.6 * len(rows) + 0.8)),
        frameon=False,
        handlelength=3,
    )
    ax.set_title(
        textwrap.fill(
            f"{title}: verdict, paired effect (seeds) against {names[0]}; {summary(changed)}",
            int(14 * fig_width),
        ),
        fontsize=8,
    )
    return fig
