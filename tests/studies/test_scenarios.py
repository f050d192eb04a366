"""The scenario study's design: each bed is the study base with its own changes and nothing else, on
every arm of the scheme study; the arms a bed's check reads are always trained; the matrix marks a
verdict that reverses on a bed, and its markdown says how many rows changed category and each bed's
margin."""

import pandas as pd
import pytest

from grpo_lab.analysis import reversals
from grpo_lab.analysis.power import BETTER, NO_DIFFERENCE, UNDECIDED, WORSE
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
                {"row": r, "kind": "scheme", "effect": e, "ci_low": e, "ci_high": e, "seeds": 3,
                 "margin": margin, "verdict": v}
                for r, e, v in verdicts
            ]
        )  # fmt: skip

    base = (("dapo", -0.02, WORSE), ("cispo", -0.07, WORSE), ("gspo", 0.0, UNDECIDED))
    bed = (("dapo", -0.02, WORSE), ("cispo", 0.0, NO_DIFFERENCE), ("gspo", 0.0, UNDECIDED))
    by_bed = {scenarios.BASE: rows(0.007, *base), "sparse reward": rows(0.011, *bed)}
    text = scenarios.matrix_markdown(pd.DataFrame(), by_bed, scenarios.matrix(by_bed))
    said, table = text.split("\n\n", 1)
    assert said == (
        "Against the base: no verdict reversed; 1 of 3 rows changed category (cispo (scheme) worse to "
        "no difference, vanishes). In bold: a verdict whose category changed against the base's."
    )
    assert "| (margin) | | margin 0.007 | margin 0.011 |" in table
    assert "| cispo | scheme | worse -0.070 | **no difference +0.000** (vanishes) |" in table
    assert "| dapo | scheme | worse -0.020 | worse -0.020 (held) |" in table
