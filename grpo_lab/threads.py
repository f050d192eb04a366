"""Torch's CPU thread count, set for a block of code and restored after it."""

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run the block on n torch threads (0 keeps the current count), then restore the count it had:
    results on CPU depend on the thread count, so code that needs a fixed one sets it here without
    changing it for its caller."""
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
