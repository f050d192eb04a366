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
