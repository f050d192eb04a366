"""A model's matrix-multiply weights, counted from its config: the linear layers (a tied output layer
included) and LoRA's adapters, as many as peft trains."""

import pytest
from transformers import AutoConfig

from grpo_lab import preset
from grpo_lab.comparisons.bed import base
from grpo_lab.models.loading import load_policy
from grpo_lab.models.size import ModelSize, model_size


def test_the_embedded_model_by_hand():
    """4 layers of q, k, v, o (128 x 128) and gate, up, down (128 x 512), and the output layer tied to the
    54-character embedding (counted once, as the matrix multiply it is)."""
    n = 4 * (4 * 128 * 128 + 3 * 128 * 512) + 54 * 128
    assert model_size(base("full")) == ModelSize(n, n)


def test_lora_adapters_are_the_weights_peft_trains(tiny_model_path):
    peft = pytest.importorskip("peft")
    config = preset("grpo", model=tiny_model_path, task="judge")
    vocab = AutoConfig.from_pretrained(tiny_model_path).vocab_size  # the tied output layer's rows
    linear = 2 * (4 * 32 * 32 + 3 * 32 * 64) + vocab * 32  # 2 layers of hidden 32, MLP 64; the head
    assert model_size(config) == ModelSize(linear, linear)
    model = load_policy(tiny_model_path, lora=True, lora_r=4).model
    assert isinstance(model, peft.PeftModel)
    adapters = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert model_size(config.replace(lora=True, lora_r=4)) == ModelSize(linear + adapters, adapters)


def test_the_embedded_size_needs_no_task_file_and_builds_nothing(tmp_path, monkeypatch):
    """A stored run's config may name a task file of another machine: the embedded model's size is its
    architecture's, read without the file and without warm-starting a model."""
    monkeypatch.setenv("GRPO_LAB_CACHE", str(tmp_path))
    elsewhere = preset("grpo", task=f"file:{tmp_path / 'gone.jsonl'}")
    assert model_size(elsewhere) == model_size(base("full"))
    assert not any(tmp_path.iterdir())
