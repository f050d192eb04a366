"""Procedurally generated tasks; `make_task(name, digits)` builds one."""

from grpo_lab.tasks import arith, judge, scratchpad
from grpo_lab.tasks.base import Example, RewardFn, Task

TASKS = {"arith": arith.make, "scratchpad": scratchpad.make, "judge": judge.make}


def make_task(name: str, digits: int | None = None) -> Task:
    """Build a task by name; `digits` sets operand size (arith, scratchpad) or number length (judge)."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; valid: {', '.join(TASKS)}")
    return TASKS[name]() if digits is None else TASKS[name](digits)


__all__ = ["TASKS", "Example", "RewardFn", "Task", "make_task"]
