import gzip
import json
import math

import pytest

from grpo_lab.runlog import (
    CONFIG,
    MANIFEST,
    METRICS,
    METRICS_TABLE,
    PACK,
    SAMPLES,
    SUMMARY,
    RunWriter,
    environment,
    is_finished,
    read_config,
    read_json_record,
    read_jsonl,
    read_metrics,
    read_samples,
    read_start,
    read_summary,
    records,
    replace_record,
    run_state,
    seal,
    write_json_atomic,
)

ENV = {"torch": "x", "git_commit": None}


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_writer_flushes_each_line_before_finish(tmp_path):
    out = tmp_path / "run"
    start = {"init_sha256": "a" * 64, "reference_sha256": None}
    w = RunWriter(out, {"seed": 1}, ENV, start=start)
    assert json.loads((out / CONFIG).read_text()) == {
        "config": {"seed": 1},
        "environment": ENV,
        "start": start,
    }
    assert read_start(out) == start
    assert read_config(out) == {"seed": 1}
    w.log({"step": 0, "reward": 0.5})
    assert lines(out / METRICS) == [{"step": 0, "reward": 0.5}]
    w.log({"step": 1, "reward": 0.25})
    assert [r["step"] for r in read_jsonl(out / METRICS)] == [0, 1]
    w.samples(0, [{"prompt": "1+1=", "completion": "2"}, {"prompt": "2+2=", "completion": "5"}])
    assert lines(out / SAMPLES) == [
        {"step": 0, "prompt": "1+1=", "completion": "2"},
        {"step": 0, "prompt": "2+2=", "completion": "5"},
    ]
    assert not is_finished(out) and read_summary(out) is None
    w.finish({"steps": 2, "val/accuracy_end": 0.5})
    assert is_finished(out)
    assert read_summary(out) == {"steps": 2, "val/accuracy_end": 0.5}
    assert list(read_metrics(out)["reward"]) == [0.5, 0.25]
    assert not list(out.glob("*.tmp"))  # atomic write leaves no temporary behind


def test_non_finite_values_become_null(tmp_path):
    w = RunWriter(tmp_path, {}, ENV)
    w.log({"step": 0, "a": math.nan, "b": math.inf, "c": -math.inf, "d": 1.5})
    w.finish({"x": math.nan, "y": 2.0})
    text = (tmp_path / METRICS).read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert lines(tmp_path / METRICS) == [{"step": 0, "a": None, "b": None, "c": None, "d": 1.5}]
    assert json.loads((tmp_path / SUMMARY).read_text(), parse_constant=pytest.fail) == {"x": None, "y": 2.0}


def test_second_writer_refuses_a_dir_with_metrics(tmp_path):
    w = RunWriter(tmp_path, {"seed": 0}, ENV)
    w.log({"step": 0})
    w.close()
    with pytest.raises(FileExistsError, match="already holds metrics"):
        RunWriter(tmp_path, {"seed": 1}, ENV)
    assert read_config(tmp_path) == {"seed": 0}  # the first run's config is untouched
    assert lines(tmp_path / METRICS) == [{"step": 0}]


def test_writer_into_an_empty_run_dir_is_fine(tmp_path):
    RunWriter(tmp_path, {}, ENV).close()  # created but nothing logged
    w = RunWriter(tmp_path, {"seed": 2}, ENV)
    w.log({"step": 0})
    w.close()
    assert read_config(tmp_path) == {"seed": 2}


def test_write_json_atomic_replaces(tmp_path):
    path = tmp_path / "x.json"
    write_json_atomic(path, {"a": 1})
    write_json_atomic(path, {"b": 2})
    assert json.loads(path.read_text()) == {"b": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]


def test_read_jsonl_skips_torn_last_line_with_warning(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 0}\n{"step": 1}\n{"step": 2, "rew')
    with pytest.warns(UserWarning, match="torn last line"):
        rows = read_jsonl(path)
    assert rows == [{"step": 0}, {"step": 1}]


def test_read_jsonl_raises_on_corrupt_middle_line(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 0}\n{"step": \n{"step": 2}\n')
    with pytest.raises(ValueError, match="line 2 is not valid JSON"):
        read_jsonl(path)


def test_read_jsonl_blank_lines_and_missing_file(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 0}\n\n{"step": 1}\n')
    assert read_jsonl(path) == [{"step": 0}, {"step": 1}]
    assert read_jsonl(tmp_path / "absent.jsonl") == []


def test_is_finished_only_with_summary(tmp_path):
    assert not is_finished(tmp_path)
    (tmp_path / METRICS).write_text('{"step": 0}\n')
    assert not is_finished(tmp_path)
    write_json_atomic(tmp_path / SUMMARY, {"steps": 1})
    assert is_finished(tmp_path)


def test_environment_records_versions():
    import torch
    import transformers

    env = environment("cpu")
    assert env["torch"] == torch.__version__
    assert env["transformers"] == transformers.__version__
    assert env["device"] == "cpu"
    assert "git_commit" in env and "python" in env


def test_environment_git_commit_is_none_when_git_fails(monkeypatch):
    import subprocess

    def no_commits(cmd, **kwargs):  # what `git rev-parse HEAD` does in a repo without commits
        return subprocess.CompletedProcess(
            cmd, 128, stdout="HEAD\n", stderr="fatal: ambiguous argument 'HEAD'"
        )

    monkeypatch.setattr("grpo_lab.runlog.subprocess.run", no_commits)
    assert environment("cpu")["git_commit"] is None


def test_environment_git_commit_from_git(monkeypatch):
    import subprocess

    sha = "0123456789abcdef0123456789abcdef01234567"
    monkeypatch.setattr(
        "grpo_lab.runlog.subprocess.run",
        lambda cmd, **kw: subprocess.CompletedProcess(cmd, 0, stdout=sha + "\n"),
    )
    assert environment("cpu")["git_commit"] == sha


def test_nearly_full_disk_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    import shutil as sh

    from grpo_lab import runlog

    real = sh.disk_usage
    monkeypatch.setattr(runlog.shutil, "disk_usage", lambda p: real(p)._replace(free=10 * 2**20))
    with pytest.raises(OSError, match="only 10 MiB free .* at least 64 MiB"):
        RunWriter(tmp_path / "run", {"a": 1}, {})
    assert (
        not (tmp_path / "run" / "metrics.jsonl").exists() and not (tmp_path / "run" / "summary.json").exists()
    )


def test_sealing_keeps_the_metrics_compressed_and_the_same_metrics_give_the_same_bytes(tmp_path):
    """A sealed run's table holds the logged values (to `SIGNIFICANT_DIGITS`) in fewer bytes than
    its JSON lines, and two runs with the same metrics seal to identical files (no timestamp in the
    gzip header), so resealing never shows as a change in the store."""
    sealed = []
    for name in ("a", "b"):
        w = RunWriter(tmp_path / name, {"seed": 1}, ENV)
        for step in range(200):
            w.log({"step": step, "reward": step / 7, "val/accuracy": math.nan if step % 10 else 0.5})
        w.finish({"steps": 200})
        plain = (tmp_path / name / METRICS).stat().st_size
        seal(tmp_path / name, behaviour="v1")
        assert not (tmp_path / name / METRICS).exists() and (tmp_path / name / MANIFEST).exists()
        assert (tmp_path / name / METRICS_TABLE).stat().st_size < plain / 4
        assert run_state(tmp_path / name, "v1") == ("current", "")
        sealed.append((tmp_path / name / METRICS_TABLE).read_bytes())
    assert sealed[0] == sealed[1]
    frame = read_metrics(tmp_path / "a")
    assert list(frame["step"]) == list(range(200))
    assert frame["reward"].iloc[3] == pytest.approx(3 / 7, rel=1e-6)
    assert frame["val/accuracy"].isna().sum() == 180


def test_a_run_sealed_in_the_older_plain_table_format_is_stale_not_read_as_empty(tmp_path):
    w = RunWriter(tmp_path / "old", {"seed": 1}, ENV)
    w.log({"step": 0, "reward": 0.5})
    w.finish({"steps": 1})
    seal(tmp_path / "old", behaviour="v1")
    table = tmp_path / "old" / METRICS_TABLE
    table.with_name("metrics.csv").write_bytes(gzip.decompress(table.read_bytes()))
    table.unlink()
    manifest = json.loads((tmp_path / "old" / MANIFEST).read_text())
    manifest["files"]["metrics.csv"] = manifest["files"].pop(METRICS_TABLE)
    (tmp_path / "old" / MANIFEST).write_text(json.dumps(manifest))
    state, why = run_state(tmp_path / "old", "v1")
    assert state == "stale" and "older store format" in why


def finished_run(path, seed=1):
    w = RunWriter(path, {"seed": seed}, ENV, start={"init_sha256": "ab"})
    w.log({"step": 0, "reward": 0.5})
    w.samples(0, [{"completion": "12", "reward": 1.0}, {"completion": "x", "reward": 0.0}])
    w.finish({"steps": 1})
    return path


def test_sealing_packs_the_records_and_the_readers_find_them_there(tmp_path):
    run = finished_run(tmp_path / "run")
    loose = records(run)
    assert set(loose) == {CONFIG, SAMPLES, SUMMARY}
    seal(run, behaviour="v1")
    assert sorted(p.name for p in run.iterdir()) == [MANIFEST, METRICS_TABLE, PACK]
    assert set(json.loads((run / MANIFEST).read_text())["files"]) == {METRICS_TABLE, PACK}
    assert records(run) == loose and run_state(run, "v1") == ("current", "")
    assert is_finished(run) and read_config(run) == {"seed": 1} and read_start(run) == {"init_sha256": "ab"}
    assert read_summary(run) == {"steps": 1}
    assert [r["completion"] for r in read_samples(run)] == ["12", "x"]
    again = finished_run(tmp_path / "again")
    seal(again, behaviour="v1")
    assert (again / PACK).read_bytes() == (run / PACK).read_bytes()  # the same records, the same bytes


def test_a_record_written_after_the_seal_is_packed_by_the_next_one(tmp_path):
    run = finished_run(tmp_path / "run")
    seal(run, behaviour="v1")
    write_json_atomic(run / "cost.json", {"resting_mb": 12.5})
    assert read_json_record(run, "cost.json") == {"resting_mb": 12.5}
    seal(run, behaviour="v1")
    assert not (run / "cost.json").exists() and read_json_record(run, "cost.json") == {"resting_mb": 12.5}
    assert set(records(run)) == {CONFIG, SAMPLES, SUMMARY, "cost.json"}
    assert run_state(run, "v1") == ("current", "")


def test_a_loose_record_over_a_packed_one_tears_the_run_unless_it_is_the_same(tmp_path):
    run = finished_run(tmp_path / "run")
    sealed = records(run)
    seal(run, behaviour="v1")
    (run / SUMMARY).write_bytes(sealed[SUMMARY])  # a seal cut off before it removed the loose files
    assert run_state(run, "v1") == ("current", "")
    (run / SUMMARY).write_text(json.dumps({"steps": 2}))
    state, why = run_state(run, "v1")
    assert state == "torn" and "written over the record sealed in records.zip" in why
    assert read_summary(run) == {"steps": 2}  # what a reader sees: why the run may not be used


def test_replacing_a_packed_record_rewrites_the_pack(tmp_path):
    run = finished_run(tmp_path / "run")
    seal(run, behaviour="v1")
    assert replace_record(run, CONFIG, json.dumps({"config": {"seed": 2}}).encode()) == PACK
    assert read_config(run) == {"seed": 2} and not (run / CONFIG).exists()
    assert run_state(run, "v1")[0] == "torn"  # the manifest still holds the old pack's checksum
    with pytest.raises(FileNotFoundError, match="has no cost.json, loose or in records.zip"):
        replace_record(run, "cost.json", b"{}")
    with pytest.raises(FileNotFoundError, match="has no config.json"):
        read_config(tmp_path)
