"""A lean path through Llama-architecture causal LMs (Llama, Qwen2 without sliding windows): the
decoder layers' own modules (norms, projections, MLP, LoRA adapters included) called directly, with
the attention, rotary embedding and KV cache written here in plain torch.

Two uses, both exact rewrites of the transformers forward (same function, float-rounding apart;
`tests/models/test_lean_decode.py` checks logits and gradients):
- `LeanDecoder`: prefill and decode steps over a preallocated KV cache. The prefill runs once per
  distinct prompt and its cache is shared by the prompt's G completions; each decode step skips the
  per-step mask building, cache concatenation and output containers of the transformers forward.
- `shared_prompt_logits`: the teacher-forced forward of a batch of completions in which every distinct
  prompt is run once and its keys and values are attended by all its completions (the gradient of
  the shared prompt sums over the group, as it would over G copies), prompts and completions going
  through each layer's norms, projections and MLP as one flat batch. `shared_prompt_hidden` is the
  same forward without the output layer, for callers that apply it a chunk of tokens at a time.

The path keeps no copy of the model between calls: it calls the modules as they are at that moment,
so it always runs the current policy (and the reference while a peft adapter is disabled). The one
derived tensor is built per sampling call, on CPU: the query/key/value and gate/up weights of plain
linear layers stacked for one matmul each, read from the live parameters when the call starts.
Models this path does not cover are named by `unsupported_reason`; callers then use the transformers
forward."""

import os
from collections.abc import Callable, Sequence
from typing import Protocol, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM")
"""transformers causal-LM classes the lean path reproduces (pre-norm RMSNorm, RoPE, gated MLP, GQA
attention); matched by exact class, so a subclass with its own forward is never taken for one"""
UNSUPPORTED_ROPE = ("dynamic", "longrope")
"""RoPE variants whose frequencies depend on the sequence length seen so far"""
PATHS = ("auto", "lean", "transformers")
"""how sampling and log-probs run the model: 'lean' (this module), 'transformers' (the model's own
forward), 'auto' (lean when `unsupported_reason` finds nothing, else transformers)"""
DEFAULT_PATH = os.environ.get("GRPO_LAB_FORWARD", "auto")
"""the path taken when a call does not name one; the environment variable GRPO_LAB_FORWARD sets it
for every process started afterwards (sweep workers included), e.g. GRPO_LAB_FORWARD=transformers"""


class _Config(Protocol):
    """The fields of a Llama-architecture config the lean path reads."""

    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    attention_dropout: float


class _RMSNorm(Protocol):
    weight: Tensor
    variance_epsilon: float

    def __call__(self, x: Tensor) -> Tensor: ...


class _Attention(Protocol):
    q_proj: nn.Module
    k_proj: nn.Module
    v_proj: nn.Module
    o_proj: nn.Module
    scaling: float


class _MLP(Protocol):
    gate_proj: nn.Module
    up_proj: nn.Module
    down_proj: nn.Module
    act_fn: Callable[[Tensor], Tensor]

    def __call__(self, x: Tensor) -> Tensor: ...


class _DecoderLayer(Protocol):
    self_attn: _Attention
    mlp: _MLP
    input_layernorm: _RMSNorm
    post_attention_layernorm: _RMSNorm


class _Backbone(Protocol):
    embed_tokens: nn.Embedding
    rotary_emb: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]
    layers: Sequence[_DecoderLayer]
    norm: _RMSNorm


class _CausalLM(Protocol):
    """The modules of a Llama-architecture causal LM (one of `ARCHITECTURES`) the lean path calls:
    torch types them all as `Tensor | Module`, so the lean path reads them through this shape."""

    config: _Config
    model: _Backbone
    lm_head: nn.Module
    training: bool
    device: torch.device


def causal_lm(model: nn.Module) -> nn.Module:
    """The transformers model inside a peft wrapper (the model itself otherwise)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def _llama(model: nn.Module) -> _CausalLM:
    """`causal_lm(model)` as the lean path sees it; only for a model `unsupported_reason` accepts."""
    return cast(_CausalLM, causal_lm(model))


def unsupported_reason(model: nn.Module) -> str | None:
    """Why the lean path cannot run `model`; None when it can."""
    lm = causal_lm(model)
    kind = type(lm)
    if kind.__name__ not in ARCHITECTURES or not kind.__module__.startswith("transformers."):
        return f"architecture {kind.__name__} (the lean path covers {', '.join(ARCHITECTURES)})"
    cfg = lm.config
    rope = (getattr(cfg, "rope_parameters", None) or {}).get("rope_type", "default")
    if rope in UNSUPPORTED_ROPE:
        return f"RoPE type {rope!r}"
    if any(kind != "full_attention" for kind in getattr(cfg, "layer_types", None) or ()):
        return "sliding-window attention layers"
    if lm.training and _llama(model).config.attention_dropout > 0:
        return "attention dropout in training mode"
    return None


def use_lean(model: nn.Module, path: str | None = None) -> bool:
    """Whether `path` (None: `DEFAULT_PATH`) runs `model` through the lean path; 'lean' on a model
    it does not cover is an error that says why."""
    path = path or DEFAULT_PATH
    if path not in PATHS:
        raise ValueError(f"unknown forward path {path!r}; valid: {', '.join(PATHS)}")
    if path == "transformers":
        return False
    reason = unsupported_reason(model)
    if reason is not None and path == "lean":
        raise ValueError(f"the lean path does not support this model: {reason}; use 'auto' or 'transformers'")
    return reason is None


def _rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotary embedding of x (N, h, S, D) with cos, sin (N, 1, S, D): x cos + rotate_half(x) sin."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin


class _Lean:
    """The parts of one causal LM that the lean forward calls."""

    def __init__(self, model: nn.Module) -> None:
        self.lm = _llama(model)
        cfg = self.lm.config
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads

    def rotary(self, pos: Tensor) -> tuple[Tensor, Tensor]:
        """The model's own cos and sin at positions pos (..., S): (..., S, D) each."""
        embed = self.lm.model.embed_tokens.weight
        flat = pos.reshape(1, -1)
        cos, sin = self.lm.model.rotary_emb(embed[:1, None], flat)  # (1, S', D); dtype of the embeddings
        return cos.view(*pos.shape, -1), sin.view(*pos.shape, -1)

    def layer(
        self,
        i: int,
        x: Tensor,
        rope: tuple[Tensor, Tensor],
        prompts: tuple[int, int, Tensor],
        completions: tuple[int, int, Tensor, Tensor] | None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Decoder layer `i` on a flat batch of tokens x (L, H) with their rotary cos, sin (L, 1, D):
        first `prompts` = (U, P, attend (U, 1, P, P)), U prompts of P tokens each, then optionally
        `completions` = (N, S, attend (N, 1, S, P + S), rows (N,)), N continuations of S tokens, the
        n-th attending to the keys and values of prompt rows[n] followed by its own. The norms,
        projections and MLP run once over all L tokens; only the attention is split by block.
        Returns the new x (L, H) and the prompts' keys and values (U, hk, P, D)."""
        layer = self.lm.model.layers[i]
        attn, d, (u, p, attend) = layer.self_attn, self.head_dim, prompts
        y = layer.input_layernorm(x)
        q = _rope(attn.q_proj(y).view(len(x), -1, d), *rope)  # (L, hq, D)
        k = _rope(attn.k_proj(y).view(len(x), -1, d), *rope)  # (L, hk, D)
        v = attn.v_proj(y).view(len(x), -1, d)

        def heads(t: Tensor, rows: int, length: int) -> Tensor:
            return t.view(rows, length, -1, d).transpose(1, 2)  # (rows, h, length, D)

        up = u * p
        k_prompt, v_prompt = heads(k[:up], u, p), heads(v[:up], u, p)
        out = _attention(heads(q[:up], u, p), k_prompt, v_prompt, attend, attn.scaling).reshape(up, -1)
        if completions is not None:
            n, c, attend, rows = completions
            keys = torch.cat([k_prompt[rows], heads(k[up:], n, c)], 2)  # (N, hk, P + S, D)
            values = torch.cat([v_prompt[rows], heads(v[up:], n, c)], 2)
            out = torch.cat(
                [out, _attention(heads(q[up:], n, c), keys, values, attend, attn.scaling).reshape(n * c, -1)]
            )
        x = x + attn.o_proj(out)
        return x + layer.mlp(layer.post_attention_layernorm(x)), k_prompt, v_prompt

    def logits(self, hidden: Tensor) -> Tensor:
        """Final norm and LM head: hidden (..., H) -> float logits (..., V)."""
        return self.lm.lm_head(self.lm.model.norm(hidden)).float()


def _rms_norm(x: Tensor, norm: _RMSNorm) -> Tensor:
    """The model's RMSNorm module as one fused op: normalized in float32, cast back, then scaled."""
    return norm.weight * F.rms_norm(x.float(), (x.shape[-1],), eps=norm.variance_epsilon).to(x.dtype)


def _attention(q: Tensor, keys: Tensor, values: Tensor, attend: Tensor, scale: float) -> Tensor:
    """Softmax attention of q (N, hq, S, D) over keys, values (N, hk, K, D) where attend (N, 1, S, K)
    is True: (N, S, hq x D). A query head group shares its key head, as in the model (no copies).
    On CPU without a gradient, plain matmuls (there they cost about what the fused kernel does); with a
    gradient, or on GPU, the fused kernel, which is faster there."""
    n, hq, s, d = q.shape
    hk = keys.shape[1]
    needs_grad = torch.is_grad_enabled() and (q.requires_grad or keys.requires_grad or values.requires_grad)
    if q.is_cuda or needs_grad:
        out = F.scaled_dot_product_attention(
            q, keys, values, attn_mask=attend, scale=scale, enable_gqa=hq != hk
        )
        return out.transpose(1, 2).reshape(n, s, hq * d)
    g = hq // hk
    scores = torch.matmul(q.reshape(n, hk, g * s, d), keys.transpose(-1, -2)) * scale  # (N, hk, g S, K)
    scores = scores.view(n, hk, g, s, -1).masked_fill(~attend[:, :, None], -torch.inf)  # (N, hk, g, S, K)
    weights = scores.softmax(-1, dtype=torch.float32).to(values.dtype).view(n, hk, g * s, -1)
    out = torch.matmul(weights, values).view(n, hq, s, d)  # (N, hq, S, D)
    return out.transpose(1, 2).reshape(n, s, hq * d)


class LeanDecoder:
    """Prefill and decode steps of one sampling call: `n` rows, at most `length` tokens each
    (prompt + completion), keys and values in a cache allocated at the prefill."""

    def __init__(self, model: nn.Module, n: int, length: int) -> None:
        self.net = _Lean(model)
        self.n, self.length, self.filled = n, length, 0
        self.keys: list[Tensor] = []
        self.values: list[Tensor] = []
        self.valid: Tensor | None = None  # (N, length) the cache slots a token may attend to, from prefill
        # the model's rotary embedding of every position a row can reach, looked up at each step
        self.cos, self.sin = self.net.rotary(torch.arange(length, device=self.net.lm.device))  # (length, D)
        # on CPU, where a decode step is a few hundred small ops, the projections that read the same
        # input run as one matmul: their weights stacked for this call (plain linear layers only)
        self.fused: list[tuple[_Stacked, _Stacked]] = [(None, None)] * len(self.net.lm.model.layers)
        if self.cos.device.type == "cpu":
            with torch.no_grad():
                self.fused = [
                    (_stacked([a.q_proj, a.k_proj, a.v_proj]), _stacked([m.gate_proj, m.up_proj]))
                    for a, m in ((layer.self_attn, layer.mlp) for layer in self.net.lm.model.layers)
                ]

    def prefill(self, ids: Tensor, mask: Tensor, pos: Tensor, repeats: int) -> Tensor:
        """Distinct left-padded prompts ids, mask, pos (B, P), each the prompt of `repeats`
        consecutive rows: runs each once and gives its cache to all its rows. Logits (B x repeats, V)."""
        b, p = ids.shape
        cos, sin = self.net.rotary(pos)  # (B, P, D)
        rope = cos.reshape(b * p, 1, -1), sin.reshape(b * p, 1, -1)
        x = self.net.lm.model.embed_tokens(ids.reshape(-1))  # (B P, H)
        prompts = (b, p, _prompt_attention_mask(mask)[:, None])
        for i in range(len(self.net.lm.model.layers)):
            x, k, v = self.net.layer(i, x, rope, prompts, None)  # keys, values (B, hk, P, D)
            shape = (self.n, k.shape[1], self.length, k.shape[-1])
            self.keys.append(k.new_empty(shape))
            self.values.append(v.new_empty(shape))
            self.keys[i][:, :, :p] = k.repeat_interleave(repeats, dim=0)
            self.values[i][:, :, :p] = v.repeat_interleave(repeats, dim=0)
        self.valid = torch.zeros(self.n, self.length, dtype=torch.bool, device=ids.device)
        self.valid[:, :p] = mask.bool().repeat_interleave(repeats, dim=0)
        self.filled = p
        return self.net.logits(x.view(b, p, -1)[:, -1]).repeat_interleave(repeats, dim=0)  # (N, V)

    def step(self, tok: Tensor, alive: Tensor, pos: Tensor) -> Tensor:
        """One new token per row tok (N,) at positions pos (N, 1); `alive` (N,) is False on rows that
        already ended (their token is padding: it attends, but nothing attends to it). Logits (N, V)."""
        assert self.valid is not None  # prefill came first
        slot, n, d, hq, hk = self.filled, self.n, self.net.head_dim, self.net.heads, self.net.kv_heads
        self.valid[:, slot] = alive
        attend = self.valid[:, None, None, : slot + 1]  # (N, 1, 1, slot + 1)
        cos, sin = self.cos[pos], self.sin[pos]  # (N, 1, D)
        x = self.net.lm.model.embed_tokens(tok)  # (N, H)
        for i, (layer, (qkv, gate_up)) in enumerate(zip(self.net.lm.model.layers, self.fused)):
            attn, mlp = layer.self_attn, layer.mlp
            y = _rms_norm(x, layer.input_layernorm)
            if qkv is not None:
                proj = F.linear(y, *qkv).view(n, hq + 2 * hk, d)
                qk = _rope(proj[:, : hq + hk], cos, sin)  # (N, hq + hk, D): one rotation for both
                q, k, v = qk[:, :hq], qk[:, hq:], proj[:, hq + hk :]
            else:
                q = _rope(attn.q_proj(y).view(n, -1, d), cos, sin)  # (N, hq, D)
                k = _rope(attn.k_proj(y).view(n, -1, d), cos, sin)  # (N, hk, D)
                v = attn.v_proj(y).view(n, -1, d)
            self.keys[i][:, :, slot] = k
            self.values[i][:, :, slot] = v
            keys, values = self.keys[i][:, :, : slot + 1], self.values[i][:, :, : slot + 1]
            out = _attention(q[:, :, None], keys, values, attend, attn.scaling)  # (N, 1, hq D)
            x = x + attn.o_proj(out.view(n, -1))
            y = _rms_norm(x, layer.post_attention_layernorm)
            gate, up = (
                F.linear(y, *gate_up).chunk(2, dim=-1)
                if gate_up is not None
                else (mlp.gate_proj(y), mlp.up_proj(y))
            )
            x = x + mlp.down_proj(mlp.act_fn(gate) * up)
        self.filled = slot + 1
        return self.net.logits(x)  # (N, V)


_Stacked = tuple[Tensor, Tensor | None] | None
"""the stacked weight and bias of linear layers that read the same input (`_stacked`)"""


def _stacked(modules: list[nn.Module]) -> _Stacked:
    """The weights (and biases) of linear layers that read the same input, stacked into one; None
    unless every one is a plain `nn.Linear` (a LoRA layer, say, runs as its own module)."""
    linears = [m for m in modules if type(m) is nn.Linear]
    if len(linears) < len(modules):
        return None
    weight = torch.cat([m.weight for m in linears])
    if all(m.bias is None for m in linears):
        return weight, None
    return weight, torch.cat(
        [m.bias if m.bias is not None else m.weight.new_zeros(len(m.weight)) for m in linears]
    )


def _prompt_attention_mask(mask: Tensor) -> Tensor:
    """Which tokens each token of left-padded prompts mask (U, P) attends to: (U, P, P). A padding
    token attends only to itself, so its (never attended) keys and values stay finite."""
    p = mask.shape[1]
    causal = torch.ones(p, p, dtype=torch.bool, device=mask.device).tril()  # (P, P)
    return (causal & mask.bool()[:, None, :]) | torch.eye(p, dtype=torch.bool, device=mask.device)


def shared_prompt_logits(
    model: nn.Module, prompt_ids: Tensor, prompt_mask: Tensor, completion_ids: Tensor, completion_mask: Tensor
) -> Tensor:
    """Logits (N, T, V) that predict each completion token, from one forward in which each distinct
    left-padded prompt (rows of prompt_ids, prompt_mask (N, P)) is run once; completion tokens after
    the end (completion_mask (N, T) 0) are masked from attention, as in the transformers forward."""
    hidden = shared_prompt_hidden(model, prompt_ids, prompt_mask, completion_ids, completion_mask)
    return _llama(model).lm_head(hidden).float()  # (N, T, V)


def shared_prompt_hidden(
    model: nn.Module, prompt_ids: Tensor, prompt_mask: Tensor, completion_ids: Tensor, completion_mask: Tensor
) -> Tensor:
    """The final-normed hidden states (N, T, H) that the LM head turns into `shared_prompt_logits`: the
    same forward without the output layer, so a caller can apply it a chunk of tokens at a time."""
    net = _Lean(model)
    n, p, t, device = len(prompt_ids), prompt_ids.shape[1], completion_ids.shape[1], prompt_ids.device
    distinct, rows = torch.unique(torch.cat([prompt_ids, prompt_mask.long()], 1), dim=0, return_inverse=True)
    ids, mask = distinct[:, :p], distinct[:, p:]  # (U, P)
    prompt_pos = (mask.cumsum(-1) - 1).clamp(min=0)  # (U, P), as sampler.positions
    # the completion tokens that predict a next one (all but the last), at the positions that follow
    comp_ids, comp_valid = completion_ids[:, : t - 1], completion_mask[:, : t - 1].bool()  # (N, T-1)
    comp_pos = prompt_pos[rows, -1:] + 1 + (comp_valid.long().cumsum(-1) - 1).clamp(min=0)  # (N, T-1)
    comp_causal = torch.ones(t - 1, t - 1, dtype=torch.bool, device=device).tril()  # (T-1, T-1)
    comp_attend = torch.cat(
        [prompt_mask.bool()[:, None, :].expand(-1, t - 1, -1), comp_causal & comp_valid[:, None, :]], dim=2
    )[:, None]  # (N, 1, T-1, P+T-1)
    prompts = (len(ids), p, _prompt_attention_mask(mask)[:, None])
    completions = (n, t - 1, comp_attend, rows) if t > 1 else None
    cos, sin = net.rotary(torch.cat([prompt_pos.reshape(-1), comp_pos.reshape(-1)]))  # (L, D)
    rope = cos[:, None], sin[:, None]  # (L, 1, D)
    x = net.lm.model.embed_tokens(torch.cat([ids.reshape(-1), comp_ids.reshape(-1)]))  # (U P + N (T-1), H)
    recompute = net.lm.training and torch.is_grad_enabled()
    for i, layer in enumerate(net.lm.model.layers):
        # recomputed in the backward when the model asked for it (transformers' per-layer switch, set
        # by `activation_checkpointing_enable`); non-reentrant, so frozen inputs (LoRA) work
        if recompute and getattr(layer, "gradient_checkpointing", False):
            x, _, _ = checkpoint(net.layer, i, x, rope, prompts, completions, use_reentrant=False)
        else:
            x, _, _ = net.layer(i, x, rope, prompts, completions)
    last = x[: len(ids) * p].view(len(ids), p, -1)[rows, -1:]  # (N, 1, H): predicts completion token 0
    if t == 1:
        return net.lm.model.norm(last)
    return net.lm.model.norm(torch.cat([last, x[len(ids) * p :].view(n, t - 1, -1)], dim=1))  # (N, T, H)
