"""What the two no-inert-arm modules share (`test_arms_act.py`, `test_tricks_act.py`): the first
steps of a design's points, and whether two runs differ."""

from collections.abc import Callable, Sequence

import pandas as pd
import pytest

from grpo_lab import train
from grpo_lab.experiments.designs import Point

STEPS = 4
"""steps of each brief run: what the activity measures need"""
CHANGED = ["reward", "loss", "grad_norm", "entropy"]
"""the logged columns two runs of different arms must not share"""


@pytest.fixture(scope="session")
def brief_runs(embedded_worked_path) -> Callable[[Sequence[Point]], dict]:
    """Train the first `STEPS` steps of each point, validation kept small (greedy and sampled: the
    activity measures read the training rows alone): label -> (config, metrics)."""

    def train_briefly(points: Sequence[Point]) -> dict:
        small = dict(steps=STEPS, eval_every=STEPS, eval_start=0, val_size=4, val_sampled_size=4)
        configs = {p.label: p.config.replace(**small) for p in points}
        return {label: (config, train(config)) for label, config in configs.items()}

    return train_briefly


def differs(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    """Whether two runs' training rows differ in any of `CHANGED`."""
    a, b = (df.dropna(subset=["reward"])[CHANGED].reset_index(drop=True) for df in (a, b))
    return not a.equals(b)


@pytest.fixture(scope="session")
def runs_differ() -> Callable[[pd.DataFrame, pd.DataFrame], bool]:
    return differs
