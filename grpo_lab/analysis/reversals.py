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

`matrix` reads every condition against a reference one (the base, the short horizon) and `figure`
draws it: one row per comparison, one column per condition, the reversals framed."""

from collections.abc import Mapping

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

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
CLIP = 3.0
"""`figure`'s colour: a cell's effect over its row's margin, clipped to +-this"""
FRAMES = {REVERSED: "-", APPEARS: "--"}
"""`figure` frames a cell whose verdict reversed (solid) or appeared (dashed) against the reference"""


def change(before: str, after: str) -> str:
    """The change (one of `CHANGES`) from the verdict `before` to the verdict `after` (each one of
    `power.VERDICTS`)."""
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
    their verdicts. A row only one side has is an error: the two conditions must judge the same
    comparisons."""
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
    joined["change"] = [
        change(b, a) for b, a in zip(joined[f"verdict ({names[0]})"], joined[f"verdict ({names[1]})"])
    ]
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


def cell(row: Mapping) -> str:
    """A comparison's verdict in the verdict table's words (`analysis.verdict_table.WORDS`, else
    'undecided') and its effect, e.g. 'better +0.015'."""
    return f"{WORDS.get(row['verdict'], 'undecided')} {row['effect']:+.3f}"


def figure(by_condition: Mapping[str, pd.DataFrame], changed: pd.DataFrame, title: str) -> plt.Figure:
    """The matrix: one row per comparison of the reference (the first condition), one column per
    condition, coloured by the effect over the row's margin (clipped to +-`CLIP`), each cell's verdict
    word, effect and seeds written in it; a cell whose verdict reversed or appeared against the
    reference is framed (`FRAMES`)."""
    names = list(by_condition)
    reference = by_condition[names[0]]
    rows = [f"{r} ({k})" for r, k in zip(reference["row"], reference["kind"])]
    values = np.full((len(rows), len(names)), np.nan)
    words = [["" for _ in names] for _ in rows]
    for j, name in enumerate(names):
        for r in by_condition[name].to_dict("records"):
            key = f"{r['row']} ({r['kind']})"
            if key in rows:
                i = rows.index(key)
                values[i, j] = np.clip(r["effect"] / r["margin"], -CLIP, CLIP)
                words[i][j] = f"{cell(r)}\n({r['seeds']} seeds)"
    fig, ax = plt.subplots(figsize=(2.3 * len(names) + 2.5, 0.55 * len(rows) + 1.6))
    image = ax.imshow(values, cmap="RdBu", vmin=-CLIP, vmax=CLIP, aspect="auto")
    for i, line in enumerate(words):
        for j, text in enumerate(line):
            dark = np.isfinite(values[i, j]) and abs(values[i, j]) > 0.6 * CLIP  # white on the darkest cells
            ax.text(j, i, text, ha="center", va="center", fontsize=6, color="white" if dark else "black")
    for r in changed.to_dict("records"):
        key = f"{r['row']} ({r['kind']})"
        if r["change"] in FRAMES and key in rows:
            i, j = rows.index(key), names.index(r["condition"])
            frame = plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, lw=2, ls=FRAMES[r["change"]])
            ax.add_patch(frame)
    ax.set_xticks(range(len(names)), names, fontsize=8)
    ax.set_yticks(range(len(rows)), rows, fontsize=7)
    fig.colorbar(image, ax=ax, label="effect / margin on the headline score (clipped)")
    ax.set_title(
        f"{title}: verdict, paired effect (seeds); framed: reversed (solid) or appeared (dashed) "
        f"against {names[0]}",
        fontsize=8,
    )
    return fig
