"""`arith`: addition of two `digits`-digit numbers answered directly ("37+48=" -> "85"); a sparse 0/1
reward."""

import itertools

from grpo_lab.tasks.base import Example, Task, operands, parse_int


def _is_correct(completion: str, answer: str) -> bool:
    return parse_int(completion) == int(answer)


def correct(prompts: list[str], completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """1.0 when the completion is exactly the sum, else 0.0."""
    return [float(_is_correct(c, a)) for c, a in zip(completions, answer)]


def well_formed(prompts: list[str], completions: list[str], **kwargs) -> list[float]:
    """1.0 when the completion is a plain integer (format reward)."""
    return [float(parse_int(c) is not None) for c in completions]


def digit_credit(completion: str, answer: str) -> list[float]:
    """Per-character credit: 1 for each answer digit right in its place (scheme B's token rewards)."""
    return [float(i < len(answer) and ch == answer[i]) for i, ch in enumerate(completion)]


def make(digits: int = 2) -> Task:
    problems = tuple(
        Example(prompt=f"{a}+{b}=", answer=str(a + b), solution=str(a + b))
        for a, b in itertools.product(operands(digits), repeat=2)
    )
    return Task(
        name="arith",
        problems=problems,
        rewards={"correct": correct, "format": well_formed},
        is_correct=_is_correct,
        default_rewards=("correct",),
        token_credit=digit_credit,
    )
