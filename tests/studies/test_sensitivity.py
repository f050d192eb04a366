"""The sensitivity study: its profile and scans, the design points, and the outcome table, cliffs and
figure on synthetic runs (a failure edge is planted in one scan)."""

import numpy as np
import pandas as pd
import pytest

from grpo_lab.comparisons import bed
from grpo_lab.studies import sensitivity


def test_settings_share_one_base_and_validate_only_at_the_ends():
    full = sensitivity.settings("full")
    assert full.steps == sensitivity.FULL.steps and full.eval_every == full.steps
    assert sensitivity.settings("full", steps=20).eval_every == 20
    base = sensitivity.base_config(full)
    assert base == bed.base(full)
    smoke = sensitivity.settings("smoke")
    assert sensitivity.base_config(smoke).steps == smoke.steps == smoke.eval_every


def test_scans_and_their_points():
    full = {s.name: s for s in sensitivity.scans(sensitivity.settings("full"))}
    assert set(full) == {"learning_rate", "clip_range", "kl_coef", "group_size"}
    smoke = {s.name: s for s in sensitivity.scans(sensitivity.settings("smoke"))}
    assert all(set(smoke[n].values) <= set(full[n].values) for n in full)
    base = sensitivity.base_config(sensitivity.settings("smoke"))
    for scan in full.values():  # the base's own value is in every scan
        assert getattr(base, scan.fields[0]) in scan.values, scan.name
    clip = sensitivity.points(base, full["clip_range"])
    assert [p.columns for p in clip][:2] == [
        {"scan": "clip_range", "value": 0.01},
        {"scan": "clip_range", "value": 0.05},
    ]
    assert all(p.config.eps_low == p.config.eps_high == p.columns["value"] for p in clip)
    assert all(p.config.num_iterations == 2 for p in clip)
    lr = sensitivity.points(base, full["learning_rate"])
    default = next(p for p in lr if p.columns["value"] == base.learning_rate)
    assert default.config.key() == base.key()  # shared by every scan's default point
    design = sensitivity.design(sensitivity.settings("full"))
    assert len(design) == sum(len(s.values) for s in sensitivity.SCANS)
    assert len({p.config.key() for p in design}) < len(design)  # the base is in several scans


def synthetic_metrics(seeds: int = 3) -> pd.DataFrame:
    """Final validation accuracy and training rewards of a learning-rate scan that falls beyond 1e-4,
    and a group-size scan that rises steeply from 2 to 4."""
    rng = np.random.default_rng(0)
    accuracy = {1e-5: 0.42, 3e-5: 0.45, 1e-4: 0.50, 3e-4: 0.20, 1e-3: 0.05}
    rows = []
    for scan, values in (("learning_rate", accuracy), ("group_size", {2: 0.25, 4: 0.46, 8: 0.45, 16: 0.47})):
        for value, level in values.items():
            for seed in range(seeds):
                for step in range(5):
                    rows.append({"scan": scan, "value": value, "seed": seed, "step": step,
                                 "reward": level + 0.01 * rng.standard_normal()})  # fmt: skip
                rows.append({"scan": scan, "value": value, "seed": seed, "step": 5,
                             "val/accuracy": level + 0.01 * rng.standard_normal()})  # fmt: skip
    return pd.DataFrame(rows)


def test_outcomes_failure_edges_and_figure_on_synthetic_runs():
    scans = [s for s in sensitivity.SCANS if s.name in ("learning_rate", "group_size")]
    outcomes = sensitivity.outcome_table(synthetic_metrics(), scans)
    assert set(outcomes["outcome"]) == {"val/accuracy", "reward"}
    acc = outcomes[(outcomes["scan"] == "learning_rate") & (outcomes["outcome"] == "val/accuracy")]
    assert list(acc["value"]) == sorted(acc["value"]) and (acc["n"] == 3).all()
    assert (acc["lo"] < acc["mean"]).all() and (acc["mean"] < acc["hi"]).all()
    found = sensitivity.edge_table(outcomes, margin=0.1)
    accuracy = found[found["outcome"] == "val/accuracy"]
    assert list(accuracy[accuracy["scan"] == "learning_rate"]["value"]) == [3e-4, 1e-3]
    first = accuracy.iloc[0]
    assert first["best"] == 1e-4 and first["drop"] == pytest.approx(0.3, abs=0.05)
    assert list(accuracy[accuracy["scan"] == "group_size"]["value"]) == [2]  # below the best, not the rise
    base = sensitivity.base_config(sensitivity.settings("smoke"))
    fig = sensitivity.figure(outcomes, scans, 0.1, base)
    assert len(fig.axes) == 4
    assert any(line.get_color() == "tab:red" for line in fig.axes[0].get_lines())  # the edge is drawn
