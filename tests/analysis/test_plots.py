"""Figures: what each plot draws (lines, bars, labels, texts) from its data, and `save` (the data and
the provenance it writes beside each figure)."""

import datetime
import json
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_rgba

from grpo_lab.analysis import plots
from grpo_lab.analysis.horizon import Correlation

matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def close_figures():
    yield
    matplotlib.pyplot.close("all")


def runs_frame(groups: dict[str, float], seeds: int = 3, steps: int = 6) -> pd.DataFrame:
    rows = []
    for label, level in groups.items():
        for seed in range(seeds):
            for step in range(steps):
                rows.append({"label": label, "seed": seed, "step": step, "reward": level + 0.01 * seed,
                             "entropy": 1.0 - 0.05 * step, "val/accuracy": level})  # fmt: skip
    return pd.DataFrame(rows)


def test_curves_label_units_and_put_the_legend_below(tmp_path):
    fig = plots.curves(runs_frame({"a": 0.2, "b": 0.5}), ["reward", "entropy"], by="label", ncols=2)
    axes = fig.axes
    assert [ax.get_ylabel() for ax in axes] == [plots.UNITS["reward"], plots.UNITS["entropy"]]
    assert [len(ax.lines) for ax in axes] == [2, 2]
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["a", "b"]
    path = plots.save(fig, "curves", directory=tmp_path)
    assert path == tmp_path / "curves.png" and path.stat().st_size > 0


def test_curves_give_each_line_its_seeds_where_the_lines_differ():
    frame = pd.concat([runs_frame({"a": 0.2}, seeds=3), runs_frame({"b": 0.5}, seeds=6)])
    (legend,) = plots.curves(frame, ["reward"], by="label").legends
    assert [t.get_text() for t in legend.get_texts()] == ["a (3 seeds)", "b (6 seeds)"]
    (legend,) = plots.curves(runs_frame({"a": 0.2, "b": 0.5}), ["reward"], by="label").legends
    assert [t.get_text() for t in legend.get_texts()] == ["a", "b"]


def test_validation_curves_show_the_value_at_each_evaluation_never_a_running_mean():
    rows = [{"seed": seed, "step": step, "reward": reward, "val/accuracy": acc}
            for seed in range(2)
            for step, reward, acc in ((0, 0.0, 0.1), (10, 1.0, 0.9), (20, 0.0, 0.5))]  # fmt: skip
    fig = plots.curves(pd.DataFrame(rows), ["val/accuracy", "reward"], smooth=3, ncols=2, title="t")
    validation, reward = fig.axes[:2]
    assert validation.lines[0].get_ydata().tolist() == pytest.approx([0.1, 0.9, 0.5])
    assert reward.lines[0].get_ydata().tolist() == pytest.approx([0.0, 0.5, 1 / 3])  # trailing 3-step mean
    caption = fig._suptitle.get_text()
    assert "over 2 seeds" in caption and "trailing mean over 3 logged steps" in caption
    assert "value at each evaluation step" in caption
    assert reward.get_title().endswith("3-step mean") and "mean" not in validation.get_title()


def test_a_curve_of_one_run_per_line_claims_no_interval():
    fig = plots.curves(runs_frame({"a": 0.2, "b": 0.5}, seeds=1), ["reward"], by="label")
    caption = fig._suptitle.get_text()
    assert "one run per line (no interval)" in caption and "t-interval" not in caption


def test_rule_heatmaps_draw_each_panel_out_of_its_own_runs():
    counts = {
        "grpo": pd.DataFrame({"clean": [0, 1], "flip": [3, 2]}, index=["stall", "nan"]),
        "dapo": pd.DataFrame({"clean": [1], "flip": [0]}, index=["stall"]),
    }
    totals = {"grpo": {"clean": 3, "flip": 3}, "dapo": {"clean": 3, "flip": 3}}
    fig = plots.rule_heatmaps(counts, totals, title="rules per scheme")
    grpo, dapo = fig.axes[:2]
    assert grpo.get_title() == "grpo" and dapo.get_title() == "dapo"
    assert [t.get_text() for t in dapo.get_yticklabels()] == ["stall", "nan"]  # the rows of every panel
    assert grpo.images[0].get_array()[0, 1] == pytest.approx(1.0)  # 3 of 3
    assert [t.get_text() for t in dapo.texts] == ["1", "0", "0", "0"]


def verdict_table() -> pd.DataFrame:
    return pd.DataFrame({
        "label": ["all", "-x", "-y"], "mean": [0.5, 0.2, 0.52], "lo": [0.45, 0.15, 0.40],
        "hi": [0.55, 0.25, 0.64], "verdict": ["reference", "lower", "no clear change"],
    })  # fmt: skip


def test_intervals_draw_each_row_with_its_interval_and_colour():
    fig = plots.intervals(verdict_table(), "label", "accuracy")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["all", "-x", "-y"]
    bars = ax.containers
    assert len(bars) == 3
    lower = bars[1]
    assert lower.lines[0].get_xdata()[0] == pytest.approx(0.2)  # the dot
    assert to_rgba(lower.lines[0].get_color()) == to_rgba(plots.VERDICT_COLORS["lower"])
    segment = lower.lines[2][0].get_segments()[0]  # the interval bar
    assert segment[:, 0] == pytest.approx([0.15, 0.25])
    band = [p for p in ax.patches if p.get_alpha() == pytest.approx(0.08)]
    assert len(band) == 1  # the reference's interval
    assert ax.get_xlabel() == "accuracy"


def test_ablation_colours_only_clear_changes():
    df = runs_frame({"all": 0.5, "-x": 0.2, "-y": 0.52})
    fig = plots.ablation(df, verdict_table(), by="label", metric="reward", outcome="val/accuracy", smooth=1)
    left = fig.axes[0]
    grey = [line for line in left.lines if to_rgba(line.get_color()) == to_rgba(plots.OTHER)]
    coloured = [line for line in left.lines if line.get_label() in ("all (reference)", "-x (lower)")]
    assert len(coloured) == 2
    assert len([line for line in grey if len(line.get_xdata())]) == 1  # "-y", drawn thin and grey


def test_robustness_one_panel_per_fault_one_line_per_scheme():
    rows = []
    for fault, levels in (
        ("fault_reward_sigma", [0.0, 0.5, 1.0]),
        ("fault_sampler_dtype", ["none", "bfloat16"]),
    ):
        for scheme in ("grpo", "scheme_a", "scheme_b"):
            for level in levels:
                rows.append({"fault": fault, "scheme": scheme, "level": level, "n": 3, "mean": 0.5,
                             "lo": 0.4, "hi": 0.6})  # fmt: skip
    fig = plots.robustness(pd.DataFrame(rows), ylabel="accuracy", ncols=2)
    sigma, dtype = fig.axes
    assert sigma.get_title() == plots.FAULT_TITLES["fault_reward_sigma"]
    assert [t.get_text() for t in dtype.get_xticklabels()] == ["none", "bfloat16"]
    assert len(sigma.containers) == 3 and len(dtype.containers) == 3
    offsets = [c.lines[0].get_xdata()[0] for c in sigma.containers]
    assert offsets == sorted(offsets) and len(set(offsets)) == 3  # side by side, not on top of each other
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["grpo", "scheme_a", "scheme_b"]


def test_rule_heatmap_writes_counts_and_says_when_nothing_fired():
    counts = pd.DataFrame({"clean": [0, 1], "repeat_k=6": [5, 0]}, index=["zero_variance_groups", "kl_drift"])
    fig = plots.rule_heatmap(counts, {"clean": 6, "repeat_k=6": 6})
    ax = fig.axes[0]
    assert sorted(t.get_text() for t in ax.texts) == ["0", "0", "1", "5"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["clean (n=6)", "repeat_k=6 (n=6)"]
    assert ax.images[0].get_array()[0, 1] == pytest.approx(5 / 6)
    empty = plots.rule_heatmap(counts.iloc[:0], {"clean": 6, "repeat_k=6": 6})
    assert "no rule fired on any of the 12 runs" in [t.get_text() for t in empty.axes[0].texts]


def test_scheme_summary_rows_follow_the_order():
    finals = pd.DataFrame([
        {"preset": p, "task": t, "seed": s, "acc": v + 0.01 * s}
        for p, v in (("grpo", 0.5), ("dapo", 0.6)) for t in ("arith", "judge") for s in range(3)
    ])  # fmt: skip
    aggregate = pd.DataFrame({"preset": ["dapo", "grpo"], "iqm": [0.61, 0.51], "iqm_lo": [0.6, 0.5],
                              "iqm_hi": [0.62, 0.52]})  # fmt: skip
    improvement = pd.DataFrame({"preset": ["dapo"], "poi": [1.0], "poi_lo": [1.0], "poi_hi": [1.0]})
    fig = plots.scheme_summary(finals, "acc", aggregate, improvement, by="preset", strata="task",
                               baseline="grpo", order=["grpo", "dapo"])  # fmt: skip
    per_task, iqm, poi = fig.axes
    assert [t.get_text() for t in per_task.get_yticklabels()] == ["grpo", "dapo"]
    assert len(per_task.containers) == 2  # one per task
    dots = iqm.containers[0].lines[0]
    assert dots.get_xdata().tolist() == [0.51, 0.61]  # grpo on top (y = 1), dapo below (y = 0)
    assert dots.get_ydata().tolist() == [1, 0]
    assert np.isnan(poi.containers[0].lines[0].get_xdata()[0])  # no probability of grpo over itself


def test_correlation_scatter_and_phase():
    per_run = pd.DataFrame({"lr": [1, 1, 2, 2], "early": [0.1, 0.2, 0.3, 0.4], "final": [0.2, 0.1, 0.4, 0.3]})
    corr = {"across all runs": Correlation(0.6, -0.2, 0.9, 0.25, 4)}
    fig = plots.correlation_scatter(per_run, "early", "final", "lr", corr, "early reward", "final accuracy")
    ax = fig.axes[0]
    assert len(ax.collections) == 2
    assert "across all runs: rho = 0.60 [-0.20, 0.90], p = 0.250, n = 4" in ax.texts[0].get_text()
    fig = plots.phase(runs_frame({"a": 0.2, "b": 0.5}), "entropy", "reward", by="label", smooth=2)
    bold = [line for line in fig.axes[0].lines if line.get_linewidth() == 2.0]
    assert [line.get_label() for line in bold] == ["a", "b"]
    assert bold[0].get_xdata()[0] == pytest.approx(0.975)  # the first full window: steps 0 and 1
    assert len(bold[0].get_xdata()) == 5  # 6 steps, drawn from the second on
    short = plots.phase(runs_frame({"a": 0.2}, steps=3), "entropy", "reward", by="label", smooth=20)
    assert len(short.axes[0].lines[1].get_xdata()) == 1  # runs shorter than the window: one window each
    assert "trailing mean over 3 steps" in short.axes[0].get_title()
    assert "mean of 3 seeds" in short.axes[0].get_title()


def test_rule_heatmaps_say_when_no_rule_fired():
    counts = {"grpo": pd.DataFrame(index=pd.Index([], name="rule"), columns=["clean"], dtype=int)}
    fig = plots.rule_heatmaps(counts, {"grpo": {"clean": 2}}, title="t")
    assert [t.get_text() for t in fig.axes[0].texts] == ["no rule fired on any of the 2 runs"]


def test_save_writes_the_data_a_figure_draws_beside_it(tmp_path, monkeypatch):
    """NAME.json holds what the figure shows: labels, categories, line points, markers, bars, heatmap
    values, texts; numbers to 6 digits, NaN as None; numeric tick labels are left out."""
    fig, (left, right) = matplotlib.pyplot.subplots(1, 2)
    left.plot([0, 1, 2], [0.1234567, np.nan, 0.3])
    left.scatter([1.0], [2.0])
    left.bar(["grpo", "dapo"], [1.0, 2.0])
    left.set_title("panel")
    left.text(0, 0, "note")
    right.imshow([[1.0, 2.0], [3.0, 4.0]])
    fig.suptitle("both")
    monkeypatch.setenv(plots.FIGURES_DIR, str(tmp_path / "scratch"))
    path = plots.save(fig, "07_demo")
    assert path == tmp_path / "scratch" / "07_demo.png" and path.exists()
    data = json.loads(path.with_suffix(".json").read_text())
    assert data["title"] == "both"
    first, second = data["axes"]
    assert first["title"] == "panel" and first["texts"] == ["note"]
    assert first["lines"] == [[[0.0, 0.123457], [1.0, None], [2.0, 0.3]]]
    assert first["collections"] == [[[1.0, 2.0]]]
    assert [bar[3] for bar in first["bars"]] == [1.0, 2.0]
    assert first["xticklabels"] == ["grpo", "dapo"] and first["yticklabels"] == []
    assert second["images"] == [[[1.0, 2.0], [3.0, 4.0]]]
    assert plots.save(fig, "07_demo", directory=tmp_path) == tmp_path / "07_demo.png"  # an argument wins


def test_save_records_the_notebook_profile_and_commit_it_was_told(tmp_path, monkeypatch):
    """Under `grpo-lab figures` the kernel's environment names the notebook, the profile and the
    commit: the figure's data records them under one key, beside the drawn data, with the time."""
    monkeypatch.setenv(plots.NOTEBOOK_ENV, "03_schemes")
    monkeypatch.setenv(plots.PROFILE_ENV, "full")
    monkeypatch.setenv(plots.COMMIT_ENV, "0123456789ab+dirty")
    fig, ax = matplotlib.pyplot.subplots()
    ax.plot([0, 1], [0, 1])
    before = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    data = json.loads(plots.save(fig, "03_demo", directory=tmp_path).with_suffix(".json").read_text())
    assert set(data) == {"title", "axes", plots.PROVENANCE}
    record = data[plots.PROVENANCE]
    written = datetime.datetime.fromisoformat(record.pop("written"))
    assert record == {"notebook": "03_schemes", "profile": "full", "commit": "0123456789ab+dirty"}
    assert before <= written <= datetime.datetime.now(datetime.timezone.utc)


def test_a_figure_saved_by_hand_records_unknown_rather_than_a_guess(tmp_path, monkeypatch):
    """Saved from JupyterLab (no `grpo-lab figures` around it): the notebook and profile are
    recorded as unknown; the commit is read from this package's checkout."""
    for name in (plots.NOTEBOOK_ENV, plots.PROFILE_ENV, plots.COMMIT_ENV):
        monkeypatch.delenv(name, raising=False)
    asked = []
    monkeypatch.setattr(plots, "git_commit", lambda root: asked.append(root) or "fedcba987654")
    fig, _ = matplotlib.pyplot.subplots()
    data = json.loads(plots.save(fig, "03_by_hand", directory=tmp_path).with_suffix(".json").read_text())
    record = data[plots.PROVENANCE]
    assert {k: record[k] for k in ("notebook", "profile", "commit")} == {
        "notebook": plots.UNKNOWN,
        "profile": plots.UNKNOWN,
        "commit": "fedcba987654",
    }
    assert asked == [Path(plots.__file__).parent]


def test_git_commit_is_unknown_outside_a_checkout(tmp_path):
    assert plots.git_commit(tmp_path) == plots.UNKNOWN


def test_an_evaluation_curve_is_not_drawn_across_steps_where_nothing_was_measured():
    tail = pd.DataFrame({"step": [0, 30, 35, 40, 45, 50], "mean": [0.1, 0.3, 0.31, 0.32, 0.33, 0.34]})
    broken = plots.broken_at_gaps(tail)
    assert len(broken) == 7 and broken["mean"].isna().sum() == 1
    assert broken.loc[broken["mean"].isna(), "step"].item() == 15  # inside the gap 0-30 only
    regular = pd.DataFrame({"step": [0, 5, 10, 15], "mean": [0.1, 0.2, 0.3, 0.4]})
    assert len(plots.broken_at_gaps(regular)) == 4
