"""The 'problem present' checks of a test bed, on hand-made logs: each says present only past its
bound, and a bed that does not log the figure is an error, not an absent problem."""

import numpy as np
import pandas as pd
import pytest

from grpo_lab.analysis import problems


def runs(seeds: int = 4, steps: int = 20, **columns) -> pd.DataFrame:
    """`seeds` runs of `steps` training steps; each column a function (seed, step) -> value."""
    rows = [
        {"seed": s, "step": t, **{name: fn(s, t) for name, fn in columns.items()}}
        for s in range(seeds)
        for t in range(steps)
    ]
    return pd.DataFrame(rows)


def test_the_length_bias_is_present_when_grpos_incorrect_answers_end_longer_from_one_start():
    grpo = runs(**{problems.INCORRECT_LENGTH: lambda s, t: 20 + 0.5 * t + 0.1 * s})
    dr = runs(**{problems.INCORRECT_LENGTH: lambda s, t: 20 + 0.1 * t + 0.02 * s * t})
    found = problems.length_bias(grpo, dr)
    # the last 4 of 20 steps (t = 16..19): grpo 28.75 + 0.1 s, dr_grpo 21.75 + 0.35 s, over seeds 0-3
    assert found.present and found.low > 0 and found.value == pytest.approx(7 - 0.25 * 1.5)
    assert not problems.length_bias(dr, grpo).present  # the other way round: no bias


def test_a_sparse_bed_has_most_groups_without_signal_early():
    sparse = runs(frac_reward_zero_std=lambda s, t: 0.7 - 0.02 * t + 0.01 * s)
    dense = runs(frac_reward_zero_std=lambda s, t: 0.4 + 0.01 * s)
    assert problems.sparse_signal(sparse).present and not problems.sparse_signal(dense).present
    assert problems.sparse_signal(dense).value == pytest.approx(0.415)


def test_inconsistency_needs_the_gap_above_its_bound_on_every_seed():
    stale = runs(**{"is/logp_gap_mean": lambda s, t: 0.05 + 0.005 * s})
    same = runs(**{"is/logp_gap_mean": lambda s, t: 0.0})
    assert problems.inconsistency(stale).present and not problems.inconsistency(same).present
    table = problems.table([problems.inconsistency(stale), problems.inconsistency(same)])
    assert table["present"].tolist() == [True, False] and np.isfinite(table["value"]).all()


def test_a_bed_without_the_logged_figure_is_an_error():
    with pytest.raises(ValueError, match="do not log 'frac_reward_zero_std'"):
        problems.sparse_signal(runs(reward=lambda s, t: 0.1))
