"""The troubleshooting study's design: every scenario's fault over the base and its remedy over the
fault, a remedy that restores the base read from the base's runs, the conflict check's arms; the
confusion table of the rules over the arms."""

import pandas as pd
import pytest

from grpo_lab.comparisons.bed import base
from grpo_lab.config import Config
from grpo_lab.experiments import SweepResult
from grpo_lab.runlog import RunWriter
from grpo_lab.studies import troubleshooting


@pytest.fixture(scope="module")
def full():
    return troubleshooting.settings("full")


def test_each_remedy_is_the_fault_with_the_reviews_change(full):
    points = {p.label: p.config for p in troubleshooting.design(full)}
    reference = points[troubleshooting.REFERENCE]
    assert reference == base(full)
    kl = troubleshooting.SCENARIOS["KL rising without return"]
    fault, remedy = troubleshooting.labels("KL rising without return", full)
    assert points[fault] == reference.replace(**kl.changes)
    assert points[remedy] == points[fault].replace(**kl.remedy)  # one field changed: the KL coefficient
    assert points[remedy].learning_rate == points[fault].learning_rate != reference.learning_rate


def test_both_drift_cases_start_from_the_same_push_and_their_remedies_change_only_the_kl(full):
    points = {p.label: p.config for p in troubleshooting.design(full)}
    drift = base(full).replace(**troubleshooting.DRIFT)
    assert drift.fault_reward_sigma > 0 and drift.kl_coef < base(full).kl_coef
    rising, rising_fix = troubleshooting.labels("KL rising without return", full)
    late, late_fix = troubleshooting.labels("adaptive KL threshold too high", full)
    assert points[rising] == drift
    assert points[late] == drift.replace(kl_schedule="threshold", kl_target=1.0, kl_growth=0.2)
    assert points[rising_fix] == drift.replace(kl_coef=0.04)
    assert points[late_fix] == points[late].replace(kl_target=0.02, kl_growth=0.02)


def test_a_remedy_that_restores_the_base_is_the_base(full):
    fault, remedy = troubleshooting.labels("entropy coefficient too large", full)
    assert remedy == troubleshooting.REFERENCE
    labels = [p.label for p in troubleshooting.design(full)]
    assert fault in labels and "entropy coefficient too large: remedy" not in labels


def test_the_conflict_check_logs_gradient_cosines_on_each_arm_and_its_base(full):
    points = {p.label: p.config for p in troubleshooting.design(full)}
    checked = [f"{troubleshooting.REFERENCE} (cosines)", *troubleshooting.CONFLICT]
    assert all(points[a].grad_cos_every == troubleshooting.GRAD_COS_EVERY for a in checked)
    assert points["+ both"].length_norm_ref and points["+ both"].rewards == ("correct", "verbose")
    assert points[troubleshooting.REFERENCE].grad_cos_every == 0


def test_the_smoke_profile_keeps_one_scenario_and_one_conflict_arm():
    smoke = troubleshooting.settings("smoke")
    labels = [p.label for p in troubleshooting.design(smoke)]
    assert len(troubleshooting.scenarios(smoke)) == 1 and len(troubleshooting.conflict_arms(smoke)) == 1
    assert len(labels) == 6  # base, fault, remedy, base with cosines, one conflict arm, one scheme


def test_the_schemes_with_a_kl_term_run_clean_with_cosines_beside_the_base(full):
    """The clean runs `conflicting_objectives` is calibrated on: each scheme whose loss has a second
    component, exactly its scheme-study config but for the cosines (a scheme whose loss is the
    policy term alone has no pair to log)."""
    points = {p.label: p.config for p in troubleshooting.design(full)}
    assert troubleshooting.cosine_schemes(full) == ("scheme_a", "scheme_c")
    for name in troubleshooting.cosine_schemes(full):
        config = points[troubleshooting.cosines(name)]
        assert config == base(full, name).replace(grad_cos_every=troubleshooting.GRAD_COS_EVERY)
    assert troubleshooting.arm_order(full)[-2:] == ["scheme_a (cosines)", "scheme_c (cosines)"]


def test_the_arms_are_read_base_first_then_each_fault_beside_its_remedy(full):
    order = troubleshooting.arm_order(full)
    assert sorted(order) == sorted(p.label for p in troubleshooting.design(full))  # every arm, once
    assert order[0] == troubleshooting.REFERENCE
    fault, remedy = troubleshooting.labels("KL rising without return", full)
    assert order.index(remedy) == order.index(fault) + 1


def test_detection_counts_each_arms_runs_a_rule_fired_on_and_leaves_failed_runs_out(tmp_path):
    settings = troubleshooting.settings("smoke", seeds=[0, 1])
    fault, remedy = troubleshooting.labels(next(iter(troubleshooting.scenarios(settings))), settings)
    rows = []
    for seed in (0, 1):
        for label, zero_std in ((troubleshooting.REFERENCE, 0.1), (fault, 0.9), (remedy, 0.1)):
            path = tmp_path / f"{label}-{seed}".replace(" ", "_").replace(":", "")
            writer = RunWriter(path, Config(seed=seed).to_dict(), {})
            for step in range(12):  # a quiet run but for the share of groups without reward variance
                writer.log({"step": step, "frac_reward_zero_std": zero_std, "grad_norm": 1.0})
            writer.finish({})
            rows.append({"label": label, "seed": seed, "status": "trained", "path": str(path)})
    rows.append({"label": fault, "seed": 2, "status": "failed", "path": ""})
    result = SweepResult(pd.DataFrame(), pd.DataFrame(rows))
    fig, table = troubleshooting.detection(result, settings)
    assert list(table.index) == [troubleshooting.REFERENCE, fault, remedy] and list(table["n"]) == [2, 2, 2]
    assert list(table["zero_variance_groups"]) == [0.0, 1.0, 0.0]
    assert "rules that fired per arm" in fig.axes[0].get_title()
