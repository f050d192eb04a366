"""Notebook 11's study helpers: the model a profile trains and paired per-seed differences."""

import math
from types import SimpleNamespace

import pandas as pd
import pytest
from transformers import AutoModelForCausalLM

from grpo_lab.analysis import verdict_table
from grpo_lab.profiles import profile
from grpo_lab.studies import your_task
from grpo_lab.studies.your_task import paired_differences, smoke_model, study_model, study_task


def finals(values: dict[str, list[float]]) -> pd.DataFrame:
    return pd.DataFrame(
        [{"preset": k, "seed": s, "val/accuracy": v} for k, vs in values.items() for s, v in enumerate(vs)]
    )


def test_paired_differences_pair_seeds():
    # dapo is 0.1 above grpo on every seed although the seeds spread widely: paired, that is clear
    table = paired_differences(
        finals({"dapo": [0.3, 0.6, 0.9], "grpo": [0.2, 0.5, 0.8], "gspo": [0.1, 0.6, 0.8]}),
        "val/accuracy",
        "preset",
        "grpo",
    )
    assert table["preset"].tolist() == ["grpo", "dapo", "gspo"]
    rows = table.set_index("preset")
    assert rows.loc["grpo", "verdict"] == "reference" and rows.loc["grpo", "mean"] == 0
    assert rows.loc["dapo", "mean"] == pytest.approx(0.1) and rows.loc["dapo", "verdict"] == "higher"
    assert (
        rows.loc["gspo", "verdict"] == "no clear change"
        and rows.loc["gspo", "lo"] < 0 < rows.loc["gspo", "hi"]
    )
    assert rows["pairs"].tolist() == [3, 3, 3]


def test_paired_differences_with_one_seed_has_no_interval():
    table = paired_differences(finals({"grpo": [0.2], "dapo": [0.9]}), "val/accuracy", "preset", "grpo")
    dapo = table.set_index("preset").loc["dapo"]
    assert dapo["verdict"] == "too few runs" and math.isnan(dapo["lo"])


def test_the_compared_score_is_the_headline_the_verdict_table_reads():
    """Each run's score is the mean sampled accuracy over the second half of its evaluations, not its
    last greedy accuracy; the greedy one over the same window is beside it."""
    steps = [0, 10, 20]
    metrics = pd.DataFrame(
        {"preset": "grpo", "seed": 0, "step": steps, "val/sampled_accuracy": [0.1, 0.3, 0.5],
         "val/accuracy": [0.2, 0.6, 0.4]}
    )  # fmt: skip
    row = your_task.finals(SimpleNamespace(metrics=metrics)).iloc[0]
    assert row[your_task.SCORE] == pytest.approx(0.4) and row["greedy"] == pytest.approx(0.5)


def test_paired_differences_need_the_reference():
    with pytest.raises(ValueError, match="reference 'grpo' has no run; groups: dapo"):
        paired_differences(finals({"dapo": [0.1, 0.2]}), "val/accuracy", "preset", "grpo")


def test_study_model(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_LAB_CACHE", str(tmp_path))
    assert study_model("my/model", profile("smoke")) == "my/model"
    assert study_model(None, profile("full")) == "embedded"
    path = study_model(None, profile("smoke"))
    assert path == str(smoke_model()) and path.startswith(str(tmp_path))
    assert AutoModelForCausalLM.from_pretrained(path).num_parameters() < 100_000


def test_study_task_takes_a_relative_file_from_the_project_root():
    from grpo_lab.analysis.plots import project_root

    assert (
        study_task("file:tests/data/your_task.jsonl")
        == f"file:{project_root() / 'tests/data/your_task.jsonl'}"
    )
    assert study_task("file:/data/x.jsonl") == "file:/data/x.jsonl"
    assert study_task("judge") == "judge" and study_task("mymod:make") == "mymod:make"


def test_the_verdict_table_is_one_holm_family_with_raw_and_adjusted_words():
    """Three presets against grpo: each row keeps its raw word and gets the word of its interval at its
    Holm level, and the caption names the family and its size."""

    def runs(label, score):
        base = {"label": label, "seed": range(4), "score": score, "start": 0.3, "step_s": 1.0}
        counts = dict(zip(verdict_table.COUNT_COLUMNS, (3.0, 2.0, 1.0, 100.0, 100.0)))
        return pd.DataFrame({**base, **counts, **{k: 1.0 for k in verdict_table.STABILITY_COLUMNS}})

    arms = {"grpo": [0.50, 0.60, 0.55, 0.65], "a": [0.60, 0.71, 0.64, 0.76], "b": [0.51, 0.62, 0.54, 0.66],
            "c": [0.52, 0.60, 0.57, 0.64]}  # fmt: skip
    scored = pd.concat([runs(label, score) for label, score in arms.items()])
    rows = your_task.table(scored, "grpo")
    assert list(rows["row"]) == ["a", "b", "c"]
    assert {"verdict", "adjusted verdict", "adjusted ci_low"} <= set(rows)
    assert (rows["adjusted ci_low"] <= rows["ci_low"]).all()
    assert your_task.caption(rows).startswith("family: every preset against the first, the rows of this")
    assert "(3 comparisons); Holm" in your_task.caption(rows)
