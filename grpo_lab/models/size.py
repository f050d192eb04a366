"""The parameter counts a step's FLOPs are counted with (`analysis.step_cost`, Kaplan et al.'s and
PaLM's 2 N a token forward): the weights a token is multiplied by, read from the model's config without
loading its weights. Here, not in the analysis, which never opens a model
(`tests/analysis/test_layout.py`)."""

import functools
from dataclasses import dataclass

import torch
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel

from grpo_lab.config import Config
from grpo_lab.models.embedded import ARCH, new_llama
from grpo_lab.models.loading import resolve_model_path
from grpo_lab.models.tokenizer import build_char_tokenizer


@dataclass(frozen=True)
class ModelSize:
    """A model's matrix-multiply weights."""

    matmul: int
    """N: the weights of its linear layers, every matrix multiply a token passes through: the output
    layer included even where it shares its weight with the input embedding, LoRA's adapters under
    LoRA; the embedding lookup, norms and biases multiply no matrix and are left out"""
    trained: int
    """N_w: those whose gradient a backward computes: all of them, or under LoRA the adapters alone"""


def model_size(config: Config) -> ModelSize:
    """The `ModelSize` of the model `config` trains (its LoRA adapters included), counted once per model
    and LoRA rank in a process. The learnable temperature (one scalar) multiplies no matrix. The embedded
    model has one architecture whatever its task (`embedded.ARCH` over the character vocabulary), so its
    size is read from that, never from a warm-started copy: a stored run's task file may live elsewhere,
    and counting must not build a model."""
    lora_r = config.lora_r if config.lora else 0
    if config.model == "embedded":
        return _embedded_size(lora_r)
    path = resolve_model_path(config.model, config.task, config.task_digits or None)
    return _model_size(path, lora_r)


@functools.cache
def _embedded_size(lora_r: int) -> ModelSize:
    """`model_size` of the embedded model, built on the meta device from its architecture."""
    with torch.device("meta"):
        model = new_llama(build_char_tokenizer(), ARCH, max_position_embeddings=128)
    return _counted(model, lora_r)


@functools.cache
def _model_size(path: str, lora_r: int) -> ModelSize:
    """`model_size` of the model at `path`, built on the meta device (`_counted`)."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path))
    return _counted(model, lora_r)


def _counted(model: PreTrainedModel, lora_r: int) -> ModelSize:
    """The weights of `model`'s linear layers, with LoRA adapters of rank `lora_r` (0: none) on every
    linear layer but the output layer (peft's 'all-linear', as `loading.load_policy` sets them up):
    r (in + out) weights each."""
    head = model.get_output_embeddings()
    linear = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    base = sum(m.weight.numel() for m in linear)
    adapters = sum(lora_r * (m.in_features + m.out_features) for m in linear if m is not head)
    return ModelSize(matmul=base + adapters, trained=adapters if lora_r else base)
