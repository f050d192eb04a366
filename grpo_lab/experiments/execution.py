"""Executing a list of runs: finished runs are loaded, missing ones trained, in this process
(`workers=1`), in a local process pool (default: one worker per core), or on Ray (one task per run,
on an existing cluster or a local Ray started on demand). Failures are recorded and the rest goes on.

The local pool counts this process as one of its workers. A spawned worker spends seconds of CPU
importing torch and transformers before it can train, and with few cores and short runs that
start-up is what separated the pool from a perfect speed-up (9 short runs on 2 cores: 1.41x). This
process, which has paid it already, trains from the first second; a spawned worker asks for its
first run only once its imports are done, so no run waits on a worker that is still starting, and
workers still starting when nothing is left are stopped instead of waited for. Where the platform
has it, workers are forked from multiprocessing's fork server, which imports the trainer once (the
first time a pool starts in this process) and then starts every worker of every later sweep in an
instant; it never trains, so the forks inherit no thread pools."""

import collections
import contextlib
import multiprocessing
import os
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
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


def _serve(index: int, runs, messages, root: Path, callbacks_factory: CallbacksFactory | None) -> None:
    """A spawned pool worker: import the trainer first, then train the runs it is sent (None: stop),
    reporting (index, None) when ready and (index, outcome) after each run."""
    single_thread()
    import grpo_lab.trainer  # noqa: F401  the start-up cost, paid before asking for a run

    messages.put((index, None))
    while (config := runs.get()) is not None:
        messages.put((index, attempt(config, root, callbacks_factory)))


def _context() -> multiprocessing.context.BaseContext:
    """The fork server, preloaded with the trainer, where the platform has one; else spawn."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["grpo_lab.trainer"])
    return context


def _in_pool(
    configs: list[Config], root: Path, workers: int, callbacks_factory: CallbacksFactory | None
) -> Iterator[Outcome]:
    """Runs shared by this process and `workers - 1` started ones, each taking the next pending run
    when it is free (see the module doc). A background thread starts the workers (the fork server's
    first start blocks until it has imported the trainer), answers each ready worker with a run or
    a stop, and records the run of a worker that dies; this thread trains meanwhile."""
    pending = collections.deque(configs)
    changed = threading.Condition()  # guards pending, in_flight and closing
    in_flight = [0]  # runs handed to started workers whose outcome has not come back
    closing = threading.Event()  # set once this process takes no more runs
    done: queue.SimpleQueue = queue.SimpleQueue()  # outcomes of the started workers' runs
    context = _context()
    messages = context.Queue()
    inboxes = [context.SimpleQueue() for _ in range(workers - 1)]
    procs = [
        context.Process(target=_serve, args=(i, inbox, messages, root, callbacks_factory), daemon=True)
        for i, inbox in enumerate(inboxes)
    ]

    def take(count: bool) -> Config | None:
        """The next pending run (counted in flight when it goes to a started worker)."""
        with changed:
            if not pending:
                return None
            in_flight[0] += count
            return pending.popleft()

    def finish(outcome: Outcome) -> None:
        done.put(outcome)
        with changed:
            in_flight[0] -= 1
            changed.notify_all()

    def feed() -> None:
        started: dict[int, multiprocessing.process.BaseProcess] = {}
        running: dict[int, Config] = {}
        stopped: set[int] = set()
        try:
            for index, proc in enumerate(procs):
                if closing.is_set() and not pending:
                    break
                proc.start()
                started[index] = proc
            while not (closing.is_set() and not pending and not running):
                try:
                    index, outcome = messages.get(timeout=0.2)
                except queue.Empty:
                    for index, proc in started.items():
                        if proc.exitcode is not None and index in running:  # killed, out of memory
                            config = running.pop(index)
                            error = RuntimeError(f"the worker process died (exit code {proc.exitcode})")
                            finish(Outcome(config.key(), "failed", write_error(run_dir(config, root), error)))
                            stopped.add(index)
                    continue
                if outcome is not None:
                    del running[index]
                    finish(outcome)
                config = take(count=True)
                inboxes[index].put(config)  # None: nothing left, the worker stops
                if config is None:
                    stopped.add(index)
                else:
                    running[index] = config
        finally:
            for config in running.values():  # only if this thread itself failed
                finish(Outcome(config.key(), "failed", "the pool's dispatcher thread failed"))
            for index, proc in started.items():
                if index not in stopped:  # still starting, or failed: nothing left for it
                    proc.terminate()
                proc.join()

    threading.Thread(target=feed, daemon=True).start()
    try:
        with one_thread_here():
            while (config := take(count=False)) is not None:
                yield attempt(config, root, callbacks_factory)
                while not done.empty():
                    yield done.get()
    finally:
        with changed:
            pending.clear()  # interrupted: start nothing new, let the runs under way finish
            closing.set()
            changed.wait_for(lambda: in_flight[0] == 0)  # workers still starting are not waited for
    while not done.empty():
        yield done.get()


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
