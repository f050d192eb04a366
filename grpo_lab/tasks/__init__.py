"""Tasks: the procedurally generated ones by name (`TASKS` for the embedded model, `CHAT_TASKS` for a
pretrained chat model), a user's data as `file:PATH` (`tasks.from_file`) or a user's code as
`module:function`, a function returning a `Task`; reward functions by the task's names or by import path
`module:function`. `make_task` builds one."""

import dataclasses
from collections.abc import Sequence

from grpo_lab.rewards import RewardFn, score
from grpo_lab.tasks import arith, from_file, judge, scratchpad, word_problems, worked
from grpo_lab.tasks.base import Example, Task
from grpo_lab.tasks.hacking import HACKING_REWARDS
from grpo_lab.tasks.imports import is_import_path, resolve

TASKS = {"arith": arith.make, "scratchpad": scratchpad.make, "worked": worked.make, "judge": judge.make}
"""the generated tasks written in the embedded model's characters, each made with its `digits`"""
CHAT_TASKS = {"word": word_problems.make}
"""the generated tasks written in English as chat messages for a pretrained chat model, each made with
the model whose chat template renders them (never the embedded model: `base.check_chat_model`)"""
BUILT_IN = (*TASKS, *CHAT_TASKS)
TASK_FORMS = "file:PATH (a JSONL, CSV or Parquet file, or a saved dataset directory), module:function"
"""the task names beyond `BUILT_IN`"""


def is_task_name(name: str) -> bool:
    """Whether `name` has the form of a task (checked without importing or reading anything)."""
    return name in BUILT_IN or from_file.is_file_task(name) or is_import_path(name)


def make_task(
    name: str, digits: int | None = None, rewards: Sequence[str] = (), model: str = "embedded"
) -> Task:
    """Build a task by name; `digits` sets operand size (arith, scratchpad, worked) or number length
    (judge); a chat task (`CHAT_TASKS`) takes none. Every task also offers the reward-hacking terms of
    `tasks.hacking` (length_bonus, format_strict, verbose) for fault injection, and the reward functions
    of `rewards` given by import path (`module:function`, imported here, so the same in a pool worker or
    a Ray task). `model` (a directory or hub id, or 'embedded') renders a chat task's and a file's chat
    prompts with its chat template and decides the characters a file may use (`tasks.from_file`)."""
    if from_file.is_file_task(name):
        return _probed(from_file.make(name, rewards, model), rewards)
    if name in TASKS:
        task = TASKS[name]() if digits is None else TASKS[name](digits)
    elif name in CHAT_TASKS:
        if digits is not None:
            raise ValueError(
                f"task {name!r} has no size setting, got digits={digits}; leave it unset (task_digits=0)"
            )
        task = CHAT_TASKS[name](model)
    elif is_import_path(name):
        make = resolve(name, "task")
        try:
            task = make()
        except Exception as err:
            raise ValueError(f"task {name!r} raised {type(err).__name__}: {err}") from err
        if not isinstance(task, Task):
            raise ValueError(f"task {name!r} returned a {type(task).__name__}, not a grpo_lab.tasks.Task")
    else:
        raise ValueError(f"unknown task {name!r}; valid: {', '.join(BUILT_IN)}, {TASK_FORMS}")
    imported = {r: resolve(r, "reward function") for r in rewards if ":" in r}
    return _probed(
        dataclasses.replace(task, rewards={**task.rewards, **HACKING_REWARDS, **imported}), rewards
    )


def _probed(task: Task, rewards: Sequence[str]) -> Task:
    """`task`, once each reward function imported by path has scored two validation problems'
    reference solutions: a function that raises or returns the wrong length or a non-number fails
    here, naming it, before a model is loaded."""
    examples = task.val[:2]
    for name in (r for r in rewards if ":" in r):
        prompts, solutions = [ex.prompt for ex in examples], [ex.solution for ex in examples]
        score([(name, task.rewards[name])], [1.0], prompts, solutions, answer=[ex.answer for ex in examples])
    return task


def task_identity(name: str) -> str:
    """What names a task's data in a key (a run's in the store, the embedded model's in its cache):
    for a file task, `file:` and the hash of its content, wherever the file lies (a store moved with
    its repository keeps its runs; a changed file is a new run); any other task's name."""
    return f"{from_file.PREFIX}{from_file.fingerprint(name)}" if from_file.is_file_task(name) else name


__all__ = [
    "BUILT_IN",
    "CHAT_TASKS",
    "TASKS",
    "Example",
    "RewardFn",
    "Task",
    "is_task_name",
    "make_task",
    "task_identity",
]
