"""`judge`: sort the digits of a number ("sort 5183:" -> "1358"), scored by a judge-like dense
similarity compressed into [0.75, 0.85], the documents' example of dense rewards where dividing
by the group std blows tiny differences up."""

import difflib
import itertools

from grpo_lab.tasks.base import Example, Task

LOW, HIGH = 0.75, 0.85


def _is_correct(completion: str, answer: str) -> bool:
    return completion.strip() == answer


def judge_score(prompts: list[str], completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """0.75 + 0.10 x character similarity to the sorted digits."""
    return [
        LOW + (HIGH - LOW) * difflib.SequenceMatcher(None, c.strip(), a).ratio()
        for c, a in zip(completions, answer)
    ]


def make(digits: int = 4) -> Task:
    problems = tuple(
        Example(
            prompt=f"sort {''.join(ds)}:",
            answer="".join(sorted(ds)),
            solution="".join(sorted(ds)),
        )
        for ds in itertools.product("0123456789", repeat=digits)
    )
    return Task(
        name="judge",
        problems=problems,
        rewards={"judge": judge_score},
        is_correct=_is_correct,
        default_rewards=("judge",),
        reward_range=(LOW, HIGH),
    )
