"""Every arm of the scheme study acts in its stored runs (`results/`, the full profile's store): each
own mechanism of each arm (`analysis.activity.MECHANISMS`) has its measure above 0, averaged over the
arm's current runs there as the verdict table averages it. An arm with no current run in the store (a
preset added or changed since its runs were trained, e.g. cispo's cap) is skipped, naming the runs to
train; once they are there, an inert mechanism fails."""

from pathlib import Path

import numpy as np
import pytest

from grpo_lab.analysis.activity import MECHANISMS, mechanism_activity
from grpo_lab.experiments.store import is_current, run_dir
from grpo_lab.runlog import read_config, read_metrics
from grpo_lab.studies import schemes

SETTINGS = schemes.settings("full")
ROOT = SETTINGS.runs_dir()
POINTS = {p.label: p for p in schemes.design(SETTINGS)}
KNOWN_INERT = {
    ("scheme_a", "sequence TIS"): "the study base samples with the very policy it trains, so the old "
    "policy's log-probs are the sampler's own and the truncated IS weight is 1 on every token "
    "(is/logp_gap_mean 0): scheme A's sampler correction has nothing to correct there"
}
"""(arm, mechanism) pairs known never to act on the study base, with why: strict, so the test fails
once they do act"""


def runs(label: str) -> tuple[list[Path], list[Path]]:
    """The current and the missing (or unusable) run directories of arm `label` over the study's seeds."""
    paths = [run_dir(POINTS[label].config.replace(seed=seed), ROOT) for seed in SETTINGS.seeds]
    current = [path for path in paths if is_current(path)]
    return current, [path for path in paths if path not in current]


def case(label: str, mechanism: str):
    """A parameter of the test, strictly expected to fail when the pair is in `KNOWN_INERT`."""
    why = KNOWN_INERT.get((label, mechanism))
    marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
    return pytest.param(label, mechanism, id=f"{label}:{mechanism}", marks=marks)


@pytest.mark.parametrize("label, mechanism", [case(label, m) for label in POINTS for m in MECHANISMS[label]])
def test_each_mechanism_of_each_scheme_arm_acts_in_its_stored_runs(label, mechanism):
    current, missing = runs(label)
    if not current:
        names = ", ".join(path.name for path in missing)
        pytest.skip(f"no current run of {label} in {ROOT}: train {names} (the scheme study, notebook 03)")
    measured = [
        mechanism_activity(label, read_metrics(path), read_config(path))[mechanism] for path in current
    ]
    what = MECHANISMS[label][mechanism].what
    assert np.mean(measured) > 0, (
        f"{label}'s {mechanism} never acted in its {len(current)} stored runs: {what}"
    )
