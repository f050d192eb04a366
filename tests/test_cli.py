import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from grpo_lab.cli import main
from grpo_lab.config import Config
from grpo_lab.presets import PRESETS

STEPS = 2


@pytest.fixture(scope="module")
def run_dir(tiny_model_path, tmp_path_factory):
    """One short training run through the CLI on the tiny model (one thread: fastest for it)."""
    out = tmp_path_factory.mktemp("cli") / "run"
    threads = torch.get_num_threads()
    try:
        code = main(
            [
                "train",
                "--preset",
                "grpo",
                "--steps",
                str(STEPS),
                "--seed",
                "0",
                "--out",
                str(out),
                "--set",
                f"model={tiny_model_path}",
                "--set",
                "val_size=8",
                "--set",
                "eval_every=1",
                "--set",
                "progress=false",
                "--set",
                "prompts_per_step=2",
                "--set",
                "group_size=4",
                "--set",
                "max_completion_length=8",
                "--set",
                "samples_every=1",
                "--set",
                "torch_threads=1",
            ]
        )
    finally:
        torch.set_num_threads(threads)
    assert code == 0
    return out


def test_presets_lists_every_preset(capsys):
    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) == len(PRESETS)
    for name, entry in PRESETS.items():
        assert any(line.startswith(name) and entry.doc in line for line in lines)


def test_presets_diff_grpo(capsys):
    assert main(["presets", "--diff", "grpo"]) == 0
    assert capsys.readouterr().out.strip() == "grpo: identical to grpo"


def test_presets_diff_shows_the_changes_against_grpo_and_against_the_matched_comparator(capsys):
    assert main(["presets", "--diff", "dapo_loss"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "dapo_loss relative to grpo:"
    split = lines.index("dapo_loss relative to its matched comparator grpo_no_kl (its own mechanism):")
    assert [line.split()[0] for line in lines[1:split]] == [
        "eps_high",
        "kl_placement",
        "kl_coef",
        "aggregation",
    ]
    assert [line.split()[0] for line in lines[split + 1 :]] == ["eps_high", "aggregation"]
    assert "0.2 -> 0.28" in " ".join(lines[split + 1].split())


def test_presets_diff_of_a_preset_matched_with_grpo_has_one_section(capsys):
    assert main(["presets", "--diff", "scheme_a"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "scheme_a relative to grpo, its matched comparator:"
    assert [line.split()[0] for line in lines[1:]] == ["eps_high", "dual_clip_c", "is_correction"]


def test_presets_diff_unknown(capsys):
    assert main(["presets", "--diff", "nope"]) == 2
    assert "unknown preset 'nope'" in capsys.readouterr().err


def test_train_writes_a_run_directory(run_dir, tiny_model_path, capsys):
    assert sorted(p.name for p in run_dir.iterdir()) == [
        "config.json",
        "metrics.jsonl",
        "samples.jsonl",
        "summary.json",
    ]
    record = json.loads((run_dir / "config.json").read_text())
    assert set(record) == {"config", "environment", "start"}
    assert record["start"]["init_sha256"] == record["start"]["reference_sha256"]  # the reference is a copy
    config = Config.from_dict(record["config"])
    assert (config.steps, config.seed, config.model, config.val_size) == (STEPS, 0, tiny_model_path, 8)
    assert config.preset == "grpo" and config.progress is False
    env = record["environment"]
    assert env["torch"] == torch.__version__
    assert "git_commit" in env and env["device"] == "cpu"

    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == STEPS + 1
    assert [r["step"] for r in rows] == [0, 1, 2]
    for r in rows[:STEPS]:
        assert 0.0 <= r["val/accuracy"] <= 1.0
        assert "reward" in r and "loss" in r and "kl" in r
        assert r["completions/max_length"] <= 8
    assert set(rows[-1]) == {
        "step",
        "val/accuracy",
        "val/reward",
        "val/sampled_accuracy",
        "val/pass@2",
        "val/pass@4",
    }

    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert samples and {s["step"] for s in samples} == {0, 1}
    assert {"prompt", "completion", "reward", "truncated"} <= set(samples[0])

    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == STEPS
    assert summary["val/accuracy_end"] == rows[-1]["val/accuracy"]
    assert summary["params"] > 0


def test_train_refuses_an_existing_run(run_dir, tiny_model_path, capsys):
    code = main(["train", "--steps", "1", "--out", str(run_dir), "--set", f"model={tiny_model_path}"])
    assert code == 2
    assert "already holds metrics" in capsys.readouterr().err


@pytest.mark.parametrize(
    "override, fragment",
    [
        ("nonsense=1", "unknown config field 'nonsense'"),
        ("steps", "key=value"),
        ("temperature=0", "temperature must be > 0"),
        ("advantage=bogus", "unknown advantage 'bogus'"),
    ],
)
def test_bad_override_exits_2(override, fragment, tmp_path, capsys):
    code = main(["train", "--steps", "1", "--out", str(tmp_path / "r"), "--set", override])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("grpo-lab: error:") and fragment in err
    assert not (tmp_path / "r").exists()


def test_unknown_preset_exits_2(tmp_path, capsys):
    assert main(["train", "--preset", "nope", "--out", str(tmp_path / "r")]) == 2
    assert "unknown preset 'nope'" in capsys.readouterr().err


def test_console_script():
    exe = Path(sys.executable).parent / "grpo-lab"
    assert exe.exists()
    done = subprocess.run([str(exe), "presets"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("grpo ")
    assert len(done.stdout.splitlines()) == len(PRESETS)


def test_fields_lists_every_field_with_type_default_and_doc(capsys):
    from grpo_lab.config import field_doc, field_names

    assert main(["fields"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ")}
    assert sorted(rows) == sorted(field_names())
    assert rows["kl_coef"].split()[1:3] == ["float", "0.04"] and field_doc("kl_coef") in rows["kl_coef"]
    assert "tuple[str, ...]" in rows["rewards"]
    sections = [line for line in out.splitlines() if line.startswith("[")]
    assert sections[:3] == ["[run]", "[model]", "[task]"] and "[logging]" in sections


def test_fields_filters_by_name(capsys):
    from grpo_lab.config import field_names

    assert main(["fields", "kl"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines() if line.startswith("  ")]
    assert listed and sorted(listed) == sorted(n for n in field_names() if "kl" in n)
    assert main(["fields", "nothing_like_this"]) == 2
    assert "no config field matches 'nothing_like_this'" in capsys.readouterr().err


def test_train_takes_steps_and_seed_from_the_config_unless_given(monkeypatch, tmp_path, capsys):
    seen = []
    monkeypatch.setattr(
        "grpo_lab.training.trainer.train", lambda config, out, resume, findings: seen.append(config)
    )
    monkeypatch.setattr("grpo_lab.runlog.read_summary", lambda out: {})
    assert main(["train", "--out", str(tmp_path / "a")]) == 0
    assert main(["train", "--steps", "7", "--seed", "3", "--out", str(tmp_path / "b")]) == 0
    assert [(c.steps, c.seed) for c in seen] == [(Config().steps, Config().seed), (7, 3)]
    argv = ["train", "--model", "smollm2-135m", "--task", "file:x.jsonl", "--set", "task=file:y.jsonl"]
    assert main([*argv, "--out", str(tmp_path / "c")]) == 0
    assert (seen[-1].model, seen[-1].task) == ("smollm2-135m", "file:y.jsonl")  # --set wins


def test_train_help_points_to_fields(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    assert "grpo-lab fields" in capsys.readouterr().out


def test_plan_json_gives_the_counts_per_notebook_and_in_total(capsys):
    assert main(["plan", "--profile", "smoke", "--only", "01", "03", "--json"]) == 0
    counts = json.loads(capsys.readouterr().out)
    assert list(counts) == ["01_baseline", "03_schemes", "total"]
    for row in counts.values():
        assert set(row) == {
            "runs",
            "stored",
            "to_train",
            "core_hours",
            "spent_core_hours",
            "stale",
            "torn",
            "allowance",
        }
        assert row["runs"] == row["stored"] + row["to_train"]
    assert counts["total"]["runs"] == counts["01_baseline"]["runs"] + counts["03_schemes"]["runs"] == 4


def test_plan_from_empty_prints_a_table_with_nothing_stored(capsys):
    assert main(["plan", "--profile", "smoke", "--only", "01", "--from-empty"]) == 0
    out = capsys.readouterr().out
    rows = {
        line.split()[0]: line.split()[1:] for line in out.splitlines() if line.startswith(("01_", "total"))
    }
    assert rows["01_baseline"][:3] == ["2", "0", "2"] and rows["total"][:3] == ["2", "0", "2"]
    assert "the store ignored (--from-empty)" in out and "core-h" in out


def test_plan_refuses_an_unknown_profile_or_notebook(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["plan", "--profile", "fast"])
    assert exit_info.value.code == 2 and "invalid choice: 'fast'" in capsys.readouterr().err
    assert main(["plan", "--profile", "smoke", "--only", "99"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("grpo-lab: error: no notebook matches ['99']; valid: 01_baseline")
    with pytest.raises(SystemExit, match="give --calibrate with it"):
        main(["plan", "--model", "smollm2-135m"])


def test_figures_without_training_refuses_a_store_that_lacks_runs(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_LAB_STORE", str(tmp_path / "empty"))
    assert main(["figures", "--profile", "smoke", "--only", "01", "--no-train"]) == 2
    err = capsys.readouterr().err
    assert "2 runs are not current in the store" in err and "--no-train forbids training them" in err
    assert "01_baseline: grpo-seed0-" in err and "(missing)" in err
