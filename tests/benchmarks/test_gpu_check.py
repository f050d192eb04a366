"""`benchmarks/gpu_check.py` runs end to end on CPU over two models and writes its figures (a
benchmark, so no timing is asserted): the script's GPU run cannot be tested where there is no GPU."""

import json
import runpy
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "gpu_check.py"


def test_gpu_check_smoke_on_cpu(tiny_model_path, large_vocab_path, tmp_path, monkeypatch, capsys):
    out = tmp_path / "gpu.json"
    argv = ["gpu_check.py", "--device", "cpu", "--models", tiny_model_path, "--qwen-vocab", large_vocab_path]
    argv += ["--steps", "2", "--prompts", "2", "--group-size", "2", "--max-new-tokens", "4"]
    argv += ["--micro-batch-size", "2", "--activation-checkpointing", "--json", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    runpy.run_path(str(SCRIPT), run_name="__main__")
    report = json.loads(out.read_text())
    assert report["device"] == "cpu" and report["args"]["max_new_tokens"] == 4
    llama, qwen = report["results"]
    assert (llama["model"], qwen["model"]) == (tiny_model_path, large_vocab_path)
    assert qwen["vocab"] == 5000
    for r in (llama, qwen):
        assert r["mean_length"] == 4  # EOS suppressed: every completion runs to the full length
        assert r["completions"] == 4 and r["micro_batch_size"] == 2
        assert r["forward_passes"] == 2  # policy + reference, no other
        assert r["step_s"] > 0 and r["tokens_per_s"] == pytest.approx(4 * 4 / r["step_s"])
        assert r["peak_mb"] >= r["start_mb"] > 0
    printed = capsys.readouterr().out
    assert printed.count("tokens/s") == 2 and str(out) in printed
