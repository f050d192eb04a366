"""Per-token log-probs (and entropy) of a completion under a model, in one forward pass."""

import torch
from torch import Tensor

from grpo_lab.models import lean_decode
from grpo_lab.models.sampler import Rollout, positions


def completion_logits(
    model: torch.nn.Module, rollout: Rollout, temperature: float | Tensor, path: str | None = None
) -> Tensor:
    """Temperature-scaled logits that predict each completion token: (N, T, V), at one temperature or
    one per row (N,). On the lean path
    (`path` as in `lean_decode.use_lean`) each distinct prompt of the batch is run once for all its
    completions; the transformers path runs every row in full. Same logits, same gradients."""
    if isinstance(temperature, Tensor):
        temperature = temperature.view(-1, 1, 1)  # (N, 1, 1)
    if lean_decode.use_lean(model, path):
        logits = lean_decode.shared_prompt_logits(
            model, rollout.prompt_ids, rollout.prompt_mask, rollout.completion_ids, rollout.completion_mask
        )
        return logits / temperature  # (N, T, V)
    ids, mask = rollout.input_ids(), rollout.attention_mask()  # (N, P+T)
    t = rollout.completion_ids.shape[1]
    # the logit at position i predicts token i+1, so the completion is read off [P-1, P+T-1)
    logits = model(
        input_ids=ids[:, :-1],
        attention_mask=mask[:, :-1],
        position_ids=positions(mask)[:, :-1],
    ).logits
    return logits[:, -t:].float() / temperature  # (N, T, V)


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
