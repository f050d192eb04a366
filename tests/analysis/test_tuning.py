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
    assert tuning.unsettled(means, "arm", sd=0.02) == {"clear": [], "close": [1 / 3]}
    means["n"] = 3  # three seeds: 3 x 0.02 x sqrt(2 / 3) = 0.049, still above 0.04
    assert tuning.settled(means, "arm", sd=0.02) == {"clear": True, "close": False}
    assert tuning.settled(means, "arm", sd=0.01) == {"clear": True, "close": True}
    assert tuning.settled(means, "arm", sd=float("nan")) == {"clear": False, "close": False}
    assert tuning.unsettled(means, "arm", sd=float("nan"))["clear"] == [1 / 3, 3.0]
    assert tuning.settled(MEANS.assign(n=1), "arm", sd=0.0)["low edge"] is False  # not bracketed


def test_a_lead_is_read_against_the_noise_of_each_rates_own_count():
    """0.04 ahead of a neighbour: within 3 x 0.02 x sqrt(1 / 1 + 1 / 3) = 0.069 when the neighbour has one
    seed and the best three, beyond 3 x 0.02 x sqrt(2 / 9) = 0.028 with nine seeds at each."""
    means = scan({"arm": {1 / 3: 0.46, 1.0: 0.50, 3.0: 0.10}}).assign(n=[1, 3, 1])
    assert tuning.unsettled(means, "arm", sd=0.02) == {"arm": [1 / 3]}
    assert tuning.settled(means.assign(n=9), "arm", sd=0.02) == {"arm": True}


def test_scan_means_read_each_rate_on_every_seed_stored_at_it():
    """grpo has seeds 0-2 at 3e-5 and seed 0 alone at 1e-5: each rate's mean is over its own runs."""
    scored = pd.DataFrame(
        [("grpo", 1.0, 3e-5, s, 0.45 + 0.01 * s, 0.8, 0.85) for s in (0, 1, 2)]
        + [("grpo", 1 / 3, 1e-5, 0, 0.38, 0.9, 0.82)],
        columns=["arm", "factor", "learning rate", "seed", "score", "greedy", "pass@4"],
    )
    means = tuning.scan_means(scored, "arm")
    assert list(means["factor"]) == [1 / 3, 1.0] and list(means["seeds"]) == [(0,), (0, 1, 2)]
    assert list(means["mean"]) == pytest.approx([0.38, 0.46])
    assert list(means["n"]) == [1, 3] and means["sd"].iloc[1] == pytest.approx(0.01)


def test_the_next_runs_extend_on_the_first_seed_and_add_a_seed_only_to_a_close_pair():
    """`close` leads x1/3 by 0.03 (within the noise) and x3 by 0.40 (beyond it): seed 1 goes to x1/3 and
    x1, not to x3; `half` already has seed 1 at its best, so only the neighbour takes it; `done` has every
    tuning seed at its close pair."""
    means = pd.DataFrame(
        [("edge", f, m, (0,), 1) for f, m in ((1 / 3, 0.40), (1.0, 0.30))]
        + [("close", f, m, (0,), 1) for f, m in ((1 / 3, 0.47), (1.0, 0.50), (3.0, 0.10))]
        + [("half", f, m, s, len(s)) for f, m, s in ((1 / 3, 0.47, (0,)), (1, 0.5, (0, 1)), (3, 0.1, (0,)))]
        + [("done", f, m, (0, 1), 2) for f, m in ((1 / 3, 0.47), (1.0, 0.50), (3.0, 0.10))],
        columns=["arm", "factor", "mean", "seeds", "n"],
    )
    reach = [3.0**k for k in range(-2, 2)]
    runs = tuning.next_runs(means, "arm", 0.02, (0, 1), reach)
    close = [("close", 1 / 3, 1), ("close", 1.0, 1), ("half", 1 / 3, 1)]
    assert runs == [("edge", pytest.approx(1 / 9), 0), *close]
    with pytest.raises(ValueError, match="edge's best rate lies at the scan's edge.*beyond the scan's reach"):
        tuning.next_runs(means, "arm", 0.02, (0, 1), [1 / 3, 1.0, 3.0])


def test_the_spread_leaves_out_a_rate_whose_runs_all_scored_alike():
    means = pd.DataFrame({"n": [3, 2, 2, 1], "sd": [0.02, 0.02, 0.0, float("nan")]})
    found = tuning.spread(means)
    assert found.sd == pytest.approx(0.02) and found.df == 3
