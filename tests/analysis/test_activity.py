"""The activity measures on hand-made run logs: each scheme is measured by its own mechanisms, a
length-weighted aggregation by the change it makes to the loss weights, and every preset that
weighs sequences by their length says so."""

import pandas as pd
import pytest

from grpo_lab.analysis.activity import (
    ACTIVITY,
    CISPO_CAP,
    EQUAL_SEQUENCE_WEIGHTS,
    MECHANISMS,
    REWEIGHTING,
    activity,
    mechanism_activity,
)
from grpo_lab.presets import PRESETS, TRICKS, preset


def run_log(**columns) -> pd.DataFrame:
    """Two training steps with the given columns, then the final validation row (no reward)."""
    rows = pd.DataFrame({"step": [0, 1], "reward": [0.1, 0.2], **columns})
    return pd.concat([rows, pd.DataFrame({"step": [2], "val/accuracy": [0.5]})], ignore_index=True)


LENGTHS = {
    "completions/min_length": [10.0, 20.0],
    "completions/max_length": [30.0, 20.0],
    "completions/mean_length": [20.0, 20.0],
}
"""a batch of lengths 10 to 30 (mean 20), then one where every completion has 20 tokens"""


def test_a_length_weighted_aggregation_is_measured_by_the_range_of_its_weights():
    m = run_log(**LENGTHS)
    # token-mean weighs a sequence by L / mean L: from 0.5 to 1.5 on the first step, all 1 on the second
    assert REWEIGHTING.fn(m.iloc[:2], {"aggregation": "token-mean"}) == pytest.approx(0.5)
    assert activity("dr_grpo", m, preset("dr_grpo").to_dict()) == pytest.approx(0.5)
    assert activity("bnpo", m, preset("grpo").to_dict()) == 0  # seq-mean-token-mean: all weights equal
    equal = run_log(**{k: [20.0, 20.0] for k in LENGTHS})
    assert activity("bnpo", equal, preset("bnpo").to_dict()) == 0


def test_cispo_is_measured_by_the_share_of_tokens_its_cap_binds_on():
    m = run_log(**{"clip_ratio/region_mean": [0.04, 0.02], "ratio/std": [0.1, 0.2], **LENGTHS})
    assert ACTIVITY["cispo"] is CISPO_CAP
    assert activity("cispo", m, preset("cispo").to_dict()) == pytest.approx(0.03)
    inert = run_log(**{"clip_ratio/region_mean": [0.0, 0.0], "ratio/std": [0.1, 0.2], **LENGTHS})
    assert activity("cispo", inert, preset("cispo").to_dict()) == 0  # a spread ratio is not a binding cap


def test_each_mechanism_of_a_scheme_is_measured_and_the_first_heads_the_table():
    m = run_log(**{"clip_ratio/high_mean": [0.002, 0.0], "clip_ratio/region_mean": [0.01, 0.01], **LENGTHS})
    found = mechanism_activity("dapo_loss", m, preset("dapo_loss").to_dict())
    assert found == pytest.approx({"clip-higher": 0.001, "token-mean": 0.5})
    assert activity("dapo_loss", m, preset("dapo_loss").to_dict()) == found["clip-higher"]
    for name, measures in MECHANISMS.items():
        assert ACTIVITY[name] is next(iter(measures.values()))
    trick = run_log(**{"advantages/clipped_frac": [0.1, 0.3]})
    assert mechanism_activity("adv_clip", trick, {}) == pytest.approx({"adv_clip": 0.2})
    with pytest.raises(ValueError, match="no activity measure for 'nope'"):
        mechanism_activity("nope", m, {})


def test_the_full_dapo_recipe_measures_its_sampling_and_shaping_too():
    """dapo's own mechanisms are dapo_loss's and the two tricks it adds, each by the trick's measure."""
    m = run_log(
        **{
            "clip_ratio/high_mean": [0.002, 0.0],
            "sampling/dropped_groups": [3.0, 1.0],
            "length/overlong_frac": [0.1, 0.0],
            **LENGTHS,
        }
    )
    found = mechanism_activity("dapo", m, preset("dapo").to_dict())
    assert found == pytest.approx(
        {"clip-higher": 0.001, "dynamic sampling": 2.0, "token-mean": 0.5, "overlong shaping": 0.05}
    )
    assert MECHANISMS["dapo"]["dynamic sampling"] is ACTIVITY["dynamic_sampling"]
    assert MECHANISMS["dapo"]["overlong shaping"] is ACTIVITY["overlong_shaping"]
    assert activity("dapo", m, preset("dapo").to_dict()) == found["clip-higher"]


def test_the_scheme_a_measures_its_clips_and_its_sampler_correction_apart():
    m = run_log(
        **{
            "clip_ratio/high_mean": [0.002, 0.002],
            "clip_ratio/dual_mean": [0.0, 0.001],
            "is/logp_gap_mean": [0.0, 0.0],
        }
    )
    found = mechanism_activity("scheme_a", m, preset("scheme_a").to_dict())
    assert found == pytest.approx({"clip-higher": 0.002, "dual clip": 0.0005, "sequence TIS": 0.0})


def test_dropping_the_kl_is_measured_by_the_coefficient_dropped():
    m = run_log(**{"kl/coef": [0.0, 0.0]})
    assert activity("grpo_no_kl", m, preset("grpo_no_kl").to_dict()) == 0.04
    assert activity("grpo_no_kl", m, preset("grpo").to_dict()) == 0


def test_every_preset_but_the_tricks_bundle_has_its_mechanisms_and_every_trick_a_measure():
    assert set(PRESETS) - set(MECHANISMS) == {"all_tricks"} and set(MECHANISMS) <= set(PRESETS)
    assert set(TRICKS) <= set(ACTIVITY)
    assert all(measure.what for measure in ACTIVITY.values())


@pytest.mark.parametrize("name", list(MECHANISMS))
def test_a_preset_that_weighs_sequences_by_length_lists_that_among_its_mechanisms(name):
    length_weighted = preset(name).aggregation not in EQUAL_SEQUENCE_WEIGHTS
    assert length_weighted == (REWEIGHTING in MECHANISMS[name].values())


def test_a_measure_of_a_column_the_run_did_not_log_is_zero():
    m = run_log(**LENGTHS)
    assert activity("gspo", m, preset("gspo").to_dict()) == 0
    assert mechanism_activity("scheme_a", m, preset("scheme_a").to_dict()) == {
        "clip-higher": 0.0,
        "dual clip": 0.0,
        "sequence TIS": 0.0,
    }
