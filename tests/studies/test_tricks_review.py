"""The Tricks review's table beside the lab's measurements (`comparisons.tricks_review`): the transcription of
the review's ten rows, each reading rule on constructed values (each can agree and each can fail),
the comparison read from constructed verdict rows (which row is read, a reversed row, an inert trick,
missing rows), and the whole chain on a verdict table built by `studies.verdicts.table` from
hand-made scores."""

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from grpo_lab.analysis import verdict_table
from grpo_lab.analysis.power import (
    BETTER,
    BETTER_UNSURE,
    NO_DIFFERENCE,
    TOO_FEW_SEEDS,
    UNDECIDED,
    WORSE,
    WORSE_UNSURE,
)
from grpo_lab.comparisons import screen, tricks_review
from grpo_lab.experiments.designs import factorial_matrix
from grpo_lab.presets import TRICKS
from grpo_lab.studies import ablations, schemes, verdicts

SOURCE_TABLE = (
    "组内奖励标准化低中中极低必开固定KL惩罚低中中极低基线自适应KL阈值中高中低推荐两层KL惩罚高高低中慎用"
    "长度归一化低高高低强烈推荐可微分温度中中中中推荐熵自适应系数低高低低推荐全局奖励标准化低低无低不推荐"
    "价值裁剪Value Clipping中无无中完全不必要动态组大小高中中高不推荐"
)
"""the body of the review's §3.1 table as the source document prints it (one run of text, no cell
separators), copied verbatim"""


# --- the transcription ---


def test_the_ten_rows_are_the_reviews_table_verbatim_in_its_order():
    assert len(tricks_review.REVIEW) == 10
    assert "".join(t.term + "".join(t.ratings) for t in tricks_review.REVIEW) == SOURCE_TABLE
    assert len({t.english for t in tricks_review.REVIEW}) == 10
    assert list(tricks_review.Ratings._fields) == list(tricks_review.ASPECTS)
    for t in tricks_review.REVIEW:
        assert {t.ratings.difficulty, t.ratings.stability, t.ratings.performance, t.ratings.cost} <= set(
            tricks_review.LEVELS
        )
        assert t.ratings.recommendation in tricks_review.RECOMMENDATIONS
        assert t.ratings.performance in tricks_review.PERFORMANCE_AGREES
        assert t.ratings.stability in tricks_review.STABILITY_AGREES
        assert t.ratings.cost in tricks_review.COST_BANDS
    assert set(tricks_review.RECOMMENDATION_STANCES) == set(tricks_review.RECOMMENDATIONS)


def test_every_source_is_a_row_the_verdict_table_can_have():
    names = {
        tricks_review.SCREEN: set(screen.FACTORS),
        tricks_review.LEAVE_ONE_OUT: set(TRICKS),
        tricks_review.PAIRED: set(ablations.CONFLICTS),
        tricks_review.SCHEME: set(schemes.SCHEMES),
    }
    for t in tricks_review.REVIEW:
        for source in t.sources:
            assert source.row in names[source.protocols], (t.english, source)
            assert set(source.protocols) <= set(verdict_table.PROTOCOLS)
    by_name = {t.english: t for t in tricks_review.REVIEW}
    assert by_name["fixed KL penalty"].sources == (
        tricks_review.Source("grpo_no_kl", tricks_review.SCHEME, reverse=True),
    )
    assert [s.reverse for t in tricks_review.REVIEW for s in t.sources].count(True) == 1
    assert by_name["value clipping"].sources == () and "no critic" in by_name["value clipping"].lab
    # the leave-one-out before the screen; the conflict (the trick alone over grpo) before both
    assert [s.protocols for s in by_name["length normalization"].sources] == [
        tricks_review.LEAVE_ONE_OUT,
        tricks_review.SCREEN,
    ]
    assert by_name["global (batch) reward normalization"].sources[0].protocols == tricks_review.PAIRED
    assert ablations.CONFLICTS["batch norm on group norm"].changes == TRICKS["batch_reward_norm"]


# --- the reading rules, each able to agree and to fail ---


@pytest.mark.parametrize(
    ("rating", "verdict", "expected"),
    [
        ("高", BETTER, tricks_review.AGREE),
        ("中", BETTER, tricks_review.AGREE),
        ("高", NO_DIFFERENCE, tricks_review.DISAGREE),
        ("中", WORSE_UNSURE, tricks_review.DISAGREE),
        ("中", WORSE, tricks_review.DISAGREE),
        ("中", BETTER_UNSURE, tricks_review.NOT_DECIDED),
        ("低", BETTER_UNSURE, tricks_review.NOT_DECIDED),
        ("低", WORSE_UNSURE, tricks_review.NOT_DECIDED),
        ("低", NO_DIFFERENCE, tricks_review.AGREE),
        ("低", BETTER, tricks_review.DISAGREE),
        ("低", WORSE, tricks_review.DISAGREE),
        ("无", NO_DIFFERENCE, tricks_review.AGREE),
        ("无", WORSE, tricks_review.AGREE),
        ("无", BETTER, tricks_review.DISAGREE),
        ("无", WORSE_UNSURE, tricks_review.AGREE),
        ("无", BETTER_UNSURE, tricks_review.NOT_DECIDED),
        ("高", UNDECIDED, tricks_review.NOT_DECIDED),
        ("无", TOO_FEW_SEEDS, tricks_review.NOT_DECIDED),
    ],
)
def test_performance_reading(rating, verdict, expected):
    assert tricks_review.performance_reading(rating, verdict) == expected


@pytest.mark.parametrize(
    ("multiples", "expected"),
    [
        ({"kl_volatility": 0.7, "grad_spikes": 1.1}, tricks_review.STABLER),
        ({"kl_volatility": 1 / tricks_review.STABILITY_X}, tricks_review.STABLER),
        ({"reward_variance": 1.3, "clip_rate": 0.9}, tricks_review.LESS_STABLE),
        ({"entropy_decay": tricks_review.STABILITY_X}, tricks_review.LESS_STABLE),
        ({"kl_volatility": 1.2, "clip_rate": 0.85}, tricks_review.UNCHANGED),
        ({"kl_volatility": 0.5, "grad_spikes": 2.0}, tricks_review.MIXED),
        ({"kl_volatility": math.nan, "entropy_decay": -3.0}, tricks_review.MIXED),  # nothing usable
        ({"kl_volatility": math.nan, "entropy_decay": 1.5}, tricks_review.LESS_STABLE),
    ],
)
def test_stability_direction(multiples, expected):
    assert tricks_review.stability_direction(multiples) == expected


def test_the_direction_reads_the_tables_stability_figure_and_the_entropy_retained():
    """An arm that keeps 50% of its entropy where the reference keeps 70% lost more: the inverse of
    its retained multiple counts as a rise; a figure the column does not show never counts."""
    row = {"reward_variance x": 1.0, "grad_spikes x": 9.0, "entropy retained x": 0.5 / 0.7}
    figures = tricks_review.direction_figures(row)
    assert figures == pytest.approx({"reward_variance": 1.0, "entropy_retained": 1.4})
    assert tricks_review.stability_direction(figures) == tricks_review.LESS_STABLE
    assert tricks_review.stability_direction(
        tricks_review.direction_figures(row | {"entropy retained x": 1.0})
    ) == (tricks_review.UNCHANGED)


@pytest.mark.parametrize(
    ("rating", "direction", "expected"),
    [
        ("高", tricks_review.STABLER, tricks_review.AGREE),
        ("高", tricks_review.UNCHANGED, tricks_review.DISAGREE),
        ("高", tricks_review.LESS_STABLE, tricks_review.DISAGREE),
        ("中", tricks_review.UNCHANGED, tricks_review.AGREE),
        ("中", tricks_review.STABLER, tricks_review.DISAGREE),
        ("低", tricks_review.LESS_STABLE, tricks_review.AGREE),
        ("低", tricks_review.STABLER, tricks_review.DISAGREE),
        ("无", tricks_review.UNCHANGED, tricks_review.AGREE),
        ("无", tricks_review.LESS_STABLE, tricks_review.DISAGREE),
        ("高", tricks_review.MIXED, tricks_review.NOT_DECIDED),
    ],
)
def test_stability_reading(rating, direction, expected):
    assert tricks_review.stability_reading(rating, direction) == expected


@pytest.mark.parametrize(
    ("rating", "cost", "expected"),
    [
        ("极低", 0.9, tricks_review.AGREE),
        ("极低", 1 + verdict_table.COST_MARGIN, tricks_review.AGREE),
        ("极低", 1.2, tricks_review.DISAGREE),
        ("低", 1.03, tricks_review.AGREE),
        ("低", 1.6, tricks_review.DISAGREE),
        ("中", 1.2, tricks_review.AGREE),
        ("中", tricks_review.COST_HIGH, tricks_review.AGREE),
        ("中", 1.0, tricks_review.DISAGREE),
        ("中", 2.0, tricks_review.DISAGREE),
        ("高", 1.8, tricks_review.AGREE),
        ("高", 1.2, tricks_review.DISAGREE),
        ("低", math.nan, tricks_review.NOT_DECIDED),
    ],
)
def test_cost_reading(rating, cost, expected):
    assert tricks_review.cost_reading(rating, cost) == expected


@pytest.mark.parametrize(
    "verdict", [BETTER, WORSE, BETTER_UNSURE, WORSE_UNSURE, NO_DIFFERENCE, UNDECIDED, TOO_FEW_SEEDS]
)
@pytest.mark.parametrize("cost", [1.0, 1.4])
def test_the_lab_stance_is_the_stance_of_the_tables_recommendation(verdict, cost):
    said = verdict_table.recommendation(verdict, cost, inert=False)
    adopt = said in ("worth it", "better, at a cost")
    undecided = said.endswith("more seeds")
    expected = tricks_review.ADOPT if adopt else None if undecided else tricks_review.DROP
    assert tricks_review.lab_stance(verdict, inert=False) == expected
    assert tricks_review.lab_stance(verdict, inert=True) is None  # 'inert here: cannot be judged'


@pytest.mark.parametrize(
    ("rating", "stance", "expected"),
    [
        ("必开", tricks_review.ADOPT, tricks_review.AGREE),
        ("强烈推荐", tricks_review.ADOPT, tricks_review.AGREE),
        ("推荐", tricks_review.DROP, tricks_review.DISAGREE),
        ("不推荐", tricks_review.DROP, tricks_review.AGREE),
        ("完全不必要", tricks_review.ADOPT, tricks_review.DISAGREE),
        ("推荐", None, tricks_review.NOT_DECIDED),
        ("基线", tricks_review.ADOPT, tricks_review.NOT_TESTABLE),
        ("慎用", tricks_review.DROP, tricks_review.NOT_TESTABLE),
    ],
)
def test_recommendation_reading(rating, stance, expected):
    assert tricks_review.recommendation_reading(rating, stance) == expected


# --- the comparison on constructed verdict rows ---


def verdict_row(
    name: str,
    protocol: str,
    effect: float,
    low: float,
    high: float,
    verdict: str,
    cost: float = 1.0,
    activity: float = math.nan,
    kind: str = "trick",
    **multiples: float,
) -> dict:
    """A row of the verdict table with the columns `analysis.verdict_table.compare` gives; every stability
    multiple 1 unless given."""
    return {
        "row": name,
        "kind": kind,
        "protocol": protocol,
        "seeds": 3,
        "effect": effect,
        "ci_low": low,
        "ci_high": high,
        "confidence": 0.95,
        "mde": 0.01,
        "margin": 0.01,
        "verdict": verdict,
        "greedy effect": effect,
        "greedy ci_low": low,
        "greedy ci_high": high,
        "direction differs": False,
        "pass@4 effect": math.nan,
        "gain": 0.1,
        "mde / gain": 0.1,
        **{f"{k} x": multiples.get(k, 1.0) for k in verdict_table.MULTIPLES},
        "entropy change": multiples.get("entropy change", -0.3),
        "reference entropy change": multiples.get("reference entropy change", -0.3),
        "entropy retained x": multiples.get("entropy retained x", 1.0),
        "entropy collapse": False,
        "cost x": cost,
        "activity": activity,
        "activity measure": "",
        "recommendation": verdict_table.recommendation(verdict, cost, activity == 0),
    }


def constructed() -> pd.DataFrame:
    """Rows for four review tricks: grpo_no_kl (worse than grpo, cheaper, a KL twice as volatile),
    length_norm in the screen (better) and in the leave-one-out (no difference), batch reward
    normalization in the screen (better) and as the conflict (worse, less stable), and an inert
    learnable temperature."""
    return pd.DataFrame(
        [
            verdict_row("grpo_no_kl", "sequential", -0.04, -0.06, -0.02, WORSE, 0.8, kind="scheme",
                        reward_variance=2.0, **{"entropy change": -0.2, "entropy retained x": 1.1}),
            verdict_row("length_norm", "factorial screen", 0.05, 0.03, 0.07, BETTER, 1.02),
            verdict_row("length_norm", "leave-one-out", 0.001, -0.004, 0.006, NO_DIFFERENCE, 1.02,
                        reward_variance=0.6),
            verdict_row("batch_reward_norm", "factorial screen", 0.03, 0.01, 0.05, BETTER, 1.01),
            verdict_row("batch norm on group norm", "paired", -0.05, -0.07, -0.03, WORSE, 1.01,
                        kind="conflict", reward_variance=1.6),
            verdict_row("learnable_temperature", "leave-one-out", 0.04, 0.02, 0.06, BETTER, 1.3,
                        activity=0.0),
        ]
    )  # fmt: skip


def test_the_kl_term_is_read_from_grpo_no_kl_reversed():
    reviewed = tricks_review.review_table(constructed()).set_index("trick")
    kl = reviewed.loc["fixed KL penalty"]
    assert kl["measured by"] == "grpo_no_kl (sequential, 3 seeds, reversed)"
    assert (kl["effect"], kl["ci_low"], kl["ci_high"]) == pytest.approx((0.04, 0.02, 0.06))
    assert kl["verdict"] == BETTER and kl["cost x"] == pytest.approx(1.25)
    assert (kl["stability figure"], kl["stability x"]) == ("reward_variance", pytest.approx(0.5))
    assert (kl["entropy change"], kl["reference entropy change"]) == (-0.3, -0.2)  # arm and reference swap
    assert kl["stability measured"] == "stabler: reward variance x0.50, entropy -30% (ref -20%)"
    assert kl["recommendation"] == verdict_table.recommendation(BETTER, 1.25, False) == "better, at a cost"
    assert kl["performance measured"] == "+0.040 [+0.020, +0.060] better"
    readings = {a: kl[f"{a} reading"] for a in tricks_review.ASPECTS}
    assert readings == {
        "difficulty": tricks_review.NOT_TESTABLE,
        "stability": tricks_review.DISAGREE,  # 中 against a stabler run
        "performance": tricks_review.AGREE,  # 中 against better
        "cost": tricks_review.DISAGREE,  # 极低 against x1.25
        "recommendation": tricks_review.NOT_TESTABLE,  # 基线 takes no side
    }


def test_the_leave_one_out_is_read_before_the_screen_and_the_conflict_before_both():
    reviewed = tricks_review.review_table(constructed()).set_index("trick")
    length = reviewed.loc["length normalization"]
    assert length["measured by"] == "length_norm (leave-one-out, 3 seeds)"
    assert length["performance reading"] == tricks_review.DISAGREE  # 高 against no difference
    assert length["stability reading"] == tricks_review.AGREE  # 高 against a stabler run
    assert (
        length["cost reading"] == tricks_review.AGREE
        and length["recommendation reading"] == tricks_review.DISAGREE
    )
    batch = reviewed.loc["global (batch) reward normalization"]
    assert batch["measured by"] == "batch norm on group norm (paired, 3 seeds)"
    assert batch["performance reading"] == tricks_review.AGREE  # 无 against worse
    assert batch["stability measured"].startswith(tricks_review.LESS_STABLE)
    assert (
        batch["stability reading"] == tricks_review.AGREE
        and batch["recommendation reading"] == tricks_review.AGREE
    )


def test_the_cost_is_read_as_the_rows_flops_multiple():
    reviewed = tricks_review.review_table(constructed()).set_index("trick")
    kl = reviewed.loc["fixed KL penalty"]
    assert kl["cost reading"] == tricks_review.DISAGREE and kl["cost measured"] == "FLOPs x1.25"  # 极低
    assert any(
        "fixed KL penalty" in s and "counts FLOPs a step x1.25" in s
        for s in tricks_review.disagreements(reviewed.reset_index())
    )


def test_an_inert_trick_missing_rows_and_value_clipping_decide_nothing():
    reviewed = tricks_review.review_table(constructed()).set_index("trick")
    inert = reviewed.loc["differentiable temperature"]
    assert inert["recommendation"] == "inert here: cannot be judged"
    assert {inert[f"{a} reading"] for a in tricks_review.MEASURED} == {tricks_review.NOT_DECIDED}
    missing = reviewed.loc["two-layer KL penalty"]  # 慎用: no side to test even with runs
    assert missing["measured by"] == "no row in these runs"
    assert [missing[f"{a} reading"] for a in tricks_review.ASPECTS] == [
        tricks_review.NOT_TESTABLE, tricks_review.NOT_DECIDED, tricks_review.NOT_DECIDED,
        tricks_review.NOT_DECIDED, tricks_review.NOT_TESTABLE,
    ]  # fmt: skip
    assert reviewed.loc["dynamic group size", "recommendation reading"] == tricks_review.NOT_DECIDED
    clipping = reviewed.loc["value clipping"]
    assert {clipping[f"{a} reading"] for a in tricks_review.ASPECTS} == {tricks_review.NOT_TESTABLE}
    assert set(reviewed["difficulty reading"]) == {tricks_review.NOT_TESTABLE}
    assert list(reviewed.index) == [t.english for t in tricks_review.REVIEW]


def test_each_disagreement_is_one_sentence_with_its_numbers():
    reviewed = tricks_review.review_table(constructed())
    readings = reviewed[[f"{a} reading" for a in tricks_review.ASPECTS]]
    sentences = tricks_review.disagreements(reviewed)
    assert len(sentences) == (readings == tricks_review.DISAGREE).to_numpy().sum() == 4
    assert all(s.endswith(".") and s.count(". ") == 0 for s in sentences)
    assert (
        "fixed KL penalty (固定KL惩罚): the review rates its engineering cost 极低 (very low); the lab's row "
        "grpo_no_kl (sequential, 3 seeds, reversed) counts FLOPs a step x1.25 those of the runs without it."
    ) in sentences
    assert any("performance gain 高 (high)" in s and "+0.001 [-0.004, +0.006]" in s for s in sentences)
    assert any("training stability 中 (medium)" in s and "reward variance x0.50" in s for s in sentences)
    assert any("it 强烈推荐 (strongly recommended)" in s and "'no gain, no cost'" in s for s in sentences)


def test_markdown_has_a_row_per_trick_and_a_cell_per_aspect():
    text = tricks_review.markdown(tricks_review.review_table(constructed()))
    lines = text.splitlines()
    assert len(lines) == 2 + 10
    assert lines[0].startswith("| trick | measured by | 源码实现难度 difficulty")
    assert all(line.count(" | ") == 6 for line in lines[2:])
    assert "中 (medium) → +0.040 [+0.020, +0.060] better: **agree**" in text


def test_the_figure_colours_each_cell_by_its_reading_and_names_the_runs():
    reviewed = tricks_review.review_table(constructed())
    fig = verdicts.figure_review(reviewed, verdicts.settings("smoke"))
    try:
        ax = fig.axes[0]
        codes = np.asarray(ax.images[0].get_array())
        assert codes.shape == (10, 5)
        assert codes[0, 0] == tricks_review.READINGS.index(tricks_review.NOT_TESTABLE)
        assert codes[1, 2] == tricks_review.READINGS.index(tricks_review.AGREE)  # the KL's performance
        assert len(ax.texts) == 50 and "x1.25" in ax.texts[1 * 5 + 3].get_text()
        assert "smoke profile" in fig.get_suptitle()
    finally:
        plt.close(fig)


# --- the whole chain on a verdict table of `studies.verdicts.table` ---

FIGURES = dict.fromkeys(verdict_table.STABILITY_COLUMNS, 1.0)


def runs(label: str, score, flops: float = 1.0) -> pd.DataFrame:
    """One row per seed of hand-made run scores, each starting at 0.3, with a step's cost by count
    (`flops` FLOPs, the passes and tokens of grpo's step)."""
    score = np.asarray(score, dtype=float)
    return pd.DataFrame(
        {"label": label, "seed": range(len(score)), "score": score, "start": 0.3, "greedy": score - 0.1,
         "step_s": 1.0, **FIGURES, **counts(flops)}
    )  # fmt: skip


def counts(flops) -> dict:
    """The `COUNT_COLUMNS` of runs whose step costs `flops` (one value or one per run)."""
    return {"cost:forward": 3.0, "cost:backward": 2.0, "cost:flops": flops, "cost:sampled": 100.0,
            "cost:trained": 100.0}  # fmt: skip


def scored() -> dict[str, pd.DataFrame]:
    """grpo over 9 seeds and grpo_no_kl 0.05 below it; the screen's 32 runs, length normalization adding
    0.03; the batch-norm conflict as grpo; the leave-one-out of length normalization, no different;
    length normalization's leave-one-out and dynamic group size costing 1.02 and 1.8 times the FLOPs."""
    rng = np.random.default_rng(0)
    grpo = 0.35 + 0.01 * np.arange(9)
    x = factorial_matrix(screen.FACTORS) > 0
    screened = x.reset_index(drop=True).assign(
        label=[f"r{i:02d}" for i in range(32)], block=0, seed=range(32),
        score=0.35 + 0.03 * x["length_norm"].to_numpy() + 0.002 * rng.standard_normal(32), start=0.3,
        step_s=1.0, **FIGURES, **counts(1 + 0.8 * x["dynamic_group_size"].to_numpy()),
    )  # fmt: skip
    screened["greedy"] = screened["score"] - 0.1
    conflict, no_kl = "batch norm on group norm", grpo - 0.05 + 0.002 * rng.standard_normal(9)
    return {
        "schemes": pd.concat([runs("grpo", grpo), runs("grpo_no_kl", no_kl)]),
        "screen": screened,
        "conflicts": pd.concat([runs("grpo", grpo[:3]), runs(conflict, grpo[:3] + [0.001, -0.001, 0])]),
        "tricks": pd.concat(
            [runs("all", grpo[:3], 1.02), runs("-length_norm", grpo[:3] + [0.001, -0.001, 0])]
        ),
    }  # fmt: skip


def test_the_review_reads_a_verdict_table_of_the_studies_columns():
    table = verdicts.table(scored(), settings=verdicts.settings("full"))
    assert set(verdict_table.TABLE_COLUMNS) - {
        "CI",
        "MDE",
        "MDE / gain",
        "stability",
        "cost",
        "notes",
    } <= set(table.columns)  # the markdown's display columns aside, the rows carry the table's columns
    reviewed = tricks_review.review_table(table).set_index("trick")
    by_row = table.set_index(["row", "protocol"])
    kl = reviewed.loc["fixed KL penalty"]
    no_kl = by_row.loc[("grpo_no_kl", "sequential")]
    assert kl["effect"] == pytest.approx(-no_kl["effect"]) and no_kl["verdict"] == WORSE
    # the review reads the adjusted word: the 3-seed row's "worse" does not survive Holm over the table
    assert no_kl["adjusted verdict"] == UNDECIDED
    assert kl["verdict"] == UNDECIDED and kl["performance reading"] == tricks_review.NOT_DECIDED
    assert kl["ci_low"] == pytest.approx(-no_kl["adjusted ci_high"])
    length = reviewed.loc["length normalization"]
    assert by_row.loc[("length_norm", "factorial screen"), "verdict"] == BETTER
    assert length["measured by"].startswith("length_norm (leave-one-out")
    assert length["verdict"] == NO_DIFFERENCE and length["performance reading"] == tricks_review.DISAGREE
    assert length["cost x"] == pytest.approx(1.02) and length["cost reading"] == tricks_review.AGREE
    batch = reviewed.loc["global (batch) reward normalization"]
    assert batch["measured by"].startswith("batch norm on group norm (paired")
    assert batch["verdict"] == NO_DIFFERENCE and batch["performance reading"] == tricks_review.AGREE
    screened = reviewed.loc["adaptive KL (threshold)"]
    assert screened["measured by"].startswith("adaptive_kl (factorial screen, ")
    assert screened["verdict"] == NO_DIFFERENCE and screened["performance reading"] == tricks_review.DISAGREE
    dynamic = reviewed.loc["dynamic group size"]
    assert dynamic["cost x"] == pytest.approx(1.8) and dynamic["cost reading"] == tricks_review.AGREE
    group = reviewed.loc["group reward normalization"]
    assert group["measured by"].startswith("group_reward_norm (factorial screen")
    assert group["cost x"] == pytest.approx(1.0) and group["cost reading"] == tricks_review.AGREE
    assert all(r in tricks_review.READINGS for a in tricks_review.ASPECTS for r in reviewed[f"{a} reading"])
    assert (
        len(tricks_review.disagreements(reviewed.reset_index()))
        == (reviewed[[f"{a} reading" for a in tricks_review.ASPECTS]] == tricks_review.DISAGREE)
        .to_numpy()
        .sum()
    )
