"""The powered fault study: its design (every scheme clean and under each fault, the clean runs
shared with the scheme study) and its changes, relative robustness, crashes, figure and tables on
hand-made scores."""

import pandas as pd
import pytest

from grpo_lab.analysis import power, verdict_table
from grpo_lab.analysis.robustness import CLEAN_CONDITION
from grpo_lab.experiments import SweepResult
from grpo_lab.studies import fault_injection, fault_robustness, schemes

FULL = fault_robustness.settings("full")


def test_every_scheme_clean_and_under_each_fault_one_at_a_time():
    points = fault_robustness.design(FULL)
    arms = {p.label: p.config for p in schemes.design(schemes.settings("full"))}
    assert {p.columns["scheme"] for p in points} == set(schemes.SCHEMES)
    assert len(points) == len(arms) * (1 + sum(len(levels) for levels in fault_injection.FAULTS.values()))
    for p in points:
        own = arms[p.columns["scheme"]]
        changed = {k for k, v in p.config.to_dict().items() if v != own.to_dict()[k]}
        if p.columns["condition"] == CLEAN_CONDITION:
            assert p.config.key() == own.key()  # the scheme study's own run
        else:
            assert changed == {p.columns["fault"]}, p.label


def test_the_smoke_profile_keeps_one_fault():
    points = fault_robustness.design(fault_robustness.settings("smoke"))
    assert {p.columns["condition"] for p in points} == {CLEAN_CONDITION, "reward_sigma=1.0"}


def scored(levels: dict[tuple[str, str], float], seeds: int = 4) -> pd.DataFrame:
    """Hand-made run scores: (scheme, condition) -> mean score; seed s adds 0.01 s, and 0.004 on odd
    seeds under a fault (so paired changes vary); every run starts at 0.1."""
    rows = []
    for (scheme, condition), level in levels.items():
        clean = condition == CLEAN_CONDITION
        for seed in range(seeds):
            score = level + 0.01 * seed + (0 if clean else 0.004 * (seed % 2))
            fault = "none" if clean else "fault_" + condition.split("=")[0]
            rows.append(
                {"label": f"{scheme}, {condition}", "seed": seed, "score": score, "start": 0.1,
                 "step_s": 1.0, "scheme": scheme, "fault": fault, "level": "x", "condition": condition,
                 **dict.fromkeys(verdict_table.STABILITY_COLUMNS, 1.0)}
            )  # fmt: skip
    return pd.DataFrame(rows)


LEVELS = {
    ("grpo", "clean"): 0.50,
    ("grpo", "reward_flip=0.4"): 0.30,
    ("dapo_loss", "clean"): 0.50,
    ("dapo_loss", "reward_flip=0.4"): 0.45,
    ("grpo_no_kl", "clean"): 0.50,
    ("grpo_no_kl", "reward_flip=0.4"): 0.35,
}


def test_changes_and_relative_robustness_paired_on_seeds():
    frame = scored(LEVELS)
    margin = fault_robustness.margin(frame)
    assert margin == pytest.approx(verdict_table.MARGIN_OF_GAIN * (0.515 - 0.1))
    changed = fault_robustness.changes(frame, margin)
    assert list(changed["scheme"]) == ["grpo", "dapo_loss", "grpo_no_kl"]  # the scheme study's order
    by = changed.set_index("scheme")
    assert by.loc["grpo", "diff"] == pytest.approx(-0.198) and by.loc["grpo", "verdict"] == "worse"
    assert by.loc["dapo_loss", "diff"] == pytest.approx(-0.048) and by.loc["dapo_loss", "mde"] > 0
    compared = fault_robustness.relative(frame, margin)
    rows = {(r.row, r.kind): r for r in compared.itertuples()}
    assert set(rows) == {
        ("dapo_loss", "scheme"),
        ("dapo_loss", "scheme vs grpo_no_kl"),
        ("grpo_no_kl", "scheme"),
    }
    # every scheme's change shares the same per-seed jitter, so the differences are exact
    assert rows[("dapo_loss", "scheme")].diff == pytest.approx(0.15)
    assert rows[("dapo_loss", "scheme vs grpo_no_kl")].diff == pytest.approx(0.10)
    assert rows[("grpo_no_kl", "scheme")].diff == pytest.approx(0.05)
    # no spread between the changes: the fewest seeds decide; a noisy row needs many more
    assert rows[("dapo_loss", "scheme")].seeds_needed == power.MIN_SEEDS
    jitter = (frame["seed"] % 2) * (frame["scheme"] == "dapo_loss") * (frame["condition"] != CLEAN_CONDITION)
    noisy = frame.assign(score=frame["score"] + 0.3 * jitter)
    found = fault_robustness.relative(noisy, margin).set_index(["row", "kind"])
    assert found.loc[("dapo_loss", "scheme"), "seeds_needed"] > 10 * power.MIN_SEEDS


def test_crashes_figure_and_tables():
    frame = scored(LEVELS)
    runs = frame.drop_duplicates(["label", "seed"])[
        ["label", "seed", "scheme", "fault", "level", "condition"]
    ]
    runs = runs.assign(status=["failed" if (lab, s) == ("dapo_loss, reward_flip=0.4", 3) else "loaded"
                               for lab, s in zip(runs["label"], runs["seed"])])  # fmt: skip
    failed = fault_robustness.crashes(SweepResult(frame, runs))
    row = failed[(failed["scheme"] == "dapo_loss") & (failed["condition"] == "reward_flip=0.4")].iloc[0]
    assert (row["failed"], row["runs"]) == (1, 4)
    margin = fault_robustness.margin(frame)
    changed = fault_robustness.changes(frame, margin)
    compared = fault_robustness.relative(frame, margin)
    text = fault_robustness.markdown(changed, compared, failed)
    assert "| reward_flip=0.4 | dapo_loss | -0.048 [" in text and "| 1/4 |" in text
    assert "| reward_flip=0.4 | dapo_loss | scheme vs grpo_no_kl | +0.100 [" in text
    assert "| seeds for an MDE at the margin |" in text
    fig = fault_robustness.figure(changed, margin, FULL)
    assert len(fig.axes) == 1 and "4 paired seeds" in fig._suptitle.get_text()
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["grpo_no_kl", "dapo_loss", "grpo"]
