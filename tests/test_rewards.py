import math

import pytest
import torch

from grpo_lab.rewards import score
from grpo_lab.tasks import make_task

PROMPTS = ["1+1=", "2+2=", "3+3="]
COMPLETIONS = ["2", "5", "x"]
ANSWERS = ["2", "4", "6"]


def const(values):
    def fn(prompts, completions, **kwargs):
        return list(values)

    return fn


def test_weighted_sum_and_per_function_values():
    funcs = [("a", const([1.0, 0.0, 0.5])), ("b", const([2, 4, -1]))]
    rewards, per = score(funcs, [1.0, 0.5], PROMPTS, COMPLETIONS, answer=ANSWERS)
    assert torch.allclose(rewards, torch.tensor([2.0, 2.0, 0.0]))
    assert list(per) == ["a", "b"]
    assert per["b"].dtype == torch.float32
    assert per["b"].tolist() == [2.0, 4.0, -1.0]


def test_none_is_nan_and_skipped():
    funcs = [("a", const([None, 1.0, None])), ("b", const([0.5, None, None]))]
    rewards, per = score(funcs, [1.0, 2.0], PROMPTS, COMPLETIONS)
    assert math.isnan(per["a"][0]) and math.isnan(per["b"][1])
    assert rewards[0].item() == pytest.approx(1.0)  # 2.0 x 0.5, the None skipped
    assert rewards[1].item() == pytest.approx(1.0)
    assert math.isnan(rewards[2].item())  # no function scored this row


def test_single_function_all_none_is_nan():
    rewards, _ = score([("a", const([None, None, None]))], [1.0], PROMPTS, COMPLETIONS)
    assert torch.isnan(rewards).all()


def test_zero_reward_is_not_nan():
    rewards, _ = score([("a", const([0.0, None, 0]))], [1.0], PROMPTS, COMPLETIONS)
    assert rewards[0].item() == 0.0 and rewards[2].item() == 0.0
    assert math.isnan(rewards[1].item())


def test_raising_reward_function_is_reported():
    def exploding(prompts, completions, **kwargs):
        raise KeyError("missing column")

    with pytest.raises(RuntimeError) as err:
        score([("exploding", exploding)], [1.0], PROMPTS, COMPLETIONS)
    msg = str(err.value)
    assert "'exploding'" in msg and "KeyError" in msg and "missing column" in msg
    assert "'1+1='" in msg and "'2'" in msg
    assert isinstance(err.value.__cause__, KeyError)


@pytest.mark.parametrize("out", [[1.0, 0.0], [1.0, 0.0, 1.0, 0.0], 1.0, None, "abc"])
def test_wrong_length_or_type_of_output(out):
    def bad(prompts, completions, **kwargs):
        return out

    with pytest.raises(ValueError, match="'bad' must return a list of 3"):
        score([("bad", bad)], [1.0], PROMPTS, COMPLETIONS)


@pytest.mark.parametrize(
    "value", ["1.0", True, False, math.inf, -math.inf, math.nan, [1.0], torch.tensor(1.0)]
)
def test_non_number_is_rejected(value):
    with pytest.raises(ValueError, match=r"'bad' returned .* at index 1"):
        score([("bad", const([0.0, value, 1.0]))], [1.0], PROMPTS, COMPLETIONS)


def test_tuple_output_is_accepted():
    rewards, _ = score([("t", lambda p, c, **k: (1, 2, 3))], [2.0], PROMPTS, COMPLETIONS)
    assert rewards.tolist() == [2.0, 4.0, 6.0]


def test_trl_style_reward_function_works_unchanged():
    def accuracy_reward(prompts, completions, **kwargs):
        rewards = []
        for completion, answer in zip(completions, kwargs["answer"]):
            rewards.append(1.0 if completion.strip() == answer else 0.0)
        return rewards

    seen = {}

    def length_penalty(prompts, completions, **kwargs):
        seen.update(kwargs, prompts=prompts)
        return [-0.1 * len(c) for c in completions]

    rewards, per = score(
        [("accuracy", accuracy_reward), ("length", length_penalty)],
        [1.0, 1.0],
        PROMPTS,
        COMPLETIONS,
        answer=ANSWERS,
        difficulty=[1, 2, 3],
    )
    assert per["accuracy"].tolist() == [1.0, 0.0, 0.0]
    assert torch.allclose(rewards, torch.tensor([0.9, -0.1, -0.1]))
    assert seen == {"answer": ANSWERS, "difficulty": [1, 2, 3], "prompts": PROMPTS}


def test_task_reward_functions_through_score():
    task = make_task("arith")
    funcs = [(n, task.rewards[n]) for n in ("correct", "format")]
    rewards, per = score(funcs, [1.0, 0.1], PROMPTS, COMPLETIONS, answer=ANSWERS)
    assert per["correct"].tolist() == [1.0, 0.0, 0.0]
    assert per["format"].tolist() == [1.0, 1.0, 0.0]
    assert torch.allclose(rewards, torch.tensor([1.1, 0.1, 0.0]))
