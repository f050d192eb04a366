"""The transfer study's arms and rows: each row changes one thing against its comparator on the pretrained
bed, keyed as the base's tables key it; grpo's scan shares the pilot's runs; the tuned rates, the verdict
design and the transfer table read what they are given and say what is missing."""

import pandas as pd
import pytest

from grpo_lab.analysis.activity import ACTIVITY
from grpo_lab.comparisons import pretrained_bed, scheme_arms
from grpo_lab.comparisons import transfer_arms as transfer
from grpo_lab.config import Config
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


def test_only_the_arms_that_sample_dynamically_refill_up_to_the_beds_cap():
    default = Config().dynamic_sampling_max_rounds
    sampling = set()
    for arm in transfer.ARMS:
        config = transfer.arm_config(FULL, arm, 1e-5)
        if config.dynamic_sampling:
            sampling.add(arm)
            assert config.dynamic_sampling_max_rounds == transfer.REFILL_ROUNDS["dynamic_sampling_max_rounds"]
        else:
            assert config.dynamic_sampling_max_rounds == default, arm
    assert sampling == {"dapo", "dynamic_sampling"}
    assert transfer.REFILL_ROUNDS["dynamic_sampling_max_rounds"] > default


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


def scan_rows(arm: str, means: dict[float, float], seeds: tuple[int, ...], sd: float = 0.02) -> list[dict]:
    """`scan_table` rows of `arm` at each learning rate of `means`, each read on `seeds` with sd `sd`."""
    return [
        {"arm": arm, "factor": transfer.factor(lr), "learning rate": lr, "seeds": seeds, "n": len(seeds),
         "mean": m, "sd": sd}
        for lr, m in means.items()
    ]  # fmt: skip


def test_the_scan_follows_the_labs_one_rule_and_names_what_it_needs_next():
    """grpo bracketed on seeds 0-1 with a wide lead is settled; cispo's best at the lowest rate extends
    down on seed 0; gspo's best leads both neighbours within the noise on seed 0, so all three rates take
    seed 1; the rate an arm at the top needs is 3e-5, a step of 3 above 1e-5."""
    scan = pd.DataFrame(
        scan_rows("grpo", {1e-6: 0.20, 3e-6: 0.34, 1e-5: 0.25}, (0, 1))
        + scan_rows("cispo", {1e-6: 0.40, 3e-6: 0.30, 1e-5: 0.01}, (0,))
        + scan_rows("gspo", {1e-6: 0.30, 3e-6: 0.33, 1e-5: 0.31}, (0,))
        + scan_rows("dr_grpo", {1e-6: 0.20, 3e-6: 0.25, 1e-5: 0.31}, (0,))
    )
    assert transfer.scan_spread(scan).sd == pytest.approx(0.02)
    tuned = transfer.tuned_rates(scan).set_index("arm")
    assert tuned.loc["grpo", "best rate"] == 3e-6 and tuned.loc["grpo", "settled"]
    assert tuned.loc["grpo", "next"] == ""
    assert tuned.loc["cispo", "best rate"] == 1e-6 and not tuned.loc["cispo", "bracketed"]
    assert tuned.loc["cispo", "next"] == "3.33333e-07 seed 0"
    assert tuned.loc["gspo", "bracketed"] and not tuned.loc["gspo", "settled"]
    assert tuned.loc["gspo", "next"] == "1e-06 seed 1, 3e-06 seed 1, 1e-05 seed 1"
    assert tuned.loc["dr_grpo", "next"] == "3e-05 seed 0"
    start = transfer.scan_runs(FULL, scan)
    unscanned = [a for a in transfer.TUNED if a not in set(scan["arm"])]
    begun = [a for a, _, _ in start[: len(transfer.next_runs(scan))]]
    assert set(begun) == {"cispo", "gspo", "dr_grpo"}, "an arm begun comes before an arm not begun"
    assert {(a, transfer.rate(f), s) for a, f, s in start if a in unscanned} == {
        (a, lr, 0) for a in unscanned for lr in transfer.RATES
    }
    points = transfer.scan_points(FULL, start)
    assert all(c.learning_rate == p.columns["learning_rate"] and c.seed in (0, 1) for p, c in points)
    lowest = transfer.rate(min(transfer.reach()))
    far = pd.DataFrame(scan_rows("cispo", {lowest: 0.4, 1e-6: 0.3, 3e-6: 0.2, 1e-5: 0.1}, (0,)))
    with pytest.raises(ValueError, match="beyond the scan's reach"):
        transfer.next_runs(far)


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
    joined = transfer.transfer_table(base, bed).set_index(["row", "kind"])
    assert joined.loc[("grpo_no_kl", "scheme"), f"{transfer.RAW} (pretrained)"] == "better"
    assert joined.loc[("grpo_no_kl", "scheme"), "verdict (pretrained)"] == "worse, size unsure"
    found = joined["change"]
    assert len(found) == len(transfer.ROWS)
    assert found[("grpo_no_kl", "scheme")] == "held" and found[("gspo", "scheme")] == "reversed"
    assert found[("dapo", "scheme")] == transfer.NO_BASE_ROW
    assert found[("cispo", "scheme")] == transfer.NOT_RUN
    with pytest.raises(ValueError, match="lacks the columns"):
        transfer.transfer_table(base.drop(columns="margin"), bed)


def test_an_arm_stopped_between_its_starting_rates_takes_the_rest_before_the_rule_reads_it():
    """dr_grpo holds 1e-6 and 3e-6 on seed 0 (a sitting's piece ended there): it takes 1e-5, not an
    extension from what looks like a best at the top; grpo, whole, follows the rule."""
    scan = pd.DataFrame(
        scan_rows("grpo", {1e-6: 0.20, 3e-6: 0.34, 1e-5: 0.25}, (0, 1))
        + scan_rows("dr_grpo", {1e-6: 0.20, 3e-6: 0.30}, (0,))
    )
    assert transfer.next_runs(scan) == [("dr_grpo", transfer.factor(1e-5), 0)]
    tuned = transfer.tuned_rates(scan).set_index("arm")
    assert tuned.loc["dr_grpo", "next"] == "1e-05 seed 0" and tuned.loc["grpo", "next"] == ""
    alone = pd.DataFrame(scan_rows("gspo", {3e-6: 0.3}, (0,)))
    starts = [(f, s) for _, f, s in transfer.next_runs(alone)]
    assert starts == [(transfer.factor(1e-6), 0), (transfer.factor(1e-5), 0)]  # the full profile's start
    assert len(transfer.next_runs(alone, transfer.RATES[1:2])) == 1  # smoke starts at 3e-6: the rule extends
