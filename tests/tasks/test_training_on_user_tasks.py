"""Training on a user's task end to end: a JSONL file and a reward module of one function through
`grpo-lab train` and through a two-worker sweep (fresh interpreters, as on a fresh clone), and TRL's
own reward functions, unchanged."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_lab.presets import preset
from grpo_lab.rewards import score
from grpo_lab.runlog import read_config, read_metrics
from grpo_lab.tasks import make_task
from grpo_lab.training.trainer import train

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "your_task.jsonl"
REWARD_MODULE = '''
def myreward(prompts, completions, answer, **kwargs):
    """The fraction of the answer's characters the completion has in place."""
    return [sum(a == b for a, b in zip(c, t)) / len(t) for c, t in zip(completions, answer)]
'''
SMALL = ["prompts_per_step=2", "group_size=2", "max_completion_length=6", "val_size=4", "eval_every=3"]


@pytest.fixture
def user_dir(tmp_path) -> Path:
    """A directory as a user has it: 20 prompts with an `answer` column and a reward module."""
    shutil.copy(DATA, tmp_path / "data.jsonl")
    (tmp_path / "mymod.py").write_text(REWARD_MODULE)
    return tmp_path


def fresh_env() -> dict[str, str]:
    """This checkout's package first on the path of a new interpreter."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


@pytest.mark.slow
def test_cli_trains_a_file_task_with_a_reward_module(user_dir, tiny_model_path):
    exe = Path(sys.executable).parent / "grpo-lab"
    sets = [
        "task=file:data.jsonl",
        "rewards=mymod:myreward",
        f"model={tiny_model_path}",
        "progress=false",
        *SMALL,
    ]
    args = [str(exe), "train", "--steps", "3", "--out", "run", *[a for s in sets for a in ("--set", s)]]
    done = subprocess.run(args, cwd=user_dir, env=fresh_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = read_metrics(user_dir / "run")
    assert metrics["step"].max() == 3
    assert metrics["rewards/mymod:myreward/mean"].notna().sum() == 3
    assert read_config(user_dir / "run")["rewards"] == ["mymod:myreward"]


SWEEP = """
import json, sys
from grpo_lab import experiments, preset
base = preset("grpo", task="file:data.jsonl", rewards=("mymod:myreward",), model=sys.argv[1], steps=3,
              prompts_per_step=2, group_size=2, max_completion_length=6, val_size=4, eval_every=3,
              progress=False)
result = experiments.sweep(base, {"preset": ["grpo", "dr_grpo"]}, [0], "runs", workers=2, progress=False)
logged = result.metrics.groupby("preset")["rewards/mymod:myreward/mean"].count().to_dict()
errors = result.runs["error"].dropna().tolist()
print(json.dumps({"counts": result.counts(), "logged": logged, "errors": errors}))
"""


@pytest.mark.slow
def test_sweep_with_two_workers_trains_a_file_task(user_dir, tiny_model_path):
    done = subprocess.run([sys.executable, "-c", SWEEP, tiny_model_path], cwd=user_dir, env=fresh_env(),
                          capture_output=True, text=True, timeout=400)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["counts"] == {"loaded": 0, "trained": 2, "failed": 0}, report["errors"]
    assert report["logged"] == {"grpo": 3, "dr_grpo": 3}


def chat_file(tmp_path: Path) -> str:
    """The shipped task with chat prompts and a LaTeX `solution` column (TRL's accuracy_reward's)."""
    rows = [json.loads(line) for line in DATA.read_text().splitlines()]
    rows = [
        {"prompt": [{"role": "user", "content": r["prompt"]}], "solution": f"${r['answer']}$", "split": split}
        for r, split in zip(rows, ["validation"] * 4 + ["train"] * 16)
    ]
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f"file:{path}"


def test_trl_think_format_reward_sees_assistant_messages(tmp_path, tiny_model_path):
    pytest.importorskip("trl")
    name = "trl.rewards:think_format_reward"
    task = make_task(chat_file(tmp_path), rewards=(name,), model=tiny_model_path)
    ex = task.train[0]
    rewards, _ = score([(name, task.rewards[name])], [1.0], [ex.prompt] * 2,
                       ["<think>\nsum\n</think>\n245", "245"], answer=[ex.answer] * 2)  # fmt: skip
    assert rewards.tolist() == [1.0, 0.0]


def test_trl_accuracy_reward_scores_and_skips_as_in_trl(tmp_path, tiny_model_path):
    pytest.importorskip("trl")
    pytest.importorskip("math_verify")
    name = "trl.rewards:accuracy_reward"
    path = chat_file(tmp_path)
    task = make_task(path, rewards=(name,), model=tiny_model_path)
    ex = task.train[0]
    answer = json.loads(Path(path[5:]).read_text().splitlines()[int(ex.answer)])["solution"].strip("$")
    rewards, per = score([(name, task.rewards[name])], [1.0], [ex.prompt] * 2,
                         [f"\\boxed{{{answer}}}", "\\boxed{1}"], answer=[ex.answer] * 2)  # fmt: skip
    assert per[name].tolist() == [1.0, 0.0]
    rows = [json.loads(line) for line in Path(path[5:]).read_text().splitlines()]
    Path(path[5:]).write_text("".join(json.dumps({**r, "solution": "no number"}) + "\n" for r in rows))
    task = make_task(path, rewards=(name,), model=tiny_model_path)
    rewards, _ = score([(name, task.rewards[name])], [1.0], [ex.prompt], ["\\boxed{1}"], answer=[ex.answer])
    assert rewards.isnan().all()  # an unparsable gold solution: None, skipped as TRL skips it


@pytest.mark.parametrize("reward", ["think_format_reward", "accuracy_reward"])
def test_trl_reward_functions_train_unchanged(reward, tmp_path, tiny_model_path):
    pytest.importorskip("trl")
    if reward == "accuracy_reward":
        pytest.importorskip("math_verify")
    name = f"trl.rewards:{reward}"
    config = preset("grpo", task=chat_file(tmp_path), rewards=(name,), model=tiny_model_path, steps=2,
                    prompts_per_step=2, group_size=2, max_completion_length=6, val_size=4, eval_every=2,
                    progress=False)  # fmt: skip
    metrics = train(config, out=tmp_path / "run")
    assert metrics[f"rewards/{name}/mean"].notna().sum() == 2
    assert "val/accuracy" in metrics
