"""How a verdict changes between two conditions: every pair of verdicts reads as one change, two
tables that judge different comparisons are refused rather than silently matched, every changed
category is marked, framed in its change's own style and counted in words, and the matrix is coloured
on one scale in score units for every column, the margins marked."""

import matplotlib.colors as mcolors
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from grpo_lab.analysis import reversals
from grpo_lab.analysis.power import (
    BETTER,
    BETTER_UNSURE,
    NO_DIFFERENCE,
    TOO_FEW_SEEDS,
    UNDECIDED,
    WORSE,
    WORSE_UNSURE,
)


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        (BETTER, BETTER, reversals.HELD),
        (WORSE, WORSE, reversals.HELD),
        (BETTER, WORSE, reversals.REVERSED),
        (WORSE, BETTER, reversals.REVERSED),
        (NO_DIFFERENCE, BETTER, reversals.APPEARS),
        (UNDECIDED, WORSE, reversals.APPEARS),
        (BETTER, BETTER_UNSURE, reversals.HELD),
        (WORSE_UNSURE, BETTER, reversals.REVERSED),
        (NO_DIFFERENCE, WORSE_UNSURE, reversals.APPEARS),
        (BETTER_UNSURE, NO_DIFFERENCE, reversals.VANISHES),
        (WORSE, NO_DIFFERENCE, reversals.VANISHES),
        (UNDECIDED, NO_DIFFERENCE, reversals.SETTLED),
        (BETTER, UNDECIDED, reversals.OPEN),
        (NO_DIFFERENCE, TOO_FEW_SEEDS, reversals.OPEN),
    ],
)
def test_each_pair_of_verdicts_reads_as_one_change(before, after, expected):
    assert reversals.change(before, after) == expected


def verdict_rows(*rows: tuple[str, str, float, str]) -> pd.DataFrame:
    """Verdict-table rows (row, kind, effect, verdict) with the other carried columns filled."""
    return pd.DataFrame(
        [
            {"row": r, "kind": k, "effect": e, "ci_low": e - 0.01, "ci_high": e + 0.01, "seeds": 3,
             "margin": 0.005, "verdict": v}
            for r, k, e, v in rows
        ]
    )  # fmt: skip


def test_the_table_matches_rows_and_names_each_side():
    before = verdict_rows(("dapo", "scheme", 0.02, BETTER), ("cispo", "scheme", -0.03, WORSE))
    after = verdict_rows(("cispo", "scheme", 0.01, BETTER), ("dapo", "scheme", 0.02, BETTER))
    found = reversals.table(before, after, ("60 steps", "600 steps")).set_index("row")
    assert list(found.index) == ["dapo", "cispo"]  # before's order
    assert (
        found.loc["cispo", "change"] == reversals.REVERSED and found.loc["dapo", "change"] == reversals.HELD
    )
    assert (
        found.loc["cispo", "effect (60 steps)"] == -0.03 and found.loc["cispo", "effect (600 steps)"] == 0.01
    )


def test_tables_that_judge_different_comparisons_are_refused():
    before = verdict_rows(("dapo", "scheme", 0.02, BETTER))
    after = verdict_rows(("dapo", "scheme vs grpo_no_kl", 0.02, BETTER))
    with pytest.raises(ValueError, match="rows in one table only.*dapo \\(scheme\\)"):
        reversals.table(before, after, ("a", "b"))
    with pytest.raises(ValueError, match="different names"):
        reversals.table(before, before, ("a", "a"))
    with pytest.raises(ValueError, match="lacks the columns \\['margin'\\]"):
        reversals.table(before.drop(columns="margin"), before, ("a", "b"))


def test_the_table_marks_every_changed_category_apart_from_the_change():
    before = verdict_rows(
        ("a", "scheme", 0.02, BETTER),
        ("b", "scheme", 0.02, BETTER),
        ("c", "scheme", 0.0, UNDECIDED),
        ("d", "scheme", 0.02, WORSE),
    )
    after = verdict_rows(
        ("a", "scheme", 0.01, BETTER_UNSURE),
        ("b", "scheme", 0.02, BETTER),
        ("c", "scheme", 0.0, TOO_FEW_SEEDS),
        ("d", "scheme", 0.0, UNDECIDED),
    )
    found = reversals.table(before, after, ("x", "y")).set_index("row")
    assert list(found["change"]) == [reversals.HELD, reversals.HELD, reversals.OPEN, reversals.OPEN]
    # the size became unsure; nothing changed; undecided reads as undecided either way; decided, then not
    assert list(found[reversals.CATEGORY_CHANGED]) == [True, False, False, True]


def conditions(*columns: tuple[str, float, tuple[tuple[str, float, str], ...]]) -> dict[str, pd.DataFrame]:
    """Verdict tables by condition, each (name, margin, rows (row, effect, verdict)) of kind 'scheme'."""
    out = {}
    for name, margin, rows in columns:
        table = verdict_rows(*((r, "scheme", e, v) for r, e, v in rows))
        out[name] = table.assign(margin=margin)
    return out


def test_the_figure_colours_every_column_on_one_scale_in_score_units_with_the_margins_marked():
    short = (("dr_grpo", -0.020, WORSE), ("dapo", -0.020, WORSE), ("same", -0.03, WORSE))
    long = (("dr_grpo", -0.092, WORSE), ("dapo", -0.073, WORSE), ("same", -0.03, WORSE_UNSURE))
    by = conditions(("60 steps", 0.007, short), ("800 steps", 0.053, long))
    fig = reversals.figure(by, reversals.matrix(by), "t")
    ax = fig.axes[0]
    (image,) = ax.images
    rgba = image.to_rgba(np.ma.masked_invalid(image.get_array()))
    assert np.allclose(image.get_array()[:, 0], [-0.020, -0.020, -0.03])  # the effect, not over the margin
    assert np.allclose(rgba[2, 0], rgba[2, 1])  # one effect, one colour, whatever the column's margin
    assert rgba[0, 1, :3].sum() < rgba[0, 0, :3].sum()  # -0.092 at 800 steps: darker than -0.020 at 60
    assert image.norm.vmin == -image.norm.vmax == -reversals.SCALE_MARGINS * 0.053
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == ["60 steps\nmargin 0.007", "800 steps\nmargin 0.053"]
    texts = [t.get_text() for t in ax.texts]
    assert "worse -0.092\n3 seeds, margin 0.053" in texts  # the margins differ, so each cell says its own
    bar = fig.axes[1]
    marked = sorted(round(y, 6) for line in bar.lines for y in line.get_ydata())
    assert marked == [-0.053, -0.053, -0.007, -0.007, 0.007, 0.007, 0.053, 0.053]
    assert "one scale for every column" in " ".join(bar.get_ylabel().split())
    plt.close(fig)


def test_one_margin_for_the_whole_figure_is_said_once_not_in_every_cell():
    by = conditions(("a", 0.01, (("dapo", 0.02, BETTER),)), ("b", 0.01, (("dapo", 0.02, BETTER),)))
    fig = reversals.figure(by, reversals.matrix(by), "t")
    assert [t.get_text() for t in fig.axes[0].texts] == ["better +0.020\n(3 seeds)"] * 2
    plt.close(fig)


def test_every_changed_category_is_framed_in_its_own_style_and_named_in_the_legend():
    # row: (reference verdict, condition verdict, its change or None where the category held)
    cases = {
        "reversed": (BETTER, WORSE, reversals.REVERSED),
        "appears": (UNDECIDED, BETTER, reversals.APPEARS),
        "vanishes": (WORSE, NO_DIFFERENCE, reversals.VANISHES),
        "settled": (UNDECIDED, NO_DIFFERENCE, reversals.SETTLED),
        "size": (BETTER, BETTER_UNSURE, reversals.HELD),
        "lost": (WORSE_UNSURE, UNDECIDED, reversals.OPEN),
        "kept": (WORSE, WORSE, None),
        "still open": (UNDECIDED, TOO_FEW_SEEDS, None),
    }
    by = conditions(
        ("ref", 0.01, tuple((r, 0.0, b) for r, (b, _, _) in cases.items())),
        ("other", 0.01, tuple((r, 0.0, a) for r, (_, a, _) in cases.items())),
    )
    fig = reversals.figure(by, reversals.matrix(by), "t")
    ax = fig.axes[0]
    frames = {}
    for patch in ax.patches:
        row = round(patch.get_y() + patch.get_height() / 2)
        assert round(patch.get_x() + patch.get_width() / 2) == 1  # only the condition's column
        frames[list(cases)[row]] = (patch.get_edgecolor(), patch.get_linestyle(), patch.get_linewidth())
    assert set(frames) == {r for r, (_, _, c) in cases.items() if c}
    for row, (_, _, kind) in cases.items():
        if kind:
            colour, style, width = reversals.FRAMES[kind]
            assert frames[row] == (mcolors.to_rgba(colour), style, width), row
    assert len(set(reversals.FRAMES.values())) == len(reversals.CHANGES)  # one style per change
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == [f"{reversals.FRAME_LABELS[c]} (1)" for c in reversals.FRAMES]
    plt.close(fig)


def test_the_summary_counts_every_changed_category_and_names_every_reversal():
    by = conditions(
        ("60 steps", 0.01, (("a", 0.0, UNDECIDED), ("b", -0.02, WORSE), ("c", -0.02, WORSE))),
        ("800 steps", 0.05, (("a", 0.0, NO_DIFFERENCE), ("b", -0.09, WORSE), ("c", -0.03, WORSE_UNSURE))),
    )
    changed = reversals.matrix(by)
    assert reversals.summary(changed) == "no verdict reversed; 2 of 3 rows changed category"
    assert reversals.summary(changed, listed=True) == (
        "no verdict reversed; 2 of 3 rows changed category (a (scheme) undecided to no difference, settled; "
        "c (scheme) worse to worse, size unsure, held)"
    )
    fig = reversals.figure(by, changed, "t")
    assert "no verdict reversed; 2 of 3 rows changed category" in " ".join(fig.axes[0].get_title().split())
    plt.close(fig)
    by["bed"] = by["800 steps"].assign(verdict=[BETTER, BETTER, WORSE])
    several = reversals.summary(reversals.matrix(by))
    assert several == (
        "1 verdict reversed (b (scheme) on bed); rows that changed category: 2 of 3 on 800 steps, "
        "2 of 3 on bed"
    )
