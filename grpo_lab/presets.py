"""Named methods as presets: each is a small diff over `grpo`, and the config it produces is fully
explicit (every field is saved in config.json)."""

from dataclasses import dataclass, field
from typing import Any

from grpo_lab.config import Config


@dataclass(frozen=True)
class Preset:
    doc: str
    """what the method changes relative to GRPO, with its paper"""
    changes: dict[str, Any] = field(default_factory=dict)
    """config fields that differ from grpo"""


KL_OFF: dict[str, Any] = {"kl_coef": 0.0, "kl_placement": "off"}
"""grpo's KL term switched off: what several methods change besides their own mechanism"""

TRICKS: dict[str, dict[str, Any]] = {
    "batch_reward_norm": {"adv_batch_norm": True},
    "adv_clip": {"adv_clip": 2.0},
    "adaptive_kl": {"kl_schedule": "threshold", "kl_target": 0.01},
    "two_layer_kl": {"kl_prev_coef": 0.05},
    "dynamic_kl": {"kl_token_weight": "entropy"},
    "length_penalty": {"length_penalty": 0.05},
    "length_norm": {"length_norm_ref": 16},
    "overlong_shaping": {"overlong_buffer": 8},
    "mask_truncated": {"mask_truncated": True},
    "learnable_temperature": {"learnable_temperature": True},
    "adaptive_entropy": {"entropy_coef": 0.001, "entropy_target": 0.3},
    "top_entropy": {"top_entropy_frac": 0.8},
    "dynamic_sampling": {"dynamic_sampling": True},
    "dynamic_group_size": {"dynamic_group_size": True},
    "temperature_noise": {"temperature_jitter": 0.1},
}
"""Each training trick as the config fields that switch it on; off is grpo's value of those fields.
Group reward normalization itself is the advantage axis (`grpo` on, `dr_grpo` off)."""

PRESETS: dict[str, Preset] = {
    "grpo": Preset(
        "DeepSeekMath GRPO (arXiv 2402.03300): group z-score advantage, PPO clip 0.2, "
        "k3 KL in the loss with beta 0.04, seq-mean-token-mean: the Config defaults."
    ),
    "grpo_no_kl": Preset(
        "GRPO without its KL term (kl_coef 0, kl_placement off): the matched comparator of the methods that "
        "drop the KL besides their own mechanism (dr_grpo, dapo_loss, dapo, gspo, gspo_token and cispo: "
        "`INCIDENTAL`, `matched_comparator`), so that a comparison with it reads the mechanism alone.",
        dict(KL_OFF),
    ),
    "bnpo": Preset(
        "TRL's `bnpo` loss type: the same objective with a token-mean over the batch instead of a mean "
        "of per-sequence means (TRL normalizes by the local micro-batch; grpo_lab by the whole batch).",
        {"aggregation": "token-mean"},
    ),
    "dr_grpo": Preset(
        "Dr. GRPO (arXiv 2503.20783): no std in the advantage, no per-sequence length normalization "
        "(sum over tokens / (batch x max length)), no KL.",
        {
            "advantage": "dr_grpo",
            "aggregation": "seq-mean-token-sum-norm",
            **KL_OFF,
        },
    ),
    "dapo_loss": Preset(
        "DAPO's objective alone (arXiv 2503.14476): clip-higher (eps_high 0.28), token-mean, no KL; the "
        "rest of DAPO's recipe, dynamic sampling and overlong reward shaping, is off (the full recipe is "
        "`dapo`).",
        {"eps_high": 0.28, "aggregation": "token-mean", **KL_OFF},
    ),
    "dapo": Preset(
        "DAPO (arXiv 2503.14476), the paper's recipe: clip-higher (eps_low 0.2, eps_high 0.28), dynamic "
        "sampling (groups whose rewards are all equal dropped and the batch refilled), token-level loss "
        "(token-mean), overlong reward shaping (the soft punishment over the last 8 completion tokens, "
        "penalty 1 at the maximum length, `TRICKS`' level: the paper's buffer is 4096 of 20480 tokens), "
        "no KL. Its objective alone is `dapo_loss`. The overlong buffer needs max_completion_length > 8.",
        {
            "eps_high": 0.28,
            **TRICKS["dynamic_sampling"],
            "aggregation": "token-mean",
            **TRICKS["overlong_shaping"],
            **KL_OFF,
        },
    ),
    "lite_ppo": Preset(
        "Lite PPO (arXiv 2508.08221): group mean with batch std, token-level aggregation.",
        {"advantage": "lite_ppo", "aggregation": "token-mean"},
    ),
    "gspo": Preset(
        "GSPO (arXiv 2507.18071): one length-normalized sequence ratio, clipped at (3e-4, 4e-4), no KL.",
        {"surrogate": "gspo", "eps_low": 3e-4, "eps_high": 4e-4, **KL_OFF},
    ),
    "gspo_token": Preset(
        "GSPO-token (arXiv 2507.18071): the sequence ratio's value with per-token gradients and advantages.",
        {"surrogate": "gspo_token", "eps_low": 3e-4, "eps_high": 4e-4, **KL_OFF},
    ),
    "cispo": Preset(
        "CISPO (MiniMax-M1, arXiv 2506.13585): REINFORCE with a detached importance weight "
        "sg(clip(r, 1 - eps_low, 1 + eps_high)) (verl's relative form, cispo_mode 'relative'), token-mean, "
        "no KL. One-sided, as in the paper, which sets eps_low large and tunes eps_high alone: eps_low "
        "0.999 floors the weight at 0.001, below every ratio the study base's stored runs logged (smallest "
        "0.0015), and eps_high 0.01 caps it at 1.01, the median over their steps of the ratio's 95th "
        "percentile (1.014 under cispo, 1.009 under grpo), so that the cap binds on the top few percent "
        "of tokens at every step (1.6% to 6.2% over a 10-step run). TRL's absolute cap min(r, 5) "
        "(cispo_mode 'absolute', cispo_cap; the lab's earlier setting) lies far out in a tail this "
        "compressed: it bound on 12 of those runs' 360 steps, on at most 0.04% of their tokens.",
        {"surrogate": "cispo", "eps_low": 0.999, "eps_high": 0.01, "aggregation": "token-mean", **KL_OFF},
    ),
    "sapo": Preset(
        "SAPO (arXiv 2511.20347): a smooth sigmoid gate on the ratio instead of the hard clip.",
        {"surrogate": "sapo"},
    ),
    "gmpo": Preset(
        "GMPO (arXiv 2507.20673): geometric mean of token ratios per sequence, log-space clip 0.4.",
        {"surrogate": "gmpo"},
    ),
    "gpg": Preset(
        "GPG (arXiv 2504.02546): plain policy gradient, group-centred advantage rescaled by the share of "
        "informative groups, token-mean, no KL, no ratio.",
        {
            "advantage": "gpg",
            "surrogate": "pg",
            "aggregation": "token-mean",
            **KL_OFF,
        },
    ),
    "rloo": Preset(
        "RLOO (arXiv 2402.14740): leave-one-out baseline, k1 KL folded into the reward (TRL's RLOOTrainer).",
        {"advantage": "rloo", "kl_placement": "reward", "kl_estimator": "k1"},
    ),
    "reinforce_pp": Preset(
        "REINFORCE++ with group baseline (arXiv 2501.03262): group-centred rewards whitened over the "
        "batch, k1 KL in the reward, token-mean.",
        {
            "advantage": "reinforce_pp",
            "kl_placement": "reward",
            "kl_estimator": "k1",
            "aggregation": "token-mean",
        },
    ),
    "scheme_a": Preset(
        "Evaluation guide §3 scheme A (ratio clipping and normalization): keep the group advantage, change "
        "the ratio handling: clip-higher 0.28, dual-clip c=3 and a truncated sequence-level (geometric "
        "mean) sampler IS correction.",
        {"eps_high": 0.28, "dual_clip_c": 3.0, "is_correction": "tis_seq"},
    ),
    "scheme_b": Preset(
        "Evaluation guide §3 scheme B (advantage re-allocation): half sequence advantage, half token-level "
        "reward-to-go (per-digit credit on arith and the per-token KL, moved into the reward), and loss "
        "coefficients by difficulty.",
        {"token_adv_mix": 0.5, "kl_placement": "reward", "kl_estimator": "k1", "seq_weight": "difficulty"},
    ),
    "scheme_c": Preset(
        "Evaluation guide §3 scheme C (KL and coefficient structure): keep the advantage; k2 estimator (its "
        "gradient is the reverse KL's), importance-weighted in the loss, and equal per-token coefficients.",
        {"kl_estimator": "k2", "kl_importance_weighted": True, "aggregation": "token-mean"},
    ),
}


PRESETS["all_tricks"] = Preset(
    "Every compatible trick switched on at once over grpo: the starting point of the 'all on, then "
    "remove one at a time' study (docs/sources.md, Tricks review §5).",
    {k: v for changes in TRICKS.values() for k, v in changes.items()},
)


INCIDENTAL: dict[str, tuple[str, ...]] = {
    "dr_grpo": tuple(KL_OFF),
    "dapo_loss": tuple(KL_OFF),
    "dapo": tuple(KL_OFF),
    "gspo": tuple(KL_OFF),
    "gspo_token": tuple(KL_OFF),
    "cispo": tuple(KL_OFF),
}
"""per preset, the fields of its changes that are not its own mechanism: dropping the KL, a choice these
methods share and not what each is named for (GPG's paper proposes dropping it, so there it is the
mechanism; DAPO's drops it beside its four techniques, which are what `dapo` is read by against
grpo_no_kl). Every other field a preset changes is its mechanism; a preset not listed changes only that."""


def _entry(name: str) -> Preset:
    """The preset called `name`; a ValueError naming the valid ones for any other name."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; valid: {', '.join(PRESETS)}")
    return PRESETS[name]


def preset(name: str, **overrides: Any) -> Config:
    """The config of a named method, with any field overridden."""
    return Config.from_dict({"preset": name, **_entry(name).changes, **overrides})


def preset_diff(name: str, against: str = "grpo") -> dict[str, tuple[Any, Any]]:
    """What a preset changes relative to the preset `against` (default grpo): field -> (value in
    `against`, value in the preset)."""
    base, other = preset(against).to_dict(), preset(name).to_dict()
    return {k: (base[k], other[k]) for k in base if k != "preset" and base[k] != other[k]}


def mechanism(name: str) -> dict[str, Any]:
    """The changes of preset `name` that are its own mechanism: all but its `INCIDENTAL` fields."""
    incidental = INCIDENTAL.get(name, ())
    return {k: v for k, v in _entry(name).changes.items() if k not in incidental}


def matched_comparator(name: str) -> str:
    """The preset against which a comparison reads preset `name`'s mechanism alone: grpo with the
    preset's `INCIDENTAL` changes, so the two differ in the mechanism's fields only ('grpo' itself for a
    preset that changes nothing else). A ValueError when no preset is that config: add it."""
    changes = _entry(name).changes
    incidental = {k: changes[k] for k in INCIDENTAL.get(name, ())}
    found = [other for other, entry in PRESETS.items() if entry.changes == incidental]
    if not found:
        raise ValueError(f"no preset is grpo with {incidental}, the matched comparator of {name!r}: add one")
    return found[0]
