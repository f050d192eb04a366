"""Loss aggregation: per-token loss (n, T) -> scalar, with the normalizer fixed by the whole batch.

The trainer computes `BatchTotals` once over the full batch and hands it to every micro-batch, so that
the sum over micro-batches of `aggregate(micro)` equals `aggregate(full batch)` exactly (TRL #3021,
verl #7321). Every denominator is clamped at 1: an all-empty batch aggregates to 0, never NaN.
"""

from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor

from grpo_lab.registry import Registry


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of `x` over positions where `mask` is 1 (along `dim`, or over everything); 0 where none are."""
    if dim is None:
        return (x * mask).sum() / mask.sum().clamp(min=1)
    return (x * mask).sum(dim) / mask.sum(dim).clamp(min=1)


@dataclass(frozen=True)
class BatchTotals:
    """Counts over the whole batch that fix the normalizer of every micro-batch."""

    seqs: float
    """Number of completions (rows), including rows with no valid token."""
    nonempty_seqs: float
    """Number of rows with at least one valid token."""
    tokens: float
    """Number of valid tokens."""
    max_len: int
    """Generation budget: the Dr. GRPO constant (max completion length)."""

    @classmethod
    def of(cls, mask: Tensor, max_len: int, row_weights: Tensor | None = None) -> "BatchTotals":
        """Counts from a full-batch mask (N, T). With `row_weights` (N,) every row counts with its
        weight (the prompt balance of ragged groups, which also multiplies the rows' losses), so
        the normalizers count what the weighted loss sums."""
        lengths = mask.sum(-1)  # (N,)
        if row_weights is None:
            return cls(
                seqs=mask.shape[0],
                nonempty_seqs=int((lengths > 0).sum()),
                tokens=int(lengths.sum()),
                max_len=max_len,
            )
        return cls(
            seqs=float(row_weights.sum()),
            nonempty_seqs=float(row_weights[lengths > 0].sum()),
            tokens=float((lengths * row_weights).sum()),
            max_len=max_len,
        )


Aggregation = Callable[[Tensor, Tensor, BatchTotals], Tensor]
AGGREGATIONS: Registry[Aggregation] = Registry("aggregation")


@AGGREGATIONS.register("token-mean")
def token_mean(per_token: Tensor, mask: Tensor, totals: BatchTotals) -> Tensor:
    """Global token mean: every token weighs the same, so long completions count more than in GRPO
    (DAPO, arXiv:2503.14476; TRL `dapo`, verl `token-mean` with the global token count)."""
    return (per_token * mask).sum() / max(totals.tokens, 1)


@AGGREGATIONS.register("seq-mean-token-mean")
def seq_mean_token_mean(per_token: Tensor, mask: Tensor, totals: BatchTotals) -> Tensor:
    """GRPO's mean over sequences of each sequence's token mean (arXiv:2402.03300). Rows with no valid
    token add 0 and leave the count, like verl (TRL counts them)."""
    per_seq = masked_mean(per_token, mask, dim=-1)  # (n,)
    return per_seq.sum() / max(totals.nonempty_seqs, 1)


@AGGREGATIONS.register("seq-mean-token-sum")
def seq_mean_token_sum(per_token: Tensor, mask: Tensor, totals: BatchTotals) -> Tensor:
    """Token sum per sequence, mean over sequences: no length normalization at all (verl)."""
    return (per_token * mask).sum() / max(totals.seqs, 1)


@AGGREGATIONS.register("seq-mean-token-sum-norm")
def seq_mean_token_sum_norm(per_token: Tensor, mask: Tensor, totals: BatchTotals) -> Tensor:
    """Dr. GRPO: token sum over a constant, rows x generation budget, instead of each length
    (arXiv:2503.20783; TRL `dr_grpo`, newest verl)."""
    return (per_token * mask).sum() / max(totals.seqs * totals.max_len, 1)


@AGGREGATIONS.register("token-sum")
def token_sum(per_token: Tensor, mask: Tensor, totals: BatchTotals) -> Tensor:
    """Plain sum over valid tokens, no normalizer: the loss scale grows with batch and length (verl)."""
    return (per_token * mask).sum()


def aggregate(
    per_token_loss: Tensor,
    mask: Tensor,
    mode: str = "seq-mean-token-mean",
    max_len: int | None = None,
    totals: BatchTotals | None = None,
) -> Tensor:
    """Aggregate a per-token loss (n, T) with the registered `mode`; `totals` default to this mask's."""
    if totals is None:
        totals = BatchTotals.of(mask, max_len or mask.shape[1])
    return AGGREGATIONS.get(mode)(per_token_loss, mask, totals)
