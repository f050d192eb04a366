"""Tasks from a user's data, `task="file:PATH"`: a JSONL, CSV or Parquet file, or a directory saved by
`datasets.Dataset.save_to_disk`, with a `prompt` column, in TRL's dataset convention. A prompt is a
string, or a list of chat messages rendered with the model's chat template (without one, the messages'
contents joined by newlines). Every other column reaches the reward functions as a keyword argument
(`answer`, `solution`, ...), and a conversational prompt's completions reach them as TRL passes them:
a list holding one `{"role": "assistant", "content": ...}` message. A `solution` column is what the
embedded model is warm-started on. The validation split is the file's `split` column ('train' or one
of `VAL_SPLITS`) when it has one, else a stable hash of the prompt as for the built-in tasks.
CSV cells are read as strings."""

import functools
import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from grpo_lab.rewards import RewardFn, call_reward
from grpo_lab.tasks.base import CHARSET, Example, Task
from grpo_lab.tasks.hacking import HACKING_REWARDS
from grpo_lab.tasks.imports import resolve

PREFIX = "file:"
FORMATS = (".jsonl", ".csv", ".parquet")
VAL_SPLITS = ("validation", "val", "valid", "test", "eval")
"""values of a `split` column that put a row in the validation split ('train' keeps it for training)"""
ACCURACY_THRESHOLD = 1.0
"""`val/accuracy` of a task from a file: a completion is correct when the first reward function gives it
at least this (full marks of a 0/1 reward)"""
EXACT = "exact_answer"
"""the built-in reward of a file with an `answer` (else `solution`) column: 1.0 when the completion,
stripped, equals it"""


def is_file_task(name: str) -> bool:
    return name.startswith(PREFIX)


def file_task_exists(name: str) -> bool:
    """Whether the file or directory of `file:PATH` exists (`task_path` raises where it does not)."""
    return Path(name[len(PREFIX) :]).expanduser().exists()


def task_path(name: str) -> Path:
    """The file or directory of `file:PATH`, which must exist."""
    path = Path(name[len(PREFIX) :]).expanduser()
    if not name[len(PREFIX) :]:
        raise ValueError(f"task {name!r} names no file; use file:PATH")
    if not path.exists():
        raise ValueError(
            f"task file {str(path)!r} does not exist (task {name!r}); give a {', '.join(FORMATS)} file or a "
            f"directory saved by datasets.Dataset.save_to_disk"
        )
    if path.is_file() and path.suffix.lower() not in FORMATS:
        raise ValueError(
            f"task file {str(path)!r} has the suffix {path.suffix!r}; valid: {', '.join(FORMATS)}"
        )
    return path


def fingerprint(name: str) -> str:
    """A hash of the file's content (every file of a saved dataset directory): a changed file is a new run."""
    path = task_path(name)
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    stats = tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in files)
    return _content_hash(path, stats)


@functools.cache
def _content_hash(path: Path, stats: tuple) -> str:
    """Keyed by every file's modification time and size too, so an unchanged file is read once."""
    digest = hashlib.sha256()
    for file, _, _ in stats:
        digest.update(str(Path(file).relative_to(path) if path.is_dir() else "").encode() + b"\0")
        digest.update(Path(file).read_bytes())
    return digest.hexdigest()[:16]


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The file's rows as dicts with the same columns (a column missing from a JSONL line is None)."""
    if path.is_dir():
        rows = _read_saved_dataset(path)
    elif path.suffix.lower() == ".jsonl":
        rows = []
        for i, line in enumerate(path.read_text().splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"task file {str(path)!r}, line {i}: not JSON ({err})") from None
            if not isinstance(row, dict):
                raise ValueError(f"task file {str(path)!r}, line {i}: a JSON object per line expected")
            rows.append(row)
    elif path.suffix.lower() == ".csv":
        import pandas as pd

        rows = pd.read_csv(path, dtype=str, keep_default_na=False).to_dict("records")
    else:
        import pyarrow.parquet as pq

        rows = pq.read_table(path).to_pylist()
    if not rows:
        raise ValueError(f"task file {str(path)!r} has no rows")
    columns = list(dict.fromkeys(k for row in rows for k in row))
    return [{c: row.get(c) for c in columns} for row in rows]


def _read_saved_dataset(path: Path) -> list[dict[str, Any]]:
    import datasets

    try:
        data = datasets.load_from_disk(str(path))
    except (FileNotFoundError, ValueError) as err:
        raise ValueError(
            f"task directory {str(path)!r} is not a dataset saved by save_to_disk: {err}"
        ) from None
    if isinstance(data, datasets.DatasetDict):  # its split names become the `split` column
        return [{"split": name, **row} for name, part in data.items() for row in part.to_list()]
    return data.to_list()


def make(name: str, rewards: Sequence[str] = (), model: str = "embedded") -> Task:
    """The task of `file:PATH`, with the reward functions `rewards` names by import path bound to the
    file's columns. With the embedded model every prompt and solution must be written in its
    tokenizer's characters, and a `solution` column is needed for its warm start."""
    path = task_path(name)
    rows = read_rows(path)
    where = f"task file {str(path)!r}"
    if "prompt" not in rows[0]:
        raise ValueError(f"{where} has no 'prompt' column; its columns: {', '.join(rows[0])}")
    conversational = _check_prompts(rows, where)
    render = chat_renderer(model, where) if conversational else str
    prompts = [render(row["prompt"]) for row in rows]
    solutions = _solutions(rows, where, model)
    if model == "embedded":
        _check_charset(where, "prompt", prompts)
        _check_charset(where, "solution", solutions)
    problems = tuple(Example(p, str(i), s) for i, (p, s) in enumerate(zip(prompts, solutions)))
    funcs: dict[str, RewardFn] = dict(HACKING_REWARDS)
    truth = next((c for c in ("answer", "solution") if c in rows[0]), None)
    if truth is not None:
        funcs[EXACT] = _with_columns(functools.partial(_exact, truth_column=truth), rows, conversational)
    for reward in rewards:
        if ":" in reward:
            funcs[reward] = _with_columns(resolve(reward, "reward function"), rows, conversational)
    first = next(iter(rewards), EXACT if truth else None)
    if first is None:
        raise ValueError(
            f"{where} has no 'answer' or 'solution' column, so no built-in reward: name your reward "
            f"functions, rewards=('module:function', ...)"
        )
    return Task(
        name=name,
        problems=problems,
        rewards=funcs,
        is_correct=functools.partial(_first_reward_passes, first, funcs),
        default_rewards=(EXACT,) if truth else (),
        held_out=_held_out(rows, where),
    )


def _check_prompts(rows: list[dict], where: str) -> bool:
    """Whether the prompts are chat messages (all of them) rather than strings (all of them)."""
    conversational = isinstance(rows[0]["prompt"], list)
    for i, row in enumerate(rows):
        prompt = row["prompt"]
        ok = (
            all(isinstance(m, dict) and isinstance(m.get("content"), str) and "role" in m for m in prompt)
            if conversational and isinstance(prompt, list)
            else isinstance(prompt, str) and not conversational
        )
        if not ok:
            kind = "a list of {'role': ..., 'content': str} messages" if conversational else "a string"
            raise ValueError(f"{where}, row {i}: 'prompt' must be {kind} like row 0's, got {prompt!r}")
    return conversational


def chat_renderer(model: str, where: str) -> Callable[[list[dict]], str]:
    """Chat messages as prompt text: the model's chat template when it has one, else their contents
    joined by newlines (the embedded model has no template). `model` is 'embedded' or a directory or
    hub id that `AutoTokenizer` loads; `where` names the task in the error of one it cannot load."""
    template = None
    if model != "embedded":
        from transformers import AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(str(Path(model).expanduser()))
        except (OSError, ValueError) as err:
            raise ValueError(f"{where}: could not load the tokenizer of model {model!r}: {err}") from err
        template = tokenizer if tokenizer.chat_template else None
    if template is None:
        return lambda messages: "\n".join(m["content"] for m in messages)
    return lambda messages: str(
        template.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    )


def _solutions(rows: list[dict], where: str, model: str) -> list[str]:
    if "solution" not in rows[0]:
        if model == "embedded":
            raise ValueError(
                f"{where} has no 'solution' column, which the embedded model is warm-started on; add one, "
                f"or set model= to a model path or hub id"
            )
        return [""] * len(rows)
    bad = next((i for i, row in enumerate(rows) if not isinstance(row["solution"], str)), None)
    if bad is not None and model == "embedded":
        raise ValueError(f"{where}, row {bad}: 'solution' must be a string, got {rows[bad]['solution']!r}")
    return [row["solution"] if isinstance(row["solution"], str) else "" for row in rows]


def _check_charset(where: str, column: str, texts: list[str]) -> None:
    for i, text in enumerate(texts):
        bad = next((ch for ch in text if ch not in CHARSET), None)
        if bad is not None:
            raise ValueError(
                f"{where}, row {i}: {column!r} has the character {bad!r}, which the embedded model's "
                f"tokenizer does not know (it writes {CHARSET!r}); use those characters only, or set "
                f"model= to a model path or hub id"
            )


def _held_out(rows: list[dict], where: str) -> tuple[bool, ...] | None:
    if "split" not in rows[0]:
        return None
    valid = ("train", *VAL_SPLITS)
    for i, row in enumerate(rows):
        if row["split"] not in valid:
            raise ValueError(f"{where}, row {i}: unknown split {row['split']!r}; valid: {', '.join(valid)}")
    return tuple(row["split"] in VAL_SPLITS for row in rows)


def _with_columns(fn: RewardFn, rows: list[dict], conversational: bool) -> RewardFn:
    """`fn` called as TRL calls it on this file: the rows' original prompts, the completions as one
    assistant message each for conversational prompts, and every other column as a keyword. The
    trainer's `answer` holds each completion's row index (`Example.answer`)."""

    def reward(prompts: list[str], completions: list[str], answer: list[str], **kwargs: Any) -> Any:
        picked = [rows[int(i)] for i in answer]
        columns = {c: [row[c] for row in picked] for c in rows[0] if c != "prompt"}
        shown: list = (
            [[{"role": "assistant", "content": c}] for c in completions] if conversational else completions
        )
        return call_reward(fn, [row["prompt"] for row in picked], shown, **columns)

    return reward


def _exact(prompts: list, completions: list, truth_column: str, **columns: list) -> list[float]:
    texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
    return [float(t.strip() == str(truth).strip()) for t, truth in zip(texts, columns[truth_column])]


def _first_reward_passes(first: str, funcs: dict[str, RewardFn], completion: str, answer: str) -> bool:
    value = call_reward(funcs[first], [""], [completion], answer=[answer])[0]
    return value is not None and value >= ACCURACY_THRESHOLD
