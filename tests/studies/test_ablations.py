"""The ablation study's reading of the screen and of its own base: the leave-one-out confirms only
effects beyond the margin, and grpo's gain on the base is the screen's reference gain."""

import pandas as pd
import pytest

from grpo_lab.presets import TRICKS
from grpo_lab.studies import ablations


def test_a_trick_smaller_than_the_margin_is_not_confirmed():
    names = list(TRICKS)
    effects = pd.DataFrame(
        {
            "factor": names[:3],
            "effect": [0.004, -0.03, 0.02],
            "verdict": ["smaller than the margin", "worse", "better"],
        }
    )
    assert ablations.confirmed(effects) == [names[1], names[2]]
    assert ablations.confirmed(effects.assign(verdict="smaller than the margin")) == []


def test_grpos_gain_is_read_from_the_base_runs():
    scored = pd.DataFrame(
        {"label": ["grpo", "grpo", "no KL"], "seed": [0, 1, 0], "score": [0.5, 0.6, 0.9], "start": 0.3}
    )
    assert ablations.reference_gain(scored) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="no runs of the base 'grpo'"):
        ablations.reference_gain(scored[scored["label"] != "grpo"])
