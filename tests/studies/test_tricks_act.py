"""No inert arm: on the study base, every trick acts with all tricks on (its activity measure is above
zero) and removing it changes the run, over a few steps of the real design (the schemes' twin is
`test_arms_act.py`)."""

import pytest

from grpo_lab.analysis.activity import ACTIVITY, activity
from grpo_lab.presets import TRICKS
from grpo_lab.studies import ablations


@pytest.fixture(scope="module")
def runs(brief_runs):
    return brief_runs(ablations.trick_points(ablations.settings("full"), list(TRICKS)))  # not only confirmed


@pytest.mark.slow
def test_every_trick_acts_with_all_on_and_its_removal_changes_the_run(runs, runs_differ):
    config, all_on = runs[ablations.ALL_ON]
    for trick in TRICKS:
        assert activity(trick, all_on, config.to_dict()) > 0, (trick, ACTIVITY[trick].what)
        assert runs_differ(all_on, runs[f"-{trick}"][1]), trick
