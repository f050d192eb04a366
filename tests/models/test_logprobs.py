"""The chunked log-prob path (large vocabularies) gives the plain path's log-probs, entropies and
gradients, with per-row temperatures, the learnable temperature and LoRA (on the output layer too);
the plain path stays exactly today's computation on small vocabularies; the rows of logits alive at
once do not grow with the batch."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import Qwen2Config, Qwen2ForCausalLM

from grpo_lab.models import logprobs
from grpo_lab.models.logprobs import (
    completion_logits,
    completion_logprobs,
    is_chunked,
    logprobs_and_entropy,
    token_logprobs,
)
from grpo_lab.models.sampler import Rollout

V = 5000
"""a vocabulary above `PLAIN_MAX_VOCAB`: the chunked path's by default"""
N, P, T = 6, 5, 7
CHUNK_BYTES = 4 * V * 8
"""eight tokens a chunk: the 42 tokens of the test batch span several chunks, the last one ragged"""
TOL = dict(atol=2e-5, rtol=2e-4)


def tiny_qwen(vocab: int = V, tie: bool = True) -> Qwen2ForCausalLM:
    """A tiny Qwen2 (GQA, q/k/v biases) with random weights and a `vocab`-row output layer."""
    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=None,
        tie_word_embeddings=tie,
    )
    return Qwen2ForCausalLM(cfg).train()


def batch(vocab: int = V, n: int = N, seed: int = 0) -> Rollout:
    """n completions of random tokens, two per prompt, left-padded prompts of different lengths and
    completions that end early (padding after the end)."""
    gen = torch.Generator().manual_seed(seed)
    prompts = torch.randint(2, vocab, (n // 2, P), generator=gen).repeat_interleave(2, 0)  # (N, P)
    prompt_mask = (
        (torch.arange(P) >= torch.arange(n // 2).remainder(3)[:, None]).long().repeat_interleave(2, 0)
    )
    lengths = torch.arange(n).remainder(T) + 1  # (N,)
    completion_mask = (torch.arange(T) < lengths[:, None]).float()  # (N, T)
    completions = torch.randint(2, vocab, (n, T), generator=gen)  # (N, T)
    return Rollout(
        prompt_ids=prompts * prompt_mask,
        prompt_mask=prompt_mask,
        completion_ids=(completions * completion_mask).long(),
        completion_mask=completion_mask,
        sampler_logp=torch.zeros(n, T),
        truncated=torch.zeros(n, dtype=torch.bool),
    )


def temperatures(n: int = N) -> torch.Tensor:
    return torch.linspace(0.7, 1.3, n)  # (N,)


@pytest.fixture
def chunked(monkeypatch):
    """Small chunks, so that a test batch spans several."""
    monkeypatch.setattr(logprobs, "CHUNK_BYTES", CHUNK_BYTES)


def both_paths(monkeypatch, model, rollout, **kwargs):
    """completion_logprobs on the plain path (threshold above the vocabulary) and the chunked one."""
    out = []
    for threshold in (10**9, 0):
        monkeypatch.setattr(logprobs, "PLAIN_MAX_VOCAB", threshold)
        out.append(completion_logprobs(model, rollout, temperatures(len(rollout.truncated)), **kwargs))
    return out


def grads(loss: torch.Tensor, params: list[torch.Tensor]) -> list[torch.Tensor]:
    return list(torch.autograd.grad(loss, params, allow_unused=False))


def weighted(stats: logprobs.TokenStats, rollout: Rollout) -> torch.Tensor:
    """A loss that reads every log-prob and entropy with its own weight."""
    w = torch.linspace(-1.0, 1.0, rollout.completion_mask.numel()).view_as(rollout.completion_mask)
    assert stats.entropy is not None
    return ((stats.logp * w + 0.3 * stats.entropy * w.flip(0)) * rollout.completion_mask).sum()


@pytest.mark.parametrize("path", ["lean", "transformers"])
@pytest.mark.parametrize("entropy", ["value", "grad"])
@pytest.mark.parametrize("fused", [True, False])
def test_chunked_equals_plain_with_gradients(monkeypatch, chunked, path, entropy, fused):
    """Log-probs, entropy and the gradients of every parameter and of the learnable temperature agree,
    at one temperature per row, through the fused function and through checkpointed chunks; the
    entropy carries a gradient only when asked."""
    model, rollout = tiny_qwen(), batch()
    assert logprobs._fusable(logprobs.output_layer(model))
    monkeypatch.setattr(logprobs, "_fusable", lambda head: fused)
    scale = torch.tensor(1.2, requires_grad=True)
    plain, lean = both_paths(monkeypatch, model, rollout, scale=scale, entropy=entropy, path=path)
    assert plain.logits is None and lean.logits is None
    torch.testing.assert_close(lean.logp, plain.logp, **TOL)
    torch.testing.assert_close(lean.entropy, plain.entropy, **TOL)
    assert lean.entropy is not None and lean.entropy.requires_grad == (entropy == "grad")
    params = [*model.parameters(), scale]
    for a, b in zip(grads(weighted(lean, rollout), params), grads(weighted(plain, rollout), params)):
        torch.testing.assert_close(a, b, **TOL)


def test_chunked_without_gradient_equals_plain(monkeypatch, chunked):
    """The no-grad forwards (old policy, reference): the same log-probs, nothing kept for a backward."""
    model, rollout = tiny_qwen(), batch()
    with torch.no_grad():
        plain, lean = both_paths(monkeypatch, model, rollout)
    assert lean.entropy is None and not lean.logp.requires_grad
    torch.testing.assert_close(lean.logp, plain.logp, **TOL)


@pytest.mark.filterwarnings("ignore:Model has .tie_word_embeddings=True.:UserWarning")  # peft, on tied LoRA
@pytest.mark.parametrize("path", ["lean", "transformers"])
@pytest.mark.parametrize("tie", [True, False])
@pytest.mark.parametrize("on_head", [True, False])
def test_chunked_equals_plain_under_lora(monkeypatch, chunked, tie, path, on_head):
    """A LoRA adapter on the attention, and on the output layer or not (perturbed, so that it acts): the
    same log-probs and the same gradients of every adapter weight, the output layer's included. With
    the adapter on the output layer the checkpointed chunks run it; without, the fused function runs
    the frozen output weight."""
    from peft import LoraConfig, get_peft_model

    targets = ["q_proj", "v_proj", "lm_head"] if on_head else ["q_proj", "v_proj"]
    model = get_peft_model(tiny_qwen(tie=tie), LoraConfig(r=4, lora_alpha=8, target_modules=targets))
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    adapters = [p for name, p in model.named_parameters() if p.requires_grad]
    assert logprobs._fusable(logprobs.output_layer(model)) != on_head
    assert any("lm_head" in name for name, p in model.named_parameters() if p.requires_grad) == on_head
    rollout = batch()
    plain, lean = both_paths(monkeypatch, model, rollout, entropy="grad", path=path)
    torch.testing.assert_close(lean.logp, plain.logp, **TOL)
    for a, b in zip(grads(weighted(lean, rollout), adapters), grads(weighted(plain, rollout), adapters)):
        torch.testing.assert_close(a, b, **TOL)
    with torch.no_grad(), model.disable_adapter():  # the reference: the adapter off
        ref_plain, ref_lean = both_paths(monkeypatch, model, rollout, path=path)
    torch.testing.assert_close(ref_lean.logp, ref_plain.logp, **TOL)
    assert not torch.allclose(ref_lean.logp, lean.logp)


@pytest.mark.parametrize("bias", [True, False])
def test_fused_function_gradients_are_exact(bias):
    """The fused function's hand-written backward against finite differences (float64): gradients of
    the hidden states, the weight, the bias and the scale, through log-probs and entropy, in chunks of
    3 rows (the last ragged), at per-token temperatures."""
    gen = torch.Generator().manual_seed(0)
    m, h, v = 7, 4, 11
    hidden = torch.randn(m, h, dtype=torch.float64, generator=gen, requires_grad=True)
    weight = torch.randn(v, h, dtype=torch.float64, generator=gen, requires_grad=True)
    b = torch.randn(v, dtype=torch.float64, generator=gen, requires_grad=True) if bias else None
    tokens = torch.randint(0, v, (m,), generator=gen)
    temperature = torch.linspace(0.7, 1.3, m, dtype=torch.float64)[:, None]  # (M, 1)
    scale = torch.tensor(1.1, dtype=torch.float64, requires_grad=True)

    def both(hidden, weight, b, scale):
        logp, ent = logprobs._FusedHeadLogprobs.apply(hidden, weight, b, tokens, temperature, scale, 3)
        return logp, ent

    assert torch.autograd.gradcheck(both, (hidden, weight, b, scale))
    logits = (F.linear(hidden, weight, b) / temperature) / scale  # (M, V)
    logp, ent = logprobs_and_entropy(logits[None], tokens[None])
    torch.testing.assert_close(both(hidden, weight, b, scale), (logp[0], ent[0]))


def test_large_vocabulary_takes_the_chunked_path_and_small_the_plain_one(tiny_model_path):
    """A vocabulary above the threshold is chunked; the tiny character-vocabulary model is not, and a
    caller that keeps the logits (the exact KL) always gets the plain path."""
    from transformers import AutoModelForCausalLM

    small = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    assert logprobs.vocab_size(small) <= logprobs.PLAIN_MAX_VOCAB < V
    assert is_chunked(tiny_qwen()) and not is_chunked(small) and not is_chunked(tiny_qwen(), keep_logits=True)


@pytest.mark.parametrize("path", ["lean", "transformers"])
def test_plain_path_is_todays_computation_bit_for_bit(tiny_model_path, path):
    """On a small vocabulary the log-probs, entropies and the kept logits are exactly those of the
    logits' log-softmax, as before the chunked path existed (the stored runs depend on it)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path).train()
    vocab = logprobs.vocab_size(model)
    rollout, temps, scale = batch(vocab), temperatures(), torch.tensor(0.9)
    stats = completion_logprobs(
        model, rollout, temps, scale=scale, entropy="grad", keep_logits=True, path=path
    )
    logits = completion_logits(model, rollout, temps, path) / scale  # (N, T, V)
    logp, entropy = logprobs_and_entropy(logits, rollout.completion_ids)
    assert stats.logits is not None and torch.equal(stats.logits, logits)
    assert logp is not None and torch.equal(stats.logp, logp) and torch.equal(stats.entropy, entropy)
    alone = completion_logprobs(model, rollout, temps, path=path)
    assert torch.equal(
        alone.logp, token_logprobs(completion_logits(model, rollout, temps, path), rollout.completion_ids)
    )


class LogitRows(TorchDispatchMode):
    """The most rows of vocabulary-wide tensors (last dimension V) any op produced, forward or backward;
    tensors of the output layer's weight size (its gradient, laid out (H, V) on the way) are not logits."""

    def __init__(self, vocab: int, hidden: int) -> None:
        super().__init__()
        self.vocab, self.weight_size, self.most = vocab, vocab * hidden, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if not isinstance(t, torch.Tensor) or t.numel() == self.weight_size:
                continue
            if t.dim() >= 2 and t.shape[-1] == self.vocab:
                self.most = max(self.most, t.numel() // self.vocab)
        return out


@pytest.mark.parametrize("path", ["lean", "transformers"])
def test_logit_rows_alive_do_not_grow_with_the_batch(monkeypatch, chunked, path):
    """Forward and backward of 4 and of 16 completions: the chunked path never makes a (rows, V) tensor
    of more than one chunk's rows, whatever the batch; the plain path makes one of every token."""
    model = tiny_qwen()
    chunk = logprobs.chunk_tokens(V, CHUNK_BYTES)
    for n in (4, 16):
        rollout = batch(n=n)
        for threshold, most in ((0, chunk), (10**9, n * T)):
            monkeypatch.setattr(logprobs, "PLAIN_MAX_VOCAB", threshold)
            rows = LogitRows(V, model.config.hidden_size)
            with rows:
                stats = completion_logprobs(model, rollout, temperatures(n), entropy="grad", path=path)
                weighted(stats, rollout).backward()
            model.zero_grad(set_to_none=True)
            assert rows.most == most, (n, threshold)
