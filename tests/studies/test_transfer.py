"""The transfer study's notebook (18): the bed's pilot is read for its start and gain conditions, and the
whole study is priced, before it is run, from what its scan's rule sees in the store."""

import numpy as np
import pandas as pd
import pytest

from grpo_lab.comparisons import pretrained_bed, transfer_arms
from grpo_lab.experiments import SweepResult
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


def test_the_notebook_plans_the_pilot_and_the_study_is_priced_from_the_scans_start_in_an_empty_store(
    tmp_path,
):
    settings = transfer.settings("full")
    pilot = transfer.runs(transfer.design(settings), settings)
    assert {c.learning_rate for c in pilot} == set(pretrained_bed.PILOT_RATES)
    assert {c.seed for c in pilot} == set(pretrained_bed.PILOT.seeds)
    study = transfer.transfer_runs(settings, tmp_path)
    scanned = len(transfer_arms.TUNED) * len(transfer_arms.RATES)  # the scan's start: seed 0 at every rate
    judged = len(transfer_arms.ARMS) * len(transfer_arms.FRESH_SEEDS)
    assert len({run_dir(c, tmp_path) for c in study}) == len(study) == scanned + judged
    assert {run_dir(c, tmp_path) for c in pilot} <= {run_dir(c, tmp_path) for c in study}  # shared runs


def bed_runs(shifts: dict[str, dict[str, float]], seeds: int = 4) -> SweepResult:
    """Runs of 20 steps per arm and seed, validated at steps 10 and 20: each arm's entropy, incorrect-answer
    length and sampled accuracy its base value plus `shifts[arm]`, plus a per-seed wobble shared by the
    arms (one start, one sampler stream)."""
    rows = []
    for label, shift in shifts.items():
        for seed in range(seeds):
            wobble = 0.01 * (seed - 1.5)
            for step in range(21):
                evaluated = step in (10, 20)
                rows.append(
                    {"label": label, "seed": seed, "step": step,
                     "entropy": 1.0 + shift.get("entropy", 0) + wobble,
                     "completions/incorrect_mean_length": 30.0 + shift.get("length", 0) + 10 * wobble,
                     "frac_reward_zero_std": 0.3, "is/logp_gap_mean": 0.001,
                     "val/sampled_accuracy": (0.3 + shift.get("score", 0) + wobble) if evaluated else np.nan}
                )  # fmt: skip
    return SweepResult(pd.DataFrame(rows), pd.DataFrame())


def test_published_effects_read_each_papers_direction_from_its_interval():
    result = bed_runs(
        {"grpo": {}, "clip_higher": {"entropy": 0.2}, "grpo_no_kl": {"length": -5.0}, "dr_grpo": {},
         "gspo": {"score": 0.0}}
    )  # fmt: skip
    table = transfer.published_effects(result).set_index("paper")
    assert list(table.index) == ["DAPO", "Dr. GRPO", "GSPO"]
    assert (
        table.loc["DAPO", "effect"] == pytest.approx(0.2) and table.loc["DAPO", "word"] == transfer.REPRODUCES
    )
    assert table.loc["Dr. GRPO", "effect"] == pytest.approx(-5.0)
    assert table.loc["Dr. GRPO", "adjusted word"] == transfer.OPPOSITE
    assert table.loc["GSPO", "word"] == transfer.OPEN  # the same scores on every seed: no direction
    assert (table["adjusted ci_low"] <= table["ci_low"]).all() and (
        table["adjusted ci_high"] >= table["ci_high"]
    ).all()
    fewer = transfer.published_effects(bed_runs({"grpo": {}, "gspo": {"score": 0.05}}))
    assert list(fewer["paper"]) == ["GSPO"]
    with pytest.raises(ValueError, match="no published effect has both its arms"):
        transfer.published_effects(bed_runs({"grpo": {}}))


def test_the_problem_checks_run_on_the_beds_arms():
    result = bed_runs({"grpo": {}, "grpo_no_kl": {"length": 4.0}, "dr_grpo": {}})
    checks = transfer.problems_present(result)
    assert list(checks["problem"]) == [
        "length bias (Dr. GRPO; grpo_no_kl against dr_grpo)",
        "sparse reward",
        "train-inference inconsistency",
    ]
    assert list(checks["present"]) == [True, False, False]
    assert len(transfer.problems_present(bed_runs({"grpo": {}}))) == 2  # no length pair: two checks
