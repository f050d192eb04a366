"""No inert arm: on the study base, every compared scheme and every trick acts (its activity measure
is above zero) and its run differs from its reference run, over a few steps of the real design."""

import pandas as pd
import pytest

from grpo_lab import train
from grpo_lab.analysis.activity import ACTIVITY, activity
from grpo_lab.presets import TRICKS
from grpo_lab.studies import ablations, schemes

STEPS = 4
CHANGED = ["reward", "loss", "grad_norm", "entropy"]


def brief(config):
    """The first steps of a design point, validation kept small: what the activity needs."""
    return config.replace(steps=STEPS, eval_every=STEPS, eval_start=0, val_size=4)


@pytest.fixture(scope="module")
def runs(embedded_worked_path):
    every_trick = ablations.trick_points(ablations.settings("full"), list(TRICKS))  # not only confirmed
    points = schemes.design(schemes.settings("full")) + every_trick
    return {p.label: (brief(p.config), train(brief(p.config))) for p in points}


def differs(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    a, b = (df.dropna(subset=["reward"])[CHANGED].reset_index(drop=True) for df in (a, b))
    return not a.equals(b)


@pytest.mark.slow
def test_every_scheme_acts_and_differs_from_grpo(runs):
    for scheme in schemes.SCHEMES:
        config, metrics = runs[scheme]
        assert activity(scheme, metrics, config.to_dict()) > 0, (scheme, ACTIVITY[scheme].what)
        if scheme != schemes.REFERENCE:
            assert differs(metrics, runs[schemes.REFERENCE][1]), scheme


@pytest.mark.slow
def test_every_trick_acts_with_all_on_and_its_removal_changes_the_run(runs):
    config, all_on = runs[ablations.ALL_ON]
    for trick in TRICKS:
        assert activity(trick, all_on, config.to_dict()) > 0, (trick, ACTIVITY[trick].what)
        assert differs(all_on, runs[f"-{trick}"][1]), trick
