"""Executing a list of runs: finished runs are loaded, missing ones trained, in this process
(`workers=1`), in a local process pool (default: one worker per core), or on Ray (one task per run,
on an existing cluster or a local Ray started on demand). Failures are recorded and the rest goes on.

The local pool counts this process as one of its workers: a spawned worker spends seconds of CPU
importing torch and transformers before its first run, and with few cores and short runs that
start-up is what separates the pool from a perfect speed-up. This process, which has paid it
already, trains from the first second while the others start, and every worker (this one included)
takes the next pending run as soon as it is free, so the runs left at the end are spread too."""

import collections
import contextlib
import multiprocessing
import os
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
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


@contextlib.contextmanager
def one_thread_here() -> Iterator[None]:
    """This process as a pool worker: one torch thread while it trains, its own setting restored after."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


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

    - backend 'local': `workers` processes (default `os.cpu_count()`, one torch thread each): this
      one and `workers - 1` spawned ones, each taking the next pending run when free; `workers=1`
      trains in this process, one run after the other, with this process's torch threads.
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
    """Runs shared by this process and `workers - 1` spawned ones, taken in the order given."""
    pending = collections.deque(configs)
    lock = threading.Lock()
    done: queue.SimpleQueue = queue.SimpleQueue()  # outcomes of the spawned workers' runs

    def take() -> Config | None:
        with lock:
            return pending.popleft() if pending else None

    def feed(pool: ProcessPoolExecutor) -> None:
        """Keep each spawned worker busy with one run until none is pending."""
        running = {}
        while True:
            while len(running) < workers - 1 and (config := take()) is not None:
                try:
                    running[pool.submit(attempt, config, root, callbacks_factory)] = config
                except Exception as err:  # a worker died and broke the pool: the run is a failure
                    done.put(Outcome(config.key(), "failed", write_error(run_dir(config, root), err)))
            if not running:
                return
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                done.put(_outcome(future.result, running.pop(future), root))

    def drain() -> Iterator[Outcome]:
        while not done.empty():
            yield done.get()

    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers - 1, mp_context=context, initializer=single_thread) as pool:
        feeder = threading.Thread(target=feed, args=(pool,), daemon=True)
        feeder.start()
        try:
            with one_thread_here():
                while (config := take()) is not None:
                    yield attempt(config, root, callbacks_factory)
                    yield from drain()
        finally:
            with lock:
                pending.clear()  # interrupted: start nothing new, let the running runs finish
            feeder.join()
    yield from drain()


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
