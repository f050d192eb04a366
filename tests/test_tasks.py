import random

import pytest

from grpo_lab.tasks import TASKS, make_task
from grpo_lab.tasks.arith import digit_credit
from grpo_lab.tasks.base import parse_int
from grpo_lab.tasks.judge import HIGH, LOW, judge_score
from grpo_lab.tasks.scratchpad import column_work, final_answer
from grpo_lab.tasks.worked import columns, solution

_CACHE = {}


def task(name, digits=None):
    if (name, digits) not in _CACHE:
        _CACHE[name, digits] = make_task(name, digits)
    return _CACHE[name, digits]


def reward(t, completions, answers):
    (name,) = t.default_rewards
    return t.rewards[name]([""] * len(completions), completions, answer=answers)


def some_examples(t, n=300):
    return list(t.val) + random.Random(0).sample(t.train, n)


def test_task_registry():
    assert sorted(TASKS) == ["arith", "judge", "scratchpad", "worked"]
    with pytest.raises(
        ValueError, match="unknown task 'nope'; valid: arith, scratchpad, worked, judge, word,"
    ):
        make_task("nope")


@pytest.mark.parametrize("name", list(TASKS))
def test_train_and_val_are_disjoint_and_non_empty(name):
    t = task(name)
    assert t.name == name
    train, val = {ex.prompt for ex in t.train}, {ex.prompt for ex in t.val}
    assert train and val
    assert not train & val
    assert len(train) + len(val) == len(t.problems) == len({ex.prompt for ex in t.problems})
    assert 0.05 < len(val) / len(t.problems) < 0.15


@pytest.mark.parametrize("name", list(TASKS))
def test_split_does_not_depend_on_construction(name):
    assert make_task(name).val == task(name).val


@pytest.mark.parametrize("name", list(TASKS))
def test_batch_is_deterministic_in_seed_and_step(name):
    t = task(name)
    b = t.batch(0, 3, 8)
    assert len(b) == 8 and len({ex.prompt for ex in b}) == 8
    assert b == t.batch(0, 3, 8)
    assert b != t.batch(0, 4, 8)
    assert b != t.batch(1, 3, 8)
    train = set(t.train)
    assert all(ex in train for ex in b)
    assert [ex.prompt for ex in t.batch(5, 0, 4)] == [ex.prompt for ex in make_task(name).batch(5, 0, 4)]


def test_batch_larger_than_train_set_samples_with_replacement():
    t = task("arith", 1)
    b = t.batch(0, 0, len(t.train) + 5)
    assert len(b) == len(t.train) + 5
    assert set(b) <= set(t.train)


@pytest.mark.parametrize("name", list(TASKS))
def test_validation_is_a_fixed_prefix(name):
    t = task(name)
    assert t.validation(5) == list(t.val[:5])
    assert t.validation(10**9) == list(t.val)


@pytest.mark.parametrize("name", ["arith", "scratchpad", "worked"])
def test_reference_solutions_are_correct(name):
    t = task(name)
    examples = some_examples(t)
    scores = reward(t, [ex.solution for ex in examples], [ex.answer for ex in examples])
    assert scores == [1.0] * len(examples)
    assert all(t.is_correct(ex.solution, ex.answer) for ex in examples)
    wrong = [str(int(ex.answer) + 1) for ex in examples[:20]]
    assert reward(t, wrong, [ex.answer for ex in examples[:20]]) == [0.0] * 20


def test_judge_reference_solutions_score_the_top():
    t = task("judge")
    examples = some_examples(t)
    scores = reward(t, [ex.solution for ex in examples], [ex.answer for ex in examples])
    assert scores == pytest.approx([0.85] * len(examples))
    assert all(t.is_correct(ex.solution, ex.answer) for ex in examples)
    assert not t.is_correct("0000", "0012")


def test_judge_rewards_lie_in_range_for_random_strings():
    rng = random.Random(0)
    alphabet = "0123456789abc +-=>\n"
    completions = ["".join(rng.choices(alphabet, k=rng.randrange(0, 12))) for _ in range(500)]
    answers = ["".join(sorted(rng.choices("0123456789", k=4))) for _ in range(500)]
    scores = judge_score([""] * 500, completions, answer=answers)
    assert all(LOW <= s <= HIGH for s in scores)
    assert (LOW, HIGH) == (0.75, 0.85)
    assert judge_score([""], [""], answer=["1234"]) == [pytest.approx(0.75)]
    assert judge_score([""], ["1243"], answer=["1234"])[0] == pytest.approx(0.75 + 0.1 * 0.75)


HOSTILE = [
    "__import__('os').system('echo hacked')",
    "__import__('pathlib').Path('{marker}').touch()",
    "1+1",
    "2*1",
    "eval('2')",
    "(2)",
    "2.0",
    "0x2",
    "2 # comment",
]


@pytest.mark.parametrize("name", ["arith", "scratchpad", "worked"])
def test_parsing_never_evaluates_code(name, tmp_path, capfd):
    marker = tmp_path / "pwned"
    t = task(name)
    completions = [c.format(marker=marker) for c in HOSTILE]
    if name != "arith":
        completions = [">" + c for c in completions]
    answers = ["2"] * len(completions)
    assert reward(t, completions, answers) == [0.0] * len(completions)
    assert t.rewards["format"]([""] * len(completions), completions) == [0.0] * len(completions)
    assert not marker.exists()
    assert "hacked" not in capfd.readouterr().out


@pytest.mark.parametrize(
    "text", ["1e3", " 12 3", "0x10", "5" * 50, "1_000", "1.0", "", "-", "--1", "+5", "1,000"]
)
def test_parse_int_rejects(text):
    assert parse_int(text) is None


@pytest.mark.parametrize(
    "text, value", [("12", 12), (" 85\n", 85), ("-7", -7), ("007", 7), ("9" * 12, 10**12 - 1)]
)
def test_parse_int_accepts(text, value):
    assert parse_int(text) == value


def test_parse_int_unicode_digit_does_not_raise():
    assert parse_int("²") is None


@pytest.mark.parametrize(
    "completion, expected",
    [
        ("7+8=15,3+4+1=8>85", 85),
        (">85", 85),
        ("1>2>12", 12),
        ("a>b> 12 ", 12),
        ("85", None),
        ("12>", None),
        (">1+1", None),
        ("", None),
    ],
)
def test_scratchpad_final_answer(completion, expected):
    assert final_answer(completion) == expected


def test_scratchpad_correct_and_format():
    t = task("scratchpad")
    assert reward(t, ["7+8=15>85", "x>84>85", "85"], ["85"] * 3) == [1.0, 1.0, 0.0]
    assert t.rewards["format"]([""] * 3, ["7+8=15>85", "x>84>85", "85"]) == [1.0, 0.0, 0.0]
    assert column_work(37, 48, 2) == "7+8=15,3+4+1=8"


def test_arith_correct_needs_a_plain_integer():
    t = task("arith")
    assert reward(t, ["85", " 85 ", "85.", "= 85", "850"], ["85"] * 5) == [1.0, 1.0, 0.0, 0.0, 0.0]
    assert t.is_correct("85", "85") and not t.is_correct("86", "85")


@pytest.mark.parametrize(
    "completion, answer, credit",
    [
        ("85", "85", [1.0, 1.0]),
        ("84", "85", [1.0, 0.0]),
        ("859", "85", [1.0, 1.0, 0.0]),
        ("1", "100", [1.0]),
        ("", "85", []),
        (" 85", "85", [0.0, 0.0, 0.0]),
    ],
)
def test_arith_digit_credit(completion, answer, credit):
    assert digit_credit(completion, answer) == credit
    assert task("arith").token_credit is digit_credit


def test_digits_change_the_problem_set():
    assert len(task("arith", 1).problems) == 100
    assert len(task("judge", 2).problems) == 100
    assert task("scratchpad", 1).problems[0].prompt == "0+0=?"


@pytest.mark.parametrize("name", ["arith", "scratchpad"])
def test_operands_have_exactly_the_given_number_of_digits(name):
    for digits, count in [(1, 10), (2, 90)]:
        operands = {int(x) for ex in task(name, digits).problems for x in ex.prompt.rstrip("=?").split("+")}
        assert operands == set(range(10 ** (digits - 1) if digits > 1 else 0, 10**digits))
        assert len(task(name, digits).problems) == count**2


def test_operand_size_below_one_is_refused():
    with pytest.raises(ValueError, match="at least 1 digit"):
        make_task("arith", 0)


def test_worked_styles():
    assert solution(37, 48, 2, "direct") == ">85"
    assert solution(37, 48, 2, "columns") == "7+8=15,3+4+1=8>85"
    assert columns(37, 48, 2, named=True) == "units 7+8=15 carry 1,tens 3+4+1=8 carry 0"
    assert columns(95, 17, 2, named=True) == "units 5+7=12 carry 1,tens 9+1+1=11 carry 1"


def test_worked_answers_are_long_and_of_varied_length():
    """The reference completions the warm start learns from average over 30 tokens (with EOS) and
    spread from a bare answer to the named columns: room for length to grow or shrink."""
    lengths = [len(ex.solution) + 1 for ex in task("worked").problems]
    mean = sum(lengths) / len(lengths)
    assert 30 < mean < 35 and min(lengths) <= 5 and max(lengths) >= 45
    assert len(set(lengths)) >= 10
