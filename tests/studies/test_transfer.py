"""The transfer study's notebook (18): the bed's pilot is read for its start and gain conditions, and the
whole study is priced, before it is run, from what its scan's rule sees in the store."""

import pandas as pd

from grpo_lab.comparisons import pretrained_bed, transfer_arms
from grpo_lab.experiments.store import run_dir
from grpo_lab.studies import transfer


def pilot_rows(starts: list[float], headlines: list[float], greedy_end: list[float]) -> pd.DataFrame:
    rates = pretrained_bed.PILOT_RATES
    return pd.DataFrame(
        {"run": [f"grpo, lr {r:g}" for r in rates], "learning rate": rates, "greedy start": starts,
         "greedy end": greedy_end, "headline": headlines, "gain": [h - 0.09 for h in headlines]}
    )  # fmt: skip


def test_the_conditions_hold_on_a_bracketed_pilot_that_starts_in_range_and_gains():
    held = transfer.conditions(pilot_rows([0.25] * 3, [0.195, 0.339, 0.286], [0.35, 0.52, 0.47]))
    assert held["holds"].all() and len(held) == 4
    assert held.loc[1, "measured"] == "3e-06"


def test_each_condition_fails_on_its_own_defect():
    start = transfer.conditions(pilot_rows([0.1, 0.25, 0.25], [0.195, 0.339, 0.286], [0.35, 0.52, 0.47]))
    assert list(start["holds"]) == [False, True, True, True]
    edge = transfer.conditions(pilot_rows([0.25] * 3, [0.195, 0.286, 0.339], [0.35, 0.47, 0.52]))
    assert list(edge["holds"]) == [True, False, True, True]
    lost = transfer.conditions(pilot_rows([0.25] * 3, [0.0, 0.05, 0.02], [0.2, 0.2, 0.2]))
    assert list(lost["holds"]) == [True, True, False, False]


def test_the_notebook_plans_the_pilot_and_the_study_is_priced_whole_from_an_empty_store(tmp_path):
    settings = transfer.settings("full")
    pilot = transfer.runs(transfer.design(settings), settings)
    assert {c.learning_rate for c in pilot} == set(pretrained_bed.PILOT_RATES)
    assert {c.seed for c in pilot} == set(pretrained_bed.PILOT.seeds)
    study = transfer.transfer_runs(settings, tmp_path)
    scanned = len(transfer_arms.TUNED) * len(transfer_arms.RATES) * len(transfer_arms.TUNING_SEEDS)
    judged = len(transfer_arms.ARMS) * len(transfer_arms.FRESH_SEEDS)
    assert len({run_dir(c, tmp_path) for c in study}) == len(study) == scanned + judged
    assert {run_dir(c, tmp_path) for c in pilot} <= {run_dir(c, tmp_path) for c in study}  # shared runs
