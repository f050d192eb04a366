"""The transfer study's arms and rows: each row changes one thing against its comparator on the pretrained
bed, keyed as the base's tables key it; grpo's scan shares the pilot's runs; the tuned rates, the verdict
design and the transfer table read what they are given and say what is missing."""

import math

import pandas as pd
import pytest

from grpo_lab.analysis.activity import ACTIVITY
from grpo_lab.comparisons import pretrained_bed, scheme_arms
from grpo_lab.comparisons import transfer_arms as transfer
from grpo_lab.presets import INCIDENTAL, PRESETS

FULL = transfer.settings("full")


def changed(a: dict, b: dict) -> set[str]:
    return {k for k in a if a[k] != b[k] and k != "preset"}


def test_each_row_changes_its_mechanism_alone_against_its_comparator():
    for name, _, treatment, control in transfer.ROWS:
        t = transfer.arm_config(FULL, treatment, 1e-5).to_dict()
        c = transfer.arm_config(FULL, control, 1e-5).to_dict()
        preset, extra = transfer.ARMS[treatment]
        own = set(PRESETS[preset].changes) | set(extra)
        if control == "grpo_no_kl":
            own -= set(INCIDENTAL.get(preset, ()))
        assert changed(t, c) == own, name
        assert name in ACTIVITY, f"row {name} has no activity measure"


def test_the_scheme_rows_are_keyed_as_the_base_keys_them():
    schemes = [t for t, _, _, _ in transfer.ROWS if t in scheme_arms.SCHEMES]
    base_keys = {(r, k) for r, k, _, _ in scheme_arms.arms(set(schemes) | {"grpo"})}
    mine = {(r, k) for r, k, _, _ in transfer.ROWS if r in scheme_arms.SCHEMES}
    assert mine == base_keys
    assert {k for _, k, t, _ in transfer.ROWS if t in ("dynamic_sampling", "overlong_shaping")} == {"trick"}


def test_grpos_scan_on_seed_0_is_the_pilots_runs_and_only_the_rate_varies():
    scan = transfer.scan_design(FULL)
    pilot = {
        p.config.replace(seed=0).key()
        for p in pretrained_bed.pilot_design(pretrained_bed.pilot_settings("full"))
    }
    grpo = {p.config.replace(seed=0).key() for p in scan if p.columns["arm"] == "grpo"}
    assert grpo <= pilot and len(grpo) == len(transfer.RATES)
    assert {p.columns["arm"] for p in scan} == set(transfer.TUNED)
    for arm in transfer.TUNED:
        configs = [p.config.to_dict() for p in scan if p.columns["arm"] == arm]
        assert len(configs) == len(transfer.RATES)
        assert set().union(*(changed(c, configs[0]) for c in configs)) == {"learning_rate"}
    extended = transfer.scan_design(FULL, {"cispo": 3.33333e-7})
    assert len(extended) == len(scan) + 1 and "cispo, lr 3.33333e-07" in {p.label for p in extended}
    assert transfer.settings("full").seeds == transfer.TUNING_SEEDS
    assert not set(transfer.fresh_seeds(FULL)) & set(transfer.TUNING_SEEDS)


def test_tuned_rates_bracket_and_name_the_next_rate():
    scan = pd.DataFrame(
        [("grpo", 1e-6, 0.25), ("grpo", 3e-6, 0.47), ("grpo", 1e-5, 0.19),
         ("cispo", 1e-6, 0.40), ("cispo", 3e-6, 0.30), ("cispo", 1e-5, 0.01)],
        columns=["arm", "learning_rate", "mean"],
    )  # fmt: skip
    scan["factor"] = [transfer.factor(lr) for lr in scan["learning_rate"]]
    tuned = transfer.tuned_rates(scan).set_index("arm")
    assert tuned.loc["grpo", "best rate"] == 3e-6 and tuned.loc["grpo", "bracketed"]
    assert tuned.loc["grpo", "next rate"] is None or math.isnan(tuned.loc["grpo", "next rate"])
    assert tuned.loc["cispo", "best rate"] == 1e-6 and not tuned.loc["cispo", "bracketed"]
    assert tuned.loc["cispo", "next rate"] == 3.33333e-7


def test_the_verdict_design_runs_tricks_at_grpos_rate_and_needs_every_tuned_rate():
    best = {arm: 1e-5 for arm in transfer.TUNED} | {"grpo": 3e-6, "cispo": 1e-6}
    points = {p.label: p.config for p in transfer.verdict_design(FULL, best)}
    assert set(points) == set(transfer.ARMS)
    assert points["cispo"].learning_rate == 1e-6 and points["dynamic_sampling"].learning_rate == 3e-6
    with pytest.raises(ValueError, match="no tuned rate for \\['gspo'\\]"):
        transfer.verdict_design(FULL, {k: v for k, v in best.items() if k != "gspo"})
    smoke = transfer.settings("smoke")
    assert [p.label for p in transfer.verdict_design(smoke, best)] == list(transfer.ARMS)[
        : transfer.SMOKE_ARMS
    ]


def side(rows: list[tuple[str, str, str]]) -> pd.DataFrame:
    """A verdict table of (row, kind, adjusted verdict) with every carried column."""
    frame = pd.DataFrame(rows, columns=["row", "kind", "adjusted verdict"])
    return frame.assign(effect=0.01, ci_low=-0.01, ci_high=0.03, seeds=3, margin=0.01, verdict="better")


def test_the_transfer_table_reads_the_adjusted_words_and_marks_rows_one_side_lacks():
    base = side(
        [("grpo_no_kl", "scheme", "worse"), ("gspo", "scheme", "better"), ("cispo", "scheme", "undecided")]
    )
    bed = side(
        [
            ("grpo_no_kl", "scheme", "worse, size unsure"),
            ("gspo", "scheme", "worse"),
            ("dapo", "scheme", "better"),
        ]
    )
    found = transfer.transfer_table(base, bed).set_index(["row", "kind"])["change"]
    assert len(found) == len(transfer.ROWS)
    assert found[("grpo_no_kl", "scheme")] == "held" and found[("gspo", "scheme")] == "reversed"
    assert found[("dapo", "scheme")] == transfer.NO_BASE_ROW
    assert found[("cispo", "scheme")] == transfer.NOT_RUN
    with pytest.raises(ValueError, match="lacks the columns"):
        transfer.transfer_table(base.drop(columns="margin"), bed)
