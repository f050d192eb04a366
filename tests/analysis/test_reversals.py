"""How a verdict changes between two conditions: every pair of verdicts reads as one change, and two
tables that judge different comparisons are refused rather than silently matched."""

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
