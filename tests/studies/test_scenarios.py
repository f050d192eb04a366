"""The scenario study's design: each bed is the study base with its own changes and nothing else, on
every arm of the scheme study; the arms a bed's check reads are always trained; the matrix marks a
verdict that reverses on a bed, and its markdown says how many rows changed category and each bed's
margin."""

import pandas as pd
import pytest

from grpo_lab.analysis import reversals
from grpo_lab.analysis.power import BETTER, NO_DIFFERENCE, SIGN, UNDECIDED, WORSE, word
from grpo_lab.studies import scenarios, schemes


@pytest.mark.parametrize("profile", ["smoke", "full"])
def test_each_bed_changes_only_its_own_fields_on_every_arm(profile):
    settings = scenarios.settings(profile)
    base = {p.label: p.config for p in schemes.design(settings, schemes.SCHEMES)}
    for name, points in scenarios.design(settings).items():
        changes = dict(scenarios.SCENARIOS[name].changes)
        for point in points:
            on_base = base[point.label].to_dict()
            differs = {k: v for k, v in point.config.to_dict().items() if on_base[k] != v}
            assert set(differs) <= set(changes), (name, point.label)
            assert all(getattr(point.config, k) == v for k, v in changes.items()), (name, point.label)


def test_every_bed_trains_what_its_check_reads_and_every_scheme_under_the_full_profile():
    smoke, full = scenarios.settings("smoke"), scenarios.settings("full")
    for name, points in scenarios.design(smoke).items():
        assert set(scenarios.SCENARIOS[name].needs) <= {p.label for p in points}
    for points in scenarios.design(full).values():
        assert {p.label for p in points} == set(schemes.SCHEMES)


def test_a_check_without_the_arm_it_reads_is_an_error():
    metrics = pd.DataFrame({"label": ["grpo", "grpo_no_kl"], "seed": [0, 0], "step": [0, 0]})
    with pytest.raises(ValueError, match="needs the runs of 'dr_grpo'"):
        scenarios.SCENARIOS["long answers"].check(metrics)
    with pytest.raises(ValueError, match="needs the runs of 'grpo_no_kl'"):  # the matched reading
        scenarios.SCENARIOS["long answers"].check(metrics[metrics["label"] == "grpo"])


def test_the_matrix_sets_each_bed_beside_the_base_and_marks_a_reversal():
    def rows(*verdicts):
        return pd.DataFrame(
            [
                {"row": r, "kind": "scheme", "effect": e, "ci_low": e, "ci_high": e, "seeds": 3,
                 "margin": 0.01, "verdict": v}
                for r, e, v in verdicts
            ]
        )  # fmt: skip

    by_bed = {
        scenarios.BASE: rows(("dapo", 0.02, BETTER), ("cispo", -0.03, WORSE)),
        "sparse reward": rows(("dapo", -0.02, WORSE), ("cispo", 0.0, NO_DIFFERENCE)),
    }
    found = scenarios.matrix(by_bed).set_index("row")
    assert set(found["condition"]) == {"sparse reward"}
    assert found.loc["dapo", "change"] == reversals.REVERSED
    assert found.loc["cispo", "change"] == reversals.VANISHES


def test_the_matrix_markdown_says_what_changed_category_and_each_beds_margin():
    def rows(margin, *verdicts):
        return pd.DataFrame(
            [
                {"row": r, "kind": "scheme", "effect": e, "ci_low": e - 0.001, "ci_high": e + 0.001,
                 "confidence": 0.95, "df": 2, "seeds": 3, "margin": margin, "verdict": v}
                for r, e, v in verdicts
            ]
        )  # fmt: skip

    base = (("dapo", -0.02, WORSE), ("cispo", -0.07, WORSE), ("gspo", 0.0, UNDECIDED))
    bed = (("dapo", -0.02, WORSE), ("cispo", 0.0, NO_DIFFERENCE), ("gspo", 0.0, UNDECIDED))
    by_bed = {scenarios.BASE: rows(0.007, *base), "sparse reward": rows(0.011, *bed)}
    text = scenarios.matrix_markdown(pd.DataFrame(), by_bed, scenarios.matrix(by_bed))
    caption, said, table = text.split("\n\n", 2)
    assert caption.startswith(scenarios.FAMILY.caption(3))
    assert said == (
        "Against the base: no verdict reversed; 1 of 3 rows changed category (cispo (scheme) worse to "
        "no difference, vanishes). In bold: a verdict whose category changed against the base's (changes "
        "read from the raw words)."
    )
    assert "| (margin) | | margin 0.007 | margin 0.011 |" in table
    assert "| cispo | scheme | worse -0.070 | **no difference +0.000** (vanishes) |" in table
    assert "| dapo | scheme | worse -0.020 | worse -0.020 (held) |" in table


def verdict_rows(rows, margin: float = 0.01, seeds: int = 6) -> pd.DataFrame:
    """Verdict rows of (row, effect, half-width of the 95% interval), their words read off the
    intervals, every column `verdict_table.table_markdown` reads."""
    frame = pd.DataFrame(
        [
            {"row": r, "kind": "scheme", "protocol": "paired", "effect": e, "ci_low": e - h, "ci_high": e + h,
             "confidence": 0.95, "df": seeds - 1, "seeds": seeds, "margin": margin, "mde": 0.02,
             "mde / gain": 0.5, "greedy effect": 0.0, "greedy ci_low": -0.01, "greedy ci_high": 0.01,
             "activity": 1.0, "entropy change": -0.2, "reference entropy change": -0.2,
             "reward_variance x": 1.0, "cost x": 1.0}
            for r, e, h in rows
        ]
    )  # fmt: skip
    return frame.assign(verdict=[word(lo, hi, margin) for lo, hi in zip(frame["ci_low"], frame["ci_high"])])


NULL_BED = [(f"s{i}", e, 0.03) for i, e in enumerate([0.0, 0.004, -0.006, 0.002, -0.001, 0.005, 0.0, -0.003])]
"""eight rows whose intervals hold 0 with room to spare"""


def test_null_cells_that_say_a_direction_raw_do_not_once_the_beds_are_one_family():
    """Two beds of ten rows where nothing acts: two rows' raw intervals just exclude 0 (p about 0.03,
    what chance gives about once in 30 null rows), a 'worse' of size unsure; over the 20 bed cells Holm
    takes that back, while the base keeps its words (notebook 12's family) and every cell says both."""
    chance = [("s8", -0.02, 0.018), ("s9", 0.0, 0.03)]
    bed = verdict_rows([*NULL_BED, *chance])
    other = verdict_rows([*NULL_BED, ("s8", 0.0, 0.03), ("s9", 0.02, 0.018)])
    base = verdict_rows([*NULL_BED, ("s8", 0.0, 0.03), ("s9", 0.0, 0.03)])
    by_bed = scenarios.adjusted({scenarios.BASE: base, "sparse reward": bed, "long answers": other})
    assert "adjusted verdict" not in by_bed[scenarios.BASE]
    assert scenarios.family_size(by_bed) == 20
    for name in ("sparse reward", "long answers"):
        directed = by_bed[name]["verdict"].isin(SIGN)
        assert directed.sum() == 1  # chance alone
        assert not by_bed[name]["adjusted verdict"].isin(SIGN).any()
    text = scenarios.matrix_markdown(pd.DataFrame(), by_bed, scenarios.matrix(by_bed))
    assert text.startswith(
        "family: every scheme row on every bed of the matrix, the base column not among them "
        "(20 comparisons); Holm (family-wise error rate) at 0.05"
    )
    assert "the base column's words are raw (notebook 03's rows" in text.split("\n\n")[0]
    assert "| s8 | scheme | undecided +0.000 | **worse, size unsure → undecided -0.020** (appears) |" in text
    assert (
        "| s9 | scheme | undecided +0.000 | undecided +0.000 (open) | **better, size unsure → undecided"
        in text
    )
    # beds not yet adjusted (not from `tables`) are adjusted by the markdown itself, the same way
    raw = {scenarios.BASE: base, "sparse reward": bed, "long answers": other}
    assert scenarios.matrix_markdown(pd.DataFrame(), raw, scenarios.matrix(raw)) == text


def test_tables_adjust_the_beds_together_and_leave_the_base(monkeypatch):
    """`tables` reads each result's rule table (here hand-made) and adjusts the beds as one family."""
    chance = verdict_rows([*NULL_BED, ("s8", -0.02, 0.018)])
    quiet = verdict_rows([*NULL_BED, ("s8", 0.0, 0.03)])
    made = {"base": quiet, "bed one": chance, "bed two": quiet}
    monkeypatch.setattr(scenarios.sequential_seeds, "rule_table", lambda result, settings: made[result])
    by_bed = scenarios.tables({"bed one": "bed one", "bed two": "bed two"}, None, "base", None)
    assert list(by_bed) == [scenarios.BASE, "bed one", "bed two"]
    assert by_bed[scenarios.BASE].equals(quiet)
    assert scenarios.family_size(by_bed) == 18
    row = by_bed["bed one"].set_index("row").loc["s8"]
    assert (row["verdict"], row["adjusted verdict"]) == ("worse, size unsure", "undecided")
