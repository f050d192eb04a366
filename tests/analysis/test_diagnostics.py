"""Diagnostics: each rule fires on a series built to trigger it and stays silent on a healthy run;
the report; and a real tiny run diagnosed from its directory and in its summary."""

import math

import numpy as np
import pandas as pd
import pytest

from grpo_lab import train
from grpo_lab.analysis.diagnostics import (
    CHECKS,
    Finding,
    Thresholds,
    accuracy_change_sd,
    diagnose,
    diagnose_run,
    format_findings,
    summary_findings,
)
from grpo_lab.runlog import RunWriter, read_summary

STEPS = 100
COS = "grad_cos/policy:correct__policy:format"


def noise(scale: float, seed: int, steps: int = STEPS) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.0, scale, steps)


def every(k: int, values: np.ndarray) -> np.ndarray:
    """Values logged every k steps only (NaN elsewhere), like grad_cos."""
    return np.where(np.arange(len(values)) % k == 0, values, np.nan)


def healthy(columns: dict | None = None, steps: int = STEPS) -> pd.DataFrame:
    """A healthy run: reward rising slowly with noise, KL levelling off, entropy slowly falling, clip
    ratio ~0.02, steady lengths and diversity; `columns` replaces or adds training columns (arrays of
    `steps` values). Validation every 25 steps plus the final validation-only row, like the trainer."""
    t = np.arange(steps, dtype=float)
    kl = 0.05 * (1 - np.exp(-t / 15)) * (1 + noise(0.03, 1, steps))
    train_cols = {
        "reward": 0.3 + 0.3 * (1 - np.exp(-t / 50)) + noise(0.02, 2, steps),
        "reward_std": 0.15 + noise(0.01, 3, steps),
        "frac_reward_zero_std": np.clip(0.1 + noise(0.03, 4, steps), 0, 1),
        "rewards/correct/mean": 0.3 + 0.3 * (1 - np.exp(-t / 50)),
        "kl": kl,
        "kl/k1": kl,
        "kl/k3": kl,
        "entropy": 1.5 * np.exp(-t / 300) + noise(0.01, 5, steps),
        "clip_ratio/region_mean": np.clip(0.02 + noise(0.005, 6, steps), 0, 1),
        "ratio/mean": 1 + noise(0.003, 7, steps),
        "ratio/std": 0.01 + np.abs(noise(0.002, 8, steps)),
        "grad_norm": np.exp(noise(0.1, 9, steps)),
        "completions/mean_length": 6 + noise(0.3, 10, steps),
        "completions/clipped_ratio": np.clip(0.05 + noise(0.02, 11, steps), 0, 1),
        "is/logp_gap_mean": 0.0005 + np.abs(noise(0.0001, 12, steps)),
        "is/ess": 0.99 - np.abs(noise(0.005, 13, steps)),
        "diversity/distinct2_group": 0.6 + noise(0.02, 14, steps),
        "diversity/distinct2_batch": 0.5 + noise(0.02, 15, steps),
        "diversity/identical_group_frac": np.clip(0.05 + noise(0.02, 16, steps), 0, 1),
        "diversity/template_frac": np.clip(0.03 + noise(0.01, 17, steps), 0, 1),
        COS: every(10, 0.3 + noise(0.1, 18, steps)),
        "nonfinite/skipped_steps": np.zeros(steps),
        "loss": noise(0.05, 19, steps),
        "learning_rate": np.full(steps, 1e-5),
        **(columns or {}),
    }
    df = pd.DataFrame({"step": np.arange(steps), **train_cols})
    df["val/accuracy"] = every(25, np.linspace(0.2, 0.5, steps))
    final = pd.DataFrame({"step": [steps], "val/accuracy": [0.5]})
    return pd.concat([df, final], ignore_index=True)


def rules(findings: list[Finding]) -> set[str]:
    return {f.rule for f in findings}


T = np.arange(STEPS, dtype=float)


def burst(base: float, value: float, start: int, stop: int) -> np.ndarray:
    out = np.full(STEPS, base)
    out[start:stop] = value
    return out


def spikes() -> np.ndarray:
    g = np.exp(noise(0.1, 9))
    g[[30, 60]] = 20.0
    return g


def conflict() -> np.ndarray:
    """Cosines logged every 5 steps: near zero for the first 20 steps, then around -0.5."""
    cos = noise(0.25, 18)
    cos[20:] -= 0.5
    return every(5, cos)


def skipped_with_nan_loss() -> dict:
    count = np.zeros(STEPS)
    count[50:], count[70:] = 1, 2
    loss = noise(0.05, 19)
    loss[[50, 70]] = np.nan  # the skipped steps log no finite loss
    return {"nonfinite/skipped_steps": count, "loss": loss}


TRIGGERS = {
    "clip_rate": {"clip_ratio/region_mean": burst(0.02, 0.35, 40, 70)},
    "importance_ratio": {"ratio/mean": np.full(STEPS, 1.2)},
    "kl_drift": {"kl": 0.002 * T * (1 + noise(0.03, 1))},
    "kl_volatility": {"kl": 0.05 * np.exp(noise(0.8, 1))},
    "entropy_collapse": {"entropy": 1.5 * np.exp(-T / 8) + 0.001},
    "entropy_rising": {"entropy": 1.5 * (1 + T / 30)},
    "grad_spikes": {"grad_norm": spikes()},
    "zero_variance_groups": {"frac_reward_zero_std": np.full(STEPS, 0.8)},
    "mode_collapse": {
        "diversity/identical_group_frac": np.linspace(0.05, 0.9, STEPS),
        "diversity/distinct2_group": np.linspace(0.6, 0.1, STEPS),
    },
    "template_collapse": {"diversity/template_frac": np.linspace(0.03, 0.9, STEPS)},
    "length_explosion": {"completions/mean_length": np.linspace(6, 30, STEPS)},
    "length_collapse": {"completions/mean_length": np.linspace(6, 1.5, STEPS)},
    "truncation": {"completions/clipped_ratio": np.full(STEPS, 0.6)},
    "sampler_mismatch": {"is/logp_gap_mean": np.full(STEPS, 0.4)},
    "conflicting_objectives": {COS: conflict()},
    "nonfinite_skipped": skipped_with_nan_loss(),
    "nonfinite": {"grad_norm": burst(1.0, np.nan, 33, 34)},
}


def test_healthy_run_has_no_findings():
    assert diagnose(healthy()) == []
    assert diagnose(healthy(), config={"kl_placement": "reward"}) == []


@pytest.mark.parametrize("rule", list(TRIGGERS))
def test_rule_fires_on_its_trigger_only(rule):
    found = diagnose(healthy(TRIGGERS[rule]))
    assert rules(found) == {rule}, [f.message for f in found]
    f = found[0]
    assert f.suggestion == CHECKS[rule] and f.suggestion.startswith(
        ("[Evaluation guide §", "[Tricks review §")
    )
    assert f.steps[0] <= f.steps[1] and f.evidence and f.message


def test_levels():
    assert {f.level for f in diagnose(healthy(TRIGGERS["nonfinite"]))} == {"error"}
    assert {f.level for f in diagnose(healthy(TRIGGERS["template_collapse"]))} == {"error"}
    assert {f.level for f in diagnose(healthy(TRIGGERS["nonfinite_skipped"]))} == {"warning"}


def test_clip_rate_reports_the_window_and_thresholds_are_respected():
    df = healthy(TRIGGERS["clip_rate"])
    (f,) = diagnose(df)
    assert 40 <= f.steps[1] and f.steps[0] <= 69 and f.evidence["share_high"] >= 0.3
    assert diagnose(df, thresholds=Thresholds(clip_rate_high=0.5)) == []
    brief = healthy({"clip_ratio/region_mean": burst(0.02, 0.35, 40, 44)})  # 4 of 20 steps: not persistent
    assert diagnose(brief) == []


def test_clip_rate_high_from_the_start_has_not_drifted():
    by_design = healthy({"clip_ratio/region_mean": np.full(STEPS, 0.5) + noise(0.02, 6)})  # GSPO-like
    assert diagnose(by_design) == []
    (f,) = diagnose(by_design, thresholds=Thresholds(clip_rise_min=0.0))
    assert f.rule == "clip_rate" and f.evidence["start_clip_rate"] == pytest.approx(0.5, abs=0.02)
    (f,) = diagnose(healthy(TRIGGERS["clip_rate"]))
    assert f.evidence["median_clip_rate"] >= Thresholds().clip_rise_min * f.evidence["start_clip_rate"]


def test_importance_ratio_spread():
    assert rules(diagnose(healthy({"ratio/std": np.full(STEPS, 0.8)}))) == {"importance_ratio"}
    assert diagnose(healthy({"ratio/std": np.full(STEPS, 0.09)})) == []  # the study base's own spread


def test_kl_volatility_reads_the_exact_kl_when_logged():
    smooth = 0.05 * (1 - np.exp(-T / 15))
    noisy = smooth * np.exp(noise(0.8, 1))  # an estimator's own noise (k1)
    assert diagnose(healthy({"kl": noisy, "kl/exact": smooth})) == []
    (f,) = diagnose(healthy({"kl": smooth, "kl/exact": noisy}))
    assert f.rule == "kl_volatility" and f.evidence["source"] == "kl/exact"
    (f,) = diagnose(healthy({"kl": noisy}))  # no exact KL: the estimate
    assert f.evidence["source"] == "kl"


def test_sampler_mismatch_low_ess():
    assert rules(diagnose(healthy({"is/ess": np.full(STEPS, 0.5)}))) == {"sampler_mismatch"}


def test_grad_spikes_count_and_steps():
    (f,) = diagnose(healthy(TRIGGERS["grad_spikes"]))
    assert f.evidence["count"] == 2 and f.evidence["steps"] == [30, 60] and f.steps == (30, 60)
    assert f.evidence["allowed"] == 1 and f.evidence["excess"] == 20.0  # 1% of 100 steps


def test_grad_spikes_allow_a_share_of_a_long_run():
    g = np.exp(noise(0.1, 9, steps=400))
    g[[50, 150, 250, 350]] = [30.0, 25.0, 20.0, 15.0]
    assert diagnose(healthy({"grad_norm": g}, steps=400)) == []  # 4 spikes, 4 allowed in 400 steps
    g[[100, 300]] = [12.0, 10.0]
    (f,) = diagnose(healthy({"grad_norm": g}, steps=400))
    assert f.evidence["count"] == 6 and f.evidence["allowed"] == 4
    assert f.evidence["excess"] == 12.0 and f.evidence["max"] == 30.0  # the 5th largest made it fire
    short = g[:99].copy()  # no spike allowed below 100 steps: one fires
    assert diagnose(healthy({"grad_norm": short}, steps=99))[0].evidence["count"] == 1


def test_grad_spikes_ignore_steps_without_a_gradient():
    g = np.exp(noise(0.1, 9))
    g[::2] = 0.0  # most steps' groups all tie on reward: no gradient at all
    g[[21, 41, 71]] = 0.0
    assert diagnose(healthy({"grad_norm": g})) == []  # the median of the rest, not 0
    g[[51, 81]] = [20.0, 15.0]
    (f,) = diagnose(healthy({"grad_norm": g}))
    assert f.evidence["count"] == 2 and f.evidence["median"] > 0.5
    g[: STEPS - 9] = 0.0  # too few steps with a gradient for a median
    assert diagnose(healthy({"grad_norm": g})) == []


def test_a_conflict_is_a_direction_over_the_run_not_a_stretch_of_noise():
    """Cosines around zero with the study base's noise (sd 0.25) never fire, whatever stretch dips
    below the threshold by chance; a few strongly negative values or a shallow mean do not either."""
    for seed in range(40):
        cos = every(5, noise(0.25, 100 + seed))
        assert diagnose(healthy({COS: cos})) == [], seed
    few = np.full(STEPS, np.nan)
    few[[10, 20, 30]] = -0.9
    assert diagnose(healthy({COS: few})) == []  # below `grad_cos_min_points` values
    shallow = every(5, -0.1 + noise(0.05, 18))  # clearly below zero, but above the threshold
    assert diagnose(healthy({COS: shallow})) == []
    (f,) = diagnose(healthy(TRIGGERS["conflicting_objectives"]))
    assert f.evidence["pair"] == "policy:correct vs policy:format" and f.evidence["points"] == 20
    assert f.evidence["mean_cos"] < -0.2 and f.evidence["p_value"] < 0.01


def test_kl_reward_scale_follows_the_config():
    loud = healthy({"kl_reward/mean": np.full(STEPS, -0.3)})
    (f,) = diagnose(loud, config={"kl_placement": "reward"})
    assert f.rule == "kl_reward_scale" and f.evidence["median_ratio"] == pytest.approx(2.0, rel=0.1)
    assert diagnose(loud) != []  # no config: the column alone says the KL is in the reward
    assert diagnose(loud, config={"kl_placement": "loss"}) == []
    quiet = healthy({"kl_reward/mean": np.full(STEPS, -0.01)})
    assert diagnose(quiet, config={"kl_placement": "reward"}) == []


def test_skipped_steps_are_not_reported_as_errors():
    (f,) = diagnose(healthy(TRIGGERS["nonfinite_skipped"]))
    assert f.evidence["skipped_steps"] == 2 and f.evidence["steps"] == [50, 70]


def test_template_collapse_from_samples():
    df = healthy().drop(columns=["diversity/template_frac"])
    honest = [
        {"step": s, "prompt": f"{s}+1=", "completion": str(s + 1), "reward": 1.0} for s in range(0, 100, 10)
    ]
    assert diagnose(df, samples=honest) == []
    template = [{**r, "completion": "42"} if r["step"] >= 50 else r for r in honest]
    (f,) = diagnose(df, samples=template)
    assert f.rule == "template_collapse" and f.level == "error" and f.steps == (50, 90)


@pytest.mark.parametrize("steps", [1, 3, 6])
def test_short_runs_do_not_crash(steps):
    found = diagnose(healthy(steps=steps))
    assert all(f.level != "error" for f in found)


def test_missing_and_empty_columns_are_skipped():
    assert diagnose(pd.DataFrame()) == []
    assert diagnose(pd.DataFrame({"step": [0, 1, 2]})) == []
    assert diagnose(healthy()[["step", "reward", "val/accuracy"]]) == []
    blank = healthy()
    blank["kl"] = np.nan
    blank["ratio/std"] = None
    assert diagnose(blank) == []


def test_format_findings():
    text = format_findings(diagnose(healthy({**TRIGGERS["clip_rate"], **TRIGGERS["nonfinite"]})))
    assert text.startswith("2 finding(s): 1 error, 1 warning")
    assert (
        text.index("[error] nonfinite") < text.index("[warning] clip_rate")
        and "check: [Evaluation guide §" in text
    )
    assert format_findings([]).startswith("no findings")


# --- run directories ---------------------------------------------------------------------------------


def test_diagnose_run_reads_null_as_nonfinite(tmp_path):
    out = tmp_path / "run"
    writer = RunWriter(out, {"kl_placement": "loss"}, {})
    df = healthy(steps=12)
    df.loc[10, "loss"] = float("inf")  # written as null
    for row in df.to_dict("records"):
        writer.log({k: v for k, v in row.items() if not (isinstance(v, float) and math.isnan(v))})
    writer.close()
    found = diagnose_run(out)
    assert [(f.rule, f.level, f.steps) for f in found] == [("nonfinite", "error", (10, 10))]
    with pytest.raises(ValueError):
        diagnose_run(tmp_path / "missing")


def test_diagnose_a_tiny_real_run(tiny_config, tmp_path):
    config = tiny_config(steps=6)
    metrics = train(config, out=tmp_path / "run", findings=summary_findings)
    found = diagnose_run(tmp_path / "run")
    assert isinstance(found, list) and all(isinstance(f, Finding) for f in found)
    assert not [f for f in found if f.level == "error"], format_findings(found)
    assert isinstance(format_findings(found), str)
    # the summary keeps the findings of the run as the trainer ended it (the run store hands them in)
    summary = read_summary(tmp_path / "run")
    assert summary is not None
    rules_kept = [f["rule"] for f in summary["findings"]]
    assert rules_kept == [f["rule"] for f in summary_findings(metrics, config.to_dict())]
    assert rules_kept == [f.rule for f in found]


def test_validation_stall_fires_when_validation_does_not_improve():
    stalled = healthy()
    stalled.loc[stalled["val/accuracy"].notna(), "val/accuracy"] = [0.36, 0.38, 0.33, 0.35, 0.34]
    (f,) = diagnose(stalled)
    assert f.rule == "validation_stall" and f.evidence["val_first"] == pytest.approx(0.36)
    assert diagnose(healthy()) == []  # 0.2 -> 0.5: silent
    few = healthy()
    few.loc[few["val/accuracy"].notna(), "val/accuracy"] = [0.3, np.nan, np.nan, np.nan, 0.3]
    assert "validation_stall" not in rules(diagnose(few))  # two measurements are not enough


def test_validation_stall_allows_for_the_noise_of_the_validation_set():
    stalled = healthy()
    stalled.loc[stalled["val/accuracy"].notna(), "val/accuracy"] = [0.36, 0.38, 0.33, 0.35, 0.34]
    assert diagnose(stalled, config={"val_size": 50}) == []  # a change sd of 0.096 hides the 0.02 asked
    (f,) = diagnose(stalled, config={"val_size": 10_000})
    assert f.evidence["change_sd"] == pytest.approx(math.sqrt(2 * 0.36 * 0.64 / 10_000), abs=1e-6)
    fell = healthy()
    fell.loc[fell["val/accuracy"].notna(), "val/accuracy"] = [0.5, 0.3, 0.2, 0.1, 0.1]
    assert rules(diagnose(fell, config={"val_size": 50})) == {"validation_stall"}
    assert diagnose(stalled, config={"val_size": 50}, thresholds=Thresholds(val_z=0.0)) != []


def test_accuracy_change_sd():
    assert accuracy_change_sd(0.5, 200) == pytest.approx(0.05)
    assert accuracy_change_sd(0.0, 200) == 0.0 and accuracy_change_sd(0.4, None) == 0.0
