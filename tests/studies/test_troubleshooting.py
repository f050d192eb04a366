"""The troubleshooting study's design: every scenario's fault over the base and its remedy over the
fault, a remedy that restores the base read from the base's runs, the conflict check's arms."""

import pytest

from grpo_lab.studies import troubleshooting
from grpo_lab.studies.base import base


@pytest.fixture(scope="module")
def full():
    return troubleshooting.settings("full")


def test_each_remedy_is_the_fault_with_the_reviews_change(full):
    points = {p.label: p.config for p in troubleshooting.design(full)}
    reference = points[troubleshooting.REFERENCE]
    assert reference == base(full)
    kl = troubleshooting.SCENARIOS["KL rising without return"]
    fault, remedy = troubleshooting.labels("KL rising without return", full)
    assert points[fault] == reference.replace(**kl.fault)
    assert points[remedy] == points[fault].replace(**kl.remedy)  # one field changed: the KL coefficient
    assert points[remedy].learning_rate == points[fault].learning_rate != reference.learning_rate


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
    assert len(labels) == 5  # base, fault, remedy, base with cosines, one conflict arm
