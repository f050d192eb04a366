"""Sequential seeds under a group-sequential boundary: the boundary against published values, the
type I error under the null by simulation (and the naive rule's, to show the check can fail), early
stopping on a large effect, words read from the whole adjusted interval, no decision on
too few seeds or a zero-width interval, bad plans."""

import math

import numpy as np
import pandas as pd
import pytest

from grpo_lab.analysis import sequential
from grpo_lab.analysis.power import paired
from grpo_lab.analysis.sequential import Plan, decide, run_sequential, simulate

MARGIN = 0.05
PLAN = Plan(MARGIN)
"""the default plan: looks at 3, 6, 9, 12 and 15 seeds, O'Brien-Fleming-type spending"""
NULL_REPS = 200_000
"""comparisons per null simulation: at a type I error of 0.05 the Monte Carlo standard error is
sqrt(0.05 * 0.95 / 200000) = 0.00049, and the calibration aims at 0.0475 (`CALIBRATION_TARGET`) with
its own standard error of 0.00049, so an observed rate above 0.05 is more than 3.5 standard errors
away; the tests fix numpy seeds, so they are also reproducible"""


def test_the_obrien_fleming_spending_boundary_matches_the_published_values():
    """Lan-DeMets O'Brien-Fleming-type spending, five equal looks, two-sided 0.05: the z boundaries
    4.8769, 3.3569, 2.6803, 2.2898, 2.0310 (as tabulated, e.g., by the gsDesign R package)."""
    bounds = sequential.z_boundaries(PLAN, PLAN.looks(), final=True)
    assert bounds == pytest.approx([4.8769, 3.3569, 2.6803, 2.2898, 2.0310], abs=1e-3)


@pytest.mark.parametrize("boundary", sorted(sequential.SPENDING))
def test_a_known_variance_boundary_is_crossed_with_probability_alpha(boundary):
    """z statistics of a null Brownian motion at the looks (known variance) cross the boundary with
    probability alpha: 200,000 paths, Monte Carlo standard error 0.00049."""
    plan = Plan(MARGIN, min_seeds=3, block=2, max_seeds=12, boundary=boundary)
    n = np.asarray(plan.looks())
    z = np.random.default_rng(5).standard_normal((200_000, plan.max_seeds)).cumsum(axis=1)[
        :, n - 1
    ] / np.sqrt(n)
    crossed = (np.abs(z) >= sequential.z_boundaries(plan, plan.looks(), final=True)).any(axis=1).mean()
    assert crossed == pytest.approx(0.05, abs=0.0015)


@pytest.mark.parametrize("noise", sorted(sequential.NOISE))
@pytest.mark.parametrize("sd", [0.01, 0.05, 1.0])
def test_the_type_i_error_stays_at_or_below_alpha_under_the_null(noise, sd):
    """No true effect: the rate of 'better' or 'worse' is at most 0.05 (measured with sd 1: 0.047
    normal, 0.038 Laplace, 0.036 t3). An sd small against the margin lets futility stop comparisons
    early, which only lowers it (sd 0.05: 0.040 normal; sd 0.01: under 0.001, on about 6 seeds)."""
    result = simulate(PLAN, 0.0, sd, reps=NULL_REPS, seed=7, noise=noise)
    assert result.rejection <= 0.05
    assert result.mc_se == pytest.approx(math.sqrt(result.rejection * (1 - result.rejection) / NULL_REPS))
    if sd == 0.01:
        assert result.no_difference > 0.9 and result.expected_seeds < 10


@pytest.mark.parametrize(
    "plan",
    [Plan(MARGIN, min_seeds=3, block=1, max_seeds=10), Plan(MARGIN, boundary="pocock")],
    ids=["obrien_fleming-every-seed", "pocock"],
)
def test_other_plans_keep_the_type_i_error_at_or_below_alpha(plan):
    """The plans whose plain t conversion rejects most often (0.056 with a look at every seed from 3
    to 10, 0.055 for Pocock-type) are also held to 0.05 by the calibration."""
    assert simulate(plan, 0.0, 1.0, reps=NULL_REPS, seed=8).rejection <= 0.05


def test_naive_repeated_95_percent_intervals_inflate_the_type_i_error():
    """The same simulation of "add seeds until the 95% interval excludes 0" at the same five looks
    rejects a true null far more often than 0.05 (about 0.15; Armitage, McPherson & Rowe 1969): the
    check above can fail."""
    naive = simulate(PLAN, 0.0, 1.0, reps=NULL_REPS, seed=7, per_look=[0.05] * len(PLAN.looks()))
    assert naive.rejection > 0.12


@pytest.mark.parametrize("effect", [3.0, -3.0])
def test_a_large_effect_stops_early_with_the_right_sign(effect):
    """A true effect of 3 sd: every comparison decides the right sign, on about 7 seeds of the 15, most
    with the whole interval beyond the margin."""
    result = simulate(PLAN, effect, 1.0, reps=20_000, seed=9)
    up, down = result.better + result.better_unsure, result.worse + result.worse_unsure
    right, wrong = (up, down) if effect > 0 else (down, up)
    assert right > 0.999 and wrong == 0
    assert (result.better if effect > 0 else result.worse) > 0.95
    assert result.expected_seeds < 8 and result.stopped_early > 0.999


def test_decide_and_simulate_apply_the_same_rule():
    """Comparisons drawn as `simulate` draws them and decided look by look with `decide` give the
    rates that `simulate` reports."""
    plan = Plan(0.5, min_seeds=3, block=2, max_seeds=9)
    draws = 0.6 + np.random.default_rng(4).standard_normal((300, plan.max_seeds))
    decisions = []
    for row in draws:
        for n in plan.looks():
            look = decide(plan, row[:n])
            if look.decision != sequential.CONTINUE:
                break
        decisions.append(look.decision)
    counted = pd.Series(decisions).value_counts(normalize=True)
    result = simulate(plan, 0.6, 1.0, reps=300, seed=4)
    assert {k for k, v in counted.items() if v > 0} >= {"better", "better, size unsure", "no difference"}
    rates = {
        "better": result.better,
        "worse": result.worse,
        "better, size unsure": result.better_unsure,
        "worse, size unsure": result.worse_unsure,
        "no difference": result.no_difference,
        "undecided": result.undecided,
    }
    for decision, rate in rates.items():
        assert counted.get(decision, 0.0) == pytest.approx(rate)


def test_a_look_words_what_it_stopped_on_from_the_whole_adjusted_interval():
    """A sure effect of 0.01 (sd 0.002) against a margin of 0.05 stops at 6 seeds with an adjusted
    interval inside the margin: 'no difference', though it excludes 0. An effect of 0.05 (sd 0.01)
    stops on an interval that excludes 0 but crosses the margin: its size is unsure; against a margin
    of 0.02 the whole interval lies beyond it: 'better'. The type I error counts the directional words."""
    small = 0.01 + 0.002 * np.random.default_rng(3).standard_normal(6)
    look = decide(PLAN, small)
    assert look.decision == "no difference" and look.low > 0 and look.high < MARGIN
    d = 0.05 + 0.01 * np.random.default_rng(3).standard_normal(6)
    look = decide(PLAN, d)
    assert look.decision == "better, size unsure" and 0 < look.low < MARGIN < look.high
    assert "crosses" in look.reason
    assert decide(Plan(look.low / 2), d).decision == "better"
    assert decide(PLAN, -d).decision == "worse, size unsure"
    result = simulate(PLAN, 0.05, 0.01, reps=2000, seed=3)
    assert result.better_unsure > 0.5 and result.worse == result.worse_unsure == 0
    total = result.better + result.worse + result.better_unsure + result.worse_unsure
    assert result.rejection == pytest.approx(total)
    assert simulate(PLAN, 0.01, 0.002, reps=2000, seed=3).no_difference > 0.95


def test_a_look_reports_seeds_intervals_and_mde():
    d = pd.Series([0.12, 0.08, 0.15, 0.11, 0.09, 0.13], index=range(6))
    look = decide(PLAN, d)
    fixed = paired(d, pd.Series(0.0, index=d.index))
    assert look.seeds == 6 and look.look == 2 and look.effect == pytest.approx(fixed.effect)
    assert (look.plain_low, look.plain_high, look.mde) == pytest.approx((fixed.low, fixed.high, fixed.mde))
    assert look.low < look.plain_low and look.high > look.plain_high  # the adjusted interval is wider
    assert look.decision == "better, size unsure" and "excludes 0" in look.reason
    assert decide(Plan(0.03), d).decision == "better" and "beyond" in decide(Plan(0.03), d).reason
    assert look.level == pytest.approx(sequential.levels(PLAN, [3, 6])[-1])


def test_two_identical_seeds_and_zero_width_intervals_never_decide():
    """The smoke table's scheme_a: two seeds, identical scores. Then every seed identical (sd 0), and a
    shift that is the same on every seed up to rounding: no look decides, at the cap it is undecided."""
    two = decide(PLAN, pd.Series({0: 0.0, 1: 0.0}))
    assert (two.decision, two.look, two.seeds) == ("continue", 0, 2) and "min_seeds" in two.reason
    assert decide(PLAN, [0.0, 0.0], final=True).decision == "undecided"
    for n in PLAN.looks()[:-1]:
        look = decide(PLAN, np.zeros(n))
        assert look.decision == "continue" and "zero-width" in look.reason
    assert decide(PLAN, np.zeros(PLAN.max_seeds)).decision == "undecided"
    rounded = np.array([0.52, 0.2, 0.7, 0.33]) - np.array([0.22, -0.1, 0.4, 0.03])
    assert 0 < rounded.std(ddof=1) < 1e-15
    look = decide(PLAN, rounded)
    assert look.decision == "continue" and "zero-width" in look.reason
    assert simulate(PLAN, 0.1, 0.0, reps=50).undecided == 1.0  # +0.1 on every seed, no spread


def test_run_sequential_asks_for_blocks_until_a_decision():
    truth = 0.1 + 0.01 * np.random.default_rng(2).standard_normal(100)
    asked = []

    def differences_for(seeds: list[int]) -> pd.Series:
        asked.append(seeds)
        return pd.Series(truth[seeds], index=seeds)

    result = run_sequential(PLAN, differences_for, first_seed=10)
    assert asked[0] == [10, 11, 12] and all(len(block) == PLAN.block for block in asked[1:])
    assert result.decision == "better" and result.last.seeds == len(result.seeds) < PLAN.max_seeds
    assert [look.look for look in result.history] == list(range(1, len(result.history) + 1))
    assert all(look.decision == "continue" for look in result.history[:-1])
    assert list(result.differences.index) == list(result.seeds)


def test_run_sequential_identical_arms_reach_the_cap_undecided():
    result = run_sequential(PLAN, lambda seeds: pd.Series(0.0, index=seeds))
    assert result.decision == "undecided" and result.last.seeds == PLAN.max_seeds
    assert len(result.history) == len(PLAN.looks()) and all("zero-width" in h.reason for h in result.history)


def test_run_sequential_counts_only_the_seeds_that_ran():
    """Failed runs (NaN) do not count; a look without new seeds is skipped; the cap bounds the seeds
    asked for, and the boundary is that of the looks actually made."""

    def differences_for(seeds: list[int]) -> pd.Series:
        return pd.Series([math.nan if s in (1, 4, 5, 6, 7, 8) else 0.1 * (s % 3) for s in seeds], index=seeds)

    result = run_sequential(PLAN, differences_for)
    assert len(result.seeds) == PLAN.max_seeds and result.last.seeds == PLAN.max_seeds - 6
    assert [(h.look, h.seeds) for h in result.history] == [(0, 2), (1, 3), (2, 6), (3, 9)]
    assert result.last.level == pytest.approx(sequential.levels(PLAN, [3, 6, 9], final=True)[-1])
    assert result.last.decision in ("better", "better, size unsure", "undecided")
    with pytest.raises(ValueError, match="not asked for"):
        run_sequential(PLAN, lambda seeds: pd.Series(0.1, index=[s + 100 for s in seeds]))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"margin": 0.0}, "margin"),
        ({"margin": -0.1}, "margin"),
        ({"margin": math.nan}, "margin"),
        ({"margin": math.inf}, "margin"),
        ({"min_seeds": 2}, "min_seeds must be >= 3"),
        ({"min_seeds": 3.5}, "min_seeds must be an integer"),
        ({"block": 0}, "block"),
        ({"block": True}, "block must be an integer"),
        ({"min_seeds": 6, "max_seeds": 5}, "max_seeds"),
        ({"alpha": 0.0}, "alpha"),
        ({"alpha": 1.0}, "alpha"),
        ({"boundary": "pocok"}, "unknown boundary"),
    ],
)
def test_bad_plans_are_errors(change, message):
    with pytest.raises(ValueError, match=message):
        Plan(**{"margin": MARGIN, **change})


def test_bad_simulation_and_boundary_input_are_errors():
    with pytest.raises(ValueError, match="unknown noise"):
        simulate(PLAN, 0.0, 1.0, noise="cauchy")
    with pytest.raises(ValueError, match="one level per look"):
        simulate(PLAN, 0.0, 1.0, per_look=[0.05])
    with pytest.raises(ValueError, match="increasing"):
        sequential.z_boundaries(PLAN, [6, 3])
