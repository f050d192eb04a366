"""The factorial screen study: its factors and profiles, the 32-run design over the study base, a
score per run from the run logs, the main effects (on pure error once replicated, against grpo's
gain), alias table and figure on synthetic logs, the replicates an MDE target needs, and a smoke run
of the whole study through the run store."""

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from grpo_lab.analysis import factorial
from grpo_lab.analysis.scores import HEADLINE, Score
from grpo_lab.analysis.verdict_table import MARGIN_OF_GAIN
from grpo_lab.comparisons import bed, screen
from grpo_lab.experiments import SweepResult
from grpo_lab.presets import PRESETS, TRICKS
from grpo_lab.studies import schemes

GREEDY = Score("val/accuracy", 0.5)


def test_the_factors_are_the_tricks_and_group_reward_normalization():
    assert list(screen.FACTORS) == [*TRICKS, "group_reward_norm"] and len(screen.FACTORS) == 16
    on, off = screen.FACTORS["group_reward_norm"]
    assert on == {"advantage": PRESETS["grpo"].changes.get("advantage", "grpo")}
    assert off == {"advantage": PRESETS["dr_grpo"].changes["advantage"]}  # dr_grpo's advantage only


def test_settings_under_each_profile():
    full = screen.settings("full")
    assert full.seeds == screen.FULL.seeds and full.steps == screen.FULL.steps and full.eval_every == 5
    assert full.eval_start == full.steps // 2  # validated only where the headline score reads
    assert screen.FULL.seeds == tuple(range(screen.REPLICATES)) and screen.REPLICATES >= 1
    smoke = screen.settings("smoke")
    assert smoke.seeds == (0,) and smoke.steps == screen.SMOKE_STEPS
    assert screen.settings("smoke", seeds=[3, 4], steps=2).seeds == (3, 4)


@pytest.mark.parametrize("profile", ["smoke", "full"])
def test_the_design_is_32_valid_runs_over_the_study_base(profile):
    settings = screen.settings(profile)
    points = screen.design(settings)
    assert len(points) == 32 and len({p.config.key() for p in points}) == 32
    assert all(set(p.values) == set(screen.FACTORS) for p in points)
    assert all(sum(p.values[f] for p in points) == 16 for f in screen.FACTORS)
    reference = bed.base(settings).to_dict()
    factor_fields = {"advantage", *(k for changes in TRICKS.values() for k in changes)}
    for point in points:  # every other field is the study base's
        assert {k: v for k, v in point.config.to_dict().items() if k not in factor_fields} == {
            k: v for k, v in reference.items() if k not in factor_fields
        }, point.label
        assert point.config.advantage == ("grpo" if point.values["group_reward_norm"] else "dr_grpo")
        assert point.config.adv_clip == (TRICKS["adv_clip"]["adv_clip"] if point.values["adv_clip"] else 0.0)


def test_the_aliases_of_the_screen():
    table = screen.aliases()
    assert table.attrs["resolution"] == 4
    assert (table.loc[table["kind"] == "main effect", "aliases"] == "none").all()
    assert (table["kind"] == "2FI chain").sum() == 15


def synthetic_result(effect: float, blocks=(0, 1, 2), metric: str = "val/accuracy") -> SweepResult:
    """Run logs of the smoke design in blocks, each run with its own seed (`screen.run_seeds`), in
    which adv_clip adds `effect` to validation accuracy: steps 0-4, validation at 0 (0.3, before any
    update), 2 and 4 (the score's window)."""
    rng = np.random.default_rng(0)
    rows = []
    settings = replace(screen.settings("smoke"), seeds=tuple(blocks))
    for point, config in screen.run_seeds(screen.design(settings), settings):
        for seed in (config.seed,):
            level = 0.4 + effect * point.values["adv_clip"] + 0.01 * rng.standard_normal()
            for step in range(5):
                value = (0.3 if step == 0 else level) if step % 2 == 0 else math.nan
                rows.append(
                    {"label": point.label, **point.columns, "seed": seed, "step": step, metric: value}
                )
    metrics = pd.DataFrame(rows)
    return SweepResult(metrics, metrics.drop_duplicates(["label", "seed"]).assign(status="trained"))


def test_scores_main_effects_report_and_figure_on_synthetic_runs():
    scored = screen.scores(synthetic_result(0.2), GREEDY)
    assert list(scored.columns) == ["run", "seed", "run_seed", *screen.FACTORS, "score", "start"]
    assert (
        len(scored) == 96 and sorted(set(scored["seed"])) == [0, 1, 2] and scored["run_seed"].nunique() == 96
    )
    assert (scored["start"] == 0.3).all()
    assert all(scored[f].dtype == bool for f in screen.FACTORS) and scored["score"].notna().all()
    with pytest.raises(ValueError, match="grpo's gain on the study base.*pass reference_gain"):
        screen.main_effects(scored)  # the screen's own runs' gain is not the margin's
    with pytest.raises(ValueError, match="pass reference_gain"):
        screen.main_effects(scored, margin=0.5)
    table = screen.main_effects(scored, reference_gain=0.25).set_index("factor")
    assert table.loc["adv_clip", "effect"] == pytest.approx(0.2, abs=0.02)
    assert table.loc["adv_clip", "verdict"] == "better" and (table["seeds"] == 96).all()
    assert (table["blocks"] == 3).all() and (table["df"] == 96 - 32).all()
    # three replicates of the design: pure error, the spread of the runs of each design point (sd 0.01)
    assert (table["runs"] == 96).all() and (table["variance"] == factorial.PURE_ERROR).all()
    assert table["pure_error_sd"].iloc[0] == pytest.approx(0.01, rel=0.25)
    # the margin: MARGIN_OF_GAIN of grpo's gain, not of what the screen's runs learn (about 0.2)
    assert (table["gain"] == 0.25).all()
    np.testing.assert_allclose(table["margin"], MARGIN_OF_GAIN * 0.25)
    np.testing.assert_allclose(table["mde / gain"], table["mde"] / 0.25)
    assert screen.main_effects(scored, margin=0.5, reference_gain=0.25)["margin"].eq(0.5).all()
    contrasts = screen.contrasts(scored, reference_gain=0.25)
    assert len(contrasts) == 31 and (contrasts["variance"] == factorial.PURE_ERROR).all()
    text = screen.report(table.reset_index())
    assert "adv_clip" in text and "chain 15" in text
    fig = screen.figure(table.reset_index(), GREEDY, setting="4 steps")
    title = fig.axes[0].get_title()
    assert "96 runs in 3 block(s) of 32, 96 seeds" in title and GREEDY.caption() in title
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == list(screen.FACTORS)[::-1]


def test_one_block_falls_back_to_the_interaction_residual_and_says_so_loudly():
    scored = screen.scores(synthetic_result(0.2, blocks=(0,)), GREEDY)
    table = screen.main_effects(scored, reference_gain=0.25)
    assert (table["variance"] == factorial.POOLED_INTERACTIONS).all() and (table["df"] == 15).all()
    assert table["error term"].str.startswith("NOT PURE ERROR").all()
    title = screen.figure(table, GREEDY).axes[0].get_title()
    assert "NOT PURE ERROR" in title
    text = screen.report(table)
    assert text.startswith("main effects (error term: NOT PURE ERROR") and text.count("NOT PURE ERROR") == 1


def test_the_replicates_that_put_every_mde_within_the_margin():
    """At a run-to-run sd of 0.012 and grpo's gain of 0.0466, 3 replicates of the 32 runs give an MDE
    of 0.0070 <= 0.15 x 0.0466, 2 give 0.0087."""
    needed = screen.replicates_needed(0.012, 0.0466)
    target = MARGIN_OF_GAIN * 0.0466
    assert needed == 3
    assert (
        factorial.replicated_mde(0.012, 32, needed)
        <= target
        < factorial.replicated_mde(0.012, 32, needed - 1)
    )
    assert screen.replicates_needed(0.001, 0.0466) == 2  # one replicate has no pure error
    assert screen.replicates_needed(0.024, 0.0466) > needed
    with pytest.raises(ValueError, match="4 replicates of 32 runs give an MDE"):
        screen.replicates_needed(0.05, 0.0466, most=4)
    with pytest.raises(ValueError, match="grpo's gain must be a finite number > 0"):
        screen.replicates_needed(0.012, 0.0)


def test_grpos_gain_is_read_from_its_stored_runs(monkeypatch, tmp_path):
    """The gain of the scheme study's grpo runs that are current in the store; None without any."""
    chosen = schemes.settings("full")
    grpo = schemes.design(chosen, [schemes.REFERENCE])[0].config
    stored = {grpo.replace(seed=s).key(): 0.1 * (s + 1) for s in (0, 1)}

    def metrics(path) -> pd.DataFrame:
        learned = next(v for k, v in stored.items() if k in str(path))
        return pd.DataFrame({"step": [0, 60], HEADLINE.metric: [0.2, 0.2 + learned]})

    monkeypatch.setattr(screen, "run_dir", lambda config, root: tmp_path / config.key())
    monkeypatch.setattr(screen, "is_current", lambda path: path.name in stored)
    monkeypatch.setattr(screen, "read_metrics", metrics)
    assert screen.stored_reference_gain("full", tmp_path) == pytest.approx(0.15)
    stored.clear()
    assert screen.stored_reference_gain("full", tmp_path) is None


def test_a_score_that_was_not_logged_is_refused_by_the_analysis():
    scored = screen.scores(synthetic_result(0.2), Score("val/sampled_accuracy", 0.5))
    assert scored["score"].isna().all()
    with pytest.raises(ValueError, match="96 of 96 runs have no finite score"):
        screen.main_effects(scored, reference_gain=0.2)


def test_scores_need_the_factor_columns():
    result = synthetic_result(0.1)
    with pytest.raises(ValueError, match=r"no column for factor\(s\) \['adv_clip'\]"):
        screen.scores(SweepResult(result.metrics.drop(columns="adv_clip"), result.runs), GREEDY)


@pytest.mark.slow
def test_a_smoke_screen_of_four_factors_end_to_end(embedded_worked_path, tmp_path):
    """The study's path from design to figure on 4 of the factors (8 runs at resolution IV; notebook
    02 runs all 16 under the smoke profile): trained once, loaded again from the store."""
    factors = {name: screen.FACTORS[name] for name in list(screen.FACTORS)[:3] + ["group_reward_norm"]}
    settings = screen.settings("smoke")
    points = screen.design(settings, factors)
    result = screen.run(points, settings, root=tmp_path, progress=False)
    assert result.counts() == {"loaded": 0, "trained": 8, "failed": 0}
    scored = screen.scores(result, GREEDY, factors=list(factors))
    assert len(scored) == 8 and np.isfinite(scored["score"]).all() and (scored["seed"] == 0).all()
    table = screen.main_effects(scored, factors=list(factors), reference_gain=0.1)
    assert list(table["factor"]) == list(factors)
    assert (table["variance"] == "pooled interaction columns").all() and (table["df"] == 8 - 1 - 4).all()
    assert table["error term"].str.startswith("NOT PURE ERROR").all()  # one block: no pure error
    assert table[["effect", "ci_low", "ci_high", "mde"]].notna().all().all()
    assert (table["seeds"] == 8).all() and (table["verdict"] != "too few seeds").all()  # a seed per run
    assert "chain 1" in screen.report(table, factors)
    screen.figure(table, GREEDY, setting=f"{settings.steps} steps")
    again = screen.run(points, settings, root=tmp_path, progress=False)  # the store loads every run
    assert again.counts()["loaded"] == 8
