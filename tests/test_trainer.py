"""The training loop: micro-batch invariance, determinism, logging, and that it learns; the training
core builds its task once and imports nothing from the analysis."""

import ast
import functools
import math
from pathlib import Path

import pandas as pd
import pytest
import torch

from grpo_lab import preset, train
from grpo_lab.runlog import read_jsonl, read_metrics, read_summary
from grpo_lab.training import trainer

TIME = [c for c in ("time/step_s", "time/sample_s", "time/train_s")]


@pytest.fixture
def tiny(tiny_config):
    """This file's fast configs: the shared tiny ones with eval_every=2, learning_rate=1e-3."""
    return functools.partial(tiny_config, eval_every=2, learning_rate=1e-3)


def comparable(df: pd.DataFrame) -> pd.DataFrame:
    return df.drop(columns=[c for c in df.columns if c.startswith("time/") or c == "cost/peak_rss_mb"])


def test_same_seed_same_metrics(tiny):
    a = comparable(train(tiny(seed=3)))
    b = comparable(train(tiny(seed=3)))
    pd.testing.assert_frame_equal(a, b)


def test_other_seed_other_metrics(tiny):
    a = comparable(train(tiny(seed=0)))
    b = comparable(train(tiny(seed=1)))
    assert not a["reward"].equals(b["reward"]) and not a["loss"].equals(b["loss"])


@pytest.mark.parametrize("aggregation", ["seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm"])
@pytest.mark.parametrize("num_iterations", [1, 2])
def test_micro_batching_does_not_change_training(tiny, aggregation, num_iterations):
    """Loss, gradient norm and the KL after several updates agree whatever the micro-batch size
    (5 does not divide the 16 completions, so the last micro-batch is ragged)."""
    runs = [
        comparable(
            train(
                tiny(
                    micro_batch_size=m,
                    aggregation=aggregation,
                    num_iterations=num_iterations,
                )
            )
        )
        for m in (0, 5, 1)
    ]
    for other in runs[1:]:
        for col in ("loss", "grad_norm", "kl", "entropy", "reward"):
            assert torch.allclose(
                torch.tensor(runs[0][col].dropna().values),
                torch.tensor(other[col].dropna().values),
                rtol=1e-4,
                atol=1e-6,
            ), col


def test_mini_batches_take_several_optimizer_steps_off_policy(tiny):
    """Each mini-batch is one optimizer step: after the first, the policy has moved, so the ratio
    departs from 1; with one mini-batch and one pass it is exactly 1."""
    on = train(tiny(learning_rate=1e-2)).dropna(subset=["reward"])
    off = train(tiny(learning_rate=1e-2, num_mini_batches=4, num_iterations=2)).dropna(subset=["reward"])
    assert (on["cost/optimizer_steps"] == 1).all() and (off["cost/optimizer_steps"] == 8).all()
    assert (on["ratio/std"] == 0).all() and (off["ratio/std"] > 0).all()


def test_mini_batches_hold_whole_groups():
    groups = torch.tensor([2, 3, 1, 2])
    split = trainer.mini_batches(groups, 8, 2)
    assert [rows.tolist() for rows, _ in split] == [[0, 1, 2, 3, 4], [5, 6, 7]]
    assert [g.tolist() for _, g in split] == [[2, 3], [1, 2]]
    assert [rows.tolist() for rows, _ in trainer.mini_batches(2, 6, 3)] == [[0, 1], [2, 3], [4, 5]]


def test_run_directory_contents(tiny, tmp_path):
    df = train(tiny(samples_every=1, samples_per_log=2), out=tmp_path / "run")
    logged = read_metrics(tmp_path / "run")
    assert len(logged) == len(df) == 4  # 3 steps + the final validation row
    assert list(logged["step"]) == [0, 1, 2, 3]
    for name in [
        "reward",
        "reward_std",
        "frac_reward_zero_std",
        "kl",
        "entropy",
        "clip_ratio/low_mean",
        "clip_ratio/high_mean",
        "clip_ratio/region_mean",
        "completions/mean_length",
        "completions/max_length",
        "completions/clipped_ratio",
        "grad_norm",
        "loss",
        "learning_rate",
        "ratio/mean",
        "ratio/std",
        "ratio/max",
        "val/accuracy",
        "val/reward",
        *TIME,
    ]:
        assert name in logged.columns, name
    assert logged["val/accuracy"].notna().tolist() == [True, False, True, True]
    samples = read_jsonl(tmp_path / "run" / "samples.jsonl")
    assert len(samples) == 6 and {"prompt", "completion", "reward", "step"} <= set(samples[0])
    summary = read_summary(tmp_path / "run")
    assert summary["steps"] == 3 and summary["params"] > 0
    assert "findings" not in summary  # the run store hands the diagnostics in (`findings`), not the core


def test_findings_fill_the_summary(tiny, tmp_path):
    seen = []

    def findings(metrics: pd.DataFrame, config: dict) -> list[dict]:
        seen.append((len(metrics), config["steps"]))
        return [{"rule": "made_up"}]

    train(tiny(), out=tmp_path / "run", findings=findings)
    assert seen == [(4, 3)]  # the finished run's rows, the final validation row included, and its config
    assert read_summary(tmp_path / "run")["findings"] == [{"rule": "made_up"}]


def test_the_task_is_built_once_per_trainer(monkeypatch):
    """The trainer builds its task once and hands it down: the embedded model is found by the built
    task's problems, not by a second build from the task's name, and its start is checked against the
    record of the directory it was loaded from."""
    from grpo_lab.models import embedded

    builds = []
    make_task = trainer.make_task

    def counted(*args, **kwargs):
        builds.append(args)
        return make_task(*args, **kwargs)

    embedded._problems_fingerprint.cache_clear()  # a build from the name would show up here
    monkeypatch.setattr(trainer, "make_task", counted)
    monkeypatch.setattr(embedded, "make_task", counted)
    run = trainer.Trainer(preset("grpo", task="judge", model="embedded", steps=1, progress=False))
    run._load_reference()  # a live change that turns the reference on loads the same start, by path
    assert builds == [("judge", None, (), "embedded")]
    assert run.policy.path == str(embedded.shipped_dir("judge"))
    assert run.start["init_sha256"] == embedded.start_sha256("judge")


def imported_modules(source: str, package: str) -> set[str]:
    """Every module an import statement of `source` names, anywhere in it (inside functions too),
    relative imports resolved against `package`."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            anchor = package.split(".")[: len(package.split(".")) - max(node.level - 1, 0)]
            found.add(".".join([*anchor, node.module or ""]) if node.level else node.module or "")
    return found


def test_the_training_core_imports_nothing_from_the_analysis():
    """No module of grpo_lab/training imports grpo_lab.analysis, at the top or inside a function: the
    trainer writes run logs, the analysis reads them, and neither needs the other."""
    core = Path(trainer.__file__).parent
    found = [
        f"{path.name}: {name}"
        for path in sorted(core.rglob("*.py"))
        for name in imported_modules(path.read_text(), "grpo_lab.training")
        if name == "grpo_lab.analysis" or name.startswith("grpo_lab.analysis.")
    ]
    assert found == []
    assert imported_modules(
        "from ..analysis import x\nimport grpo_lab.analysis.stats", "grpo_lab.training"
    ) == {
        "grpo_lab.analysis",
        "grpo_lab.analysis.stats",
    }


def test_reference_not_built_without_kl(tiny, monkeypatch):
    """No reference forward at all when nothing uses it."""
    import grpo_lab.training.trainer as trainer

    calls = []
    original = trainer.fixed_logprobs
    monkeypatch.setattr(trainer, "fixed_logprobs", lambda *a, **k: calls.append(1) or original(*a, **k))
    df = train(tiny(kl_coef=0.0))
    assert calls == [] and "kl" not in df.columns
    train(tiny())
    assert len(calls) == 3  # one reference pass per step


def test_the_kl_monitor_logs_the_exact_kl_and_changes_nothing_learned(tiny):
    """An arm without a KL term logs the exact KL to the reference under `kl_monitor`, and trains
    exactly as without it: the reference's log-probs reach no loss term."""
    plain = comparable(train(tiny(kl_coef=0.0, kl_placement="off")))
    watched = comparable(train(tiny(kl_coef=0.0, kl_placement="off", kl_monitor=True)))
    assert "kl/exact" not in plain and watched.dropna(subset=["reward"])["kl/exact"].notna().all()
    assert "kl" not in watched  # no estimator of a KL term: nothing uses the reference's log-probs
    passes = "cost/forward_passes"
    assert (watched[passes].dropna() == plain[passes].dropna() + 1).all()  # the reference's forward, counted
    pd.testing.assert_frame_equal(plain.drop(columns=[passes]), watched.drop(columns=["kl/exact", passes]))


def test_a_kl_monitor_that_cannot_compute_the_exact_kl_is_refused(tiny, monkeypatch, tmp_path):
    monkeypatch.setattr(trainer, "EXACT_KL_MAX_VOCAB", 1)
    with pytest.raises(ValueError, match="kl_monitor logs the exact KL.*set kl_monitor=False"):
        train(tiny(kl_coef=0.0, kl_placement="off", kl_monitor=True), out=tmp_path / "run")
    assert not (tmp_path / "run").exists()  # refused before anything is written


def test_kl_estimators_logged_side_by_side(tiny):
    df = train(tiny(kl_estimator="k2")).dropna(subset=["reward"])
    for name in ("kl/k1", "kl/k2", "kl/k3", "kl/abs", "kl/exact"):
        assert df[name].notna().all(), name
    assert torch.allclose(torch.tensor(df["kl"].values), torch.tensor(df["kl/k2"].values))


def test_lora_trains_only_the_adapter(tiny):
    df = train(tiny(lora=True, lora_r=2))
    assert df["kl"].dropna().iloc[-1] > 0  # the adapter moved the policy away from the base
    assert all(math.isfinite(v) for v in df["loss"].dropna())


@pytest.mark.slow
def test_grpo_learns_arith(embedded_arith_path):
    """Baseline GRPO on the embedded model raises greedy validation accuracy beyond seed noise."""
    gains = []
    for seed in (0, 1):
        df = train(preset("grpo", steps=60, seed=seed, eval_every=60, progress=False))
        val = df["val/accuracy"].dropna()
        gains.append(val.iloc[-1] - val.iloc[0])
    assert min(gains) > 0.05 and sum(gains) / len(gains) > 0.08, gains


def test_old_logprobs_are_the_samplers_own_and_match_a_recomputation(embedded_worked_path, monkeypatch):
    """On the study base (several updates per batch, so the old log-probs are needed) no forward
    pass makes them: they are the sampler's, and a recomputation by the policy agrees with them."""
    from grpo_lab.comparisons.bed import base

    calls = []
    original = trainer.fixed_logprobs
    monkeypatch.setattr(trainer, "fixed_logprobs", lambda *a, **k: calls.append(1) or original(*a, **k))
    run = trainer.Trainer(base("full", steps=2, val_size=4, val_samples=0, eval_every=10))
    row = run.step()
    assert len(calls) == 1 and row["cost/forward_passes"] == 2 + 1  # two passes, one reference
    rollout = trainer.sample_batch(
        run.sampling, run.model, run.config, 1, run.config.temperature
    ).scored.rollout
    mask = rollout.completion_mask.bool()  # (N, T)
    chunks = trainer.micro_batches(len(mask), 0)
    temps = torch.full((len(mask),), run.config.temperature)  # (N,)
    recomputed, _ = original(run.model, rollout, chunks, temps, keep_logits=False)  # (N, T)
    gap = (recomputed - rollout.sampler_logp)[mask].abs().max()
    assert mask.sum() > 100 and float(gap) < 1e-4


@pytest.mark.parametrize(
    "fault", [{"fault_sampler_dtype": "bfloat16"}, {"fault_long_frac": 0.5}], ids=["dtype", "long"]
)
def test_old_logprobs_are_recomputed_when_the_sampler_differs(tiny, fault, monkeypatch):
    """A lower-precision sampler or a suppressed EOS makes the sampler's log-probs differ from the
    policy's: the trainer then computes its own (a pass for the old and one for the reference)."""
    df = train(tiny(num_iterations=2, **fault))
    assert (df["cost/forward_passes"].dropna() == 2 + 2).all()
    assert (train(tiny(num_iterations=2))["cost/forward_passes"].dropna() == 2 + 1).all()


def test_sampled_validation_is_the_same_stream_for_every_seed_and_arm(tiny):
    """val/sampled_accuracy before any update depends on the model and the step alone: two seeds
    and two arms see the same prompts and samples; greedy accuracy is logged beside it."""
    first = train(tiny(seed=0, steps=1, val_samples=3, val_sampled_size=16, eval_every=5))
    other = train(tiny(seed=5, steps=1, val_samples=3, val_sampled_size=16, eval_every=5, kl_coef=0.0))
    start = [df.dropna(subset=["val/sampled_accuracy"]).iloc[0] for df in (first, other)]
    assert start[0]["val/sampled_accuracy"] == start[1]["val/sampled_accuracy"]
    assert "val/accuracy" in first.columns
    assert "val/sampled_accuracy" not in train(tiny(steps=1, val_samples=0)).columns


def test_eval_start_skips_the_validations_before_the_scored_tail(tiny):
    """With eval_start the run validates before step 0 (the start every gain is measured from),
    then from eval_start on every eval_every steps, and after the last update."""
    df = train(tiny(steps=6, eval_every=2, eval_start=4))
    assert df.dropna(subset=["val/accuracy"])["step"].tolist() == [0, 4, 6]
    with pytest.raises(ValueError, match="eval_start must be in"):
        tiny(steps=6, eval_start=7)


def close_columns(a: pd.DataFrame, b: pd.DataFrame, columns: tuple[str, ...]) -> None:
    for col in columns:
        assert torch.allclose(
            torch.tensor(a[col].dropna().values), torch.tensor(b[col].dropna().values), rtol=1e-4, atol=1e-6
        ), col


def test_large_vocabulary_trains_on_the_chunked_path_as_on_the_plain_one(tiny, large_vocab_path, monkeypatch):
    """A 5,000-token output layer takes the chunked log-prob path in every forward (old policy,
    reference, updates): the run's losses, gradient norms, KL and entropy (with the entropy bonus and
    the learnable temperature, whose gradients flow through the chunks) are the plain path's, and do
    not depend on the micro-batch split. At this file's learning rate of 1e-3 Adam turns the paths'
    rounding-level gradient differences into weight differences of the step size on components whose
    gradient is near zero, enough for the step-2 batch, drawn from 5,000 near-uniform tokens, to come out
    otherwise (there its KL read 7.9e-5 on one path and 1.0e-4 on the other, steps 0 and 1 equal): other
    batches, other runs. At 1e-4 the two paths sample the same batches."""
    from grpo_lab.models import logprobs

    config = functools.partial(
        tiny, model=large_vocab_path, kl_coef=0.04, entropy_coef=0.01, learning_rate=1e-4
    )
    config = functools.partial(config, learnable_temperature=True, num_iterations=2)
    chunked = [comparable(train(config(micro_batch_size=m))) for m in (0, 5)]
    monkeypatch.setattr(logprobs, "PLAIN_MAX_VOCAB", 10**9)
    plain = comparable(train(config()))
    columns = ("loss", "grad_norm", "kl", "entropy", "reward", "temperature/learned")
    close_columns(chunked[0], chunked[1], columns)
    close_columns(chunked[0], plain, columns)
    assert "kl/exact" not in plain  # not for a 5,000-row output layer


def test_budget_micro_batch_size_keeps_a_micro_batch_under_the_budget():
    """As many rows as the budget holds at the step's padded length, at least one, at most the batch."""
    per_row = 50 * 16 * (2 * trainer.LAYER_BYTES_PER_HIDDEN + trainer.HEAD_BYTES_PER_HIDDEN)
    size = functools.partial(trainer.budget_micro_batch_size, hidden=16, layers=2)
    assert size(64, length=50, budget=10 * per_row) == 10
    assert size(64, length=50, budget=11 * per_row - 1) == 10
    assert size(64, length=100, budget=10 * per_row) == 5  # twice the length, half the rows
    assert size(8, length=50, budget=10 * per_row) == 8  # the whole batch fits
    assert size(64, length=50, budget=per_row - 1) == 1  # a row over the budget still trains


def test_budgeted_micro_batches_do_not_change_loss_or_gradients(tiny, large_vocab_path, monkeypatch):
    """On a large vocabulary micro_batch_size 0 lets the memory budget split the batch (here a budget
    under one row's activations: one row a micro-batch, in the fixed log-probs and the update): the
    loss, the KL, the entropy and every gradient are those of the whole batch in one micro-batch. The
    budget's choice is logged; an explicit size, or a small vocabulary, logs none."""
    config = functools.partial(tiny, model=large_vocab_path, kl_coef=0.04, entropy_coef=0.01, val_size=1)
    whole = trainer.Trainer(config(micro_batch_size=16))  # 4 prompts x 4: one micro-batch
    whole_row = whole.step()
    monkeypatch.setattr(trainer, "ACTIVATION_BUDGET", 1)
    split = trainer.Trainer(config())
    split_row = split.step()
    assert split_row["cost/micro_batch_size"] == 1 and "cost/micro_batch_size" not in whole_row
    for metric in ("loss", "grad_norm", "kl", "entropy"):
        assert math.isclose(split_row[metric], whole_row[metric], rel_tol=1e-5, abs_tol=1e-7), metric
    for a, b in zip(split.params, whole.params, strict=True):
        assert a.grad is not None and b.grad is not None
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-7)
    assert not trainer.Trainer(tiny()).budgeted  # the character vocabulary: the whole batch, as before
