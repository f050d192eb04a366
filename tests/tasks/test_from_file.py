"""Tasks from a user's data (`file:PATH`): formats, columns handed to the reward functions as TRL
hands them, the validation split, chat prompts, the embedded model's characters, the content hash."""

import json
from pathlib import Path

import pandas as pd
import pytest

from grpo_lab.rewards import score
from grpo_lab.tasks import make_task, task_identity
from grpo_lab.tasks.from_file import ACCURACY_THRESHOLD, EXACT

DATA = Path(__file__).resolve().parents[1] / "data" / "your_task.jsonl"
ROWS = [json.loads(line) for line in DATA.read_text().splitlines()]


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f"file:{path}"


def seen_kwargs(prompts, completions, **kwargs):
    """A reward that records what it was called with (in `seen_kwargs.calls`) and scores 1.0."""
    seen_kwargs.calls.append({"prompts": prompts, "completions": completions, **kwargs})
    return [1.0] * len(completions)


seen_kwargs.calls = []
RECORDER = f"{__name__}:seen_kwargs"


def test_shipped_file_task_splits_and_scores_its_answer_column():
    task = make_task(f"file:{DATA}")
    assert len(task.problems) == len(ROWS) == 20
    assert task.val and task.train and len(task.val) + len(task.train) == 20
    assert task.default_rewards == (EXACT,)
    ex = task.val[0]
    row = next(r for r in ROWS if r["prompt"] == ex.prompt)
    rewards, _ = score([(EXACT, task.rewards[EXACT])], [1.0], [ex.prompt] * 2, [row["answer"], "0"],
                       answer=[ex.answer] * 2)  # fmt: skip
    assert rewards.tolist() == [1.0, 0.0]
    assert task.is_correct(row["answer"], ex.answer) and not task.is_correct("0", ex.answer)


def test_every_other_column_reaches_the_reward_function(tmp_path):
    rows = [{**r, "level": i % 3} for i, r in enumerate(ROWS)]
    task = make_task(write_jsonl(tmp_path / "t.jsonl", rows), rewards=(RECORDER,))
    seen_kwargs.calls.clear()
    picked = task.train[:3]
    score([(RECORDER, task.rewards[RECORDER])], [1.0], [e.prompt for e in picked], ["a", "b", "c"],
          answer=[e.answer for e in picked])  # fmt: skip
    call = seen_kwargs.calls[-1]
    expected = [rows[int(e.answer)] for e in picked]
    assert call["prompts"] == [r["prompt"] for r in expected]
    assert call["completions"] == ["a", "b", "c"]
    for column in ("answer", "solution", "level"):
        assert call[column] == [r[column] for r in expected]


@pytest.mark.parametrize("fmt", ["csv", "parquet", "saved"])
def test_csv_parquet_and_saved_dataset_give_the_jsonl_task(fmt, tmp_path):
    frame = pd.DataFrame(ROWS)
    if fmt == "csv":
        path = tmp_path / "t.csv"
        frame.to_csv(path, index=False)
    elif fmt == "parquet":
        path = tmp_path / "t.parquet"
        frame.to_parquet(path)
    else:
        import datasets

        path = tmp_path / "saved"
        datasets.Dataset.from_list(ROWS).save_to_disk(str(path))
    assert make_task(f"file:{path}").problems == make_task(f"file:{DATA}").problems


def test_split_column_decides_the_validation_split(tmp_path):
    rows = [{**r, "split": "validation" if i < 5 else "train"} for i, r in enumerate(ROWS)]
    task = make_task(write_jsonl(tmp_path / "t.jsonl", rows))
    assert [e.prompt for e in task.val] == [r["prompt"] for r in ROWS[:5]]
    assert len(task.train) == 15


def test_unknown_split_value_is_named(tmp_path):
    rows = [{**r, "split": "dev"} for r in ROWS]
    with pytest.raises(ValueError, match=r"row 0: unknown split 'dev'; valid: train, validation"):
        make_task(write_jsonl(tmp_path / "t.jsonl", rows))


def test_chat_prompts_without_a_template_and_completions_as_assistant_messages(tmp_path):
    rows = [{**r, "prompt": [{"role": "user", "content": r["prompt"]}]} for r in ROWS]
    task = make_task(write_jsonl(tmp_path / "t.jsonl", rows), rewards=(RECORDER,))
    assert [e.prompt for e in task.problems] == [r["prompt"] for r in ROWS]  # the embedded model's rendering
    seen_kwargs.calls.clear()
    ex = task.train[0]
    score([(RECORDER, task.rewards[RECORDER])], [1.0], [ex.prompt], ["12"], answer=[ex.answer])
    call = seen_kwargs.calls[-1]
    assert call["prompts"] == [rows[int(ex.answer)]["prompt"]]
    assert call["completions"] == [[{"role": "assistant", "content": "12"}]]


def test_chat_prompts_use_the_models_chat_template(tmp_path, tiny_model_path):
    from transformers import AutoTokenizer

    model = tmp_path / "chat-model"
    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    tok.chat_template = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}>"
    tok.save_pretrained(model)
    rows = [{**r, "prompt": [{"role": "user", "content": r["prompt"]}], "split": "train"} for r in ROWS]
    rows[0]["split"] = "validation"  # the rendered prompts hash differently
    task = make_task(write_jsonl(tmp_path / "t.jsonl", rows), model=str(model))
    assert task.problems[0].prompt == f"<user>{ROWS[0]['prompt']}>"


def test_accuracy_is_the_first_reward_reaching_the_threshold(tmp_path):
    path = write_jsonl(
        tmp_path / "t.jsonl", [{"prompt": r["prompt"], "solution": r["solution"]} for r in ROWS]
    )
    task = make_task(path, rewards=(RECORDER,))
    assert ACCURACY_THRESHOLD == 1.0
    assert task.is_correct("anything", task.val[0].answer)  # RECORDER scores 1.0
    assert not make_task(path).is_correct("x", task.val[0].answer)  # exact_answer on `solution`


def test_identity_follows_the_content_not_the_path(tmp_path):
    path = tmp_path / "t.jsonl"
    name = write_jsonl(path, ROWS)
    before = task_identity(name)
    assert task_identity(name) == before and before.startswith("file:") and str(tmp_path) not in before
    (tmp_path / "elsewhere").mkdir()
    assert task_identity(write_jsonl(tmp_path / "elsewhere" / "t.jsonl", ROWS)) == before
    write_jsonl(path, [{**ROWS[0], "answer": "999"}, *ROWS[1:]])
    assert task_identity(name) != before
    assert task_identity("arith") == "arith"


def test_embedded_model_refuses_characters_outside_its_charset(tmp_path):
    rows = [*ROWS[:-1], {**ROWS[-1], "prompt": "Reverse 123:"}]
    path = tmp_path / "t.jsonl"
    with pytest.raises(ValueError, match=r"row 19: 'prompt' has the character 'R'") as err:
        make_task(write_jsonl(path, rows))
    assert str(path) in str(err.value)
    assert make_task(f"file:{path}", model="some/hub-model").problems[-1].prompt == "Reverse 123:"


def test_embedded_model_needs_a_solution_column(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [{"prompt": r["prompt"], "answer": r["answer"]} for r in ROWS])
    with pytest.raises(ValueError, match="no 'solution' column, which the embedded model is warm-started on"):
        make_task(path)
    assert make_task(path, model="some/hub-model").default_rewards == (EXACT,)
