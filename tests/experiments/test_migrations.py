"""Store maintenance. Renaming a preset in a run store: the runs stored under the old name move to the
new name and key with config.json and the seal updated, stay as current (or as stale, or torn) as they
were, and a design that asks for the new preset loads them without training. Packing a store: the runs
sealed with loose records get them packed, the same records and state; a torn one is left alone."""

import fcntl
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from grpo_lab import experiments
from grpo_lab.cli import main
from grpo_lab.experiments.designs import Point
from grpo_lab.experiments.migrations import pack_store, rename_preset
from grpo_lab.experiments.store import BEHAVIOUR, NO_TRAIN, ensure, is_current, run_dir, state
from grpo_lab.presets import preset
from grpo_lab.runlog import MANIFEST, PACK, read_config, read_json_record, read_start, records

TINY = dict(task="judge", steps=2, prompts_per_step=2, group_size=2, max_completion_length=10, val_size=4)
TINY.update(eval_every=2, progress=False)


def old_dapo(model: str, **changes):
    """A config of the `dapo` preset as it was before the rename: today's dapo_loss, named dapo."""
    return preset("dapo_loss", model=model, **{**TINY, **changes}).replace(preset="dapo")


@pytest.fixture(scope="module")
def trained(tiny_model_path, tmp_path_factory) -> Path:
    """A store with two runs of the old `dapo` (seeds 0 and 1), one of today's `dapo` (the full
    recipe) and one of grpo, trained once."""
    root = tmp_path_factory.mktemp("trained") / "store"
    for config in (
        old_dapo(tiny_model_path),
        old_dapo(tiny_model_path, seed=1),
        preset("dapo", model=tiny_model_path, **TINY),
        preset("grpo", model=tiny_model_path, **TINY),
    ):
        assert ensure(config, root) == "trained"
    return root


@pytest.fixture
def store(trained, tmp_path) -> Path:
    """A copy of the trained store, for a test to change."""
    return Path(shutil.copytree(trained, tmp_path / "store"))


def files(path: Path) -> dict[str, bytes]:
    """The run's files and its records, packed ones too, by name."""
    return {**{p.name: p.read_bytes() for p in sorted(path.iterdir())}, **records(path)}


def test_runs_move_to_the_new_name_and_load_without_training(store, tiny_model_path, monkeypatch):
    sources = [run_dir(old_dapo(tiny_model_path, seed=s), store) for s in (0, 1)]
    targets = [run_dir(preset("dapo_loss", model=tiny_model_path, seed=s, **TINY), store) for s in (0, 1)]
    full = run_dir(preset("dapo", model=tiny_model_path, **TINY), store)
    before = {path: files(path) for path in [*sources, full]}
    manifests = [json.loads((path / MANIFEST).read_text()) for path in sources]

    done = rename_preset(store, "dapo", "dapo_loss")

    assert [(r.source, r.target, r.action, r.state) for r in done if r.action == "move"] == [
        (s, t, "move", "current") for s, t in sorted(zip(sources, targets))
    ]
    kept = [r for r in done if r.action == "keep"]
    assert [r.source for r in kept] == [full] and "a run of today's dapo" in kept[0].note
    assert files(full) == before[full]  # today's dapo is left alone
    for source, target, manifest in zip(sources, targets, manifests):
        assert not source.exists() and is_current(target)
        assert read_config(target) == {**read_config_from(before[source]), "preset": "dapo_loss"}
        moved = json.loads((target / MANIFEST).read_text())
        assert moved["behaviour"] == manifest["behaviour"] == BEHAVIOUR and moved["rows"] == manifest["rows"]
        assert moved["files"][PACK] != manifest["files"][PACK]  # the pack that holds config.json
        assert {k: v for k, v in moved["files"].items() if k != PACK} == {
            k: v for k, v in manifest["files"].items() if k != PACK
        }
        kept_files = set(before[source]) - {"config.json", PACK, MANIFEST}
        assert {n: b for n, b in files(target).items() if n in kept_files} == {
            n: before[source][n] for n in kept_files
        }
        start = json.loads(before[source]["config.json"])["start"]
        assert read_start(target) == start
    assert not [p for p in store.iterdir() if p.name.endswith(".renaming")]

    monkeypatch.setenv(NO_TRAIN, "1")  # loading must not train
    point = Point("dapo_loss", {}, preset("dapo_loss", model=tiny_model_path, **TINY))
    result = experiments.run_design([point], [0, 1], store, workers=1, progress=False)
    assert result.counts() == {"loaded": 2, "trained": 0, "failed": 0}
    assert set(result.runs["path"]) == {str(t.resolve()) for t in targets}
    assert rename_preset(store, "dapo", "dapo_loss") == [kept[0]]  # a second rename has nothing to move


def read_config_from(stored: dict[str, bytes]) -> dict:
    return json.loads(stored["config.json"])["config"]


def test_a_dry_run_lists_the_moves_and_changes_nothing(store, tiny_model_path, capsys):
    before = {p.name: files(p) for p in store.iterdir() if p.is_dir()}
    planned = rename_preset(store, "dapo", "dapo_loss", dry_run=True)
    assert [r.action for r in planned].count("move") == 2
    assert {p.name: files(p) for p in store.iterdir() if p.is_dir()} == before
    assert main(["store", "rename-preset", "dapo", "dapo_loss", "--root", str(store), "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert out.count("move   dapo-seed") == 2 and out.count("keep   dapo-seed0") == 1
    assert "-> dapo_loss-seed0-" in out and "would move 2 runs of 'dapo' to 'dapo_loss'" in err
    assert {p.name: files(p) for p in store.iterdir() if p.is_dir()} == before


def test_the_cli_moves_them(store, tiny_model_path, capsys):
    assert main(["store", "rename-preset", "dapo", "dapo_loss", "--root", str(store)]) == 0
    assert "moved 2 runs" in capsys.readouterr().err
    assert is_current(run_dir(preset("dapo_loss", model=tiny_model_path, seed=1, **TINY), store))


def test_an_existing_target_refuses_the_whole_rename(store, tiny_model_path, capsys):
    target = run_dir(preset("dapo_loss", model=tiny_model_path, seed=1, **TINY), store)
    shutil.copytree(run_dir(preset("grpo", model=tiny_model_path, **TINY), store), target)
    before = {p.name: files(p) for p in store.iterdir() if p.is_dir()}
    with pytest.raises(
        ValueError, match=f"(?s)refused for 1 runs.*{target.name} exists and holds another run"
    ):
        rename_preset(store, "dapo", "dapo_loss")
    assert {p.name: files(p) for p in store.iterdir() if p.is_dir()} == before  # nothing moved
    assert main(["store", "rename-preset", "dapo", "dapo_loss", "--root", str(store)]) == 2
    assert "exists and holds another run" in capsys.readouterr().err


def test_an_interrupted_move_is_finished(store, trained, tiny_model_path):
    """A move cut after its copy was renamed into place, before the source was removed."""
    source = run_dir(old_dapo(tiny_model_path), store)
    rename_preset(store, "dapo", "dapo_loss")
    target = run_dir(preset("dapo_loss", model=tiny_model_path, **TINY), store)
    shutil.copytree(trained / source.name, source)  # the source back beside its move, as it was
    done = rename_preset(store, "dapo", "dapo_loss")
    assert [(r.source, r.action) for r in done if r.action != "keep"] == [(source, "finish")]
    assert not source.exists() and is_current(target)


def test_a_stale_or_torn_run_stays_what_it_was(store, tiny_model_path):
    stale, torn = (run_dir(old_dapo(tiny_model_path, seed=s), store) for s in (0, 1))
    manifest = json.loads((stale / MANIFEST).read_text())
    (stale / MANIFEST).write_text(json.dumps({**manifest, "behaviour": "an-older-one"}))
    (torn / "samples.jsonl").write_text("changed\n")
    done = {r.source: r for r in rename_preset(store, "dapo", "dapo_loss")}
    assert (done[stale].state, done[torn].state) == ("stale", "torn")
    assert state(done[stale].target)[0] == "stale" and state(done[torn].target)[0] == "torn"
    assert json.loads((done[stale].target / MANIFEST).read_text())["behaviour"] == "an-older-one"


def test_a_run_being_trained_stops_the_rename(store, tiny_model_path):
    source = run_dir(old_dapo(tiny_model_path, seed=1), store)
    with open(store / f".{source.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process training it (flock is per open file)
        with pytest.raises(ValueError, match=f"{source.name} is being trained by another process"):
            rename_preset(store, "dapo", "dapo_loss")
    assert source.exists() and not run_dir(old_dapo(tiny_model_path), store).exists()  # seed 0 moved first
    rename_preset(store, "dapo", "dapo_loss")  # the rest, once it is done
    assert not source.exists()


def test_runs_that_cannot_be_told_or_found_refuse_the_rename(store, tiny_model_path):
    source = run_dir(old_dapo(tiny_model_path), store)
    elsewhere = store / "dapo-seed0-0000000000000000"
    source.rename(elsewhere)
    with pytest.raises(ValueError, match="stored today under dapo-seed0-.*move it out of the store"):
        rename_preset(store, "dapo", "dapo_loss")
    shutil.rmtree(elsewhere)
    with pytest.raises(ValueError, match="unknown preset 'dapo_two'"):
        rename_preset(store, "dapo", "dapo_two")
    with pytest.raises(ValueError, match="renamed to itself"):
        rename_preset(store, "dapo_loss", "dapo_loss")
    # the other way round, today's dapo_loss runs would be neither dapo_loss nor dapo: refused
    rename_preset(store, "dapo", "dapo_loss")
    other = run_dir(preset("dapo_loss", model=tiny_model_path, seed=1, **TINY), store)
    config = read_json_record(other, "config.json")
    config["config"]["overlong_buffer"] = 4
    (other / "config.json").write_text(json.dumps(config))  # loose, over the packed one
    with pytest.raises(ValueError, match="neither today's 'dapo_loss' nor 'dapo'"):
        rename_preset(store, "dapo_loss", "dapo")


def test_a_gone_task_file_is_found_under_the_given_directory(tiny_model_path, tmp_path):
    data = Path(__file__).resolve().parents[1] / "data" / "your_task.jsonl"
    first = tmp_path / "first" / "data" / "task.jsonl"
    first.parent.mkdir(parents=True)
    shutil.copy(data, first)
    root = tmp_path / "store"
    ensure(old_dapo(tiny_model_path, task=f"file:{first}"), root)
    moved = tmp_path / "checkout" / "data" / "task.jsonl"
    moved.parent.mkdir(parents=True)
    shutil.move(first, moved)
    with pytest.raises(ValueError, match="task file .*first/data/task.jsonl is gone"):
        rename_preset(root, "dapo", "dapo_loss", task_dirs=[tmp_path / "nowhere"])
    (done,) = rename_preset(root, "dapo", "dapo_loss", task_dirs=[tmp_path / "checkout"])
    assert done.action == "move" and f"found as {moved}" in done.note
    assert read_config(done.target)["task"] == f"file:{first}"  # the config keeps what it recorded
    assert done.target == run_dir(
        preset("dapo_loss", model=tiny_model_path, **{**TINY, "task": f"file:{moved}"}), root
    )
    assert is_current(done.target)


def unpacked(path: Path) -> Path:
    """The run at `path` as sealed before records were packed: its records loose, each in the manifest."""
    manifest = json.loads((path / MANIFEST).read_text())
    for name, data in records(path).items():
        (path / name).write_bytes(data)
        manifest["files"][name] = hashlib.sha256(data).hexdigest()
    (path / PACK).unlink()
    del manifest["files"][PACK]
    (path / MANIFEST).write_text(json.dumps(manifest))
    return path


def test_packing_a_store_packs_the_runs_sealed_loose_and_leaves_a_torn_one(store, tiny_model_path, capsys):
    old, torn = (unpacked(run_dir(old_dapo(tiny_model_path, seed=s), store)) for s in (0, 1))
    (torn / "samples.jsonl").write_text("changed\n")
    before = {p: files(p) for p in (old, torn)}
    assert is_current(old) and state(torn)[0] == "torn"

    planned = pack_store(store, dry_run=True)
    assert planned == [(old, True, "would pack 3 records"), (torn, False, planned[1][2])]
    assert planned[1][2].startswith("left loose: torn") and {p: files(p) for p in (old, torn)} == before

    assert main(["store", "pack", "--root", str(store)]) == 1  # the torn run is left loose: exit 1
    assert "1 runs packed" in capsys.readouterr().err
    assert sorted(p.name for p in old.iterdir()) == [MANIFEST, "metrics.csv.gz", PACK]
    assert records(old) == records(run_dir(old_dapo(tiny_model_path, seed=0), store)) and is_current(old)
    assert json.loads((old / MANIFEST).read_text())["behaviour"] == BEHAVIOUR
    assert files(torn) == before[torn] and state(torn)[0] == "torn"
    assert pack_store(store) == [(torn, False, planned[1][2])]  # nothing more to pack
