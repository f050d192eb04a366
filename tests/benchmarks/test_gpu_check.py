"""`benchmarks/gpu_check.py` runs end to end on CPU over two models and writes its figures (a
benchmark, so no timing is asserted): the script's GPU run cannot be tested where there is no GPU."""

import json
import runpy
import sys
from pathlib import Path

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from grpo_lab.models.logprobs import PLAIN_MAX_VOCAB
from grpo_lab.models.tokenizer import build_char_tokenizer

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "gpu_check.py"
LARGE_VOCAB = PLAIN_MAX_VOCAB + 1000
"""a vocabulary that takes the chunked log-prob path, as Qwen2.5's does"""


@pytest.fixture(scope="module")
def tiny_qwen_path(tmp_path_factory) -> str:
    """A random Qwen2 with a vocabulary above PLAIN_MAX_VOCAB beside the character tokenizer (the rows
    beyond the tokenizer decode to nothing), like the Qwen-vocabulary benchmark model in miniature."""
    path = tmp_path_factory.mktemp("tiny-qwen")
    tok = build_char_tokenizer()
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=LARGE_VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=None,
    )
    Qwen2ForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def test_gpu_check_smoke_on_cpu(tiny_model_path, tiny_qwen_path, tmp_path, monkeypatch, capsys):
    out = tmp_path / "gpu.json"
    argv = ["gpu_check.py", "--device", "cpu", "--models", tiny_model_path, "--qwen-vocab", tiny_qwen_path]
    argv += ["--steps", "2", "--prompts", "2", "--group-size", "2", "--max-new-tokens", "4"]
    argv += ["--micro-batch-size", "2", "--activation-checkpointing", "--json", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    runpy.run_path(str(SCRIPT), run_name="__main__")
    report = json.loads(out.read_text())
    assert report["device"] == "cpu" and report["args"]["max_new_tokens"] == 4
    llama, qwen = report["results"]
    assert (llama["model"], qwen["model"]) == (tiny_model_path, tiny_qwen_path)
    assert qwen["vocab"] == LARGE_VOCAB
    for r in (llama, qwen):
        assert r["mean_length"] == 4  # EOS suppressed: every completion runs to the full length
        assert r["completions"] == 4 and r["micro_batch_size"] == 2
        assert r["forward_passes"] == 2  # policy + reference, no other
        assert r["step_s"] > 0 and r["tokens_per_s"] == pytest.approx(4 * 4 / r["step_s"])
        assert r["peak_mb"] >= r["start_mb"] > 0
    printed = capsys.readouterr().out
    assert printed.count("tokens/s") == 2 and str(out) in printed
