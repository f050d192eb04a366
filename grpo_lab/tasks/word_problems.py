"""`word`: arithmetic word problems in the style of GSM8K ("Li had 14 cards. Li gave 6 cards to a
friend. How many cards does Li have left? End your answer with the number."), for a pretrained chat
model such as SmolLM2-135M-Instruct (`model="smollm2-135m"`). Each problem is one user message rendered
with the model's chat template (`from_file.chat_renderer`), so the model reads it as it was tuned to.

The other built-in tasks are written for the embedded character model; this one is the task of a
pretrained bed, where a small chat model starts well above zero and well below full marks and has room
to learn under GRPO. Its problems come from templates (`TEMPLATES`): one-step (add, subtract, multiply,
divide exactly) and two-step (buys then gives away, boxes plus loose ones, earns per day then spends),
with names from many cultures, everyday objects and small operands (2 to 20), drawn by a generator
seeded with a constant, so every machine builds the same 4,000 distinct prompts; answers are integers
from 1 to 99. SmolLM2-135M-Instruct's arithmetic is weak even at this size, hence the small numbers and
the mix, mostly one-step: greedy, it answers about a quarter of the validation prompts (under a third
of the one-step ones, none of the two-step ones); most of its misses are wrong arithmetic or a misread
question, and about a fifth write the right result, then end on another number.

A chat model answers in sentences, so the answer is read from the text: `word_lenient` (the default,
and `val/accuracy`) takes the last number anywhere in it, `word_strict` only a number that ends it. The
reference solutions are short worked answers ending with the number (the solution's equations say how
many steps a problem has, `steps`); a pretrained model is not warm-started on them."""

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal

from grpo_lab.tasks.base import Example, Task, check_chat_model
from grpo_lab.tasks.from_file import chat_renderer

NAME = "word"
INSTRUCTION = "End your answer with the number."
"""the last sentence of every prompt: where the answer goes, which both rewards read"""
NAMES = (
    "Li", "Ava", "Omar", "Sofia", "Kenji", "Amara", "Mateo", "Priya", "Lucas", "Zainab",
    "Noah", "Mei", "Diego", "Fatima", "Ivan", "Aisha", "Tom", "Nia", "Ravi", "Elena",
    "Kwame", "Yuki", "Hannah", "Carlos", "Leila", "Sam", "Anya", "Tariq", "Grace", "Jin",
    "Maya", "Emeka", "Lena", "Arjun", "Chloe", "Malik", "Rosa", "Finn", "Sara", "Hugo",
)  # fmt: skip
THINGS = (
    "apples", "marbles", "stickers", "books", "cards", "pencils", "cookies", "stamps",
    "shells", "coins", "balloons", "toy cars", "eggs", "flowers", "beads", "crayons",
)  # fmt: skip
EQUATION = re.compile(r"(\d+) ([-+*/]) (\d+) = (\d+)")
"""an equation of a reference solution: 'a op b = c'"""
NUMBER = re.compile(r"-?\$?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\$?\d+(?:\.\d+)?")
"""a number as `word_lenient` reads it: optional minus sign and '$', thousands separators, decimals"""
FINAL = re.compile(r"(?<![\w.,-])\d+$")
"""a whole number that ends the text and is not the tail of a word, a decimal, a grouped or a
negative number"""


@dataclass(frozen=True)
class Problem:
    question: str
    """the problem without the instruction"""
    answer: int
    solution: str
    """a short worked answer ending with the answer"""


Template = Callable[[random.Random], Problem]


def _who(rng: random.Random) -> tuple[str, str]:
    return rng.choice(NAMES), rng.choice(THINGS)


def finds(rng: random.Random) -> Problem:
    (name, things), a, b = _who(rng), rng.randint(2, 20), rng.randint(2, 9)
    return Problem(
        f"{name} has {a} {things}. {name} finds {b} more {things}. How many {things} does {name} have now?",
        a + b,
        f"{name} had {a} {things} and found {b} more, so {a} + {b} = {a + b}. The answer is {a + b}.",
    )


def gives(rng: random.Random) -> Problem:
    (name, things), a = _who(rng), rng.randint(5, 20)
    b = rng.randint(2, min(a - 1, 9))
    return Problem(
        f"{name} had {a} {things}. {name} gave {b} {things} to a friend. "
        f"How many {things} does {name} have left?",
        a - b,
        f"{name} had {a} {things} and gave away {b}, so {a} - {b} = {a - b}. The answer is {a - b}.",
    )


def bags(rng: random.Random) -> Problem:
    (name, things), a, b = _who(rng), rng.randint(2, 9), rng.randint(2, 10)
    return Problem(
        f"{name} buys {a} bags of {things}. Each bag has {b} {things}. How many {things} does {name} buy?",
        a * b,
        f"{a} bags of {b} {things} each make {a} * {b} = {a * b}. The answer is {a * b}.",
    )


def shares(rng: random.Random) -> Problem:
    (name, things), friends, each = _who(rng), rng.randint(2, 5), rng.randint(2, 9)
    total = friends * each
    return Problem(
        f"{name} shares {total} {things} equally among {friends} friends. "
        f"How many {things} does each friend get?",
        each,
        f"{total} {things} shared among {friends} friends is {total} / {friends} = {each} each. "
        f"The answer is {each}.",
    )


def buys_then_gives(rng: random.Random) -> Problem:
    (name, things), a, b = _who(rng), rng.randint(5, 20), rng.randint(2, 9)
    c = rng.randint(2, min(a + b - 1, 9))
    return Problem(
        f"{name} has {a} {things}. {name} buys {b} more {things}. Then {name} gives away {c} {things}. "
        f"How many {things} does {name} have now?",
        a + b - c,
        f"{name} had {a} {things} and bought {b} more, so {a} + {b} = {a + b}. After giving away {c}, "
        f"{a + b} - {c} = {a + b - c}. The answer is {a + b - c}.",
    )


def boxes(rng: random.Random) -> Problem:
    (name, things), k, m, e = _who(rng), rng.randint(2, 9), rng.randint(2, 10), rng.randint(2, 9)
    return Problem(
        f"{name} has {k} boxes of {things}. Each box has {m} {things}. {name} also has {e} more {things}. "
        f"How many {things} does {name} have in all?",
        k * m + e,
        f"The boxes hold {k} * {m} = {k * m} {things}, and with {e} more, {k * m} + {e} = {k * m + e}. "
        f"The answer is {k * m + e}.",
    )


def earns(rng: random.Random) -> Problem:
    name, pay, days = rng.choice(NAMES), rng.randint(2, 9), rng.randint(2, 5)
    spent = rng.randint(2, min(pay * days - 1, 9))
    return Problem(
        f"{name} earns {pay} dollars each day for {days} days. Then {name} spends {spent} dollars. "
        f"How many dollars does {name} have left?",
        pay * days - spent,
        f"{name} earned {pay} * {days} = {pay * days} dollars and spent {spent}, so "
        f"{pay * days} - {spent} = {pay * days - spent}. The answer is {pay * days - spent}.",
    )


TEMPLATES: tuple[tuple[Template, int], ...] = (
    (finds, 1200),
    (gives, 600),
    (bags, 1000),
    (shares, 600),
    (buys_then_gives, 200),
    (boxes, 200),
    (earns, 200),
)
"""each template and how many distinct problems it gives: 85% one-step, weighted towards the
addition and multiplication SmolLM2-135M-Instruct sometimes gets right (most of its start accuracy),
the two-step ones left as headroom"""


def problems() -> tuple[Problem, ...]:
    """Every problem, in a fixed shuffled order (so any prefix of the validation split mixes the
    templates): the same on every machine, no question twice."""
    rng = random.Random(NAME)
    seen: set[str] = set()
    out = []
    for template, count in TEMPLATES:
        made = 0
        while made < count:
            problem = template(rng)
            if problem.question not in seen:
                seen.add(problem.question)
                out.append(problem)
                made += 1
    rng.shuffle(out)
    return tuple(out)


def steps(example: Example) -> int:
    """How many arithmetic steps a problem takes: the equations of its reference solution (1 or 2)."""
    return len(EQUATION.findall(example.solution))


def last_number(completion: str) -> Decimal | None:
    """The value of the last number in the text ('$1,200' is 1200), or None when it has none."""
    found = NUMBER.findall(completion)
    return Decimal(found[-1].replace("$", "").replace(",", "")) if found else None


def is_correct(completion: str, answer: str) -> bool:
    """The lenient reading: the last number anywhere in the completion equals the answer."""
    return last_number(completion) == int(answer)


def ends_with_answer(completion: str, answer: str) -> bool:
    """The strict reading: the completion, without trailing whitespace and one final period, ends with
    the answer as a whole number ('... so 7.', 'The answer is 7'; not '7 apples', '-7' or '3.7')."""
    found = FINAL.search(completion.rstrip().removesuffix("."))
    return found is not None and int(found.group()) == int(answer)


def lenient(prompts: list[str], completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """1.0 when the last number in the completion equals the answer, else 0.0."""
    return [float(is_correct(c, a)) for c, a in zip(completions, answer)]


def strict(prompts: list[str], completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """1.0 when the completion ends with the answer as a whole number, else 0.0."""
    return [float(ends_with_answer(c, a)) for c, a in zip(completions, answer)]


def make(model: str) -> Task:
    """The task with its prompts rendered by the chat template of `model` (a directory or hub id with
    a tokenizer; never the embedded model)."""
    check_chat_model(NAME, model)
    render = chat_renderer(model, f"task {NAME!r}")
    return Task(
        name=NAME,
        problems=tuple(
            Example(
                render([{"role": "user", "content": f"{p.question} {INSTRUCTION}"}]),
                str(p.answer),
                p.solution,
            )
            for p in problems()
        ),
        rewards={"word_lenient": lenient, "word_strict": strict},
        is_correct=is_correct,
        default_rewards=("word_lenient",),
    )
