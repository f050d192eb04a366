"""The ablation study's reading of the screen and of its own base: the leave-one-out confirms only
effects beyond the margin, and grpo's gain on the base is the screen's reference gain."""

import pandas as pd
import pytest

from grpo_lab.comparisons import trick_arms
from grpo_lab.presets import TRICKS
from grpo_lab.studies import ablations


def test_a_trick_whose_size_is_unsure_is_not_confirmed():
    names = list(TRICKS)
    effects = pd.DataFrame(
        {
            "factor": names[:3],
            "effect": [0.004, -0.03, 0.02],
            "verdict": ["better, size unsure", "worse", "better"],
        }
    )
    assert trick_arms.confirmed(effects) == [names[1], names[2]]
    assert trick_arms.confirmed(effects.assign(verdict="no difference")) == []


def test_grpos_gain_is_read_from_the_base_runs():
    scored = pd.DataFrame(
        {"label": ["grpo", "grpo", "no KL"], "seed": [0, 1, 0], "score": [0.5, 0.6, 0.9], "start": 0.3}
    )
    assert ablations.reference_gain(scored) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="no runs of the base 'grpo'"):
        ablations.reference_gain(scored[scored["label"] != "grpo"])


def test_the_recalibrated_arm_differs_from_the_kl_in_reward_arm_in_the_normalization_alone():
    points = {p.label: p.config for p in trick_arms.component_points(ablations.settings("full"))}
    moved, recalibrated = points[ablations.KL_IN_REWARD], points[ablations.RECALIBRATED]
    changed = {k for k, v in recalibrated.to_dict().items() if moved.to_dict()[k] != v}
    assert changed == {"advantage"} and recalibrated.advantage == "lite_ppo"
    assert points["no KL"].kl_monitor and points["no KL"].reference_forward  # its exact KL is logged
    smoke = [p.label for p in trick_arms.component_points(ablations.settings("smoke"))]
    assert ablations.RECALIBRATED not in smoke  # not without the arm it recalibrates


def test_the_recalibration_is_judged_against_the_kl_in_reward_arm(monkeypatch):
    judged = []
    monkeypatch.setattr(ablations.verdict_table, "compare", lambda scored, arms, margin: judged.extend(arms))
    labels = ["grpo", ablations.KL_IN_REWARD, ablations.RECALIBRATED]
    ablations.table(pd.DataFrame({"label": labels}))
    assert (ablations.RECALIBRATED, "recalibration", ablations.RECALIBRATED, ablations.KL_IN_REWARD) in judged
    ablations.table(pd.DataFrame({"label": ["grpo", ablations.RECALIBRATED]}))
    assert [arm[1] for arm in judged].count("recalibration") == 1  # not without its comparator
