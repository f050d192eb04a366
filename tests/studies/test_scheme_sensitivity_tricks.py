"""The screen's tricks confirmed at grpo's tuned rate: which tricks are picked (a direction after Holm
over the screen's factors, the largest first, at most CONFIRM), nothing before the scan is stored, and
the table's rows one family beside the screen's words."""

import numpy as np
import pandas as pd
import pytest

from grpo_lab.analysis import verdict_table
from grpo_lab.presets import TRICKS
from grpo_lab.studies import scheme_sensitivity


def effects(rows: list[tuple[str, float, float]]) -> pd.DataFrame:
    """Screen main effects (factor, effect, half-width) on 24 degrees of freedom, margin 0.007."""
    return pd.DataFrame(
        [{"factor": f, "effect": e, "ci_low": e - h, "ci_high": e + h, "df": 24, "margin": 0.007,
          "verdict": "undecided"} for f, e, h in rows]
    )  # fmt: skip


def test_the_tricks_picked_show_a_direction_after_holm_largest_first():
    names = list(TRICKS)
    found = effects(
        [
            (names[0], 0.015, 0.003),  # far off 0: kept under Holm
            (names[1], -0.018, 0.003),
            (names[2], 0.0035, 0.0033),  # off 0 at 95% (p about 0.04) but not after Holm over 4
            (names[3], 0.0, 0.003),
        ]
    )
    assert scheme_sensitivity.screen_tricks(found) == [names[1], names[0]]
    assert scheme_sensitivity.screen_tricks(None) == []
    many = effects([(n, 0.02 + 0.001 * i, 0.003) for i, n in enumerate(names[:8])])
    assert scheme_sensitivity.screen_tricks(many) == names[:8][::-1][: scheme_sensitivity.TRICKS_CONFIRMED]


def test_nothing_is_designed_before_the_scan_is_stored(tmp_path):
    settings = scheme_sensitivity.settings("full")
    assert scheme_sensitivity.trick_design(settings, tmp_path) is None
    assert (
        scheme_sensitivity.trick_seeds(settings)
        == scheme_sensitivity.fresh_seeds(settings)[: scheme_sensitivity.TRICK_SEEDS]
    )


def test_the_table_is_one_family_beside_the_screens_words(monkeypatch):
    grpo = np.array([0.50, 0.60, 0.55])
    figures = dict.fromkeys(verdict_table.STABILITY_COLUMNS, 1.0)
    scored = pd.concat(
        [
            pd.DataFrame(
                {"label": label, "seed": [3, 4, 5], "score": score, "start": 0.3, "step_s": 1.0, **figures}
            )
            for label, score in (("grpo", grpo), ("dynamic_sampling", grpo + [0.02, 0.021, 0.019]))
        ]
    )
    monkeypatch.setattr(scheme_sensitivity.paired, "scores", lambda result, measured: scored)

    class Result:
        runs = pd.DataFrame({"label": ["grpo", "dynamic_sampling"]})

    screened = effects([("dynamic_sampling", 0.015, 0.003)]).assign(verdict="better")
    rows = scheme_sensitivity.trick_table(Result(), 0.007, screened)  # type: ignore[arg-type]
    row = rows.iloc[0]
    assert row["row"] == "dynamic_sampling" and row["verdict"] == "better"
    assert row["screen verdict"] == "better" and row["screen effect"] == pytest.approx(0.015)
    text = scheme_sensitivity.trick_markdown(rows)
    assert "family: the screen's tricks confirmed at grpo's tuned rate (1 comparisons); Holm" in text
    assert "| dynamic_sampling | better: +0.020" in text and "better: +0.015 [+0.012, +0.018]" in text
