"""How much each compared mechanism acted in a run, from its run log alone: an arm whose mechanism
never acts (a clip range that never binds, a controller that never moves, a length trick on answers
too short to reshape) cannot be compared, it can only reproduce its reference. Every scheme and
trick of the studies has one measure here, named by its preset or `presets.TRICKS` entry;
`activity(name, metrics, config)` computes it and `ACTIVITY[name].what` says what it counts. Reads
logged metrics only."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Measure:
    what: str
    """what the number counts, for table captions"""
    fn: Callable[[pd.DataFrame, dict[str, Any]], float]
    """(training rows, config dict) -> the measure; 0 means the mechanism never acted"""


def _mean(column: str) -> Callable[[pd.DataFrame, dict[str, Any]], float]:
    def fn(m: pd.DataFrame, config: dict[str, Any]) -> float:
        return float(m[column].mean()) if column in m else 0.0

    return fn


def _changed(column: str) -> Callable[[pd.DataFrame, dict[str, Any]], float]:
    """Share of steps after which the column's value moved (a controller changed its coefficient)."""

    def fn(m: pd.DataFrame, config: dict[str, Any]) -> float:
        if column not in m or len(m) < 2:
            return 0.0
        values = m[column].to_numpy(dtype=float)
        return float(np.mean(~np.isclose(values[1:], values[:-1], rtol=1e-9, atol=0.0)))

    return fn


def _positive_share(column: str) -> Callable[[pd.DataFrame, dict[str, Any]], float]:
    """Share of steps on which the column is above zero."""

    def fn(m: pd.DataFrame, config: dict[str, Any]) -> float:
        return float((m[column] > 0).mean()) if column in m else 0.0

    return fn


def _drift(column: str, start: float) -> Callable[[pd.DataFrame, dict[str, Any]], float]:
    """Largest distance of the column from its starting value."""

    def fn(m: pd.DataFrame, config: dict[str, Any]) -> float:
        return float((m[column] - start).abs().max()) if column in m else 0.0

    return fn


def _masked_truncated(m: pd.DataFrame, config: dict[str, Any]) -> float:
    """Share of completions taken out of the loss: the truncated ones, when the switch is on."""
    if not config.get("mask_truncated"):
        return 0.0
    return float(m["completions/clipped_ratio"].mean())


def _spread_groups(m: pd.DataFrame, config: dict[str, Any]) -> float:
    """Share of groups with reward spread: where a change to the advantage's scale acts at all."""
    return float(1 - m["frac_reward_zero_std"].mean())


def _length_spread(m: pd.DataFrame, config: dict[str, Any]) -> float:
    """Mean range of completion lengths in a batch: where a change of aggregation weighs rows
    differently (equal lengths make every token-mean equal to every sequence-mean)."""
    return float((m["completions/max_length"] - m["completions/min_length"]).mean())


CLIP = Measure("share of tokens clipped (clip_ratio/region_mean)", _mean("clip_ratio/region_mean"))

ACTIVITY: dict[str, Measure] = {
    # schemes (presets)
    "grpo": CLIP,
    "bnpo": Measure("mean range of completion lengths per batch (tokens)", _length_spread),
    "dr_grpo": Measure("share of groups with reward spread (no std division)", _spread_groups),
    "dapo": Measure("share of tokens clipped at the raised upper bound", _mean("clip_ratio/high_mean")),
    "lite_ppo": Measure("share of groups with reward spread (batch std)", _spread_groups),
    "gspo": Measure("share of sequences clipped", _mean("clip_ratio/region_mean")),
    "gspo_token": Measure("share of tokens clipped on the sequence ratio", _mean("clip_ratio/region_mean")),
    "cispo": Measure("spread of the importance weights (ratio/std)", _mean("ratio/std")),
    "sapo": Measure("spread of the gated ratio (ratio/std)", _mean("ratio/std")),
    "gmpo": Measure("share of tokens clipped in log space", _mean("clip_ratio/region_mean")),
    "gpg": Measure("share of groups with reward spread (rescaled)", _spread_groups),
    "rloo": Measure("share of groups with reward spread (leave-one-out)", _spread_groups),
    "reinforce_pp": Measure("share of groups with reward spread (batch whitening)", _spread_groups),
    "scheme_a": Measure(
        "share of tokens clipped at the raised bound or by the dual clip",
        lambda m, c: _mean("clip_ratio/high_mean")(m, c) + _mean("clip_ratio/dual_mean")(m, c),
    ),
    "scheme_b": Measure(
        "spread of advantages within a sequence (advantages/token_std)", _mean("advantages/token_std")
    ),
    "scheme_c": Measure("spread of the importance ratio weighting the KL (ratio/std)", _mean("ratio/std")),
    # tricks (presets.TRICKS)
    "group_reward_norm": Measure("share of groups with reward spread (divided by their std)", _spread_groups),
    "batch_reward_norm": Measure(
        "mean shift of the advantages by batch whitening", _mean("advantages/batch_norm_shift")
    ),
    "adv_clip": Measure("share of advantages clipped", _mean("advantages/clipped_frac")),
    "adaptive_kl": Measure("share of steps after which the KL coefficient changed", _changed("kl/coef")),
    "two_layer_kl": Measure("KL to the previous step's policy (kl/prev)", _mean("kl/prev")),
    "dynamic_kl": Measure("spread of the per-token KL weights", _mean("kl/token_weight_std")),
    "length_penalty": Measure("share of rewards reshaped by length", _mean("length/reshaped_frac")),
    "length_norm": Measure("share of rewards reshaped by length", _mean("length/reshaped_frac")),
    "overlong_shaping": Measure("share of completions in the overlong buffer", _mean("length/overlong_frac")),
    "mask_truncated": Measure("share of completions masked out as truncated", _masked_truncated),
    "learnable_temperature": Measure(
        "largest drift of the learned temperature from 1", _drift("temperature/learned", 1.0)
    ),
    "adaptive_entropy": Measure("share of steps with the entropy bonus on", _positive_share("entropy/coef")),
    "top_entropy": Measure("share of tokens left out of the policy term", _mean("policy/token_dropped_frac")),
    "dynamic_sampling": Measure("groups dropped per step", _mean("sampling/dropped_groups")),
    "dynamic_group_size": Measure(
        "extra completions sampled per step", _mean("group_size/extra_completions")
    ),
    "temperature_noise": Measure(
        "spread of sampling temperatures in a batch", _mean("sampling/temperature_std")
    ),
}


def activity(name: str, metrics: pd.DataFrame, config: dict[str, Any]) -> float:
    """The activity measure of scheme or trick `name` over a run's training rows."""
    if name not in ACTIVITY:
        raise ValueError(f"no activity measure for {name!r}; valid: {', '.join(ACTIVITY)}")
    rows = metrics[metrics["reward"].notna()] if "reward" in metrics else metrics
    return ACTIVITY[name].fn(rows, config)
