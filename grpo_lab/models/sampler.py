"""Sampling G completions per prompt with a KV cache. The log-probs the sampler saw are kept,
so the trainer can measure (and correct for) any sampler-trainer mismatch."""

import inspect
from dataclasses import dataclass

import torch
from torch import Tensor

from grpo_lab.models import lean_decode


def encode_prompts(tokenizer, prompts: list[str], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts as the sampler takes them: ids and attention mask (B, P) on `device`, left-padded as
    the tokenizer pads, with no special token added (the completion follows the prompt's text)."""
    enc = tokenizer(prompts, padding=True, return_tensors="pt", add_special_tokens=False)
    return enc["input_ids"].to(device), enc["attention_mask"].to(device)


def decode(tokenizer, ids: torch.Tensor, mask: torch.Tensor) -> list[str]:
    """Completions as text, EOS and padding dropped."""
    return [tokenizer.decode(row[m.bool()], skip_special_tokens=True) for row, m in zip(ids, mask)]


@dataclass
class Rollout:
    prompt_ids: Tensor
    """(N, P) left-padded prompt tokens, each prompt repeated G times contiguously"""
    prompt_mask: Tensor
    """(N, P) 1 on real prompt tokens"""
    completion_ids: Tensor
    """(N, T) sampled tokens; pad after EOS"""
    completion_mask: Tensor
    """(N, T) float, 1 on every sampled token up to and including EOS"""
    sampler_logp: Tensor
    """(N, T) log-prob of each sampled token under the sampler (temperature applied)"""
    truncated: Tensor
    """(N,) bool, True when no EOS was sampled within max_completion_length"""

    @property
    def lengths(self) -> Tensor:
        return self.completion_mask.sum(-1)  # (N,)

    def input_ids(self) -> Tensor:
        return torch.cat([self.prompt_ids, self.completion_ids], dim=1)  # (N, P+T)

    def attention_mask(self) -> Tensor:
        return torch.cat([self.prompt_mask, self.completion_mask.to(self.prompt_mask.dtype)], dim=1)

    def select(self, rows: Tensor) -> "Rollout":
        """A sub-rollout of some rows (micro-batching)."""
        return Rollout(*(getattr(self, f)[rows] for f in self.__dataclass_fields__))


def concat(rollouts: list[Rollout], pad_id: int) -> Rollout:
    """Rows of several rollouts in one (prompts and completions right-padded to the widest:
    prompts are re-left-padded, completions padded after their end)."""
    p = max(r.prompt_ids.shape[1] for r in rollouts)
    t = max(r.completion_ids.shape[1] for r in rollouts)

    def left(x: Tensor, width: int, value: float) -> Tensor:
        return torch.nn.functional.pad(x, (width - x.shape[1], 0), value=value)

    def right(x: Tensor, width: int, value: float) -> Tensor:
        return torch.nn.functional.pad(x, (0, width - x.shape[1]), value=value)

    return Rollout(
        prompt_ids=torch.cat([left(r.prompt_ids, p, pad_id) for r in rollouts]),
        prompt_mask=torch.cat([left(r.prompt_mask, p, 0) for r in rollouts]),
        completion_ids=torch.cat([right(r.completion_ids, t, pad_id) for r in rollouts]),
        completion_mask=torch.cat([right(r.completion_mask, t, 0.0) for r in rollouts]),
        sampler_logp=torch.cat([right(r.sampler_logp, t, 0.0) for r in rollouts]),
        truncated=torch.cat([r.truncated for r in rollouts]),
    )


def positions(attention_mask: Tensor) -> Tensor:
    """Position ids that start at 0 on the first real token of left-padded rows."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)  # (N, L)


def takes_logits_to_keep(model: torch.nn.Module) -> bool:
    """Whether the transformers model's forward can compute logits for the last positions only."""
    return "logits_to_keep" in inspect.signature(lean_decode.causal_lm(model).forward).parameters


class TransformersDecoder:
    """Prefill and decode steps through the transformers model and its own KV cache; the output layer
    runs on each row's last position only where the model takes `logits_to_keep`."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.cache = None
        self.mask: Tensor | None = None
        self.keep: dict[str, int] = {"logits_to_keep": 1} if takes_logits_to_keep(model) else {}

    def _logits(self, **inputs: Tensor) -> Tensor:
        out = self.model(**inputs, attention_mask=self.mask, cache=self.cache, use_cache=True, **self.keep)
        self.cache = out.cache
        return out.logits[:, -1].float()  # (N, V)

    def prefill(self, ids: Tensor, mask: Tensor, pos: Tensor, repeats: int) -> Tensor:
        """Every row of the prompts ids, mask, pos (B, P) repeated `repeats` times, then run: (N, V)."""
        self.mask = mask.repeat_interleave(repeats, dim=0)  # (N, P)
        return self._logits(
            input_ids=ids.repeat_interleave(repeats, dim=0),
            position_ids=pos.repeat_interleave(repeats, dim=0),
        )

    def step(self, tok: Tensor, alive: Tensor, pos: Tensor) -> Tensor:
        assert self.mask is not None  # prefill came first
        self.mask = torch.cat([self.mask, alive.to(self.mask.dtype)[:, None]], dim=1)  # (N, P+t+1)
        return self._logits(input_ids=tok[:, None], position_ids=pos)


def make_decoder(
    model: torch.nn.Module, n: int, length: int, path: str | None = None
) -> "lean_decode.LeanDecoder | TransformersDecoder":
    """The decoder `sample()` runs for `n` rows of at most `length` tokens (prompt + completion);
    `path` as in `lean_decode.use_lean`."""
    if lean_decode.use_lean(model, path):
        return lean_decode.LeanDecoder(model, n, length)
    return TransformersDecoder(model)


MULTINOMIAL_MAX_VOCAB = 4096
"""vocabularies up to this size draw tokens with `torch.multinomial`, as every stored run did (the run
store is keyed to those exact samples); above it `draw` inverts the distribution's cumulative sum, which
samples the same distribution at a quarter of multinomial's cost on a CPU (179 against 46 ms a token at
64 rows of Qwen2.5's 151,936, one thread), a third of the sampling phase on the Qwen-vocabulary model"""


def draw(logp: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """One token per row from log-probs (N, V): `torch.multinomial` up to `MULTINOMIAL_MAX_VOCAB`, else
    the inverse of the cumulative distribution at one uniform draw per row, summed in float64 so that a
    token's share of the unit interval is its probability to about 1e-16 (float32 would give a 1e-6
    token a share a few per cent off); a token of probability 0 is never drawn."""
    if logp.shape[-1] <= MULTINOMIAL_MAX_VOCAB:
        return torch.multinomial(logp.exp(), 1, generator=generator).squeeze(-1)
    cdf = logp.double().exp_().cumsum_(-1)  # (N, V)
    total = cdf[:, -1:]  # (N, 1)
    u = torch.rand(total.shape, generator=generator, dtype=torch.float64, device=logp.device) * total
    u = torch.minimum(u, total.nextafter(torch.zeros_like(total)))  # (N, 1) strictly below the total
    return torch.searchsorted(cdf, u, right=True).squeeze(-1)  # (N,) first index whose sum exceeds u


@torch.no_grad()
def sample(
    model: torch.nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    group_size: int,
    max_new_tokens: int,
    temperature: float | Tensor,
    eos_id: int,
    pad_id: int,
    generator: torch.Generator | None = None,
    greedy: bool = False,
    suppress_eos: Tensor | None = None,
    path: str | None = None,
) -> Rollout:
    """Sample `group_size` completions for each prompt row; `greedy` takes the argmax instead.
    `temperature` is one float or one value per completion (N,); rows flagged in `suppress_eos` (N,)
    can never end (fault injection: forced maximum length). `path` picks how the model is run
    ('auto', 'lean' or 'transformers'; None: `lean_decode.DEFAULT_PATH`): both compute the same
    logits and the token choice below is shared, so the path does not change the distribution."""
    ids = prompt_ids.repeat_interleave(group_size, dim=0)  # (N, P)
    n = ids.shape[0]
    pos = positions(prompt_mask)  # (B, P)
    runner = make_decoder(model, n, ids.shape[1] + max_new_tokens, path)
    logits = runner.prefill(prompt_ids, prompt_mask, pos, group_size)  # (N, V)
    tokens, logps, alive = [], [], []
    finished = torch.zeros(n, dtype=torch.bool, device=ids.device)  # (N,)
    next_pos = pos[:, -1:].repeat_interleave(group_size, dim=0) + 1  # (N, 1)
    if isinstance(temperature, Tensor):
        temperature = temperature.to(ids.device, torch.float32).view(n, 1)  # (N, 1)
    for _ in range(max_new_tokens):
        if suppress_eos is not None:
            logits[suppress_eos, eos_id] = -torch.inf
        logp_all = torch.log_softmax(logits / temperature, dim=-1)  # (N, V)
        if greedy:
            tok = logp_all.argmax(-1)  # (N,)
        else:
            tok = draw(logp_all, generator)  # (N,)
        alive.append(~finished)  # the EOS token itself is still part of the completion
        tok = torch.where(finished, torch.full_like(tok, pad_id), tok)
        tokens.append(tok)
        logps.append(logp_all.gather(-1, tok[:, None]).squeeze(-1))
        finished = finished | (tok == eos_id)
        if bool(finished.all()):
            break
        logits = runner.step(tok, alive[-1], next_pos)
        next_pos = next_pos + 1
    completion_mask = torch.stack(alive, dim=1).float()  # (N, T)
    return Rollout(
        prompt_ids=ids,
        prompt_mask=prompt_mask.repeat_interleave(group_size, dim=0),
        completion_ids=torch.stack(tokens, dim=1),  # (N, T)
        completion_mask=completion_mask,
        sampler_logp=torch.stack(logps, dim=1) * completion_mask,  # (N, T)
        truncated=~finished,
    )
