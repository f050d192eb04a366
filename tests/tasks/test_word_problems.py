"""The `word` task: distinct English word problems whose worked solutions compute their answers from the
question's numbers, one- and two-step problems in validation, the strict and lenient readings of an
answer, prompts rendered by the model's chat template (a tiny one here, SmolLM2's when it is cached),
and clear errors for the embedded model and a size setting."""

import re
from fractions import Fraction

import pytest
from transformers import AutoTokenizer

from grpo_lab.config import Config
from grpo_lab.models.pretrained import RECORD, pretrained_dir
from grpo_lab.tasks import BUILT_IN, CHAT_TASKS, make_task
from grpo_lab.tasks import word_problems as word
from grpo_lab.tasks.word_problems import EQUATION, INSTRUCTION, ends_with_answer, is_correct, steps

TEMPLATE = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}>"
OPS = {"+": Fraction.__add__, "-": Fraction.__sub__, "*": Fraction.__mul__, "/": Fraction.__truediv__}


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory, tiny_model_path) -> str:
    """The tiny model's tokenizer with a chat template that shows each message's role and content."""
    path = tmp_path_factory.mktemp("chat-model")
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    tokenizer.chat_template = TEMPLATE
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def task(chat_model):
    return make_task("word", model=chat_model)


def test_the_word_task_is_a_built_in_chat_task():
    assert list(CHAT_TASKS) == ["word"] and "word" in BUILT_IN
    with pytest.raises(ValueError, match=r"unknown task 'nope'; valid: arith, .*judge, word, file:PATH"):
        make_task("nope")


def test_every_prompt_is_one_user_message_ending_with_the_instruction(task):
    questions = [p.question for p in word.problems()]
    assert [ex.prompt for ex in task.problems] == [f"<user>{q} {INSTRUCTION}>" for q in questions]
    assert len(set(questions)) == len(questions) >= 3000
    assert word.problems() == word.problems()  # no randomness beyond the fixed seed


def test_each_solution_computes_its_answer_from_the_questions_numbers(task):
    for problem, ex in zip(word.problems(), task.problems):
        known = {int(n) for n in re.findall(r"\d+", problem.question)}
        equations = EQUATION.findall(ex.solution)
        assert 1 <= len(equations) == steps(ex) <= 2, ex.solution
        for a, op, b, result in equations:
            assert {int(a), int(b)} <= known, f"{ex.solution!r} uses a number not in {problem.question!r}"
            assert OPS[op](Fraction(a), Fraction(b)) == int(result), ex.solution
            known.add(int(result))
        assert int(equations[-1][3]) == problem.answer == int(ex.answer)
        assert 1 <= problem.answer <= 99
        assert ends_with_answer(ex.solution, ex.answer) and is_correct(ex.solution, ex.answer)


def test_train_and_validation_split_both_kinds_of_problem(task):
    assert not {ex.prompt for ex in task.train} & {ex.prompt for ex in task.val}
    assert 0.05 < len(task.val) / len(task.problems) < 0.15
    assert {steps(ex) for ex in task.val} == {steps(ex) for ex in task.train} == {1, 2}


def test_the_tasks_fields(task):
    assert task.name == "word" and task.default_rewards == ("word_lenient",)
    assert {"word_lenient", "word_strict", "length_bonus"} <= set(task.rewards)
    assert task.reward_range == (0.0, 1.0) and task.token_credit is None


# completion, answer, strict reward, lenient reward
READINGS = [
    ("Li had 34 cards and gave away 27, so 34 - 27 = 7.", "7", 1.0, 1.0),
    ("The answer is 7", "7", 1.0, 1.0),
    ("The answer is 7. \n", "7", 1.0, 1.0),
    ("#### 7", "7", 1.0, 1.0),
    ("It costs $12", "12", 1.0, 1.0),
    ("So Li has 7 cards left.", "7", 0.0, 1.0),  # a number followed by words: only lenient
    ("7 cards", "7", 0.0, 1.0),
    ("The answer is **7**", "7", 0.0, 1.0),
    ("The answer is 7..", "7", 0.0, 1.0),  # one final period is dropped, not two
    ("The total is 1,200.", "1200", 0.0, 1.0),  # thousands separators: only lenient
    ("She saved $1,200", "1200", 0.0, 1.0),
    ("The answer is 7.0", "7", 0.0, 1.0),
    ("The answer is -7.", "7", 0.0, 0.0),  # negative
    ("The answer is 3.7", "7", 0.0, 0.0),  # a decimal ending in the answer's digit
    ("The answer is 17", "7", 0.0, 0.0),  # a larger number ending in the answer's digit
    ("First 7, then 5 more, so 12 in all", "7", 0.0, 0.0),  # only the last number counts
    ("I do not know.", "7", 0.0, 0.0),  # no number
    ("", "7", 0.0, 0.0),
]


@pytest.mark.parametrize(("completion", "answer", "strict", "lenient"), READINGS)
def test_strict_and_lenient_rewards(task, completion, answer, strict, lenient):
    def reward(name):
        (value,) = task.rewards[name](prompts=["p"], completions=[completion], answer=[answer])
        return value

    assert (reward("word_strict"), reward("word_lenient")) == (strict, lenient)
    assert task.is_correct(completion, answer) == (lenient == 1.0)


def test_the_embedded_model_is_refused_with_what_to_use():
    message = r"task 'word' writes English text for a pretrained chat model.*model='smollm2-135m'"
    with pytest.raises(ValueError, match=message):
        make_task("word")
    with pytest.raises(ValueError, match=message):
        word.make("embedded")
    with pytest.raises(ValueError, match=message):
        Config(task="word")
    assert Config(task="word", model="smollm2-135m").task == "word"  # checked without loading a model


def test_a_size_setting_is_refused(chat_model):
    with pytest.raises(ValueError, match="task 'word' has no size setting, got digits=2"):
        make_task("word", 2, model=chat_model)
    with pytest.raises(ValueError, match="task 'word' has no size setting, got task_digits=2; valid: 0"):
        Config(task="word", model="smollm2-135m", task_digits=2)


def test_a_model_without_a_chat_template_reads_the_message_as_it_is(tiny_model_path):
    task = make_task("word", model=tiny_model_path)
    assert task.problems[0].prompt == f"{word.problems()[0].question} {INSTRUCTION}"


SMOLLM2 = pretrained_dir("smollm2-135m")


@pytest.mark.slow
@pytest.mark.skipif(not (SMOLLM2 / RECORD).exists(), reason="SmolLM2-135M is not converted on this machine")
def test_smollm2s_chat_template_renders_the_prompts():
    task = make_task("word", model=str(SMOLLM2))
    prompt = task.problems[0].prompt
    assert prompt.startswith("<|im_start|>system\n")
    assert prompt.endswith(f"{INSTRUCTION}<|im_end|>\n<|im_start|>assistant\n")
    assert {steps(ex) for ex in task.validation(64)} == {1, 2}  # the start accuracy's prompts mix both
