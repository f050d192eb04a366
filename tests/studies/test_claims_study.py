"""The claims study: the catalogue's validity, the runs it shares with 01-03 and 08, and the whole
path from runs to verdicts on tiny runs."""

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from grpo_lab import plan
from grpo_lab.analysis import claim_checks
from grpo_lab.analysis.claim_checks import Claim, arm_label, greater
from grpo_lab.comparisons import trick_arms
from grpo_lab.comparisons.bed import base
from grpo_lab.config import Config
from grpo_lab.experiments.designs import Point
from grpo_lab.presets import TRICKS
from grpo_lab.profiles import PROFILES, Profile
from grpo_lab.studies import ablations, baseline, cost
from grpo_lab.studies import claims as claims_study

# --- the catalogue ---------------------------------------------------------------------------------


def test_claim_refuses_bad_declarations():
    with pytest.raises(ValueError, match="unknown metric"):
        Claim("c", "s", "d", "accuracy", "difference", greater(), {})
    with pytest.raises(ValueError, match="unknown effect"):
        Claim("c", "s", "d", "headline_score", "ratio", greater(), {})
    with pytest.raises(ValueError, match="unknown design"):
        Claim("c", "s", "d", "headline_score", "difference", greater(), {}, design="gpu")
    with pytest.raises(ValueError, match="takes no control"):
        Claim("c", "s", "d", "headline_score", "value", greater(), {})


@pytest.mark.parametrize("profile", ["smoke", "full"])
def test_every_claim_builds_valid_and_distinct_arms(profile):
    profiles = claims_study.profiles(claims_study.settings(profile))
    bases = {"training": base(profiles["training"]), "cost": cost.base_config(profiles["cost"])}
    catalogue = claims_study.catalogue(profile)
    assert len({c.name for c in catalogue}) == len(catalogue)
    for claim in catalogue:
        arms = {arm: bases[claim.design].replace(**o) for arm, o in claim.arms().items()}
        assert all(isinstance(c, Config) for c in arms.values())
        if "control" in arms:
            assert arms["treatment"].key() != arms["control"].key(), claim.name


def test_cost_claims_reuse_the_cost_study_configs():
    """A cost claim's treatment is the cost design's configuration of that trick, so 08's runs serve."""
    base = cost.base_config(cost.settings("full"))
    design = {p.config.key() for p in cost.design(cost.settings("full"))}
    for claim in claims_study.CLAIMS:
        if claim.design == "cost":
            assert all(base.replace(**o).key() in design for o in claim.arms().values()), claim.name


def run_keys(points: list[Point], settings: Profile, label: str) -> set[str]:
    """The run keys of the point labelled `label` over the settings' seeds."""
    return {p.config.replace(seed=seed).key() for p in points if p.label == label for seed in settings.seeds}


def test_training_claims_share_the_headline_runs():
    """Under the full profile the claims' control arm is the grpo runs of 01 and of the schemes' first
    look, and the batch-norm arm is 02's conflict run: the same configs, so the store trains each once."""
    settings = claims_study.settings("full")
    points = claims_study.design(settings)["training"]
    control = run_keys(points, settings, arm_label({}))
    batch_norm = run_keys(points, settings, arm_label(TRICKS["batch_reward_norm"]))
    assert len(control) == len(batch_norm) == 3

    first = baseline.settings("full")
    assert control == run_keys(baseline.design(first), first, "grpo")
    assert control <= {config.key() for config in plan.study_runs("schemes", "full")}
    two = ablations.settings("full")
    assert batch_norm == run_keys(trick_arms.conflict_points(two), two, "batch norm on group norm")


def test_the_training_claims_are_scored_like_the_headline_runs():
    """Under the full profile the training claims' runs are 60 steps validated at step 0 and every 5
    steps in the scored tail, and each validation metric finds its evaluations there; the smoke
    profile keeps its few steps."""
    training = claims_study.settings("full")
    assert training.seeds == (0, 1, 2) and training.steps == 60
    assert training.eval_every == 5 and training.eval_start == 30
    assert claims_study.settings("smoke").steps == PROFILES["smoke"].steps

    evaluated = [0, *range(training.eval_start, training.steps + 1, training.eval_every)]
    tail = len(evaluated) - 1
    steps = pd.DataFrame({"step": range(training.steps), "reward": 0.5, "loss": 0.1, "kl/exact": 0.01})
    validation = pd.DataFrame({"step": evaluated, "val/accuracy": 0.5, "val/reward": [0.3] + [0.7] * tail,
                               "val/sampled_accuracy": [0.1] + [0.2] * tail})  # fmt: skip
    run = pd.concat([steps, validation], ignore_index=True)
    metric = claim_checks.RUN_METRICS.get
    assert metric("headline_score")(run) == pytest.approx(0.2)  # the tail's evaluations, not step 0's
    assert metric("headline_reward")(run) == pytest.approx(0.7)
    assert metric("diverged_or_stalled")(run) == 0.0  # up 0.1 from step 0


# --- from runs to verdicts -------------------------------------------------------------------------


@pytest.mark.slow
def test_scores_and_verdicts_from_real_runs(tmp_path):
    """A training claim and a cost claim, end to end on two-step runs of the embedded model."""
    catalogue = [
        c for c in claims_study.CLAIMS if c.name in ("adv_clip_never_binds", "learnable_temperature_cost")
    ]
    settings = claims_study.settings("smoke", [0, 1], steps=2)
    runs = claims_study.run(
        claims_study.design(settings, catalogue), settings, tmp_path, workers=1, progress=False
    )
    scores = claims_study.scores(catalogue, runs, settings)
    assert set(scores["claim"]) == {c.name for c in catalogue}
    assert len(scores) == 2 + 4  # two treatment runs; two treatment and two control cost runs
    table = claim_checks.evaluate(catalogue, scores)
    assert set(table["verdict"]) <= set(claim_checks.VERDICTS)
    clipped = scores[scores["claim"] == "adv_clip_never_binds"]["score"]
    assert clipped.between(0, 1).all()
    fig = claims_study.figure(table, catalogue)
    assert len([ax for ax in fig.axes if ax.has_data()]) == 2


def test_settings_give_each_design_its_profile():
    settings = claims_study.settings("full", [0, 1], steps=30)
    profiles = claims_study.profiles(settings)
    assert profiles["training"] == settings and isinstance(settings, Profile)
    assert settings.steps == 30 and settings.seeds == (0, 1)
    assert settings.eval_every == 5 and settings.eval_start == 15
    assert profiles["cost"].steps == cost.FULL.steps and profiles["cost"].seeds == (0, 1)
    assert claims_study.profiles(claims_study.settings("full"))["cost"] == cost.settings("full")


def test_the_design_holds_every_arm_configuration_once_per_design():
    settings = claims_study.settings("full")
    designs = claims_study.design(settings)
    assert set(designs) == {"training", "cost"}
    for name, points in designs.items():
        assert len({p.label for p in points}) == len(points), name
        wanted = {arm_label(o) for c in claims_study.CLAIMS if c.design == name
                  for arm in claims_study.configurations(c).values() for o in arm}  # fmt: skip
        assert {p.label for p in points} == wanted
    smoke = claims_study.design(claims_study.settings("smoke"))
    assert sum(map(len, smoke.values())) < sum(map(len, designs.values()))


def test_claims_are_tested_at_the_numbers_the_documents_state():
    by_name = {c.name: c for c in claims_study.CLAIMS}
    stated = {
        "learnable_temperature_gain": ("relative", 0.04, 0.06),  # "+4-6%"
        "two_layer_kl_stable": ("relative", -0.20, -0.10),  # "10-20% more stable"
        "length_norm_gains_accuracy": ("difference", 0.002, 0.022),  # "+1.2 points"
        "length_norm_shorter": ("relative", -0.49, -0.29),  # "1800 -> 1100 tokens"
        "learnable_temperature_cost": ("relative", 0.15, 0.20),  # "15-20% more compute"
        "fixed_kl_fails_often": ("value", 0.5, 0.7),  # "60% of configurations"
        "learned_temperature_late": ("value", 0.05, 0.15),  # "close to 0.1"
    }
    for name, (effect, low, high) in stated.items():
        claim = by_name[name]
        assert (claim.effect, claim.region.low, claim.region.high) == (effect, low, high), name
    assert all(c.reading for c in claims_study.CLAIMS if c.region.low > -1e9 and c.region.high < 1e9)


def test_a_grid_claim_runs_each_arm_at_every_configuration():
    claim = next(c for c in claims_study.CLAIMS if c.name == "threshold_kl_fails_less")
    arms = claims_study.configurations(claim)
    assert len(arms["treatment"]) == len(arms["control"]) == 4
    assert {o["kl_schedule"] for o in arms["treatment"]} == {"threshold"}
    assert {(o["learning_rate"], o["kl_coef"]) for o in arms["control"]} == {
        (lr, kl) for lr in (1e-4, 1e-3) for kl in (0.01, 0.2)
    }


def test_failed_runs_score_as_failures_only_where_failing_is_measured():
    """A failed run counts as a crash for the crash claim and leaves its seed out elsewhere."""
    crash = next(c for c in claims_study.CLAIMS if c.name == "three_tricks_crash")
    gain = next(c for c in claims_study.CLAIMS if c.name == "math_needs_length_norm")
    treated, normed = arm_label(crash.treatment), arm_label(gain.treatment)
    logged = {"reward": 0.5, "loss": 0.1, "val/sampled_accuracy": 0.4}
    rows = [{"label": label, "seed": seed, "step": step, **logged}
            for label in (arm_label({}), normed) for seed in (0, 1) for step in range(6)]  # fmt: skip
    rows += [{"label": treated, "seed": 1, "step": step, "reward": 0.5, "loss": 0.1} for step in range(6)]

    runs = claims_study.Runs({"training": pd.DataFrame(rows)}, frozenset({(treated, 0), (normed, 1)}))
    settings = claims_study.settings("smoke", [0, 1])
    table = claims_study.scores([crash, gain], runs, settings).set_index(["claim", "arm", "seed"])
    assert table.loc[("three_tricks_crash", "treatment", 0), "score"] == 1.0  # failed: crashed
    assert table.loc[("three_tricks_crash", "treatment", 1), "score"] == 0.0  # ran 6 clean steps
    assert np.isnan(table.loc[("math_needs_length_norm", "treatment", 1), "score"])  # no outcome
    assert table.loc[("math_needs_length_norm", "control", 1), "score"] == pytest.approx(0.4)


def test_the_untestable_claims_each_give_a_reason():
    table = claims_study.untestable()
    assert len(table) >= 5 and (table["reason"].str.len() > 10).all()


def document_sections() -> dict[str, str]:
    """Each design document's part of docs/sources.md, lower case and without markup."""
    text = (Path(__file__).parents[2] / "docs" / "sources.md").read_text()
    parts = re.split(r"^## ", text, flags=re.MULTILINE)
    return {p.split("\n", 1)[0]: p.replace("*", "").lower() for p in parts[1:]}


def test_every_source_names_a_section_of_docs_sources():
    documents = document_sections()
    sources = {c.source for c in claims_study.CLAIMS} | {u.source for u in claims_study.UNTESTABLE}
    for source in sources:
        for citation in source.split("; "):  # e.g. 'Tricks review §3.1 Verdict table, §4.4 What to ...'
            cited = re.fullmatch(r"(Evaluation guide|Tricks review),? (.+)", citation)
            assert cited is not None, f"{source!r} names no design document"
            document, sections = cited.groups()
            for section in re.split(r", (?=§)", sections):
                assert section.lower() in documents[document], f"{source!r}: no {section!r} in sources.md"
