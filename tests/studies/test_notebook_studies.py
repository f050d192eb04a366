"""The studies of notebooks 01, 04, 05 and 15 derive from the study base and their profiles carry the
settings their runs use (seeds, steps, validation prompts), which the index of figures reads."""

import json

import numpy as np
import pandas as pd
import pytest

from grpo_lab.comparisons import bed
from grpo_lab.config import Config
from grpo_lab.experiments import SweepResult
from grpo_lab.experiments.store import BEHAVIOUR, expected_start, run_dir
from grpo_lab.profiles import STORE_ENV
from grpo_lab.runlog import CONFIG, METRICS, SUMMARY, RunWriter, seal
from grpo_lab.studies import baseline, fault_injection, long_horizon, long_verdicts, schemes


def test_baseline_runs_the_study_base_of_its_profile():
    settings = baseline.settings("full", seeds=[0, 1, 2, 3])
    assert settings.seeds == (0, 1, 2, 3)
    assert baseline.settings("smoke").steps < settings.steps


def test_fault_profile_carries_the_validation_size_and_the_design_is_on_the_base():
    full = fault_injection.settings("full")
    assert (
        (full.steps, full.eval_every, full.val_size)
        == (8, 2, 50)
        == (
            fault_injection.FULL.steps,
            fault_injection.FULL.eval_every,
            fault_injection.FULL.val_size,
        )
    )
    smoke = fault_injection.settings("smoke")
    assert smoke.val_size <= 50 and smoke.steps <= full.steps
    design = fault_injection.design(full)
    levels = sum(len(v) for v in fault_injection.FAULTS.values())
    assert len(design) == len(fault_injection.SCHEMES) * (1 + levels)  # every scheme, every level, under full
    clean = design[0].config
    assert clean.key() == bed.base(full).key()  # the clean grpo run is the study base
    assert {p.config.task for p in design} == {bed.base(full).task}
    assert {p.config.val_size for p in design} == {50}
    trimmed = fault_injection.design(smoke)
    assert [p.label for p in trimmed] == ["grpo, clean", "grpo, reward_sigma=1.0"]


def test_fault_changes_are_paired_wide_tables_with_their_mde():
    rows = []
    for scheme in ("scheme_b", "grpo"):
        for seed, clean in enumerate([0.3, 0.5, 0.7]):
            rows.append({"scheme": scheme, "fault": "none", "level": "none", "condition": "clean",
                         "seed": seed, "val/accuracy": clean})  # fmt: skip
            rows.append({"scheme": scheme, "fault": "fault_repeat_k", "level": "6", "condition": "repeat_k=6",
                         "seed": seed, "val/accuracy": clean - 0.2 + 0.01 * seed})  # fmt: skip
    tables = fault_injection.changes(pd.DataFrame(rows))
    assert list(tables["verdict"].columns) == ["grpo", "scheme_b"]  # in the order of fault_injection.SCHEMES
    assert (tables["verdict"].loc["repeat_k=6"] == "worse").all()
    assert (tables["mde"].loc["repeat_k=6"] > 0).all()
    assert (tables["p"].loc["repeat_k=6"] < 0.05).all()  # two cells in the family, each clearly off 0
    assert "(2 comparisons); Benjamini-Hochberg" in fault_injection.caption(tables)
    assert set(tables["adjusted verdict"].loc["repeat_k=6"]) <= {"worse", "worse, size unsure"}


def test_fault_detection_pools_the_schemes_clean_first_and_leaves_failed_runs_out(tmp_path):
    rows = []
    for seed in (0, 1):
        for scheme in ("grpo", "scheme_b"):
            for condition, zero_std in (("clean", 0.1), ("repeat_k=6", 0.9)):
                path = tmp_path / f"{scheme}-{condition}-{seed}"
                writer = RunWriter(path, Config(seed=seed).to_dict(), {})
                for step in range(12):  # a quiet run but for the share of groups without reward variance
                    writer.log({"step": step, "frac_reward_zero_std": zero_std, "grad_norm": 1.0})
                writer.finish({})
                rows.append({"scheme": scheme, "condition": condition, "seed": seed, "status": "trained",
                             "path": str(path)})  # fmt: skip
    rows.append({"scheme": "grpo", "condition": "clean", "seed": 2, "status": "failed", "path": ""})
    settings = fault_injection.settings("smoke", seeds=[0, 1])
    result = SweepResult(pd.DataFrame(), pd.DataFrame(rows))
    fig, table = fault_injection.detection(result, settings)
    assert list(table.index) == ["clean", "repeat_k=6"] and list(table["n"]) == [4, 4]
    assert table.loc["clean", "zero_variance_groups"] == 0.0
    assert table.loc["repeat_k=6", "zero_variance_groups"] == 1.0
    assert "grpo, scheme_b" in fig.axes[0].get_title()


def test_horizon_profile_keeps_its_own_seeds_and_trims_the_rates_in_smoke():
    full = long_horizon.settings("full")
    assert (full.seeds, full.steps, full.eval_every) == (long_horizon.FULL.seeds, 500, 100)
    assert [p.columns["learning_rate"] for p in long_horizon.design(full)] == list(
        long_horizon.LEARNING_RATES
    )
    smoke = long_horizon.settings("smoke")
    assert smoke.seeds == (0, 1) and len(long_horizon.design(smoke)) == long_horizon.SMOKE_KEEP


def pilot_logs(seeds=(0, 1, 2)) -> pd.DataFrame:
    """500 steps per seed whose entropy halves at step 200 and whose headline rises to step 300."""
    steps = np.arange(0, 501)
    rows = []
    for seed in seeds:
        entropy = np.where(steps < 200, 0.3, 0.15)  # halves at step 200
        headline = 0.1 + 0.3 * np.minimum(steps, 300) / 300  # rises to step 300, flat after
        for step in steps:
            row = {"seed": seed, "step": step, "entropy": entropy[step]}
            if step % 20 == 0:
                row |= {"val/sampled_accuracy": headline[step], "val/accuracy": 0.5 + headline[step]}
            rows.append(row)
    return pd.DataFrame(rows)


def test_the_pilot_fixes_the_horizon_only_when_entropy_fell_and_the_knee_passed():
    metrics = pilot_logs()
    table, steps_fixed = long_horizon.pilot(metrics)
    entropy_rows = table[table["reading"] == "entropy"]
    assert len(entropy_rows) == 3 and (entropy_rows["fall_step"] > 200).all()
    knee = table.loc[table["reading"] == "val/sampled_accuracy", "knee_step"].iloc[0]
    assert knee == 280  # the first evaluation at 90% of the rise (0.37 of 0.1 -> 0.4)
    assert steps_fixed == 300  # the later of the fall (step 215) and the knee, rounded up to 100
    assert long_horizon.pilot(metrics[metrics["step"] <= 300])[1] is None  # knee in the pilot's last 20%
    assert (
        "entropy down"
        in long_horizon.figure_pilot(metrics, long_horizon.pilot_settings("full"), table)._suptitle.get_text()
    )


def test_the_horizon_notebook_also_trains_the_pilot():
    full = long_horizon.settings("full")
    runs = long_horizon.runs(long_horizon.design(full), full)
    pilot = [c for c in runs if c.eval_every == long_horizon.PILOT.eval_every]
    assert len(runs) == len(long_horizon.LEARNING_RATES) + len(long_horizon.PILOT.seeds)
    assert {c.seed for c in pilot} == set(long_horizon.PILOT.seeds)
    assert {c.steps for c in pilot} == {long_horizon.PILOT.steps}


def test_the_long_verdicts_compare_every_scheme_at_the_horizon_the_stored_pilot_fixes(tmp_path, monkeypatch):
    monkeypatch.setenv(STORE_ENV, str(tmp_path))
    before = long_verdicts.settings("full")
    assert before.steps == long_horizon.PILOT.steps  # nothing stored: the pilot's length, an upper bound
    runs = long_verdicts.runs(long_verdicts.design(before), before, tmp_path)
    long = long_verdicts.sequential_seeds.runs(long_verdicts.design(before), before, tmp_path)
    scan = long_verdicts.scan_runs(before, tmp_path)
    assert runs[len(long_horizon.PILOT.seeds) :] == long + scan  # the pilot first, the rate scan last
    assert {c.preset for c in long} == set(schemes.SCHEMES)
    assert len(long) == len(schemes.SCHEMES) * len(long_verdicts.SEEDS)
    assert all(c.reference_forward for c in long)  # every arm logs the exact KL to the reference
    by_arm = {p.label: p.config for p in long_verdicts.design(before)}
    assert not by_arm["grpo"].kl_monitor and by_arm["grpo_no_kl"].kl_monitor
    with pytest.raises(ValueError, match="the pilot has fixed no horizon"):
        long_verdicts.run(long_verdicts.design(before), before)
    logs = pilot_logs(long_horizon.PILOT.seeds)
    for point in long_horizon.pilot_design(long_horizon.pilot_settings("full")):
        for seed in long_horizon.PILOT.seeds:
            store_run(point.config.replace(seed=seed), tmp_path, logs[logs["seed"] == seed])
    after = long_verdicts.settings("full")
    assert after.steps == 300 == long_horizon.stored_horizon(long_horizon.pilot_settings("full"), tmp_path)
    assert {p.config.steps for p in long_verdicts.design(after)} == {300}


def store_run(config: Config, root, metrics: pd.DataFrame) -> None:
    """A sealed run of `config` with these logs, recorded as starting from today's weights."""
    path = run_dir(config, root)
    path.mkdir(parents=True)
    start = {"init_sha256": expected_start(config.to_dict()), "reference_sha256": None}
    (path / CONFIG).write_text(json.dumps({"config": config.to_dict(), "start": start}))
    rows = metrics.drop(columns="seed").to_dict("records")
    (path / METRICS).write_text(
        "".join(json.dumps({k: v for k, v in r.items() if v == v}) + "\n" for r in rows)
    )
    (path / SUMMARY).write_text("{}")
    seal(path, BEHAVIOUR)
