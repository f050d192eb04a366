"""`grpo-lab bench` runs end to end and writes its figures (a benchmark, so no timing is asserted)."""

import json
import math
import runpy
import sys

import pytest

from grpo_lab.bench import bench, format_report, step_seconds
from grpo_lab.cli import main

TINY = ["--steps", "2", "--rounds", "1", "--warmup", "0", "--completion-length", "6", "--pool-runs", "0"]


def test_cli_bench_writes_json(tiny_model_path, tmp_path, capsys):
    out = tmp_path / "bench.json"
    code = main(["bench", "--model", tiny_model_path, *TINY, "--no-trl", "--json", str(out)])
    assert code == 0
    report = json.loads(out.read_text())
    assert report["work"]["path"] == tiny_model_path and report["work"]["params"] > 0
    assert not report["trl"]
    assert [r["beta"] for r in report["rows"]] == [0.0, 0.04]
    for row in report["rows"]:
        assert row["grpo_lab_s"] > 0 and row["bare_s"] > 0
        assert row["over_bare_bound"] == pytest.approx(row["grpo_lab_s"] / row["bare_s"])
        assert "trl_s" not in row
        assert set(row["grpo_lab_phases"]) == {"sample_s", "logprob_s", "forward_backward_s", "optimizer_s"}
    assert row["bare_phases"]["reference_s"] > 0  # beta 0.04: the bare bound has its reference forward
    assert report["rows"][0]["bare_phases"]["reference_s"] == 0
    assert len(report["raw_step_s"]["0.0"]["grpo_lab"][0]) == 2
    assert set(report["targets"]) == {"over_bare_bound"}  # no TRL, no pool, a model without a target
    printed = capsys.readouterr().out
    assert "ours/bare" in printed and "target over_bare_bound" in printed and str(out) in printed


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


def test_gpu_check_smoke_on_cpu(tiny_model_path, tmp_path, monkeypatch, capsys):
    out = tmp_path / "gpu.json"
    argv = [
        "gpu_check.py",
        "--device",
        "cpu",
        "--skip-embedded",
        "--model-path",
        tiny_model_path,
        "--steps",
        "2",
        "--completion-length",
        "4",
        "--activation-checkpointing",
        "--json",
        str(out),
    ]
    monkeypatch.setattr(sys, "argv", argv)
    runpy.run_path("benchmarks/gpu_check.py", run_name="__main__")
    (result,) = json.loads(out.read_text())["results"]
    assert result["model"] == tiny_model_path
    assert result["steps_per_s"] > 0 and result["forward_passes"] == 2  # policy + reference, no other
    assert math.isnan(result["peak_gib"]) and result["peak_rss_mb"] > 0
    assert "steps/s" in capsys.readouterr().out


def test_qwen_vocab_model_is_built_once(tmp_path, monkeypatch, capsys):
    """`benchmarks/qwen_vocab_model.py DIR` leaves a directory that already holds a model as it is."""
    (tmp_path / "config.json").write_text("{}")
    monkeypatch.setattr(sys, "argv", ["qwen_vocab_model.py", str(tmp_path)])
    runpy.run_path("benchmarks/qwen_vocab_model.py", run_name="__main__")
    assert "nothing to do" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == [tmp_path / "config.json"]
