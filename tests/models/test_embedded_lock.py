"""The cached models are built by one process at a time: two independent processes that need the same
model on a cold cache build it once, the second one waits and loads it."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

RACER = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from grpo_lab.models import embedded

    log, ready = Path(sys.argv[1]), Path(sys.argv[2])

    def slow_build(task, digits, path):
        with log.open("a") as file:
            file.write(f"{os.getpid()}\\n")
        time.sleep(1.0)  # long enough for the other process to ask for the model meanwhile
        path.mkdir(parents=True)
        (path / "warm_start.json").write_text("{}")

    embedded.build = slow_build
    (ready / str(os.getpid())).touch()
    while len(list(ready.iterdir())) < 2:  # both ask at the same moment
        time.sleep(0.01)
    print(embedded.embedded_path("arith", 1))
    """
)


@pytest.mark.slow
def test_two_processes_on_a_cold_cache_build_the_model_once(tmp_path):
    log, ready, cache = tmp_path / "builds.log", tmp_path / "ready", tmp_path / "cache"
    ready.mkdir()
    env = {**os.environ, "GRPO_LAB_CACHE": str(cache), "PYTHONPATH": str(Path(__file__).parents[2])}
    racers = [
        subprocess.Popen([sys.executable, "-c", RACER, str(log), str(ready)], env=env, stdout=subprocess.PIPE)
        for _ in range(2)
    ]
    paths = {racer.communicate(timeout=120)[0].decode().strip() for racer in racers}
    assert [racer.returncode for racer in racers] == [0, 0]
    assert len(log.read_text().splitlines()) == 1  # one build; the other process waited and loaded it
    (path,) = paths
    assert (Path(path) / "warm_start.json").exists()
