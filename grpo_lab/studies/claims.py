"""The claims study (notebook 09): the seed documents' testable claims as pre-declared tests
(`analysis.claims.Claim`), the runs they need and each run's score. The decision rule, the per-run
metrics, the verdict table and its figure read run logs only and live in `analysis.claims`.

Sources: doc 000 is the evaluation guide, doc 002 the review of GRPO tricks (docs/sources.md);
sections as numbered there."""

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from grpo_lab import profiles
from grpo_lab.analysis.claims import (
    RUN_METRICS,
    Claim,
    arm_label,
    at_most,
    between,
    equivalent,
    greater,
    less,
    noninferior,
)
from grpo_lab.experiments import run_design
from grpo_lab.experiments.designs import Point
from grpo_lab.studies import cost, sensitivity

D000, D002 = "doc 000", "doc 002"
CLAIMS: tuple[Claim, ...] = (
    Claim(
        "group_norm_dense_outcome",
        "On dense judge rewards squeezed into [0.75, 0.85], dividing by each group's std blows tiny "
        "differences up into a high-variance signal and does worse than scaling by the batch std",
        f"{D002} §2.1",
        "final_val_reward", "difference", less(),
        {"task": "judge"}, {"task": "judge", "advantage": "lite_ppo"},
    ),
    Claim(
        "group_norm_dense_aggressive",
        "... and makes the policy over-aggressive: it drifts further from the reference",
        f"{D002} §2.1",
        "final_kl", "relative", greater(),
        {"task": "judge"}, {"task": "judge", "advantage": "lite_ppo"},
    ),
    Claim(
        "batch_norm_hurts",
        "Normalizing advantages over the whole batch on top of the group normalization hurts",
        f"{D002} §2.2",
        "final_val_accuracy", "difference", less(),
        {"adv_batch_norm": True},
    ),
    Claim(
        "batch_norm_jittery",
        "... training becomes jittery (KL to the reference more volatile)",
        f"{D002} §2.2",
        "kl_volatility", "relative", greater(),
        {"adv_batch_norm": True},
    ),
    Claim(
        "adv_clip_never_binds",
        "Advantage clipping (at 2) does nothing because group advantages are bounded, 'usually within "
        "1 or 2': it changes under 1% of the advantages",
        f"{D002} §2.2",
        "clipped_frac", "value", at_most(0.01),
        {"adv_clip": 2.0}, None,
    ),
    Claim(
        "adv_clip_same_outcome",
        "Advantage clipping (at 2) leaves the outcome unchanged (within 3 points of accuracy)",
        f"{D002} §2.2",
        "final_val_accuracy", "difference", equivalent(0.03),
        {"adv_clip": 2.0},
    ),
    Claim(
        "length_norm_shorter",
        "Length normalization shortens the answers",
        f"{D002} §2.1",
        "final_length", "relative", less(),
        {"task": "scratchpad", "length_norm_ref": 8}, {"task": "scratchpad"},
    ),
    Claim(
        "length_norm_keeps_accuracy",
        "... without losing accuracy (less than 3 points lower)",
        f"{D002} §2.1",
        "final_val_accuracy", "difference", noninferior(0.03),
        {"task": "scratchpad", "length_norm_ref": 8}, {"task": "scratchpad"},
    ),
    Claim(
        "threshold_kl_vs_linear",
        "A KL coefficient raised only when the KL crosses a threshold is more stable (less volatile "
        "KL) than a linearly decaying one",
        f"{D002} §2.1",
        "kl_volatility", "relative", less(),
        {"kl_schedule": "threshold"}, {"kl_schedule": "linear", "kl_coef_final": 0.0},
    ),
    Claim(
        "threshold_kl_vs_fixed",
        "... and more stable than a fixed coefficient",
        f"{D002} §2.1",
        "kl_volatility", "relative", less(),
        {"kl_schedule": "threshold"},
    ),
    Claim(
        "two_layer_kl_stable",
        "A second KL term to the previous step's policy makes training more stable (less volatile KL)",
        f"{D002} §2.3",
        "kl_volatility", "relative", less(),
        {"kl_prev_coef": 0.05},
    ),
    Claim(
        "two_layer_kl_slower",
        "... but slower: less reward along the way",
        f"{D002} §2.3",
        "mean_reward", "difference", less(),
        {"kl_prev_coef": 0.05},
    ),
    Claim(
        "learnable_temperature_cost",
        "A differentiable (learnable) temperature costs about 15-20% more compute per step",
        f"{D002} §4.4",
        "step_time", "relative", between(0.15, 0.20),
        {"learnable_temperature": True}, design="cost",
    ),
    Claim(
        "learnable_temperature_gain",
        "A learnable temperature improves the final result",
        f"{D002} §2.2",
        "final_val_accuracy", "difference", greater(),
        {"learnable_temperature": True},
    ),
    Claim(
        "learnable_temperature_explores",
        "A learnable temperature keeps exploration up early in training (higher entropy)",
        f"{D002} §2.2",
        "early_entropy", "relative", greater(),
        {"learnable_temperature": True},
    ),
    Claim(
        "temperature_noise_free",
        "Temperature noise in sampling costs almost no extra compute (within 5% of a step)",
        f"{D002} §4.4",
        "step_time", "relative", equivalent(0.05),
        {"temperature_jitter": 0.1}, design="cost",
    ),
    Claim(
        "temperature_noise_diversity",
        "... and makes the completions of a group more varied",
        f"{D002} §4.4",
        "group_diversity", "relative", greater(),
        {"temperature_jitter": 0.1},
    ),
    Claim(
        "dynamic_group_no_gain",
        "Growing the groups whose rewards are all equal (dynamic group size) ends close to a fixed "
        "group (within 3 points of accuracy)",
        f"{D002} §3.1",
        "final_val_accuracy", "difference", equivalent(0.03),
        {"dynamic_group_size": True},
    ),
    Claim(
        "dynamic_group_costly",
        "... while costing more compute per step",
        f"{D002} §3.1, §4.4",
        "step_time", "relative", greater(),
        {"dynamic_group_size": True}, design="cost",
    ),
    Claim(
        "small_group_worse",
        "With too small a group (G = 2 against 8) the advantage estimate is too noisy and the outcome worse",
        f"{D002} §1.2, {D000} §4.3",
        "final_val_accuracy", "difference", less(),
        {"group_size": 2}, {"group_size": 8},
    ),
    Claim(
        "large_group_no_gain",
        "A larger group (G = 16 against 8) costs more without a clear gain (under 3 points of accuracy)",
        f"{D002} §1.2",
        "final_val_accuracy", "difference", at_most(0.03),
        {"group_size": 16}, {"group_size": 8},
    ),
)  # fmt: skip
"""every claim tested by 09_claims"""
SMOKE_CLAIMS = ("batch_norm_hurts", "adv_clip_never_binds", "learnable_temperature_cost")


def catalogue(profile: str) -> tuple[Claim, ...]:
    """Every claim under the full profile; three (one of each kind of test) otherwise."""
    return CLAIMS if profile == "full" else tuple(c for c in CLAIMS if c.name in SMOKE_CLAIMS)


def settings(
    profile: str, seeds: Sequence[int] | None = None, steps: int | None = None
) -> dict[str, profiles.Profile]:
    """The profile of each design: 'training', the short-run profile of `sensitivity` (`steps`
    overrides its steps, so 06's runs are reused); 'cost', the profile of `cost` (08's runs)."""
    seeds = list(seeds) if seeds is not None else None
    return {"training": sensitivity.settings(profile, seeds, steps), "cost": cost.settings(profile, seeds)}


def scores(
    claims: Sequence[Claim], settings: Mapping[str, profiles.Profile], root: str | Path, **options: Any
) -> pd.DataFrame:
    """Run (or load) every configuration the claims need and score each run: one row per claim, arm
    and seed with the claim's metric. `settings` (from `settings`) gives each design's profile.
    Training configurations use `sensitivity`'s base and run in a pool (`options` as for
    `experiments.run_design`); cost configurations use `cost`'s base and are timed one after the
    other by `cost.measure`."""
    unknown = sorted({c.design for c in claims} - set(settings))
    if unknown:
        raise ValueError(f"no profile for the design(s) {unknown}; pass claims.settings(...)")
    bases = {"training": sensitivity.base_config, "cost": cost.base_config}
    metrics = {}
    for design, make_base in bases.items():
        wanted = [c for c in claims if c.design == design]
        if not wanted:
            continue
        base = make_base(settings[design])
        configs = {arm_label(o): base.replace(**o) for c in wanted for o in c.arms().values()}
        points = [Point(label, {}, config) for label, config in configs.items()]
        metrics[design] = _run(design, points, settings[design], root, options)
    rows = []
    for claim in claims:
        runs = metrics[claim.design]
        for arm, overrides in claim.arms().items():
            for seed, run in runs[runs["label"] == arm_label(overrides)].groupby("seed"):
                rows.append(
                    {
                        "claim": claim.name,
                        "arm": arm,
                        "seed": seed,
                        "score": RUN_METRICS.get(claim.metric)(run),
                    }
                )
    return pd.DataFrame(rows, columns=["claim", "arm", "seed", "score"])


def _run(
    design: str, points: list[Point], settings: profiles.Profile, root: str | Path, options: Mapping[str, Any]
) -> pd.DataFrame:
    if design == "cost":
        return cost.measure(points, settings.seeds, root)
    result = run_design(points, settings.seeds, root, **options)
    if len(result.failures):
        raise RuntimeError(
            f"{len(result.failures)} claim runs failed; see their error.json: {result.failures}"
        )
    return result.metrics
