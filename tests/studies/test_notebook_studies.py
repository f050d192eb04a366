"""The studies of notebooks 01, 04 and 05 derive from the study base and their profiles carry the
settings their runs use (seeds, steps, validation prompts), which the index of figures reads."""

import pandas as pd

from grpo_lab import studies
from grpo_lab.studies import baseline, faults, horizon

FAULTS = {"fault_reward_sigma": [0.5, 1.0], "fault_repeat_k": [6], "fault_stale_k": [4]}


def test_baseline_runs_the_study_base_of_its_profile():
    settings = baseline.settings("full", seeds=[0, 1, 2, 3])
    assert settings.seeds == (0, 1, 2, 3)
    assert baseline.settings("smoke").steps < settings.steps


def test_fault_profile_carries_the_validation_size_and_the_design_is_on_the_base():
    full = faults.settings("full", None, None, full_steps=20, eval_every=5, val_size=100)
    assert (full.steps, full.eval_every, full.val_size) == (20, 5, 100)
    smoke = faults.settings("smoke", None, None, full_steps=20, eval_every=5, val_size=100)
    assert smoke.val_size <= 100 and smoke.steps < 20
    design = faults.design(full, ["grpo", "dapo"], FAULTS, keep=1)
    assert len(design) == 2 * (1 + 4)  # every scheme, every level, under the full profile
    clean = design[0].config
    assert clean.key() == studies.base(full).key()  # the clean grpo run is the study base
    assert {p.config.task for p in design} == {studies.base(full).task}
    assert {p.config.val_size for p in design} == {100}
    trimmed = faults.design(smoke, ["grpo", "dapo"], FAULTS, keep=1)
    assert [p.label for p in trimmed] == ["grpo, clean", "grpo, reward_sigma=0.5", "grpo, reward_sigma=1.0"]


def test_fault_changes_are_paired_wide_tables_with_their_mde():
    rows = []
    for scheme in ("grpo", "dapo"):
        for seed, clean in enumerate([0.3, 0.5, 0.7]):
            rows.append({"scheme": scheme, "fault": "none", "level": "none", "condition": "clean",
                         "seed": seed, "val/accuracy": clean})  # fmt: skip
            rows.append({"scheme": scheme, "fault": "fault_repeat_k", "level": "6", "condition": "repeat_k=6",
                         "seed": seed, "val/accuracy": clean - 0.2 + 0.01 * seed})  # fmt: skip
    tables = faults.changes(pd.DataFrame(rows), ["grpo", "dapo", "scheme_c"])
    assert list(tables["verdict"].columns) == ["grpo", "dapo"]
    assert (tables["verdict"].loc["repeat_k=6"] == "worse").all()
    assert (tables["mde"].loc["repeat_k=6"] > 0).all()


def test_horizon_profile_keeps_its_own_seeds_and_trims_them_in_smoke():
    full = horizon.settings("full", [0, 1, 2, 3], None, full_steps=200, eval_every=20, keep=2)
    assert full.seeds == (0, 1, 2, 3) and full.steps == 200 and full.eval_every == 20
    smoke = horizon.settings("smoke", [0, 1, 2, 3], None, full_steps=200, eval_every=20, keep=2)
    assert smoke.seeds == (0, 1)
