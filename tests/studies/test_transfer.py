"""The transfer study's notebook (18): the bed's pilot is read for its start and gain conditions, and the
whole study is priced, before it is run, from what its scan's rule sees in the store."""

import numpy as np
import pandas as pd
import pytest

from grpo_lab.comparisons import pretrained_bed, transfer_arms
from grpo_lab.experiments import SweepResult
from grpo_lab.experiments.store import run_dir
from grpo_lab.studies import transfer

FULL = transfer.settings("full")


def pilot_rows(starts: list[float], headlines: list[float], greedy_end: list[float]) -> pd.DataFrame:
    rates = pretrained_bed.PILOT_RATES
    return pd.DataFrame(
        {"run": [f"grpo, lr {r:g}" for r in rates], "learning rate": rates, "greedy start": starts,
         "greedy end": greedy_end, "headline": headlines, "gain": [h - 0.09 for h in headlines]}
    )  # fmt: skip


def test_the_conditions_hold_on_a_bracketed_pilot_that_starts_in_range_and_gains():
    held = transfer.conditions(pilot_rows([0.25] * 3, [0.195, 0.339, 0.286], [0.35, 0.52, 0.47]))
    assert held["holds"].all() and len(held) == 4
    assert held.loc[1, "measured"] == "3e-06"


def test_each_condition_fails_on_its_own_defect():
    start = transfer.conditions(pilot_rows([0.1, 0.25, 0.25], [0.195, 0.339, 0.286], [0.35, 0.52, 0.47]))
    assert list(start["holds"]) == [False, True, True, True]
    edge = transfer.conditions(pilot_rows([0.25] * 3, [0.195, 0.286, 0.339], [0.35, 0.47, 0.52]))
    assert list(edge["holds"]) == [True, False, True, True]
    lost = transfer.conditions(pilot_rows([0.25] * 3, [0.0, 0.05, 0.02], [0.2, 0.2, 0.2]))
    assert list(lost["holds"]) == [True, True, False, False]


def test_the_notebook_plans_the_pilot_and_the_study_is_priced_from_the_scans_start_in_an_empty_store(
    tmp_path,
):
    settings = transfer.settings("full")
    pilot = transfer.runs(transfer.design(settings), settings)
    assert {c.learning_rate for c in pilot} == set(pretrained_bed.PILOT_RATES)
    assert {c.seed for c in pilot} == set(pretrained_bed.PILOT.seeds)
    study = transfer.transfer_runs(settings, tmp_path)
    scanned = len(transfer_arms.TUNED) * len(transfer_arms.RATES)  # the scan's start: seed 0 at every rate
    judged = len(transfer_arms.ARMS) * len(transfer_arms.FRESH_SEEDS)
    assert len({run_dir(c, tmp_path) for c in study}) == len(study) == scanned + judged
    first = {run_dir(c, tmp_path) for c in pilot if c.seed == transfer_arms.TUNING_SEEDS[0]}
    assert first and first <= {run_dir(c, tmp_path) for c in study}  # shared runs: the scan's start
    assert set(pretrained_bed.PILOT.seeds) <= set(transfer_arms.TUNING_SEEDS)  # the rest, its seed 1


def bed_runs(shifts: dict[str, dict[str, float]], seeds: int = 4) -> SweepResult:
    """Runs of 20 steps per arm and seed, validated at steps 10 and 20: each arm's entropy, incorrect-answer
    length and sampled accuracy its base value plus `shifts[arm]`, plus a per-seed wobble shared by the
    arms (one start, one sampler stream)."""
    rows = []
    for label, shift in shifts.items():
        for seed in range(seeds):
            wobble = 0.01 * (seed - 1.5)
            for step in range(21):
                evaluated = step in (10, 20)
                rows.append(
                    {"label": label, "seed": seed, "step": step,
                     "entropy": 1.0 + shift.get("entropy", 0) + wobble,
                     "completions/incorrect_mean_length": 30.0 + shift.get("length", 0) + 10 * wobble,
                     "frac_reward_zero_std": 0.3, "is/logp_gap_mean": 0.001,
                     "val/sampled_accuracy": (0.3 + shift.get("score", 0) + wobble) if evaluated else np.nan}
                )  # fmt: skip
    return SweepResult(pd.DataFrame(rows), pd.DataFrame())


def test_published_effects_read_each_papers_direction_from_its_interval():
    result = bed_runs(
        {"grpo": {}, "clip_higher": {"entropy": 0.2}, "grpo_no_kl": {"length": -5.0}, "dr_grpo": {},
         "gspo": {"score": 0.0}}
    )  # fmt: skip
    table = transfer.published_effects(result).set_index("paper")
    assert list(table.index) == ["DAPO", "Dr. GRPO", "GSPO"]
    assert (
        table.loc["DAPO", "effect"] == pytest.approx(0.2) and table.loc["DAPO", "word"] == transfer.REPRODUCES
    )
    assert table.loc["Dr. GRPO", "effect"] == pytest.approx(-5.0)
    assert table.loc["Dr. GRPO", "adjusted word"] == transfer.OPPOSITE
    assert table.loc["GSPO", "word"] == transfer.OPEN  # the same scores on every seed: no direction
    assert (table["adjusted ci_low"] <= table["ci_low"]).all() and (
        table["adjusted ci_high"] >= table["ci_high"]
    ).all()
    fewer = transfer.published_effects(bed_runs({"grpo": {}, "gspo": {"score": 0.05}}))
    assert list(fewer["paper"]) == ["GSPO"]
    for waiting in (bed_runs({"grpo": {}}), None):  # no pair stored yet: no row, the table's columns
        empty = transfer.published_effects(waiting)
        assert empty.empty and list(empty.columns) == list(transfer.PUBLISHED_COLUMNS)
    assert list(table.reset_index().columns) == list(transfer.PUBLISHED_COLUMNS)


def test_the_problem_checks_run_on_the_beds_arms():
    result = bed_runs({"grpo": {}, "grpo_no_kl": {"length": 4.0}, "dr_grpo": {}})
    checks = transfer.problems_present(result)
    assert list(checks["problem"]) == [
        "length bias (Dr. GRPO; grpo_no_kl against dr_grpo)",
        "sparse reward",
        "train-inference inconsistency",
    ]
    assert list(checks["present"]) == [True, False, False]
    assert len(transfer.problems_present(bed_runs({"grpo": {}}))) == 2  # no length pair: two checks
    for waiting in (bed_runs({"dr_grpo": {}}), None):  # grpo's runs not stored yet: no check
        empty = transfer.problems_present(waiting)
        assert empty.empty and list(empty.columns) == list(checks.columns)


def scan_runs(values: dict[float, tuple[float, float]]) -> SweepResult:
    """grpo's scan: at each factor, two seeds whose sampled accuracy starts at 0.1 and is the pair's value
    at steps 10 and 20, greedy accuracy 0.2 above it; one label per factor."""
    runs, rows = [], []
    for f, pair in values.items():
        label = f"grpo, lr {transfer_arms.rate(f):g}"
        for seed, value in enumerate(pair):
            runs.append({"label": label, "arm": "grpo", "factor": f, "seed": seed})
            for step in (0, 10, 20):
                score = 0.1 if step == 0 else value
                rows.append({"label": label, "seed": seed, "step": step, "entropy": 1.0 - value,
                             "val/sampled_accuracy": score, "val/accuracy": score + 0.2})  # fmt: skip
    return SweepResult(pd.DataFrame(rows), pd.DataFrame(runs))


def test_the_beds_noise_is_read_over_grpos_seeds_at_its_best_rate_only():
    values = {1 / 3: (0.15, 0.17), 1.0: (0.28, 0.32), 10 / 3: (0.20, 0.30)}
    result = scan_runs(values)
    table = pd.DataFrame([{"arm": "grpo", "factor": f, "mean": sum(pair) / 2} for f, pair in values.items()])
    one_seed = {"arm": "grpo", "factor": 10.0, "mean": 0.5, "n": 1}  # a better mean on one seed: no sd
    table = pd.concat([table.assign(n=2), pd.DataFrame([one_seed])], ignore_index=True)
    noise = transfer.noise(result, table).set_index("score")
    sampled = noise.loc["sampled accuracy"]
    assert sampled["learning rate"] == f"{transfer_arms.rate(1.0):g}"
    assert sampled["gain"] == pytest.approx(0.2) and sampled["sd"] == pytest.approx(0.04 / np.sqrt(2))
    assert sampled["sd / gain"] == pytest.approx(0.04 / np.sqrt(2) / 0.2)
    first_look = sampled["mde / gain, 3 seeds"] / sampled["sd / gain"]
    assert first_look == pytest.approx((4.303 + 1.061) * np.sqrt(2 / 3), abs=0.01)  # t(.975, 2) + t(.8, 2)
    assert sampled["mde / gain, 6 seeds"] < sampled["mde / gain, 3 seeds"]
    assert sampled["runs"] == 6 and sampled["spearman with final entropy"] == pytest.approx(-1.0)
    assert np.isnan(noise.loc["pass@4", "gain"])  # not logged: no gain, no ratio


def test_the_scan_figure_stars_the_best_mean_so_far():
    table = pd.DataFrame(
        [{"arm": a, "factor": f, "mean": m, "greedy": 0.5, "n": 1} for a, f, m in
         (("grpo", 1 / 3, 0.2), ("grpo", 1.0, 0.34), ("grpo", 10 / 3, 0.29), ("cispo", 1 / 3, 0.3),
          ("cispo", 1.0, 0.1))]
    )  # fmt: skip
    fig = transfer.scan_figure(table, transfer.settings("full"))
    assert [fig.axes[i].get_title() for i in (0, 1)] == ["grpo", "cispo"]
    for ax, tuned in zip(fig.axes, (1.0, 1 / 3, 1.0, 1 / 3)):  # headline row, then greedy row
        star = [line for line in ax.get_lines() if line.get_marker() == "*"]
        assert list(star[0].get_xdata()) == [tuned]
    assert "x of 3e-06" in fig._suptitle.get_text() and "smollm2-135m" in fig._suptitle.get_text()


def scan_of(bests: dict[str, tuple[float, int, float]]) -> pd.DataFrame:
    """A scan table (`scan_table`'s columns) per arm: every one of the scan's rates on the arm's count of
    seeds, its best rate `lead` above the others' 0.3, an sd of 0.01 where it has two seeds."""
    rows = []
    for arm, (best, seeds, lead) in bests.items():
        for lr in transfer_arms.RATES:
            mean = 0.3 + (lead if lr == best else 0.0)
            rows.append({"arm": arm, "factor": transfer_arms.factor(lr), "learning rate": lr,
                         "seeds": tuple(range(seeds)), "n": seeds, "mean": mean, "greedy": mean,
                         "pass@4": mean, "sd": 0.01 if seeds > 1 else np.nan})  # fmt: skip
    return pd.DataFrame(rows)


def test_a_rate_is_chosen_once_the_scan_needs_no_run_and_tricks_wait_for_grpos():
    """grpo leads far on two seeds, gspo far on one: chosen; cispo's best is at an end (its scan extends)
    and dr_grpo's lead is within the noise (it takes seed 1): not chosen, nor judged."""
    table = scan_of(
        {"grpo": (3e-6, 2, 0.1), "gspo": (3e-6, 1, 0.1), "cispo": (1e-6, 1, 0.1), "dr_grpo": (3e-6, 1, 0.01)}
    )
    chosen = transfer.chosen_rates(table, FULL)
    tricks = [a for a in transfer_arms.ARMS if a not in transfer_arms.TUNED]
    assert chosen == {"grpo": 3e-6, "gspo": 3e-6} | {a: 3e-6 for a in tricks}
    unsettled = scan_of({"grpo": (3e-6, 1, 0.01), "gspo": (3e-6, 2, 0.1)})
    assert transfer.chosen_rates(unsettled, FULL) == {"gspo": 3e-6}  # grpo's rate not chosen: no trick either
    one_seed = table[table["arm"] != "grpo"]
    assert transfer.chosen_rates(one_seed, FULL) == {}  # no second seed: no sd, none settled


def test_the_verdicts_load_only_chosen_arms_with_every_fresh_seed_stored(monkeypatch, tmp_path):
    """grpo and gspo are chosen, grpo_no_kl is not; gspo lacks one fresh seed: only grpo's and the tricks'
    runs are loaded, at grpo's chosen rate, and nothing is trained."""
    settings = transfer.settings("full")
    table = scan_of({"grpo": (3e-6, 2, 0.1), "gspo": (3e-6, 2, 0.1), "grpo_no_kl": (3e-6, 1, 0.01)})
    gspo_missing = transfer_arms.verdict_point(settings, "gspo", 3e-6).config.replace(seed=4)
    stored = lambda where: where != run_dir(gspo_missing, tmp_path)  # noqa: E731
    loaded = []
    monkeypatch.setattr(transfer, "is_current", stored)
    monkeypatch.setattr(
        transfer.paired_runs, "run_seeded", lambda held, where, progress: loaded.extend(held) or "result"
    )
    assert transfer.verdicts(settings, table, tmp_path) == "result"
    tricks = [a for a in transfer_arms.ARMS if a not in transfer_arms.TUNED]
    assert {p.label for p, _ in loaded} == {"grpo", *tricks}
    assert {c.seed for _, c in loaded} == set(transfer_arms.FRESH_SEEDS)
    assert {c.learning_rate for _, c in loaded} == {3e-6}
    assert "gspo" in transfer.chosen_rates(table, FULL)  # chosen, but one fresh seed short
    monkeypatch.setattr(transfer, "is_current", lambda where: False)
    assert transfer.verdicts(settings, table, tmp_path) is None


def verdict_rows(rows: list[tuple[str, str, str, str]]) -> pd.DataFrame:
    """A verdict table of (row, kind, raw verdict, adjusted verdict) with every carried column."""
    frame = pd.DataFrame(rows, columns=["row", "kind", "verdict", "adjusted verdict"])
    return frame.assign(effect=-0.02, ci_low=-0.03, ci_high=-0.01, seeds=6, margin=0.007)


def test_the_base_rows_take_the_fresh_seed_side_and_the_tricks_and_the_markdown_shows_both_words():
    schemes = pd.DataFrame(
        {"row": ["gspo", "cispo"], "kind": ["scheme vs grpo_no_kl", "scheme"],
         "effect fresh seeds": [-0.012, 0.0],
         "ci_low fresh seeds": [-0.024, -0.01], "ci_high fresh seeds": [-0.001, 0.01],
         "seeds fresh seeds": [6, 6], "verdict fresh seeds": ["worse, size unsure", "undecided"],
         "adjusted verdict fresh seeds": ["undecided", "undecided"], "effect shared": [0.5, 0.5]}
    )  # fmt: skip
    tricks = verdict_rows([("adaptive_entropy", "trick", "worse", "worse, size unsure")]).assign(p=0.01)
    base = transfer.base_rows(schemes, tricks, 0.007)
    assert list(base.columns) == list(transfer.VERDICT_COLUMNS)
    assert list(base["row"]) == ["gspo", "cispo", "adaptive_entropy"]
    assert base.loc[0, "effect"] == -0.012 and (base["margin"] == 0.007).all()
    with pytest.raises(ValueError, match="fresh seeds"):
        transfer.base_rows(schemes.drop(columns="verdict fresh seeds"), tricks, 0.007)
    bed = verdict_rows([("gspo", "scheme vs grpo_no_kl", "worse", "worse")])
    text = transfer.transfer_markdown(transfer_arms.transfer_table(base, bed), transfer.settings("full"))
    line = next(x for x in text.splitlines() if x.startswith("| gspo | scheme vs grpo_no_kl"))
    assert "undecided (raw: worse, size unsure): -0.012 [-0.024, -0.001], 6 seeds" in line
    assert line.endswith("| appears |") and "30 steps" in text
    assert "| clip_higher | component | no base row | not run yet | no base row |" in text
    assert "nan" not in text


def test_the_bed_table_is_empty_until_a_row_has_both_arms():
    """No runs, or arms of no row (gspo without its comparators): an empty table with the columns the
    transfer table reads, where every row then reads 'not run yet'."""
    for result in (None, SweepResult(pd.DataFrame(), pd.DataFrame({"label": ["gspo", "dapo"]}))):
        empty = transfer.bed_table(result)
        assert empty.empty and list(empty.columns) == list(transfer.VERDICT_COLUMNS)
    joined = transfer_arms.transfer_table(verdict_rows([("gspo", "scheme", "worse", "worse")]), empty)
    assert set(joined["change"]) == {transfer_arms.NOT_RUN, transfer_arms.NO_BASE_ROW}
