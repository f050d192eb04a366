"""The claims study (notebook 09): the testable claims of the two design documents, the Evaluation
guide and the Tricks review (summarized section by section in docs/sources.md), as pre-declared tests
(`analysis.claim_checks.Claim`), the runs they need and each run's score. The decision rule, the per-run
metrics, the verdict table and its figure read run logs only and live in `analysis.claim_checks`.

Every quantitative claim is tested at the number its document states (a claim's `reading` says how
a stated number becomes a region where a choice was needed); the claims the lab cannot test are in
`UNTESTABLE`, with the reason. Each `source` names the document and section, e.g. "Tricks review
§2.1 Length normalization".

The study has two designs (training claims on the study base with the headline studies' settings,
`comparisons.bed.BASE_RUNS`, so an arm that 01-03 also train is their run; cost claims on the timed
runs of `comparisons.timing`, 08's): `settings` is the training claims' profile, the cost claims'
follows from it (`profiles`), `design` returns the points of both keyed by 'training' and 'cost', and
`run` returns the runs of both (`Runs`); then `scores` and `figure`. A claim on accuracy is scored
with the headline score (`analysis.scores.HEADLINE`), as every verdict of the lab is."""

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from grpo_lab.analysis import claim_checks
from grpo_lab.analysis.claim_checks import (
    CRASH_STEPS,
    KL_BOUND,
    ON_FAILURE,
    RUN_METRICS,
    STALL_GAIN,
    Claim,
    arm_label,
    at_most,
    between,
    equivalent,
    greater,
    less,
)
from grpo_lab.comparisons import timing
from grpo_lab.comparisons.bed import BASE_RUNS, base
from grpo_lab.config import Config
from grpo_lab.experiments import run_design
from grpo_lab.experiments.designs import Point
from grpo_lab.presets import TRICKS
from grpo_lab.profiles import Profile

FAILURE_GRID = {"learning_rate": (1e-4, 1e-3), "kl_coef": (0.01, 0.2)}
"""the configurations over which the share of failing runs is counted: a slow and a fast learning
rate, a weak and a strong KL coefficient"""
CLAIMS: tuple[Claim, ...] = (
    Claim(
        name="group_norm_dense_outcome",
        statement="On dense judge rewards squeezed into [0.75, 0.85], dividing by each group's std blows "
        "tiny differences up into a high-variance signal and does worse than scaling by the batch std",
        source="Tricks review §2.1 Length normalization",
        metric="headline_reward",
        effect="difference",
        region=less(),
        treatment={"task": "judge"},
        control={"task": "judge", "advantage": "lite_ppo"},
    ),
    Claim(
        name="group_norm_dense_aggressive",
        statement="... and makes the policy over-aggressive: it drifts further from the reference",
        source="Tricks review §2.1 Length normalization",
        metric="final_kl",
        effect="relative",
        region=greater(),
        treatment={"task": "judge"},
        control={"task": "judge", "advantage": "lite_ppo"},
    ),
    Claim(
        name="batch_norm_hurts",
        statement="Normalizing advantages over the whole batch on top of the group normalization hurts",
        source="Tricks review §2.2 PPO tricks ported to GRPO",
        metric="headline_score",
        effect="difference",
        region=less(),
        treatment={"adv_batch_norm": True},
    ),
    Claim(
        name="batch_norm_jittery",
        statement="... training becomes jittery (KL to the reference more volatile)",
        source="Tricks review §2.2 PPO tricks ported to GRPO",
        metric="kl_volatility",
        effect="relative",
        region=greater(),
        treatment={"adv_batch_norm": True},
    ),
    Claim(
        name="adv_clip_never_binds",
        statement="Advantage clipping (at 2) does nothing because group advantages are bounded, 'usually "
        "within 1 or 2': it changes under 1% of the advantages",
        source="Tricks review §2.2 PPO tricks ported to GRPO",
        metric="clipped_frac",
        effect="value",
        region=at_most(0.01),
        treatment={"adv_clip": 2.0},
        control=None,
    ),
    Claim(
        name="adv_clip_same_outcome",
        statement="Advantage clipping (at 2) leaves the outcome unchanged (within 3 points of accuracy)",
        source="Tricks review §2.2 PPO tricks ported to GRPO",
        metric="headline_score",
        effect="difference",
        region=equivalent(0.03),
        treatment={"adv_clip": 2.0},
        reading="'does nothing' read as: no change of the headline score beyond 3 points",
    ),
    Claim(
        name="length_norm_shorter",
        statement="Length normalization shortens the answers from 1800 to 1100 tokens (by about 39%)",
        source="Tricks review §2.1 Length normalization",
        metric="final_length",
        effect="relative",
        region=between(-0.49, -0.29),
        treatment=TRICKS["length_norm"],
        reading="1100 / 1800 - 1 = -0.39; a reported pair of rounded lengths read as -0.39 +- 0.10",
    ),
    Claim(
        name="length_norm_gains_accuracy",
        statement="... and raises accuracy by 1.2 points",
        source="Tricks review §2.1 Length normalization",
        metric="headline_score",
        effect="difference",
        region=between(0.002, 0.022),
        treatment=TRICKS["length_norm"],
        reading="a point value of +0.012 read as +0.012 +- 0.010: a gain, of about the stated size "
        "(greater(0.012) would test 'more than 1.2 points', which the document does not say)",
    ),
    Claim(
        name="threshold_kl_vs_linear",
        statement="A KL coefficient raised only when the KL crosses a threshold is more stable (less "
        "volatile KL) than a linearly decaying one",
        source="Tricks review §2.1 Length normalization",
        metric="kl_volatility",
        effect="relative",
        region=less(),
        treatment=TRICKS["adaptive_kl"],
        control={"kl_schedule": "linear", "kl_coef_final": 0.0},
    ),
    Claim(
        name="threshold_kl_vs_fixed",
        statement="... and more stable than a fixed coefficient",
        source="Tricks review §2.1 Length normalization",
        metric="kl_volatility",
        effect="relative",
        region=less(),
        treatment=TRICKS["adaptive_kl"],
    ),
    Claim(
        name="two_layer_kl_stable",
        statement="A second KL term to the previous step's policy makes training 10-20% more stable (KL "
        "10-20% less volatile)",
        source="Tricks review §2.3 Two-layer KL and dynamic regularization",
        metric="kl_volatility",
        effect="relative",
        region=between(-0.20, -0.10),
        treatment=TRICKS["two_layer_kl"],
        reading="stability measured as the volatility of the exact KL to the reference (Evaluation guide "
        "§4.2 Training stability)",
    ),
    Claim(
        name="fixed_kl_fails_often",
        statement="A fixed KL coefficient makes training diverge or converge prematurely in 60% of "
        "configurations",
        source="Tricks review §2.1 Length normalization",
        metric="diverged_or_stalled",
        effect="value",
        region=between(0.5, 0.7),
        treatment={},
        control=None,
        grid=FAILURE_GRID,
        reading="per seed, the share of the grid's configurations that diverge (non-finite reward, or "
        f"exact KL above {KL_BOUND:g} nats per token at the end) or stall (headline score at most "
        f"{STALL_GAIN:g} above the sampled accuracy at step 0); 60% read as 50-70%",
    ),
    Claim(
        name="threshold_kl_fails_less",
        statement="... while the threshold-triggered coefficient fails in fewer of them",
        source="Tricks review §2.1 Length normalization",
        metric="diverged_or_stalled",
        effect="difference",
        region=less(),
        treatment=TRICKS["adaptive_kl"],
        grid=FAILURE_GRID,
    ),
    Claim(
        name="three_tricks_crash",
        statement="Group normalization, a dynamic KL coefficient and length normalization all on crash "
        "within 5 steps",
        source="Tricks review §2.1 Length normalization",
        metric="crashed_early",
        effect="value",
        region=greater(0.5),
        treatment={**TRICKS["adaptive_kl"], **TRICKS["length_norm"]},
        control=None,
        reading="group normalization is GRPO's own advantage; 'a dynamic KL coefficient' read as the "
        "threshold-triggered coefficient of the same section (02's conflict reads it as the per-token "
        "weight `dynamic_kl`); 'crash' read as: most seeds stop, or log a non-finite loss or reward, "
        f"within {CRASH_STEPS} steps",
    ),
    Claim(
        name="chat_needs_no_length_norm",
        statement="On a chat task scored by a judge, GRPO with a simple adaptive KL is enough: length "
        "normalization adds nothing",
        source="Tricks review §3.2 Configurations by task",
        metric="headline_reward",
        effect="difference",
        region=at_most(0.01),
        treatment={"task": "judge", **TRICKS["adaptive_kl"], **TRICKS["length_norm"]},
        control={"task": "judge", **TRICKS["adaptive_kl"]},
        reading="the lab's judge-scored task stands for chat; 'adds nothing' read as: less than 1 "
        "point of judge score gained",
    ),
    Claim(
        name="math_needs_length_norm",
        statement="On math reasoning, length normalization is needed: without it the outcome is worse",
        source="Tricks review §3.2 Configurations by task",
        metric="headline_score",
        effect="difference",
        region=greater(),
        treatment=TRICKS["length_norm"],
        reading="the study base's long-answer task stands for math reasoning",
    ),
    Claim(
        name="two_layer_kl_slower",
        statement="... but slower: less reward along the way",
        source="Tricks review §2.3 Two-layer KL and dynamic regularization",
        metric="mean_reward",
        effect="difference",
        region=less(),
        treatment=TRICKS["two_layer_kl"],
    ),
    Claim(
        name="learnable_temperature_cost",
        statement="A differentiable (learnable) temperature costs about 15-20% more compute per step",
        source="Tricks review §4.4 What to cut with little compute",
        metric="step_time",
        effect="relative",
        region=between(0.15, 0.20),
        treatment=TRICKS["learnable_temperature"],
        design="cost",
        reading="the stated range of extra compute, as a relative step time",
    ),
    Claim(
        name="learnable_temperature_gain",
        statement="A learnable temperature improves the final result by 4-6%",
        source="Tricks review §2.2 PPO tricks ported to GRPO",
        metric="headline_score",
        effect="relative",
        region=between(0.04, 0.06),
        treatment=TRICKS["learnable_temperature"],
        reading="a relative gain of the headline score (4-6% of the control's score, not points)",
    ),
    Claim(
        name="learned_temperature_late",
        statement="... while the learned temperature falls to about 0.1 late in training",
        source="Tricks review §2.2 PPO tricks ported to GRPO",
        metric="final_temperature",
        effect="value",
        region=between(0.05, 0.15),
        treatment=TRICKS["learnable_temperature"],
        control=None,
        reading="'close to 0.1' read as 0.1 +- 0.05, over the last quarter of the steps",
    ),
    Claim(
        name="learnable_temperature_explores",
        statement="A learnable temperature keeps exploration up early in training (higher entropy)",
        source="Tricks review §2.2 PPO tricks ported to GRPO",
        metric="early_entropy",
        effect="relative",
        region=greater(),
        treatment=TRICKS["learnable_temperature"],
    ),
    Claim(
        name="temperature_noise_free",
        statement="Temperature noise in sampling costs almost no extra compute (within 5% of a step)",
        source="Tricks review §4.4 What to cut with little compute",
        metric="step_time",
        effect="relative",
        region=equivalent(0.05),
        treatment=TRICKS["temperature_noise"],
        design="cost",
        reading="'almost no extra compute' read as: step time within 5%",
    ),
    Claim(
        name="temperature_noise_diversity",
        statement="... and makes the completions of a group more varied",
        source="Tricks review §4.4 What to cut with little compute",
        metric="group_diversity",
        effect="relative",
        region=greater(),
        treatment=TRICKS["temperature_noise"],
    ),
    Claim(
        name="dynamic_group_no_gain",
        statement="Growing the groups whose rewards are all equal (dynamic group size) ends close to a "
        "fixed group (within 3 points of accuracy)",
        source="Tricks review §3.1 Verdict table",
        metric="headline_score",
        effect="difference",
        region=equivalent(0.03),
        treatment={"dynamic_group_size": True},
        reading="'not much different' read as: within 3 points of the headline score",
    ),
    Claim(
        name="dynamic_group_costly",
        statement="... while costing more compute per step",
        source="Tricks review §3.1 Verdict table, §4.4 What to cut with little compute",
        metric="step_time",
        effect="relative",
        region=greater(),
        treatment={"dynamic_group_size": True},
        design="cost",
    ),
    Claim(
        name="small_group_worse",
        statement="With too small a group (G = 2 against 8) the advantage estimate is too noisy and the "
        "outcome worse",
        source="Tricks review §1.2 What the tricks repair; Evaluation guide §4.3 Sampling efficiency",
        metric="headline_score",
        effect="difference",
        region=less(),
        treatment={"group_size": 2},
        control={"group_size": 8},
    ),
    Claim(
        name="large_group_no_gain",
        statement="A larger group (G = 16 against 8) costs more without a clear gain (under 3 points of "
        "accuracy)",
        source="Tricks review §1.2 What the tricks repair",
        metric="headline_score",
        effect="difference",
        region=at_most(0.03),
        treatment={"group_size": 16},
        control={"group_size": 8},
    ),
)
"""every claim tested by 09_claims; each `source` names a document and section as docs/sources.md does"""
SMOKE_CLAIMS = ("batch_norm_hurts", "adv_clip_never_binds", "learnable_temperature_cost")


@dataclass(frozen=True)
class Untestable:
    """A claim of the documents this lab cannot test, and why."""

    statement: str
    source: str
    reason: str


UNTESTABLE: tuple[Untestable, ...] = (
    Untestable(
        "Value clipping and the GAE lambda do nothing in GRPO: there is no critic for them to act on",
        "Tricks review §2.2 PPO tricks ported to GRPO, §3.1 Verdict table",
        "true by construction: the lab has no critic, so there is no value loss to clip and nothing "
        "to measure",
    ),
    Untestable(
        "Dynamic regularization (a per-token KL weight from an auxiliary importance model) gains about 5%",
        "Tricks review §2.3 Two-layer KL and dynamic regularization",
        "the lab has no auxiliary token-importance model, and the document gives no recipe to build one",
    ),
    Untestable(
        "Without length normalization a math model degenerates into a verbose 'nodding repeater' "
        "after 800 steps",
        "Tricks review §3.2 Configurations by task",
        "a reasoning model's free-form derivations; the embedded model's answers are at most a few "
        "dozen tokens, and 800-step runs over enough seeds are beyond the notebooks' budget",
    ),
    Untestable(
        "On creative or open-ended generation, the differentiable temperature and the entropy-adaptive "
        "coefficient should both be on",
        "Tricks review §3.2 Configurations by task",
        "the lab has no creative or open-domain dialogue task: every task has a verifiable or judged answer",
    ),
    Untestable(
        "Under weak supervision (RLHF on weak signals), a two-layer KL is worth its slowness",
        "Tricks review §3.2 Configurations by task",
        "the lab has no weak-supervision reward; its rewards are exact or a fixed judge",
    ),
    Untestable(
        "A loss above 1, even above 5, is normal; after SFT the KL term sits between 0.1 and 0.5",
        "Tricks review §4.1 Loss higher than expected",
        "magnitudes of a large SFT model's loss and KL; the embedded model's scales differ by "
        "construction, so the numbers do not transfer",
    ),
    Untestable(
        "Dynamic group size: rewriting 3D-parallel communication for it gained under 2%",
        "Tricks review §4.4 What to cut with little compute",
        "multi-device parallelism; the lab trains on one device",
    ),
    Untestable(
        "Finding at the 37th hour of a thousand-GPU run that the model has become a repeater",
        "Tricks review §5 Lessons",
        "an anecdote about cluster-scale runs, not a measurable effect",
    ),
    Untestable(
        "A dozen GRPO variants on 7B models give scattered results",
        "Tricks review, introduction",
        "7B models: the lab's embedded model is tiny",
    ),
    Untestable(
        "The ratings table (stability, performance, engineering cost: low / medium / high per trick)",
        "Tricks review §3.1 Verdict table",
        "qualitative ratings without a quantity; the table's testable parts are claims above",
    ),
    Untestable(
        "The choice of KL estimator behaves differently at different vocabulary sizes",
        "Evaluation guide §9 Risks and limits",
        "the embedded model has one small vocabulary; the lab cannot vary it",
    ),
    Untestable(
        "Relative merits may reverse with model size",
        "Evaluation guide §9 Risks and limits",
        "one model size",
    ),
)
"""the documents' claims the lab cannot test, with the reason"""


def untestable() -> pd.DataFrame:
    """`UNTESTABLE` as a table: statement, source, reason."""
    return pd.DataFrame([vars(u) for u in UNTESTABLE], columns=["statement", "source", "reason"])


def catalogue(profile: str) -> tuple[Claim, ...]:
    """Every claim under the full profile; three (one of each kind of test) otherwise."""
    return CLAIMS if profile == "full" else tuple(c for c in CLAIMS if c.name in SMOKE_CLAIMS)


settings = BASE_RUNS.settings
"""The study's profile, the training claims': 01's runs (`comparisons.bed.BASE_RUNS`: under the full
profile 3 paired seeds of 60 steps, validated at step 0 and every 5 steps in the scored tail, as 02's
and the schemes' first look are, so the control arm is the grpo runs of 01 and 03 and an arm equal to
one of 02's points, batch norm on group norm, is 02's run); `seeds` and `steps` as the notebook sets
them."""


def profiles(settings: Profile) -> dict[str, Profile]:
    """The profile of each design: 'training', `settings`; 'cost', the timed runs' (08's,
    `comparisons.timing`) on the same seeds (the notebook's; the budgets' own seeds agree)."""
    return {"training": settings, "cost": timing.settings(settings.name, settings.seeds)}


def configurations(claim: Claim) -> dict[str, list[dict[str, Any]]]:
    """Arm -> the config overrides of its runs: the arm's own overrides, at every combination of the
    claim's grid (one entry without a grid)."""
    combos = [dict(zip(claim.grid, values)) for values in itertools.product(*claim.grid.values())]
    return {arm: [{**overrides, **combo} for combo in combos] for arm, overrides in claim.arms().items()}


def design(settings: Profile, claims: Sequence[Claim] | None = None) -> dict[str, list[Point]]:
    """Design -> the points of every configuration the claims (default: the profile's `catalogue`)
    need there, on that design's base (the study base, `comparisons.bed.base`, for 'training'; `cost`'s for
    'cost'), each labelled by its overrides (`arm_label`); a design no claim uses has no points."""
    chosen = catalogue(settings.name) if claims is None else claims
    chosen_profiles = profiles(settings)
    unknown = sorted({c.design for c in chosen} - set(chosen_profiles))
    if unknown:
        raise ValueError(f"no design {unknown}; valid: {', '.join(chosen_profiles)}")
    bases: dict[str, Callable[[Profile], Config]] = {"training": base, "cost": timing.base_config}
    designs: dict[str, list[Point]] = {name: [] for name in bases}
    for name, make_base in bases.items():
        wanted = [c for c in chosen if c.design == name]
        if not wanted:
            continue
        start = make_base(chosen_profiles[name])
        arms = {arm_label(o): o for c in wanted for arm in configurations(c).values() for o in arm}
        designs[name] = [Point(label, {}, start.replace(**o)) for label, o in arms.items()]
    return designs


@dataclass(frozen=True)
class Runs:
    """The runs of the claims' designs."""

    metrics: dict[str, pd.DataFrame]
    """design -> the tidy metrics of its runs (label, seed, then a row per step)"""
    failed: frozenset[tuple[str, int]]
    """(label, seed) of the training runs that failed"""


def runs(
    designs: Mapping[str, Sequence[Point]], settings: Profile, root: str | Path | None = None
) -> list[Config]:
    """Every run the designs need (what `grpo-lab plan` counts): each design's points over its
    profile's seeds (`profiles`). `root` is unused: nothing here depends on what the store holds."""
    chosen = profiles(settings)
    return [
        p.config.replace(seed=seed)
        for name, points in designs.items()
        for p in points
        for seed in chosen[name].seeds
    ]


def run(
    designs: Mapping[str, Sequence[Point]],
    settings: Profile,
    root: str | Path | None = None,
    **options: Any,
) -> Runs:
    """Train (or load) every design over its profile's seeds into `root` (default: each profile's
    run store). Training configurations run in the pool (`options` as for
    `experiments.run_design`), failures recorded; cost configurations are timed one after the other
    in this process by `timing.run`."""
    metrics, failed = {}, set()
    chosen = profiles(settings)
    for name, points in designs.items():
        if not points:
            continue
        where = chosen[name].runs_dir() if root is None else root
        if name == "cost":
            metrics[name] = timing.run(points, chosen[name], where)
            continue
        result = run_design(points, chosen[name].seeds, where, **options)
        metrics[name] = result.metrics
        failed |= set(zip(result.failures["label"], result.failures["seed"]))
    return Runs(metrics, frozenset(failed))


def scores(claims: Sequence[Claim], runs: Runs, settings: Profile) -> pd.DataFrame:
    """Each run's score on its claim's metric: one row per claim, arm and seed (over a grid: the
    mean over the arm's configurations of that seed). A failed run scores `ON_FAILURE` on the
    metrics that measure failing, and has no score otherwise."""
    rows, chosen = [], profiles(settings)
    for claim in claims:
        metric = RUN_METRICS.get(claim.metric)
        by_label = dict(list(runs.metrics[claim.design].groupby(["label", "seed"])))
        for arm, overrides in configurations(claim).items():
            for seed in chosen[claim.design].seeds:
                values = []
                for label in map(arm_label, overrides):
                    if (label, seed) in runs.failed:
                        values.append(ON_FAILURE.get(claim.metric, math.nan))
                    elif (label, seed) in by_label:
                        values.append(metric(by_label[(label, seed)]))
                score = float(np.mean(values)) if len(values) == len(overrides) else math.nan
                rows.append({"claim": claim.name, "arm": arm, "seed": seed, "score": score})
    return pd.DataFrame(rows, columns=["claim", "arm", "seed", "score"])


def figure(table: pd.DataFrame, claims: Sequence[Claim]) -> plt.Figure:
    """Each claim's estimate and interval against its claimed region (`analysis.claim_checks.figure`)."""
    return claim_checks.figure(table, claims)
