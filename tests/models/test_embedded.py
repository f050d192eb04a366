"""The embedded model's warm start: the cached model does not depend on the thread count of the
process that happens to build it first (a one-thread sweep worker, say); a task the caller built names
the same model as its name."""

import pytest
import torch
from safetensors.torch import load_file

from grpo_lab.models import embedded
from grpo_lab.tasks import make_task


def test_warm_start_does_not_depend_on_the_callers_threads(tmp_path, monkeypatch):
    monkeypatch.setitem(embedded.WARM_START, "max_steps", 20)  # a short build shows it as well as a whole one
    built = []
    before = torch.get_num_threads()
    try:
        for threads in (1, 2):
            monkeypatch.setenv("GRPO_LAB_CACHE", str(tmp_path / f"threads{threads}"))
            torch.set_num_threads(threads)
            built.append(load_file(embedded.embedded_path("judge") / "model.safetensors"))
            assert torch.get_num_threads() == threads  # the caller's setting is given back
    finally:
        torch.set_num_threads(before)
    one, two = built
    assert one.keys() == two.keys() and all(torch.equal(one[k], two[k]) for k in one)


@pytest.mark.parametrize("task", ["worked", "judge", "arith", "file:notebooks/data/reverse_digits.jsonl"])
def test_a_built_task_names_the_same_model_and_start(task):
    """The trainer hands its built task down instead of the model code building it again from its name:
    the model it names is the one the name gives, the shipped one with its recorded start."""
    built = make_task(task, None)
    path = embedded.embedded_path(task, None, built)
    assert path == embedded.embedded_path(task) == embedded.shipped_dir(task)
    assert embedded.embedded_dir(task, None, built) == embedded.embedded_dir(task)
    assert embedded.recorded_sha256(path) == embedded.start_sha256(task)
