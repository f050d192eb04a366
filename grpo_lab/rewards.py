"""Scoring completions with reward functions in TRL's convention: each function is called as TRL's
GRPOTrainer calls it, `fn(prompts=..., completions=..., **columns)`, and returns one float (or None)
per completion; several functions combine as a weighted sum that skips None, and a row no function
scored is NaN."""

import inspect
import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

RewardFn = Callable[..., Sequence[float | None]]


def call_reward(fn: Callable[..., Any], prompts: list, completions: list, **columns: list) -> Any:
    """Call `fn` as TRL does, by keyword (so `trl.rewards` functions, whose first parameter is
    `completions`, work unchanged); a function whose parameters are named otherwise (`lambda p, c,
    **kw`) gets prompts and completions positionally."""
    try:
        names = set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):  # a builtin or C callable without a signature: TRL's keywords
        names = {"completions"}
    if "completions" in names:
        return fn(prompts=prompts, completions=completions, **columns)
    return fn(prompts, completions, **columns)


def _check_output(name: str, out: object, n: int) -> list[float]:
    if not isinstance(out, (list, tuple)) or len(out) != n:
        got = f"{len(out)} values" if isinstance(out, (list, tuple)) else type(out).__name__
        raise ValueError(f"reward function {name!r} must return a list of {n} floats or None, got {got}")
    values = []
    for i, v in enumerate(out):
        if v is None:
            values.append(math.nan)
        elif isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)) and math.isfinite(v):
            values.append(float(v))
        else:
            raise ValueError(
                f"reward function {name!r} returned {v!r} at index {i}; expected a finite number or None"
            )
    return values


def score(
    funcs: Sequence[tuple[str, RewardFn]],
    weights: Sequence[float],
    prompts: list[str],
    completions: list[str],
    **columns: list,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Weighted sum of reward functions: rewards (N,) and each function's raw values (N,)."""
    if not funcs:
        raise ValueError("no reward function given; pass at least one (name, fn) pair")
    names = [name for name, _ in funcs]
    if len(set(names)) != len(names):
        raise ValueError(f"reward function names must be unique, got {names}")
    if len(weights) != len(funcs):
        raise ValueError(f"{len(weights)} reward weights for {len(funcs)} reward functions")
    per_func = {}
    for name, fn in funcs:
        try:
            out = call_reward(fn, prompts, completions, **columns)
        except Exception as err:
            raise RuntimeError(
                f"reward function {name!r} raised {type(err).__name__}: {err} "
                f"(first prompt {prompts[0]!r}, completion {completions[0]!r})"
            ) from err
        per_func[name] = torch.tensor(_check_output(name, out, len(completions)), dtype=torch.float32)
    stacked = torch.stack(list(per_func.values()), dim=1)  # (N, F)
    w = torch.tensor(list(weights), dtype=torch.float32)  # (F,)
    rewards = (stacked * w).nansum(dim=1)  # (N,)
    rewards[stacked.isnan().all(dim=1)] = math.nan
    return rewards, per_func
