"""The verdict table of notebook 12 from hand-made scores: the scheme rows are the scheme study's
sequential rule's own decisions, every row (the screen's included) has one margin from grpo's gain,
and the screen's rows carry the main effect on greedy accuracy."""

import numpy as np
import pandas as pd
import pytest

from grpo_lab.analysis import sequential, verdict_table
from grpo_lab.comparisons import scheme_arms, screen, sequential_seeds
from grpo_lab.experiments.designs import factorial_matrix
from grpo_lab.studies import ablations, verdicts

FIGURES = dict.fromkeys(verdict_table.STABILITY_COLUMNS, 1.0)
"""every stability figure of a hand-made run"""


def runs(label: str, score, greedy=None, flops: float = 1.0) -> pd.DataFrame:
    """One row per seed of hand-made run scores, each starting at 0.3, a step costing `flops` FLOPs."""
    score = np.asarray(score, dtype=float)
    greedy = score - 0.1 if greedy is None else np.asarray(greedy, dtype=float)
    return pd.DataFrame(
        {"label": label, "seed": range(len(score)), "score": score, "start": 0.3, "greedy": greedy,
         "step_s": 1.0, **FIGURES, "cost:forward": 3.0, "cost:backward": 2.0, "cost:flops": flops,
         "cost:sampled": 100.0, "cost:trained": 100.0}
    )  # fmt: skip


def screened() -> pd.DataFrame:
    """The screen's 32 runs (one block, a seed each): adv_clip adds 0.02 to the score and takes 0.03
    from greedy accuracy."""
    x = factorial_matrix(screen.FACTORS) > 0
    rng = np.random.default_rng(0)
    on = x["adv_clip"].to_numpy()
    frame = x.reset_index(drop=True).assign(
        label=[f"r{i:02d}" for i in range(32)], block=0, seed=range(32),
        score=0.35 + 0.02 * on + 0.002 * rng.standard_normal(32), start=0.3,
        greedy=0.5 - 0.03 * on + 0.002 * rng.standard_normal(32), step_s=1.0, **FIGURES,
    )  # fmt: skip
    return frame


def scored() -> dict[str, pd.DataFrame]:
    grpo = 0.35 + 0.01 * np.arange(9)
    conflict = next(iter(ablations.CONFLICTS))
    return {
        "schemes": pd.concat(
            [
                runs("grpo", grpo),
                runs("scheme_a", grpo[:6] - 0.05 + [0, 0.004, -0.003, 0.002, 0, -0.002], flops=1.1),
            ]
        ),
        "screen": screened(),
        "conflicts": pd.concat([runs("grpo", grpo[:3]), runs(conflict, grpo[:3] - [0.1, 0.12, 0.09])]),
        "tricks": pd.DataFrame(columns=["label"]),
        "quiet": pd.DataFrame({"label": ["grpo", "scheme_a"], "multiple": [1.0, 1.3]}),
    }


def test_the_scheme_rows_are_the_sequential_rules_decisions_at_their_last_look():
    data, settings = scored(), verdicts.settings("full")
    table = verdicts.table(data, settings=settings).set_index("row")
    grpo = data["schemes"][data["schemes"]["label"] == "grpo"]
    margin = verdict_table.MARGIN_OF_GAIN * verdict_table.gain(grpo)
    plan = sequential.Plan(
        margin, min_seeds=3, block=sequential_seeds.LOOK_BLOCK, max_seeds=len(settings.seeds)
    )
    d = data["schemes"].query("label == 'scheme_a'")["score"].to_numpy() - grpo["score"].to_numpy()[:6]
    look = sequential.decide(plan, d, earlier=[3], final=False)
    row = table.loc["scheme_a"]
    assert (look.seeds, look.decision) == (6, "worse")  # decided at the second look
    assert (row["protocol"], row["seeds"], row["verdict"]) == ("sequential", 6, "worse")
    assert (row["ci_low"], row["ci_high"], row["confidence"]) == pytest.approx(
        (look.low, look.high, 1 - look.level)
    )
    assert row["cost x"] == pytest.approx(1.1) and row["quiet time x"] == pytest.approx(1.3)
    assert row["cost counts"] == "FLOPs x1.10 (fwd 3/3, bwd 2/2, sampled x1.00, trained x1.00)"
    # one margin everywhere: the screen's rows and the conflicts' are judged against grpo's gain too
    np.testing.assert_allclose(table["margin"], margin)
    np.testing.assert_allclose(table["gain"], verdict_table.gain(grpo))
    rule = sequential_seeds.verdict_rule(settings, margin)
    assert rule is not None and rule.plan == plan and rule.looks == sequential_seeds.looks(settings)


def test_the_screen_rows_show_the_main_effect_on_greedy_accuracy():
    data = scored()
    table = verdicts.table(data, settings=verdicts.settings("full")).set_index("row")
    by = data["screen"].groupby("adv_clip")
    adv = table.loc["adv_clip"]
    assert adv["protocol"] == "factorial screen" and adv["verdict"] == "better"
    assert adv["effect"] == pytest.approx(by["score"].mean()[True] - by["score"].mean()[False])
    assert adv["greedy effect"] == pytest.approx(by["greedy"].mean()[True] - by["greedy"].mean()[False])
    assert adv["greedy ci_high"] < 0 and adv["direction differs"]
    assert not table.loc["length_norm", "direction differs"]


def test_the_table_needs_the_settings_that_fix_the_rule_and_a_small_profile_never_looks():
    with pytest.raises(ValueError, match="pass this study's settings"):
        verdicts.table(scored())
    smoke = verdicts.settings("smoke")
    assert sequential_seeds.verdict_rule(smoke, 0.01) is None  # two seeds: no look
    data = scored()
    data["schemes"] = data["schemes"][data["schemes"]["seed"] < 2]
    rows = verdicts.table(data, settings=smoke).set_index("row")
    assert rows.loc["scheme_a", "protocol"] == "paired" and rows.loc["scheme_a", "verdict"] == "too few seeds"


def test_the_table_is_one_family_under_holm_and_its_markdown_names_it(tmp_path, monkeypatch):
    """Every row with an interval is in the family; each has its raw and adjusted word, the adjusted
    interval at least as wide, and the markdown's caption names the family, its size and its control."""
    monkeypatch.setenv("GRPO_LAB_FIGURES", str(tmp_path))
    table = verdicts.table(scored(), settings=verdicts.settings("full"))
    assert verdicts.FAMILY.control == "holm"
    assert (table["adjusted confidence"] >= table["confidence"]).all()
    assert (table["adjusted ci_low"] <= table["ci_low"] + 1e-12).all()
    members = int(np.isfinite(table["p"]).sum())
    assert members == len(table) - (table["verdict"] == "too few seeds").sum()
    assert table.set_index("row").loc["adv_clip", "adjusted verdict"] == "better"  # a 10-se effect
    path = verdicts.save_markdown(table, "12_verdicts_test")
    text = path.read_text()
    assert path.parent == tmp_path
    assert text.startswith(f"family: every row of the verdict table ({members} comparisons); Holm")
    assert text.splitlines()[2] == scheme_arms.SHARED_RATE and "| adjusted verdict |" in text.splitlines()[4]
