"""Executing a list of runs: finished runs are loaded, missing ones trained, in this process
(`workers=1`), in a local process pool (default: one worker per core), or on Ray (one task per run,
on an existing cluster or a local Ray started on demand). Failures are recorded and the rest goes on."""

import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from tqdm.auto import tqdm

from grpo_lab.config import Config
from grpo_lab.experiments.store import CallbacksFactory, Outcome, attempt, run_dir, write_error
from grpo_lab.runlog import is_finished

BACKENDS = ("local", "ray")


def single_thread() -> None:
    """Worker set-up: one torch thread per run, so that parallel runs do not oversubscribe the cores
    (set here, not through Config.torch_threads, which would change the runs' hashes)."""
    import torch

    torch.set_num_threads(1)


def attempt_single_thread(config: Config, root: Path, callbacks_factory: CallbacksFactory | None) -> Outcome:
    """`attempt` in a worker that was not set up by a pool initializer (a Ray task)."""
    single_thread()
    return attempt(config, root, callbacks_factory)


def execute(
    configs: Sequence[Config],
    root: str | Path,
    *,
    workers: int | None = None,
    backend: str = "local",
    address: str | None = None,
    progress: bool = True,
    callbacks_factory: CallbacksFactory | None = None,
) -> dict[str, Outcome]:
    """Make sure every config has a finished run under `root`; return config key -> Outcome.

    - backend 'local': `workers` processes (default `os.cpu_count()`, spawned, one torch thread
      each); `workers=1` trains in this process, one run after the other.
    - backend 'ray': one task per run on the Ray cluster at `address` (None: the one this process is
      connected to, else a local Ray started with `ray.init()`), with a GPU per task when the
      cluster has GPUs. `root` must then be a path every node can write to.
    - `callbacks_factory(config, run_dir)` gives each trained run its trainer callbacks (it must be
      picklable, i.e. a module-level function, for workers and Ray).
    Duplicate configs are run once. A tqdm bar counts the runs; `progress=False` hides it."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; valid: {', '.join(BACKENDS)}")
    if workers is not None and workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    root = Path(root).resolve()
    unique = {c.key(): c for c in configs}
    outcomes = {k: Outcome(k, "loaded") for k, c in unique.items() if is_finished(run_dir(c, root))}
    pending = [c for k, c in unique.items() if k not in outcomes]
    processes = min(workers or os.cpu_count() or 1, len(pending))
    if backend == "ray":
        results = _on_ray(pending, root, address, callbacks_factory)
    elif processes > 1:
        results = _in_pool(pending, root, processes, callbacks_factory)
    else:
        results = (attempt(c, root, callbacks_factory) for c in pending)
    with tqdm(total=len(unique), initial=len(outcomes), desc="runs", unit="run", disable=not progress) as bar:
        for outcome in results:
            outcomes[outcome.key] = outcome
            bar.update()
            bar.set_postfix(failed=sum(o.status == "failed" for o in outcomes.values()))
    return outcomes


def _in_pool(
    configs: list[Config], root: Path, workers: int, callbacks_factory: CallbacksFactory | None
) -> Iterator[Outcome]:
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=context, initializer=single_thread) as pool:
        futures = {pool.submit(attempt, c, root, callbacks_factory): c for c in configs}
        for future in as_completed(futures):
            yield _outcome(future.result, futures[future], root)


def _on_ray(
    configs: list[Config], root: Path, address: str | None, callbacks_factory: CallbacksFactory | None
) -> Iterator[Outcome]:
    if not configs:  # everything is stored: no need for a cluster
        return
    try:
        import ray
    except ImportError as err:
        raise ImportError("backend='ray' needs ray: pip install 'grpo_lab[ray]'") from err
    if not ray.is_initialized():
        ray.init(address=address)
    gpus = 1 if ray.cluster_resources().get("GPU", 0) > 0 else 0
    task = ray.remote(num_cpus=1, num_gpus=gpus)(attempt_single_thread)
    refs = {task.remote(c, root, callbacks_factory): c for c in configs}
    waiting = list(refs)
    while waiting:
        (done,), waiting = ray.wait(waiting, num_returns=1)
        yield _outcome(lambda ref=done: ray.get(ref), refs[done], root)


def _outcome(result: Callable[[], Outcome], config: Config, root: Path) -> Outcome:
    """A worker's outcome; a worker that died (killed, out of memory, lost node) is a recorded failure."""
    try:
        return result()
    except Exception as err:
        return Outcome(config.key(), "failed", write_error(run_dir(config, root), err))
