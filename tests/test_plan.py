"""The planner: the runs of each notebook counted from the study designs and shared once, stored runs
found in the store (and stale ones not), the cost rule scaled from a calibration, and progress over
the runs read from the store."""

import json
import math

import pytest

from grpo_lab import plan
from grpo_lab.comparisons import pretrained_bed
from grpo_lab.comparisons.bed import base
from grpo_lab.experiments import store
from grpo_lab.experiments.store import ensure, run_dir
from grpo_lab.figures import notebooks
from grpo_lab.runlog import read_summary
from grpo_lab.studies import NOTEBOOKS, baseline, schemes

CALIBRATION = {
    "date": "2026-01-01 00:00 UTC",
    "machine": {"cpu": "test CPU", "cores": 2, "platform": "test"},
    "torch_threads": 1,
    "config": {
        "prompts_per_step": 4,
        "group_size": 8,
        "max_completion_length": 48,
        "num_iterations": 2,
        "num_mini_batches": 4,
        "val_size": 200,
        "val_sampled_size": 100,
        "val_samples": 2,
    },
    "seconds": {"setup": 2.0, "step": 2.0, "sample": 0.5, "logprob": 0.3, "train": 1.0, "evaluation": 4.0},
}
"""a made-up calibration: the tests check the arithmetic, not the machine"""
WITH_PRETRAINED = plan.merged(
    CALIBRATION,
    {"config": CALIBRATION["config"], "seconds": {**CALIBRATION["seconds"], "step": 30.0}},
    "smollm2-135m",
)
"""the made-up calibration with one of the pretrained bed (notebook 18's pilot runs on it)"""


@pytest.fixture(scope="module")
def smoke():
    return plan.plan("smoke", from_empty=True, calibration=WITH_PRETRAINED)


def test_every_notebook_and_the_total_have_the_four_counts(smoke):
    counts = smoke.counts()
    assert list(counts) == [p.stem for p in notebooks()] + ["total"]
    for name, row in counts.items():
        assert set(row) == set(plan.KEYS), name
        assert row["runs"] == row["stored"] + row["to_train"], name
    assert json.loads(json.dumps(counts)) == counts


def test_a_smoke_plan_counts_the_designs_and_each_shared_run_once(smoke):
    counts = smoke.counts()
    every = {
        run_dir(c, plan.runs_root("smoke"))
        for path in notebooks()
        for name in plan.notebook_studies(path)
        for c in plan.study_runs(name, "smoke")
    }
    assert counts["total"]["runs"] == len(every) == sum(counts[p.stem]["runs"] for p in notebooks())
    assert counts["total"] == {**counts["total"], "stored": 0, "to_train": len(every)}
    settings = baseline.settings("smoke")
    assert counts["01_baseline"]["runs"] == len(baseline.design(settings)) * len(settings.seeds) == 2
    compared = schemes.settings("smoke")
    assert len(schemes.design(compared)) * len(compared.seeds) == 4  # grpo's two runs are 01's
    # 02 reads the scheme study's runs (grpo's gain over them is the bed's margin), so it counts them first
    assert counts["03_schemes"]["runs"] == 0 and smoke.shared["03_schemes"] == 4
    assert counts["12_verdicts"]["runs"] == 0 and smoke.shared["12_verdicts"] > 0  # 02's and 03's runs
    assert counts["10_playground"]["runs"] == 0
    hours = sum(r.seconds for r in smoke.runs) / 3600
    assert counts["total"]["core_hours"] == pytest.approx(hours, abs=1e-3) and hours > 0
    assert "needs that an earlier one counts: 02_ablations 4, 03_schemes 4" in smoke.format(cores=2)


def test_the_studies_of_a_notebook_are_those_the_notebook_table_lists(tmp_path):
    found = {p.stem: plan.notebook_studies(p) for p in notebooks()}
    assert found == {stem: list(names) for stem, names in NOTEBOOKS.items()}
    assert found["01_baseline"] == ["baseline"] and found["12_verdicts"] == ["verdicts"]
    assert found["02_ablations"] == ["ablations", "screen", "schemes"] and found["10_playground"] == []
    assert plan.notebook_studies(tmp_path / "99_unlisted.ipynb") == []


def test_every_module_of_the_notebook_table_has_a_design():
    """Each name resolves to a study module or a shared design of the comparisons layer."""
    for names in NOTEBOOKS.values():
        for name in names:
            module = plan._module(name)
            assert callable(module.design) and callable(module.settings), name
    with pytest.raises(ValueError, match="no module 'nothing'"):
        plan._module("nothing")


@pytest.mark.slow
def test_stored_runs_are_counted_and_stale_or_ignored_ones_are_not(
    tmp_path, monkeypatch, embedded_worked_path
):
    """After one of 01's two smoke runs is trained into the store it counts as stored (and the other
    seed is costed from its measured step time); from empty, or once the study base has changed, it
    does not."""
    before = plan.plan("smoke", only=["01"], store=tmp_path, calibration=CALIBRATION)
    assert (before.counts()["01_baseline"]["stored"], before.counts()["01_baseline"]["to_train"]) == (0, 2)
    first, second = (r.config for r in before.runs)
    ensure(first, tmp_path)
    after = plan.plan("smoke", only=["01"], store=tmp_path, calibration=CALIBRATION)
    assert after.counts()["01_baseline"] == {
        **after.counts()["01_baseline"],
        "runs": 2,
        "stored": 1,
        "to_train": 1,
    }
    stored, pending = after.runs
    assert stored.stored and stored.seconds == 0 and not pending.stored
    measured = read_summary(run_dir(first, tmp_path))["time/step_s_mean"]
    assert pending.seconds == pytest.approx(plan.run_seconds(second, CALIBRATION, measured))
    assert (
        stored.spent == pytest.approx(plan.run_seconds(first, CALIBRATION, measured)) and pending.spent == 0
    )
    assert after.counts()["total"]["spent_core_hours"] == pytest.approx(stored.spent / 3600, abs=1e-3)
    empty = plan.plan("smoke", only=["01"], store=tmp_path, from_empty=True, calibration=CALIBRATION)
    assert empty.counts()["total"]["stored"] == 0
    assert all(r.seconds == plan.run_seconds(r.config, CALIBRATION) for r in empty.runs)
    assert all(r.spent == 0 for r in empty.runs)

    def changed(settings, *args, **changes):
        """The study base as a later version of it might be: another learning rate."""
        return base(settings, *args, **{"learning_rate": 1e-4, **changes})

    monkeypatch.setattr(baseline, "base", changed)
    moved = plan.plan("smoke", only=["01"], store=tmp_path, calibration=CALIBRATION)
    assert moved.counts()["total"]["stored"] == 0 and moved.counts()["total"]["runs"] == 2
    monkeypatch.undo()

    monkeypatch.setattr(store, "BEHAVIOUR", "another")  # the store's state is what the plan reads
    stale = plan.plan("smoke", only=["01"], store=tmp_path, calibration=CALIBRATION)
    assert stale.counts()["total"] == {**stale.counts()["total"], "stored": 0, "to_train": 2, "stale": 1}
    assert "trained by behaviour" in stale.format()
    monkeypatch.undo()

    (run_dir(first, tmp_path) / "metrics.csv.gz").write_text("step\n0\n")
    torn = plan.plan("smoke", only=["01"], store=tmp_path, calibration=CALIBRATION)
    assert torn.counts()["total"] == {**torn.counts()["total"], "stored": 0, "torn": 1, "stale": 0}
    assert "does not match its checksum" in torn.format()


def test_the_cost_rule_scales_the_calibrated_base():
    calibrated = {k: v for k, v in CALIBRATION["config"].items() if k != "num_mini_batches"}
    config = base("full").replace(**calibrated)
    seconds = CALIBRATION["seconds"]
    assert plan.step_seconds(config, CALIBRATION) == pytest.approx(seconds["step"])
    doubled = plan.step_seconds(config.replace(group_size=16), CALIBRATION)
    assert doubled == pytest.approx(2 * seconds["step"])  # every part scales with the completions
    passes = plan.step_seconds(config.replace(num_iterations=4), CALIBRATION)
    assert passes == pytest.approx(seconds["step"] + seconds["train"])  # only the updates repeat
    assert plan.evaluation_seconds(config, CALIBRATION) == pytest.approx(seconds["evaluation"])
    greedy_only = config.replace(val_samples=0)  # 200 of the 400 completions of a pass
    assert plan.evaluation_seconds(greedy_only, CALIBRATION) == pytest.approx(2.0)
    short = config.replace(steps=4, eval_every=2)
    assert plan.evaluations(short) == 3  # before steps 0 and 2, and after the last
    tail = config.replace(steps=60, eval_every=5, eval_start=30)
    assert plan.evaluations(tail) == 8  # before step 0; before 30, 35, ..., 55; after the last
    assert plan.run_seconds(short, CALIBRATION) == pytest.approx(2.0 + 4 * 2.0 + 3 * 4.0)
    assert plan.run_seconds(short, CALIBRATION, measured_step=1.0) == pytest.approx(2.0 + 4 * 1.0 + 3 * 4.0)


def test_bad_profile_or_notebook_names_the_valid_ones():
    with pytest.raises(ValueError, match="unknown profile 'fast'; valid: smoke, full"):
        plan.plan("fast", calibration=CALIBRATION)
    with pytest.raises(ValueError, match="no notebook matches \\['99'\\]; valid: 01_baseline"):
        plan.plan("smoke", only=["99"], calibration=CALIBRATION)
    with pytest.raises(ValueError, match="grpo-lab plan --calibrate"):
        plan.load_calibration(plan.CALIBRATION.with_name("missing.json"))


def test_the_committed_calibration_was_measured_on_the_study_base():
    """Rerun `grpo-lab plan --calibrate` when this fails: the study base changed since."""
    committed = plan.load_calibration()
    current = base("full")
    assert committed["config"] == {f: getattr(current, f) for f in plan.CALIBRATED_FIELDS}
    assert committed["torch_threads"] == 1 and committed["machine"]["cores"] >= 1
    assert all(v > 0 for v in committed["seconds"].values())
    bed = pretrained_bed.base(pretrained_bed.pilot_settings("full"))
    for name, entry in committed.get("models", {}).items():  # a pretrained model: timed on its bed
        assert name == bed.model and entry["config"] == {f: getattr(bed, f) for f in plan.CALIBRATED_FIELDS}


def test_progress_reports_each_run_that_ends_with_the_time_left(tmp_path):
    configs = [base("smoke").replace(seed=s) for s in (0, 1)]
    runs = tuple(
        plan.PlannedRun("01_baseline", c, tmp_path / f"run{c.seed}", False, "missing", "", 3600.0)
        for c in configs
    )
    planned = plan.Plan("smoke", ("01_baseline",), runs, {}, tmp_path, False, CALIBRATION)
    progress = plan.Progress(planned, workers=2)
    assert progress.poll() == [] and progress.left() == "about 1 h 00 min"
    runs[0].path.mkdir()
    (runs[0].path / "summary.json").write_text("{}")
    (line,) = progress.poll()
    assert line.startswith("[1/2 runs] 01_baseline: run0 done;") and line.endswith("left")
    runs[1].path.mkdir()
    (runs[1].path / "error.json").write_text("{}")
    assert progress.poll() == [f"[2/2 runs] 01_baseline: run1 FAILED; {progress.left()} left"]
    assert progress.left() == "about 0 min" and progress.poll() == []


def test_unused_lists_the_store_runs_no_planned_run_names(tmp_path):
    config = base("smoke")
    needed = tmp_path / "grpo-seed0-needed"
    run = plan.PlannedRun("01_baseline", config, needed, True, "current", "", 0.0)
    for name in ("grpo-seed0-needed", "grpo-seed0-old", "dapo-seed1-by-hand"):
        (tmp_path / name).mkdir()
    (tmp_path / "notes.txt").write_text("not a run")
    complete = plan.Plan("smoke", ("01_baseline",), (run,), {}, tmp_path, False, CALIBRATION, True)
    assert complete.unused() == [tmp_path / "dapo-seed1-by-hand", tmp_path / "grpo-seed0-old"]
    for partial in (
        plan.Plan("smoke", ("01_baseline",), (run,), {}, tmp_path, False, CALIBRATION),  # under --only
        plan.Plan("smoke", ("01_baseline",), (run,), {}, tmp_path, True, CALIBRATION, True),
    ):
        with pytest.raises(ValueError, match="plan of every notebook"):
            partial.unused()
    assert plan.plan("smoke", only=["01"], store=tmp_path, calibration=CALIBRATION).complete is False


@pytest.mark.slow
def test_calibrate_times_the_study_base_and_the_plan_reads_it(tmp_path):
    path = tmp_path / "calibration.json"
    record = plan.calibrate(path, steps=3)
    assert json.loads(path.read_text()) == record == plan.load_calibration(path)
    assert record["config"] == {f: getattr(base("full"), f) for f in plan.CALIBRATED_FIELDS}
    assert record["torch_threads"] == 1 and "training steps" in record["timed"]
    seconds = record["seconds"]
    assert all(math.isfinite(v) and v > 0 for v in seconds.values())
    assert seconds["sample"] + seconds["logprob"] + seconds["train"] <= seconds["step"]
    with pytest.raises(ValueError, match="at least 3 steps"):
        plan.calibrate(path, steps=2)


def test_the_full_profile_stores_in_the_repository_and_an_environment_variable_moves_any_store(
    tmp_path, monkeypatch
):
    from grpo_lab.analysis.plots import project_root
    from grpo_lab.profiles import PROFILES, STORE_ENV

    monkeypatch.delenv(STORE_ENV, raising=False)
    assert PROFILES["full"].runs_dir() == project_root() / "results"
    assert PROFILES["smoke"].runs_dir() == project_root() / "runs" / "smoke"
    monkeypatch.setenv(STORE_ENV, str(tmp_path / "fresh"))
    assert PROFILES["full"].runs_dir() == PROFILES["smoke"].runs_dir() == tmp_path / "fresh"


def test_a_pretrained_model_is_priced_from_its_own_calibration_or_not_at_all():
    bed = pretrained_bed.base(pretrained_bed.pilot_settings("full"))
    with pytest.raises(ValueError, match="grpo-lab plan --calibrate --model smollm2-135m"):
        plan.step_seconds(bed, CALIBRATION)
    fields = {f: getattr(bed, f) for f in plan.CALIBRATED_FIELDS}
    seconds = {"setup": 9.0, "step": 45.0, "sample": 11.0, "logprob": 8.0, "train": 26.0, "evaluation": 90.0}
    priced = plan.merged(CALIBRATION, {"config": fields, "seconds": seconds}, "smollm2-135m")
    assert plan.step_seconds(bed, priced) == pytest.approx(45.0)
    assert plan.evaluation_seconds(bed, priced) == pytest.approx(90.0)
    assert plan.step_seconds(bed.replace(group_size=16), priced) == pytest.approx(90.0)
    assert plan.step_seconds(base("full"), priced) == plan.step_seconds(base("full"), CALIBRATION)
    again = plan.merged(priced, {**CALIBRATION, "date": "later"}, None)  # the base again: the model stays
    assert again["date"] == "later" and again["models"] == priced["models"]
