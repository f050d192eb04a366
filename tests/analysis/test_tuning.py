"""A learning-rate scan's best rate, whether a lower score lies on each side of it, and which rate the
scan needs next when it does not."""

import pandas as pd
import pytest

from grpo_lab.analysis import tuning


def scan(means: dict[str, dict[float, float]]) -> pd.DataFrame:
    return pd.DataFrame(
        [{"arm": arm, "factor": f, "mean": m} for arm, by in means.items() for f, m in by.items()]
    )


MEANS = scan(
    {
        "inside": {1 / 3: 0.30, 1.0: 0.40, 3.0: 0.35},
        "low edge": {1 / 3: 0.45, 1.0: 0.40, 3.0: 0.10},
        "high edge": {1 / 3: 0.20, 1.0: 0.30, 3.0: 0.31},
        "alone": {1.0: 0.4},
        "unfinished": {1 / 9: float("nan"), 1 / 3: 0.2, 1.0: 0.3, 3.0: 0.1},
    }
)


def test_the_best_rate_is_bracketed_only_with_a_lower_score_on_each_side():
    assert tuning.best_rates(MEANS, "arm") == {
        "inside": 1.0, "low edge": 1 / 3, "high edge": 3.0, "alone": 1.0, "unfinished": 1.0
    }  # fmt: skip
    assert tuning.bracketed(MEANS, "arm") == {
        "inside": True, "low edge": False, "high edge": False, "alone": False, "unfinished": True
    }  # fmt: skip


def test_the_scan_extends_one_step_beyond_the_edge_its_best_rate_lies_at():
    after = tuning.extension(MEANS, "arm")
    assert after["inside"] is None and after["unfinished"] is None  # a run without a score is no rate
    assert after["low edge"] == pytest.approx(1 / 9) and after["high edge"] == pytest.approx(9.0)
    assert after["alone"] == pytest.approx(1 / 3)  # a single rate: the lab's shared rates ran high


def test_a_tie_with_a_neighbour_does_not_bracket():
    tied = scan({"flat": {1 / 3: 0.3, 1.0: 0.3, 3.0: 0.2}})
    assert tuning.bracketed(tied, "arm") == {"flat": False}
    assert tuning.extension(tied, "arm")["flat"] == pytest.approx(1 / 9)


def test_factors_are_named_as_the_scans_print_them():
    names = [tuning.factor_name(f) for f in (1 / 81, 1 / 9, 1 / 3, 1.0, 3.0, 9.0, 0.5)]
    assert names == ["x1/81", "x1/9", "x1/3", "x1", "x3", "x9", "x0.5"]


def test_a_bracket_is_settled_only_by_a_lead_beyond_the_seed_noise():
    means = scan({"clear": {1 / 3: 0.30, 1.0: 0.50, 3.0: 0.10}, "close": {1 / 3: 0.46, 1.0: 0.50, 3.0: 0.10}})
    means["n"] = 1
    # a lead of 0.20 against 3 x 0.02 x sqrt(2) = 0.085 on one seed; a lead of 0.04 is within it
    assert tuning.settled(means, "arm", sd=0.02) == {"clear": True, "close": False}
    means["n"] = 3  # three seeds: 3 x 0.02 x sqrt(2 / 3) = 0.049, still above 0.04
    assert tuning.settled(means, "arm", sd=0.02) == {"clear": True, "close": False}
    assert tuning.settled(means, "arm", sd=0.01) == {"clear": True, "close": True}
    assert tuning.settled(means, "arm", sd=float("nan")) == {"clear": False, "close": False}
    assert tuning.settled(MEANS.assign(n=1), "arm", sd=0.0)["low edge"] is False  # not bracketed
