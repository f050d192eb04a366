"""The embedded model's warm start: the cached model does not depend on the thread count of the
process that happens to build it first (a one-thread sweep worker, say)."""

import torch
from safetensors.torch import load_file

from grpo_lab.models import embedded


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
