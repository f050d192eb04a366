"""The ablation study's reading of the screen and of its table: the leave-one-out confirms only
effects beyond the margin, and the table's rows are judged against the bed's gain as one Holm family."""

import pandas as pd
import pytest

from grpo_lab.analysis import verdict_table
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


def runs(label, score):
    """One row per seed of hand-made run scores, every run starting at 0.3."""
    counts = dict(zip(verdict_table.COUNT_COLUMNS, (3.0, 2.0, 1.0, 100.0, 100.0)))
    base = {"label": label, "seed": range(len(score)), "score": score, "start": 0.3, "step_s": 1.0}
    return pd.DataFrame({**base, **counts, **{k: 1.0 for k in verdict_table.STABILITY_COLUMNS}})


def test_the_rows_are_judged_against_the_beds_gain_as_one_holm_family():
    """The margin is MARGIN_OF_GAIN times the gain passed in (the scheme study's grpo runs), not the
    ablation base's own; each row has its raw and its adjusted word, and the caption names the family."""
    variant = next(iter(ablations.VARIANTS))
    scored = pd.concat([runs("grpo", [0.50, 0.60, 0.55, 0.65]), runs(variant, [0.52, 0.61, 0.58, 0.66])])
    rows = ablations.table(scored, reference_gain=0.2)
    assert rows["margin"].iloc[0] == pytest.approx(verdict_table.MARGIN_OF_GAIN * 0.2)
    assert rows["mde / gain"].iloc[0] == pytest.approx(rows["mde"].iloc[0] / 0.2)
    assert {"verdict", "adjusted verdict", "p"} <= set(rows)
    assert "every row of the ablation table (1 comparisons); Holm" in ablations.caption(rows)
    assert ablations.table(scored, 0.2, margin=0.5)["margin"].iloc[0] == 0.5


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
    monkeypatch.setattr(ablations.verdict_table, "compare", lambda scored, arms, **_: judged.extend(arms))
    monkeypatch.setattr(ablations.multiplicity, "adjust", lambda rows, family: rows)
    labels = ["grpo", ablations.KL_IN_REWARD, ablations.RECALIBRATED]
    ablations.table(pd.DataFrame({"label": labels}), reference_gain=0.2)
    assert (ablations.RECALIBRATED, "recalibration", ablations.RECALIBRATED, ablations.KL_IN_REWARD) in judged
    ablations.table(pd.DataFrame({"label": ["grpo", ablations.RECALIBRATED]}), reference_gain=0.2)
    assert [arm[1] for arm in judged].count("recalibration") == 1  # not without its comparator
