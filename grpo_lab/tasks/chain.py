"""`chain`: the sum of three to five `digits`-digit numbers ("23+45+67+89=?"), answered after '>'
in one of three styles the warm start has seen: directly (">224"), by columns with carries
("3+5+7+9=24,2+4+6+8+2=22>224") or as a chain of partial sums ("23+45=68,68+67=135,135+89=224>224").
Completions run from 4 to about 45 characters and a correct answer is reachable at every length,
but the long styles are far more reliable than summing five numbers at once, so training can grow
the length (toward the written-out work) or shrink it (under a length penalty or normalization):
the long, variable answers that length tricks need to act on (`docs/sources.md`, second document,
length normalization)."""

import random

from grpo_lab.tasks.base import Example, Task, operands, parse_int

COUNTS = (3, 4, 5)
"""how many numbers a problem adds"""
PROBLEMS = 20000
"""distinct problems drawn (a fixed seeded draw: the set never depends on the run's seed)"""
STYLES = (("direct", 0.1), ("columns", 0.3), ("partial_sums", 0.6))
"""the warm start's reference styles and their shares"""


def final_answer(completion: str) -> int | None:
    """The integer after the last '>', or None when there is none."""
    _, sep, tail = completion.rpartition(">")
    return parse_int(tail) if sep else None


def _is_correct(completion: str, answer: str) -> bool:
    return final_answer(completion) == int(answer)


def correct(prompts: list[str], completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """1.0 when the final answer after '>' is the sum, else 0.0."""
    return [float(_is_correct(c, a)) for c, a in zip(completions, answer)]


def well_formed(prompts: list[str], completions: list[str], **kwargs) -> list[float]:
    """1.0 when the completion ends with exactly one '>' followed by an integer."""
    return [float(c.count(">") == 1 and final_answer(c) is not None) for c in completions]


def columns(numbers: list[int], digits: int) -> str:
    """Column sums with carries, least significant digit first: '3+5+7+9=24,2+4+6+8+2=22'."""
    steps, carry = [], 0
    for i in range(digits):
        terms = [str(n // 10**i % 10) for n in numbers] + ([str(carry)] if carry else [])
        total = sum(map(int, terms))
        steps.append(f"{'+'.join(terms)}={total}")
        carry = total // 10
    return ",".join(steps)


def partial_sums(numbers: list[int]) -> str:
    """The running sum, one addition at a time: '23+45=68,68+67=135'."""
    steps, total = [], numbers[0]
    for n in numbers[1:]:
        steps.append(f"{total}+{n}={total + n}")
        total += n
    return ",".join(steps)


def solution(numbers: list[int], digits: int, style: str) -> str:
    work = {"direct": "", "columns": columns(numbers, digits), "partial_sums": partial_sums(numbers)}[style]
    return f"{work}>{sum(numbers)}"


def make(digits: int = 2) -> Task:
    rng = random.Random(f"chain/{digits}")
    pool = operands(digits)
    names, shares = zip(*STYLES)
    problems, seen = [], set()
    while len(problems) < PROBLEMS:
        numbers = [rng.choice(pool) for _ in range(rng.choice(COUNTS))]
        prompt = "+".join(map(str, numbers)) + "=?"
        if prompt in seen:
            continue
        seen.add(prompt)
        style = rng.choices(names, shares)[0]
        problems.append(Example(prompt, str(sum(numbers)), solution(numbers, digits, style)))
    return Task(
        name="chain",
        problems=tuple(problems),
        rewards={"correct": correct, "format": well_formed},
        is_correct=_is_correct,
        default_rewards=("correct",),
    )
