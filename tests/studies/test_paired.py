"""The paired studies' forest plot: one label per row, the seeds each protocol rests on, a colour
per decided verdict and the interval the sequential rows show."""

import pandas as pd
from matplotlib.colors import to_rgba

from grpo_lab.analysis import verdict_table
from grpo_lab.analysis.power import VERDICTS
from grpo_lab.comparisons import paired


def table(protocols: list[str], seeds: list[int]) -> pd.DataFrame:
    n = len(protocols)
    return pd.DataFrame({"row": [f"r{i}" for i in range(n)], "kind": "trick", "protocol": protocols,
                         "effect": 0.01, "ci_low": -0.01, "ci_high": 0.03, "mde": 0.02, "margin": 0.007,
                         "seeds": seeds, "verdict": "undecided"})  # fmt: skip


def test_rows_of_several_protocols_are_labelled_by_protocol_with_the_seeds_of_each():
    fig = paired.forest(table(["paired", "factorial screen", "leave-one-out"], [9, 32, 3]), "60 steps", "all")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()][::-1] == [
        "r0 (trick, paired)", "r1 (trick, factorial screen)", "r2 (trick, leave-one-out)"
    ]  # fmt: skip
    assert "paired 9, factorial screen 32, leave-one-out 3" in ax.get_title()


def test_rows_of_one_protocol_keep_the_paired_seed_range():
    fig = paired.forest(table(["paired", "paired"], [3, 9]), "60 steps", "schemes vs grpo")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["r1 (trick)", "r0 (trick)"]
    assert "3-9 paired seeds per comparison" in ax.get_title()


def test_every_decided_verdict_has_its_colour_and_sequential_rows_say_their_interval():
    decided = [v for v in VERDICTS if v not in ("undecided", "too few seeds")]
    colours = verdict_table.VERDICT_COLORS
    assert set(colours) == set(decided) and len(set(colours.values())) == len(decided)
    rows = table(["sequential", "factorial screen"], [6, 32]).assign(verdict=["worse, size unsure", "worse"])
    ax = paired.forest(rows, "60 steps", "all").axes[0]
    assert "sequential rows: the rule's adjusted interval" in ax.get_xlabel()
    colours = [to_rgba(line.get_color()) for line in ax.lines if line.get_marker() == "o"]
    assert to_rgba(verdict_table.VERDICT_COLORS["worse, size unsure"]) in colours
    assert "adjusted" not in paired.forest(table(["paired"], [9]), "60 steps", "all").axes[0].get_xlabel()
