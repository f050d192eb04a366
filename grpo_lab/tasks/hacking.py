"""Reward terms that invite reward hacking, with TRL's signature `fn(prompts, completions, **kwargs)`;
they ignore the task's answer, so any task can add them to its reward table.

- `length_bonus` pays for length itself: the documents' length collapse, "when a longer output earns
  more reward, the model's outputs grow ever more verbose".
- `format_strict` (short, exactly formatted answers) and `verbose` (long answers) pull in opposite
  directions: the documents' "two objectives in conflict" (a format reward favours one length, another
  term the other, and the model swings between them); their gradients should have a negative cosine."""

import re

LENGTH_BONUS_CHARS = 20
"""`length_bonus` saturates at this many characters"""
STRICT_FORMAT = re.compile(r">?-?\d{1,6}")
"""`format_strict`: a bare integer of at most 6 digits, optionally after the scratchpad's '>'"""
VERBOSE_CHARS = 24
"""`verbose` saturates at this many non-space characters"""


def length_bonus(prompts: list[str], completions: list[str], **kwargs) -> list[float]:
    """min(characters / 20, 1): more is better, whatever is written."""
    return [min(len(c) / LENGTH_BONUS_CHARS, 1.0) for c in completions]


def format_strict(prompts: list[str], completions: list[str], **kwargs) -> list[float]:
    """1.0 when the whole completion is a short bare answer (`>?-?` and 1-6 digits), else 0.0."""
    return [float(STRICT_FORMAT.fullmatch(c) is not None) for c in completions]


def verbose(prompts: list[str], completions: list[str], **kwargs) -> list[float]:
    """min(non-space characters / 24, 1): long answers, the opposite of `format_strict`."""
    return [min(sum(not ch.isspace() for ch in c) / VERBOSE_CHARS, 1.0) for c in completions]


HACKING_REWARDS = {"length_bonus": length_bonus, "format_strict": format_strict, "verbose": verbose}
