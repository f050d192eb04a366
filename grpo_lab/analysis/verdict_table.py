"""The verdict table: one row per scheme (against `grpo`) and per trick (its leave-one-out from all
tricks on), computed from the runs alone: the paired effect on the headline score
(`analysis.scores.HEADLINE`) with its interval and minimum detectable effect, both also as a
fraction of what the reference learns over the run (its gain in the same score), the paired effect
on greedy accuracy over the same window beside it, the stability figures relative to the reference,
the cost multiple, the activity measure, and a verdict read from the whole interval against the margin
(`analysis.power.word`: better / worse, better / worse with the size unsure, no difference, undecided).
Rows of a group-sequential study are decided by its own rule, on its adjusted interval (`Rule`). It is
the measured counterpart of the tricks review's table of difficulty, stability, performance, cost and
recommendation (`docs/sources.md`, Tricks review §3.1). Reads run logs only."""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pandas as pd

from grpo_lab.analysis import sequential, stability, stats
from grpo_lab.analysis.activity import ACTIVITY, activity
from grpo_lab.analysis.power import (
    ALPHA,
    BETTER,
    BETTER_UNSURE,
    MIN_SEEDS,
    NO_DIFFERENCE,
    TOO_FEW_SEEDS,
    UNDECIDED,
    WORSE,
    WORSE_UNSURE,
    paired,
    spread_mde,
)
from grpo_lab.analysis.scores import GREEDY, HEADLINE, PASS_AT_4
from grpo_lab.analysis.step_cost import StepCost

MARGIN_OF_GAIN = 0.15
"""the effect of interest as a fraction of the reference's gain over the run in the headline score:
an interval inside +-margin is 'no difference', and every headline design is sized so that its MDE is at most
this fraction of the gain"""
COST_MARGIN = 0.05
"""a cost multiple within 1 +- this counts as costing the same"""
COUNT_COLUMNS = ("cost:forward", "cost:backward", "cost:flops", "cost:sampled", "cost:trained")
"""the per-run columns of a step's cost by count (`count_columns`, `analysis.step_cost`): passes over the
batch forward and backward, FLOPs, completion tokens sampled and trained"""
ENTROPY_COLLAPSE_X = 1.5
"""a row's entropy collapses when its arm's entropy decay (`stability.entropy_decay`: the share of
the entropy lost from the first to the last steps) is more than this multiple of the reference's,
while the reference's entropy falls too (a multiple of a rise means nothing), and is at least
`ENTROPY_COLLAPSE_FLOOR`"""
ENTROPY_COLLAPSE_FLOOR = 0.3
"""the least share of its entropy an arm must lose for its row to be marked a collapse: a loss of 14%
against the reference's 5% is a ratio of 2.8 but no collapse"""
MULTIPLES = ("kl_volatility", "grad_spikes", "clip_rate", "reward_variance")
"""the stability figures the full table (`markdown`) shows as multiples arm / reference"""
STABILITY_COLUMNS = (*MULTIPLES, "entropy_decay")
"""the per-run stability figures a row is computed from (`stability.STABILITY`)"""
STABILITY_FIGURE = "reward_variance"
"""the one multiple the verdict table's stability column shows on every row: the step-to-step
variance of the training reward around its trend (`stability.reward_variance`) means the same for
every surrogate and every trick and is logged by every run, unlike the clip rate (tokens or
sequences, per surrogate), the KL volatility (no KL without a KL term) or the gradient-spike share
(0-3 spikes per run)"""
PROTOCOLS = ("paired", "sequential", "factorial screen", "leave-one-out")
"""what produced a row: a paired comparison on seeds, the group-sequential rule's final look on
them, the factorial screen's main effect, or the Tricks review's leave-one-out from every trick on"""
TABLE_COLUMNS = (
    "row",
    "kind",
    "protocol",
    "effect",
    "CI",
    "MDE",
    "MDE / gain",
    "seeds",
    "greedy effect",
    "pass@4 effect",
    "activity",
    "stability",
    "cost",
    "verdict",
    "adjusted verdict",
    "notes",
)
"""the columns of the verdict table in figures/README.md (`table_markdown`), in order"""
WORDS = {v: v for v in (BETTER, WORSE, BETTER_UNSURE, WORSE_UNSURE, NO_DIFFERENCE)}
"""the verdicts as the table words them; any other (undecided, too few seeds) is 'undecided'"""
VERDICT_COLORS = {
    BETTER: "tab:green",
    BETTER_UNSURE: "yellowgreen",
    WORSE: "tab:red",
    WORSE_UNSURE: "lightsalmon",
    NO_DIFFERENCE: "tab:blue",
}
"""the colour of each decided verdict in a figure (the forest plots, the changes under faults); any other
is grey"""
DIRECTION_DIFFERS, ENTROPY_COLLAPSE = "direction differs", "entropy collapse"
"""the notes of a row: its headline and greedy effects have opposite signs and one of their
intervals excludes 0; its entropy falls far more than the reference's (`ENTROPY_COLLAPSE_X`)"""
GREEDY_X = 3.0
"""a row's greedy effect, its interval off 0, more than this multiple of its headline effect says more
than the headline does (`greedy_note`)"""


@dataclass(frozen=True)
class Rule:
    """The group-sequential rule a study followed for its rows (`analysis.sequential`): the plan it
    judged each comparison with and the seed counts at which it looked, so that a row is decided as
    the study decided it, on the rule's adjusted interval rather than a plain 95% one."""

    plan: sequential.Plan
    """the plan of every row's comparison; its margin is the rows' margin"""
    looks: tuple[int, ...]
    """the seed counts of the study's looks, increasing; the last is the cap (`plan.max_seeds`)"""

    def __post_init__(self) -> None:
        looks = list(self.looks)
        if not looks or any(b <= a for a, b in zip(looks, looks[1:])) or looks[0] < 1:
            raise ValueError(f"a rule's looks must be increasing seed counts >= 1, got {looks}")
        if looks[-1] != self.plan.max_seeds:
            raise ValueError(
                f"a rule's last look ({looks[-1]}) must be its plan's cap ({self.plan.max_seeds})"
            )

    def decide(self, treatment: pd.Series, control: pd.Series) -> sequential.Look:
        """The rule's decision where the study stopped: the per-seed differences over the seeds both
        arms have (finite ones, in seed order) are looked at as the study looked at them, at each of
        its looks in turn, and the first look that decides is the answer; seeds stored beyond it (runs
        another study asked for) are not read, since the declared design stopped there. With no
        deciding look, the last look reads every seed, final once the cap is reached
        (`sequential.decide`)."""
        both = pd.concat({"t": treatment, "c": control}, axis=1, join="inner").astype(float).sort_index()
        d = (both["t"] - both["c"]).to_numpy()
        d = d[np.isfinite(d)]
        made: list[int] = []
        for k in (k for k in self.looks if k < len(d)):
            look = sequential.decide(self.plan, d[:k], earlier=made, final=False)
            if look.decision != sequential.CONTINUE:
                return look
            if look.look:
                made.append(k)
        return sequential.decide(self.plan, d, earlier=made, final=len(d) >= self.looks[-1])


def run_scores(
    metrics: pd.DataFrame, configs: dict[str, dict], measured: dict[str, Sequence[str]], by: str = "label"
) -> pd.DataFrame:
    """One row per run: `by`, seed, `score` (the headline score, `scores.HEADLINE`) and `start` (its
    metric at the first evaluation, before any update), `greedy` (greedy accuracy over the same
    window) and `greedy start` (at the first evaluation), `accuracy` (greedy accuracy at the last
    evaluation), mean step time, every stability figure and, for each name in `measured[label]`, the
    activity measure of that scheme or trick as column `activity:<name>` (`configs[label]`: the config
    dict of those runs)."""
    rows = []
    for (label, seed), run in metrics.groupby([by, "seed"], sort=False):
        val = run.dropna(subset=["val/accuracy"]).sort_values("step")
        train = run[run["reward"].notna()]
        rows.append(
            {
                by: label,
                "seed": seed,
                "score": HEADLINE.of(run),
                "start": HEADLINE.start(run),
                "greedy": GREEDY.of(run),
                "greedy start": GREEDY.start(run),
                "pass@4": PASS_AT_4.of(run),
                "accuracy": float(val["val/accuracy"].iloc[-1]) if len(val) else np.nan,
                "step_s": float(train["time/step_s"].mean()),
                **{k: f.fn(run) for k, f in stability.STABILITY.items()},
                **{f"activity:{n}": activity(n, run, configs[label]) for n in measured.get(label, ())},
            }
        )
    return pd.DataFrame(rows)


def _ratio(arm: pd.Series, reference: pd.Series) -> float:
    """Mean of the arm over mean of the reference (NaN when undefined: no finite value on a side)."""
    a, r = (float(side.mean()) if side.notna().any() else np.nan for side in (arm, reference))
    return a / r if np.isfinite(a) and np.isfinite(r) and r != 0 else np.nan


def count_columns(cost: StepCost) -> dict[str, float]:
    """A step's cost by count (`analysis.step_cost.StepCost`) as the `COUNT_COLUMNS` of a run's row."""
    values = (cost.passes.forward, cost.passes.backward, cost.flops, cost.tokens.sampled, cost.tokens.trained)
    return dict(zip(COUNT_COLUMNS, map(float, values)))


def counted_cost(arm: pd.DataFrame, reference: pd.DataFrame) -> tuple[float, str]:
    """The arm's cost against the reference's by count, from their runs' `COUNT_COLUMNS` (means over
    runs): the FLOPs multiple, the table's `cost x`, and the cell that shows it with the passes and the
    tokens, e.g. 'FLOPs x0.88 (fwd 2/3, bwd 2/2, sampled x0.97, trained x0.97)'; NaN and 'n/a' where
    the runs carry no counts."""
    if not all(c in arm and c in reference for c in COUNT_COLUMNS):
        return math.nan, "n/a"
    a, r = (side[list(COUNT_COLUMNS)].mean() for side in (arm, reference))
    flops = _ratio(arm["cost:flops"], reference["cost:flops"])
    sampled = _ratio(arm["cost:sampled"], reference["cost:sampled"])
    trained = _ratio(arm["cost:trained"], reference["cost:trained"])
    passes = (
        f"fwd {a['cost:forward']:g}/{r['cost:forward']:g}, bwd {a['cost:backward']:g}/{r['cost:backward']:g}"
    )
    return flops, f"FLOPs x{flops:.2f} ({passes}, sampled x{sampled:.2f}, trained x{trained:.2f})"


def recommendation(verdict: str, cost: float, inert: bool) -> str:
    """What the row says to a user, derived from its verdict and cost (never written by hand)."""
    if inert:
        return "inert here: cannot be judged"
    if verdict == BETTER:
        return "worth it" if cost <= 1 + COST_MARGIN else "better, at a cost"
    if verdict == WORSE:
        return "avoid"
    if verdict == BETTER_UNSURE:
        return "a gain of unsure size: more seeds"
    if verdict == WORSE_UNSURE:
        return "a loss of unsure size: avoid unless cheaper"
    if verdict == NO_DIFFERENCE:
        return "no gain: skip" if cost > 1 + COST_MARGIN else "no gain, no cost"
    return "undecided: more seeds"


def gain(scores: pd.DataFrame) -> float:
    """What runs learn over their length in the headline score: the mean over `scores`' runs of
    score minus start (NaN without runs)."""
    learned = (scores["score"] - scores["start"]).dropna()
    return float(learned.mean()) if len(learned) else math.nan


def greedy_note(headline: Sequence[float], greedy: Sequence[float], margin: float) -> str:
    """What the greedy effect (effect, low, high) says that the headline effect (effect, low, high)
    does not: 'greedy beyond the margin, other way' when the whole greedy interval lies beyond the
    margin opposite the headline effect's sign; 'greedy xK the headline' when the greedy interval
    excludes 0 and its effect is more than `GREEDY_X` times the headline's, same sign or not; '' otherwise."""
    (e, _, _), (g, g_lo, g_hi) = headline, greedy
    if not all(map(math.isfinite, (e, g, g_lo, g_hi))):
        return ""
    if (e > 0 and g_hi < -margin) or (e < 0 and g_lo > margin):
        return "greedy beyond the margin, other way"
    if (g_lo > 0 or g_hi < 0) and abs(g) > GREEDY_X * abs(e):
        return f"greedy x{abs(g) / abs(e):.0f} the headline" if e else "greedy moves, headline does not"
    return ""


def below_start(arm: pd.DataFrame) -> tuple[float, float, float]:
    """How far the arm's greedy accuracy over the scored window lies from its starting model's (the
    first evaluation, before any update), as mean with its 95% t-interval over the arm's runs; NaN
    where the scores lack the columns or fewer than `power.MIN_SEEDS` runs have them."""
    if "greedy" not in arm or "greedy start" not in arm:
        return math.nan, math.nan, math.nan
    moved = (arm["greedy"] - arm["greedy start"]).dropna().to_numpy(dtype=float)
    return stats.mean_interval(moved) if len(moved) >= MIN_SEEDS else (math.nan, math.nan, math.nan)


def direction_differs(headline: Sequence[float], greedy: Sequence[float]) -> bool:
    """Whether the headline and the greedy effect (each as effect, low, high) point opposite ways
    while at least one of their intervals excludes 0: the two accuracies disagree on the arm."""
    (e, lo, hi), (g, g_lo, g_hi) = headline, greedy
    return bool(e * g < 0 and (lo > 0 or hi < 0 or g_lo > 0 or g_hi < 0))


def entropy_collapse(arm: pd.Series, reference: pd.Series) -> bool:
    """Whether the arm's entropy decay (`stability.entropy_decay`, per run) is at least
    `ENTROPY_COLLAPSE_FLOOR` and more than `ENTROPY_COLLAPSE_X` times the reference's, the reference's
    entropy falling (mean decay > 0)."""
    lost = float(reference.mean()) if reference.notna().any() else math.nan
    own = float(arm.mean()) if arm.notna().any() else math.nan
    return bool(lost > 0 and own >= ENTROPY_COLLAPSE_FLOOR and _ratio(arm, reference) > ENTROPY_COLLAPSE_X)


class Headline(NamedTuple):
    """A row's comparison on the headline score, as the table shows it."""

    seeds: int
    """the seeds it rests on"""
    effect: float
    low: float
    high: float
    """the effect and its interval"""
    confidence: float
    """the interval's confidence: 0.95, or the sequential rule's adjusted level"""
    df: float
    """the interval's degrees of freedom (seeds - 1 for a paired one, the model's for a factorial one)"""
    mde: float
    """the minimum detectable effect of a fixed design with these seeds"""
    sd: float
    """the sd of the per-seed differences (NaN for a factorial effect, whose spread is the model's)"""
    margin: float
    """the margin the verdict is judged against"""
    verdict: str
    """one of `power.VERDICTS`"""

    def columns(
        self, greedy: tuple[float, float, float], from_start: tuple[float, float, float]
    ) -> dict[str, object]:
        """The row's columns of this comparison and of the greedy effect (effect, low, high) beside
        it, with whether their directions differ (`direction_differs`) and what the greedy effect adds
        (`greedy_note`), and the arm's greedy accuracy against its start (`below_start`)."""
        return {
            "seeds": self.seeds,
            "effect": self.effect,
            "ci_low": self.low,
            "ci_high": self.high,
            "confidence": self.confidence,
            "df": self.df,
            "mde": self.mde,
            "sd": self.sd,
            "margin": self.margin,
            "verdict": self.verdict,
            "greedy effect": greedy[0],
            "greedy ci_low": greedy[1],
            "greedy ci_high": greedy[2],
            "direction differs": direction_differs((self.effect, self.low, self.high), greedy),
            "greedy note": greedy_note((self.effect, self.low, self.high), greedy, self.margin),
            "greedy from start": from_start[0],
            "greedy from start ci_low": from_start[1],
            "greedy from start ci_high": from_start[2],
            "ends below start": bool(from_start[2] < 0),
        }


def compare(
    scores: pd.DataFrame,
    arms: Sequence[tuple[str, str, str, str]],
    by: str = "label",
    margin: float | None = None,
    reference_gain: float | None = None,
    protocol: str = "paired",
    rule: Rule | None = None,
) -> pd.DataFrame:
    """The verdict table. `arms` lists (row name, kind, treatment label, control label): a scheme
    is (name, "scheme", name, "grpo"); a trick in a leave-one-out is (name, "trick", "all",
    "-name"), so its effect is what switching it on adds to the other tricks. Effects are paired
    over the seeds both labels have, on the headline score, with the paired effect on greedy accuracy
    beside it (the `greedy` column of `run_scores`; NaN where the scores lack it) and the flags of
    `notes`; the activity is measured in the treatment's runs, where the mechanism is on.
    `reference_gain` is what the reference method learns over the run (default: the control's own
    gain, `gain`); `margin` defaults to `MARGIN_OF_GAIN` times it, and `mde / gain` is the row's MDE
    over it. `protocol` (one of `PROTOCOLS`) fills the column that says what produced the rows;
    'sequential' needs the `rule` the study followed, whose plan's margin is the rows' margin (give
    no `margin` then): each row is the rule's decision at the comparison's last look
    (`Rule.decide`; a look that would continue is 'undecided'), on its adjusted interval, whose
    `confidence` the row gives."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; valid: {', '.join(PROTOCOLS)}")
    if (protocol == "sequential") != (rule is not None):
        raise ValueError("the 'sequential' protocol needs the study's rule, and only it takes one")
    if rule is not None and margin is not None:
        raise ValueError(f"a sequential row's margin is its rule's ({rule.plan.margin:g}): give no margin")
    by_label = {label: frame.set_index("seed") for label, frame in scores.groupby(by)}
    rows = []
    for name, kind, treatment, control in arms:
        if treatment not in by_label or control not in by_label:
            raise ValueError(f"row {name!r}: no runs for {treatment!r} or {control!r}")
        t, c = by_label[treatment], by_label[control]
        learned = gain(c) if reference_gain is None else reference_gain
        row_margin = MARGIN_OF_GAIN * learned if margin is None else margin
        headline = _paired_headline(t, c, row_margin) if rule is None else _rule_headline(t, c, rule)
        column = f"activity:{name}"  # measured where the mechanism is on: the treatment's runs
        act = float(t[column].mean()) if column in t else math.nan
        cost, counted = counted_cost(t, c)
        rows.append(
            {
                "row": name,
                "kind": kind,
                "protocol": protocol,
                **headline.columns(_greedy(t, c), below_start(t)),
                "pass@4 effect": _logged_effect(t, c, "pass@4"),
                "gain": learned,
                "mde / gain": headline.mde / learned if learned > 0 else math.nan,
                **_stability(t, c),
                "cost x": cost,
                "cost counts": counted,
                "activity": act,
                "activity measure": ACTIVITY[name].what if name in ACTIVITY else "",
                "recommendation": recommendation(headline.verdict, cost, act == 0),
            }
        )
    return pd.DataFrame(rows)


def _paired_headline(t: pd.DataFrame, c: pd.DataFrame, margin: float) -> Headline:
    """The paired 95% t-interval of the headline score over the seeds both sides have."""
    e = paired(t["score"], c["score"])
    return Headline(e.n, e.effect, e.low, e.high, 1 - ALPHA, e.n - 1, e.mde, e.sd, margin, e.verdict(margin))


def _rule_headline(t: pd.DataFrame, c: pd.DataFrame, rule: Rule) -> Headline:
    """The sequential rule's decision at the comparison's last look, on its adjusted interval: a look
    that would continue is 'undecided', fewer than `power.MIN_SEEDS` seeds 'too few seeds'."""
    look = rule.decide(t["score"], c["score"])
    if look.seeds < MIN_SEEDS:
        verdict = TOO_FEW_SEEDS
    else:
        verdict = UNDECIDED if look.decision == sequential.CONTINUE else look.decision
    return Headline(
        look.seeds,
        look.effect,
        look.low,
        look.high,
        1 - look.level,
        look.seeds - 1,
        look.mde,
        look.sd,
        rule.plan.margin,
        verdict,
    )


def _greedy(t: pd.DataFrame, c: pd.DataFrame) -> tuple[float, float, float]:
    """The paired effect on greedy accuracy (`scores.GREEDY`) with its 95% interval; NaN where a side
    lacks the column."""
    if "greedy" not in t or "greedy" not in c:
        return math.nan, math.nan, math.nan
    e = paired(t["greedy"], c["greedy"])
    return e.effect, e.low, e.high


def _logged_effect(t: pd.DataFrame, c: pd.DataFrame, column: str) -> float:
    """The paired mean effect on a score only some runs logged (pass@k, from the runs that log it):
    NaN unless at least `power.MIN_SEEDS` seeds have it on both sides."""
    if column not in t or column not in c:
        return math.nan
    both = pd.concat({"t": t[column], "c": c[column]}, axis=1, join="inner").dropna()
    return float((both["t"] - both["c"]).mean()) if len(both) >= MIN_SEEDS else math.nan


def _stability(arm: pd.DataFrame, reference: pd.DataFrame) -> dict[str, object]:
    """The stability multiples arm / reference (`MULTIPLES`), each side's mean entropy change over the
    run (`stability.entropy_decay` negated: -0.3 is a 30% fall), the entropy the arm retains as a
    multiple of what the reference retains (`entropy retained x`: a ratio of two positive shares, where
    a ratio of two signed decays would mean nothing) and whether the arm's entropy collapses."""
    kept, kept_reference = 1 - arm["entropy_decay"], 1 - reference["entropy_decay"]
    return {
        **{f"{k} x": _ratio(arm[k], reference[k]) for k in MULTIPLES},
        "entropy change": -_mean(arm["entropy_decay"]),
        "reference entropy change": -_mean(reference["entropy_decay"]),
        "entropy retained x": _ratio(kept, kept_reference),
        "entropy collapse": entropy_collapse(arm["entropy_decay"], reference["entropy_decay"]),
    }


def _mean(values: pd.Series) -> float:
    return float(values.mean()) if values.notna().any() else math.nan


UNREAD = (math.nan, math.nan, math.nan)
"""an effect with its interval that a row does not read"""


def factorial_rows(
    runs: pd.DataFrame,
    effects: pd.DataFrame,
    reference_gain: float,
    kind: str = "trick",
    greedy: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The factorial screen's rows of the verdict table, in the columns of `compare`. `runs`: one row
    per run of the screen with a bool column per factor, its `run_scores` (step time, stability
    figures) and `activity:<factor>` where the factor is on; `effects`: the screen's main effects
    (`analysis.factorial.main_effects`, its margin `MARGIN_OF_GAIN` x `reference_gain`, what the
    reference method learns over its run); `greedy`: the same estimator's main effects on greedy
    accuracy (over the runs' `greedy` column; None: NaN). Per factor: the main effect with its
    interval and MDE, the greedy one beside it, the seeds it rests on, its activity measure averaged
    over the runs where it is on, and the stability figures and step time of the runs with it on over
    those with it off."""
    beside = greedy.set_index("factor") if greedy is not None else None
    rows = []
    for e in effects.itertuples(index=False):
        on, off = runs[runs[e.factor]], runs[~runs[e.factor]]
        column = f"activity:{e.factor}"
        act = float(on[column].mean()) if column in on else math.nan
        cost, counted = counted_cost(on, off)
        headline = Headline(
            int(e.seeds), e.effect, e.ci_low, e.ci_high, 1 - ALPHA, e.df, e.mde, math.nan, e.margin, e.verdict
        )
        on_greedy = (math.nan, math.nan, math.nan)
        if beside is not None and e.factor in beside.index:
            g = beside.loc[e.factor]
            on_greedy = (float(g["effect"]), float(g["ci_low"]), float(g["ci_high"]))
        rows.append(
            {
                "row": e.factor,
                "kind": kind,
                "protocol": "factorial screen",
                **headline.columns(on_greedy, UNREAD),  # the on-runs mix other factors: no arm to read
                "gain": reference_gain,
                "mde / gain": e.mde / reference_gain if reference_gain > 0 else math.nan,
                **_stability(on, off),
                "cost x": cost,
                "cost counts": counted,
                "activity": act,
                "activity measure": ACTIVITY[e.factor].what if e.factor in ACTIVITY else "",
                "recommendation": recommendation(e.verdict, cost, act == 0),
            }
        )
    return pd.DataFrame(rows)


def pooled_mdes(table: pd.DataFrame) -> pd.DataFrame:
    """`table` with every paired row's MDE (and `mde / gain`) read from a spread of enough seeds
    (`power.spread_mde`): a row's own sd from `power.MIN_SPREAD_SEEDS` seeds up, below that the sd pooled
    over the table's paired rows; `mde from` says which ('own', 'pooled', 'none'). A factorial row (no
    per-seed sd: its spread is the model's, on many degrees of freedom) keeps its own."""
    out = table.assign(**{"mde from": "own"})
    rows = out["sd"].notna() if "sd" in out else pd.Series(False, index=out.index)
    if rows.any():
        read = spread_mde(pd.DataFrame({"n": out.loc[rows, "seeds"], "sd": out.loc[rows, "sd"]}))
        out.loc[rows, "mde"] = read["mde"]
        out.loc[rows, "mde from"] = read["mde from"]
    if "gain" in out:
        with np.errstate(invalid="ignore", divide="ignore"):
            out["mde / gain"] = np.where(out["gain"] > 0, out["mde"] / out["gain"], math.nan)
    return out


def notes(row: dict) -> str:
    """The notes of a table row: `DIRECTION_DIFFERS`, its `greedy_note`, 'greedy ends below the
    start' (the arm's greedy accuracy over the scored window lies below its starting model's, the
    whole interval) and `ENTROPY_COLLAPSE`, where they hold."""
    flagged = [DIRECTION_DIFFERS] if row.get("direction differs") else []
    flagged += [row["greedy note"]] if row.get("greedy note") else []
    if row.get("ends below start"):
        flagged.append(f"greedy ends below the start ({row['greedy from start']:+.3f})")
    return ", ".join(flagged + ([ENTROPY_COLLAPSE] if row.get("entropy collapse") else []))


def table_markdown(table: pd.DataFrame) -> str:
    """The verdict table as GitHub markdown in `TABLE_COLUMNS`: the effect, its interval (its confidence named
    when it is not 95%: the sequential rule's adjusted one) and its MDE on the headline score, `MDE / gain`,
    the seeds it rests on, the paired effect on greedy accuracy with its interval, the mean paired effect on
    pass@4 where both arms logged it (n/a otherwise), the row's activity measure, its stability
    (`stability_cell`), its cost by count (`counted_cost`) with the quiet bench's step-time multiple where
    the row has one, the verdict in the words of `WORDS` (else 'undecided'),
    the word after the table's error-rate control (`analysis.multiplicity.adjust`; n/a for a table not
    adjusted) and the row's `notes`."""
    lines = ["| " + " | ".join(TABLE_COLUMNS) + " |", "|" + "---|" * len(TABLE_COLUMNS)]
    for r in table.to_dict("records"):
        cells = [
            r["row"],
            r["kind"],
            r["protocol"],
            _signed(r["effect"]),
            _interval(r["ci_low"], r["ci_high"], r.get("confidence", 1 - ALPHA)),
            _cell(r["mde"]) + (" (pooled)" if r.get("mde from") == "pooled" else ""),
            _cell(r["mde / gain"]),
            str(r["seeds"]),
            f"{_signed(r['greedy effect'])} {_interval(r['greedy ci_low'], r['greedy ci_high'], 1 - ALPHA)}",
            _signed(r.get("pass@4 effect", math.nan)),
            _cell(r["activity"]),
            stability_cell(r),
            _cost_cell(r),
            WORDS.get(r["verdict"], "undecided"),
            WORDS.get(r["adjusted verdict"], "undecided") if "adjusted verdict" in r else "n/a",
            notes(r),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _cost_cell(row: dict) -> str:
    """The cost cell: the counts (`counted_cost`) and, where the quiet bench timed the arm, its time."""
    quiet = row.get("quiet time x", math.nan)
    timed = f"; quiet time x{quiet:.2f}" if isinstance(quiet, float) and math.isfinite(quiet) else ""
    return f"{row.get('cost counts', 'n/a')}{timed}"


def _interval(low: float, high: float, confidence: float) -> str:
    """'[low, high]', with ' at C%' when the confidence is known and not 95%."""
    shown = f"[{_signed(low)}, {_signed(high)}]"
    if math.isfinite(confidence) and not math.isclose(confidence, 1 - ALPHA):
        return f"{shown} at {100 * confidence:.1f}%"
    return shown


def _signed(value: float) -> str:
    return "n/a" if not math.isfinite(value) else f"{value:+.3f}"


def stability_cell(row: dict) -> str:
    """A row's stability as the table shows it, the same figures on every row: the entropy change of
    the arm and of its reference over the run, and the `STABILITY_FIGURE` multiple, e.g.
    'entropy -42% (ref -30%), reward variance x0.85'."""
    multiple = row[f"{STABILITY_FIGURE} x"]
    shown = "n/a" if not math.isfinite(multiple) else f"x{multiple:.2f}"
    return f"{entropy_cell(row)}, {STABILITY_FIGURE.replace('_', ' ')} {shown}"


def entropy_cell(row: dict) -> str:
    """The entropy changes of a row's arm and reference, e.g. 'entropy -42% (ref -30%)'."""
    return f"entropy {_percent(row['entropy change'])} (ref {_percent(row['reference entropy change'])})"


def _percent(value: float) -> str:
    return "n/a" if not math.isfinite(value) else f"{100 * value:+.0f}%"


def markdown(table: pd.DataFrame) -> str:
    """The table as GitHub markdown, numbers rounded for reading."""
    shown = table.copy()
    shown["effect (CI)"] = [
        _signed(e) + " " + _interval(lo, hi, conf)
        for e, lo, hi, conf in zip(shown["effect"], shown["ci_low"], shown["ci_high"], shown["confidence"])
    ]
    shown["greedy effect (95% CI)"] = [
        _signed(e) + " " + _interval(lo, hi, 1 - ALPHA)
        for e, lo, hi in zip(shown["greedy effect"], shown["greedy ci_low"], shown["greedy ci_high"])
    ]
    shown["notes"] = [notes(r) for r in table.to_dict("records")]
    columns = ["row", "kind", "seeds", "effect (CI)", "mde", "mde / gain", "margin", "greedy effect (95% CI)"]
    columns += ["entropy change", "reference entropy change", "entropy retained x"]
    columns += [f"{k} x" for k in MULTIPLES] + ["cost x", "activity", "verdict", "recommendation"]
    shown = shown[[*columns, "notes"]]
    header = "| " + " | ".join(shown.columns) + " |\n|" + "---|" * len(shown.columns) + "\n"
    body = "".join("| " + " | ".join(_cell(v) for v in row) + " |\n" for row in shown.itertuples(index=False))
    return header + body


def _cell(value: object) -> str:
    if isinstance(value, float):
        return "n/a" if not math.isfinite(value) else f"{value:.3g}"
    return str(value)
