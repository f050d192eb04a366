"""Per-token log-probs (and entropy) of a completion under a model, in one forward pass.

Two paths to the same numbers (equal within float rounding; `tests/models/test_logprobs.py`):
- plain, for vocabularies up to `PLAIN_MAX_VOCAB`: the logits (N, T, V) of the whole micro-batch and
  their log-softmax. It is the computation every stored run was made with, kept bit for bit.
- chunked, above it: the model's final hidden states (N, T, H) go through the output layer a chunk of
  tokens at a time (`chunk_tokens`). A token's log-prob is its logit minus the logsumexp of its row (no
  log-softmax copy); its entropy comes from the same chunk, without a gradient unless one is asked for.
  Under autograd each chunk is recomputed in the backward (non-reentrant activation checkpointing: the
  chunk keeps only its hidden states), so at most one chunk's float32 logits (C, V) are alive at a
  time, forward or backward, whatever the number of rows. A plain linear output layer goes through
  `_FusedHeadLogprobs`, which recomputes the chunks in its own backward and accumulates the weight's
  gradient in one buffer; any other (a LoRA adapter on the output layer) through checkpointed chunks
  that call it as a module, slower (each chunk adds a weight-sized gradient of its own) but the same.
"""

from dataclasses import dataclass
from typing import Any, Literal, cast

import torch
import torch.nn.functional as F
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

CHUNK_BYTES = 30 * 2**20
"""the float32 logits of one chunk of the chunked path: chunk_tokens = CHUNK_BYTES / (4 V), 51 tokens at
V = 151,936. Just under glibc's largest mmap threshold (32 MiB), so that on CPU a chunk's temporaries come
from the heap instead of fresh pages each time, and as large as that allows for the matmul's sake: on the
Qwen-vocabulary benchmark model (one thread) 30 MiB chunks ran a forward and backward in 2.9 s where
16 MiB took 3.6 s, 64 MiB 3.9 s and the plain path 2.7 s."""

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
    if _fusable(head):  # with or without a gradient: its workspace serves the no-grad forwards too
        weight, bias = cast(nn.Linear, head).weight, cast(nn.Linear, head).bias
        logp, ent = _FusedHeadLogprobs.apply(
            hidden, weight, bias, tokens.reshape(-1), temperature, scale, size, entropy != "none"
        )
        return TokenStats(logp.view(n, t), _entropy_as(ent.view(n, t), entropy), None)  # (N, T)
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


def _fusable(head: nn.Module) -> bool:
    """Whether the fused function covers the output layer: a plain linear layer. Anything else (a LoRA
    adapter on it, say) takes the checkpointed chunks, which call it as a module."""
    return type(head) is nn.Linear


def _entropy_as(entropy: Tensor, kind: Entropy) -> Tensor | None:
    """The fused function's entropy (N, T) as `kind` asks: none, values alone, or with its gradient."""
    return None if kind == "none" else entropy if kind == "grad" else entropy.detach()


class _FusedHeadLogprobs(torch.autograd.Function):
    """Output projection and log-probs in one: hidden states (M, H) x the output weight (V, H) (+ bias)
    -> log p(token) (M,) and entropy (M,) at each token's temperature times `scale`, a chunk of tokens
    at a time. The forward keeps no logits, only the logsumexp of each token; the backward recomputes
    each chunk's logits and accumulates the weight's gradient in place in one (V, H) buffer (verl's and
    Liger-Kernel's design). It pays over the checkpointed chunks, whose every chunk allocates and adds
    a (V, H) weight gradient of its own (155 MB at V = 151,936, H = 256) and runs autograd's temporaries.

    Every chunk's (C, V) tensors live in a `_Workspace` allocated once per call and reused: a fresh
    allocation per chunk goes through the allocator hundreds of times a step, and on CPU glibc's heap
    then keeps what they leave fragmented (measured on the Qwen-vocabulary model at 64 rows: a 5.1 GB
    step peak where the same step with reused buffers peaks near 2 GB, `benchmarks/logprob_memory.py`).

    With z = a / s (a the chunk's logits, s = temperature x scale), p = softmax(z):
    d logp / dz = onehot(token) - p, d entropy / dz = -p (z - E_p[z]), d/da = d/dz / s and
    d/ds = -sum(d/dz * z) / s. An entropy that reaches no loss gets no gradient term; `want_entropy`
    False skips the entropy (returned as zeros) where no caller reads it."""

    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda")
    def forward(
        ctx: Any,
        hidden: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        tokens: Tensor,
        temperature: float | Tensor,
        scale: Tensor | None,
        size: int,
        want_entropy: bool = True,
    ) -> tuple[Tensor, Tensor]:
        s = _token_scale(temperature, scale, len(hidden), hidden.device)  # (M, 1)
        lse = hidden.new_empty(len(hidden), dtype=torch.float32 if hidden.dtype != torch.float64 else None)
        logp, entropy = torch.empty_like(lse), torch.zeros_like(lse)  # (M,)
        space = _Workspace(min(size, len(hidden)), weight, buffers=2)
        for i in range(0, len(hidden), size):
            rows = slice(i, i + size)
            z = space.logits(0, hidden[rows], weight, bias).div_(s[rows])  # (C, V)
            lse[rows] = _logsumexp_into(z, space.take(1, len(z)))  # (C,)
            logp[rows] = z.gather(-1, tokens[rows, None]).squeeze(-1) - lse[rows]
            if want_entropy:  # p = exp(z - lse) in the second buffer, left there by _logsumexp_into
                entropy[rows] = lse[rows] - _rowdot(space.take(1, len(z)), z)
        ctx.save_for_backward(hidden, weight, bias, tokens, s, lse, scale)
        ctx.size, ctx.temperature = size, temperature
        ctx.set_materialize_grads(False)
        return logp, entropy  # (M,), (M,)

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")  # the forward's autocast: the recomputed logits are the same
    def backward(ctx: Any, g_logp: Tensor | None, g_ent: Tensor | None) -> tuple[Tensor | None, ...]:
        hidden, weight, bias, tokens, s, lse, scale = ctx.saved_tensors
        size = ctx.size
        g_hidden = torch.zeros_like(hidden) if ctx.needs_input_grad[0] else None
        g_weight = torch.zeros_like(weight) if ctx.needs_input_grad[1] else None
        g_bias = torch.zeros_like(bias) if bias is not None and ctx.needs_input_grad[2] else None
        g_s = torch.zeros_like(s)  # (M, 1) d/ds, for the scale's gradient
        space = _Workspace(min(size, len(hidden)), weight, buffers=3)
        for i in range(0, len(hidden), size):
            rows = slice(i, i + size)
            h, sc = hidden[rows], s[rows]  # (C, H), (C, 1)
            z = space.logits(0, h, weight, bias).div_(sc)  # (C, V)
            p = torch.sub(z, lse[rows, None], out=space.take(1, len(z))).exp_()  # (C, V)
            g_z = space.take(2, len(z)).zero_()  # (C, V)
            if g_logp is not None:
                g_z.addcmul_(p, g_logp[rows, None], value=-1).scatter_add_(
                    -1, tokens[rows, None], g_logp[rows, None]
                )
            if g_ent is not None:
                mean_z = _rowdot(p, z)[:, None]  # (C, 1)
                g_z.sub_(p.mul_(z - mean_z).mul_(g_ent[rows, None]))  # p is spent here
            if ctx.needs_input_grad[5]:  # the learnable temperature
                g_s[rows] = -_rowdot(g_z, z)[:, None] / sc
            g_a = g_z.div_(sc)  # (C, V) d/da
            if g_a.dtype != weight.dtype:
                g_a = g_a.to(weight.dtype)
            if g_hidden is not None:
                g_hidden[rows] = g_a @ weight
            if g_weight is not None:
                g_weight.addmm_(g_a.T, h.to(weight.dtype))
            if g_bias is not None:
                g_bias.add_(g_a.sum(0))
        g_scale = None
        if scale is not None and ctx.needs_input_grad[5]:
            temperature = ctx.temperature
            g_scale = (
                (g_s.squeeze(-1) * temperature.squeeze(-1)).sum()
                if isinstance(temperature, Tensor)
                else (g_s.sum() * temperature)
            )
        return g_hidden, g_weight, g_bias, None, None, g_scale, None, None


class _Workspace:
    """`buffers` float32 (C, V) buffers for one call of `_FusedHeadLogprobs`, reused by every chunk."""

    def __init__(self, rows: int, weight: Tensor, buffers: int) -> None:
        dtype = torch.float64 if weight.dtype == torch.float64 else torch.float32
        self.buffers = [weight.new_empty(rows, weight.shape[0], dtype=dtype) for _ in range(buffers)]

    def take(self, index: int, rows: int) -> Tensor:
        """The first `rows` rows of buffer `index` (C, V)."""
        return self.buffers[index][:rows]

    def logits(self, index: int, hidden: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        """The chunk's logits (C, V) in float32 at least, written into buffer `index`: in place with the
        matmul where the types allow; under autocast the low-precision product is copied in (upcast)."""
        out = self.take(index, len(hidden))
        if torch.is_autocast_enabled(hidden.device.type) or hidden.dtype != out.dtype:
            return out.copy_(F.linear(hidden, weight, bias))
        torch.mm(hidden, weight.T, out=out)
        return out.add_(bias) if bias is not None else out


def _logsumexp_into(z: Tensor, scratch: Tensor) -> Tensor:
    """logsumexp of each row of z (C, V) -> (C,), leaving softmax(z) in `scratch` (C, V)."""
    top = z.amax(-1, keepdim=True)  # (C, 1)
    total = torch.sub(z, top, out=scratch).exp_().sum(-1, keepdim=True)  # (C, 1)
    scratch.div_(total)
    return (total.log_() + top).squeeze(-1)


def _rowdot(a: Tensor, b: Tensor) -> Tensor:
    """sum(a * b) over each row of a, b (C, V) -> (C,), without a (C, V) product."""
    return torch.bmm(a.unsqueeze(1), b.unsqueeze(2)).reshape(-1)


def _upcast(logits: Tensor) -> Tensor:
    """Logits in float32 at least (bf16 ones upcast a chunk at a time; float64 kept, for gradcheck)."""
    return logits if logits.dtype == torch.float64 else logits.float()


def _token_scale(temperature: float | Tensor, scale: Tensor | None, m: int, device: torch.device) -> Tensor:
    """Each token's divisor (M, 1): its temperature (M, 1) or one for all, times `scale` when given."""
    s = (
        temperature
        if isinstance(temperature, Tensor)
        else torch.full((m, 1), float(temperature), device=device)
    )
    return s * scale.detach() if scale is not None else s


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
