"""Per-sequence loss coefficients (N,): each row's per-token loss is multiplied by its weight.

Weights are normalized to mean 1 over the batch so the loss scale stays comparable to `none`; when every
raw weight is 0 the weights fall back to all ones. Groups may be ragged (`group_size` a (B,) tensor).
"""

from collections.abc import Callable

import torch
from torch import Tensor

from grpo_lab.objective.aggregation import masked_mean
from grpo_lab.objective.groups import Groups, padded, per_row
from grpo_lab.registry import Registry

SeqWeight = Callable[[Tensor, Tensor, Groups], Tensor]
SEQ_WEIGHTS: Registry[SeqWeight] = Registry("sequence weight")


def _mean_one(w: Tensor) -> Tensor:
    """w / mean(w), or ones when w sums to 0."""
    total = w.sum()
    return w * w.shape[0] / total if total > 0 else torch.ones_like(w)


@SEQ_WEIGHTS.register("none")
def none(lengths: Tensor, rewards: Tensor, group_size: Groups) -> Tensor:
    """GRPO: every sequence weighs the same."""
    return torch.ones_like(lengths)


@SEQ_WEIGHTS.register("length")
def length(lengths: Tensor, rewards: Tensor, group_size: Groups) -> Tensor:
    """Weight proportional to length: with seq-mean-token-mean every token then weighs the same, which is
    token-mean (DAPO, arXiv:2503.14476) when no row is empty."""
    return _mean_one(lengths)


@SEQ_WEIGHTS.register("inverse_length")
def inverse_length(lengths: Tensor, rewards: Tensor, group_size: Groups) -> Tensor:
    """Weight proportional to 1/length (empty rows count as length 1): amplifies GRPO's length bias
    (arXiv:2503.20783), the opposite of `length`."""
    return _mean_one(1 / lengths.clamp(min=1))


@SEQ_WEIGHTS.register("difficulty")
def difficulty(lengths: Tensor, rewards: Tensor, group_size: Groups) -> Tensor:
    """Weight proportional to 1 - group success rate (rewards clamped to [0, 1]): harder prompts count
    more, unlike GRPO's std, which up-weights both very easy and very hard prompts (arXiv:2503.20783)."""
    g, m = padded(rewards.clamp(0, 1), group_size)  # (B, G)
    success = masked_mean(g, m, dim=-1)  # (B,)
    return _mean_one(per_row(1 - success, group_size))
