"""A run killed with SIGKILL at an arbitrary point and resumed gives the same metrics, step for step,
as an uninterrupted run, with no duplicated or missing line in metrics.jsonl."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grpo_lab.runlog import is_finished

VOLATILE = ("time/", "cost/peak_rss_mb")


def command(model: str, out: Path, *extra: str) -> list[str]:
    sets = [
        f"model={model}",
        "task=judge",
        "prompts_per_step=4",
        "group_size=4",
        "max_completion_length=8",
        "val_size=8",
        "eval_every=7",
        "progress=false",
        "checkpoint_every=3",
        "torch_threads=1",
        "samples_every=2",
        "kl_schedule=threshold",
        "kl_target=0.0001",
        "entropy_coef=0.01",
        "entropy_target=5",
        "learning_rate=1e-2",
    ]
    args = [
        sys.executable,
        "-m",
        "grpo_lab.cli",
        "train",
        "--preset",
        "grpo",
        "--steps",
        "120",
        "--seed",
        "3",
    ]
    return args + ["--out", str(out)] + [f"--set={s}" for s in sets] + list(extra)


def metrics(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in rows]


@pytest.mark.slow
def test_sigkill_then_resume_matches_an_uninterrupted_run(tiny_model_path, tmp_path):
    full, killed = tmp_path / "full", tmp_path / "killed"
    subprocess.run(command(tiny_model_path, full), check=True, capture_output=True)

    proc = subprocess.Popen(
        command(tiny_model_path, killed), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    log = killed / "metrics.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if log.exists() and log.read_text().count("\n") >= 40 and (killed / "checkpoint.pt").exists():
            break
        time.sleep(0.01)
    assert proc.poll() is None, "the run finished before it could be killed; make it longer"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not is_finished(killed)
    written = log.read_text().count("\n")
    assert 40 <= written < 121

    subprocess.run(command(tiny_model_path, killed, "--resume"), check=True, capture_output=True)
    assert is_finished(killed)
    a, b = metrics(full), metrics(killed)
    assert [r["step"] for r in b] == list(range(121))  # no duplicated or missing line
    assert a == b
    samples = [json.loads(x)["step"] for x in (killed / "samples.jsonl").read_text().splitlines()]
    assert samples == sorted(samples) and len(samples) == len(set(samples)) * 4


def test_resume_with_another_config_is_refused(tiny_model_path, tmp_path):
    out = tmp_path / "run"
    done = subprocess.run(command(tiny_model_path, out, "--steps", "3"), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    other = subprocess.run(
        command(tiny_model_path, out, "--steps", "4", "--resume"), capture_output=True, text=True
    )
    assert other.returncode == 2 and "config differs" in other.stderr and "steps" in other.stderr
