"""Shared fixtures: a tiny random Llama saved like a user's model, and the embedded model."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from grpo_lab import Config, preset
from grpo_lab.models.tokenizer import build_char_tokenizer


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """`make test` distributes with xdist's `--dist loadgroup`: every test without a group of its own
    joins its file's group, so a file's module- and session-scoped fixtures are built on one worker (as
    under `loadfile`), while a file of many independent long tests (the notebooks' papermill runs)
    names a group per test and spreads over the workers. Tryfirst: xdist reads the groups in its own
    hook of this name."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


@pytest.fixture(scope="session", autouse=True)
def one_thread():
    """One torch thread for the whole session (set before any other fixture builds a model): fast on
    the tiny models, and results that do not depend on the machine's core count."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def save_tiny_llama(path, vocab_size: int | None = None) -> str:
    """A random ~60k-parameter Llama (seed 0) with the character tokenizer, saved with save_pretrained;
    `vocab_size` rows in its output layer (default: the tokenizer's)."""
    tok = build_char_tokenizer()
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=vocab_size or len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
    )
    LlamaForCausalLM(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory) -> str:
    """The tiny Llama, loaded through the same from_pretrained path as any user model (fast: no warm
    start)."""
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def large_vocab_path(tmp_path_factory) -> str:
    """The tiny Llama with a 5,000-row output layer (above `logprobs.PLAIN_MAX_VOCAB`, so it takes the
    chunked log-prob path, as Qwen2.5's vocabulary does): the rows beyond the character tokenizer are
    tokens it never samples as text."""
    return save_tiny_llama(tmp_path_factory.mktemp("large-vocab"), vocab_size=5000)


@pytest.fixture(scope="session")
def tiny_config(tiny_model_path):
    """Factory of fast configs on the tiny model: `tiny_config(**changes)`. Judge's dense reward keeps
    the random model's loss away from zero."""

    def make(**changes) -> Config:
        base = dict(model=tiny_model_path, task="judge", steps=3, prompts_per_step=4, group_size=4,
                    max_completion_length=8, val_size=8, eval_every=3, progress=False)  # fmt: skip
        return preset("grpo", **{**base, **changes})

    return make


@pytest.fixture(scope="session")
def embedded_arith_path() -> str:
    """The warm-started embedded model for `arith` (built once, then cached on disk)."""
    from grpo_lab.models.embedded import embedded_path

    return str(embedded_path("arith"))


@pytest.fixture(scope="session")
def embedded_worked_path() -> str:
    """The warm-started embedded model for `worked`, the study base's task (built once, then cached)."""
    from grpo_lab.models.embedded import embedded_path

    return str(embedded_path("worked"))
