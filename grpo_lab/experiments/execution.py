"""Executing a list of runs: finished runs are loaded, missing ones trained, in this process
(`workers=1`), in a local process pool (default: one worker per core), or on Ray (one task per run,
on an existing cluster or a local Ray started on demand). Failures are recorded and the rest goes on.

Before any run starts, this process builds every cached model the pending runs need (`prebuild`,
at the warm start's own thread count), so that workers only load it: two workers building the same
model at once on a few cores take many times as long as one build.

The local pool is made of single-worker `ProcessPoolExecutor`s, one per slot, each given the next
pending run when its last one is done. One executor per worker because an executor whose worker dies
fails every run it holds: this way a worker killed or out of memory costs only the run it was
training, recorded as failed. Where the platform has it, workers are forked from multiprocessing's
fork server, which imports the trainer once, so that workers (and those of every later sweep of
this process) start in an instant. Each worker trains with one torch thread, ignores Ctrl-C (this
process decides what stops) and exits as soon as this process ends, however it ends (its parent is
the fork server, which outlives this process while any of its children runs)."""

import collections
import contextlib
import functools
import multiprocessing
import os
import select
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.context import BaseContext
from pathlib import Path

from tqdm.auto import tqdm

from grpo_lab.config import Config
from grpo_lab.experiments.store import (
    CallbacksFactory,
    Outcome,
    attempt,
    is_current,
    record_failure,
    refuse_training,
    run_dir,
    unusable,
)
from grpo_lab.models.embedded import cache_root, embedded_path
from grpo_lab.models.pretrained import is_pretrained, pretrained_path

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


def prebuild(configs: Iterable[Config]) -> None:
    """Build, in this process, every cached model that `configs` need and that is not built yet (the
    embedded model of each task, each pretrained model converted); a process that is building one
    already is waited for."""
    configs = list(configs)
    for task, digits in dict.fromkeys(
        (c.task, c.task_digits or None) for c in configs if c.model == "embedded"
    ):
        embedded_path(task, digits)
    for name in dict.fromkeys(c.model for c in configs if is_pretrained(c.model)):
        pretrained_path(name)


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
    """Make sure every config has a current run under `root` (`store.is_current`); return config
    key -> Outcome.

    - backend 'local': `workers` processes (default `os.cpu_count()`, one torch thread each), each
      taking the next pending run when free; `workers=1` trains in this process, one run after the
      other, with this process's torch threads.
    - backend 'ray': one task per run on the Ray cluster at `address` (None: the one this process is
      connected to, else a local Ray started with `ray.init()`), with a GPU per task when the
      cluster has GPUs. `root` must then be a path every node can write to; the cached models are
      built here first, so nodes that share this process's cache path (GRPO_LAB_CACHE) only load
      them, and each other node builds its own on its first run.
    - `callbacks_factory(config, run_dir)` gives each trained run its trainer callbacks (it must be
      picklable, i.e. a module-level function, for workers and Ray).
    Duplicate configs are run once. A tqdm bar counts the runs; `progress=False` hides it. A pool
    that cannot start a worker raises RuntimeError."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; valid: {', '.join(BACKENDS)}")
    if workers is not None and workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    root = Path(root).resolve()
    unique = {c.key(): c for c in configs}
    outcomes = {k: Outcome(k, "loaded") for k, c in unique.items() if is_current(run_dir(c, root))}
    pending = [c for k, c in unique.items() if k not in outcomes]
    refuse_training(pending, root)
    replaced = unusable(run_dir(c, root) for c in pending)
    if replaced:
        listed = "; ".join(f"{path.name} ({why})" for path, why in replaced.items())
        warnings.warn(
            f"{len(replaced)} stored runs may not be used and are trained again: {listed}", stacklevel=2
        )
    prebuild(pending)
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


def _start_worker(cache: str, parent: int) -> None:
    """Pool worker set-up: the model cache of the process that runs the sweep (the fork server keeps
    the environment it started with), one torch thread, Ctrl-C ignored, and death with `parent`."""
    os.environ["GRPO_LAB_CACHE"] = cache
    single_thread()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with(parent)


def die_with(parent: int) -> None:
    """Make this process exit as soon as process `parent` ends, however it ends (a watching thread)."""
    threading.Thread(target=_exit_with, args=(parent,), daemon=True).start()


def _exit_with(pid: int) -> None:
    """Exit this process as soon as process `pid` ends, however it ends (SIGKILL included): wait on a
    pidfd where the system has them (Linux 5.3+), else check once a second."""
    try:
        select.select([os.pidfd_open(pid)], [], [])
    except ProcessLookupError:  # it has ended already
        pass
    except (AttributeError, OSError):  # no pidfd here
        with contextlib.suppress(ProcessLookupError):
            while True:
                os.kill(pid, 0)
                time.sleep(1)
    os._exit(1)


def _executor() -> ProcessPoolExecutor:
    """A single-worker executor on the fork server, preloaded with the trainer, where the platform
    has one (else spawn)."""
    context: BaseContext
    if "forkserver" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["grpo_lab.training.trainer"])
    else:
        context = multiprocessing.get_context("spawn")
    return ProcessPoolExecutor(
        max_workers=1,
        mp_context=context,
        initializer=_start_worker,
        initargs=(str(cache_root()), os.getpid()),
    )


def _hint(err: Exception) -> str:
    """What to do when a worker failed to start because the sweep runs at the top level of a script:
    every worker imports the script's main module, which then starts a sweep of its own."""
    if "bootstrapping phase" not in str(err):
        return ""
    return (
        "\na script that sweeps on the local pool must start the sweep under "
        '`if __name__ == "__main__":` (each worker imports the script\'s main module)'
    )


def _in_pool(
    configs: list[Config], root: Path, workers: int, callbacks_factory: CallbacksFactory | None
) -> Iterator[Outcome]:
    """The runs on `workers` single-worker executors (see the module doc), in the order they end.
    Interrupted, it starts no new run and waits for those under way (their results are kept)."""
    pending = collections.deque(configs)
    running: dict[Future, tuple[ProcessPoolExecutor, Config]] = {}

    def submit(executor: ProcessPoolExecutor) -> None:
        config = pending.popleft()
        try:
            running[executor.submit(attempt, config, root, callbacks_factory)] = (executor, config)
        except Exception as err:
            executor.shutdown()
            raise RuntimeError(
                f"the local pool could not start a worker: {type(err).__name__}: {err}{_hint(err)}"
            ) from err

    try:
        for _ in range(workers):
            submit(_executor())
        while running:
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                executor, config = running.pop(future)
                if isinstance(future.exception(), BrokenProcessPool):  # its worker died: a new one
                    executor.shutdown()
                    executor = _executor()
                if pending:
                    submit(executor)
                else:
                    executor.shutdown()
                yield _outcome(future.result, config, root)
    finally:
        for executor, _ in running.values():
            executor.shutdown(cancel_futures=True)


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
    get: Callable[[ray.ObjectRef[Outcome]], Outcome] = ray.get  # the overload for one ref
    while waiting:
        (done,), waiting = ray.wait(waiting, num_returns=1)
        yield _outcome(functools.partial(get, done), refs[done], root)


def _outcome(result: Callable[[], Outcome], config: Config, root: Path) -> Outcome:
    """A worker's outcome; a worker that died (killed, out of memory, lost node) is a recorded failure."""
    try:
        return result()
    except BrokenProcessPool:
        error = RuntimeError(
            "the worker process died while training it (killed, out of memory, or it failed to start: see "
            "stderr)"
        )
        return Outcome(config.key(), "failed", record_failure(run_dir(config, root), error))
    except Exception as err:
        return Outcome(config.key(), "failed", record_failure(run_dir(config, root), err))
