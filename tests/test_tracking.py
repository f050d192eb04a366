"""Live tracking callbacks: in memory, printed, TensorBoard, and a sweep's callbacks factory."""

import io
from pathlib import Path

import pytest

from grpo_lab import experiments, train
from grpo_lab.runlog import read_summary
from grpo_lab.tracking import (
    TENSORBOARD_DIR,
    ListCallback,
    PrintCallback,
    TensorBoardCallback,
    tensorboard_callbacks,
)


def test_list_and_print_callbacks_see_every_row_and_the_summary(tiny_config, tmp_path):
    kept, printed = ListCallback(), io.StringIO()
    df = train(tiny_config(), out=tmp_path, callbacks=[kept, PrintCallback(every=2, file=printed)])
    assert [r["step"] for r in kept.rows] == list(df["step"]) == [0, 1, 2, 3]
    assert kept.rows[1]["reward"] == df["reward"].iloc[1]
    assert kept.summary == read_summary(tmp_path)
    lines = printed.getvalue().splitlines()
    assert [line.split(":")[0] for line in lines] == ["step 0", "step 2", "summary"]
    assert "reward=" in lines[0] and "val/accuracy=" in lines[0] and "val/reward_end=" in lines[2]


def scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_tensorboard_callback_writes_scalars(tiny_config, tmp_path):
    pytest.importorskip("tensorboard", reason="tensorboard is not installed (pip install 'grpo_lab[lab]')")
    df = train(tiny_config(), callbacks=[TensorBoardCallback(tmp_path)])
    logged = scalars(tmp_path)
    assert [step for step, _ in logged["reward"]] == [0, 1, 2]
    assert logged["reward"][2][1] == pytest.approx(df["reward"].iloc[2])
    assert [step for step, _ in logged["val/accuracy"]] == [0, 3]
    assert "summary/val/reward_end" in logged and not any(tag == "step" for tag in logged)


def test_sweep_callbacks_factory_logs_each_trained_run(tiny_config, tmp_path):
    pytest.importorskip("tensorboard", reason="tensorboard is not installed (pip install 'grpo_lab[lab]')")
    result = experiments.sweep(
        tiny_config(), {}, [0, 1], tmp_path, workers=1, progress=False,
        callbacks_factory=tensorboard_callbacks,
    )  # fmt: skip
    for path in result.runs["path"]:
        assert len(scalars(Path(path) / TENSORBOARD_DIR)["reward"]) == 3
