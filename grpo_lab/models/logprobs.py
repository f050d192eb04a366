"""Per-token log-probs (and entropy) of a completion under a model, in one forward pass.

Two paths to the same numbers (equal within float rounding; `tests/models/test_logprobs.py`):
- plain, for vocabularies up to `PLAIN_MAX_VOCAB`: the logits (N, T, V) of the whole micro-batch and
  their log-softmax. It is the computation every stored run was made with, kept bit for bit.
- chunked, above it: the model's final hidden states (N, T, H) go through the output layer a chunk of
  tokens at a time (`chunk_tokens`). A token's log-prob is its logit minus the logsumexp of its row (no
  log-softmax copy); its entropy comes from the same chunk, without a gradient unless one is asked for.
  Under autograd each chunk is recomputed in the backward (non-reentrant activation checkpointing: the
  chunk keeps only its hidden states), so at most one chunk's float32 logits (C, V) are alive at a
  time, forward or backward, whatever the number of rows. The output layer is called as a module, so a
  LoRA adapter on it takes part as everywhere else.
"""

from dataclasses import dataclass
from typing import Literal, cast

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint
from transformers import PreTrainedModel

from grpo_lab.models import lean_decode
from grpo_lab.models.sampler import Rollout, positions, takes_logits_to_keep

PLAIN_MAX_VOCAB = 4096
"""vocabularies up to this size take the plain path. Every stored run (the embedded models' ~100-token
character vocabulary) was made on it and the run store is keyed to its exact numbers, so it stays as it
was; it is also the path that gives the full logits the exact KL sums over (`keep_logits`). Above it,
the (N, T, V) float32 tensors of the plain path are what a real vocabulary's memory goes to (Qwen2.5's
151,936 rows: 2.3 GB per copy at 64 x 60 tokens), so the chunked path takes over."""

CHUNK_BYTES = 16 * 2**20
"""the float32 logits of one chunk of the chunked path: chunk_tokens = CHUNK_BYTES / (4 V), 27 tokens at
V = 151,936. Small enough that a chunk's temporaries stay under glibc's largest mmap threshold (32 MiB),
so on CPU they come from the heap instead of fresh pages each time; large enough for a good matmul."""

Entropy = Literal["none", "value", "grad"]
"""what `completion_logprobs` computes of the entropy: nothing, its values (no gradient), or values with
their gradient (only the entropy bonus needs it; top-entropy token selection reads values)"""


@dataclass(frozen=True)
class TokenStats:
    """What `completion_logprobs` gives for N completions of T tokens."""

    logp: Tensor
    """(N, T) log p(token) at each row's temperature"""
    entropy: Tensor | None
    """(N, T) entropy of each next-token distribution; None when not asked for"""
    logits: Tensor | None
    """(N, T, V) the scaled logits, only when asked for (`keep_logits`: the exact KL)"""


def completion_logits(
    model: nn.Module, rollout: Rollout, temperature: float | Tensor, path: str | None = None
) -> Tensor:
    """Temperature-scaled logits that predict each completion token: (N, T, V), at one temperature or
    one per row (N,). On the lean path
    (`path` as in `lean_decode.use_lean`) each distinct prompt of the batch is run once for all its
    completions; the transformers path runs every row in full, with the output layer on the completion
    positions only where the model takes `logits_to_keep`. Same logits, same gradients."""
    if isinstance(temperature, Tensor):
        temperature = temperature.view(-1, 1, 1)  # (N, 1, 1)
    if lean_decode.use_lean(model, path):
        logits = lean_decode.shared_prompt_logits(
            model, rollout.prompt_ids, rollout.prompt_mask, rollout.completion_ids, rollout.completion_mask
        )
        return logits / temperature  # (N, T, V)
    ids, mask = rollout.input_ids(), rollout.attention_mask()  # (N, P+T)
    t = rollout.completion_ids.shape[1]
    keep = {"logits_to_keep": t} if takes_logits_to_keep(model) else {}
    # the logit at position i predicts token i+1, so the completion is read off [P-1, P+T-1)
    logits = model(
        input_ids=ids[:, :-1],
        attention_mask=mask[:, :-1],
        position_ids=positions(mask)[:, :-1],
        **keep,
    ).logits
    return logits[:, -t:].float() / temperature  # (N, T, V)


def completion_hidden(model: nn.Module, rollout: Rollout, path: str | None = None) -> Tensor:
    """The final-normed hidden states (N, T, H) that the output layer turns into `completion_logits`
    (before the temperature): through the lean path's shared-prompt forward, or the transformers
    model's decoder (`get_decoder`, its final norm included), with `path` as in `lean_decode.use_lean`."""
    if lean_decode.use_lean(model, path):
        return lean_decode.shared_prompt_hidden(
            model, rollout.prompt_ids, rollout.prompt_mask, rollout.completion_ids, rollout.completion_mask
        )  # (N, T, H)
    ids, mask = rollout.input_ids(), rollout.attention_mask()  # (N, P+T)
    t = rollout.completion_ids.shape[1]
    decoder = _transformers(model).get_decoder()
    hidden = decoder(
        input_ids=ids[:, :-1], attention_mask=mask[:, :-1], position_ids=positions(mask)[:, :-1]
    ).last_hidden_state  # (N, P+T-1, H)
    return hidden[:, -t:]  # (N, T, H)


def _transformers(model: nn.Module) -> PreTrainedModel:
    """The transformers model (inside a peft wrapper, if any)."""
    return cast(PreTrainedModel, lean_decode.causal_lm(model))


def output_layer(model: nn.Module) -> nn.Module:
    """The model's output layer (hidden states -> logits), a LoRA-wrapped one included."""
    head = _transformers(model).get_output_embeddings()
    if not isinstance(head, nn.Module):
        raise ValueError(f"{type(model).__name__} has no output layer (get_output_embeddings)")
    return head


def vocab_size(model: nn.Module) -> int:
    """Rows of the model's output layer: the vocabulary the log-softmax runs over."""
    return int(cast(Tensor, output_layer(model).weight).shape[0])


def is_chunked(model: nn.Module, keep_logits: bool = False) -> bool:
    """Whether `completion_logprobs` takes the chunked path: a vocabulary above `PLAIN_MAX_VOCAB` and no
    caller that needs the full logits."""
    return not keep_logits and vocab_size(model) > PLAIN_MAX_VOCAB


def chunk_tokens(vocab: int, chunk_bytes: int = CHUNK_BYTES) -> int:
    """Tokens per chunk of the chunked path: as many as fit `chunk_bytes` of float32 logits, at least one."""
    return max(1, chunk_bytes // (4 * vocab))


def completion_logprobs(
    model: nn.Module,
    rollout: Rollout,
    temperature: float | Tensor,
    *,
    scale: Tensor | None = None,
    entropy: Entropy = "none",
    keep_logits: bool = False,
    path: str | None = None,
) -> TokenStats:
    """log p(token) (N, T) of each completion token at one temperature or one per row (N,), divided
    further by `scale` (a 0-d tensor: the learnable temperature, which gets its gradient) when given;
    the entropy as `entropy` says; the scaled logits (N, T, V) with `keep_logits`. The plain path on
    small vocabularies or when the logits are kept, else the chunked one (module docstring)."""
    tokens = rollout.completion_ids  # (N, T)
    if is_chunked(model, keep_logits):
        return _chunked(model, rollout, temperature, scale, entropy, path)
    logits = completion_logits(model, rollout, temperature, path)  # (N, T, V)
    if scale is not None:
        logits = logits / scale
    if entropy == "none":
        return TokenStats(token_logprobs(logits, tokens), None, logits if keep_logits else None)
    logp, ent = logprobs_and_entropy(logits, tokens)  # (N, T)
    assert logp is not None  # the tokens were given
    return TokenStats(logp, ent if entropy == "grad" else ent.detach(), logits if keep_logits else None)


def _chunked(
    model: nn.Module,
    rollout: Rollout,
    temperature: float | Tensor,
    scale: Tensor | None,
    entropy: Entropy,
    path: str | None,
) -> TokenStats:
    """`completion_logprobs` a chunk of tokens at a time through the output layer; each chunk is
    recomputed in the backward when a gradient can flow through it."""
    tokens = rollout.completion_ids  # (N, T)
    n, t = tokens.shape
    head = output_layer(model)
    hidden = completion_hidden(model, rollout, path).reshape(n * t, -1)  # (N T, H)
    if isinstance(temperature, Tensor):
        temperature = temperature.reshape(-1, 1).expand(n, t).reshape(-1, 1)  # (N T, 1)
    size = chunk_tokens(vocab_size(model), CHUNK_BYTES)  # read here, so that a test can shrink it
    needs_grad = torch.is_grad_enabled() and (
        hidden.requires_grad
        or any(p.requires_grad for p in head.parameters())
        or (scale is not None and scale.requires_grad)
    )
    logps: list[Tensor] = []
    entropies: list[Tensor] = []
    for i, h in enumerate(hidden.split(size)):
        rows = slice(i * size, i * size + len(h))
        temp = temperature[rows] if isinstance(temperature, Tensor) else temperature  # (C, 1)
        args = (head, h, tokens.reshape(-1)[rows], temp, scale, entropy)
        logp, ent = (
            checkpoint(_chunk_stats, *args, use_reentrant=False) if needs_grad else _chunk_stats(*args)
        )  # (C,), (C,) or None
        logps.append(logp)
        entropies.extend([ent] if ent is not None else [])
    ent_all = torch.cat(entropies).view(n, t) if entropy != "none" else None  # (N, T)
    return TokenStats(torch.cat(logps).view(n, t), ent_all, None)


def _chunk_stats(
    head: nn.Module,
    hidden: Tensor,
    tokens: Tensor,
    temperature: float | Tensor,
    scale: Tensor | None,
    entropy: Entropy,
) -> tuple[Tensor, Tensor | None]:
    """log p(token) (C,) and, as `entropy` says, the entropy (C,) of C tokens from their hidden states
    (C, H): the gathered logit minus the row's logsumexp, the entropy as logsumexp - sum(p * logit)."""
    logits = head(hidden).float() / temperature  # (C, V)
    if scale is not None:
        logits = logits / scale
    lse = torch.logsumexp(logits, dim=-1)  # (C,)
    logp = logits.gather(-1, tokens[:, None]).squeeze(-1) - lse  # (C,)
    if entropy == "none":
        return logp, None
    with torch.set_grad_enabled(entropy == "grad" and torch.is_grad_enabled()):
        ent = lse - (torch.softmax(logits, dim=-1) * logits).sum(-1)  # (C,)
    return logp, ent


def token_logprobs(logits: Tensor, tokens: Tensor) -> Tensor:
    """log p(token) from logits (N, T, V) and tokens (N, T)."""
    return torch.log_softmax(logits, dim=-1).gather(-1, tokens[..., None]).squeeze(-1)  # (N, T)


def token_entropy(logits: Tensor) -> Tensor:
    """Entropy of each next-token distribution: (N, T)."""
    return logprobs_and_entropy(logits, None)[1]


def logprobs_and_entropy(logits: Tensor, tokens: Tensor | None) -> tuple[Tensor | None, Tensor]:
    """log p(token) (N, T) and the entropy (N, T) from one log-softmax of the logits (N, T, V)."""
    logsm = torch.log_softmax(logits, dim=-1)  # (N, T, V)
    logp = logsm.gather(-1, tokens[..., None]).squeeze(-1) if tokens is not None else None  # (N, T)
    return logp, -(logsm.exp() * logsm).sum(-1)
