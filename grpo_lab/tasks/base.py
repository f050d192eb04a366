"""What every task provides: seeded prompt streams with a held-out validation split, reference
solutions for the warm start, and reward functions with TRL's signature
`fn(prompts, completions, **kwargs) -> list[float | None]` (kwargs carry the dataset columns)."""

import random
import string
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

from grpo_lab.rewards import RewardFn

CHARSET = string.digits + string.ascii_lowercase + " +-*=?:;,.>()#\n"
"""the characters the built-in tasks write, and all the embedded model's character tokenizer knows
(`models.tokenizer`): a file task for the embedded model keeps to them"""


@dataclass(frozen=True)
class Example:
    prompt: str
    answer: str
    """the ground truth the reward functions see as the `answer` column (a task from a file keeps its
    row's index here and hands the reward functions the row's own columns)"""
    solution: str
    """a reference completion (without EOS) used by the supervised warm start"""


@dataclass(frozen=True)
class Task:
    name: str
    problems: tuple[Example, ...]
    """every problem of the task, in a fixed order; split into train and validation by hash"""
    rewards: dict[str, RewardFn]
    """named reward functions (TRL signature); the config picks some and weighs them"""
    is_correct: Callable[[str, str], bool]
    """(completion, answer) -> exact correctness, for val/accuracy"""
    default_rewards: tuple[str, ...]
    token_credit: Callable[[str, str], list[float]] | None = None
    """(completion, answer) -> a credit per completion character (scheme B token rewards), if any"""
    reward_range: tuple[float, float] = (0.0, 1.0)
    """lowest and highest value of the default reward (a flipped label maps r to low + high - r)"""
    val_fraction: float = 0.1
    held_out: tuple[bool, ...] | None = None
    """whether each problem is in the validation split (a file's `split` column); None: by a stable hash"""
    train: tuple[Example, ...] = field(init=False)
    val: tuple[Example, ...] = field(init=False)

    def __post_init__(self) -> None:
        if not 0 < self.val_fraction < 1:
            raise ValueError(f"task {self.name!r}: val_fraction must be in (0, 1), got {self.val_fraction}")
        if not all(isinstance(ex, Example) for ex in self.problems):
            raise ValueError(f"task {self.name!r}: problems must be grpo_lab.tasks.Example records")
        # a stable hash of the prompt decides the split, so it never depends on the seed
        buckets = int(1 / self.val_fraction)
        is_val = self.held_out or [zlib.crc32(ex.prompt.encode()) % buckets == 0 for ex in self.problems]
        if len(is_val) != len(self.problems):
            raise ValueError(
                f"task {self.name!r}: held_out has {len(is_val)} entries for {len(self.problems)} problems"
            )
        object.__setattr__(self, "train", tuple(ex for ex, v in zip(self.problems, is_val) if not v))
        object.__setattr__(self, "val", tuple(ex for ex, v in zip(self.problems, is_val) if v))
        if not self.train or not self.val:
            raise ValueError(
                f"task {self.name!r} has an empty train or validation split ({len(self.train)} train, "
                f"{len(self.val)} validation problems); give it more problems or a `split` column"
            )

    def batch(self, seed: int, step: int, size: int, round: int = 0) -> list[Example]:
        """The prompts of one training step: depends only on (seed, step), never on the scheme.
        `round` > 0 draws the extra prompts of dynamic sampling's refills."""
        rng = random.Random(f"{self.name}/{seed}/{step}" + (f"/{round}" if round else ""))
        return rng.sample(self.train, size) if size <= len(self.train) else rng.choices(self.train, k=size)

    def validation(self, size: int) -> list[Example]:
        """A fixed validation subset (the same for every seed and scheme)."""
        return list(self.val[:size])


def operands(digits: int) -> range:
    """The numbers written with exactly `digits` digits (10-99 for 2; 0-9 for 1): fixed-width
    operands keep each digit at the same offset from the '=' in every prompt."""
    if digits < 1:
        raise ValueError(f"operand size must be at least 1 digit, got {digits}")
    return range(10 ** (digits - 1) if digits > 1 else 0, 10**digits)


def parse_int(text: str) -> int | None:
    """Read a plain (optionally negative) integer; anything else is None. Never evaluates text."""
    text = text.strip()
    body = text[1:] if text.startswith("-") else text
    return int(text) if body.isascii() and body.isdigit() and len(body) <= 12 else None


def check_chat_model(task: str, model: str) -> None:
    """A task written in English as chat messages (`tasks.CHAT_TASKS`) needs a pretrained chat model:
    the embedded model's tokenizer knows only `CHARSET`."""
    if model == "embedded":
        raise ValueError(
            f"task {task!r} writes English text for a pretrained chat model, and the embedded model knows "
            f"only the lowercase characters of tasks.base.CHARSET: set model='smollm2-135m' or a model "
            f"path or hub id"
        )
