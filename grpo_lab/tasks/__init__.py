"""Procedurally generated tasks; `make_task(name, digits)` builds one."""

import dataclasses

from grpo_lab.tasks import arith, judge, scratchpad, worked
from grpo_lab.tasks.base import Example, RewardFn, Task
from grpo_lab.tasks.hacking import HACKING_REWARDS

TASKS = {"arith": arith.make, "scratchpad": scratchpad.make, "worked": worked.make, "judge": judge.make}


def make_task(name: str, digits: int | None = None) -> Task:
    """Build a task by name; `digits` sets operand size (arith, scratchpad, worked) or number length (judge).
    Every task also offers the reward-hacking terms of `tasks.hacking` (length_bonus, format_strict,
    verbose) for fault injection."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; valid: {', '.join(TASKS)}")
    task = TASKS[name]() if digits is None else TASKS[name](digits)
    return dataclasses.replace(task, rewards={**task.rewards, **HACKING_REWARDS})


__all__ = ["TASKS", "Example", "RewardFn", "Task", "make_task"]
