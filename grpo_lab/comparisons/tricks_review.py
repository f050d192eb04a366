"""The Tricks review's own table, measured (`docs/sources.md`, Tricks review §3.1 Verdict table): the
review rates ten tricks on five columns (源码实现难度 implementation difficulty, 训练稳定性 training
stability, 推理性能提升 performance gain, 工程成本 engineering cost, 推荐指数 recommendation); beside
each rating this module puts the lab's measured counterpart from the verdict table of notebook 12
(`studies.verdicts.table`, columns of `analysis.verdict_table.TABLE_COLUMNS`) and reads the pair as
`AGREE`, `DISAGREE`, `NOT_DECIDED` (the lab measured it, but its runs do not decide it) or
`NOT_TESTABLE` (nothing here can measure it).

Every reading follows a rule fixed in this module's constants before any stored result was looked
at, one small pure function per column: `performance_reading` (the headline verdict), `stability_reading`
(the direction of the stability multiples, `stability_direction`), `cost_reading` (the FLOPs
multiple), `recommendation_reading` (the stance of the table's recommendation, `lab_stance`).
Implementation difficulty has no measured counterpart: the review means the work of building a trick
into a distributed training framework (§4.4: dynamic group size made one team rewrite its 3D-parallel
communication), which nothing in a single-process lab measures, and the line count of a trick here
(a config field and a few lines in the composer or the trainer) would measure this codebase's layout,
not that work.

`REVIEW` holds the transcribed rows; `review_table` builds the comparison from a verdict table,
`disagreements` states each disagreement in one sentence with its numbers, `markdown` renders the
comparison and `figure` draws it as a grid."""

import math
from collections.abc import Mapping, Sequence
from textwrap import fill
from typing import NamedTuple

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch

from grpo_lab.analysis.verdict_table import (
    BETTER,
    BETTER_UNSURE,
    COST_MARGIN,
    MULTIPLES,
    NO_DIFFERENCE,
    STABILITY_FIGURE,
    WORDS,
    WORSE,
    WORSE_UNSURE,
    entropy_cell,
    recommendation,
)

ASPECTS = {
    "difficulty": "源码实现难度",
    "stability": "训练稳定性",
    "performance": "推理性能提升",
    "cost": "工程成本",
    "recommendation": "推荐指数",
}
"""the review's five columns in its order: the name used here -> the review's header"""
MEASURED = ("stability", "performance", "cost", "recommendation")
"""the aspects with a measured counterpart (implementation difficulty has none: see the module)"""
LEVELS = {"极低": "very low", "低": "low", "中": "medium", "高": "high", "无": "none"}
"""the review's rating words of the first four columns, in English"""
RECOMMENDATIONS = {
    "必开": "always on",
    "基线": "baseline",
    "推荐": "recommended",
    "强烈推荐": "strongly recommended",
    "慎用": "use with care",
    "不推荐": "not recommended",
    "完全不必要": "entirely unnecessary",
}
"""the review's recommendation words, in English"""

AGREE, DISAGREE = "agree", "disagree"
NOT_DECIDED = "not decided here"
"""the lab measured the counterpart, but its runs do not decide it (an undecided verdict, no row in
these runs, a trick that never acted, stability figures that moved both ways)"""
NOT_TESTABLE = "not testable here"
"""nothing in the lab measures it, or the review's word makes no claim a measurement could contradict"""
READINGS = (AGREE, DISAGREE, NOT_DECIDED, NOT_TESTABLE)
"""every reading of a cell"""
READING_COLORS = {AGREE: "#a6d96a", DISAGREE: "#f46d43", NOT_DECIDED: "#fee08b", NOT_TESTABLE: "#d9d9d9"}
"""the colour of each reading in `figure`"""
CELL_WIDTH = 34
"""characters per line of a measured value in a cell of `figure`"""

PERFORMANCE_AGREES: dict[str, tuple[str, ...]] = {
    "高": (BETTER,),
    "中": (BETTER,),
    "低": (NO_DIFFERENCE,),
    "无": (NO_DIFFERENCE, WORSE, WORSE_UNSURE),
}
"""per performance rating, the headline verdicts that agree with it (`PERFORMANCE_DISAGREES`: those
that contradict it; any other decides nothing). 高 and 中 claim a gain that matters, which only `better`
shows (the whole interval beyond the margin, `analysis.verdict_table.MARGIN_OF_GAIN` x grpo's gain).
低 claims a gain too small to matter: an interval inside the margin. 无 claims no gain, which a loss
does not contradict (the review reports global reward normalization, rated 无, as harmful)."""
PERFORMANCE_DISAGREES: dict[str, tuple[str, ...]] = {
    "高": (WORSE, WORSE_UNSURE, NO_DIFFERENCE),
    "中": (WORSE, WORSE_UNSURE, NO_DIFFERENCE),
    "低": (BETTER, WORSE),
    "无": (BETTER,),
}
"""per performance rating, the headline verdicts that contradict it. A size-unsure word shows a sign but
not whether it matters: it contradicts a claimed gain when it is a loss, and decides nothing about a
gain too small to matter (低) or the absence of one that matters (无, for a gain)."""
STABILITY_X = 1.25
"""a stability multiple (arm / reference, as the verdict table gives it) at or beyond this factor, or
at or below its inverse, counts as a move. The multiples are ratios of means with no interval, so this
is a fixed resolution, not a test: a quarter more or less of a figure such as the KL's volatility"""
STABLER, LESS_STABLE, UNCHANGED, MIXED = "stabler", "less stable", "unchanged", "mixed"
"""the direction of a row's stability multiples (`stability_direction`); every figure of
`analysis.stability` is lower when the run is stabler"""
STABILITY_AGREES = {"高": STABLER, "中": UNCHANGED, "低": LESS_STABLE, "无": UNCHANGED}
"""per stability rating, the direction that agrees with it: 高, training is more stable with the trick;
低, less stable (the review's global reward normalization, 'very jittery'); 中, the middle of the
scale, neither; 无, no effect on stability (value clipping, with no critic to act on)"""

COST_HIGH = 1.5
"""a FLOPs multiple above this (half a step again) is a high cost"""
COST_BANDS: dict[str, tuple[float, float]] = {
    "极低": (0.0, 1 + COST_MARGIN),
    "低": (0.0, 1 + COST_MARGIN),
    "中": (1 + COST_MARGIN, COST_HIGH),
    "高": (COST_HIGH, math.inf),
}
"""per cost rating, the FLOPs multiples (low, high] that agree with it. The review's engineering
cost is the work to build a trick and the compute it adds; the lab measures the compute alone (the
verdict table's FLOPs multiple by count, `analysis.verdict_table.COST_MARGIN` the width of 'costs the same').
极低 and 低 agree with no measurable extra time; 中 with up to half a step more (the review gives the
learnable temperature, rated 中, 15% to 20% more compute, §4.4); 高 with more than that"""

ADOPT, DROP = "adopt", "drop"
"""a recommendation's stance: add the trick, or leave it out"""
RECOMMENDATION_STANCES: dict[str, str | None] = {
    "必开": ADOPT,
    "强烈推荐": ADOPT,
    "推荐": ADOPT,
    "不推荐": DROP,
    "完全不必要": DROP,
    "基线": None,
    "慎用": None,
}
"""the stance of each review recommendation; 基线 (baseline: the reference the KL variants are rated
against, neither urged nor discouraged) and 慎用 (use with care: worth it only where stability matters
most, §3.2) take none, so their cells are `NOT_TESTABLE`"""

SCREEN, LEAVE_ONE_OUT, PAIRED = ("factorial screen",), ("leave-one-out",), ("paired",)
SCHEME = ("sequential", "paired")
"""the protocols (`analysis.verdict_table.PROTOCOLS`) of the rows a review trick may be read from: a scheme
row is the sequential rule's, or paired under a profile too small for a look"""


class Source(NamedTuple):
    """A verdict-table row that measures a review trick."""

    row: str
    """the row's name"""
    protocols: tuple[str, ...]
    """the protocols a row of that name must have to be this one (a trick has a screen row and a
    leave-one-out row of one name)"""
    reverse: bool = False
    """the row measures the trick's removal (`grpo_no_kl` against `grpo`, for grpo's KL term): its
    effect, interval, verdict and multiples are read the other way round (`_reversed`)"""


class Ratings(NamedTuple):
    """A row of the review's table, in `ASPECTS` order, as the review words it."""

    difficulty: str
    stability: str
    performance: str
    cost: str
    recommendation: str


class ReviewTrick(NamedTuple):
    """A trick the review rates, with what implements it in the lab and the rows that measure it."""

    term: str
    """the review's name, verbatim"""
    english: str
    ratings: Ratings
    lab: str
    """what implements it in the lab"""
    sources: tuple[Source, ...]
    """the verdict-table rows that measure it, the closest to the review's own setting first: the
    trick alone over grpo (paired), then what it adds to every other trick (leave-one-out, the review's
    §5 protocol), then its main effect over the screen's other factors; the first row the table has is
    read. Empty: the lab cannot measure it (`lab` says why)"""


def _tricks(name: str) -> tuple[Source, ...]:
    """The rows of a trick of `presets.TRICKS`: its leave-one-out row, else its screen row."""
    return Source(name, LEAVE_ONE_OUT), Source(name, SCREEN)


REVIEW: tuple[ReviewTrick, ...] = (
    ReviewTrick(
        "组内奖励标准化",
        "group reward normalization",
        Ratings("低", "中", "中", "极低", "必开"),
        "screen factor group_reward_norm (comparisons.screen.FACTORS): grpo's std-scaled group advantage "
        "against the mean-centred one of Dr. GRPO",
        (Source("group_reward_norm", SCREEN),),
    ),
    ReviewTrick(
        "固定KL惩罚",
        "fixed KL penalty",
        Ratings("低", "中", "中", "极低", "基线"),
        "grpo's fixed k3 KL term (beta 0.04): the scheme row grpo_no_kl against grpo, read reversed",
        (Source("grpo_no_kl", SCHEME, reverse=True),),
    ),
    ReviewTrick(
        "自适应KL阈值",
        "adaptive KL (threshold)",
        Ratings("中", "高", "中", "低", "推荐"),
        "trick adaptive_kl (presets.TRICKS): the threshold KL schedule",
        _tricks("adaptive_kl"),
    ),
    ReviewTrick(
        "两层KL惩罚",
        "two-layer KL penalty",
        Ratings("高", "高", "低", "中", "慎用"),
        "trick two_layer_kl: a second KL to the previous policy",
        _tricks("two_layer_kl"),
    ),
    ReviewTrick(
        "长度归一化",
        "length normalization",
        Ratings("低", "高", "高", "低", "强烈推荐"),
        "trick length_norm: the reward scaled by min(1, ref / length)",
        _tricks("length_norm"),
    ),
    ReviewTrick(
        "可微分温度",
        "differentiable temperature",
        Ratings("中", "中", "中", "中", "推荐"),
        "trick learnable_temperature",
        _tricks("learnable_temperature"),
    ),
    ReviewTrick(
        "熵自适应系数",
        "adaptive entropy coefficient",
        Ratings("低", "高", "低", "低", "推荐"),
        "trick adaptive_entropy: an entropy bonus steered to a target",
        _tricks("adaptive_entropy"),
    ),
    ReviewTrick(
        "全局奖励标准化",
        "global (batch) reward normalization",
        Ratings("低", "低", "无", "低", "不推荐"),
        "trick batch_reward_norm: the batch's normalization on top of the group's; alone over grpo it "
        "is the named conflict 'batch norm on group norm' (studies.ablations.CONFLICTS)",
        (Source("batch norm on group norm", PAIRED), *_tricks("batch_reward_norm")),
    ),
    ReviewTrick(
        "价值裁剪Value Clipping",
        "value clipping",
        Ratings("中", "无", "无", "中", "完全不必要"),
        "none: GRPO has no critic, so there is no value estimate to clip (Tricks review §2.2)",
        (),
    ),
    ReviewTrick(
        "动态组大小",
        "dynamic group size",
        Ratings("高", "中", "中", "高", "不推荐"),
        "trick dynamic_group_size: groups without reward variance grow",
        _tricks("dynamic_group_size"),
    ),
)
"""the review's table (`docs/sources.md`, Tricks review §3.1 Verdict table), row by row in its order,
each rating verbatim"""


def performance_reading(rating: str, verdict: str) -> str:
    """A performance rating against the row's headline verdict (`PERFORMANCE_AGREES`): the review's
    performance gain is what the trick does to the answers, which the headline score measures; an
    undecided verdict decides nothing."""
    if verdict in PERFORMANCE_AGREES[rating]:
        return AGREE
    return DISAGREE if verdict in PERFORMANCE_DISAGREES[rating] else NOT_DECIDED


def stability_direction(multiples: Mapping[str, float]) -> str:
    """Which way a row's stability multiples (figure -> arm / reference) moved, each figure lower when
    the run is stabler: `STABLER` when some fell by `STABILITY_X` and none rose by it, `LESS_STABLE`
    the other way round, `MIXED` when both happened, `UNCHANGED` when none moved; `MIXED` too without
    a usable multiple (finite and positive: a ratio of a fall to a rise has no direction), since then
    nothing says which way. `review_table` passes the figures the verdict table's stability column
    shows on every row (`direction_figures`)."""
    usable = _usable(multiples).values()
    fell = any(m <= 1 / STABILITY_X for m in usable)
    rose = any(m >= STABILITY_X for m in usable)
    if not usable or (fell and rose):
        return MIXED
    return STABLER if fell else LESS_STABLE if rose else UNCHANGED


def _usable(multiples: Mapping[str, float]) -> dict[str, float]:
    """The multiples that say which way a figure moved: finite and positive."""
    return {k: float(m) for k, m in multiples.items() if math.isfinite(m) and m > 0}


def stability_reading(rating: str, direction: str) -> str:
    """A stability rating against the direction of the row's stability figures (`STABILITY_AGREES`,
    `direction_figures`): the review's training stability is the behaviour the reward variance and
    the entropy's fall (Evaluation guide §4.2) record. Figures that moved both ways decide nothing."""
    if direction == MIXED:
        return NOT_DECIDED
    return AGREE if STABILITY_AGREES[rating] == direction else DISAGREE


def cost_reading(rating: str, cost: float) -> str:
    """A cost rating against the row's FLOPs multiple by count (`COST_BANDS`): compute is the part of the
    review's engineering cost a run can measure. No multiple (a row without counts) decides
    nothing."""
    if not math.isfinite(cost):
        return NOT_DECIDED
    low, high = COST_BANDS[rating]
    return AGREE if low < cost <= high else DISAGREE


def lab_stance(verdict: str, inert: bool) -> str | None:
    """The stance of a verdict-table row's recommendation (`analysis.verdict_table.recommendation`, which
    follows from the same verdict): `ADOPT` for a trick that is better (at a cost or not), `DROP` for
    one that is worse (whatever its size) or no different (nothing to gain by adding it), None (no
    stance) for a gain of unsure size, an undecided row or a trick that never acted."""
    if inert or verdict not in (BETTER, WORSE, WORSE_UNSURE, NO_DIFFERENCE):
        return None
    return ADOPT if verdict == BETTER else DROP


def recommendation_reading(rating: str, stance: str | None) -> str:
    """A recommendation against the stance of the row's recommendation: the same question, whether to
    add the trick. A review word without a stance (`RECOMMENDATION_STANCES`: 基线, 慎用) is not
    testable; a row without one decides nothing."""
    claimed = RECOMMENDATION_STANCES[rating]
    if claimed is None:
        return NOT_TESTABLE
    if stance is None:
        return NOT_DECIDED
    return AGREE if claimed == stance else DISAGREE


def _find(verdict_table: pd.DataFrame, sources: Sequence[Source]) -> tuple[Source, dict] | None:
    """The first of `sources` the table has a row for, with that row; None when it has none."""
    for source in sources:
        found = verdict_table[
            (verdict_table["row"] == source.row) & verdict_table["protocol"].isin(source.protocols)
        ]
        if len(found):
            return source, found.iloc[0].to_dict()
    return None


def _adjusted(row: dict) -> dict:
    """A row as its table's error-rate control reads it (`analysis.multiplicity.adjust`): the adjusted
    word and interval in place of the raw ones, and the recommendation derived anew from them; a row of
    a table without that control as it is."""
    if not isinstance(row.get("adjusted verdict"), str):
        return row
    out = dict(row)
    out["verdict"] = row["adjusted verdict"]
    out["ci_low"], out["ci_high"] = row["adjusted ci_low"], row["adjusted ci_high"]
    out["recommendation"] = recommendation(out["verdict"], row["cost x"], _inert(row))
    return out


def _reversed(row: dict) -> dict:
    """A row read the other way round, treatment and control swapped: the effect and its interval
    negated, better and worse exchanged, every multiple inverted, and the recommendation derived anew
    from the swapped verdict and cost (`analysis.verdict_table.recommendation`)."""
    swap = {BETTER: WORSE, WORSE: BETTER, BETTER_UNSURE: WORSE_UNSURE, WORSE_UNSURE: BETTER_UNSURE}
    out = dict(row)
    out["effect"], out["ci_low"], out["ci_high"] = -row["effect"], -row["ci_high"], -row["ci_low"]
    out["verdict"] = swap.get(row["verdict"], row["verdict"])
    for column in ["cost x", "entropy retained x", *(f"{k} x" for k in MULTIPLES)]:
        out[column] = 1 / row[column] if row[column] else math.nan
    out["entropy change"], out["reference entropy change"] = (
        row["reference entropy change"],
        row["entropy change"],
    )
    out["recommendation"] = recommendation(out["verdict"], out["cost x"], _inert(row))
    return out


def _inert(row: dict) -> bool:
    """Whether the row's mechanism never acted in its runs (activity 0), as the table reads it."""
    return bool(row.get("activity") == 0)


def _signed(value: float) -> str:
    return "n/a" if not math.isfinite(value) else f"{value:+.3f}"


def direction_figures(row: dict) -> dict[str, float]:
    """The multiples a row's stability direction is read from, each lower when the arm is stabler: the
    verdict table's `STABILITY_FIGURE` multiple and the entropy the reference retains over the entropy
    the arm retains (`entropy_retained`: above 1 when the arm's entropy fell further)."""
    retained = row["entropy retained x"]
    inverse = 1 / retained if math.isfinite(retained) and retained > 0 else math.nan
    return {STABILITY_FIGURE: row[f"{STABILITY_FIGURE} x"], "entropy_retained": inverse}


def _described(source: Source, row: dict) -> str:
    """Which row measures the trick, e.g. 'length_norm (leave-one-out, 3 seeds)'."""
    reverse = ", reversed" if source.reverse else ""
    return f"{source.row} ({row['protocol']}, {int(row['seeds'])} seeds{reverse})"


def _unmeasured(trick: ReviewTrick) -> tuple[dict[str, object], dict[str, str], dict[str, str]]:
    """The columns of a trick no row of the table measures: `NOT_TESTABLE` when the lab has nothing to
    measure it with (no sources), `NOT_DECIDED` when these runs lack its rows."""
    why = "no row in these runs" if trick.sources else "nothing to measure: no critic in GRPO"
    reading = NOT_DECIDED if trick.sources else NOT_TESTABLE
    shown = dict.fromkeys(MEASURED, why)
    readings = dict.fromkeys(MEASURED, reading)
    if trick.sources:
        readings["recommendation"] = recommendation_reading(trick.ratings.recommendation, None)
    return {"measured by": why}, shown, readings


def _read(
    trick: ReviewTrick, source: Source, raw: dict
) -> tuple[dict[str, object], dict[str, str], dict[str, str]]:
    """The columns of a trick measured by the verdict-table row `raw` of `source` (`review_table`), read
    on its adjusted word where the table controls its error rate (`_adjusted`)."""
    row = _reversed(_adjusted(raw)) if source.reverse else _adjusted(raw)
    direction, multiple = stability_direction(direction_figures(row)), row[f"{STABILITY_FIGURE} x"]
    variance = "n/a" if not math.isfinite(multiple) else f"x{multiple:.2f}"
    interval = f"{_signed(row['effect'])} [{_signed(row['ci_low'])}, {_signed(row['ci_high'])}]"
    shown = {
        "performance": f"{interval} {WORDS.get(row['verdict'], 'undecided')}",
        "stability": f"{direction}: {STABILITY_FIGURE.replace('_', ' ')} {variance}, {entropy_cell(row)}",
        "cost": "n/a" if not math.isfinite(row["cost x"]) else f"FLOPs x{row['cost x']:.2f}",
        "recommendation": str(row["recommendation"]),
    }
    inert = _inert(row)
    readings = {
        "performance": performance_reading(trick.ratings.performance, row["verdict"]),
        "stability": stability_reading(trick.ratings.stability, direction),
        "cost": cost_reading(trick.ratings.cost, row["cost x"]),
        "recommendation": recommendation_reading(
            trick.ratings.recommendation, lab_stance(row["verdict"], inert)
        ),
    }
    if inert:  # the trick never acted: nothing measured is its effect
        readings |= dict.fromkeys(("performance", "stability", "cost"), NOT_DECIDED)
    numbers = {
        "measured by": _described(source, row),
        "seeds": int(row["seeds"]),
        "effect": row["effect"],
        "ci_low": row["ci_low"],
        "ci_high": row["ci_high"],
        "verdict": row["verdict"],
        "stability direction": direction,
        "stability figure": STABILITY_FIGURE,
        "stability x": multiple,
        "entropy change": row["entropy change"],
        "reference entropy change": row["reference entropy change"],
        "cost x": row["cost x"],
        "recommendation": row["recommendation"],
    }
    return numbers, shown, readings


def _measured(trick: ReviewTrick, verdict_table: pd.DataFrame) -> dict[str, object]:
    """One row of `review_table`: the trick, the measured numbers, and per aspect the review's word,
    the measured text and the reading (implementation difficulty: `NOT_TESTABLE`, see the module)."""
    found = _find(verdict_table, trick.sources)
    numbers, shown, readings = _unmeasured(trick) if found is None else _read(trick, *found)
    shown["difficulty"], readings["difficulty"] = "not measured", NOT_TESTABLE
    ratings = trick.ratings._asdict()
    cells = {}
    for aspect in ASPECTS:
        cells[f"{aspect} review"] = ratings[aspect]
        cells[f"{aspect} measured"] = shown[aspect]
        cells[f"{aspect} reading"] = readings[aspect]
    return {"trick": trick.english, "term": trick.term, "lab": trick.lab, **numbers, **cells}


def review_table(
    verdict_table: pd.DataFrame,
    review: Sequence[ReviewTrick] = REVIEW,
) -> pd.DataFrame:
    """One row per review trick, in the review's order: its name (`trick`, `term`), what implements it
    (`lab`), which verdict-table row measures it (`measured by`: the first of its `sources` the table has)
    with that row's seeds, effect, interval, verdict, stability figure (`STABILITY_FIGURE`) and its
    multiple, the entropy changes of arm and reference, cost multiple and recommendation (read reversed
    for a reversed source), and per aspect of `ASPECTS` the review's word (`<aspect> review`), the
    measured counterpart as text (`<aspect> measured`) and the reading (`<aspect> reading`, one of
    `READINGS`). A trick whose row never acted (activity 0) has its measured aspects `NOT_DECIDED`.
    The cost is the row's FLOPs multiple by count."""
    return pd.DataFrame([_measured(trick, verdict_table) for trick in review])


def _english(aspect: str, word: str) -> str:
    """The English of the review's word in column `aspect`."""
    return RECOMMENDATIONS[word] if aspect == "recommendation" else LEVELS[word]


def _gloss(aspect: str, word: str) -> str:
    """The review's word with its English, e.g. '高 (high)'."""
    return f"{word} ({_english(aspect, word)})"


def _sentence(row: dict, aspect: str) -> str:
    """One sentence stating a disagreement of `aspect` in `row` (of `review_table`) with its numbers."""
    rated = _gloss(aspect, row[f"{aspect} review"])
    who = f"{row['trick']} ({row['term']}): the review rates"
    where = f"the lab's row {row['measured by']}"
    word = WORDS.get(row["verdict"], "undecided")
    interval = f"{_signed(row['effect'])} [{_signed(row['ci_low'])}, {_signed(row['ci_high'])}]"
    if aspect == "performance":
        return (
            f"{who} its performance gain {rated}; {where} measures {interval} on the headline score: {word}."
        )
    if aspect == "stability":
        return (
            f"{who} its training stability {rated}; {where} finds training {row['stability direction']}: "
            f"{row['stability figure'].replace('_', ' ')} x{row['stability x']:.2f} that of the runs "
            f"without it, {entropy_cell(row)}."
        )
    if aspect == "cost":
        return (
            f"{who} its engineering cost {rated}; {where} counts FLOPs a step x{row['cost x']:.2f} those of "
            "the runs without it."
        )
    return (
        f"{who} it {rated}; {where} recommends '{row['recommendation']}' (effect {interval}, {word}; "
        f"FLOPs a step x{row['cost x']:.2f})."
    )


def disagreements(reviewed: pd.DataFrame) -> list[str]:
    """For every `DISAGREE` cell of `reviewed` (`review_table`), in row and `ASPECTS` order, one
    English sentence stating it with its row's numbers (for the README)."""
    rows = reviewed.to_dict("records")
    return [
        _sentence(row, aspect) for row in rows for aspect in ASPECTS if row[f"{aspect} reading"] == DISAGREE
    ]


def markdown(reviewed: pd.DataFrame) -> str:
    """`reviewed` (`review_table`) as GitHub markdown: per trick, the row that measures it and, per
    aspect, 'review word (English) → measured: **reading**'."""
    header = ["trick", "measured by", *(f"{ASPECTS[a]} {a}" for a in ASPECTS)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in reviewed.to_dict("records"):
        cells = [f"{r['trick']} ({r['term']})", str(r["measured by"])]
        cells += [
            f"{_gloss(a, r[f'{a} review'])} → {r[f'{a} measured']}: **{r[f'{a} reading']}**" for a in ASPECTS
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def figure(reviewed: pd.DataFrame, runs: str) -> plt.Figure:
    """`reviewed` (`review_table`) as a grid: a row per review trick, a column per aspect, each cell
    coloured by its reading and giving the review's word (in English: the default font has no CJK
    glyphs) over the measured value; the title says the profile and the runs (`runs`, as notebook 12's
    `studies.verdicts.figure_review` words them)."""
    records = reviewed.to_dict("records")
    codes = np.array([[READINGS.index(r[f"{a} reading"]) for a in ASPECTS] for r in records])
    n = len(records)
    fig, ax = plt.subplots(figsize=(15, 1.2 + 0.62 * n))
    colours = ListedColormap([READING_COLORS[r] for r in READINGS])
    ax.imshow(codes, cmap=colours, vmin=0, vmax=len(READINGS) - 1, aspect="auto")
    for i, r in enumerate(records):
        for j, a in enumerate(ASPECTS):
            shown = f"review: {_english(a, r[f'{a} review'])}\n{fill(str(r[f'{a} measured']), CELL_WIDTH)}"
            ax.text(j, i, shown, ha="center", va="center", fontsize=6.5)
    ax.set_xticks(range(len(ASPECTS)), list(ASPECTS), fontsize=9)
    ax.set_yticks(range(n), [f"{r['trick']}\n{r['measured by']}" for r in records], fontsize=7)
    ax.xaxis.tick_top()
    handles = [Patch(facecolor=READING_COLORS[r], label=r) for r in READINGS]
    fig.legend(handles=handles, loc="lower center", ncol=len(READINGS), fontsize=8, frameon=False)
    fig.suptitle(f"Tricks review §3.1 against the lab's verdict table ({runs})", fontsize=10)
    fig.tight_layout(rect=(0, 0.5 / (1.2 + 0.62 * n), 1, 1))
    return fig
