"""The run store trains a run once: two processes that ask for the same run at the same moment train it
once, the second waits and loads it (a run trained twice at once into one directory corrupts it)."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

RACER = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path
    from grpo_lab import Config
    from grpo_lab.training import trainer
    from grpo_lab.experiments import store

    root, log, ready = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])

    def slow_train(config, out, callbacks=(), findings=None):
        with log.open("a") as file:
            file.write(f"{os.getpid()}\\n")
        time.sleep(1.0)  # long enough for the other process to ask for the run meanwhile
        out.mkdir(parents=True)
        record = {"config": config.to_dict(), "start": {"init_sha256": "x", "reference_sha256": None}}
        (out / "config.json").write_text(json.dumps(record))
        (out / "metrics.jsonl").write_text("")
        (out / "summary.json").write_text("{}")

    trainer.train = slow_train
    config = Config(model="tiny-model-not-loaded", task="judge", steps=1)
    (ready / str(os.getpid())).touch()
    while len(list(ready.iterdir())) < 2:  # both ask at the same moment
        time.sleep(0.01)
    print(store.ensure(config, root))
    """
)


@pytest.mark.slow
def test_two_processes_asking_for_one_run_train_it_once(tmp_path):
    root, log, ready = tmp_path / "runs", tmp_path / "trainings.log", tmp_path / "ready"
    ready.mkdir()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(root), str(log), str(ready)], env=env, stdout=subprocess.PIPE
        )
        for _ in range(2)
    ]
    statuses = sorted(racer.communicate(timeout=120)[0].decode().strip() for racer in racers)
    assert [racer.returncode for racer in racers] == [0, 0]
    assert statuses == ["loaded", "trained"]
    assert len(log.read_text().splitlines()) == 1


def test_no_train_refuses_a_run_the_store_lacks_and_names_it(tmp_path, monkeypatch):
    from grpo_lab import Config
    from grpo_lab.experiments import execution, store

    config = Config(model="tiny-model-not-loaded", task="judge", steps=1)
    monkeypatch.setenv(store.NO_TRAIN, "1")
    with pytest.raises(store.TrainingForbidden, match=r"1 runs are not current .* GRPO_LAB_NO_TRAIN forbids"):
        store.ensure(config, tmp_path)
    with pytest.raises(store.TrainingForbidden, match=store.run_dir(config, tmp_path).name):
        execution.execute([config], tmp_path, workers=1, progress=False)
    assert not any(tmp_path.iterdir())  # nothing written
    monkeypatch.setenv(store.NO_TRAIN, "0")
    store.refuse_training([config], tmp_path)  # '0' allows training


def test_a_run_records_its_start_and_one_from_other_weights_is_stale_and_retrained(tmp_path):
    """A run on the embedded model records the sha256 of the weights it started from, equal to the
    shipped model's; the same run re-recorded as starting elsewhere is reported stale and trained
    again; so is a run that records no start at all."""
    from grpo_lab import preset
    from grpo_lab.experiments import store
    from grpo_lab.models.embedded import shipped_dir, start_sha256
    from grpo_lab.runlog import CONFIG, MANIFEST, read_json_record, read_start, seal

    assert shipped_dir("judge") is not None
    config = preset("grpo", task="judge", steps=1, prompts_per_step=2, group_size=2, val_size=4,
                    val_sampled_size=4, max_completion_length=6, eval_every=1, progress=False)  # fmt: skip
    assert store.ensure(config, tmp_path) == "trained"
    path = store.run_dir(config, tmp_path)
    start = read_start(path)
    assert start == {"init_sha256": start_sha256("judge"), "reference_sha256": start_sha256("judge")}
    assert store.state(path) == ("current", "")

    def rewrite(start):
        record = read_json_record(path, CONFIG)
        (path / CONFIG).write_text(json.dumps({**record, "start": start}))  # loose: the seal packs it
        seal(path, json.loads((path / MANIFEST).read_text())["behaviour"])

    rewrite({"init_sha256": "0" * 64, "reference_sha256": None})
    found, why = store.state(path)
    assert found == "stale" and "started from weights 0000000000000000" in why
    assert store.unusable([path]) == {path: f"stale: {why}"}
    assert store.ensure(config, tmp_path) == "trained"
    assert read_start(path)["init_sha256"] == start_sha256("judge")
    rewrite(None)
    assert store.state(path)[0] == "stale" and not store.is_current(path)


def test_a_failed_attempt_never_writes_into_a_run_that_is_stored(tmp_path, monkeypatch):
    """A process whose attempt failed (its worker died before reaching the run's lock) while another
    process trained the run reports its failure, but leaves the sealed run as it is; a run that is not
    stored gets the failure recorded in its error.json."""
    from grpo_lab import Config
    from grpo_lab.experiments import store
    from grpo_lab.training import trainer

    def fake_train(config, out, callbacks=(), findings=None):
        out.mkdir(parents=True)
        record = {"config": config.to_dict(), "start": {"init_sha256": "x", "reference_sha256": None}}
        (out / "config.json").write_text(json.dumps(record))
        (out / "metrics.jsonl").write_text("")
        (out / "summary.json").write_text("{}")

    monkeypatch.setattr(trainer, "train", fake_train)
    stored, missing = (Config(model="tiny-model-not-loaded", task="judge", steps=n) for n in (1, 2))
    assert store.ensure(stored, tmp_path) == "trained"
    path = store.run_dir(stored, tmp_path)
    message = store.record_failure(path, RuntimeError("the worker process died"))
    assert message == "RuntimeError: the worker process died"
    assert store.read_error(path) is None and store.is_current(path)
    other = store.run_dir(missing, tmp_path)
    store.record_failure(other, RuntimeError("the worker process died"))
    assert store.read_error(other)["message"] == "the worker process died"
