"""KL estimators against the exact KL, and the gradient each KL placement follows.

The vocabulary of the embedded model is tiny, so the exact KL(pi || pi_ref) of every next-token
distribution is a sum over the vocabulary. Two sources:
- the run logs: the trainer logs every step the batch means of k1, k2, k3 (`kl/k1`, ...) and of the
  exact per-token KL (`kl/exact`) on the same tokens (trainer.EXACT_KL_MAX_VOCAB);
- snapshots of the policy along a run (`SnapshotKeeper`), on which `measure` samples fresh batches and
  computes, per token, each estimator's error against the exact KL (bias and noise, Schulman,
  "Approximating KL Divergence", 2020), and the gradient w.r.t. the policy parameters of each
  placement (k1/k2/k3 in the loss, k1/k3 folded into the reward) against exact gradients on the same
  batch: of the sequence KL (what the penalty is meant to minimize), of its token-local part (the
  gradient through each position's logits with the context held fixed) and of the forward KL
  KL(pi_ref || pi) token-local. The expectations these should match (on-policy): k1 in the reward and
  the sequence KL; k2 in the loss and the token-local reverse KL ("Rethinking KL Regularization in
  RLHF", Liu et al., arXiv:2510.01555; token-level losses give only part of the gradient, Tang & Munos,
  arXiv:2506.09477); k3 in the loss and the forward KL; k1 in the loss: zero (see
  docs/sources.md).

Every KL term here is summed over a completion's tokens and averaged over completions (the sequence
KL per completion), the same normalization for every placement, so norms compare; the placement's
gradient is the KL part alone (no advantage, baseline or whitening).

`settings` / `design` / `run` as in every study; unlike the others, the measures are not read from
the metrics alone: at the end of each run, `SnapshotMeasurer` samples fresh batches on the snapshots
the run kept (`sizes` says how many), writes the two tables (`TOKENS_FILE`, `GRADIENTS_FILE`) into the
run's directory and deletes the snapshots and the checkpoint, so the store keeps a few kilobytes of
measures instead of the weights (sealed with the run: a changed table is a torn run). `measures`
reads them back; then `estimator_table`, `gradient_table` and the figures (`figure`: estimator bias
and noise; `figure_training`, `figure_gradients`)."""

import shutil
import zlib
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from torch import Tensor

from grpo_lab.analysis.stats import curve, mean_interval
from grpo_lab.comparisons.bed import base as study_base
from grpo_lab.config import Config
from grpo_lab.experiments import SweepResult, run_design
from grpo_lab.experiments.designs import Point
from grpo_lab.models.loading import Policy, load_policy
from grpo_lab.models.logprobs import completion_logits
from grpo_lab.models.sampler import Rollout, encode_prompts, sample
from grpo_lab.objective import kl_estimate
from grpo_lab.objective.advantages import reward_to_go
from grpo_lab.profiles import Budget, Profile
from grpo_lab.tasks import Task, make_task
from grpo_lab.training import checkpoint

FULL = Budget(seeds=(0, 1), steps=50)
"""under the full profile: 2 seeds of 50 steps, validated only before the first and after the last
update (the measures are on the snapshots, each sampling fresh batches: they describe the
estimators' bias and noise and give no verdict)"""
SNAPSHOTS = 5
"""policy snapshots kept along each run (every steps // SNAPSHOTS steps)"""
SMOKE_SIZES = (2, 1)
"""(snapshots, batches per snapshot) under the smoke profile"""
SNAPSHOT_DIR = "snapshots"
ESTIMATORS = ("k1", "k2", "k3")
PLACEMENTS = ("k1 in loss", "k2 in loss", "k3 in loss", "k1 in reward", "k3 in reward")
REFERENCES = ("reverse KL, sequence", "reverse KL, token-local", "forward KL, token-local")
"""the exact gradients each placement is compared with"""
BATCHES = 4
"""fresh batches measured per snapshot under the full profile"""
MEASURE_SEED = 10_000
"""offset of the prompt stream used for measurement (never one a training run draws)"""
TOKENS_FILE = "kl_tokens.csv"
"""in a run's directory: the per-token estimator measures of its snapshots (`measure_run`)"""
GRADIENTS_FILE = "kl_gradients.csv"
"""in a run's directory: the placements' gradient measures of its snapshots (`measure_run`)"""


settings = FULL.settings
"""The study's profile: `FULL` under the full profile, the smoke profile's few otherwise,
validated only at the ends under every profile; `seeds` and `steps` as the notebook sets them."""


def sizes(settings: Profile) -> tuple[int, int]:
    """(snapshots per run, batches measured per snapshot): (`SNAPSHOTS`, `BATCHES`) under the full
    profile, `SMOKE_SIZES` otherwise."""
    return (SNAPSHOTS, BATCHES) if settings.name == "full" else SMOKE_SIZES


def study_config(settings: Profile, snapshots: int = SNAPSHOTS) -> Config:
    """The study base (`comparisons.bed.base`: GRPO, k3 in the loss) with a checkpoint every
    steps // snapshots steps (at least 1)."""
    if snapshots < 1:
        raise ValueError(f"snapshots must be >= 1, got {snapshots}")
    return study_base(settings, checkpoint_every=max(1, settings.steps // snapshots))


class SnapshotKeeper:
    """Trainer callback that keeps the policy weights of every checkpoint as
    `snapshots/step-NNNNN.pt` (the trainer overwrites its one checkpoint file). The trainer saves the
    checkpoint of step s (weights after s updates) at the end of step s - 1, before it logs step s,
    so the weights are copied when step s is logged; the checkpoint's own step number is checked."""

    def __init__(self, run_dir: str | Path, every: int) -> None:
        if every < 1:
            raise ValueError(f"snapshots need checkpoint_every >= 1, got {every}")
        self.run_dir, self.every = Path(run_dir), every

    def on_step(self, step: int, row: dict) -> None:
        if step == 0 or step % self.every:
            return
        saved = checkpoint.load(self.run_dir)
        if saved is not None and saved["step"] == step:
            folder = self.run_dir / SNAPSHOT_DIR
            folder.mkdir(exist_ok=True)
            torch.save(saved["model"], folder / f"step-{step:05d}.pt")

    def on_end(self, summary: dict) -> None:
        """Nothing to keep at the end: the last checkpoint was copied when the final row was logged."""


class SnapshotMeasurer:
    """Trainer callback that, at the end of a run, measures its snapshots (`measure_run`, `batches`
    fresh batches each), writes the tables into the run's directory and deletes the snapshots and
    the checkpoint: only the measures are stored. Runs after `SnapshotKeeper`, which copies the last
    snapshot when the final row is logged."""

    def __init__(self, run_dir: str | Path, config: Config, batches: int) -> None:
        if batches < 1:
            raise ValueError(f"batches must be >= 1, got {batches}")
        self.run_dir, self.config, self.batches = Path(run_dir), config, batches

    def on_step(self, step: int, row: dict) -> None:
        """Nothing to do before the end."""

    def on_end(self, summary: dict) -> None:
        tokens, grads = measure_run(self.run_dir, self.config, self.batches)
        tokens.to_csv(self.run_dir / TOKENS_FILE, index=False)
        grads.to_csv(self.run_dir / GRADIENTS_FILE, index=False)
        shutil.rmtree(self.run_dir / SNAPSHOT_DIR)
        (self.run_dir / checkpoint.CHECKPOINT).unlink(missing_ok=True)


def snapshot_callbacks(
    config: Config, run_dir: Path, batches: int
) -> list[SnapshotKeeper | SnapshotMeasurer]:
    """`callbacks_factory` for `experiments` (bind `batches` with `functools.partial`): a
    `SnapshotKeeper` at the config's checkpoint interval, then a `SnapshotMeasurer` of `batches`
    batches per snapshot."""
    return [SnapshotKeeper(run_dir, config.checkpoint_every), SnapshotMeasurer(run_dir, config, batches)]


def snapshots(run_dir: str | Path) -> dict[int, Path]:
    """Step -> file of the policy snapshots kept in a run directory."""
    files = sorted((Path(run_dir) / SNAPSHOT_DIR).glob("step-*.pt"))
    return {int(f.stem.split("-")[1]): f for f in files}


def design(settings: Profile) -> list[Point]:
    """The study base with a checkpoint every steps // snapshots steps (`sizes`), labelled 'grpo'."""
    return [Point("grpo", {}, study_config(settings, sizes(settings)[0]))]


def run(
    points: Sequence[Point], settings: Profile, root: str | Path | None = None, **options: Any
) -> SweepResult:
    """Train (or load) the design over the profile's seeds into `root` (default: the shared store),
    each run measured on its snapshots at its end (`sizes`: how many batches) and stored with the
    measures only; `options` as for `experiments.run_design`."""
    if any(p.config.checkpoint_every < 1 for p in points):
        raise ValueError("the KL study needs checkpoint_every >= 1 to keep snapshots (see study_config)")
    root = settings.runs_dir() if root is None else root
    factory = partial(snapshot_callbacks, batches=sizes(settings)[1])
    return run_design(points, settings.seeds, root, callbacks_factory=factory, **options)


# --- measurement on snapshots ----------------------------------------------------------------------


def measure_run(
    run_dir: str | Path, config: Config, batches: int = BATCHES
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """For every snapshot the run at `run_dir` kept, sample `batches` fresh batches (the same prompts
    at every snapshot) and return two tables:
    - tokens: a row per (step, batch, estimator): mean exact KL, mean estimate, bias (mean of
      estimate - exact), noise (std of estimate - exact), std of the estimate, token count;
    - gradients: a row per (step, batch, placement, reference): cosine and norm ratio of the
      placement's gradient to the reference gradient on that batch; batch -1 compares the gradients
      averaged over the batches (what the placement follows in expectation)."""
    if batches < 1:
        raise ValueError(f"batches must be >= 1, got {batches}")
    found = snapshots(run_dir)
    if not found:
        raise ValueError(f"run {run_dir} has no snapshots: train it with `snapshot_callbacks`")
    policy = load_policy(config.model, config.task, config.task_digits or None, torch.device("cpu"))
    assert policy.reference is not None  # load_policy copies the reference for a model without LoRA
    task = make_task(config.task, config.task_digits or None)
    tokens, grads = [], []
    for step, file in found.items():
        policy.model.load_state_dict(torch.load(file, weights_only=True))
        sums: dict[str, Tensor] = {}
        for b in range(batches):
            rollout = _sample(policy, task, config, b)
            stats, g = batch_measures(policy.model, policy.reference, rollout, config.temperature)
            tokens += [{"step": step, "batch": b, **s} for s in stats]
            grads += [{"step": step, "batch": b, **r} for r in compare(g)]
            sums = {k: sums.get(k, 0) + v for k, v in g.items()}
        grads += [{"step": step, "batch": -1, **r} for r in compare(sums)]
    return pd.DataFrame(tokens), pd.DataFrame(grads)


def measures(runs: pd.DataFrame, batches: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The stored measures (`measure_run`) of every run (rows of `SweepResult.runs`: `path`, `seed`),
    with a `seed` column: (tokens, gradients). A run without them, or measured on another number of
    `batches` per snapshot, is refused with what to do."""
    tokens, grads = [], []
    for run in runs.itertuples():
        path = Path(run.path)
        if not (path / TOKENS_FILE).exists() or not (path / GRADIENTS_FILE).exists():
            raise ValueError(
                f"run {path} has no KL measures ({TOKENS_FILE}, {GRADIENTS_FILE}): it was trained "
                "without `snapshot_callbacks`; delete the directory to train it again"
            )
        t, g = pd.read_csv(path / TOKENS_FILE), pd.read_csv(path / GRADIENTS_FILE)
        found = int(t["batch"].nunique())
        if found != batches:
            raise ValueError(
                f"run {path} was measured on {found} batches per snapshot, not {batches}: "
                "delete the directory to measure it again"
            )
        tokens.append(t.assign(seed=run.seed))
        grads.append(g.assign(seed=run.seed))
    return pd.concat(tokens, ignore_index=True), pd.concat(grads, ignore_index=True)


def _sample(policy: Policy, task: Task, config: Config, batch: int) -> Rollout:
    """A fresh batch of G completions per prompt from the policy, reproducible per (seed, batch)."""
    examples = task.batch(MEASURE_SEED + config.seed, batch, config.prompts_per_step)
    prompt_ids, prompt_mask = encode_prompts(
        policy.tokenizer, [ex.prompt for ex in examples], torch.device("cpu")
    )
    generator = torch.Generator().manual_seed(zlib.crc32(f"{config.seed}/{batch}".encode()))
    policy.model.eval()
    tokenizer: Any = policy.tokenizer  # a transformers tokenizer, which Policy types as object
    with torch.no_grad():
        rollout = sample(
            policy.model,
            prompt_ids,
            prompt_mask,
            group_size=config.group_size,
            max_new_tokens=config.max_completion_length,
            temperature=config.temperature,
            eos_id=tokenizer.eos_token_id,
            pad_id=tokenizer.pad_token_id,
            generator=generator,
        )
    policy.model.train()  # gradients in the trainer's mode
    return rollout


def token_terms(logits: Tensor, ref_logits: Tensor, tokens: Tensor) -> dict[str, Tensor]:
    """Per position (N, T): log-probs of the sampled tokens under the policy and the reference, and
    the exact reverse KL(pi || pi_ref) and forward KL(pi_ref || pi) of the next-token distributions."""
    logq = torch.log_softmax(logits, -1)  # (N, T, V)
    logq_ref = torch.log_softmax(ref_logits, -1)  # (N, T, V)
    return {
        "logp": logq.gather(-1, tokens[..., None]).squeeze(-1),
        "ref_logp": logq_ref.gather(-1, tokens[..., None]).squeeze(-1),
        "reverse": (logq.exp() * (logq - logq_ref)).sum(-1),
        "forward": (logq_ref.exp() * (logq_ref - logq)).sum(-1),
    }


def kl_objectives(terms: dict[str, Tensor], mask: Tensor) -> dict[str, Tensor]:
    """Scalar objectives (from `token_terms`) whose gradients are the placements' and the exact
    references', each summed over a completion's valid tokens and averaged over completions.
    Placements: kN in the loss differentiates the estimate; kN in the reward is REINFORCE with the
    detached per-token estimate as a cost-to-go. References: the exact per-position reverse KL with
    the context held fixed (token-local), plus the score-function term of the later positions' exact
    KL (sequence: the full gradient of the expected sequence KL, its inner expectations computed
    exactly), and the exact per-position forward KL (token-local)."""
    logp, reverse = terms["logp"], terms["reverse"]  # (N, T)
    n = mask.shape[0]

    def per_completion(x: Tensor) -> Tensor:
        return (x * mask).sum() / n

    est = {k: kl_estimate(logp, terms["ref_logp"], k) for k in ESTIMATORS}  # each (N, T)
    return {
        "k1 in loss": per_completion(est["k1"]),
        "k2 in loss": per_completion(est["k2"]),
        "k3 in loss": per_completion(est["k3"]),
        "k1 in reward": per_completion(logp * reward_to_go(est["k1"].detach(), mask)),
        "k3 in reward": per_completion(logp * reward_to_go(est["k3"].detach(), mask)),
        "reverse KL, sequence": per_completion(
            reverse + logp * reward_to_go(reverse.detach(), mask, include_current=False)
        ),
        "reverse KL, token-local": per_completion(reverse),
        "forward KL, token-local": per_completion(terms["forward"]),
    }


def batch_measures(
    model: torch.nn.Module, reference: torch.nn.Module, rollout: Rollout, temperature: float
) -> tuple[list[dict], dict[str, Tensor]]:
    """On one batch: per estimator, its error against the exact KL over the valid tokens; and the
    flat gradient (P,) of every objective of `kl_objectives` w.r.t. the model's trainable parameters."""
    params = [p for p in model.parameters() if p.requires_grad]
    logits = completion_logits(model, rollout, temperature)  # (N, T, V)
    with torch.no_grad():
        ref_logits = completion_logits(reference, rollout, temperature)  # (N, T, V)
    mask = rollout.completion_mask  # (N, T)
    terms = token_terms(logits, ref_logits, rollout.completion_ids)
    valid = mask.bool()
    exact = terms["reverse"].detach()[valid]  # (n,)
    stats = []
    for name in ESTIMATORS:
        value = kl_estimate(terms["logp"].detach(), terms["ref_logp"], name)[valid]  # (n,)
        error = value - exact  # (n,)
        means = {"exact": float(exact.mean()), "estimate": float(value.mean()), "bias": float(error.mean())}
        spreads = {"noise": float(error.std()), "std": float(value.std())}
        stats.append({"estimator": name, **means, **spreads, "tokens": int(valid.sum())})
    grads = {}
    for name, objective in kl_objectives(terms, mask).items():
        parts = torch.autograd.grad(objective, params, retain_graph=True, allow_unused=True)
        grads[name] = torch.cat(
            [(g if g is not None else torch.zeros_like(p)).flatten() for g, p in zip(parts, params)]
        )
    return stats, grads


def compare(grads: dict[str, Tensor]) -> list[dict]:
    """Cosine and norm ratio of every placement's gradient to every reference gradient."""
    rows = []
    for placement in PLACEMENTS:
        for ref in REFERENCES:
            g, r = grads[placement], grads[ref]
            cosine = float(torch.nn.functional.cosine_similarity(g, r, dim=0))
            ratio = float(g.norm() / r.norm()) if r.norm() > 0 else np.nan
            rows.append({"placement": placement, "reference": ref, "cosine": cosine, "norm_ratio": ratio})
    return rows


# --- tables and figures ----------------------------------------------------------------------------


def interval_by(table: pd.DataFrame, keys: list[str], column: str) -> pd.DataFrame:
    """Mean and 95% t-interval of `column` over the rows of each group of `keys` (rows: independent
    measurements, e.g. one per seed and fresh batch)."""
    rows = []
    for key, group in table.groupby(keys):
        mean, lo, hi = mean_interval(group[column].to_numpy())
        rows.append({**dict(zip(keys, key)), "mean": mean, "lo": lo, "hi": hi, "n": len(group)})
    return pd.DataFrame(rows)


def relative(tokens: pd.DataFrame) -> pd.DataFrame:
    """`tokens` with the bias and the noise relative to the exact KL of the batch (Schulman's
    bias/true and std/true)."""
    return tokens.assign(
        bias_rel=tokens["bias"] / tokens["exact"], noise_rel=tokens["noise"] / tokens["exact"]
    )


def estimator_table(tokens: pd.DataFrame) -> pd.DataFrame:
    """At each snapshot and estimator, means over seeds and batches: exact KL, bias and noise per
    token, absolute and relative to the exact KL."""
    columns = ["exact", "estimate", "bias", "noise", "std", "bias_rel", "noise_rel"]
    return relative(tokens).groupby(["step", "estimator"])[columns].mean()


def gradient_table(grads: pd.DataFrame, step: int | None = None, averaged: bool = False) -> pd.DataFrame:
    """Cosine, mean [95% interval], of each placement's gradient with each reference at snapshot
    `step` (default: the last): over seeds and batches for single batches, over seeds for the
    gradients averaged over the batches (`averaged`); plus the mean norm ratio to the gradient of the
    sequence reverse KL."""
    step = int(grads["step"].max()) if step is None else step
    data = grads[(grads["step"] == step) & ((grads["batch"] == -1) if averaged else (grads["batch"] >= 0))]
    cos = interval_by(data, ["placement", "reference"], "cosine")
    cos["text"] = [f"{m:.2f} [{lo:.2f}, {hi:.2f}]" for m, lo, hi in zip(cos["mean"], cos["lo"], cos["hi"])]
    table = cos.pivot(index="placement", columns="reference", values="text").loc[
        list(PLACEMENTS), list(REFERENCES)
    ]
    ratio = data[data["reference"] == REFERENCES[0]].groupby("placement")["norm_ratio"].mean()
    table[f"norm / norm({REFERENCES[0]})"] = [f"{ratio.loc[p]:.2f}" for p in PLACEMENTS]
    return table


def training_errors(metrics: pd.DataFrame, bins: int = 10) -> pd.DataFrame:
    """From the run logs: each training step's batch-mean error of every estimator (estimate - exact
    KL, nats per token), with the step's bin (`bins` equal spans of the run, labelled by their middle
    step): one row per (seed, step, estimator)."""
    data = metrics[metrics["reward"].notna()]
    width = max(1, -(-int(data["step"].max() + 1) // bins))
    frames = [
        pd.DataFrame(
            {
                "seed": data["seed"],
                "step": data["step"],
                "estimator": k,
                "error": data[f"kl/{k}"] - data["kl/exact"],
                "exact": data["kl/exact"],
                "bin": (data["step"] // width) * width + (width - 1) / 2,
            }
        )
        for k in ESTIMATORS
    ]
    return pd.concat(frames, ignore_index=True)


def figure_training(metrics: pd.DataFrame, smooth: int = 5, bins: int = 10) -> plt.Figure:
    """From the run logs: (a) the batch means of the exact per-token KL and of k1, k2, k3 (across-seed
    means, trailing mean over `smooth` steps); per span of `bins` equal spans of the
    run, over its steps and seeds: (b) the mean error of a batch estimate (bias) with its 95%
    t-interval, (c) the standard deviation of that error (how far one batch's estimate strays)."""
    data = metrics[metrics["reward"].notna()]
    errors = training_errors(metrics, bins)
    fig, axes = plt.subplots(1, 3, figsize=(15, 3.8))
    for k, color in (("exact", "black"), *zip(ESTIMATORS, _COLORS)):
        mean = curve(data, f"kl/{k}", smooth=smooth)
        axes[0].plot(mean["step"], mean["mean"], color=color, lw=2.0 if k == "exact" else 1.2, label=k)
    for i, (k, color) in enumerate(zip(ESTIMATORS, _COLORS)):
        mine = errors[errors["estimator"] == k]
        bias = interval_by(mine, ["bin"], "error")
        shift = (i - 1) * 0.12 * (errors["bin"].max() - errors["bin"].min()) / bins  # dodge the error bars
        yerr = [bias["mean"] - bias["lo"], bias["hi"] - bias["mean"]]
        style = {"fmt": "o-", "color": color, "ms": 4, "lw": 1.2, "capsize": 2, "label": k}
        axes[1].errorbar(bias["bin"] + shift, bias["mean"], yerr=yerr, **style)
        spread = mine.groupby("bin")["error"].std()
        axes[2].plot(spread.index, spread.to_numpy(), "o-", color=color, ms=4, lw=1.2, label=k)
    axes[1].axhline(0, color="0.3", ls="--", lw=0.8)
    axes[2].set_yscale("log")
    titles = (
        "exact KL and the batch-mean estimators",
        "bias of a batch estimate",
        "noise of a batch estimate",
    )
    ylabels = (
        "KL per token (nats)",
        "batch estimate - exact (nats per token)",
        "std of batch estimate - exact (log)",
    )
    _label_panels(axes, titles, ylabels, "training step")
    seeds = metrics["seed"].nunique()
    caption = f"(a) {smooth}-step trailing mean, (b, c) over the steps and seeds of {bins} spans of the run"
    fig.suptitle(f"KL estimators on the training batches ({seeds} seeds; {caption})", fontsize=11)
    fig.tight_layout()
    return fig


def _label_panels(axes, titles: Sequence[str], ylabels: Sequence[str], xlabel: str) -> None:
    """Title, axis labels, grid and legend of each panel of a row of KL figures."""
    for ax, title, ylabel in zip(axes, titles, ylabels):
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(ylabel)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)


def figure(tokens: pd.DataFrame) -> plt.Figure:
    """Per token, on fresh batches at each snapshot: (a) exact KL, (b) bias / exact KL, (c) noise
    (std of estimate - exact) / exact KL, log scale; means and 95% intervals over seeds and batches."""
    data = relative(tokens)
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    _band(axes[0], interval_by(data[data["estimator"] == "k1"], ["step"], "exact"), "exact KL", "black")
    for k, color in zip(ESTIMATORS, _COLORS):
        mine = data[data["estimator"] == k]
        _band(axes[1], interval_by(mine, ["step"], "bias_rel"), k, color, marker="o")
        _band(axes[2], interval_by(mine, ["step"], "noise_rel"), k, color, marker="o")
    axes[1].axhline(0, color="0.3", ls="--", lw=0.8)
    axes[2].set_yscale("log")
    titles = ("exact KL(π‖π_ref) per token", "bias / exact KL", "noise std / exact KL")
    ylabels = ("nats per token", "relative bias", "relative noise (log scale)")
    _label_panels(axes, titles, ylabels, "training step of the snapshot")
    runs, batches = tokens["seed"].nunique(), tokens["batch"].nunique()
    caption = f"mean and 95% t-interval over {runs} seeds x {batches} batches"
    fig.suptitle(f"per-token estimators on fresh batches ({caption})", fontsize=11)
    fig.tight_layout()
    return fig


def figure_gradients(grads: pd.DataFrame) -> plt.Figure:
    """The gradient each placement follows, on single batches at each snapshot: cosine with the exact
    sequence reverse-KL gradient, with the token-local one, with the forward-KL one, and the norm
    ratio to the sequence reverse-KL gradient (log scale); means and 95% intervals over seeds and
    batches."""
    single = grads[grads["batch"] >= 0]
    fig, axes = plt.subplots(1, 4, figsize=(17, 3.8))
    colors = dict(zip(PLACEMENTS, [*_COLORS, "tab:purple", "tab:brown"]))
    styles = {p: "--" if "reward" in p else "-" for p in PLACEMENTS}
    for ax, ref in zip(axes[:3], REFERENCES):
        for p in PLACEMENTS:
            mine = single[(single["placement"] == p) & (single["reference"] == ref)]
            _band(ax, interval_by(mine, ["step"], "cosine"), p, colors[p], marker="o", ls=styles[p])
        ax.axhline(0, color="0.3", ls=":", lw=0.8)
        ax.set_ylim(-1.05, 1.05)
        ax.set_ylabel("cosine similarity")
        ax.set_title(f"cosine with ∇ {ref}", fontsize=10)
    ratio = single[single["reference"] == REFERENCES[0]]
    for p in PLACEMENTS:
        mine = ratio[ratio["placement"] == p]
        _band(axes[3], interval_by(mine, ["step"], "norm_ratio"), p, colors[p], marker="o", ls=styles[p])
    axes[3].set_yscale("log")
    axes[3].axhline(1, color="0.3", ls=":", lw=0.8)
    axes[3].set_ylabel("‖g‖ / ‖∇ reverse KL, sequence‖ (log)")
    axes[3].set_title("gradient norm ratio", fontsize=10)
    for ax in axes:
        ax.set_xlabel("training step of the snapshot")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8, loc="lower left")
    runs, batches = grads["seed"].nunique(), single["batch"].nunique()
    caption = f"mean and 95% t-interval over {runs} seeds x {batches} batches"
    fig.suptitle(f"the gradient each KL placement follows on one batch ({caption})", fontsize=11)
    fig.tight_layout()
    return fig


_COLORS = ("tab:blue", "tab:orange", "tab:green")


def _band(ax: plt.Axes, stats: pd.DataFrame, label: str, color: str, marker: str = "", ls: str = "-") -> None:
    """A mean line with its interval as a band, against `step`."""
    stats = stats.sort_values("step")
    ax.plot(stats["step"], stats["mean"], ls=ls, marker=marker, ms=4, color=color, label=label, lw=1.4)
    ax.fill_between(stats["step"], stats["lo"], stats["hi"], color=color, alpha=0.18, lw=0)
