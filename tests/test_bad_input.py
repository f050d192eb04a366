"""Bad input fails early with a clear error (what is wrong, and what is valid where there is a
choice), and a failed run leaves nothing that looks finished: never a summary.json."""

import dataclasses
import json
import math
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from grpo_lab import objective
from grpo_lab.cli import main
from grpo_lab.config import Config, field_names, parse_override
from grpo_lab.models.loading import load_policy
from grpo_lab.presets import PRESETS, preset
from grpo_lab.registry import Registry
from grpo_lab.rewards import score
from grpo_lab.runlog import METRICS, PACK, SUMMARY, read_jsonl
from grpo_lab.tasks import TASKS, make_task
from grpo_lab.tasks.base import Example, Task
from grpo_lab.training import rollout, trainer
from grpo_lab.training.trainer import train
from grpo_lab.tricks import KL_SCHEDULES, KL_TOKEN_WEIGHTS

TINY = dict(
    task="judge",
    steps=2,
    prompts_per_step=2,
    group_size=2,
    max_completion_length=6,
    val_size=4,
    eval_every=2,
    progress=False,
)


def tiny(path: str, **changes) -> Config:
    return preset("grpo", model=path, **{**TINY, **changes})


def tiny_args(path: str, out: Path, *extra: str) -> list[str]:
    """`grpo-lab train` arguments for a fast run on the tiny model."""
    sets = [f"model={path}", "task=judge", "prompts_per_step=2", "group_size=2"]
    sets += ["max_completion_length=6", "val_size=4", "eval_every=2", "progress=false"]
    return ["train", "--steps", "1", "--out", str(out), *[a for s in sets for a in ("--set", s)], *extra]


def summaries(root: Path) -> list[Path]:
    """The finished runs' summaries under `root`: loose, or in a sealed run's pack."""
    return [*root.rglob(SUMMARY), *root.rglob(PACK)]


def assert_lists(message: str, names) -> None:
    """The message lists every valid choice."""
    missing = [n for n in names if n not in message]
    assert not missing, f"valid choices {missing} not listed in: {message}"


# --- presets and registries ------------------------------------------------------------------------


def test_unknown_preset_lists_presets():
    with pytest.raises(ValueError, match="unknown preset 'nope'") as err:
        preset("nope")
    assert "valid:" in str(err.value)
    assert_lists(str(err.value), PRESETS)


AXES = {
    "advantage": objective.ADVANTAGES,
    "surrogate": objective.SURROGATES,
    "kl_estimator": objective.KL_ESTIMATORS,
    "kl_placement": objective.KL_PLACEMENTS,
    "aggregation": objective.AGGREGATIONS,
    "seq_weight": objective.SEQ_WEIGHTS,
    "is_correction": objective.IS_CORRECTIONS,
    "kl_schedule": KL_SCHEDULES,
    "kl_token_weight": KL_TOKEN_WEIGHTS,
    "kl_prev_estimator": objective.KL_ESTIMATORS,
}


@pytest.mark.parametrize("axis", list(AXES))
def test_unknown_registry_name_lists_valid_names(axis):
    with pytest.raises(ValueError, match=f"unknown {axis} 'nope'; valid: ") as err:
        preset("grpo", **{axis: "nope"})
    assert_lists(str(err.value), AXES[axis].names())


@pytest.mark.parametrize(
    ("field", "valid"),
    [
        ("task", list(TASKS)),
        ("device", ["auto", "cpu", "cuda"]),
        ("cispo_mode", ["relative", "absolute"]),
        ("is_seq_reduce", ["geometric", "product"]),
        ("fault_sampler_dtype", ["none", "bfloat16", "float16"]),
    ],
)
def test_unknown_choice_lists_valid_values(field, valid):
    with pytest.raises(ValueError, match=f"unknown {field} 'nope'; valid: ") as err:
        preset("grpo", **{field: "nope"})
    assert_lists(str(err.value), valid)


@pytest.mark.parametrize("registry", [*AXES.values()], ids=list(AXES))
def test_registry_get_lists_valid_names(registry: Registry):
    with pytest.raises(ValueError, match=f"unknown {registry.kind} 'nope'; valid: ") as err:
        registry.get("nope")
    assert_lists(str(err.value), registry.names())


def test_make_task_unknown_lists_tasks():
    with pytest.raises(ValueError, match="unknown task 'nope'; valid: ") as err:
        make_task("nope")
    assert_lists(str(err.value), TASKS)


# --- out-of-range values and incompatible switches -------------------------------------------------

OUT_OF_RANGE = [
    ({"steps": -1}, ["steps", ">= 1", "-1"]),
    ({"steps": 0}, ["steps", ">= 1", "0"]),
    ({"group_size": 0}, ["group_size", ">= 1"]),
    ({"temperature": 0.0}, ["temperature", "> 0", "0.0"]),
    ({"temperature": math.nan}, ["temperature", "> 0", "nan"]),
    ({"eps_low": 1.5}, ["eps_low", "[0, 1)", "1.5"]),
    ({"eps_high": -0.1}, ["eps_high", ">= 0"]),
    ({"top_entropy_frac": 0.0}, ["top_entropy_frac", "(0, 1]", "0.0"]),
    ({"top_entropy_frac": 1.5}, ["top_entropy_frac", "(0, 1]", "1.5"]),
    ({"fault_reward_flip": 2.0}, ["fault_reward_flip", "[0, 1]", "2.0"]),
    ({"fault_repeat_k": 8, "group_size": 8}, ["fault_repeat_k", "group_size", "[0, 8)", "8"]),
    ({"fault_repeat_k": 9, "group_size": 8}, ["fault_repeat_k", "group_size", "9"]),
    ({"dual_clip_c": 1.0}, ["dual_clip_c", "> 1"]),
    ({"kl_coef": -0.1}, ["kl_coef", ">= 0"]),
    ({"learning_rate": 0.0}, ["learning_rate", "> 0"]),
    ({"token_adv_mix": 1.5}, ["token_adv_mix", "[0, 1]"]),
    ({"is_low": 0.0}, ["is_low", "is_high"]),
    ({"cov_ratio": 0.0}, ["cov_ratio", "(0, 1]"]),
    ({"temperature_jitter": 1.0}, ["temperature_jitter", "< 1"]),
    ({"overlong_buffer": 24, "max_completion_length": 24}, ["overlong_buffer", "max_completion_length"]),
    ({"micro_batch_size": 100}, ["micro_batch_size", "100", "64 completions"]),
    ({"rewards": ("judge",), "reward_weights": (1.0, 2.0), "task": "judge"}, ["reward_weights", "2", "1"]),
    ({"advantage": "rloo", "group_size": 1}, ["rloo", "group_size >= 2"]),
    ({"group_size": 1}, ["'grpo'", "group_size >= 2", "got 1", "every advantage is 0", "'batch_std'"]),
    ({"group_size": 1, "advantage": "dr_grpo"}, ["'dr_grpo'", "group_size >= 2"]),
    (
        {"group_size": 1, "prompts_per_step": 1, "advantage": "batch_std"},
        ["batch_std", "at least 2", "got 1"],
    ),
    ({"rewards": ("correct",), "reward_weights": (0.0,)}, ["reward_weights", "all 0", "nonzero"]),
    ({"fault_stale_k": -1}, ["fault_stale_k", ">= 0"]),
    ({"seed": -1}, ["seed", ">= 0", "-1"]),
]


@pytest.mark.parametrize(("changes", "words"), OUT_OF_RANGE, ids=[str(c) for c, _ in OUT_OF_RANGE])
def test_out_of_range_value_says_what_and_range(changes, words):
    with pytest.raises(ValueError) as err:
        preset("grpo", **changes)
    for word in words:
        assert word in str(err.value), f"{word!r} not in: {err.value}"


INCOMPATIBLE = [
    (
        {"dynamic_sampling": True, "group_size": 1, "advantage": "batch_std"},
        ["dynamic_sampling", "group_size >= 2"],
    ),
    ({"entropy_target": 0.3}, ["entropy_target", "entropy_coef"]),
    ({"kl_schedule": "threshold", "kl_placement": "off"}, ["kl_schedule", "'threshold'", "kl_placement"]),
    ({"kl_schedule": "linear", "kl_placement": "off"}, ["kl_schedule", "'linear'", "kl_placement"]),
    ({"fault_stale_k": 1, "fault_sampler_dtype": "bfloat16"}, ["fault_stale_k", "fault_sampler_dtype"]),
]


@pytest.mark.parametrize(("changes", "words"), INCOMPATIBLE, ids=[str(c) for c, _ in INCOMPATIBLE])
def test_incompatible_switches_name_both(changes, words):
    with pytest.raises(ValueError, match="incompatible switches") as err:
        preset("grpo", **changes)
    for word in words:
        assert word in str(err.value), f"{word!r} not in: {err.value}"


def test_token_adv_mix_without_token_rewards_is_refused_by_train(tiny_model_path, tmp_path):
    """judge has no token credit and the KL is in the loss: nothing to mix. The message names the
    option and both ways out (a task with token credit, or the KL in the reward)."""
    out = tmp_path / "run"
    with pytest.raises(ValueError) as err:
        train(tiny(tiny_model_path, token_adv_mix=0.5), out=out)
    message = str(err.value)
    for word in ("token_adv_mix", "arith", "kl_placement", "reward"):
        assert word in message, f"{word!r} not in: {message}"
    assert not out.exists() and not summaries(tmp_path)


def test_token_adv_mix_with_kl_in_reward_is_accepted():
    """The other way out named by the message is really valid (config level)."""
    c = preset("grpo", task="judge", token_adv_mix=0.5, kl_placement="reward", kl_estimator="k1")
    assert c.token_adv_mix == 0.5


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_cuda(tiny_model_path, tmp_path):
    with pytest.raises(ValueError, match="device 'cuda'.*no CUDA.*'auto' or 'cpu'"):
        train(tiny(tiny_model_path, device="cuda"), out=tmp_path / "run")
    assert not (tmp_path / "run").exists()


# --- the command line ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--set", "nope=1"], ["unknown config field 'nope'", "valid:", "steps", "group_size"]),
        (["--set", "foo"], ["'foo'", "key=value"]),
        (["--set", "group_size=abc"], ["'group_size'", "int", "'abc'"]),
        (["--set", "steps=abc"], ["'steps'", "int", "'abc'"]),
        (["--set", "temperature=hot"], ["'temperature'", "float", "'hot'"]),
        (["--set", "lora=maybe"], ["'lora'", "bool", "'maybe'"]),
        (["--set", "advantage=nope"], ["unknown advantage 'nope'", "grpo", "rloo"]),
        (["--set", "temperature=0"], ["temperature must be > 0"]),
        (["--set", "group_size=1"], ["group_size >= 2", "got 1", "every advantage is 0"]),
        (["--preset", "nope"], ["unknown preset 'nope'", "grpo", "dapo"]),
        (["--set", "model=/no/such/model"], ["/no/such/model", "does not exist"]),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) and v[0].startswith("--") else "",
)
def test_cli_bad_input_exits_2_with_message(args, words, tmp_path, capsys):
    code = main(["train", "--steps", "1", "--out", str(tmp_path / "run"), *args])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("grpo-lab: error: ")
    for word in words:
        assert word in err, f"{word!r} not in: {err}"
    assert "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_cli_bad_int_argument_exits_2(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--steps", "abc"])
    assert exit_.value.code == 2
    assert "--steps" in capsys.readouterr().err


def test_parse_override_messages():
    with pytest.raises(ValueError, match="must look like key=value"):
        parse_override("foo")
    with pytest.raises(ValueError, match="unknown config field 'foo'; valid: "):
        parse_override("foo=1")
    with pytest.raises(ValueError, match=r"config field 'steps' expects .*int.*got '1\.5'"):
        parse_override("steps=1.5")
    with pytest.raises(ValueError, match=r"config field 'reward_weights' expects .*float.*"):
        parse_override("reward_weights=1,x")


@pytest.mark.parametrize("field", ["steps", "seed"])
def test_cli_set_steps_or_seed_is_applied_or_refused(field, tiny_model_path, tmp_path, capsys):
    code = main(tiny_args(tiny_model_path, tmp_path / "run", "--set", f"{field}=1"))
    err = capsys.readouterr().err
    assert code == 0 or (code == 2 and f"--{field}" in err)


# --- reward functions ------------------------------------------------------------------------------

PROMPTS, COMPLETIONS = ["sort 31:", "sort 22:"], ["13", "x2"]


def reward_error(fn) -> Exception:
    with pytest.raises((ValueError, RuntimeError)) as err:
        score([("my_reward", fn)], [1.0], PROMPTS, COMPLETIONS, answer=["13", "22"])
    return err.value


def test_raising_reward_function_is_named_with_an_example():
    def fn(prompts, completions, **kw):
        raise KeyError("missing column")

    err = reward_error(fn)
    assert isinstance(err, RuntimeError)
    message = str(err)
    for word in ("'my_reward'", "KeyError", "missing column", "'sort 31:'", "'13'"):
        assert word in message, f"{word!r} not in: {message}"
    assert isinstance(err.__cause__, KeyError)


@pytest.mark.parametrize(
    ("out", "words"),
    [
        ([1.0], ["list of 2", "got 1 values"]),
        ([1.0, 2.0, 3.0], ["list of 2", "got 3 values"]),
        ("1.0", ["list of 2", "got str"]),
        (None, ["list of 2", "got NoneType"]),
        (1.0, ["list of 2", "got float"]),
    ],
    ids=["short", "long", "string", "None", "scalar"],
)
def test_reward_function_wrong_shape(out, words):
    err = reward_error(lambda prompts, completions, **kw: out)
    assert isinstance(err, ValueError) and "'my_reward'" in str(err)
    for word in words:
        assert word in str(err), f"{word!r} not in: {err}"


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("0.5", "'0.5'"),
        (math.nan, "nan"),
        (math.inf, "inf"),
        (-math.inf, "-inf"),
        (True, "True"),
        ([1], "[1]"),
    ],
    ids=["string", "nan", "inf", "-inf", "bool", "list"],
)
def test_reward_function_bad_value_names_function_and_index(value, shown):
    err = reward_error(lambda prompts, completions, **kw: [0.25, value])
    assert isinstance(err, ValueError)
    message = str(err)
    for word in ("'my_reward'", shown, "index 1", "finite number or None"):
        assert word in message, f"{word!r} not in: {message}"


def test_reward_none_values_are_allowed():
    rewards, _ = score([("f", lambda p, c, **k: [None, 1.0])], [1.0], PROMPTS, COMPLETIONS)
    assert math.isnan(rewards[0]) and rewards[1] == 1.0


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_reward_numpy_scalars_are_numbers(dtype):
    values = list(np.array([0, 1], dtype=dtype))
    rewards, _ = score([("f", lambda p, c, **k: values)], [1.0], PROMPTS, COMPLETIONS)
    assert rewards.tolist() == [0.0, 1.0]


def test_score_without_reward_functions():
    with pytest.raises(ValueError, match="reward function"):
        score([], [], PROMPTS, COMPLETIONS)


def test_unknown_task_reward_lists_the_tasks_rewards(tiny_model_path, tmp_path):
    out = tmp_path / "run"
    with pytest.raises(ValueError, match=r"task 'judge' has no reward \['nope'\]; valid: ") as err:
        train(tiny(tiny_model_path, rewards=("nope",)), out=out)
    assert_lists(str(err.value), make_task("judge").rewards)
    assert not out.exists() and not summaries(tmp_path)


def test_duplicate_reward_names_are_refused(tiny_model_path, tmp_path):
    with pytest.raises(ValueError, match="judge"):
        train(tiny(tiny_model_path, rewards=("judge", "judge", "verbose")), out=tmp_path / "run")


def test_nonfinite_reward_weight_is_refused():
    with pytest.raises(ValueError, match="reward_weights"):
        preset("grpo", task="judge", rewards=("judge",), reward_weights=(math.nan,))


def test_infinite_learning_rate_is_refused():
    with pytest.raises(ValueError, match="learning_rate"):
        preset("grpo", learning_rate=math.inf)


def with_reward(fn):
    """A make_task replacement whose judge reward is `fn`."""

    def make(name, digits=None, *rest):
        task = make_task(name, digits, *rest)
        return dataclasses.replace(task, rewards={**task.rewards, "judge": fn})

    return make


@pytest.mark.parametrize(
    ("fn", "error", "words"),
    [
        (lambda p, c, **k: 1 / 0, RuntimeError, ["'judge'", "ZeroDivisionError", "sort "]),
        (lambda p, c, **k: [0.5], ValueError, ["'judge'", "got 1 values"]),
        (lambda p, c, **k: [math.nan] * len(c), ValueError, ["'judge'", "nan", "index 0"]),
    ],
    ids=["raises", "wrong-length", "nan"],
)
def test_bad_reward_in_train_leaves_no_summary(fn, error, words, tiny_model_path, tmp_path, monkeypatch):
    monkeypatch.setattr(trainer, "make_task", with_reward(fn))
    out = tmp_path / "run"
    with pytest.raises(error) as err:
        train(tiny(tiny_model_path), out=out)
    for word in words:
        assert word in str(err.value), f"{word!r} not in: {err.value}"
    assert not summaries(tmp_path)
    assert read_jsonl(out / METRICS) == []  # no step was logged


# --- tokenizers and model paths --------------------------------------------------------------------


@pytest.fixture(scope="module")
def broken_tokenizer_models(tiny_model_path, tmp_path_factory) -> dict[str, str]:
    """Copies of the tiny model whose tokenizer lacks a pad token, or an EOS token."""
    paths = {}
    for attr in ("pad_token", "eos_token"):
        path = tmp_path_factory.mktemp(f"no-{attr}")
        shutil.copytree(tiny_model_path, path, dirs_exist_ok=True)
        tok = AutoTokenizer.from_pretrained(tiny_model_path)
        setattr(tok, attr, None)
        tok.save_pretrained(path)
        assert getattr(AutoTokenizer.from_pretrained(path), attr) is None
        paths[attr] = str(path)
    return paths


@pytest.mark.parametrize(("attr", "words"), [("pad_token", "no pad token"), ("eos_token", "no EOS token")])
def test_tokenizer_without_special_token(attr, words, broken_tokenizer_models, tmp_path):
    path = broken_tokenizer_models[attr]
    with pytest.raises(ValueError, match=words) as err:
        load_policy(path, "judge", None, torch.device("cpu"))
    assert path in str(err.value)
    out = tmp_path / "run"
    with pytest.raises(ValueError, match=words):
        train(tiny(path), out=out)
    assert not out.exists()


@pytest.mark.parametrize("kind", ["absolute", "relative", "home"])
def test_missing_model_path(kind, tmp_path):
    model = {"absolute": str(tmp_path / "missing"), "relative": "./no-such-model-dir", "home": "~/no-such-m"}
    out = tmp_path / "run"
    with pytest.raises(ValueError, match="does not exist") as err:
        train(preset("grpo", model=model[kind], **TINY), out=out)
    assert model[kind] in str(err.value) and "'embedded'" in str(err.value)
    assert not out.exists()


def test_directory_that_is_not_a_model(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="could not load model") as err:
        load_policy(str(empty), "judge", None, torch.device("cpu"))
    assert str(empty) in str(err.value)


# --- tasks -----------------------------------------------------------------------------------------


def task(problems, **changes) -> Task:
    return Task(
        name="t",
        problems=tuple(problems),
        rewards={"r": lambda p, c, **k: [0.0] * len(c)},
        is_correct=lambda c, a: c == a,
        default_rewards=("r",),
        **changes,
    )


def examples(n: int) -> list[Example]:
    return [Example(prompt=f"p{i}", answer=str(i), solution=str(i)) for i in range(n)]


@pytest.mark.parametrize(
    ("problems", "changes"),
    [([], {}), (examples(1), {}), (examples(50), {"val_fraction": 0.9})],
    ids=["no-problems", "one-problem", "all-in-validation"],
)
def test_empty_split(problems, changes):
    with pytest.raises(ValueError, match="task 't' has an empty train or validation split"):
        task(problems, **changes)


@pytest.mark.parametrize("fraction", [0.0, 1.5])
def test_val_fraction_out_of_range(fraction):
    with pytest.raises(ValueError, match="val_fraction"):
        task(examples(50), val_fraction=fraction)


def test_malformed_problems():
    with pytest.raises((TypeError, ValueError), match="Example"):
        task(["p0", "p1"])


# --- run log files ---------------------------------------------------------------------------------


def test_read_jsonl_torn_last_line_keeps_rows(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 0}\n{"step": 1}\n{"step": 2, "rew')
    with pytest.warns(UserWarning, match="torn last line"):
        rows = read_jsonl(path)
    assert rows == [{"step": 0}, {"step": 1}]


def test_read_jsonl_corrupt_middle_line_is_named(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 0}\n{"step": 1, oops}\n{"step": 2}\n')
    with pytest.raises(ValueError, match="line 2 is not valid JSON") as err:
        read_jsonl(path)
    assert str(path) in str(err.value)


# --- the run directory -----------------------------------------------------------------------------


class StepSpy:
    """Counts sampling calls: a training step starts by sampling."""

    def __init__(self, monkeypatch):
        self.calls = 0
        real = rollout.sample_and_score

        def spy(*args, **kwargs):
            self.calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(rollout, "sample_and_score", spy)


@pytest.mark.parametrize("where", ["under-a-file", "is-a-file"])
def test_unwritable_run_directory_fails_before_training(where, tiny_model_path, tmp_path, monkeypatch):
    """Root ignores permissions, so the run directory is made impossible instead: its parent (or
    itself) is an existing regular file."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    out = blocker / "run" if where == "under-a-file" else blocker
    spy = StepSpy(monkeypatch)
    with pytest.raises(OSError) as err:
        train(tiny(tiny_model_path), out=out)
    message = str(err.value)
    assert str(out) in message
    assert "not writable" in message or "Not a directory" in message or "File exists" in message
    assert spy.calls == 0
    assert blocker.read_text() == "not a directory"
    assert not summaries(tmp_path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_parent_directory(tiny_model_path, tmp_path, monkeypatch):
    parent = tmp_path / "locked"
    parent.mkdir()
    parent.chmod(0o500)
    spy = StepSpy(monkeypatch)
    try:
        with pytest.raises(PermissionError, match="not writable"):
            train(tiny(tiny_model_path), out=parent / "run")
    finally:
        parent.chmod(0o700)
    assert spy.calls == 0 and not summaries(tmp_path)


def test_cli_unwritable_run_directory_exits_2(tiny_model_path, tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    code = main(tiny_args(tiny_model_path, blocker / "run"))
    err = capsys.readouterr().err
    assert code == 2 and str(blocker / "run") in err
    assert not summaries(tmp_path)


def test_run_directory_with_metrics_is_not_overwritten(tiny_model_path, tmp_path, monkeypatch):
    out = tmp_path / "run"
    out.mkdir()
    (out / METRICS).write_text('{"step": 0, "reward": 1.0}\n')
    spy = StepSpy(monkeypatch)
    with pytest.raises(FileExistsError, match="already holds metrics; choose a new --out"):
        train(tiny(tiny_model_path), out=out)
    assert spy.calls == 0
    assert (out / METRICS).read_text() == '{"step": 0, "reward": 1.0}\n'
    assert not summaries(tmp_path)


# --- config files ----------------------------------------------------------------------------------


def test_from_dict_and_json_unknown_field_lists_fields():
    for load in (lambda: Config.from_dict({"nope": 1}), lambda: Config.from_json('{"nope": 1}')):
        with pytest.raises(ValueError, match=r"unknown config field\(s\) \['nope'\]; valid: ") as err:
            load()
        assert_lists(str(err.value), field_names())


def test_replace_unknown_field():
    with pytest.raises(ValueError, match=r"unknown config field\(s\) \['nope'\]"):
        Config().replace(nope=1)


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"steps": "abc"}, ["'steps'", "int", "'abc'"]),
        ({"steps": 2.5}, ["'steps'", "int", "2.5"]),
        ({"steps": [1]}, ["'steps'", "int", "[1]"]),
        ({"temperature": "hot"}, ["'temperature'", "float", "'hot'"]),
        ({"lora": "maybe"}, ["'lora'", "bool", "'maybe'"]),
        ({"rewards": 5}, ["'rewards'", "tuple", "5"]),
        ({"reward_weights": ["x"]}, ["'reward_weights'", "float"]),
        ({"dual_clip_c": "abc"}, ["'dual_clip_c'", "float | None", "'abc'"]),
    ],
    ids=lambda v: next(iter(v)) if isinstance(v, dict) else "",
)
def test_from_dict_and_json_wrong_type(data, words):
    for load in (lambda: Config.from_dict(data), lambda: Config.from_json(json.dumps(data))):
        with pytest.raises(ValueError, match="config field .* expects") as err:
            load()
        for word in words:
            assert word in str(err.value), f"{word!r} not in: {err.value}"


def test_from_dict_none_for_required_field():
    with pytest.raises(ValueError, match="'steps'"):
        Config.from_dict({"steps": None})


def test_from_dict_string_for_tuple_field():
    with pytest.raises(ValueError, match="'rewards'"):
        Config.from_dict({"rewards": "judge"})


def test_from_dict_bool_for_int_field():
    with pytest.raises(ValueError, match="'steps'"):
        Config.from_dict({"steps": True})


def test_direct_constructor_wrong_type():
    with pytest.raises(ValueError, match="steps"):
        Config(steps="5")


# --- a user's task and reward functions (file:PATH, module:function) -------------------------------

USER_ROWS = [
    {"prompt": f"reverse {n}:", "answer": str(n)[::-1], "solution": str(n)[::-1]} for n in range(100, 140)
]


def user_file(tmp_path: Path, rows: list[dict] = USER_ROWS, name: str = "t.jsonl") -> str:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f"file:{path}"


def short_reward(prompts, completions, **kwargs):
    return [1.0]


def text_reward(prompts, completions, **kwargs):
    return ["good"] * len(completions)


@pytest.mark.parametrize(
    ("task", "words"),
    [
        (
            "file:{tmp}/missing.jsonl",
            ["task file", "missing.jsonl", "does not exist", ".jsonl, .csv, .parquet"],
        ),
        ("file:{tmp}/t.txt", ["t.txt", "suffix '.txt'", "valid: .jsonl, .csv, .parquet"]),
        ("file:", ["names no file", "file:PATH"]),
        ("no_such_module_17:make", ["task 'no_such_module_17:make' does not resolve", "no_such_module_17"]),
        ("grpo_lab.tasks.arith:nope", ["task 'grpo_lab.tasks.arith:nope'", "no attribute 'nope'"]),
        ("grpo_lab.tasks.base:parse_int", ["task 'grpo_lab.tasks.base:parse_int' raised TypeError"]),
        ("grpo_lab.tasks.arith:Example", ["task 'grpo_lab.tasks.arith:Example' raised TypeError"]),
        (
            "collections:OrderedDict",
            ["task 'collections:OrderedDict' returned a OrderedDict, not a grpo_lab"],
        ),
    ],
    ids=["missing", "suffix", "empty", "module", "attribute", "raises", "raises-too", "not-a-task"],
)
def test_bad_user_task_fails_before_training(task, words, tmp_path, tiny_model_path):
    (tmp_path / "t.txt").write_text("prompt\n")
    out = tmp_path / "run"
    with pytest.raises(ValueError) as err:
        train(tiny(tiny_model_path, task=task.format(tmp=tmp_path)), out=out)
    for word in words:
        assert word in str(err.value), f"{word!r} not in: {err.value}"
    assert not out.exists()


def test_file_without_prompt_column_names_the_file_and_its_columns(tmp_path, tiny_model_path):
    task = user_file(tmp_path, [{"question": "a", "answer": "b"}] * 20)
    with pytest.raises(ValueError, match="has no 'prompt' column; its columns: question, answer") as err:
        train(tiny(tiny_model_path, task=task), out=tmp_path / "run")
    assert str(tmp_path / "t.jsonl") in str(err.value) and not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("rows", "words"),
    [
        ([*USER_ROWS[:5], {"prompt": 7}], ["row 5", "'prompt' must be a string", "7"]),
        ([*USER_ROWS[:5], {"prompt": [{"role": "user", "content": "x"}]}], ["row 5", "must be a string"]),
        ([{**r, "split": "dev"} for r in USER_ROWS], ["row 0", "unknown split 'dev'", "validation"]),
    ],
    ids=["number", "mixed-chat", "split"],
)
def test_bad_rows_are_named(rows, words, tmp_path):
    with pytest.raises(ValueError) as err:
        make_task(user_file(tmp_path, rows), model="any/model")
    for word in (str(tmp_path / "t.jsonl"), *words):
        assert word in str(err.value), f"{word!r} not in: {err.value}"


def test_bad_jsonl_line_is_named(tmp_path):
    (tmp_path / "t.jsonl").write_text('{"prompt": "a"}\n{"prompt": \n')
    with pytest.raises(ValueError, match=r"t.jsonl', line 2: not JSON"):
        make_task(f"file:{tmp_path / 't.jsonl'}")


def test_config_refuses_malformed_task_and_reward_names():
    valid = "valid: arith, scratchpad, worked, judge, word, file:PATH"
    with pytest.raises(ValueError, match=f"unknown task 'nope'; {valid}"):
        preset("grpo", task="nope")
    with pytest.raises(
        ValueError, match="reward 'a:b:c' is neither a name of the task's rewards nor an import"
    ):
        preset("grpo", rewards=("a:b:c",))


@pytest.mark.parametrize(
    ("reward", "words"),
    [
        ("no_such_module_17:fn", ["reward function 'no_such_module_17:fn' does not resolve"]),
        (f"{__name__}:short_reward", [f"'{__name__}:short_reward'", "list of 2", "got 1 values"]),
        (f"{__name__}:text_reward", [f"'{__name__}:text_reward'", "'good'", "finite number or None"]),
    ],
    ids=["unresolvable", "wrong-length", "not-a-number"],
)
@pytest.mark.parametrize("task", ["judge", "file"])
def test_bad_imported_reward_fails_before_training(reward, words, task, tmp_path, tiny_model_path):
    out = tmp_path / "run"
    task = user_file(tmp_path) if task == "file" else task
    with pytest.raises(ValueError) as err:
        train(tiny(tiny_model_path, task=task, rewards=(reward,)), out=out)
    for word in words:
        assert word in str(err.value), f"{word!r} not in: {err.value}"
    assert not out.exists()


def test_cli_reports_a_missing_task_file(tmp_path, tiny_model_path, capsys):
    args = tiny_args(tiny_model_path, tmp_path / "r", "--set", f"task=file:{tmp_path}/nope.jsonl")
    assert main(args) == 2
    assert "nope.jsonl' does not exist" in capsys.readouterr().err
