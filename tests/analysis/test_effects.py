"""Effects against a reference: Welch's difference interval and the verdict table."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from grpo_lab.analysis import effects


def test_difference_interval_is_welchs_test():
    rng = np.random.default_rng(0)
    x, y = rng.normal(1.0, 1.0, 5), rng.normal(0.0, 3.0, 7)
    diff, lo, hi, p = effects.difference_interval(x, y)
    test = stats.ttest_ind(x, y, equal_var=False)
    interval = test.confidence_interval(0.95)
    assert diff == pytest.approx(x.mean() - y.mean())
    assert (lo, hi) == pytest.approx((interval.low, interval.high))
    assert p == pytest.approx(test.pvalue)


def test_difference_interval_edge_cases():
    assert effects.difference_interval([1.0, 1.0], [2.0, 2.0]) == (-1.0, -1.0, -1.0, 0.0)  # no spread
    assert effects.difference_interval([2.0, 2.0], [2.0, 2.0]) == (0.0, 0.0, 0.0, 1.0)
    diff, lo, hi, p = effects.difference_interval([1.0, np.nan], [2.0, 3.0])  # one finite run
    assert diff == -1.5 and np.isnan([lo, hi, p]).all()


def finals_frame(groups: dict[str, list[float]]) -> pd.DataFrame:
    return pd.DataFrame(
        [{"label": g, "seed": s, "acc": v} for g, values in groups.items() for s, v in enumerate(values)]
    )


def test_versus_reference_verdicts_and_failed_runs():
    finals = finals_frame({
        "worse": [0.20, 0.22, 0.18],
        "all": [0.50, 0.52, 0.48],
        "same": [0.49, 0.53, 0.50],
        "better": [0.80, 0.81, 0.79],
    })  # fmt: skip
    runs = pd.DataFrame({
        "label": ["all"] * 3 + ["worse"] * 3 + ["same"] * 3 + ["better"] * 3 + ["broken"] * 3,
        "status": ["trained"] * 12 + ["failed"] * 3,
    })  # fmt: skip
    table = effects.versus_reference(finals, "acc", "label", "all", runs=runs).set_index("label")
    assert list(table.index) == [
        "all",
        "worse",
        "same",
        "better",
        "broken",
    ]  # reference first, then runs order
    assert table["verdict"].to_dict() == {
        "all": "reference", "worse": "lower", "same": "no clear change", "better": "higher",
        "broken": "no finished run",
    }  # fmt: skip
    assert table.loc["worse", "diff"] == pytest.approx(-0.30)
    assert table.loc["worse", "outside_reference"] and not table.loc["same", "outside_reference"]
    assert (table.loc["broken", "n"], table.loc["broken", "failed"]) == (0, 3)
    assert table.loc["all", "mean"] == pytest.approx(0.5)


def test_versus_reference_needs_a_finished_reference():
    finals = finals_frame({"all": [0.5, 0.6]})
    with pytest.raises(ValueError, match="reference 'none' has no finished run"):
        effects.versus_reference(finals, "acc", "label", "none")


def test_too_few_runs_have_no_verdict():
    table = effects.versus_reference(finals_frame({"all": [0.5, 0.6], "one": [0.4]}), "acc", "label", "all")
    assert table["verdict"].tolist() == ["reference", "too few runs"]
