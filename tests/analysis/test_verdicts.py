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


def test_the_screen_rows_read_the_main_effects_and_compare_runs_with_the_factor_on_and_off():
    runs = pd.DataFrame(
        {
            "label": ["r1", "r2", "r3", "r4"],
            "adv_clip": [True, True, False, False],
            "step_s": [2.0, 2.0, 1.0, 1.0],
            "activity:adv_clip": [0.1, 0.3, float("nan"), float("nan")],
            **{
                k: [2.0, 2.0, 1.0, 1.0] if k == "grad_spikes" else [1.0] * 4
                for k in verdicts.STABILITY_COLUMNS
            },
        }
    )
    effects = pd.DataFrame(
        [
            {
                "factor": "adv_clip",
                "effect": 0.02,
                "ci_low": 0.01,
                "ci_high": 0.03,
                "mde": 0.006,
                "seeds": 32,
                "margin": 0.0075,
                "verdict": "better",
            }
        ]  # fmt: skip
    )
    row = verdicts.factorial_rows(runs, effects, reference_gain=0.05).iloc[0]
    assert (row["protocol"], row["seeds"], row["verdict"]) == ("factorial screen", 32, "better")
    assert row["activity"] == pytest.approx(0.2) and row["cost x"] == pytest.approx(2.0)
    assert row["grad_spikes x"] == pytest.approx(2.0) and row["mde / gain"] == pytest.approx(0.12)


def test_the_table_of_the_figures_index_has_its_columns_and_four_verdict_words():
    runs = pd.concat(
        [
            scores("grpo", [0.50, 0.60, 0.55, 0.65]),
            scores("up", [0.60, 0.71, 0.64, 0.76], grad_spikes=3.0),
            scores("near", [0.50, 0.60, 0.55, 0.65]),
            scores("noisy", [0.40, 0.80, 0.45, 0.75]),
        ]
    )
    arms = [(a, "scheme", a, "grpo") for a in ("up", "near", "noisy")]
    table = verdicts.compare(runs, arms, protocol="paired")
    text = verdicts.table_markdown(table)
    header, rule, *rows = text.strip().split("\n")
    assert header == "| " + " | ".join(verdicts.TABLE_COLUMNS) + " |" and len(rows) == 3
    assert rows[0].startswith("| up | scheme | paired | +0.102 | [+0.087, +0.118] |")
    assert "grad_spikes x3.00" in rows[0]
    assert [r.rstrip(" |").rsplit("| ", 1)[1] for r in rows] == ["better", "undecided", "undecided"]
    with pytest.raises(ValueError, match="unknown protocol 'screen'"):
        verdicts.compare(runs, arms, protocol="screen")
