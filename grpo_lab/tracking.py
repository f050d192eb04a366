"""Live tracking: callbacks the trainer calls with every logged row (`on_step(step, row)`) and, at the
end, with the run's summary (`on_end(summary)`), see `grpo_lab.training.trainer.Callback`.

Watch one run with `train(config, callbacks=[TensorBoardCallback("runs/tb/demo")])`; give every run
of a sweep its own TensorBoard log with `sweep(..., callbacks_factory=tensorboard_callbacks)`, then
`tensorboard --logdir <root>`."""

import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from grpo_lab.config import Config

TENSORBOARD_DIR = "tensorboard"
"""the folder of a run directory that `tensorboard_callbacks` writes to"""


class ListCallback:
    """Keeps every row and the summary in memory (tests, notebooks)."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.summary: dict[str, Any] | None = None

    def on_step(self, step: int, row: dict) -> None:
        self.rows.append({**row, "step": step})

    def on_end(self, summary: dict) -> None:
        self.summary = dict(summary)


class PrintCallback:
    """Prints a few metrics every `every` steps, then the summary."""

    def __init__(
        self,
        metrics: Sequence[str] = ("reward", "kl", "entropy", "val/accuracy"),
        every: int = 1,
        file: TextIO | None = None,
    ) -> None:
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        self.metrics, self.every, self.file = tuple(metrics), every, file

    def on_step(self, step: int, row: dict) -> None:
        if step % self.every == 0:
            shown = [f"{m}={row[m]:.4g}" for m in self.metrics if _is_number(row.get(m))]
            print(f"step {step}: " + " ".join(shown), file=self.file or sys.stdout)

    def on_end(self, summary: dict) -> None:
        shown = [f"{k}={v:.4g}" for k, v in summary.items() if _is_number(v)]
        print("summary: " + " ".join(shown), file=self.file or sys.stdout)


class TensorBoardCallback:
    """Writes every numeric metric as a TensorBoard scalar (torch.utils.tensorboard.SummaryWriter;
    needs the `tensorboard` package, in the `lab` extra) and the summary under `summary/`."""

    def __init__(self, log_dir: str | Path) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as err:
            raise ImportError("TensorBoardCallback needs tensorboard: pip install 'grpo_lab[lab]'") from err
        self.writer = SummaryWriter(log_dir=str(log_dir))

    def on_step(self, step: int, row: dict) -> None:
        for name, value in row.items():
            if name != "step" and _is_number(value):
                self.writer.add_scalar(name, value, step)
        self.writer.flush()

    def on_end(self, summary: dict) -> None:
        for name, value in summary.items():
            if _is_number(value):
                self.writer.add_scalar(f"summary/{name}", value, 0)
        self.writer.close()


def tensorboard_callbacks(config: Config, run_dir: Path) -> list[TensorBoardCallback]:
    """A sweep's `callbacks_factory`: a TensorBoard log in each trained run's directory."""
    return [TensorBoardCallback(Path(run_dir) / TENSORBOARD_DIR)]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
