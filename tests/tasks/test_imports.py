"""Import paths `module:function` for tasks and reward functions."""

import pytest

from grpo_lab.tasks.imports import is_import_path, resolve


def test_resolves_a_function():
    from grpo_lab.tasks.arith import correct

    assert resolve("grpo_lab.tasks.arith:correct", "reward function") is correct


@pytest.mark.parametrize("text", ["mod:fn", "a.b_c:fn2", "_m:_f"])
def test_import_path_forms(text):
    assert is_import_path(text)


@pytest.mark.parametrize("text", ["mod", "mod:", ":fn", "a b:fn", "mod:fn:x", "file:data.jsonl/x"])
def test_not_import_paths(text):
    assert not is_import_path(text)


@pytest.mark.parametrize(
    ("path", "words"),
    [
        (
            "no_such_module_17:fn",
            ["'no_such_module_17:fn' does not resolve", "no module named 'no_such_module_17'"],
        ),
        ("grpo_lab.tasks.arith:nope", ["has no attribute 'nope'", "correct"]),
        ("grpo_lab.tasks.imports:IMPORT_PATH", ["is a Pattern, not a function"]),
        ("not a path", ["is not an import path", "'module:function'"]),
    ],
    ids=["module", "attribute", "not-callable", "form"],
)
def test_unresolvable_paths_are_named(path, words):
    with pytest.raises(ValueError) as err:
        resolve(path, "reward function")
    assert f"reward function {path!r}" in str(err.value)
    for word in words:
        assert word in str(err.value), f"{word!r} not in: {err.value}"


def test_a_module_in_the_current_directory_is_found(tmp_path, monkeypatch):
    (tmp_path / "cwd_rewards_17.py").write_text("def r(prompts, completions, **kw):\n    return [0.0]\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", [p for p in __import__("sys").path if p not in ("", str(tmp_path))])
    assert resolve("cwd_rewards_17:r", "reward function").__name__ == "r"


def test_a_task_by_import_path_is_the_functions_task_with_imported_rewards():
    from grpo_lab.tasks import make_task

    task = make_task("grpo_lab.tasks.judge:make", rewards=("grpo_lab.tasks.arith:well_formed",))
    assert task.problems == make_task("judge").problems
    assert task.rewards["grpo_lab.tasks.arith:well_formed"].__name__ == "well_formed"
    assert {"judge", "length_bonus"} <= set(task.rewards)
