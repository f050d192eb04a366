"""No inert arm: on the study base, every compared scheme acts (its activity measure is above zero)
and its run differs from grpo's, over a few steps of the real design. The tricks' twin is
`test_tricks_act.py`: two modules, so that the two sets of runs train on two workers."""

import pytest

from grpo_lab.analysis.activity import ACTIVITY, activity
from grpo_lab.studies import schemes


@pytest.fixture(scope="module")
def runs(brief_runs):
    return brief_runs(schemes.design(schemes.settings("full")))


@pytest.mark.slow
def test_every_scheme_acts_and_differs_from_grpo(runs, runs_differ):
    for scheme in schemes.SCHEMES:
        config, metrics = runs[scheme]
        assert activity(scheme, metrics, config.to_dict()) > 0, (scheme, ACTIVITY[scheme].what)
        if scheme != schemes.REFERENCE:
            assert runs_differ(metrics, runs[schemes.REFERENCE][1]), scheme
