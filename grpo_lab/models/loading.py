"""Load the policy (the embedded model, a named pretrained model of `pretrained.PRETRAINED`, or any
Hugging Face model id / local path), optionally wrapped with LoRA, and the reference it is
regularized toward."""

import contextlib
import copy
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel
from transformers.utils import logging as hf_logging

from grpo_lab.models.embedded import embedded_path
from grpo_lab.models.pretrained import PRETRAINED, is_pretrained, pretrained_path
from grpo_lab.models.weights import weights_sha256
from grpo_lab.tasks import Task

if TYPE_CHECKING:
    from peft import PeftModel

CPU = torch.device("cpu")
"""the device `load_policy` loads onto unless told"""


@dataclass
class Policy:
    model: torch.nn.Module
    """the trained model (a peft model under LoRA)"""
    tokenizer: object
    """left-padding tokenizer with pad and EOS tokens"""
    reference: torch.nn.Module | None
    """frozen copy of the initial weights; None under LoRA (adapter disabled instead) or when unused"""
    lora: bool
    start_sha256: str
    """sha256 of the weights the run starts from (`weights.weights_sha256` of the loaded model, before
    any LoRA adapter: an adapter starts as the identity)"""
    reference_sha256: str | None
    """sha256 of the reference's weights (the base under LoRA); None when no reference is used"""
    path: str
    """where the weights were loaded from (`resolve_model_path`): the embedded model's directory, a local
    path or a hub id; `load_policy(path)` loads the same start again without naming the task"""

    @contextlib.contextmanager
    def as_reference(self) -> Iterator[torch.nn.Module]:
        """The reference model: the base with the adapter off under LoRA, else the frozen copy."""
        if self.lora:
            with cast("PeftModel", self.model).disable_adapter():
                yield self.model
        else:
            if self.reference is None:
                raise RuntimeError("the reference model was not built: this config does not use it")
            yield self.reference


def resolve_model_path(
    model: str, task: str | None = None, digits: int | None = None, built: Task | None = None
) -> str:
    """'embedded' -> the warm-started model of `task` (`embedded.embedded_path`, with `digits` and, when
    the caller has built the task, `built`); a name of `pretrained.PRETRAINED` -> its converted
    directory (`pretrained.pretrained_path`, converted on first use); a local path must exist;
    anything else is a hub id."""
    if model == "embedded":
        if task is None:
            raise ValueError("the embedded model is warm-started on a task: name it (task=...)")
        return str(embedded_path(task, digits, built))
    if is_pretrained(model):
        return str(pretrained_path(model))
    if model.startswith((".", "/", "~")) and not Path(model).expanduser().exists():
        raise ValueError(
            f"model path {model!r} does not exist (give 'embedded', a pretrained model's name "
            f"({', '.join(PRETRAINED)}), a local path or a hub id)"
        )
    return str(Path(model).expanduser()) if model.startswith("~") else model


def load_policy(
    model: str,
    task: str | None = None,
    digits: int | None = None,
    device: torch.device = CPU,
    lora: bool = False,
    lora_r: int = 8,
    lora_alpha: float = 16.0,
    need_reference: bool = True,
    activation_checkpointing: bool = False,
    built: Task | None = None,
) -> Policy:
    """Everything is loaded through `from_pretrained`, the embedded model included. `task`, `digits`
    and `built` say which embedded model (`resolve_model_path`); any other model needs none of them.
    A name of `pretrained.PRETRAINED` loads its converted directory. `activation_checkpointing`
    recomputes each decoder layer in the backward instead of keeping its activations (less memory,
    one more forward's compute; the lean forward honours it too)."""
    hf_logging.disable_progress_bar()
    path = resolve_model_path(model, task, digits, built)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        base = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    except (OSError, ValueError) as err:
        raise ValueError(f"could not load model {model!r} from {path!r}: {err}") from err
    if tokenizer.eos_token_id is None:
        raise ValueError(f"tokenizer of {model!r} has no EOS token; completions could never end")
    if tokenizer.pad_token_id is None:
        raise ValueError(f"tokenizer of {model!r} has no pad token; set one (e.g. tokenizer.pad_token = ...)")
    tokenizer.padding_side = "left"
    # transformers wraps Module.to with functools.wraps, which mypy does not bind as a method
    base.to(device)  # type: ignore[arg-type]
    net: PreTrainedModel | PeftModel = base
    reference = None
    start = weights_sha256(base)
    if lora:
        from peft import LoraConfig, get_peft_model

        # peft annotates lora_alpha as int; the scaling lora_alpha / r takes a float as it is
        config = LoraConfig(r=lora_r, lora_alpha=lora_alpha, target_modules="all-linear")  # type: ignore[arg-type]
        net = get_peft_model(base, config)
    elif need_reference:
        reference = copy.deepcopy(base).eval().requires_grad_(False)
    if activation_checkpointing:  # non-reentrant: a LoRA model's frozen inputs need nothing more
        net.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    net.train()
    # the reference is a copy of the base (or, under LoRA, the base with the adapter off): its weights
    reference_sha256 = start if reference is not None or lora else None
    return Policy(net, tokenizer, reference, lora, start, reference_sha256, path)
