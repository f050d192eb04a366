"""The diversity of a step's completions, group by group and across prompts: the trainer logs it
(`training.step_metrics`, the `diversity/*` columns every `diversity_every` steps) and the
diagnostics read it back, or compute `template_share` from samples.jsonl where a run lacks the column
(`analysis.diagnostics`). It sits with the tasks, below both, as the other measures of the text a
task's completions are (`tasks.hacking`), so that the trainer and the analysis share it without
either importing the other."""

import difflib
import itertools
import math
from collections import Counter
from collections.abc import Sequence

import numpy as np


def _distinct(texts: Sequence[str], n: int) -> float:
    """Distinct-n: unique character n-grams / all character n-grams of the texts (NaN when none)."""
    grams = [t[i : i + n] for t in texts for i in range(len(t) - n + 1)]
    return len(set(grams)) / len(grams) if grams else math.nan


def _group_distinct(groups: Sequence[Sequence[str]], n: int) -> float:
    """Distinct-n averaged over the groups that have n-grams (NaN when none has)."""
    values = [v for v in (_distinct(g, n) for g in groups) if not math.isnan(v)]
    return float(np.mean(values)) if values else math.nan


def _edit_distance(a: str, b: str) -> float:
    """Normalized edit distance in [0, 1]: 1 - difflib's similarity ratio."""
    return 1.0 - difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def _pairs(group: Sequence[str], max_pairs: int) -> list[tuple[str, str]]:
    """The pairs of a group, thinned deterministically to every k-th one when there are over max_pairs."""
    pairs = list(itertools.combinations(group, 2))
    return pairs[:: max(1, math.ceil(len(pairs) / max_pairs))]


def template_share(groups: Sequence[Sequence[str]]) -> float:
    """How far one completion has taken over different prompts: (p - 1) / (B - 1), with p the number of
    the B prompts (groups) whose completions include the most widespread text. 0 when no two prompts
    share a completion, 1 when one text answers every prompt; NaN with fewer than 2 prompts."""
    if len(groups) < 2:
        return math.nan
    counts = Counter(text for group in groups for text in set(group))
    return (max(counts.values()) - 1) / (len(groups) - 1)


def diversity(completions: list[str], group_size: int, max_pairs: int = 32) -> dict[str, float]:
    """Diversity of one step's completions (N = B groups of G, prompt-major like the rollout).
    N-grams are over characters (the lab's completions are short strings without spaces, and the
    embedded tokenizer is character-level). Within-group values are averaged over the groups:
    - `diversity/distinct{1,2}_group`, `diversity/distinct{1,2}_batch`: distinct-n within groups, and
      over the whole batch (NaN when no completion is long enough to hold an n-gram);
    - `diversity/edit_distance_group`: mean pairwise normalized edit distance within groups (0 for G = 1),
      over at most `max_pairs` pairs per group (all of them up to G = 8);
    - `diversity/identical_group_frac`: share of groups whose G completions are all the same text;
    - `diversity/template_frac`: `template_share` across prompts (one text answering many prompts).
    Costs B x min(G(G-1)/2, max_pairs) difflib comparisons, each up to quadratic in the length: the
    trainer measures it every `diversity_every` steps, not every step."""
    if group_size < 1 or not completions or len(completions) % group_size:
        raise ValueError(f"{len(completions)} completions do not split into groups of {group_size}")
    groups = [completions[i : i + group_size] for i in range(0, len(completions), group_size)]
    distances = [
        float(np.mean([_edit_distance(a, b) for a, b in _pairs(g, max_pairs)])) if len(g) > 1 else 0.0
        for g in groups
    ]
    return {
        "diversity/distinct1_group": _group_distinct(groups, 1),
        "diversity/distinct2_group": _group_distinct(groups, 2),
        "diversity/distinct1_batch": _distinct(completions, 1),
        "diversity/distinct2_batch": _distinct(completions, 2),
        "diversity/edit_distance_group": float(np.mean(distances)),
        "diversity/identical_group_frac": float(np.mean([len(set(g)) == 1 for g in groups])),
        "diversity/template_frac": template_share(groups),
    }
