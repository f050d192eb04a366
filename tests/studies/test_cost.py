"""The cost study: its design, the peak-memory reset, timed runs on the tiny model, and the
multiples, table and figure built from them."""

import resource
import sys

import numpy as np
import pandas as pd
import pytest

from grpo_lab.comparisons import timing
from grpo_lab.experiments import run_dir
from grpo_lab.experiments.designs import Point
from grpo_lab.presets import TRICKS
from grpo_lab.runlog import MANIFEST, read_json_record
from grpo_lab.studies import cost
from grpo_lab.studies.ablations import CONFLICTS


def test_design_covers_every_scheme_and_trick_under_full_and_a_few_in_smoke():
    base = cost.base_config(cost.settings("full"))
    full = cost.design(cost.settings("full"))
    labels = [p.label for p in full]
    assert labels[0] == cost.BASELINE and set(timing.SCHEMES) <= set(labels) and set(TRICKS) <= set(labels)
    assert labels[-1] == "all_tricks" and len(labels) == len(set(labels))
    kinds = {p.label: p.columns["kind"] for p in full}
    assert kinds["dapo_loss"] == "scheme" and kinds["learnable_temperature"] == "trick"
    configs = {p.label: p.config for p in full}
    assert {label for label, kind in kinds.items() if kind == "conflict"} == set(CONFLICTS)
    assert configs["batch norm on group norm"] == configs["batch_reward_norm"]  # timed once
    assert configs["group norm + dynamic KL + length norm"] == base.replace(
        **TRICKS["dynamic_kl"], **TRICKS["length_norm"]
    )
    assert {p.config.steps for p in full} == {cost.FULL.steps}
    assert {p.config.eval_every for p in full} == {cost.FULL.steps}  # validated only at the ends
    smoke = cost.design(cost.settings("smoke"))
    assert [p.label for p in smoke] == [*timing.SMOKE_SCHEMES, *timing.SMOKE_TRICKS]
    with pytest.raises(ValueError, match="unknown trick"):
        timing.points(base, ["grpo"], ["warp_drive"])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the peak reset reads /proc")
def test_reset_peak_memory_forgets_an_earlier_peak():
    big = np.ones(40_000_000)  # ~300 MB resident
    big[::1000] = 2.0
    del big
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    resting = timing.reset_peak_memory()
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert after < before - 200_000  # KB: the 300 MB peak is gone
    assert 0 < resting <= after / 1024 + 1


def tiny_design(tiny_config) -> list[Point]:
    short = {"steps": 3, "eval_every": 3}
    return [
        Point("grpo", {"kind": "scheme"}, tiny_config(**short)),
        Point("learnable_temperature", {"kind": "trick"}, tiny_config(**short, learnable_temperature=True)),
        Point("dr_grpo", {"kind": "scheme"}, tiny_config(**short, kl_coef=0.0, kl_placement="off")),
    ]


def test_measure_tables_and_figure_on_tiny_runs(tiny_config, tmp_path):
    design = tiny_design(tiny_config)
    df = cost.run(design, cost.settings("smoke", [0, 1]), tmp_path)
    assert set(df["label"]) == {"grpo", "learnable_temperature", "dr_grpo"} and set(df["seed"]) == {0, 1}
    timed = cost.timed(df)
    assert (timed["step"] > 0).all() and timed["reward"].notna().all()
    table = cost.table(df)
    assert list(table.index) == ["grpo", "learnable_temperature", "dr_grpo"]
    assert (table.loc["grpo", table.columns[1:]] == 1.0).all()
    assert table.loc["dr_grpo", "forward passes"] == 0.5  # no reference pass without a KL term
    if sys.platform.startswith("linux"):
        assert np.isfinite(table["peak memory"]).all()
        assert (timed[cost.PEAK_OVER_REST] > 0).all()
    absolute = cost.baseline_absolute(df)
    assert absolute["forward passes"] == 2.0 and absolute["step"] > 0
    steps = cost.multiples(df).set_index("label")
    assert steps.loc["grpo", "multiple"] == pytest.approx(1.0)
    assert (steps["lo"] <= steps["multiple"]).all() and (steps["multiple"] <= steps["hi"]).all()
    fig = cost.figure(df)
    assert len(fig.axes) == 3  # step times, phase heatmap, colour bar


def test_measure_loads_finished_runs_instead_of_timing_them_again(tiny_config, tmp_path):
    design = tiny_design(tiny_config)[:1]
    cost.run(design, cost.settings("smoke", [0]), tmp_path)
    path = run_dir(design[0].config.replace(seed=0), tmp_path)
    stamp = (path / MANIFEST).stat().st_mtime_ns
    again = cost.run(design, cost.settings("smoke", [0]), tmp_path)
    assert (path / MANIFEST).stat().st_mtime_ns == stamp  # neither trained nor sealed again
    assert read_json_record(path, timing.RESTING_FILE) is not None and len(again) > 0


def test_every_other_round_is_timed_in_reverse_order(tiny_config):
    design = tiny_design(tiny_config)
    order = [(c.seed, c.replace(seed=0).key()) for c in timing.timing_order(design, [3, 4, 5])]
    forward = [p.config.replace(seed=0).key() for p in design]
    assert order == [(3, k) for k in forward] + [(4, k) for k in forward[::-1]] + [(5, k) for k in forward]


def test_multiples_need_the_baseline():
    df = pd.DataFrame({"label": "dapo_loss", "seed": 0, "step": [1, 2], "reward": 0.5, "time/step_s": 0.1})
    with pytest.raises(ValueError, match="no 'grpo' run"):
        cost.multiples(df)
    with pytest.raises(ValueError, match="at least one seed"):
        cost.run([], cost.settings("smoke", []), "/nonexistent")
