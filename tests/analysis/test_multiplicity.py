"""Error-rate control over a table's rows: Holm's and Benjamini-Hochberg's levels against hand
computations, p-values read off intervals (a sequential row's included), adjusted words that can only
be harder to reach, and the family-wise error rate held by simulation where the raw words fail it."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from grpo_lab.analysis import multiplicity
from grpo_lab.analysis.multiplicity import Family, adjust, benjamini_hochberg, holm, intervals, p_values
from grpo_lab.analysis.power import SIGN, paired, word


def test_holm_steps_down_until_a_row_fails_then_holds_that_level():
    p = [0.03, 0.001, 0.2, 0.012]
    # sorted: 0.001 <= 0.05/4, 0.012 <= 0.05/3, 0.03 > 0.05/2 fails: it and 0.2 get 0.025
    assert holm(p) == pytest.approx([0.025, 0.0125, 0.025, 0.05 / 3])
    passed = np.asarray(p) <= holm(p)
    assert passed.tolist() == [False, True, False, True]


def test_benjamini_hochberg_selects_up_to_the_largest_passing_rank():
    p = [0.03, 0.001, 0.2, 0.012]
    # k alpha / m: 0.0125, 0.025, 0.0375, 0.05; the 3rd smallest (0.03) passes 0.0375: R = 3
    assert benjamini_hochberg(p) == pytest.approx([0.0375] * 4)
    assert benjamini_hochberg([0.5, 0.9]) == pytest.approx([0.025, 0.025])  # none: alpha / m


def test_a_plain_rows_p_value_is_its_t_tests():
    rng = np.random.default_rng(0)
    c = pd.Series(rng.normal(size=6))
    t = c + 0.3 + 0.2 * pd.Series(rng.normal(size=6))
    e = paired(t, c)
    p = p_values([e.effect], [e.low], [e.high], [0.95], [e.n - 1])[0]
    assert p == pytest.approx(stats.ttest_rel(t, c).pvalue)


def test_a_sequential_rows_p_value_is_scaled_to_its_own_level():
    """An interval at 99% that just excludes 0 has p = alpha exactly after scaling."""
    half = stats.t.isf(0.005, 8) * 0.01
    p = p_values([half], [0.0], [2 * half], [0.99], [8])[0]
    assert p == pytest.approx(0.05)


def table(rows: list[tuple[float, float, float]], margin: float = 0.01) -> pd.DataFrame:
    """Rows of (effect, half-width, df) with 95% intervals and their raw words."""
    frame = pd.DataFrame(
        [
            {"effect": e, "ci_low": e - h, "ci_high": e + h, "confidence": 0.95, "df": d, "margin": margin}
            for e, h, d in rows
        ]
    )
    return frame.assign(verdict=[word(lo, hi, margin) for lo, hi in zip(frame.ci_low, frame.ci_high)])


def test_adjusted_intervals_are_wider_and_words_can_only_weaken():
    t = table([(0.03, 0.01, 5), (0.012, 0.011, 5), (0.001, 0.008, 5), (-0.02, 0.005, 5), (0.0, 0.2, 5)])
    out = adjust(t, Family("five rows"))
    assert (out["adjusted ci_low"] <= out["ci_low"] + 1e-15).all()
    assert (out["adjusted ci_high"] >= out["ci_high"] - 1e-15).all()
    assert (out["adjusted confidence"] > 0.95).all()
    assert out["verdict"].tolist()[:2] == ["better", "better, size unsure"]
    assert out["adjusted verdict"].tolist()[1] == "undecided"  # p = 0.04 fails Holm's 0.05/4
    assert multiplicity.family_size(out) == 5


def test_a_row_with_too_few_seeds_or_a_zero_width_interval_is_outside_the_family():
    t = table([(0.03, 0.01, 5), (0.01, 0.0, 5)]).assign(verdict=["better", "undecided"])
    t.loc[2] = {"effect": 0.1, "ci_low": np.nan, "ci_high": np.nan, "confidence": 0.95, "df": 1,
                "margin": 0.01, "verdict": "too few seeds"}  # fmt: skip
    out = adjust(t, Family("three rows", "bh"))
    assert multiplicity.family_size(out) == 1
    assert out["adjusted verdict"].tolist() == ["better", "undecided", "too few seeds"]


def test_an_empty_table_has_a_family_of_none():
    empty = pd.DataFrame(columns=["row", "verdict", "adjusted verdict", "p"])  # pandas: object columns
    assert multiplicity.family_size(empty) == 0
    assert multiplicity.family_size(pd.DataFrame({"p": [None, 0.2]})) == 1


def test_bad_controls_and_tables_are_refused():
    with pytest.raises(ValueError, match="unknown error-rate control 'sidak'; valid: holm, bh, bonferroni"):
        Family("rows", "sidak")
    with pytest.raises(ValueError, match=r"needs the columns \['df'\]"):
        adjust(table([(0.1, 0.01, 3)]).drop(columns="df"), Family("rows"))


@pytest.mark.parametrize("control", ["holm", "bh", "bonferroni"])
def test_the_family_wise_error_rate_holds_where_raw_words_do_not(control):
    """40 null comparisons of 5 seeds each, 2,000 tables: raw 95% intervals say a direction somewhere
    in most tables; adjusted ones in at most alpha of them (BH equals the FWER under the global null)."""
    rng = np.random.default_rng(1)
    raw = adjusted = 0
    for _ in range(2000):
        d = rng.normal(size=(40, 5))
        e, sd = d.mean(axis=1), d.std(axis=1, ddof=1)
        half = stats.t.isf(0.025, 4) * sd / np.sqrt(5)
        frame = table([(a, h, 4) for a, h in zip(e, half)], margin=0.1)
        out = adjust(frame, Family("null rows", control))
        raw += out["verdict"].isin(list(SIGN)).any()
        adjusted += out["adjusted verdict"].isin(list(SIGN)).any()
    assert raw / 2000 > 0.8 and adjusted / 2000 <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / 2000)


def test_bonferroni_gives_every_row_the_same_simultaneous_level():
    """Every row of m at alpha / m, small p or large: the intervals are simultaneous, so the row Holm
    tests second (at alpha / (m - 1)) is wider under Bonferroni."""
    rows = table([(0.10, 0.01, 5), (0.02, 0.01, 5), (0.0, 0.01, 5)])
    out = adjust(rows, Family("rows", "bonferroni"))
    assert np.allclose(out["adjusted confidence"], 1 - 0.05 / 3)
    holm_out = adjust(rows, Family("rows", "holm"))
    second = out["p"].sort_values().index[1]
    assert out.loc[second, "adjusted ci_low"] < holm_out.loc[second, "adjusted ci_low"]


def test_intervals_leave_a_row_outside_the_family_as_it_was():
    found = intervals(
        [0.1] * 3,
        [0.05] * 3,
        [0.15] * 3,
        [0.95] * 3,
        [4] * 3,
        Family("rows", "bonferroni"),
        [True, False, True],
    )
    assert list(found["member"]) == [True, False, True]
    assert found.loc[1, "adjusted ci_low"] == 0.05 and found.loc[1, "adjusted confidence"] == 0.95
    assert np.isclose(found.loc[0, "adjusted confidence"], 1 - 0.05 / 2)
    assert found.loc[0, "adjusted ci_low"] < 0.05
