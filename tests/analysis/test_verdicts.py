"""The verdict table from hand-made scores: paired effects, MDE, cost, activity, verdicts."""

import pandas as pd
import pytest

from grpo_lab.analysis import verdicts


def scores(label, score, step_s=1.0, start=0.3, **extra):
    """One row per seed of hand-made run scores; every run starts at `start` (before any update)."""
    n = len(score)
    base = {"label": label, "seed": range(n), "score": score, "start": start, "step_s": step_s}
    figures = {k: 1.0 for k in verdicts.STABILITY_COLUMNS}
    return pd.DataFrame({**base, **figures, **extra})


def test_a_scheme_row_is_paired_on_seeds():
    table = verdicts.compare(
        pd.concat(
            [
                scores("grpo", [0.50, 0.60, 0.55, 0.65]),
                scores("fast", [0.60, 0.71, 0.64, 0.76], step_s=2.0, **{"activity:fast": 0.1}),
            ]
        ),
        [("fast", "scheme", "fast", "grpo")],
    )
    row = table.iloc[0]
    assert row["effect"] == pytest.approx(0.1025) and row["ci_low"] > 0 and row["seeds"] == 4
    assert row["verdict"] == "better" and row["cost x"] == pytest.approx(2.0)
    assert row["recommendation"] == "better, at a cost" and row["mde"] > 0


def test_an_inert_row_cannot_be_judged():
    table = verdicts.compare(
        pd.concat(
            [scores("grpo", [0.5, 0.6, 0.55]), scores("same", [0.5, 0.6, 0.55], **{"activity:same": 0.0})]
        ),
        [("same", "scheme", "same", "grpo")],
    )
    assert table.iloc[0]["recommendation"] == "inert here: cannot be judged"


def test_a_trick_row_compares_all_on_with_that_trick_left_out():
    runs = pd.concat(
        [
            scores("all", [0.6, 0.7, 0.65], **{"activity:adv_clip": 0.2}),
            scores("-adv_clip", [0.6, 0.7, 0.66]),
        ]
    )
    row = verdicts.compare(runs, [("adv_clip", "trick", "all", "-adv_clip")]).iloc[0]
    assert row["activity"] == pytest.approx(0.2) and row["effect"] == pytest.approx(-0.01 / 3)
    assert row["verdict"] == "no difference > margin" and row["recommendation"] == "no gain, no cost"


def test_the_margin_and_the_mde_are_read_against_what_the_reference_learns():
    """The control learns 0.3 over its runs (0.6 from 0.3): the margin is MARGIN_OF_GAIN of it, and
    `mde / gain` the row's MDE over it; a given reference gain replaces the control's own."""
    runs = pd.concat([scores("grpo", [0.58, 0.61, 0.60, 0.61]), scores("x", [0.59, 0.60, 0.62, 0.60])])
    row = verdicts.compare(runs, [("x", "scheme", "x", "grpo")]).iloc[0]
    assert row["gain"] == pytest.approx(0.3) and row["margin"] == pytest.approx(verdicts.MARGIN_OF_GAIN * 0.3)
    assert row["mde / gain"] == pytest.approx(row["mde"] / 0.3)
    small = verdicts.compare(runs, [("x", "scheme", "x", "grpo")], reference_gain=0.05).iloc[0]
    assert small["margin"] == pytest.approx(verdicts.MARGIN_OF_GAIN * 0.05)
    assert row["verdict"] == "no difference > margin" and small["verdict"] == "undecided"


def test_missing_runs_are_an_error_and_markdown_has_a_row_each():
    with pytest.raises(ValueError, match="no runs for"):
        verdicts.compare(scores("grpo", [0.5, 0.6]), [("x", "scheme", "x", "grpo")])
    table = verdicts.compare(
        pd.concat([scores("grpo", [0.5, 0.6]), scores("x", [0.4, 0.45], **{"activity:x": 1.0})]),
        [("x", "scheme", "x", "grpo")],
    )
    text = verdicts.markdown(table)
    assert text.count("\n") == 3 and "| x | scheme | 2 |" in text
    assert table.iloc[0]["verdict"] == "too few seeds"
