"""The claims study: the catalogue's validity, the runs it shares with 06 and 08, and the whole path
from runs to verdicts on tiny runs."""

import pytest

from grpo_lab.analysis import claims
from grpo_lab.analysis.claims import Claim, greater
from grpo_lab.config import Config
from grpo_lab.studies import claims as claims_study
from grpo_lab.studies import cost, sensitivity

# --- the catalogue ---------------------------------------------------------------------------------


def test_claim_refuses_bad_declarations():
    with pytest.raises(ValueError, match="unknown metric"):
        Claim("c", "s", "d", "accuracy", "difference", greater(), {})
    with pytest.raises(ValueError, match="unknown effect"):
        Claim("c", "s", "d", "final_val_accuracy", "ratio", greater(), {})
    with pytest.raises(ValueError, match="unknown design"):
        Claim("c", "s", "d", "final_val_accuracy", "difference", greater(), {}, design="gpu")
    with pytest.raises(ValueError, match="takes no control"):
        Claim("c", "s", "d", "final_val_accuracy", "value", greater(), {})


@pytest.mark.parametrize("profile", ["smoke", "full"])
def test_every_claim_builds_valid_and_distinct_arms(profile):
    bases = {
        "training": sensitivity.base_config(sensitivity.settings(profile)),
        "cost": cost.base_config(cost.settings(profile)),
    }
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
    design = {p.config.key() for p in cost.design("full", base)}
    for claim in claims_study.CLAIMS:
        if claim.design == "cost":
            assert all(base.replace(**o).key() in design for o in claim.arms().values()), claim.name


def test_group_size_claims_reuse_the_sensitivity_runs():
    base = sensitivity.base_config(sensitivity.settings("full"))
    scanned = {p.config.key() for scan in sensitivity.SCANS for p in sensitivity.points(base, scan)}
    for claim in claims_study.CLAIMS:
        if "group_size" in claim.treatment:
            assert all(base.replace(**o).key() in scanned for o in claim.arms().values()), claim.name


# --- from runs to verdicts -------------------------------------------------------------------------


@pytest.mark.slow
def test_scores_and_verdicts_from_real_runs(tmp_path):
    """A training claim and a cost claim, end to end on two-step runs of the embedded model."""
    catalogue = [
        c for c in claims_study.CLAIMS if c.name in ("adv_clip_never_binds", "learnable_temperature_cost")
    ]
    settings = claims_study.settings("smoke", [0, 1], steps=2)
    scores = claims_study.scores(catalogue, settings, tmp_path, workers=1, progress=False)
    assert set(scores["claim"]) == {c.name for c in catalogue}
    assert len(scores) == 2 + 4  # two treatment runs; two treatment and two control cost runs
    table = claims.evaluate(catalogue, scores)
    assert set(table["verdict"]) <= set(claims.VERDICTS)
    clipped = scores[scores["claim"] == "adv_clip_never_binds"]["score"]
    assert clipped.between(0, 1).all()
    fig = claims.figure(table, catalogue)
    assert len([ax for ax in fig.axes if ax.has_data()]) == 2


def test_settings_give_each_design_its_profile():
    settings = claims_study.settings("full", [0, 1], steps=30)
    assert settings["training"].steps == 30 and settings["training"].eval_every == 30
    assert settings["cost"].steps == cost.FULL_STEPS and settings["cost"].seeds == (0, 1)
    cost_claim = next(c for c in claims_study.CLAIMS if c.design == "cost")
    with pytest.raises(ValueError, match="no profile for the design"):
        claims_study.scores([cost_claim], {"training": settings["training"]}, "/nonexistent")
