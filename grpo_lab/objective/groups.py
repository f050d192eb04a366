"""Groups of completions: the completions of one prompt are contiguous rows, G of them for every
prompt (an int) or a size per prompt (a (B,) tensor: ragged groups, from dynamic group size).

Every group statistic goes through `padded`, which lays the groups out as a (B, G_max) table with a
row mask, so ragged and equal-sized groups share one code path; with equal sizes it is a plain
reshape with an all-ones mask, which leaves every statistic bit for bit what it was.
"""

import torch
from torch import Tensor

Groups = int | Tensor
"""G completions for every prompt (int), or each prompt's group size (B,) for ragged groups"""


def group_sizes(n: int, groups: Groups) -> Tensor:
    """Each group's size (B,) for N rows; fails when the groups do not tile the N rows exactly."""
    if isinstance(groups, int):
        if groups < 1 or n % groups:
            raise ValueError(f"{n} rows do not split into groups of {groups}")
        return torch.full((n // groups,), groups, dtype=torch.long)
    if groups.ndim != 1 or bool((groups < 1).any()) or int(groups.sum()) != n:
        raise ValueError(f"group sizes {groups.tolist()} must each be >= 1 and add up to the {n} rows")
    return groups.long()


def per_row(values: Tensor, groups: Groups) -> Tensor:
    """A value per group (B,) repeated over the group's rows: (N,)."""
    sizes = groups if isinstance(groups, int) else groups.to(values.device)
    return values.repeat_interleave(sizes)


def padded(x: Tensor, groups: Groups) -> tuple[Tensor, Tensor]:
    """(N, ...) -> (B, G_max, ...), one group per row, padded with zeros, and the row mask (B, G_max)
    (1 where a completion is, in x's dtype when it is a float)."""
    n = x.shape[0]
    sizes = group_sizes(n, groups).to(x.device)  # (B,)
    dtype = x.dtype if x.is_floating_point() else torch.float32
    if isinstance(groups, int):
        g = x.reshape(len(sizes), groups, *x.shape[1:])  # (B, G, ...)
        return g, torch.ones(g.shape[:2], dtype=dtype, device=x.device)
    ids = torch.repeat_interleave(torch.arange(len(sizes), device=x.device), sizes)  # (N,)
    pos = torch.arange(n, device=x.device) - (sizes.cumsum(0) - sizes)[ids]  # (N,) place within group
    g = x.new_zeros((len(sizes), int(sizes.max()), *x.shape[1:]))  # (B, G_max, ...)
    g[ids, pos] = x
    mask = torch.zeros(g.shape[:2], dtype=dtype, device=x.device)  # (B, G_max)
    mask[ids, pos] = 1
    return g, mask


def unpadded(g: Tensor, mask: Tensor) -> Tensor:
    """The inverse of `padded`: (B, G_max, ...) -> (N, ...), the rows where the mask is set, in order."""
    return g[mask.bool()]


def prompt_balance(groups: Groups, n: int) -> Tensor:
    """Per-row weights (N,) that give every prompt the same total weight N / B whatever its group
    size: w = (N / B) / n_g, mean 1. Multiplying each row's loss by w makes a mean over rows a mean
    over prompts of their group means, so a prompt with 16 completions weighs what one with 4 does.
    All ones for equal groups."""
    sizes = group_sizes(n, groups)  # (B,)
    if isinstance(groups, int):
        return torch.ones(n)
    return per_row((n / len(sizes)) / sizes.double(), sizes).float()
