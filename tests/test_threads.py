"""torch_threads sets the thread count for a block and restores it, even on an error."""

import pytest
import torch

from grpo_lab.threads import torch_threads


def test_torch_threads_sets_and_restores():
    before = torch.get_num_threads()
    with torch_threads(2):
        assert torch.get_num_threads() == 2
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError), torch_threads(3):
        raise RuntimeError
    assert torch.get_num_threads() == before
    with torch_threads(0):  # 0 keeps the current count
        assert torch.get_num_threads() == before
