"""The KL study: the placements' expected gradients against exact ones on a tabular two-token policy
(every completion enumerated, so expectations are exact sums), snapshots kept along a real run, and
the measurement tables on them."""

import itertools
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from grpo_lab import profiles, train
from grpo_lab.experiments import run_dir
from grpo_lab.experiments.designs import Point
from grpo_lab.experiments.store import is_current
from grpo_lab.studies import kl_estimators

V = 3
"""vocabulary of the tabular policy"""


def tabular(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """First-token logits (V,), second-token logits given the first (V, V), for the policy (with
    gradient) and the reference."""
    gen = torch.Generator().manual_seed(seed)
    a, b = torch.randn(V, generator=gen), torch.randn(V, V, generator=gen)
    a_ref, b_ref = a + 0.5 * torch.randn(V, generator=gen), b + 0.5 * torch.randn(V, V, generator=gen)
    return a.requires_grad_(), b.requires_grad_(), a_ref, b_ref


def expected_gradients(seed: int, length: int) -> dict[str, torch.Tensor]:
    """E over completions y ~ pi of each objective's gradient w.r.t. the policy's table, by
    enumerating every completion of `length` (1 or 2) tokens with its probability."""
    a, b, a_ref, b_ref = tabular(seed)
    total: dict[str, torch.Tensor] = {}
    for ys in itertools.product(range(V), repeat=length):
        rows = [a, b[ys[0]]][:length]
        rows_ref = [a_ref, b_ref[ys[0]]][:length]
        logits, ref_logits = torch.stack(rows)[None], torch.stack(rows_ref)[None]  # (1, T, V)
        tokens = torch.tensor([ys])  # (1, T)
        prob = torch.softmax(logits.detach(), -1)[0].gather(-1, tokens[0, :, None]).prod()
        terms = kl_estimators.token_terms(logits, ref_logits, tokens)
        for name, objective in kl_estimators.kl_objectives(terms, torch.ones(1, length)).items():
            grad = torch.cat([g.flatten() for g in torch.autograd.grad(objective, [a, b], retain_graph=True,
                                                                        materialize_grads=True)])  # fmt: skip
            total[name] = total.get(name, 0) + prob * grad
    return total


def exact_sequence_kl_gradient(seed: int, length: int, forward: bool = False) -> torch.Tensor:
    """The gradient of the exact KL between the two policies over whole completions (reverse by
    default), computed in closed form from the tables."""
    a, b, a_ref, b_ref = tabular(seed)
    lp, lr = torch.log_softmax(a, -1), torch.log_softmax(a_ref, -1)  # (V,)
    lp2, lr2 = torch.log_softmax(b, -1), torch.log_softmax(b_ref, -1)  # (V, V)
    if forward:
        kl = (lr.exp() * (lr - lp)).sum()
        if length == 2:
            kl = kl + (lr.exp() * (lr2.exp() * (lr2 - lp2)).sum(-1)).sum()
    else:
        kl = (lp.exp() * (lp - lr)).sum()
        if length == 2:
            kl = kl + (lp.exp() * (lp2.exp() * (lp2 - lr2)).sum(-1)).sum()
    return torch.cat([g.flatten() for g in torch.autograd.grad(kl, [a, b], materialize_grads=True)])


def cosine(x: torch.Tensor, y: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(x, y, dim=0))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_expected_gradients_of_single_token_placements(seed):
    """One token: k1 in the loss has zero expected gradient, k2 in the loss and k1 in the reward
    follow the reverse KL exactly, k3 in the loss the forward KL exactly (papers.md §6)."""
    g = expected_gradients(seed, length=1)
    reverse, forward = exact_sequence_kl_gradient(seed, 1), exact_sequence_kl_gradient(seed, 1, forward=True)
    assert torch.allclose(g["k1 in loss"], torch.zeros_like(reverse), atol=1e-6)
    for name in ("k2 in loss", "k1 in reward", "reverse KL, sequence", "reverse KL, token-local"):
        assert torch.allclose(g[name], reverse, atol=1e-6), name
    assert torch.allclose(g["k3 in loss"], forward, atol=1e-6)
    assert torch.allclose(g["forward KL, token-local"], forward, atol=1e-6)
    assert cosine(g["k3 in reward"], reverse) < 0.999  # biased


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_expected_gradients_over_two_tokens(seed):
    """Two tokens: k1 in the reward and the sequence reference follow the exact sequence KL; the
    token-local losses (k2, the token-local reference) miss the later token's term."""
    g = expected_gradients(seed, length=2)
    reverse = exact_sequence_kl_gradient(seed, 2)
    assert torch.allclose(g["k1 in reward"], reverse, atol=1e-5)
    assert torch.allclose(g["reverse KL, sequence"], reverse, atol=1e-5)
    assert torch.allclose(g["k2 in loss"], g["reverse KL, token-local"], atol=1e-5)
    assert not torch.allclose(g["k2 in loss"], reverse, atol=1e-3)  # the missing future-token term
    assert torch.allclose(g["k1 in loss"], torch.zeros_like(reverse), atol=1e-6)


def test_settings_validate_only_at_the_ends_and_sizes_follow_the_profile():
    full = kl_estimators.settings("full")
    assert full.steps == kl_estimators.FULL.steps and full.eval_every == full.steps
    assert kl_estimators.settings("full", steps=30).eval_every == 30
    assert kl_estimators.sizes(full) == (kl_estimators.SNAPSHOTS, kl_estimators.BATCHES)
    assert kl_estimators.sizes(kl_estimators.settings("smoke")) == kl_estimators.SMOKE_SIZES
    (point,) = kl_estimators.design(full)
    assert point.config == kl_estimators.study_config(full, kl_estimators.SNAPSHOTS)
    config = kl_estimators.study_config(full)
    assert config.checkpoint_every == full.steps // kl_estimators.SNAPSHOTS
    assert kl_estimators.study_config(profiles.profile("smoke"), snapshots=10).checkpoint_every == 1
    with pytest.raises(ValueError, match="snapshots"):
        kl_estimators.study_config(full, snapshots=0)


def test_snapshots_are_the_weights_after_each_checkpointed_step(tiny_config, tmp_path):
    """A run keeps a snapshot every `checkpoint_every` steps, each the checkpoint of that step; the
    last one holds the final weights."""
    config = tiny_config(steps=4, checkpoint_every=2)
    out = run_dir(config, tmp_path)
    train(config, out=out, callbacks=[kl_estimators.SnapshotKeeper(out, config.checkpoint_every)])
    found = kl_estimators.snapshots(out)
    assert list(found) == [2, 4]
    final = torch.load(out / "checkpoint.pt", weights_only=False)
    assert final["step"] == 4
    last = torch.load(found[4], weights_only=True)
    assert all(torch.equal(last[k], v) for k, v in final["model"].items())
    first = torch.load(found[2], weights_only=True)
    assert any(not torch.equal(first[k], v) for k, v in final["model"].items())


def test_a_run_stores_the_measures_of_its_snapshots_and_not_the_weights(tiny_config, tmp_path):
    """`run` measures each run on its snapshots at its end: the sealed run holds the two tables,
    equal to measuring the snapshots directly, and neither the snapshots nor the checkpoint."""
    config = tiny_config(steps=2, checkpoint_every=1)
    kept = run_dir(config, tmp_path / "kept")
    train(config, out=kept, callbacks=[kl_estimators.SnapshotKeeper(kept, 1)])
    direct_tokens, direct_grads = kl_estimators.measure_run(kept, config, batches=1)

    smoke = profiles.profile("smoke", [0])
    result = kl_estimators.run(
        [Point("grpo", {}, config)], smoke, tmp_path / "store", workers=1, progress=False
    )
    (path,) = map(Path, result.runs["path"])
    assert not (path / kl_estimators.SNAPSHOT_DIR).exists() and not (path / "checkpoint.pt").exists()
    assert is_current(path)
    tokens, grads = kl_estimators.measures(result.runs, batches=kl_estimators.sizes(smoke)[1])
    pd.testing.assert_frame_equal(tokens.drop(columns="seed"), direct_tokens, check_dtype=False)
    pd.testing.assert_frame_equal(grads.drop(columns="seed"), direct_grads, check_dtype=False)
    with pytest.raises(ValueError, match="measured on 1 batches per snapshot, not 2"):
        kl_estimators.measures(result.runs, batches=2)


def test_measure_tables_on_a_tiny_run(tiny_config, tmp_path):
    config = tiny_config(steps=2, checkpoint_every=1)
    out = run_dir(config, tmp_path)
    train(config, out=out, callbacks=[kl_estimators.SnapshotKeeper(out, 1)])
    tokens, grads = kl_estimators.measure_run(out, config, batches=2)
    assert set(tokens["estimator"]) == set(kl_estimators.ESTIMATORS) and set(tokens["step"]) == {1, 2}
    assert len(tokens) == 2 * 2 * len(kl_estimators.ESTIMATORS)
    k2 = tokens[tokens["estimator"] == "k2"]
    assert (k2["estimate"] >= 0).all() and (tokens["exact"] >= 0).all()
    assert np.allclose(tokens["bias"], tokens["estimate"] - tokens["exact"], atol=1e-6)
    per_snapshot = len(kl_estimators.PLACEMENTS) * len(kl_estimators.REFERENCES)
    assert len(grads) == 2 * (2 + 1) * per_snapshot  # two batches and their average, two snapshots
    assert grads["cosine"].between(-1 - 1e-5, 1 + 1e-5).all() and (grads["norm_ratio"] > 0).all()
    table = kl_estimators.gradient_table(grads.assign(seed=0))
    assert list(table.index) == list(kl_estimators.PLACEMENTS)
    assert list(kl_estimators.estimator_table(tokens).index.get_level_values("step").unique()) == [1, 2]


def test_a_run_without_snapshots_or_measures_is_refused(tiny_config, tmp_path):
    config = tiny_config(steps=1)
    out = run_dir(config, tmp_path)
    train(config, out=out)
    with pytest.raises(ValueError, match="no snapshots"):
        kl_estimators.measure_run(out, config)
    with pytest.raises(ValueError, match="no KL measures"):
        kl_estimators.measures(pd.DataFrame({"path": [str(out)], "seed": [0]}), batches=1)
    with pytest.raises(ValueError, match="checkpoint_every"):
        kl_estimators.run([Point("grpo", {}, config)], profiles.profile("smoke", [0]), tmp_path)


def test_training_errors_bin_the_logged_batch_errors():
    steps = np.arange(20)
    exact = 0.01 * steps
    metrics = pd.DataFrame({"seed": 0, "step": steps, "reward": 0.5, "kl/exact": exact, "kl/k1": exact + 0.01,
                            "kl/k2": exact, "kl/k3": exact - 0.02})  # fmt: skip
    errors = kl_estimators.training_errors(metrics, bins=4)
    assert len(errors) == 3 * 20 and sorted(errors["bin"].unique()) == [2.0, 7.0, 12.0, 17.0]
    means = errors.groupby("estimator")["error"].mean()
    assert means.to_dict() == pytest.approx({"k1": 0.01, "k2": 0.0, "k3": -0.02})
    fig = kl_estimators.figure_training(pd.concat([metrics, metrics.assign(seed=1)]), bins=4)
    assert len(fig.axes) == 3
