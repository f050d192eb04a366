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


PRESETS: dict[str, Preset] = {
    "grpo": Preset(
        "DeepSeekMath GRPO (arXiv 2402.03300): group z-score advantage, PPO clip 0.2, "
        "k3 KL in the loss with beta 0.04, seq-mean-token-mean: the Config defaults."
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
            "kl_coef": 0.0,
            "kl_placement": "off",
        },
    ),
    "dapo": Preset(
        "DAPO (arXiv 2503.14476) objective: clip-higher (eps_high 0.28), token-mean, no KL. Its dynamic "
        "sampling and overlong shaping are training tricks, switched separately.",
        {"eps_high": 0.28, "aggregation": "token-mean", "kl_coef": 0.0, "kl_placement": "off"},
    ),
    "lite_ppo": Preset(
        "Lite PPO (arXiv 2508.08221): group mean with batch std, token-level aggregation.",
        {"advantage": "lite_ppo", "aggregation": "token-mean"},
    ),
    "gspo": Preset(
        "GSPO (arXiv 2507.18071): one length-normalized sequence ratio, clipped at (3e-4, 4e-4), no KL.",
        {"surrogate": "gspo", "eps_low": 3e-4, "eps_high": 4e-4, "kl_coef": 0.0, "kl_placement": "off"},
    ),
    "gspo_token": Preset(
        "GSPO-token (arXiv 2507.18071): the sequence ratio's value with per-token gradients and advantages.",
        {"surrogate": "gspo_token", "eps_low": 3e-4, "eps_high": 4e-4, "kl_coef": 0.0, "kl_placement": "off"},
    ),
    "cispo": Preset(
        "CISPO (MiniMax-M1, arXiv 2506.13585): REINFORCE with a detached IS weight capped at 5 (TRL's "
        "one-sided absolute cap), token-mean, no KL.",
        {
            "surrogate": "cispo",
            "cispo_mode": "absolute",
            "aggregation": "token-mean",
            "kl_coef": 0.0,
            "kl_placement": "off",
        },
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
            "kl_coef": 0.0,
            "kl_placement": "off",
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

PRESETS["all_tricks"] = Preset(
    "Every compatible trick switched on at once over grpo: the starting point of the 'all on, then "
    "remove one at a time' study (docs/sources.md, Tricks review §5).",
    {k: v for changes in TRICKS.values() for k, v in changes.items()},
)


def preset(name: str, **overrides: Any) -> Config:
    """The config of a named method, with any field overridden."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; valid: {', '.join(PRESETS)}")
    return Config.from_dict({"preset": name, **PRESETS[name].changes, **overrides})


def preset_diff(name: str) -> dict[str, tuple[Any, Any]]:
    """What a preset changes relative to grpo: field -> (grpo value, preset value)."""
    base, other = preset("grpo").to_dict(), preset(name).to_dict()
    return {k: (base[k], other[k]) for k in base if k != "preset" and base[k] != other[k]}
