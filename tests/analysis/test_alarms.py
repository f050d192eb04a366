"""False alarms and detection rates of the diagnostic rules: classifying runs by their config, the rates
and their bounds, the confusion table and its figure, the calibration rule, on synthetic run
directories; then the stored clean runs of the study base and of each scheme, where every rule must
fire on at most 5% of the runs without evidence of its claim."""

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from grpo_lab.analysis import alarms
from grpo_lab.analysis.diagnostics import Thresholds
from grpo_lab.config import Config
from grpo_lab.runlog import RunWriter, seal

STEPS = 12
RESULTS = Path(__file__).resolve().parents[2] / "results"
MIN_CLEAN_RUNS = 60
"""below this many clean runs of the study base and the schemes, a false-alarm rate of at most 5%
cannot be told from one of 10% (one-sided 95% bound at 0 of 60 runs: 4.9%): the stored-runs test skips"""
LONG_STEPS = 500
"""the long-horizon runs (notebooks 05 and 15) are held to the bound apart from the rest: far fewer, and
what a rule reads can grow with a run's length (the largest gradient norm does)"""


def metrics(zero_std: float = 0.1, val: tuple[float, ...] = (0.3, 0.35, 0.4, 0.45)) -> pd.DataFrame:
    """A quiet run of STEPS steps: steady reward, `zero_std` of the groups without reward variance,
    validation every 4 steps (`val`, the last one after the last step, as the trainer writes it)."""
    rng = np.random.default_rng(0)
    rows = [
        {
            "step": step,
            "reward": 0.4 + 0.01 * rng.standard_normal(),
            "frac_reward_zero_std": zero_std,
            "ratio/mean": 1.0,
            "ratio/std": 0.05 + 0.001 * step,
            "grad_norm": 1.0 + 0.01 * step,
        }
        for step in range(STEPS)
    ]
    for i, accuracy in enumerate(val):
        step = min(4 * i, STEPS)
        if step == STEPS:
            rows.append({"step": step})
        rows[step]["val/accuracy"] = accuracy
    return pd.DataFrame(rows)


def write_run(root: Path, name: str, frame: pd.DataFrame, sealed: bool = True, **changes) -> Path:
    """A run directory as a store keeps it: config.json of Config(**changes), metrics, summary.json
    and, when `sealed`, metrics.csv.gz and manifest.json."""
    path = root / name
    writer = RunWriter(path, Config(**changes).to_dict(), {})
    for row in frame.to_dict("records"):
        writer.log({k: v for k, v in row.items() if not (isinstance(v, float) and math.isnan(v))})
    writer.finish({})
    if sealed:
        seal(path, "test")
    return path


@pytest.fixture
def store(tmp_path) -> Path:
    """Two clean runs of grpo (seeds 0, 1), one with a changed learning rate, two faulted runs (reward
    noise, seeds 0 and 1), a faulted run of another length (another design), and an unsealed run."""
    write_run(tmp_path, "a", metrics(), seed=0, steps=STEPS)
    write_run(tmp_path, "b", metrics(), seed=1, steps=STEPS)
    write_run(tmp_path, "c", metrics(), seed=0, steps=STEPS, learning_rate=1e-3)
    write_run(tmp_path, "d", metrics(zero_std=0.9), seed=0, steps=STEPS, fault_reward_sigma=1.0)
    write_run(tmp_path, "e", metrics(), seed=1, steps=STEPS, fault_reward_sigma=1.0)
    write_run(tmp_path, "f", metrics(), seed=0, steps=STEPS + 1, fault_repeat_k=2)
    write_run(tmp_path, "g", metrics(), sealed=False, seed=2, steps=STEPS)
    return tmp_path


# --- classifying runs -----------------------------------------------------------------------------


def test_condition_names_the_injected_faults():
    defaults = Config().to_dict()
    assert alarms.condition(defaults) == "clean"
    assert alarms.condition({**defaults, "fault_reward_sigma": 1.0}) == "reward_sigma=1.0"
    assert alarms.condition({**defaults, "fault_group_fraction": 0.5}) == "clean"  # shapes no fault alone
    both = {**defaults, "fault_reward_flip": 0.4, "fault_group_fraction": 0.5}
    assert alarms.condition(both) == "reward_flip=0.4+group_fraction=0.5"
    assert alarms.condition({**defaults, "fault_sampler_dtype": "bfloat16"}) == "sampler_dtype=bfloat16"


def test_changes_leave_out_how_a_run_is_run_and_its_faults():
    reference = Config().to_dict()
    config = Config(
        seed=3, steps=7, eval_every=2, val_size=50, learning_rate=1e-3, task="judge", fault_repeat_k=2
    ).to_dict()
    assert alarms.changes(config, reference) == 'task="judge" learning_rate=0.001'
    assert alarms.changes(reference, reference) == ""
    assert alarms.changes({**reference, "rewards": ["a", "b"]}, reference) == 'rewards=["a","b"]'
    assert alarms.changes({**reference, "kl_monitor": True}, reference) == ""  # a measurement only


def test_collect_runs_classifies_every_sealed_run(store):
    runs = alarms.collect_runs(store)
    assert list(runs.columns) == alarms.ID_COLUMNS
    assert list(runs["run"]) == ["a", "b", "c", "d", "e", "f"]  # g is not sealed
    assert list(runs["condition"]) == ["clean"] * 3 + ["reward_sigma=1.0"] * 2 + ["repeat_k=2"]
    assert list(runs["changes"]) == ["", "", "learning_rate=0.001", "", "", ""]
    assert list(runs["seed"]) == [0, 1, 0, 0, 1, 0] and runs["steps"].iloc[-1] == STEPS + 1
    kept = alarms.collect_runs(store, usable=lambda path: path.name in ("a", "c"))
    assert list(kept["run"]) == ["a", "c"]
    fast = alarms.collect_runs(store, reference=lambda name: Config(learning_rate=1e-3).to_dict())
    assert fast.loc[fast["run"] == "c", "changes"].item() == ""
    assert fast.loc[fast["run"] == "a", "changes"].item() == "learning_rate=3e-05"


def test_fault_study_keeps_the_faulted_runs_with_clean_runs_of_their_design_and_those(store):
    runs = alarms.collect_runs(store)
    study = alarms.fault_study(runs)
    # c changes the learning rate: no faulted run shares its design; f's design (13 steps) has no clean
    # run, so f belongs to no fault-injection design here
    assert list(study["run"]) == ["a", "b", "d", "e"]
    assert alarms.fault_study(runs[runs["condition"] == "clean"]).empty
    # only the named conditions are injected faults: with none of them, no clean run is kept either
    assert alarms.fault_study(runs, ["repeat_k=2"]).empty
    assert list(alarms.fault_study(runs, ["reward_sigma=1.0"])["run"]) == ["a", "b", "d", "e"]


# --- rates --------------------------------------------------------------------------------------------


def test_fired_rules_has_a_boolean_column_per_rule(store):
    runs = alarms.collect_runs(store)
    fired = alarms.fired_rules(runs)
    assert list(fired.columns) == list(alarms.RULE_NAMES) and fired.index.equals(runs.index)
    assert fired.dtypes.eq(bool).all()
    assert list(fired["zero_variance_groups"]) == [False, False, False, True, False, False]
    assert fired.drop(columns="zero_variance_groups").sum().sum() == 0
    lenient = alarms.fired_rules(runs, Thresholds(zero_std_max=0.95))
    assert not lenient["zero_variance_groups"].any()


def test_upper_bound_is_the_exact_one_sided_bound():
    assert alarms.upper_bound(0, 12) == pytest.approx(1 - 0.05 ** (1 / 12))  # Clopper-Pearson at 0 events
    assert alarms.upper_bound(12, 12) == 1.0
    assert alarms.upper_bound(3, 140) > 3 / 140
    assert alarms.upper_bound(3, 140, confidence=0.99) > alarms.upper_bound(3, 140)
    assert math.isnan(alarms.upper_bound(0, 0))


def test_false_alarms_count_rates_and_leave_out_confirmed_claims():
    fired = pd.DataFrame({"x": [True, False, False, False], "y": [True, True, False, False]})
    known = pd.DataFrame({"x": [False] * 4, "y": [True, False, False, False]})
    table = alarms.false_alarms(fired)
    assert table.loc["x"].to_dict() == pytest.approx(
        {"n": 4, "fired": 1, "confirmed": 0, "false": 1, "rate": 0.25, "upper": alarms.upper_bound(1, 4)}
    )
    assert table.loc["y", "rate"] == 0.5
    checked = alarms.false_alarms(fired, known)
    assert checked.loc["y", ["fired", "confirmed", "false"]].tolist() == [2, 1, 1]
    assert checked.loc["y", "rate"] == 0.25 and checked.loc["x", "rate"] == 0.25
    assert alarms.false_alarms(fired.iloc[[1, 3]], known)["rate"].tolist() == [0.0, 0.5]


def test_a_rule_counts_only_the_runs_that_logged_what_it_reads(store):
    """`conflicting_objectives` reads gradient cosines, logged only on request: its n is the runs that
    logged them, and with none its rate is unknown rather than 0."""
    frame = metrics()
    with_cosines = frame.assign(**{"grad_cos/policy:correct__kl": np.linspace(-0.9, -0.7, len(frame))})
    write_run(store, "h", with_cosines, seed=3, steps=STEPS)
    runs = alarms.collect_runs(store)
    judged = alarms.judged_rules(runs)
    assert judged.drop(columns="conflicting_objectives").all().all()
    assert judged["conflicting_objectives"].tolist() == [False] * 6 + [True]
    table = alarms.false_alarms(alarms.fired_rules(runs), judged=judged)
    assert table.loc["conflicting_objectives", ["n", "fired", "rate"]].tolist() == [1, 1, 1.0]
    assert table.loc["mode_collapse", "n"] == 7
    blind = alarms.false_alarms(alarms.fired_rules(runs.iloc[:6]), judged=judged)
    assert blind.loc["conflicting_objectives", "n"] == 0
    assert math.isnan(blind.loc["conflicting_objectives", "rate"])


def test_confirmed_stall_is_a_significant_fall_at_the_final_validation(tmp_path):
    fell = metrics(val=(0.5, 0.4, 0.3, 0.2))
    runs = pd.DataFrame(
        {
            "path": [
                write_run(tmp_path, "fell", fell, val_size=200),
                write_run(tmp_path, "noise", metrics(val=(0.5, 0.45, 0.4, 0.48)), val_size=200),
                write_run(tmp_path, "few", fell, val_size=10),  # 0.5 -> 0.2 is within noise on 10 prompts
            ]
        }
    )
    known = alarms.confirmed(runs)
    assert list(known.columns) == list(alarms.RULE_NAMES)
    assert known["validation_stall"].tolist() == [True, False, False]
    assert known.eq(known["validation_stall"], axis=0).all().all()  # a failed run confirms every rule


def test_confusion_shares_per_group_in_order():
    fired = pd.DataFrame({"x": [True, False, True, True], "y": [False, False, False, True]})
    by = pd.Series(["clean", "clean", "fault", "fault"], name="condition")
    table = alarms.confusion(fired, by, order=["fault", "clean", "absent"])
    assert table.index.name == "condition" and list(table.columns) == ["n", "x", "y"]
    assert table.loc["fault"].tolist() == [2, 1.0, 0.5] and table.loc["clean"].tolist() == [2, 0.5, 0.0]
    assert table.loc["absent", "n"] == 0 and np.isnan(table.loc["absent", "x"])
    assert list(alarms.confusion(fired, by).index) == ["clean", "fault"]


def test_figure_draws_counts_and_says_runs_per_row():
    fired = pd.DataFrame({"x": [True, False, True, True, True, False], "y": [False] * 5 + [True]})
    by = pd.Series(["clean"] * 3 + ["fault"] * 3, name="condition")
    fig = alarms.figure(alarms.confusion(fired, by), "rules per fault")
    ax = fig.axes[0]
    assert "rules per fault" in ax.get_title() and "3 runs per row" in ax.get_title()
    assert [t.get_text() for t in ax.texts] == ["2", "0", "2", "1"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["clean (n=3)", "fault (n=3)"]
    plt.close(fig)
    uneven = alarms.figure(alarms.confusion(fired.iloc[:4], by.iloc[:4]))
    assert "1-3 runs per row" in uneven.axes[0].get_title()
    plt.close(uneven)


# --- calibration --------------------------------------------------------------------------------------


def test_calibrate_rounds_a_margin_over_the_quantile_up_to_two_digits():
    assert alarms.calibrate(pd.Series(np.arange(1.0, 101.0))) == 120  # 1.2 x 99.01 = 118.8
    assert alarms.calibrate(pd.Series([0.125])) == pytest.approx(0.15)  # exactly 0.15 stays 0.15
    assert alarms.calibrate(pd.Series([0.126, np.nan])) == pytest.approx(0.16)
    assert alarms.calibrate(pd.Series([3.7705]), margin=1.0) == pytest.approx(3.8)
    assert math.isnan(alarms.calibrate(pd.Series([np.nan])))


def test_statistics_read_each_calibrated_number(tmp_path):
    frame = metrics()
    frame.loc[5, "grad_norm"] = 4.0
    run = write_run(tmp_path, "run", frame)
    numbers = alarms.statistics(pd.DataFrame({"path": [run]}))
    assert list(numbers.columns) == list(alarms.PROBES)
    assert numbers.loc[0, "ratio_std_max"] == pytest.approx(np.median(0.05 + 0.001 * np.arange(STEPS)))
    grad = frame["grad_norm"].dropna()
    assert numbers.loc[0, "grad_spike_ratio"] == pytest.approx(4.0 / grad.median())
    assert np.isnan(numbers.loc[0, "kl_volatility_max"]) and np.isnan(numbers.loc[0, "clip_rise_min"])
    assert set(alarms.PROBES) <= set(Thresholds.__dataclass_fields__)


# --- the stored runs -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stored_clean_runs() -> tuple[pd.DataFrame, ...]:
    """The current clean runs of the study base and of each scheme in results/ (a run of a preset on
    the study base, any seed and length, no fault), the rules that fire on them and the confirmed
    claims and the rules each run could judge: read once for the module."""
    from grpo_lab.comparisons.bed import base
    from grpo_lab.experiments.store import is_current

    if not RESULTS.is_dir():
        pytest.skip(f"no run store at {RESULTS}")
    runs = alarms.collect_runs(RESULTS, lambda name: base("full", name=name).to_dict(), is_current)
    clean = runs[(runs["condition"] == "clean") & (runs["changes"] == "")]
    if len(clean) < MIN_CLEAN_RUNS:
        pytest.skip(f"results/ holds {len(clean)} current clean runs on the study base (< {MIN_CLEAN_RUNS})")
    return clean, alarms.fired_rules(clean), alarms.confirmed(clean), alarms.judged_rules(clean)


def at_horizon(stored, long: bool) -> tuple[pd.DataFrame, ...]:
    """The stored clean runs (and their rules, claims and judged rules) of `LONG_STEPS` steps or more,
    or fewer."""
    clean, *tables = stored
    kept = clean[(clean["steps"] >= LONG_STEPS) == long]
    return kept, *(t.loc[kept.index] for t in tables)


def test_every_rule_is_quiet_on_the_stored_clean_runs(stored_clean_runs):
    clean, fired, known, judged = at_horizon(stored_clean_runs, long=False)
    table = alarms.false_alarms(fired, known, judged=judged)
    loud = table[table["rate"] > 0.05]
    assert loud.empty, f"rules firing on more than 5% of {len(clean)} clean runs:\n{loud}"
    assert table.loc["conflicting_objectives", "n"] >= 3  # the clean runs that log gradient cosines
    # a claim is confirmed only on a run whose validation fell significantly (a failed run)
    failed = known["validation_stall"]
    assert (fired[~failed].sum() == table["fired"] - table["confirmed"]).all()


def test_every_rule_is_quiet_on_the_stored_long_clean_runs(stored_clean_runs):
    clean, fired, known, judged = at_horizon(stored_clean_runs, long=True)
    if clean.empty:
        pytest.skip("results/ holds no long clean run")
    table = alarms.false_alarms(fired, known, judged=judged)
    loud = table[table["rate"] > 0.05]
    assert loud.empty, f"rules firing on more than 5% of {len(clean)} long clean runs:\n{loud}"
