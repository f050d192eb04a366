"""`scratchpad`: addition where the model may show column work of any length before its final
answer after '>' ("37+48=?" -> "7+8=15,3+4+1=8>85" or just ">85"), so response length can
grow or shrink under training."""

import itertools

from grpo_lab.tasks.base import Example, Task, operands, parse_int


def final_answer(completion: str) -> int | None:
    """The integer after the last '>', or None when there is none."""
    _, sep, tail = completion.rpartition(">")
    return parse_int(tail) if sep else None


def is_correct(completion: str, answer: str) -> bool:
    return final_answer(completion) == int(answer)


def correct(prompts: list[str], completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """1.0 when the final answer after '>' is the sum, else 0.0."""
    return [float(is_correct(c, a)) for c, a in zip(completions, answer)]


def well_formed(prompts: list[str], completions: list[str], **kwargs) -> list[float]:
    """1.0 when the completion ends with exactly one '>' followed by an integer."""
    return [float(c.count(">") == 1 and final_answer(c) is not None) for c in completions]


def column_work(a: int, b: int, digits: int) -> str:
    """Column-by-column addition with carries, least significant digit first."""
    steps, carry = [], 0
    for i in range(digits):
        da, db = a // 10**i % 10, b // 10**i % 10
        total = da + db + carry
        steps.append(f"{da}+{db}+{carry}={total}" if carry else f"{da}+{db}={total}")
        carry = total // 10
    return ",".join(steps)


def make(digits: int = 2) -> Task:
    problems = []
    for a, b in itertools.product(operands(digits), repeat=2):
        # half the reference solutions show their work, half answer directly: both styles
        # are in the warm start, so training is free to move the length either way
        shown = (a * 7 + b * 13) % 2 == 0
        solution = f"{column_work(a, b, digits)}>{a + b}" if shown else f">{a + b}"
        problems.append(Example(prompt=f"{a}+{b}=?", answer=str(a + b), solution=solution))
    return sum_task("scratchpad", problems)


def sum_task(name: str, problems: list[Example]) -> Task:
    """A task of sums answered after the last '>' (`scratchpad`, `worked`): rewards `correct` (the
    default) and `format`, and exact correctness, all read from the final answer."""
    return Task(
        name=name,
        problems=tuple(problems),
        rewards={"correct": correct, "format": well_formed},
        is_correct=is_correct,
        default_rewards=("correct",),
    )
