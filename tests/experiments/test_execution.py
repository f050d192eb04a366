"""The local pool: cached models built once, before any worker starts; a worker that dies costs only
its run; workers die with the process that runs the sweep; sweeps in a script or a notebook use the
pool and print nothing on stderr."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from grpo_lab.experiments.execution import execute
from grpo_lab.experiments.store import read_error, run_dir

REPO = Path(__file__).parents[2]

TWO_SWEEPS = textwrap.dedent(
    """
    import json, os, sys
    from pathlib import Path
    from grpo_lab import experiments, preset
    from grpo_lab.models import embedded

    OUT = Path(sys.argv[1])
    _build = embedded.build


    def counted_build(task, digits, path):
        _build(task, digits, path)
        with (OUT / "builds.jsonl").open("a") as file:
            file.write(json.dumps({"pid": os.getpid()}) + "\\n")


    embedded.build = counted_build  # at import: every worker, which imports this script, counts too
    embedded.WARM_START["max_steps"] = 20  # a short warm start: what is tested is who builds, not the model


    def record_pid(config, path):
        (OUT / "pids").mkdir(exist_ok=True)
        (OUT / "pids" / f"{config.key()}-{os.getpid()}").touch()
        return []


    if __name__ == "__main__":
        base = preset("grpo", task="arith", task_digits=1, steps=2, prompts_per_step=2, group_size=2,
                      max_completion_length=8, val_size=8, eval_every=2, progress=False)
        report = {"pid": os.getpid(), "sweeps": []}
        for seed in (0, 1):
            result = experiments.sweep(base, {"preset": ["grpo", "dr_grpo"]}, [seed], OUT / "runs",
                                       workers=2, progress=False, callbacks_factory=record_pid)
            report["sweeps"].append({"counts": result.counts()})
        (OUT / "report.json").write_text(json.dumps(report))
    """
)


@pytest.mark.slow
@pytest.mark.xdist_group("cold cache")  # the longest test of the file, and it shares nothing with it
def test_two_sweeps_in_a_script_on_a_cold_cache_build_once_use_the_pool_and_stay_quiet(tmp_path):
    (tmp_path / "script.py").write_text(TWO_SWEEPS)
    env = {**os.environ, "GRPO_LAB_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "script.py", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    report = json.loads((tmp_path / "report.json").read_text())
    builds = [json.loads(line) for line in (tmp_path / "builds.jsonl").read_text().splitlines()]
    assert [b["pid"] for b in builds] == [report["pid"]]  # once, by the process that runs the sweep
    assert len(list((tmp_path / "cache" / "models").glob("arith-*"))) == 1
    pids = {int(p.name.rsplit("-", 1)[1]) for p in (tmp_path / "pids").iterdir()}
    assert len(pids) >= 2 and report["pid"] not in pids  # every run trained in a pool worker
    for sweep in report["sweeps"]:
        assert sweep["counts"] == {"loaded": 0, "trained": 2, "failed": 0}


RECORD_PID = textwrap.dedent(
    """
    import os


    def record_pid(config, path):
        (path.parent / "pids").mkdir(parents=True, exist_ok=True)
        (path.parent / "pids" / str(os.getpid())).touch()
        return []
    """
)


def test_two_sweeps_in_a_notebook_use_the_pool_and_stay_quiet(tiny_model_path, tmp_path):
    (tmp_path / "recorder.py").write_text(RECORD_PID)  # importable by the kernel and its workers
    setup = textwrap.dedent(
        f"""
        import os
        from pathlib import Path
        from grpo_lab import experiments, preset
        from recorder import record_pid
        base = preset("grpo", model={tiny_model_path!r}, task="judge", steps=2, prompts_per_step=2,
                      group_size=2, max_completion_length=8, val_size=8, eval_every=2, progress=False)
        print(os.getpid())
        """
    )
    sweep = (
        'result = experiments.sweep(base, {{"preset": ["grpo", "dr_grpo"]}}, [{seed}], Path({root!r}), '
        "workers=2, progress=False, callbacks_factory=record_pid)\nprint(result.counts())"
    )
    cells = [setup] + [sweep.format(seed=seed, root=str(tmp_path / "runs")) for seed in (0, 1)]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(notebook, timeout=300, resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for cell in notebook.cells for o in cell.outputs]
    assert [o for o in outputs if o.get("name") == "stderr"] == []
    kernel, *printed = [o["text"].strip() for o in outputs if o.get("name") == "stdout"]
    assert printed == ["{'loaded': 0, 'trained': 2, 'failed': 0}"] * 2
    pids = {p.name for p in (tmp_path / "runs" / "pids").iterdir()}
    assert len(pids) >= 2 and kernel not in pids  # every run trained in a pool worker


class _KillItself:
    """Trainer callback: the worker training this run is killed at its first step."""

    def on_step(self, step: int, row: dict) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    def on_end(self, summary: dict) -> None:
        pass


def kill_seed_0(config, path: Path) -> list:
    return [_KillItself()] if config.seed == 0 else []


def test_a_worker_killed_mid_run_is_a_recorded_failure_and_the_others_finish(tiny_config, tmp_path):
    configs = [tiny_config(seed=s, steps=2) for s in range(4)]
    outcomes = execute(configs, tmp_path, workers=2, progress=False, callbacks_factory=kill_seed_0)
    statuses = {c.seed: outcomes[c.key()].status for c in configs}
    assert statuses == {0: "failed", 1: "trained", 2: "trained", 3: "trained"}
    assert "worker process died" in outcomes[configs[0].key()].error
    assert "died" in read_error(run_dir(configs[0], tmp_path))["message"]


LONG_SWEEP = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from grpo_lab import experiments, preset

    OUT = Path(sys.argv[2])


    def record_pid(config, path):
        (OUT / "pids").mkdir(exist_ok=True)
        (OUT / "pids" / str(os.getpid())).touch()
        return []


    if __name__ == "__main__":
        base = preset("grpo", model=sys.argv[1], task="judge", steps=100_000, prompts_per_step=2,
                      group_size=2, max_completion_length=8, val_size=8, eval_every=100_000, progress=False)
        configs = [base.replace(seed=s) for s in range(2)]
        experiments.execute(configs, OUT / "runs", workers=2, progress=False, callbacks_factory=record_pid)
    """
)


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_workers_die_with_the_process_that_runs_the_sweep(tiny_model_path, tmp_path):
    (tmp_path / "script.py").write_text(LONG_SWEEP)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    sweeping = subprocess.Popen(
        [sys.executable, "script.py", tiny_model_path, str(tmp_path)], cwd=tmp_path, env=env
    )
    try:
        deadline = time.monotonic() + 120
        while len(pids := list((tmp_path / "pids").glob("*"))) < 2 and time.monotonic() < deadline:
            assert sweeping.poll() is None, "the sweep ended early"
            time.sleep(0.2)
        workers = [int(p.name) for p in pids]
        assert len(workers) == 2 and all(map(_alive, workers))
    finally:
        sweeping.kill()
        sweeping.wait()
    deadline = time.monotonic() + 10
    while any(map(_alive, workers)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(map(_alive, workers))


def test_a_pool_that_cannot_start_a_worker_is_an_error(tiny_config, tmp_path, monkeypatch):
    def refuse(self, *args, **kwargs):
        raise OSError("no more processes")

    monkeypatch.setattr(ProcessPoolExecutor, "submit", refuse)
    with pytest.raises(RuntimeError, match="could not start a worker: OSError: no more processes"):
        execute([tiny_config(seed=s) for s in range(2)], tmp_path, workers=2, progress=False)


UNGUARDED = textwrap.dedent(
    """
    import sys
    from grpo_lab import experiments, preset

    base = preset("grpo", model=sys.argv[2], task="judge", steps=1, prompts_per_step=2, group_size=2,
                  max_completion_length=4, val_size=4, eval_every=1, progress=False)
    experiments.sweep(base, {"preset": ["grpo", "dr_grpo"]}, [0], sys.argv[1], workers=2, progress=False)
    """
)


@pytest.mark.slow
def test_a_sweep_at_the_top_level_of_a_script_says_to_guard_it(tmp_path, tiny_model_path):
    (tmp_path / "script.py").write_text(UNGUARDED)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "script.py", str(tmp_path / "runs"), tiny_model_path],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    # each worker fails to start (its import of the script starts a sweep of its own) and says why on
    # stderr; the sweep records both runs as failed
    assert 'under `if __name__ == "__main__":`' in done.stderr
    errors = [json.loads(p.read_text()) for p in sorted((tmp_path / "runs").glob("*/error.json"))]
    assert len(errors) == 2 and all("failed to start" in e["message"] for e in errors)
