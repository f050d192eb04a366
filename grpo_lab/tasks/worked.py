"""`worked`: addition of two `digits`-digit numbers ("37+48=?") answered after '>' in one of three
styles the warm start has seen: directly (">85"), by compact columns ("7+8=15,3+4+1=8>85") or as a
worked solution that names each column and its carry ("units 7+8=15 carry 1,tens 3+4+1=8 carry 0>85").
Completions run from 4 to about 45 tokens (30 on average in the reference solutions) and a correct
answer is reachable at every length, while the written-out columns are more reliable than the bare
answer: training can grow the length toward the worked style or shrink it (under a length penalty
or normalization). The answer is read as in `scratchpad` (the integer after the last '>'), with its
rewards. These are the long, variable answers that length tricks need in order to act
(`docs/sources.md`, Tricks review §2.1 length normalization); the arithmetic is `scratchpad`'s, so
the warm start stays short."""

import itertools
import zlib

from grpo_lab.tasks.base import Example, Task, operands
from grpo_lab.tasks.scratchpad import sum_task

PLACES = ("units", "tens", "hundreds")
"""column names, least significant first"""
STYLES = (("direct", 1), ("columns", 3), ("worked", 6))
"""the warm start's reference styles and their weights (out of their sum)"""


def columns(a: int, b: int, digits: int, named: bool) -> str:
    """Column sums with carries, least significant first: '7+8=15,3+4+1=8', or with `named` each
    column's place and outgoing carry: 'units 7+8=15 carry 1,tens 3+4+1=8 carry 0'."""
    steps, carry = [], 0
    for i in range(digits):
        da, db = a // 10**i % 10, b // 10**i % 10
        total = da + db + carry
        work = f"{da}+{db}+{carry}={total}" if carry else f"{da}+{db}={total}"
        carry = total // 10
        steps.append(f"{PLACES[i]} {work} carry {carry}" if named else work)
    return ",".join(steps)


def solution(a: int, b: int, digits: int, style: str) -> str:
    work = {
        "direct": "",
        "columns": columns(a, b, digits, named=False),
        "worked": columns(a, b, digits, named=True),
    }[style]
    return f"{work}>{a + b}"


def style_of(prompt: str) -> str:
    """The reference style of a problem: a stable hash of its prompt, weighted by `STYLES`."""
    names = [name for name, weight in STYLES for _ in range(weight)]
    return names[zlib.crc32(prompt.encode()) % len(names)]


def make(digits: int = 2) -> Task:
    if digits > len(PLACES):
        raise ValueError(f"task 'worked' names at most {len(PLACES)} columns, got digits={digits}")
    problems = []
    for a, b in itertools.product(operands(digits), repeat=2):
        prompt = f"{a}+{b}=?"
        problems.append(Example(prompt, str(a + b), solution(a, b, digits, style_of(prompt))))
    return sum_task("worked", problems)
