"""`grpo-lab bench` runs end to end and writes its figures (a benchmark, so no timing is asserted)."""

import json
import os

import pytest
from transformers import AutoConfig

from grpo_lab.bench import bench, format_report, step_seconds
from grpo_lab.cli import main

TINY = ["--steps", "2", "--rounds", "1", "--warmup", "0", "--completion-length", "6", "--pool-runs", "0"]


def test_cli_bench_writes_json(tiny_model_path, tmp_path, capsys):
    out = tmp_path / "bench.json"
    code = main(["bench", "--model", tiny_model_path, *TINY, "--no-trl", "--json", str(out)])
    assert code == 0
    report = json.loads(out.read_text())
    assert report["work"]["path"] == tiny_model_path and report["work"]["params"] > 0
    vocab = AutoConfig.from_pretrained(tiny_model_path).vocab_size
    assert report["work"]["vocab"] == vocab and report["kind"] == "other"
    assert report["work"]["force_length"]  # a model other than the embedded one: equal lengths everywhere
    assert not report["trl"] and report["systems"] == ["grpo_lab", "bare"]
    assert [r["beta"] for r in report["rows"]] == [0.0, 0.04]
    for row in report["rows"]:
        assert row["grpo_lab_s"] > 0 and row["bare_s"] > 0
        assert row["over_bare_bound"] == pytest.approx(row["grpo_lab_s"] / row["bare_s"])
        assert "trl_s" not in row
        assert set(row["grpo_lab_phases"]) == {"sample_s", "logprob_s", "forward_backward_s", "optimizer_s"}
        for system in ("grpo_lab", "bare"):
            assert row[f"{system}_mean_length"] == 6
            assert row[f"{system}_tokens_per_s"] == pytest.approx(
                64 * 6 / row[f"{system}_s"], rel=0.5
            )  # the median of the rounds' own tokens/s
            assert 100 < row[f"{system}_peak_mb"] < 8000  # a child's own high-water RSS, in MiB
    assert row["bare_phases"]["reference_s"] > 0  # beta 0.04: the bare bound has its reference forward
    assert report["rows"][0]["bare_phases"]["reference_s"] == 0
    assert len(report["raw_step_s"]["0.0"]["grpo_lab"][0]) == 2
    assert set(report["targets"]) == {"over_bare_bound"}  # no TRL, no pool, a model without a target
    printed = capsys.readouterr().out
    assert "ours/bare time" in printed and "target over_bare_bound" in printed and str(out) in printed


def test_each_measurement_runs_in_a_process_of_its_own(tiny_model_path):
    """The peak memory is the measuring process's own: another process, not this one."""
    from grpo_lab.bench import Work, in_own_process

    assert in_own_process(os.getpid) != os.getpid()
    with pytest.raises(ValueError, match="must divide the batch of 64"):
        Work(model=tiny_model_path, rows_per_forward=5)


def test_rows_per_forward_reaches_every_system(tiny_model_path):
    pytest.importorskip("trl", reason="trl is not installed (pip install 'grpo_lab[bench]')")
    report = bench(
        model=tiny_model_path,
        steps=2,
        rounds=1,
        warmup=0,
        betas=(0.04,),
        completion_length=4,
        prompts=2,
        group_size=4,
        rows_per_forward=4,
    )
    assert report["work"]["rows_per_forward"] == 4
    row = report["rows"][0]
    assert row["memory_vs_trl"] == pytest.approx(row["grpo_lab_peak_mb"] / row["trl_peak_mb"])
    assert "ours/TRL memory" in format_report(report)


def test_model_kind_names_the_targets():
    from grpo_lab.bench import QWEN_VOCAB, model_kind

    assert model_kind("smollm2-135m", 49_152) == "smollm2-135m"
    assert model_kind("/models/qwen", QWEN_VOCAB) == "qwen-vocab"
    assert model_kind("/models/other", 32_000) == "other"


def test_bench_refuses_too_few_steps(tiny_model_path):
    with pytest.raises(ValueError, match="need steps >= 2"):
        bench(model=tiny_model_path, steps=1, trl=False)


def test_forced_length_is_the_same_work_everywhere(tiny_model_path):
    """With EOS suppressed every system samples exactly the completion length (TRL when installed)."""
    pytest.importorskip("trl", reason="trl is not installed (pip install 'grpo_lab[bench]')")
    report = bench(
        model=tiny_model_path,
        steps=2,
        rounds=1,
        warmup=0,
        betas=(0.04,),
        force_length=True,
        completion_length=5,
    )
    row = report["rows"][0]
    assert report["trl"]
    assert row["grpo_lab_mean_length"] == row["trl_mean_length"] == row["bare_mean_length"] == 5
    assert row["speedup_vs_trl"] == pytest.approx(row["trl_s"] / row["grpo_lab_s"])
    assert "TRL/ours" in format_report(report)


def test_pool_figures(tiny_model_path):
    report = bench(
        model=tiny_model_path,
        steps=2,
        rounds=1,
        warmup=0,
        betas=(0.0,),
        trl=False,
        completion_length=4,
        pool_runs=2,
        pool_steps=2,
        pool_model=tiny_model_path,
    )
    pool = report["pool"]
    assert pool["model"] == tiny_model_path and pool["runs"] == 2
    assert pool["one_worker_s"] > 0 and pool["pool_s"] > 0 and pool["pool_warm_s"] > 0
    assert pool["speedup"] == pytest.approx(pool["one_worker_s"] / pool["pool_s"])
    assert "fork server up" in format_report(report)
    assert report["targets"]["pool_speedup"]["met"] == (pool["speedup"] >= 1.7)


def test_step_seconds_leaves_out_the_warmup():
    assert step_seconds([0.0, 1.0, 3.0, 6.0], warmup=1) == [2.0, 3.0]
    assert step_seconds([0.0, 1.0], warmup=1) == []


def test_arms_are_methods_and_tricks_on_the_study_base():
    from grpo_lab.bench import arm_configs, arm_set
    from grpo_lab.comparisons.bed import base

    configs = arm_configs(["grpo", "cispo", "dynamic_sampling", "all", "-adv_clip"], "smoke", steps=3)
    assert configs["cispo"] == base("smoke", "cispo", steps=3)
    assert configs["dynamic_sampling"] == base("smoke", steps=3).replace(dynamic_sampling=True)
    assert configs["all"].adv_clip == 2.0 and configs["all"].dynamic_sampling
    assert configs["-adv_clip"] == configs["all"].replace(adv_clip=0.0)  # all tricks on but that one
    assert {c.steps for c in configs.values()} == {3}
    with pytest.raises(ValueError, match="unknown arm 'nope'; valid: a preset"):
        arm_configs(["grpo", "nope"])
    with pytest.raises(ValueError, match="give each arm once"):
        arm_configs(["grpo", "grpo"])
    assert arm_set("schemes")[0] == "grpo" and "cispo" in arm_set("schemes")
    assert arm_set("tricks")[:2] == ("grpo", "batch_reward_norm") and arm_set("leave-one-out")[0] == "all"
    with pytest.raises(ValueError, match="unknown set of arms 'nope'; valid: schemes, tricks"):
        arm_set("nope")


def test_arms_interleave_rounds_and_set_times_beside_counts(monkeypatch):
    """Each round runs every arm once with its seed, the order reversed every other round; times are
    medians over the rounds' steps, multiples of the first arm's, beside the counts of the same steps."""
    from grpo_lab import bench as bench_module

    calls = []
    seconds = {"grpo": [2.0, 2.2], "cispo": [1.0, 1.2]}

    def fake(fn, config, steps, warmup, threads):
        calls.append((config.preset, config.seed, steps, warmup, threads))
        tokens = {"reward": [0.5], "cost/sampled_tokens": [100.0], "completions/mean_length": [10.0]}
        tokens |= {"sampling/completions": [16], "sampling/rounds": [1]}
        phases = {"sample_s": 0.1, "logprob_s": 0.2, "train_s": 0.3}
        return {"step_s": seconds[config.preset], "phases": phases, "tokens": tokens}

    monkeypatch.setattr(bench_module, "in_own_process", fake)
    report = bench_module.arms(["grpo", "cispo"], "smoke", rounds=3, steps=2, warmup=1)
    assert [(name, seed) for name, seed, *_ in calls] == [
        ("grpo", 0), ("cispo", 0), ("cispo", 1), ("grpo", 1), ("grpo", 2), ("cispo", 2)
    ]  # fmt: skip
    assert {tuple(c[2:]) for c in calls} == {(2, 1, 1)}  # one thread each
    grpo, cispo = report["rows"]
    assert grpo["step_s"] == pytest.approx(2.1) and grpo["ratio"] == 1.0
    assert cispo["ratio"] == pytest.approx(1.1 / 2.1)
    assert (grpo["cost"]["forward_passes"], cispo["cost"]["forward_passes"]) == (3, 2)
    assert cispo["cost"]["sampled_tokens"] == 100.0 and cispo["cost"]["trained_tokens"] == 160.0
    assert cispo["flops_ratio"] < 1 and cispo["cost_cell"].startswith("fwd 2/3, bwd 2/2, FLOPs x")
    assert report["raw_step_s"]["cispo"] == [[1.0, 1.2]] * 3
    assert "time x" in bench_module.format_arms(report)
    with pytest.raises(ValueError, match="need steps >= 1"):
        bench_module.arms(["grpo"], steps=0)


@pytest.mark.slow  # two spawned processes, each importing torch and training: about 15 s
def test_cli_bench_arms_times_each_arm_in_a_process_of_its_own(tmp_path, capsys):
    out = tmp_path / "arms.json"
    args = ["--profile", "smoke", "--steps", "1", "--rounds", "1", "--warmup", "0"]
    code = main(
        ["bench", "--arms", "grpo", "cispo", *args, "--set", "max_completion_length=6", "--json", str(out)]
    )
    assert code == 0
    report = json.loads(out.read_text())
    assert [r["arm"] for r in report["rows"]] == ["grpo", "cispo"] and report["threads"] == 1
    assert report["changes"] == {"max_completion_length": 6}
    for row in report["rows"]:
        assert row["step_s"] > 0 and len(report["raw_step_s"][row["arm"]][0]) == 1
        assert 0 < row["cost"]["trained_tokens"] <= 16 * 6  # the smoke batch of 4 x 4, at most 6 tokens
    assert [r["cost"]["forward_passes"] for r in report["rows"]] == [3, 2]
    printed = capsys.readouterr().out
    assert "cispo" in printed and "FLOPs x" in printed and str(out) in printed
    assert main(["bench", "--set", "steps=2"]) == 2  # --set goes with arms only
