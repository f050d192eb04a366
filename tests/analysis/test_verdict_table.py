"""The verdict table from hand-made scores: paired effects, MDE, cost, activity, verdicts against
the margin, the sequential rule's own rows, greedy accuracy beside the headline and the notes."""

import numpy as np
import pandas as pd
import pytest

from grpo_lab.analysis import sequential, verdict_table


def scores(label, score, flops=1.0, start=0.3, **extra):
    """One row per seed of hand-made run scores; every run starts at `start` (before any update), and a
    step costs `flops` FLOPs by count (three forward and two backward passes over 100 tokens)."""
    n = len(score)
    base = {"label": label, "seed": range(n), "score": score, "start": start, "step_s": 1.0, **counts(flops)}
    figures = {k: 1.0 for k in verdict_table.STABILITY_COLUMNS}
    return pd.DataFrame({**base, **figures, **extra})


def counts(flops) -> dict:
    """The `COUNT_COLUMNS` of runs whose step costs `flops` FLOPs."""
    return dict(zip(verdict_table.COUNT_COLUMNS, (3.0, 2.0, flops, 100.0, 100.0)))


def cells(text: str) -> list[dict[str, str]]:
    """The body rows of a markdown table written by `table_markdown`, each as column -> cell."""
    rows = text.strip().split("\n")[2:]
    return [
        dict(zip(verdict_table.TABLE_COLUMNS, (c.strip() for c in r.strip().strip("|").split("|"))))
        for r in rows
    ]


def test_a_scheme_row_is_paired_on_seeds():
    table = verdict_table.compare(
        pd.concat(
            [
                scores("grpo", [0.50, 0.60, 0.55, 0.65]),
                scores("fast", [0.60, 0.71, 0.64, 0.76], flops=2.0, **{"activity:fast": 0.1}),
            ]
        ),
        [("fast", "scheme", "fast", "grpo")],
    )
    row = table.iloc[0]
    assert row["effect"] == pytest.approx(0.1025) and row["ci_low"] > 0 and row["seeds"] == 4
    assert row["verdict"] == "better" and row["cost x"] == pytest.approx(2.0)
    assert row["recommendation"] == "better, at a cost" and row["mde"] > 0


def test_an_inert_row_cannot_be_judged():
    table = verdict_table.compare(
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
    row = verdict_table.compare(runs, [("adv_clip", "trick", "all", "-adv_clip")]).iloc[0]
    assert row["activity"] == pytest.approx(0.2) and row["effect"] == pytest.approx(-0.01 / 3)
    assert row["verdict"] == "no difference" and row["recommendation"] == "no gain, no cost"


def test_the_margin_and_the_mde_are_read_against_what_the_reference_learns():
    """The control learns 0.3 over its runs (0.6 from 0.3): the margin is MARGIN_OF_GAIN of it, and
    `mde / gain` the row's MDE over it; a given reference gain replaces the control's own."""
    runs = pd.concat([scores("grpo", [0.58, 0.61, 0.60, 0.61]), scores("x", [0.59, 0.60, 0.62, 0.60])])
    row = verdict_table.compare(runs, [("x", "scheme", "x", "grpo")]).iloc[0]
    assert row["gain"] == pytest.approx(0.3) and row["margin"] == pytest.approx(
        verdict_table.MARGIN_OF_GAIN * 0.3
    )
    assert row["mde / gain"] == pytest.approx(row["mde"] / 0.3)
    small = verdict_table.compare(runs, [("x", "scheme", "x", "grpo")], reference_gain=0.05).iloc[0]
    assert small["margin"] == pytest.approx(verdict_table.MARGIN_OF_GAIN * 0.05)
    assert row["verdict"] == "no difference" and small["verdict"] == "undecided"


def test_missing_runs_are_an_error_and_markdown_has_a_row_each():
    with pytest.raises(ValueError, match="no runs for"):
        verdict_table.compare(scores("grpo", [0.5, 0.6]), [("x", "scheme", "x", "grpo")])
    table = verdict_table.compare(
        pd.concat([scores("grpo", [0.5, 0.6]), scores("x", [0.4, 0.45], **{"activity:x": 1.0})]),
        [("x", "scheme", "x", "grpo")],
    )
    text = verdict_table.markdown(table)
    assert text.count("\n") == 3 and "| x | scheme | 2 |" in text
    assert table.iloc[0]["verdict"] == "too few seeds"


def test_the_screen_rows_read_the_main_effects_and_compare_runs_with_the_factor_on_and_off():
    runs = pd.DataFrame(
        {
            "label": ["r1", "r2", "r3", "r4"],
            "adv_clip": [True, True, False, False],
            **counts([2.0, 2.0, 1.0, 1.0]),
            "activity:adv_clip": [0.1, 0.3, float("nan"), float("nan")],
            **{
                k: [2.0, 2.0, 1.0, 1.0] if k == "grad_spikes" else [1.0] * 4
                for k in verdict_table.STABILITY_COLUMNS
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
                "df": 24,
                "seeds": 32,
                "margin": 0.0075,
                "verdict": "better",
            }
        ]  # fmt: skip
    )
    row = verdict_table.factorial_rows(runs, effects, reference_gain=0.05).iloc[0]
    assert (row["protocol"], row["seeds"], row["verdict"]) == ("factorial screen", 32, "better")
    assert row["activity"] == pytest.approx(0.2) and row["cost x"] == pytest.approx(2.0)
    assert row["grad_spikes x"] == pytest.approx(2.0) and row["mde / gain"] == pytest.approx(0.12)


def test_the_table_of_the_figures_index_has_its_columns_and_four_verdict_words():
    runs = pd.concat(
        [
            scores("grpo", [0.50, 0.60, 0.55, 0.65]),
            scores("up", [0.60, 0.71, 0.64, 0.76], grad_spikes=3.0, reward_variance=0.8, entropy_decay=0.6),
            scores("near", [0.50, 0.60, 0.55, 0.65]),
            scores("noisy", [0.40, 0.80, 0.45, 0.75]),
        ]
    )
    arms = [(a, "scheme", a, "grpo") for a in ("up", "near", "noisy")]
    table = verdict_table.compare(runs, arms, protocol="paired")
    text = verdict_table.table_markdown(table)
    header, rule, *rows = text.strip().split("\n")
    assert header == "| " + " | ".join(verdict_table.TABLE_COLUMNS) + " |" and len(rows) == 3
    assert rows[0].startswith("| up | scheme | paired | +0.102 | [+0.087, +0.118] |")
    # the same figures on every row, never the one that moved most (the gradient-spike share here)
    assert [r["stability"] for r in cells(text)] == [
        "entropy -60% (ref -100%), reward variance x0.80",
        *["entropy -100% (ref -100%), reward variance x1.00"] * 2,
    ]
    assert [r["verdict"] for r in cells(text)] == ["better", "undecided", "undecided"]
    assert [r["notes"] for r in cells(text)] == ["", "", ""]
    with pytest.raises(ValueError, match="unknown protocol 'screen'"):
        verdict_table.compare(runs, arms, protocol="screen")


def test_the_word_comes_from_the_whole_interval():
    """gspo against grpo: -0.004 with an interval that excludes 0 and lies inside a margin of 0.007 is
    'no difference'; cispo's -0.02 [-0.021, -0.019] lies beyond it: worse; dapo's -0.007, whose
    interval excludes 0 and crosses the margin, is worse with its size unsure."""
    grpo = [0.50, 0.60, 0.55, 0.65, 0.58]
    runs = pd.concat(
        [
            scores("grpo", grpo),
            scores("gspo", np.subtract(grpo, [0.004, 0.0045, 0.0035, 0.004, 0.0040])),
            scores("cispo", np.subtract(grpo, [0.02, 0.021, 0.019, 0.02, 0.02])),
            scores("dapo", np.subtract(grpo, [0.004, 0.010, 0.005, 0.009, 0.007])),
        ]
    )
    arms = [(a, "scheme", a, "grpo") for a in ("gspo", "cispo", "dapo")]
    table = verdict_table.compare(runs, arms, margin=0.007).set_index("row")
    gspo = table.loc["gspo"]
    assert -0.007 < gspo["ci_low"] < gspo["ci_high"] < 0
    assert gspo["verdict"] == "no difference" and gspo["recommendation"] == "no gain, no cost"
    assert table.loc["cispo", "verdict"] == "worse" and table.loc["cispo", "recommendation"] == "avoid"
    dapo = table.loc["dapo"]
    assert dapo["ci_low"] < -0.007 < dapo["ci_high"] < 0 and dapo["verdict"] == "worse, size unsure"
    words = [r["verdict"] for r in cells(verdict_table.table_markdown(table.reset_index()))]
    assert words == ["no difference", "worse", "worse, size unsure"]


RULE = verdict_table.Rule(sequential.Plan(0.01, min_seeds=3, block=3, max_seeds=9), (3, 6, 9))
"""a scheme study's rule: looks at 3, 6 and 9 seeds, a margin of 0.01"""


def sequential_runs() -> pd.DataFrame:
    """grpo over 9 seeds; 'clear' stopped at 6 seeds far below it, 'open' has had only its first look,
    'small' has 9 seeds stored 0.004 below it, although its rule stopped at 6."""
    grpo = 0.5 + 0.01 * np.arange(9)
    rng = np.random.default_rng(0)
    return pd.concat(
        [
            scores("grpo", grpo),
            scores("clear", grpo[:6] - 0.05 + 0.005 * rng.standard_normal(6)),
            scores("open", grpo[:3] - 0.02 + 0.01 * rng.standard_normal(3)),
            scores("small", grpo - 0.004 + 0.0005 * rng.standard_normal(9)),
        ]
    )


def test_sequential_rows_are_the_rules_own_decisions_on_its_adjusted_interval():
    runs = sequential_runs()
    arms = [(a, "scheme", a, "grpo") for a in ("clear", "open", "small")]
    table = verdict_table.compare(runs, arms, reference_gain=0.05, protocol="sequential", rule=RULE)
    table = table.set_index("row")
    plain = verdict_table.compare(runs, arms, margin=0.01).set_index("row")
    grpo = runs[runs["label"] == "grpo"].set_index("seed")["score"]
    clear = runs[runs["label"] == "clear"].set_index("seed")["score"]
    look = sequential.decide(RULE.plan, (clear - grpo.loc[clear.index]).to_numpy(), earlier=[3], final=False)
    row = table.loc["clear"]
    assert (row["protocol"], row["seeds"], row["verdict"]) == ("sequential", 6, "worse")
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((look.low, look.high))
    assert row["confidence"] == pytest.approx(1 - look.level) and row["confidence"] > 0.95
    assert row["ci_low"] < plain.loc["clear", "ci_low"] and row["ci_high"] > plain.loc["clear", "ci_high"]
    assert table.loc["open", "verdict"] == "undecided"  # its look would continue
    small = table.loc["small"]  # the rule stopped at its second look, inside the margin
    assert (small["verdict"], small["seeds"]) == ("no difference", 6)
    assert -0.01 < small["ci_low"] < small["ci_high"] < 0
    assert (table["margin"] == 0.01).all() and (table["gain"] == 0.05).all()
    shown = cells(verdict_table.table_markdown(table.reset_index()))[0]
    assert shown["protocol"] == "sequential" and shown["verdict"] == "worse"
    assert shown["CI"].endswith(f"] at {100 * (1 - look.level):.1f}%")


def test_the_sequential_protocol_needs_its_rule_and_its_margin():
    runs = sequential_runs()
    arms = [("clear", "scheme", "clear", "grpo")]
    with pytest.raises(ValueError, match="needs the study's rule"):
        verdict_table.compare(runs, arms, protocol="sequential")
    with pytest.raises(ValueError, match="needs the study's rule"):
        verdict_table.compare(runs, arms, rule=RULE)
    with pytest.raises(ValueError, match="margin is its rule's"):
        verdict_table.compare(runs, arms, margin=0.02, protocol="sequential", rule=RULE)
    with pytest.raises(ValueError, match="must be its plan's cap"):
        verdict_table.Rule(RULE.plan, (3, 6))
    with pytest.raises(ValueError, match="increasing seed counts"):
        verdict_table.Rule(RULE.plan, (6, 3, 9))


def test_greedy_accuracy_beside_the_headline_and_when_their_directions_differ():
    grpo = [0.50, 0.60, 0.55, 0.65]
    greedy = [0.40, 0.45, 0.42, 0.50]
    runs = pd.concat(
        [
            scores("grpo", grpo, greedy=greedy),
            scores("split", np.add(grpo, 0.10), greedy=np.subtract(greedy, [0.05, 0.06, 0.04, 0.05])),
            scores("along", np.add(grpo, 0.10), greedy=np.add(greedy, 0.02)),
            scores(
                "noisy",
                np.add(grpo, [0.02, -0.03, 0.03, -0.01]),
                greedy=np.add(greedy, [-0.02, 0.03, -0.03, 0]),
            ),
        ]
    )
    arms = [(a, "scheme", a, "grpo") for a in ("split", "along", "noisy")]
    table = verdict_table.compare(runs, arms, margin=0.01).set_index("row")
    assert table.loc["split", "greedy effect"] == pytest.approx(-0.05)
    assert table.loc["split", "greedy ci_high"] < 0 < table.loc["split", "ci_low"]
    assert table.loc["along", "greedy effect"] == pytest.approx(0.02)
    # opposite signs with an interval off 0; same signs; opposite signs with both intervals holding 0
    assert table["direction differs"].tolist() == [True, False, False]
    assert np.sign(table.loc["noisy", "effect"]) != np.sign(table.loc["noisy", "greedy effect"])
    split = cells(verdict_table.table_markdown(table.reset_index()))[0]
    assert split["greedy effect"].startswith("-0.050 [-0.")
    assert split["notes"] == "direction differs, greedy beyond the margin, other way"  # -0.05 < -0.01
    assert "greedy effect (95% CI)" in verdict_table.markdown(table.reset_index())
    without = verdict_table.compare(scores("grpo", grpo).pipe(lambda g: pd.concat([g, scores("x", grpo)])),
                               [("x", "scheme", "x", "grpo")])  # fmt: skip
    assert np.isnan(without.iloc[0]["greedy effect"]) and not without.iloc[0]["direction differs"]


def test_entropy_collapse_is_a_decay_far_beyond_the_references():
    assert verdict_table.entropy_collapse(pd.Series([0.6, 0.62]), pd.Series([0.3, 0.31]))
    assert not verdict_table.entropy_collapse(pd.Series([0.4, 0.42]), pd.Series([0.3, 0.31]))  # x1.35
    assert not verdict_table.entropy_collapse(pd.Series([-0.3]), pd.Series([-0.1]))  # the reference's rose
    assert not verdict_table.entropy_collapse(
        pd.Series([0.14]), pd.Series([0.05])
    )  # x2.8, but 14% is no collapse
    grpo = [0.50, 0.60, 0.55, 0.65]
    runs = pd.concat(
        [
            scores("grpo", grpo, entropy_decay=0.2),
            scores("collapse", grpo, entropy_decay=0.2 * (verdict_table.ENTROPY_COLLAPSE_X + 0.1)),
            scores("steady", grpo, entropy_decay=0.2 * (verdict_table.ENTROPY_COLLAPSE_X - 0.1)),
        ]
    )
    arms = [(a, "scheme", a, "grpo") for a in ("collapse", "steady")]
    table = verdict_table.compare(runs, arms, margin=0.01)
    assert table["entropy collapse"].tolist() == [True, False]
    collapse = table.iloc[0]
    assert (collapse["entropy change"], collapse["reference entropy change"]) == pytest.approx((-0.32, -0.2))
    assert collapse["entropy retained x"] == pytest.approx(0.68 / 0.8)  # shares kept, not decays
    assert [r["notes"] for r in cells(verdict_table.table_markdown(table))] == ["entropy collapse", ""]


def test_the_screen_rows_carry_the_main_effect_on_greedy_accuracy():
    runs = pd.DataFrame(
        {"label": ["r1", "r2", "r3", "r4"], "adv_clip": [True, True, False, False], "step_s": 1.0,
         **{k: [0.5, 0.5, 0.2, 0.2] if k == "entropy_decay" else 1.0
            for k in verdict_table.STABILITY_COLUMNS}}
    )  # fmt: skip
    effects = pd.DataFrame([{"factor": "adv_clip", "effect": 0.02, "ci_low": 0.01, "ci_high": 0.03,
                             "mde": 0.006, "df": 24, "seeds": 32, "margin": 0.0075,
                             "verdict": "better"}])  # fmt: skip
    greedy = effects.assign(effect=-0.03, ci_low=-0.05, ci_high=-0.01, verdict="worse")
    row = verdict_table.factorial_rows(runs, effects, reference_gain=0.05, greedy=greedy).iloc[0]
    assert (row["greedy effect"], row["greedy ci_low"], row["greedy ci_high"]) == (-0.03, -0.05, -0.01)
    assert row["direction differs"] and row["entropy collapse"]  # entropy decay 0.5 against 0.2
    alone = verdict_table.factorial_rows(runs, effects, reference_gain=0.05).iloc[0]
    assert np.isnan(alone["greedy effect"]) and not alone["direction differs"]


def test_pass_at_k_is_shown_where_both_arms_logged_it_on_enough_seeds():
    runs = pd.concat(
        [
            scores("grpo", [0.5, 0.6, 0.55], **{"pass@4": [0.7, 0.8, 0.75]}),
            scores("sharp", [0.6, 0.7, 0.65], **{"pass@4": [0.6, 0.7, 0.65]}),
            scores("old", [0.6, 0.7, 0.65], **{"pass@4": [np.nan, 0.7, 0.65]}),
        ]
    )
    table = verdict_table.compare(
        runs, [("sharp", "scheme", "sharp", "grpo"), ("old", "scheme", "old", "grpo")]
    )
    assert table.iloc[0]["pass@4 effect"] == pytest.approx(-0.1) and table.iloc[0]["effect"] > 0
    assert np.isnan(table.iloc[1]["pass@4 effect"])  # one seed did not log it: 2 < MIN_SEEDS
    shown = cells(verdict_table.table_markdown(table))
    assert [r["pass@4 effect"] for r in shown] == ["-0.100", "n/a"]


def test_a_greedy_effect_far_beyond_the_headline_and_an_arm_below_its_start_are_marked():
    """dapo's row as issue 51 found it: a headline effect of -0.02 beside a greedy one of -0.14 (seven
    times it), the arm's greedy accuracy ending below its starting model's; grpo's own greedy accuracy
    rises, and a greedy effect on the headline's scale is no note."""
    grpo = [0.50, 0.60, 0.55, 0.65, 0.58]
    runs = pd.concat(
        [
            scores("grpo", grpo, greedy=[0.53, 0.52, 0.54, 0.53, 0.52], **{"greedy start": 0.495}),
            scores(
                "dapo",
                np.subtract(grpo, [0.02, 0.021, 0.019, 0.02, 0.022]),
                greedy=[0.39, 0.38, 0.40, 0.39, 0.39],
                **{"greedy start": 0.495},
            ),
            scores(
                "gspo",
                np.subtract(grpo, [0.02, 0.021, 0.019, 0.02, 0.022]),
                greedy=[0.51, 0.50, 0.52, 0.51, 0.50],
                **{"greedy start": 0.495},
            ),
        ]
    )
    arms = [(a, "scheme", a, "grpo") for a in ("dapo", "gspo")]
    table = verdict_table.compare(runs, arms, margin=0.007).set_index("row")
    dapo, gspo = table.loc["dapo"], table.loc["gspo"]
    assert dapo["greedy note"] == "greedy x7 the headline" and dapo["ends below start"]
    assert dapo["greedy from start ci_high"] < 0
    assert gspo["greedy note"] == "" and not gspo["ends below start"]
    shown = cells(verdict_table.table_markdown(table.reset_index()))
    assert shown[0]["notes"] == "greedy x7 the headline, greedy ends below the start (-0.105)"
    assert shown[1]["notes"] == ""
    assert verdict_table.greedy_note((0.02, 0.01, 0.03), (-0.03, -0.05, -0.02), 0.01) == (
        "greedy beyond the margin, other way"
    )
    assert verdict_table.greedy_note((0.02, 0.01, 0.03), (0.07, -0.01, 0.15), 0.01) == ""  # holds 0


def test_a_three_seed_row_reads_its_mde_from_the_spread_pooled_over_the_table():
    """Issue 51's scheme_a long-sample row: three differences of -0.0316, -0.0323, -0.0307 give an sd of
    0.0008 and an MDE of 0.0025 on 2 degrees of freedom; pooled with a noisier 3-seed row and a 6-seed
    row, the 3-seed rows share one spread (said 'pooled'), the 6-seed row keeps its own."""
    grpo = [0.50, 0.60, 0.55, 0.65, 0.58, 0.62]
    runs = pd.concat(
        [
            scores("grpo", grpo),
            scores("tight", np.add(grpo[:3], [-0.0316, -0.0323, -0.0307])),
            scores("loose", np.add(grpo[:3], [0.02, -0.03, 0.01])),
            scores("six", np.add(grpo, [0.01, 0.0, 0.02, -0.01, 0.0, 0.01])),
        ]
    )
    arms = [(a, "scheme", a, "grpo") for a in ("tight", "loose", "six")]
    own = verdict_table.compare(runs, arms, margin=0.01).set_index("row")
    pooled = verdict_table.pooled_mdes(own.reset_index()).set_index("row")
    assert own.loc["tight", "mde"] == pytest.approx(0.0025, abs=2e-4)
    assert pooled.loc["tight", "mde from"] == pooled.loc["loose", "mde from"] == "pooled"
    assert pooled.loc["tight", "mde"] == pytest.approx(pooled.loc["loose", "mde"])
    assert pooled.loc["tight", "mde"] > 5 * own.loc["tight", "mde"]
    assert pooled.loc["six", "mde from"] == "own" and pooled.loc["six", "mde"] == pytest.approx(
        own.loc["six", "mde"]
    )
    shown = {r["row"]: r for r in cells(verdict_table.table_markdown(pooled.reset_index()))}
    assert shown["tight"]["MDE"].endswith("(pooled)") and not shown["six"]["MDE"].endswith("(pooled)")
