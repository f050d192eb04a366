import shutil

import pytest
import torch
from transformers import AutoTokenizer

from grpo_lab.models.loading import load_policy, resolve_model_path

CPU = torch.device("cpu")


def copy_with_tokenizer(src, dst, **changes):
    """The tiny model directory, its tokenizer saved again with some special tokens removed."""
    shutil.copytree(src, dst)
    tok = AutoTokenizer.from_pretrained(src)
    for name, value in changes.items():
        setattr(tok, name, value)
    tok.save_pretrained(dst)
    reloaded = AutoTokenizer.from_pretrained(dst)
    for name in changes:
        assert getattr(reloaded, name) is None, f"{name} survived the save"
    return str(dst)


@pytest.mark.parametrize("path", ["./nope", "/no/such/dir", "~/no-such-grpo-lab-model"])
def test_nonexistent_local_path(path):
    with pytest.raises(ValueError, match="does not exist") as err:
        load_policy(path, "arith", None, CPU)
    assert repr(path) in str(err.value)
    with pytest.raises(ValueError, match="does not exist"):
        resolve_model_path(path, "arith", None)


def test_resolve_existing_path_and_hub_id(tiny_model_path, tmp_path, monkeypatch):
    assert resolve_model_path(tiny_model_path, "arith", None) == tiny_model_path
    assert resolve_model_path("someorg/some-model", "arith", None) == "someorg/some-model"
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "m").mkdir()
    assert resolve_model_path("~/m", "arith", None) == str(tmp_path / "m")


def test_directory_without_weights_is_a_value_error(tiny_model_path, tmp_path):
    dst = tmp_path / "noweights"
    shutil.copytree(tiny_model_path, dst)
    for f in dst.glob("*.safetensors"):
        f.unlink()
    with pytest.raises(ValueError, match="could not load model"):
        load_policy(str(dst), "arith", None, CPU)


def test_empty_directory_is_a_value_error(tmp_path):
    with pytest.raises(ValueError):
        load_policy(str(tmp_path), "arith", None, CPU)


def test_tokenizer_without_pad_token(tiny_model_path, tmp_path):
    path = copy_with_tokenizer(tiny_model_path, tmp_path / "nopad", pad_token=None)
    with pytest.raises(ValueError, match="no pad token"):
        load_policy(path, "arith", None, CPU)


def test_tokenizer_without_eos_token(tiny_model_path, tmp_path):
    path = copy_with_tokenizer(tiny_model_path, tmp_path / "noeos", eos_token=None)
    with pytest.raises(ValueError, match="no EOS token"):
        load_policy(path, "arith", None, CPU)


def test_loads_the_tiny_model(tiny_model_path):
    policy = load_policy(tiny_model_path, "arith", None, CPU, need_reference=False)
    assert policy.tokenizer.padding_side == "left"
    assert policy.reference is None and not policy.lora
    assert policy.model.training
    p = next(policy.model.parameters())
    assert p.dtype == torch.float32 and p.device.type == "cpu"
    assert policy.tokenizer.pad_token_id != policy.tokenizer.eos_token_id


@pytest.mark.parametrize("lora", [False, True])
def test_activation_checkpointing_is_switched_on(tiny_model_path, lora):
    plain = load_policy(tiny_model_path, "arith", None, CPU, lora=lora, need_reference=False)
    policy = load_policy(tiny_model_path, "arith", None, CPU, lora=lora, activation_checkpointing=True)
    assert not plain.model.is_activation_checkpointing
    assert policy.model.is_activation_checkpointing
    assert (
        lora or not policy.reference.is_activation_checkpointing
    )  # the frozen reference keeps its activations
    x = torch.tensor([[13, 14, 15, 16]])
    policy.model(input_ids=x).logits.square().mean().backward()  # gradients reach the trainable weights
    assert all(p.grad is not None for p in policy.model.parameters() if p.requires_grad)
