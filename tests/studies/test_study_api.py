"""Every study module has the same entry points (settings, design, run, figure), its full-profile
budget as a module constant, and the studies that share runs ask for the same configurations: 12's
designs are 03's and 02's, so their runs stay shared through the store."""

import inspect
import math

import numpy as np
import pandas as pd
import pytest

from grpo_lab.analysis import verdict_table
from grpo_lab.comparisons import bed, paired, screen, trick_arms
from grpo_lab.experiments import SweepResult
from grpo_lab.experiments.designs import Point
from grpo_lab.presets import TRICKS
from grpo_lab.profiles import PROFILES, Budget, Profile
from grpo_lab.studies import (
    ablations,
    baseline,
    claims,
    cost,
    fault_injection,
    kl_estimators,
    long_horizon,
    long_verdicts,
    schemes,
    sensitivity,
    transfer,
    verdicts,
    your_task,
)

STUDIES = (
    baseline,
    ablations,
    schemes,
    fault_injection,
    long_horizon,
    sensitivity,
    kl_estimators,
    cost,
    claims,
    verdicts,
    your_task,
    long_verdicts,
    transfer,
)
SEVERAL_DESIGNS = (claims, verdicts)
"""the studies of several designs, each on its own profile (`profiles`, derived from the study's
settings): their design is a dict with the same keys"""


def designs_of(study, profile: str) -> list[tuple[list[Point], object]]:
    """(points, profile) of each design of a study under `profile`."""
    settings = study.settings(profile)
    designs = study.design(settings)
    if study in SEVERAL_DESIGNS:
        profiles = study.profiles(settings)
        assert set(designs) == set(profiles), study.__name__
        return [(designs[k], profiles[k]) for k in profiles]
    return [(designs, settings)]


@pytest.mark.parametrize("study", STUDIES, ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_every_study_has_the_same_entry_points(study):
    for name in ("settings", "design", "run", "figure"):
        assert callable(getattr(study, name, None)), f"{study.__name__} has no {name}"
    parameters = inspect.signature(study.settings).parameters
    assert list(parameters)[1:] == ["seeds", "steps"]  # the profile's name first
    assert parameters["seeds"].default is None and parameters["steps"].default is None
    for profile in PROFILES:
        for points, settings in designs_of(study, profile):
            assert all(isinstance(p, Point) for p in points)
            assert len({p.label for p in points}) == len(points), "labels name the points"
            assert {p.config.steps for p in points} <= {settings.steps}
    assert isinstance(study.settings("smoke"), Profile)  # one type of settings everywhere


@pytest.mark.parametrize("study", [s for s in STUDIES if hasattr(s, "FULL")], ids=lambda m: m.__name__)
def test_the_full_profile_resolves_the_module_budget_and_smoke_keeps_its_few(study):
    full, smoke = study.settings("full"), study.settings("smoke")
    budget: Budget = study.FULL
    assert (full.seeds, full.steps) == (budget.seeds, budget.steps)
    assert full.eval_every == (budget.eval_every or budget.steps)
    assert full.val_size == min(PROFILES["full"].val_size, budget.val_size or PROFILES["full"].val_size)
    assert (smoke.seeds, smoke.steps) == (PROFILES["smoke"].seeds, PROFILES["smoke"].steps)
    chosen = study.settings("full", seeds=[5, 6], steps=7)
    assert (chosen.seeds, chosen.steps) == ((5, 6), 7)


def test_a_budget_without_interval_validates_only_at_the_ends():
    ends = Budget(seeds=(0, 1, 2, 3), steps=30, val_size=500)
    full = ends.settings("full")
    assert (full.seeds, full.steps, full.eval_every, full.val_size) == ((0, 1, 2, 3), 30, 30, 200)
    smoke = ends.settings("smoke", steps=6)
    assert (smoke.seeds, smoke.steps, smoke.eval_every) == (PROFILES["smoke"].seeds, 6, 6)
    with pytest.raises(ValueError, match="unknown profile 'fast'; valid: smoke, full"):
        ends.settings("fast")


@pytest.mark.parametrize("profile", list(PROFILES))
def test_the_verdict_table_asks_for_the_runs_of_02_and_03(profile):
    """The scheme, screen, conflict and trick designs of 12 are those of 03 and 02, under the same
    seeds, so after those notebooks it only loads."""
    settings = verdicts.settings(profile)
    designs, profiles = verdicts.design(settings), verdicts.profiles(settings)
    runs = {
        name: {p.config.replace(seed=s).key() for p in designs[name] for s in profiles[name].seeds}
        for name in ("schemes", "conflicts", "tricks")
    }
    scheme_settings = schemes.settings(profile)
    assert runs["schemes"] == {
        p.config.replace(seed=s).key() for p in schemes.design(scheme_settings) for s in scheme_settings.seeds
    }
    trick_settings = ablations.settings(profile)
    notebook_02 = {
        p.config.replace(seed=s).key() for p in ablations.design(trick_settings) for s in trick_settings.seeds
    }
    assert runs["tricks"] <= notebook_02 and runs["conflicts"] <= notebook_02
    assert len(runs["tricks"]) == (1 + len(trick_arms.tricks(trick_settings))) * len(trick_settings.seeds)
    screen_settings = screen.settings(profile)
    assert {c.key() for c in screen.runs(designs["screen"], profiles["screen"])} == {
        c.key() for c in screen.runs(screen.design(screen_settings), screen_settings)
    }
    assert set(verdicts.DESIGNS) == set(designs)


def test_schemes_compare_against_grpo_and_trim_in_smoke():
    full = schemes.design(schemes.settings("full"))
    assert [p.label for p in full] == list(schemes.SCHEMES)
    assert full[0].config == bed.base(schemes.settings("full"))  # the reference is the study base
    assert [p.label for p in schemes.design(schemes.settings("smoke"))] == list(schemes.SCHEMES[:2])
    with pytest.raises(ValueError, match="must include the reference 'grpo'"):
        schemes.design(schemes.settings("smoke"), ["dapo"])


def changed(config, reference) -> dict:
    """The fields in which `config` differs from `reference`, with their values in `config`."""
    a, b = config.to_dict(), reference.to_dict()
    return {k: v for k, v in a.items() if v != b[k]}


def test_the_ablation_design_holds_components_conflicts_and_the_leave_one_out(monkeypatch):
    monkeypatch.setattr(screen, "stored_effects", lambda profile: None)  # the screen not yet run
    settings = ablations.settings("full")
    assert [p.label for p in ablations.trick_points(settings)] == [ablations.ALL_ON]
    assert len(ablations.allowance(settings)) == trick_arms.CONFIRM * len(settings.seeds)
    design = {p.label: p for p in ablations.trick_points(settings, list(TRICKS))}
    design |= {p.label: p for p in ablations.design(settings)}
    reference = bed.base(settings)
    assert design["grpo"].config == reference and reference.advantage == "grpo"  # group normalization
    for name, changes in ablations.VARIANTS.items():
        assert design[name].columns == {"part": "components", "arm": name}
        assert changed(design[name].config, reference) == changes
    batch, triple = (design[name] for name in ablations.CONFLICTS)
    assert changed(batch.config, reference) == {"adv_batch_norm": True}
    assert changed(triple.config, reference) == {"kl_token_weight": "entropy", "length_norm_ref": 16}
    assert {batch.columns["part"], triple.columns["part"]} == {"conflicts"}
    all_on = design[ablations.ALL_ON].config
    for trick, fields in TRICKS.items():
        assert all(getattr(all_on, k) == v for k, v in fields.items()), trick
        assert set(changed(design[f"-{trick}"].config, all_on)) == set(fields), trick
    smoke = ablations.design(ablations.settings("smoke"))
    parts = pd.Series([p.columns["part"] for p in smoke]).value_counts()
    assert parts.to_dict() == {
        "components": 1 + trick_arms.SMOKE_VARIANTS,
        "conflicts": len(ablations.CONFLICTS),
        "tricks": 1 + trick_arms.SMOKE_TRICKS,
    }


def test_the_leave_one_out_confirms_the_largest_active_tricks_of_the_screen(monkeypatch):
    names = list(TRICKS)
    effects = pd.DataFrame(
        {
            "factor": [*names[:6], "group_reward_norm"],
            "effect": [0.05, -0.09, 0.001, 0.03, -0.02, 0.07, 0.2],
            "verdict": ["better", "worse", "no difference", "better", "worse", "undecided"] + ["better"],
        }
    )
    assert trick_arms.CONFIRM == 2 and trick_arms.confirmed(effects) == [names[1], names[0]]
    assert trick_arms.confirmed(None) == []
    monkeypatch.setattr(screen, "stored_effects", lambda profile: effects)
    settings = ablations.settings("full")
    labels = [p.label for p in ablations.trick_points(settings)]
    assert labels == [ablations.ALL_ON, *(f"-{t}" for t in names if t in trick_arms.confirmed(effects))]
    assert ablations.allowance(settings) == []


def fake_result(failed: set[tuple[str, int]], nan_loss: set[tuple[str, int]] = frozenset()) -> SweepResult:
    """Runs of the base and the two conflicts over seeds 0 and 1: six logged steps each, a NaN loss
    at step 2 for the runs in `nan_loss`, no log for the runs in `failed`."""
    runs, metrics = [], []
    for label in ("grpo", *ablations.CONFLICTS):
        part = "components" if label == "grpo" else "conflicts"
        for seed in (0, 1):
            status = "failed" if (label, seed) in failed else "trained"
            runs.append({"label": label, "part": part, "arm": label, "seed": seed, "key": f"{label}{seed}",
                         "status": status, "error": "boom" if status == "failed" else None})  # fmt: skip
            if status == "failed":
                continue
            for step in range(6):
                loss = np.nan if (label, seed) in nan_loss and step == 2 else 0.1
                metrics.append({"label": label, "part": part, "arm": label, "seed": seed, "step": step,
                                "reward": 0.5, "loss": loss})  # fmt: skip
    return SweepResult(pd.DataFrame(metrics), pd.DataFrame(runs))


def test_conflicts_count_failed_and_early_crashed_runs():
    batch, triple = ablations.CONFLICTS
    result = fake_result({(triple, 0)}, {(triple, 1), (batch, 0)})
    table = ablations.conflicts(result, ablations.settings("full"))
    crashed = table["crashed within 5 steps"]
    assert crashed.to_dict() == {"grpo": 0, batch: 1, triple: 2}
    short = ablations.conflicts(result, ablations.settings("smoke"))  # 4 steps: a clean run is no crash
    assert short["crashed within 5 steps"].to_dict() == {"grpo": 0, batch: 1, triple: 2}
    base_run = result.metrics.query("label == 'grpo' and seed == 0")
    assert ablations.crashed(base_run[base_run["step"] < 3], 150)  # stopped after 3 of 150 steps
    assert not ablations.crashed(base_run, 4) and not ablations.crashed(base_run, 150)
    assert table["failed"].to_dict() == {"grpo": 0, batch: 0, triple: 1}
    assert (table["runs"] == 2).all() and "crash" in table.loc[triple, "reported"]


def test_only_a_conflict_may_fail(monkeypatch):
    """A conflict's failed run is the outcome measured; any other failed run stops the study."""
    batch, _ = ablations.CONFLICTS
    settings = ablations.settings("smoke")
    monkeypatch.setattr(paired, "run_design", lambda *a, **k: fake_result({(batch, 1)}))
    assert len(ablations.run([], settings).failures) == 1
    monkeypatch.setattr(paired, "run_design", lambda *a, **k: fake_result({("grpo", 1)}))
    with pytest.raises(RuntimeError, match="1 runs failed"):
        ablations.run([], settings)
    monkeypatch.setattr(paired, "execute", lambda *a, **k: {})
    monkeypatch.setattr(paired, "collect", lambda *a, **k: fake_result({("grpo", 1)}))
    with pytest.raises(RuntimeError, match="1 runs failed"):
        schemes.run(schemes.design(schemes.settings("smoke")), settings)


def test_your_task_designs_the_example_task_by_default():
    settings = your_task.settings("smoke")
    design = your_task.design(settings)
    assert [p.label for p in design] == list(your_task.PRESETS[: your_task.SMOKE_KEEP])
    assert {p.config.task for p in design} == {your_task.study_task(your_task.EXAMPLE_TASK)}
    chosen = your_task.design(settings, presets=["grpo", "gspo", "dapo"])
    assert [p.label for p in chosen] == ["grpo", "gspo"]


def test_the_verdict_table_counts_each_rows_cost_and_never_reads_logged_step_times(monkeypatch):
    """A row's cost is its FLOPs a step by count against its reference's, not its runs' logged step
    times (which the machine's load moves); the quiet bench's multiple stands beside it."""

    def run_scores(label, score, step_s, flops):
        figures = {k: 1.0 for k in verdict_table.STABILITY_COLUMNS}
        counted = {"cost:forward": 2.0, "cost:backward": 2.0, "cost:flops": flops, "cost:sampled": 50.0,
                   "cost:trained": 50.0}  # fmt: skip
        return pd.DataFrame(
            {"label": label, "seed": range(3), "score": score, "start": 0.1, "step_s": step_s, **figures,
             **counted}
        )  # fmt: skip

    monkeypatch.setattr(screen, "main_effects", lambda scored, margin, **options: pd.DataFrame())
    monkeypatch.setattr(verdict_table, "factorial_rows", lambda *a, **k: pd.DataFrame())
    conflict = next(iter(ablations.CONFLICTS))
    scored = {
        "schemes": pd.concat(
            [
                run_scores("grpo", [0.2, 0.21, 0.22], 1.0, 10.0),
                run_scores("scheme_a", [0.2, 0.2, 0.2], 3.0, 11.0),
            ]
        ),
        "screen": pd.DataFrame(columns=["seed", "block", "greedy"]),
        "conflicts": pd.concat(
            [
                run_scores("grpo", [0.2, 0.21, 0.22], 1.0, 10.0),
                run_scores(conflict, [0.1, 0.1, 0.12], 2.0, 10.0),
            ]
        ),
        "tricks": pd.DataFrame(columns=["label"]),
        "quiet": pd.DataFrame({"label": ["grpo", "scheme_a"], "multiple": [1.0, 1.05]}),
    }
    table = verdicts.table(scored, settings=verdicts.settings("full")).set_index("row")
    assert table.loc["scheme_a", "cost x"] == pytest.approx(1.1)  # not the logged x3
    assert table.loc["scheme_a", "quiet time x"] == pytest.approx(1.05)
    assert table.loc[conflict, "cost x"] == pytest.approx(1.0) and math.isnan(
        table.loc[conflict, "quiet time x"]
    )
