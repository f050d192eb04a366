"""How much each compared mechanism acted in a run, from its run log alone: an arm whose mechanism
never acts (a clip range that never binds, a controller that never moves, a length trick on answers
too short to reshape) cannot be compared, it can only reproduce its reference. A scheme is measured
by its own mechanisms (`MECHANISMS`, what its preset changes): a surrogate or a clip by the share of
tokens its own bound binds on, a length-weighted aggregation by the change it makes to the loss
weights, an advantage by the groups it rescales. Every scheme and trick of the studies has one
headline measure (`ACTIVITY`: a scheme's first mechanism's), named by its preset or `presets.TRICKS`
entry: `activity(name, metrics, config)` computes it and `ACTIVITY[name].what` says what it counts;
`mechanism_activity` computes each of a scheme's mechanisms. Reads logged metrics only."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from grpo_lab.config import Config


@dataclass(frozen=True)
class Measure:
    what: str
    """what the number counts, for table captions"""
    fn: Callable[[pd.DataFrame, dict[str, Any]], float]
    """(training rows, config dict) -> the measure; 0 means the mechanism never acted"""


EQUAL_SEQUENCE_WEIGHTS = ("seq-mean-token-mean",)
"""the aggregations that weigh every sequence alike; every other one weighs a sequence by its length"""
GRPO_KL_COEF = Config.kl_coef
"""grpo's KL coefficient (the config's default): what a method that drops the KL removes"""


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


def _length_reweighting(m: pd.DataFrame, config: dict[str, Any]) -> float:
    """Mean over steps of the range of the per-sequence loss weights over their mean, where
    seq-mean-token-mean weighs every sequence alike: a length-weighted aggregation (token-mean, Dr.
    GRPO's token sum over a constant) weighs a sequence by its length L, so the range is
    (max L - min L) / mean L. 0 under an aggregation of `EQUAL_SEQUENCE_WEIGHTS` or with equal
    lengths. The logs hold each batch's min, max and mean length only, so this is the range of the
    weights, not their spread (the lengths' std is not logged)."""
    if config["aggregation"] in EQUAL_SEQUENCE_WEIGHTS:
        return 0.0
    lengths = m["completions/max_length"] - m["completions/min_length"]
    return float((lengths / m["completions/mean_length"]).mean())


def _kl_dropped(m: pd.DataFrame, config: dict[str, Any]) -> float:
    """grpo's KL coefficient when the run has no KL term (placement 'off'), else 0. Dropping the KL
    acts on every step whose policy leaves the reference, but a run without a KL loads no reference
    and logs no KL to measure that by: this says only that grpo's KL term is gone."""
    return GRPO_KL_COEF if config["kl_placement"] == "off" else 0.0


def _spread(why: str) -> Measure:
    """The share of groups with reward spread, for an advantage that rescales them (`why`)."""
    return Measure(f"share of groups with reward spread ({why})", _spread_groups)


CLIP = Measure("share of tokens clipped (clip_ratio/region_mean)", _mean("clip_ratio/region_mean"))
CLIP_HIGHER = Measure(
    "share of tokens clipped at the raised upper bound (clip_ratio/high_mean)", _mean("clip_ratio/high_mean")
)
DUAL_CLIP = Measure(
    "share of tokens the dual clip binds on (clip_ratio/dual_mean)", _mean("clip_ratio/dual_mean")
)
SEQUENCE_CLIP = Measure(
    "share of sequences whose sequence ratio is clipped (clip_ratio/region_mean)",
    _mean("clip_ratio/region_mean"),
)
DYNAMIC_SAMPLING = Measure("groups dropped per step", _mean("sampling/dropped_groups"))
OVERLONG_SHAPING = Measure("share of completions in the overlong buffer", _mean("length/overlong_frac"))
CISPO_CAP = Measure(
    "share of tokens whose importance weight CISPO's bound clips (clip_ratio/region_mean)",
    _mean("clip_ratio/region_mean"),
)
REWEIGHTING = Measure(
    "range of the per-sequence loss weights over their mean, against seq-mean-token-mean "
    "((max - min) / mean completion length)",
    _length_reweighting,
)
SAMPLER_IS = Measure(
    "mean |old - sampler| log-prob gap the sampler correction reweights (is/logp_gap_mean)",
    _mean("is/logp_gap_mean"),
)
KL_DROPPED = Measure("KL coefficient dropped from grpo's (its KL term off)", _kl_dropped)

MECHANISMS: dict[str, dict[str, Measure]] = {
    "grpo": {"PPO clip": CLIP},
    "grpo_no_kl": {"no KL": KL_DROPPED},
    "bnpo": {"token-mean": REWEIGHTING},
    "dr_grpo": {"token sum over a constant": REWEIGHTING, "no std": _spread("no std division")},
    "dapo_loss": {"clip-higher": CLIP_HIGHER, "token-mean": REWEIGHTING},
    "dapo": {
        "clip-higher": CLIP_HIGHER,
        "dynamic sampling": DYNAMIC_SAMPLING,
        "token-mean": REWEIGHTING,
        "overlong shaping": OVERLONG_SHAPING,
    },
    "lite_ppo": {"batch std": _spread("batch std"), "token-mean": REWEIGHTING},
    "gspo": {"sequence clip": SEQUENCE_CLIP},
    "gspo_token": {
        "sequence-ratio clip": Measure(
            "share of tokens clipped on the sequence ratio (clip_ratio/region_mean)",
            _mean("clip_ratio/region_mean"),
        )
    },
    "cispo": {"IS-weight cap": CISPO_CAP, "token-mean": REWEIGHTING},
    "sapo": {"soft gate": Measure("spread of the gated ratio (ratio/std)", _mean("ratio/std"))},
    "gmpo": {
        "log-space clip": Measure(
            "share of tokens clipped in log space (clip_ratio/region_mean)", _mean("clip_ratio/region_mean")
        )
    },
    "gpg": {"rescaled advantage": _spread("rescaled"), "token-mean": REWEIGHTING},
    "rloo": {"leave-one-out": _spread("leave-one-out")},
    "reinforce_pp": {"batch whitening": _spread("batch whitening"), "token-mean": REWEIGHTING},
    "scheme_a": {"clip-higher": CLIP_HIGHER, "dual clip": DUAL_CLIP, "sequence TIS": SAMPLER_IS},
    "scheme_b": {
        "token-level advantage": Measure(
            "spread of advantages within a sequence (advantages/token_std)", _mean("advantages/token_std")
        )
    },
    "scheme_c": {
        "importance-weighted KL": Measure(
            "spread of the importance ratio weighting the KL (ratio/std)", _mean("ratio/std")
        ),
        "token-mean": REWEIGHTING,
    },
}
"""each scheme's own mechanisms (what its preset changes besides its incidental fields,
`presets.mechanism`), each with its measure, the headline one first: the scheme acts where every one
of them does"""

TRICK_ACTIVITY: dict[str, Measure] = {
    "group_reward_norm": _spread("divided by their std"),
    "batch_reward_norm": Measure(
        "mean shift of the advantages by batch whitening", _mean("advantages/batch_norm_shift")
    ),
    "adv_clip": Measure("share of advantages clipped", _mean("advantages/clipped_frac")),
    "adaptive_kl": Measure("share of steps after which the KL coefficient changed", _changed("kl/coef")),
    "two_layer_kl": Measure("KL to the previous step's policy (kl/prev)", _mean("kl/prev")),
    "dynamic_kl": Measure("spread of the per-token KL weights", _mean("kl/token_weight_std")),
    "length_penalty": Measure("share of rewards reshaped by length", _mean("length/reshaped_frac")),
    "length_norm": Measure("share of rewards reshaped by length", _mean("length/reshaped_frac")),
    "overlong_shaping": OVERLONG_SHAPING,
    "mask_truncated": Measure("share of completions masked out as truncated", _masked_truncated),
    "learnable_temperature": Measure(
        "largest drift of the learned temperature from 1", _drift("temperature/learned", 1.0)
    ),
    "adaptive_entropy": Measure("share of steps with the entropy bonus on", _positive_share("entropy/coef")),
    "top_entropy": Measure("share of tokens left out of the policy term", _mean("policy/token_dropped_frac")),
    "dynamic_sampling": DYNAMIC_SAMPLING,
    "dynamic_group_size": Measure(
        "extra completions sampled per step", _mean("group_size/extra_completions")
    ),
    "temperature_noise": Measure(
        "spread of sampling temperatures in a batch", _mean("sampling/temperature_std")
    ),
}
"""each trick's measure (`presets.TRICKS`, and group reward normalization, a factor of the screen)"""

COMPONENT_ACTIVITY: dict[str, Measure] = {"clip_higher": CLIP_HIGHER, "token_mean": REWEIGHTING}
"""the measure of each of DAPO's objective components switched on alone over grpo (the transfer study's
component rows: its other two components are tricks, and its dropped KL is grpo_no_kl)"""

ACTIVITY: dict[str, Measure] = {
    **{name: next(iter(measures.values())) for name, measures in MECHANISMS.items()},
    **TRICK_ACTIVITY,
    **COMPONENT_ACTIVITY,
}
"""the headline measure of every scheme (its first mechanism's), trick and component: the verdict
table's"""


def _training_rows(metrics: pd.DataFrame) -> pd.DataFrame:
    """The rows of training steps (those with a reward): the last validation row has none."""
    return metrics[metrics["reward"].notna()] if "reward" in metrics else metrics


def _known(name: str) -> None:
    """A ValueError naming the valid names unless scheme or trick `name` has a measure."""
    if name not in ACTIVITY:
        raise ValueError(f"no activity measure for {name!r}; valid: {', '.join(ACTIVITY)}")


def activity(name: str, metrics: pd.DataFrame, config: dict[str, Any]) -> float:
    """The headline activity measure of scheme or trick `name` over a run's training rows."""
    _known(name)
    return ACTIVITY[name].fn(_training_rows(metrics), config)


def mechanism_activity(name: str, metrics: pd.DataFrame, config: dict[str, Any]) -> dict[str, float]:
    """Each own mechanism of scheme `name` (`MECHANISMS`) with its measure over a run's training rows;
    a trick's one measure under the trick's name."""
    _known(name)
    rows = _training_rows(metrics)
    measures = MECHANISMS.get(name, {name: ACTIVITY[name]})
    return {mechanism: measure.fn(rows, config) for mechanism, measure in measures.items()}
