"""Sweeps, ablations and sensitivity scans: the run store (load, resume, failures), designs, the
local process pool against in-process runs, Ray, and that the prompts depend only on the seed."""

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from grpo_lab import experiments, preset
from grpo_lab.experiments import ablation_points, grid_points, preset_overrides, run_dir
from grpo_lab.models import embedded
from grpo_lab.runlog import PACK, read_config, read_samples


def comparable(df: pd.DataFrame) -> pd.DataFrame:
    """Metrics without wall times and process-wide memory, sorted by run and step."""
    df = df.drop(columns=[c for c in df.columns if c.startswith("time/") or c == "cost/peak_rss_mb"])
    return df.sort_values(["key", "step"], ignore_index=True)


# --- designs (no training) -------------------------------------------------------------------------


def test_preset_grid_keeps_the_base_changes():
    base = preset("grpo", model="some/model", steps=7, kl_coef=0.1)
    assert preset_overrides(base) == {"model": "some/model", "steps": 7, "kl_coef": 0.1}
    points = grid_points(base, {"preset": ["grpo", "dapo_loss"], "learning_rate": [1e-4, 1e-3]})
    assert [p.label for p in points] == [
        "grpo, learning_rate=0.0001",
        "grpo, learning_rate=0.001",
        "dapo_loss, learning_rate=0.0001",
        "dapo_loss, learning_rate=0.001",
    ]
    dapo_loss = points[2].config
    fields = (dapo_loss.preset, dapo_loss.eps_high, dapo_loss.steps, dapo_loss.model, dapo_loss.learning_rate)
    assert fields == ("dapo_loss", 0.28, 7, "some/model", 1e-4)
    assert dapo_loss.kl_coef == 0.1  # the base's own change wins over the preset's
    assert points[2].columns == {"preset": "dapo_loss", "learning_rate": 1e-4}
    assert [p.label for p in grid_points(base, {})] == ["grpo"]


@pytest.mark.parametrize(
    "grid",
    [{"nope": [1]}, {"seed": [0, 1]}, {"kl_coef": []}, {"preset": "dapo_loss"}, {"kl_coef": [-1.0]}],
)
def test_bad_grids_fail_before_any_training(grid):
    with pytest.raises(ValueError):
        grid_points(preset("grpo"), grid)


COMPONENTS = {
    "kl": ({"kl_coef": 0.04, "kl_placement": "loss"}, {"kl_coef": 0.0, "kl_placement": "off"}),
    "clip_higher": ({"eps_high": 0.28}, {"eps_high": 0.2}),
}


def test_ablation_modes_share_one_components_dict():
    base = preset("grpo")
    loo = ablation_points(base, COMPONENTS, "leave-one-out")
    assert [p.label for p in loo] == ["all", "-kl", "-clip_higher"]
    assert [p.columns["component"] for p in loo] == ["none", "kl", "clip_higher"]
    assert (loo[0].config.kl_coef, loo[0].config.eps_high) == (0.04, 0.28)
    assert (loo[1].config.kl_coef, loo[1].config.eps_high) == (0.0, 0.28)
    assert (loo[2].config.kl_coef, loo[2].config.eps_high) == (0.04, 0.2)
    aoi = ablation_points(base, COMPONENTS, "add-one-in")
    assert [p.label for p in aoi] == ["none", "+kl", "+clip_higher"]
    assert (aoi[0].config.kl_placement, aoi[0].config.eps_high) == ("off", 0.2)
    assert (aoi[1].config.kl_placement, aoi[1].config.eps_high) == ("loss", 0.2)
    assert (aoi[2].config.kl_placement, aoi[2].config.eps_high) == ("off", 0.28)
    with pytest.raises(ValueError, match="mode"):
        ablation_points(base, COMPONENTS, "one-by-one")


def test_a_component_given_by_its_on_overrides_is_off_at_the_config_defaults():
    points = ablation_points(
        preset("grpo"), {"clip_higher": {"eps_high": 0.28}, "adv_clip": {"adv_clip": 2.0}}
    )
    assert [(p.config.eps_high, p.config.adv_clip) for p in points] == [(0.28, 2.0), (0.2, 2.0), (0.28, 0.0)]


# --- running ---------------------------------------------------------------------------------------


def test_sweep_loads_finished_runs_and_resumes_only_what_is_missing(tiny_config, tmp_path):
    base = tiny_config()
    grid = {"preset": ["grpo", "dapo_loss"]}
    first = experiments.sweep(base, grid, [0, 1], tmp_path, workers=1, progress=False)
    assert first.counts() == {"loaded": 0, "trained": 4, "failed": 0}
    assert list(first.metrics.columns[:4]) == ["label", "preset", "seed", "key"]
    assert set(first.metrics["label"]) == {"grpo", "dapo_loss"}
    assert len(first.metrics) == 4 * (base.steps + 1)
    assert first.runs["val/reward_end"].notna().all()  # summary.json fields per run

    # an interrupted sweep: one run without summary.json (its records gone), one run never started
    paths = [Path(p) for p in first.runs["path"]]
    (paths[0] / PACK).unlink()
    shutil.rmtree(paths[3])
    again = experiments.sweep(base, grid, [0, 1], tmp_path, workers=1, progress=False)
    assert again.counts() == {"loaded": 2, "trained": 2, "failed": 0}
    assert set(again.runs.loc[again.runs["status"] == "trained", "path"]) == {str(paths[0]), str(paths[3])}
    pd.testing.assert_frame_equal(comparable(first.metrics), comparable(again.metrics))
    assert experiments.sweep(base, grid, [0, 1], tmp_path, progress=False).counts()["loaded"] == 4


def test_a_torn_or_stale_run_is_reported_and_trained_again_never_loaded(tiny_config, tmp_path, monkeypatch):
    """A run whose metrics were cut short, one whose metrics were deleted and one sealed by another
    behaviour of the training code are each named in a warning and retrained; their metrics come
    back whole."""
    base = tiny_config()
    grid = {"preset": ["grpo", "dapo_loss"]}
    first = experiments.sweep(base, grid, [0, 1], tmp_path, workers=1, progress=False)
    paths = [Path(p) for p in first.runs["path"]]
    assert {p.name for p in paths[0].iterdir()} >= {"metrics.csv.gz", "manifest.json", PACK}
    cut = paths[0] / "metrics.csv.gz"
    cut.write_bytes(cut.read_bytes()[:300])
    (paths[1] / "metrics.csv.gz").unlink()
    manifest = json.loads((paths[2] / "manifest.json").read_text())
    (paths[2] / "manifest.json").write_text(json.dumps({**manifest, "behaviour": "an-older-one"}))
    with pytest.warns(UserWarning, match="3 stored runs may not be used") as caught:
        again = experiments.sweep(base, grid, [0, 1], tmp_path, workers=1, progress=False)
    message = str(caught[0].message)
    assert "does not match its checksum" in message and "is missing" in message and "an-older-one" in message
    assert again.counts() == {"loaded": 1, "trained": 3, "failed": 0}
    pd.testing.assert_frame_equal(comparable(first.metrics), comparable(again.metrics))


def test_a_failing_run_is_recorded_and_the_sweep_goes_on(tiny_model_path, tiny_config, tmp_path):
    base = tiny_config()
    grid = {"model": [tiny_model_path, "./does-not-exist"]}
    with pytest.warns(UserWarning, match="1 of 2 runs failed"):
        result = experiments.sweep(base, grid, [0], tmp_path, workers=1, progress=False)
    assert result.counts() == {"loaded": 0, "trained": 1, "failed": 1}
    failed = result.failures.iloc[0]
    assert failed["model"] == "./does-not-exist" and "does-not-exist" in failed["error"]
    error = experiments.read_error(failed["path"])
    assert "Traceback" in error["traceback"] and error["type"] in failed["error"]
    assert set(result.metrics["model"]) == {tiny_model_path}

    # the failure is tried again next time, the finished run is loaded
    with pytest.warns(UserWarning):
        again = experiments.sweep(base, grid, [0], tmp_path, workers=1, progress=False)
    assert again.counts() == {"loaded": 1, "trained": 0, "failed": 1}


def test_pool_and_sequential_give_the_same_metrics(tiny_config, tmp_path):
    base = tiny_config()
    grid = {"preset": ["grpo", "dapo_loss"]}
    pooled = experiments.sweep(base, grid, [0, 1], tmp_path / "pool", workers=2, progress=False)
    serial = experiments.sweep(base, grid, [0, 1], tmp_path / "serial", workers=1, progress=False)
    assert pooled.counts()["trained"] == serial.counts()["trained"] == 4
    pd.testing.assert_frame_equal(comparable(pooled.metrics), comparable(serial.metrics))


def test_same_seed_same_prompts_whatever_the_scheme(tiny_config, tmp_path):
    base = tiny_config(samples_every=1, samples_per_log=16)  # every completion of every step
    result = experiments.sweep(
        base, {"preset": ["grpo", "scheme_c"]}, [0, 1], tmp_path, workers=1, progress=False
    )

    def prompts(run) -> list[list[str]]:
        rows = read_samples(run.path)
        return [[r["prompt"] for r in rows if r["step"] == step] for step in range(base.steps)]

    runs = {(r.preset, r.seed): prompts(r) for r in result.runs.itertuples()}
    assert all(len(step) == 16 for step in runs["grpo", 0])
    assert runs["grpo", 0] == runs["scheme_c", 0] and runs["grpo", 1] == runs["scheme_c", 1]
    assert runs["grpo", 0] != runs["grpo", 1]


def test_ablate_and_sensitivity_label_their_runs(tiny_config, tmp_path):
    base = tiny_config(steps=2, eval_every=2)
    ablation = experiments.ablate(
        base, COMPONENTS, [0], tmp_path, mode="add-one-in", workers=1, progress=False
    )
    assert list(ablation.runs["label"]) == ["none", "+kl", "+clip_higher"]
    assert set(ablation.metrics["component"]) == {"none", "kl", "clip_higher"}
    scan = experiments.sensitivity(
        base, "learning_rate", [1e-4, 1e-3], [0], tmp_path, workers=1, progress=False
    )
    assert list(scan.runs["learning_rate"]) == [1e-4, 1e-3]
    assert set(scan.metrics["label"]) == {"learning_rate=0.0001", "learning_rate=0.001"}


def test_runs_on_another_build_of_the_embedded_model_are_stored_apart(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_LAB_CACHE", str(tmp_path / "cache"))
    config, elsewhere = preset("grpo"), preset("grpo", model=str(tmp_path))
    before, before_elsewhere = run_dir(config, tmp_path), run_dir(elsewhere, tmp_path)
    monkeypatch.setitem(embedded.WARM_START, "lr", 5e-4)
    assert run_dir(config, tmp_path) != before
    assert run_dir(elsewhere, tmp_path) == before_elsewhere  # a model given by path is not the embedded one
    monkeypatch.undo()
    monkeypatch.setenv("GRPO_LAB_CACHE", str(tmp_path / "cache"))
    assert run_dir(config, tmp_path) == before
    assert not (tmp_path / "cache").exists()  # naming the directory builds nothing


def test_run_seeds_stores_and_loads(tiny_config, tmp_path):
    config = tiny_config()
    df = experiments.run_seeds(config, [0, 1], root=tmp_path, label="base")
    assert set(df["seed"]) == {0, 1} and set(df["label"]) == {"base"}
    assert read_config(run_dir(config.replace(seed=1), tmp_path))["seed"] == 1
    pd.testing.assert_frame_equal(df, experiments.run_seeds(config, [0, 1], root=tmp_path, label="base"))


@pytest.mark.slow
def test_ray_gives_the_same_metrics_as_sequential(tiny_config, tmp_path):
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'grpo_lab[ray]')")
    base = tiny_config()
    grid = {"preset": ["grpo", "dapo_loss"]}
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        on_ray = experiments.sweep(base, grid, [0], tmp_path / "ray", backend="ray", progress=False)
    finally:
        ray.shutdown()
    serial = experiments.sweep(base, grid, [0], tmp_path / "serial", workers=1, progress=False)
    assert on_ray.counts()["trained"] == 2
    pd.testing.assert_frame_equal(comparable(on_ray.metrics), comparable(serial.metrics))


def test_run_key_holds_the_task_files_content(tmp_path, tiny_model_path):
    data = tmp_path / "t.jsonl"
    rows = [
        {"prompt": f"reverse {n}:", "answer": str(n)[::-1], "solution": str(n)[::-1]} for n in range(100, 140)
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = preset("grpo", task=f"file:{data}", model=tiny_model_path)
    before = run_dir(config, tmp_path)
    assert run_dir(config, tmp_path) == before and before.name.startswith("grpo-seed0-")
    moved = tmp_path / "moved" / "t.jsonl"
    moved.parent.mkdir()
    moved.write_text(data.read_text())
    assert run_dir(config.replace(task=f"file:{moved}"), tmp_path) == before  # a moved store keeps its runs
    assert embedded.embedded_dir(f"file:{moved}") == embedded.embedded_dir(f"file:{data}")
    data.write_text("".join(json.dumps({**r, "answer": "0"}) + "\n" for r in rows))
    assert run_dir(config, tmp_path) != before
    assert run_dir(preset("grpo", model=tiny_model_path), tmp_path).name.endswith(
        config.replace(task="arith").key()
    )
