"""The GRPO training loop, top to bottom like the algorithm (`Trainer.step`): sample and score
(`rollout`, faults included) -> fixed log-probs (old, reference, previous) -> training signal
(`Objective.signal`: advantages, weights) -> updates (mini- and micro-batched) -> controllers -> log
(`step_metrics`). Every variant and every trick that changes the training signal enters through
`Objective`, composed from the config (again after a live change). `Trainer` advances one step at a
time and takes live changes between steps; `train` runs it through."""

import copy
import dataclasses
import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, cast

import pandas as pd
import torch
from torch import Tensor
from tqdm.auto import tqdm
from transformers import PreTrainedModel

from grpo_lab.config import Config, field_names
from grpo_lab.models.embedded import recorded_sha256
from grpo_lab.models.evaluation import evaluate, pass_at_k, pass_ks, sampled_correct, sampling_seed
from grpo_lab.models.lean_decode import causal_lm
from grpo_lab.models.loading import load_policy, resolve_model_path
from grpo_lab.models.logprobs import completion_logprobs, is_chunked, vocab_size
from grpo_lab.models.pretrained import PRETRAINED, is_pretrained
from grpo_lab.models.sampler import Rollout
from grpo_lab.objective import BatchTotals, exact_kl, masked_mean
from grpo_lab.objective.groups import Groups
from grpo_lab.runlog import RunWriter, environment, read_jsonl, read_metrics, write_text_atomic
from grpo_lab.tasks import Task, make_task
from grpo_lab.training import checkpoint
from grpo_lab.training.compose import (
    FixedLogprobs,
    Objective,
    StepTensors,
    entropy_controller,
    kl_controller,
    kl_schedule_params,
)
from grpo_lab.training.devices import autocast, peak_memory_mb, pick_device
from grpo_lab.training.faults import Sampler
from grpo_lab.training.rollout import Batch, Sampling, sample_batch, token_credit
from grpo_lab.training.step_metrics import gradient_cosines, loss_components, sampling_metrics
from grpo_lab.tricks import LearnableTemperature


class Callback(Protocol):
    """Receives the run log live: every row as it is logged, then the summary."""

    def on_step(self, step: int, row: dict) -> None: ...

    def on_end(self, summary: dict) -> None: ...


Findings = Callable[[pd.DataFrame, dict[str, Any]], list[dict[str, Any]]]
"""reads a finished run's metrics and config and returns the records of its summary's `findings`
(`analysis.diagnostics.summary_findings`): the training core imports no analysis, so the callers
above it hand the diagnostics in (the run store does); without it the summary has no `findings`"""

EXACT_KL_MAX_VOCAB = 4096
"""the exact per-token KL sums over the vocabulary: logged only for output layers of at most this many
rows (it keeps the reference's full log-softmax (N, T, V), so it takes the plain log-prob path)"""

LIVE_FIELDS = (
    "kl_coef",
    "kl_estimator",
    "kl_placement",
    "eps_low",
    "eps_high",
    "learning_rate",
    "group_size",
    "temperature",
    "max_grad_norm",
    "dynamic_group_size",
    "group_size_max",
)
"""config fields `Trainer.reconfigure` changes between steps; every other field needs a new run"""

ACTIVATION_BUDGET = 2**30
"""bytes of activations one micro-batch may keep for its backward when the config leaves the split to
the trainer (micro_batch_size 0) on the chunked log-prob path (`budget_micro_batch_size`): beyond it the
step's memory stops growing with the batch. 1 GiB keeps a micro-batch's matmuls a few hundred tokens
tall, where a CPU core is near its speed: on SmolLM2-135M (30 layers, hidden 576) it gives 7 rows of 63
tokens, and a 64-row step there ran its forward and backward 5% slower than in one micro-batch at half the
peak RSS (3.95 against 7.87 GB, one thread), where one row a micro-batch (what 128 MiB gave) spent 1.6 s a
row in a 32-row chat-task step against 0.5 s. The 43M-parameter Qwen-vocabulary model fits 130 rows."""

LAYER_BYTES_PER_HIDDEN = 128
"""bytes of activations a decoder layer keeps for the backward per token and unit of the hidden size:
32 float32 values (norms, attention projections and output, the gated MLP's four intermediate-size
tensors at intermediate = 4 x hidden). Measured with saved-tensor hooks on Qwen2 shapes (hidden 128 and
256, intermediate 4 x hidden): 102 to 117 bytes on the lean and the transformers path; rounded up for
wider MLPs."""

HEAD_BYTES_PER_HIDDEN = 4
"""bytes the chunked output layer keeps for the backward per token and unit of the hidden size: the final
hidden state in float32 (its logits are recomputed a chunk at a time, whatever the rows)"""

EVENTS = "events.jsonl"
"""the run directory's record of live reconfigurations: one JSON object per change, with its step"""


def micro_batches(n: int, size: int) -> list[Tensor]:
    """Row indices of consecutive chunks of `size` rows (one chunk when size is 0)."""
    size = size or n
    return [torch.arange(i, min(i + size, n)) for i in range(0, n, size)]


def budget_micro_batch_size(rows: int, length: int, hidden: int, layers: int, budget: int) -> int:
    """Rows a micro-batch so that its activations stay under `budget` bytes: a row of `length` tokens
    (the step's padded prompt + completion length) keeps `LAYER_BYTES_PER_HIDDEN` x `hidden` bytes per
    token in each of `layers` decoder layers and `HEAD_BYTES_PER_HIDDEN` x `hidden` in the chunked output
    layer. At least one row, at most all `rows`. What the output layer holds whatever the rows (one chunk
    of logits, its weight's gradient) does not depend on the split and is not counted."""
    per_row = length * hidden * (layers * LAYER_BYTES_PER_HIDDEN + HEAD_BYTES_PER_HIDDEN)
    return max(1, min(rows, budget // per_row))


def mini_batches(groups: Groups, n: int, count: int) -> list[tuple[Tensor, Groups]]:
    """The batch's n rows split into `count` mini-batches of whole groups (consecutive prompts), each
    with its own group layout: one optimizer step each, as PPO epochs over mini-batches (verl's
    ppo_mini_batch_size); groups stay whole so every normalizer sees complete groups."""
    sizes = torch.full((n // groups,), groups) if isinstance(groups, int) else groups.cpu()  # (B,)
    starts = sizes.cumsum(0) - sizes  # (B,)
    out = []
    for part in torch.arange(len(sizes)).tensor_split(count):
        rows = torch.cat([torch.arange(int(starts[i]), int(starts[i] + sizes[i])) for i in part])
        out.append((rows, groups if isinstance(groups, int) else sizes[part]))
    return out


@torch.no_grad()
def fixed_logprobs(
    model: torch.nn.Module, rollout: Rollout, chunks: list[Tensor], temperatures: Tensor, keep_logits: bool
) -> tuple[Tensor, Tensor | None]:
    """Log-probs (N, T) that stay fixed during the updates (old policy, reference), each row at its
    own temperature (N,), and optionally their log-softmax (N, T, V) for the exact KL; without it, a
    large vocabulary's log-probs come a chunk of tokens at a time (`logprobs.completion_logprobs`)."""
    logps, logsm = [], []
    for rows in chunks:
        stats = completion_logprobs(
            model, rollout.select(rows), temperatures[rows], keep_logits=keep_logits
        )  # (n, T)
        logps.append(stats.logp)
        if stats.logits is not None:
            logsm.append(torch.log_softmax(stats.logits, dim=-1))  # (n, T, V)
    return torch.cat(logps), (torch.cat(logsm) if keep_logits else None)


@dataclasses.dataclass
class Update:
    """What the update passes of one step leave behind."""

    losses: list[float]
    grad_norms: list[float]
    logp: Tensor
    """(N, T) detached log-probs of the last pass, for whole-batch statistics"""
    entropy: Tensor
    """(N, T) detached token entropies of the last pass"""
    exact_kl: Tensor | None
    """(N, T) exact per-token KL to the reference, for small vocabularies"""
    t_forward_backward: float
    t_optimizer: float

    @staticmethod
    def buffers(mask: Tensor, exact: bool) -> "Update":
        """Zeroed per-token buffers (N, T) shaped like the mask, for the update passes to fill."""
        exact_kl = torch.zeros_like(mask) if exact else None
        return Update([], [], torch.zeros_like(mask), torch.zeros_like(mask), exact_kl, 0.0, 0.0)

    def stats(self, mask: Tensor) -> dict[str, float]:
        """Mean loss and gradient norm over the optimizer steps, the exact KL over the tokens (N, T)."""
        losses, norms = self.losses, self.grad_norms
        out = {
            "loss": sum(losses) / len(losses) if losses else math.nan,
            "grad_norm": sum(norms) / len(norms) if norms else math.nan,
            "cost/optimizer_steps": len(losses),
            "time/forward_backward_s": self.t_forward_backward,
            "time/optimizer_s": self.t_optimizer,
        }
        if self.exact_kl is not None:
            out["kl/exact"] = float(masked_mean(self.exact_kl, mask))
        return out


@dataclasses.dataclass(frozen=True)
class UpdateInputs:
    """What every micro-batch of one step's updates reads."""

    rollout: Rollout
    temperatures: Tensor
    """(N,) each row's sampling temperature, without the learned factor"""
    fixed: StepTensors
    entropy_coef: float
    """the entropy bonus of this step (0 when off)"""
    ref_logsm: Tensor | None
    """(N, T, V) reference log-softmax, for the exact KL on small vocabularies"""


class Trainer:
    """A GRPO run (or any variant the config composes) that advances one step at a time.

    `step()` runs one training step (validation first when due) and returns its logged row; `run()`
    steps until `done`, then validates once more, writes the summary and returns the metrics.
    Between steps, `reconfigure(**changes)` changes the fields in `LIVE_FIELDS`: the next step uses
    them. With `out`, the run is written there (config.json with the starting config, metrics.jsonl,
    samples.jsonl, events.jsonl with every live change, summary.json, and checkpoint.pt every
    `checkpoint_every` steps); `resume` continues an interrupted run from its last checkpoint, live
    changes included, and gives the same metrics, step for step, as an uninterrupted run. Each
    callback's `on_step(step, row)` sees every logged row as it is written (live tracking).
    `findings`, when given, reads the finished run and fills the summary's `findings`.

    `config` is the current config (the starting one with every live change applied), `kl_coef` the
    KL coefficient of the next step (the KL controller's), `events` every live change as {"step",
    "event", "changes": {field: [old, new]}}, `metrics` the rows so far."""

    def __init__(
        self,
        config: Config,
        out: str | Path | None = None,
        callbacks: Sequence[Callback] = (),
        resume: bool = False,
        findings: Findings | None = None,
    ) -> None:
        c = config
        saved = checkpoint.to_resume(out, c.to_dict()) if resume else None
        if c.torch_threads:
            torch.set_num_threads(c.torch_threads)
        torch.manual_seed(c.seed)
        self.config = c
        self.out = Path(out) if out is not None else None
        self.callbacks = list(callbacks)
        self.findings = findings
        self.device = device = pick_device(c.device)
        digits = c.task_digits or None
        # a file task's chat prompts are rendered by the model's own chat template, read from its
        # directory (a pretrained model's name is not one); the embedded model needs the task first
        template_model = c.model if c.model == "embedded" else resolve_model_path(c.model)
        self.task = task = make_task(c.task, digits, c.rewards, template_model)  # the one build of the task
        self.objective = Objective(c)
        reward_names = c.rewards or task.default_rewards
        self._check_rewards(task, reward_names)
        self.policy = load_policy(
            c.model,
            c.task,
            digits,
            device,
            lora=c.lora,
            lora_r=c.lora_r,
            lora_alpha=c.lora_alpha,
            need_reference=c.reference_forward,
            built=task,
        )
        self.start = self._start(c)
        self.model = self.policy.model
        self.tok = cast(Any, self.policy.tokenizer)  # a Hugging Face tokenizer
        vocab = vocab_size(self.model)  # the output layer's rows, which may exceed the tokenizer's
        if c.kl_monitor and vocab > EXACT_KL_MAX_VOCAB:
            raise ValueError(
                f"kl_monitor logs the exact KL, which is computed for vocabularies of at most "
                f"{EXACT_KL_MAX_VOCAB} tokens; this model's has {vocab}: set kl_monitor=False"
            )
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.tau = LearnableTemperature().to(device) if c.learnable_temperature else None
        self.optimizer = self._optimizer()
        self.prev_model = (
            copy.deepcopy(self.model).eval().requires_grad_(False) if c.kl_prev_coef > 0 else None
        )
        self.kl_ctl = kl_controller(c)
        self.ent_ctl = entropy_controller(c)
        self.generator = torch.Generator(device).manual_seed(c.seed)
        self.fault_gen = torch.Generator().manual_seed(c.seed + 1)  # faults never shift the sampler's stream
        self.sampler = Sampler(
            self.model, c.fault_stale_k, c.fault_sampler_dtype, c.fault_long_frac > 0, c.fault_stale_recompute
        )
        self.reward_weights = c.reward_weights or (1.0,) * len(reward_names)
        self.sampling = Sampling(
            policy=self.model,
            tokenizer=self.tok,
            task=task,
            reward_funcs=[(n, task.rewards[n]) for n in reward_names],
            reward_weights=self.reward_weights,
            generator=self.generator,
            fault_generator=self.fault_gen,
            device=device,
        )
        self.skipped, self.step_index = 0, 0
        if saved is not None:
            self._restore(saved)
        self.writer = self._open_run_log(c, resume)
        self.reward_names, self.val_set = tuple(reward_names), task.validation(c.val_size)
        self.sampled_val_set = task.validation(c.val_sampled_size)
        self.exact = vocab <= EXACT_KL_MAX_VOCAB
        # a memory budget picks each step's micro-batch size (`_micro_batch_size`)
        self.budgeted = c.micro_batch_size == 0 and is_chunked(self.model, keep_logits=self.exact)
        rows = read_metrics(self.out).to_dict("records") if self.step_index and self.out is not None else []
        self.rows = [{k: v for k, v in r.items() if v == v} for r in rows]  # drop NaN fill of absent metrics
        self.finished = False
        self.bar = tqdm(
            total=c.steps,
            initial=self.step_index,
            desc=f"{c.preset} seed {c.seed}",
            disable=not c.progress,
            leave=False,
        )

    def validate(self) -> dict[str, float]:
        """Validation at the current step: greedy decoding on the task's validation set
        (`val/accuracy`, `val/reward`) and, with `val_samples` > 0, `val/sampled_accuracy` (pass@1)
        and `val/pass@k` for k = 2, 4, ... up to `val_samples` (`evaluation.pass_at_k`, unbiased) from
        `val_samples` completions per prompt on the first `val_sampled_size` validation prompts, at
        the fixed `val_temperature` (never the learned one: an arm that sharpens its own sampling is
        scored as every other), from a generator seeded by the step alone (the same stream for every
        arm and seed: `evaluation.sampling_seed`). Sharpening raises pass@1 but not pass@k."""
        c = self.config
        out = evaluate(
            self.model,
            self.tok,
            self.task,
            self.val_set,
            max_new_tokens=c.max_completion_length,
            reward_names=self.reward_names,
            reward_weights=self.reward_weights,
        )
        if c.val_samples:
            hits = sampled_correct(
                self.model,
                self.tok,
                self.task,
                self.sampled_val_set,
                samples=c.val_samples,
                max_new_tokens=c.max_completion_length,
                temperature=c.val_temperature,
                seed=sampling_seed(self.step_index),
            )  # (n, k)
            out["val/sampled_accuracy"] = float(hits.float().mean())
            for k in pass_ks(c.val_samples):
                out[f"val/pass@{k}"] = pass_at_k(hits, k)
        return out

    def _check_rewards(self, task: Task, reward_names: Sequence[str]) -> None:
        """The reward functions exist, and scheme B's token-level return has token rewards to mix in."""
        c = self.config
        missing = [n for n in reward_names if n not in task.rewards]
        if missing:
            raise ValueError(f"task {c.task!r} has no reward {missing}; valid: {', '.join(task.rewards)}")
        if (
            self.objective.needs_token_credit
            and task.token_credit is None
            and not self.objective.kl_in_reward
        ):
            raise ValueError(
                "token_adv_mix > 0 needs token-level rewards: "
                "task 'arith' (per-digit credit) or kl_placement='reward'"
            )

    def _start(self, c: Config) -> dict[str, Any]:
        """The weights the run starts from, as config.json records them: the sha256 of the initial
        policy and of the reference, and for a pretrained model (`pretrained.PRETRAINED`) the package
        file it was converted from. On the embedded model they must be the task's recorded start
        (`embedded.recorded_sha256` of the directory it was loaded from), on a pretrained model its
        registry's: a model that differs from its own record is corrupt, and a run from it would be
        keyed as a run from the recorded weights."""
        p = self.policy
        start: dict[str, Any] = {"init_sha256": p.start_sha256, "reference_sha256": p.reference_sha256}
        if c.model == "embedded":
            expected, which = recorded_sha256(Path(p.path)), f"the embedded model of task {c.task!r}"
        elif is_pretrained(c.model):
            spec = PRETRAINED[c.model]
            expected, which = spec.weights_sha256, f"the pretrained model {c.model!r}"
            start["pretrained"] = {"name": c.model, "package": spec.requirement, "gguf_file": spec.gguf_file}
        else:
            return start
        if p.start_sha256 != expected:
            raise RuntimeError(
                f"{which} has weights {p.start_sha256[:16]}, but its record says {expected[:16]}: "
                f"the model directory {p.path} is corrupt; remove it to rebuild"
            )
        return start

    def _optimizer(self) -> torch.optim.Optimizer:
        """AdamW over the model's trainable weights (group 0) and the learnable temperature."""
        c = self.config
        groups: list[dict[str, Any]] = [{"params": self.params}]
        if self.tau is not None:
            groups.append(
                {"params": list(self.tau.parameters()), "lr": c.temperature_lr, "weight_decay": 0.0}
            )
        # the fused kernel updates every tensor in one pass (on CPU the default loops per parameter)
        return torch.optim.AdamW(groups, lr=c.learning_rate, weight_decay=c.weight_decay, fused=True)

    def _stateful(self) -> dict[str, Any]:
        """What a checkpoint keeps by its `state_dict()` (None where a trick is off)."""
        return {
            "model": self.model,
            "optimizer": self.optimizer,
            "tau": self.tau,
            "prev_model": self.prev_model,
            "sampler": self.sampler,
            "kl_ctl": self.kl_ctl,
            "ent_ctl": self.ent_ctl,
        }

    def _restore(self, saved: dict[str, Any]) -> None:
        """Continue exactly where the checkpoint was taken, live changes included."""
        if saved["config"] != self.config.to_dict():
            self._apply(Config.from_dict(saved["config"]))
        checkpoint.load_states(self._stateful(), saved)
        checkpoint.restore_rng_states(saved["rng"], self.generator, self.fault_gen)
        self.skipped, self.step_index = saved["skipped"], saved["step"]

    def _open_run_log(self, start_config: Config, resume: bool) -> RunWriter | None:
        """The run directory's writer (None without `out`), and the live changes made before the
        step the run continues from."""
        self.events: list[dict] = []
        if self.out is None:
            return None
        start = self.step_index
        env = environment(str(self.device))
        writer = RunWriter(
            self.out, start_config.to_dict(), env, resume_from=start if resume else None, start=self.start
        )
        if (self.out / EVENTS).exists():  # keep what happened before `start`
            self.events = [e for e in read_jsonl(self.out / EVENTS) if resume and e["step"] < start]
            write_text_atomic(self.out / EVENTS, "".join(json.dumps(e) + "\n" for e in self.events))
        return writer

    @property
    def done(self) -> bool:
        """Whether every training step of the config has been taken."""
        return self.step_index >= self.config.steps

    @property
    def kl_coef(self) -> float:
        """The KL coefficient the next step uses: the KL controller's."""
        return self.kl_ctl.coef

    @property
    def metrics(self) -> pd.DataFrame:
        """The rows logged so far, one per step (and the final validation row once finished)."""
        return pd.DataFrame(self.rows)

    def step(self) -> dict:
        """One training step: validation when due, then sample and score, fixed log-probs, training
        signal, updates, controllers, log. Returns the logged row."""
        if self.done:
            raise RuntimeError(
                f"the run is done: all {self.config.steps} steps are taken; run() writes its summary"
            )
        c, step, objective = self.config, self.step_index, self.objective
        row: dict = {"step": step}
        if step % c.eval_every == 0 and (step == 0 or step >= c.eval_start):
            with autocast(self.device):
                row.update(self.validate())
        t_step = time.perf_counter()  # validation is not part of the step's cost
        tau_now = self.tau().item() if self.tau is not None else 1.0

        # 1. sample G completions per prompt and score them (faults act on the rollout and its rewards);
        #    dynamic group size grows all-equal groups, dynamic sampling drops and refills them
        batch = sample_batch(
            self.sampling, self.sampler.weights(self.model), c, step, c.temperature * tau_now
        )
        scored, groups = batch.scored, batch.scored.groups
        rollout, lengths = scored.rollout, scored.rollout.lengths  # (N,)
        mask = rollout.completion_mask  # (N, T) tokens the policy produced
        rewards, length_stats = objective.shape_rewards(scored.rewards, lengths)  # (N,)
        t_sample = time.perf_counter()

        # 2. log-probs that stay fixed during the updates; the update divides by the learned factor
        #    itself, so the reference and the updates see each row's temperature without it
        micro = self._micro_batch_size(rollout)
        chunks = micro_batches(len(lengths), micro)
        base_temps = scored.temperatures / tau_now  # (N,)
        fixed = self._fixed_logprobs(rollout, chunks, scored.temperatures, base_temps)
        t_logprob = time.perf_counter()

        # 3. the training signal: advantages (the KL folded into the reward where it sits there),
        #    sequence weights, sampler importance weights
        credit = token_credit(self.task, scored, self.tok) if objective.needs_token_credit else None  # (N, T)
        signal = objective.signal(
            rollout, rewards, fixed, groups, token_credit=credit, kl_coef=self.kl_ctl.coef
        )
        entropy_coef = self.ent_ctl.bonus
        if c.grad_cos_every and step % c.grad_cos_every == 0:  # diagnostic: do the loss terms pull apart?
            row.update(self._gradient_cosines(batch, rewards, signal.fixed, chunks, entropy_coef))

        # 4. updates: num_iterations passes, num_mini_batches optimizer steps each, micro-batched
        update = self._update(rollout, base_temps, signal.fixed, groups, entropy_coef, fixed.ref_logsm, micro)
        t_train = time.perf_counter()

        # 5. controllers see this step's measurements and set the next step's coefficients
        row.update(objective.update_stats(update.logp, update.entropy, signal.fixed, rollout))
        row.update({"kl/coef": self.kl_ctl.coef, "entropy/coef": entropy_coef})
        row["entropy"] = float(masked_mean(update.entropy, mask))  # (N, T) -> scalar
        if fixed.ref_logp is not None:
            self.kl_ctl.update(row["kl"], step, c.steps)
        self.ent_ctl.update(row["entropy"])

        # 6. log
        correct = [self.task.is_correct(t, a) for t, a in zip(scored.completions, scored.answers)]
        row.update(sampling_metrics(batch, rewards, c, step, correct), **length_stats, **signal.stats)
        row.update(update.stats(mask), **self._cost(fixed, t_step, t_sample, t_logprob, t_train))
        if self.budgeted:
            row["cost/micro_batch_size"] = micro
        self._log(step, row, batch, rewards)
        self.step_index = step + 1
        return row

    def _micro_batch_size(self, rollout: Rollout) -> int:
        """Rows per micro-batch this step: the config's, or with micro_batch_size 0 the whole batch, except
        on the chunked log-prob path (`budgeted`), where the memory budget decides from the step's padded
        length (`budget_micro_batch_size`, `ACTIVATION_BUDGET`)."""
        rows = len(rollout.completion_ids)
        if not self.budgeted:
            return self.config.micro_batch_size or rows
        length = rollout.prompt_ids.shape[1] + rollout.completion_ids.shape[1]
        body = cast(PreTrainedModel, causal_lm(self.model)).config
        return budget_micro_batch_size(
            rows, length, body.hidden_size, body.num_hidden_layers, ACTIVATION_BUDGET
        )

    def _fixed_logprobs(
        self, rollout: Rollout, chunks: list[Tensor], temperatures: Tensor, base_temps: Tensor
    ) -> FixedLogprobs:
        """The old policy's log-probs (only when they can differ from the current ones or are needed
        before the update; the sampler's own when they are the same computation, and a stale
        sampler's under that fault: `Sampler.behaviour_logp`), the reference's (only when the KL
        uses it, or its full log-softmax alone for `kl_monitor`'s exact KL) and the previous step's
        policy's (two-layer KL), which then becomes this policy."""
        ref = ref_logsm = prev = None
        with autocast(self.device):
            old = self.sampler.behaviour_logp(rollout, self.objective.needs_old_logp)  # (N, T) or None
            from_sampler = old is not None
            if old is None and self.objective.needs_old_logp:
                old, _ = fixed_logprobs(self.model, rollout, chunks, temperatures, keep_logits=False)
            if self.config.reference_forward:
                with self.policy.as_reference() as reference:
                    ref, ref_logsm = fixed_logprobs(
                        reference, rollout, chunks, base_temps, keep_logits=self.exact
                    )
                ref = ref if self.config.uses_reference else None  # a monitor's: the exact KL alone
            if self.prev_model is not None:
                prev, _ = fixed_logprobs(self.prev_model, rollout, chunks, temperatures, keep_logits=False)
                self.prev_model.load_state_dict(
                    self.model.state_dict()
                )  # next step's "previous" is this policy
        return FixedLogprobs(
            old_logp=old,
            ref_logp=ref,
            ref_logsm=ref_logsm,
            prev_logp=prev,
            old_from_sampler=from_sampler,
            reference_forward=self.config.reference_forward,
        )

    def _gradient_cosines(
        self, batch: Batch, rewards: Tensor, fixed: StepTensors, chunks: list[Tensor], entropy_coef: float
    ) -> dict[str, float]:
        """`grad_cos/*`: the cosines between the gradients of the loss's components."""
        scored, objective = batch.scored, self.objective
        rollout, groups = scored.rollout, scored.groups
        parts = loss_components(
            objective,
            per_func=scored.per_func,
            reward_weights=self.reward_weights,
            length_delta=rewards - scored.rewards if objective.shapes_length else None,
            lengths=rollout.lengths,
            mask=rollout.completion_mask,
            groups=groups,
            kl_coef=self.kl_ctl.coef,
            entropy_coef=entropy_coef,
        )
        return gradient_cosines(
            self.model,
            self.params,
            rollout=rollout,
            chunks=chunks,
            temperatures=scored.temperatures,
            objective=objective,
            fixed=fixed,
            totals=objective.totals(fixed.mask, groups),  # whole-batch normalizers
            parts=parts,
        )

    def _cost(
        self, fixed: FixedLogprobs, t_step: float, t_sample: float, t_logprob: float, t_train: float
    ) -> dict:
        """The step's time, passes and memory."""
        c = self.config
        row: dict[str, Any] = {
            "learning_rate": self.optimizer.param_groups[0]["lr"],
            "time/sample_s": t_sample - t_step,
            "time/logprob_s": t_logprob - t_sample,
            "time/train_s": t_train - t_logprob,
            "time/step_s": time.perf_counter() - t_step,
            "cost/forward_passes": c.num_iterations + fixed.passes,
            "cost/backward_passes": c.num_iterations,
            "cost/peak_rss_mb": peak_memory_mb(self.device),
        }
        if c.skip_nonfinite:
            row["nonfinite/skipped_steps"] = self.skipped
        if self.tau is not None:
            row["temperature/learned"] = self.tau().item()
        return row

    def run(self) -> pd.DataFrame:
        """Step until done, validate a last time, write the summary; the metrics, one row per step."""
        while not self.done:
            self.step()
        if not self.finished:
            self._finish()
        return self.metrics

    def reconfigure(self, **changes: Any) -> Config:
        """Change live fields (`LIVE_FIELDS`) between steps; the next step uses the new values, and
        the change is recorded in `events` (and the run's events.jsonl). The new config is validated
        like any other: a bad value, or a field that needs a new run, raises ValueError and changes
        nothing. A field equal to its current value (`live_values`: for kl_coef the KL controller's,
        which a schedule may have moved) is no change. A kl_coef set live is the coefficient of the
        next step whatever the schedule; the schedule continues from it (a linear one then runs from
        it to kl_coef_final over the steps left). Switching the KL on in a run started without it
        loads the reference: the weights the run started from, as if the KL had been on from the
        start. Returns the new config."""
        if self.finished:
            raise RuntimeError("the run is finished (its summary is written); start a new Trainer")
        unknown = sorted(set(changes) - set(field_names()))
        if unknown:
            raise ValueError(
                f"unknown config field(s) {unknown}; fields that change live: {', '.join(LIVE_FIELDS)}"
            )
        frozen = sorted(set(changes) - set(LIVE_FIELDS))
        if frozen:
            raise ValueError(
                f"{frozen} cannot change during a run (start a new Trainer for that); "
                f"fields that change live: {', '.join(LIVE_FIELDS)}"
            )
        new = self.config.replace(**changes)  # a bad value raises here, before anything changes
        current = self.live_values()
        diff = {k: [current[k], getattr(new, k)] for k in changes if current[k] != getattr(new, k)}
        if not diff:
            return self.config
        self._apply(new)
        if "kl_coef" in diff:  # the next step uses it; the schedule restarts from it
            self.kl_ctl.set_coef(new.kl_coef, self.step_index)
        event = {"step": self.step_index, "event": "reconfigure", "changes": diff}
        self.events.append(event)
        if self.out is not None:
            with open(self.out / EVENTS, "a") as f:
                f.write(json.dumps(event) + "\n")
        return new

    def live_values(self) -> dict[str, Any]:
        """The value each live field has now: the config's, except the KL coefficient, which the KL
        controller owns once a schedule has moved it."""
        return {**{k: getattr(self.config, k) for k in LIVE_FIELDS}, "kl_coef": self.kl_ctl.coef}

    def _apply(self, new: Config) -> None:
        """Make `new` the current config: objective, reference, schedule parameters, learning rate."""
        if new.reference_forward and not self.policy.lora and self.policy.reference is None:
            self.policy.reference = self._load_reference()  # may fail: before anything else changes
        self.config = new
        self.objective = Objective(new)
        self.kl_ctl.params = kl_schedule_params(new)
        self.optimizer.param_groups[0]["lr"] = new.learning_rate  # group 0 holds the model's weights

    def _load_reference(self) -> torch.nn.Module:
        """The weights the run started from, frozen: the reference a run with the KL on would have."""
        start = load_policy(self.policy.path, device=self.device, need_reference=False)
        return start.model.eval().requires_grad_(False)

    def _update(
        self,
        rollout: Rollout,
        temperatures: Tensor,
        fixed: StepTensors,
        groups: Groups,
        entropy_coef: float,
        ref_logsm: Tensor | None,
        micro: int,
    ) -> Update:
        """num_iterations passes over the batch, each split into num_mini_batches mini-batches of
        whole groups; each mini-batch is one clipped optimizer step, its gradient accumulated over
        micro-batches of `micro` rows and normalized by that mini-batch's totals. A non-finite loss or
        gradient stops the run or, with skip_nonfinite, skips the rest of the step's updates (counted)."""
        c = self.config
        mask = rollout.completion_mask  # (N, T)
        update = Update.buffers(mask, exact=ref_logsm is not None)  # filled by the passes, the last one's
        inputs = UpdateInputs(rollout, temperatures, fixed, entropy_coef, ref_logsm)
        minis = mini_batches(groups, len(mask), c.num_mini_batches)
        for rows, mini_groups in (m for _ in range(c.num_iterations) for m in minis):
            t0 = time.perf_counter()
            self.optimizer.zero_grad(set_to_none=True)
            totals = self.objective.totals(fixed.mask[rows], mini_groups)  # this mini-batch's normalizers
            loss_sum = 0.0
            for chunk in micro_batches(len(rows), micro):
                loss_sum += self._backward(inputs, rows[chunk], totals, update)
            t1 = time.perf_counter()
            max_norm = c.max_grad_norm if c.max_grad_norm > 0 else math.inf
            norm = torch.nn.utils.clip_grad_norm_(self.params, max_norm)
            if not self._finite(loss_sum, norm):
                break
            self.optimizer.step()
            update.losses.append(loss_sum)
            update.grad_norms.append(float(norm))
            update.t_forward_backward += t1 - t0
            update.t_optimizer += time.perf_counter() - t1
        return update

    def _backward(self, inputs: "UpdateInputs", rows: Tensor, totals: BatchTotals, update: Update) -> float:
        """Forward and backward of one micro-batch (rows); its log-probs and entropies go to `update`.
        Returns its loss."""
        rollout, temperatures, entropy_coef = inputs.rollout, inputs.temperatures, inputs.entropy_coef
        with autocast(self.device):
            stats = completion_logprobs(
                self.model,
                rollout.select(rows),
                temperatures[rows],
                scale=self.tau() if self.tau is not None else None,  # the trainable temperature's gradient
                entropy="grad" if entropy_coef else "value",  # a gradient only for the bonus
                keep_logits=update.exact_kl is not None,  # (n, T, V) for the exact KL, small vocabularies
            )
        logp, entropy, logits = stats.logp, stats.entropy, stats.logits  # (n, T), (n, T), (n, T, V)
        assert entropy is not None  # it was asked for
        loss = self.objective.loss(
            logp, entropy, inputs.fixed.select(rows), totals, self.kl_ctl.coef, entropy_coef
        )
        loss.backward()
        update.logp[rows] = logp.detach()
        update.entropy[rows] = entropy.detach()
        if update.exact_kl is not None and inputs.ref_logsm is not None and logits is not None:
            update.exact_kl[rows] = exact_kl(logits.detach(), inputs.ref_logsm[rows])
        return loss.item()

    def _finite(self, loss: float, grad_norm: Tensor) -> bool:
        """Whether the optimizer step may be taken. A non-finite loss or gradient norm stops the run, or
        with skip_nonfinite is counted and its gradient dropped, so the weights never see it."""
        if math.isfinite(loss) and torch.isfinite(grad_norm):
            return True
        quantity = "loss" if not math.isfinite(loss) else "gradient norm"
        if not self.config.skip_nonfinite:
            raise FloatingPointError(
                f"non-finite {quantity} at step {self.step_index}; the weights were not updated "
                "(set skip_nonfinite=true to skip and count such steps instead)"
            )
        self.optimizer.zero_grad(set_to_none=True)
        self.skipped += 1
        return False

    def _log(self, step: int, row: dict, batch: Batch, rewards: Tensor) -> None:
        """Hand the row to the callbacks and the run log; example completions and the checkpoint
        when due."""
        c = self.config
        self.rows.append(row)
        for callback in self.callbacks:
            callback.on_step(step, row)
        if self.writer is not None and self.out is not None:
            self.writer.log(row)
            if step % c.samples_every == 0:
                self.writer.samples(step, examples(batch, rewards)[: c.samples_per_log])
            if c.checkpoint_every and (step + 1) % c.checkpoint_every == 0:
                rng = checkpoint.rng_states(self.generator, self.fault_gen)
                state = {"step": step + 1, "config": c.to_dict(), "rng": rng, "skipped": self.skipped}
                checkpoint.save(self.out, {**state, **checkpoint.states(self._stateful())})
        self.bar.update(1)
        self.bar.set_postfix(reward=f"{row['reward']:.3f}", kl=f"{row.get('kl', 0.0):.4f}")

    def _finish(self) -> None:
        """The final validation row, the summary (with `findings` when given), and the end of the run log."""
        c = self.config
        self.bar.close()
        with autocast(self.device):
            final = {"step": c.steps, **self.validate()}
        self.rows.append(final)
        metrics = self.metrics
        summary = summarize(metrics, self.model)
        if self.findings is not None:
            summary["findings"] = self.findings(metrics, c.to_dict())
        for callback in self.callbacks:
            callback.on_step(c.steps, final)
            callback.on_end(summary)
        if self.writer is not None:
            self.writer.log(final)
            self.writer.finish(summary)
        self.finished = True


def examples(batch: Batch, rewards: Tensor) -> list[dict]:
    """The batch's completions as samples.jsonl records, with their shaped rewards (N,)."""
    scored = batch.scored
    shown = zip(scored.prompts, scored.completions, rewards.tolist(), scored.rollout.truncated.tolist())
    return [{"prompt": p, "completion": s, "reward": r, "truncated": t} for p, s, r, t in shown]


def train(
    config: Config,
    out: str | Path | None = None,
    callbacks: Sequence[Callback] = (),
    resume: bool = False,
    findings: Findings | None = None,
) -> pd.DataFrame:
    """Train with GRPO (or any variant the config composes); return the metrics, one row per step.
    With `out`, the run is also written there (config.json, metrics.jsonl, samples.jsonl, summary.json,
    and checkpoint.pt every `checkpoint_every` steps). `resume` continues an interrupted run from its
    last checkpoint and gives the same metrics, step for step, as an uninterrupted run.
    Each callback's `on_step(step, row)` sees every logged row as it is written (live tracking);
    `findings` fills the summary's `findings` (`analysis.diagnostics.summary_findings`).
    `Trainer` is the same run one step at a time, with live changes between steps."""
    return Trainer(config, out, callbacks, resume, findings).run()


def summarize(metrics: pd.DataFrame, model: torch.nn.Module) -> dict:
    """Start and end of the validation curve, speed and size: the run's summary.json."""
    val = metrics.dropna(subset=["val/accuracy"])
    train_rows = metrics.dropna(subset=["reward"])
    return {
        "steps": int(train_rows["step"].max() + 1) if len(train_rows) else 0,
        "val/accuracy_start": float(val["val/accuracy"].iloc[0]),
        "val/accuracy_end": float(val["val/accuracy"].iloc[-1]),
        "val/reward_start": float(val["val/reward"].iloc[0]),
        "val/reward_end": float(val["val/reward"].iloc[-1]),
        "reward_mean": float(train_rows["reward"].mean()),
        "time/step_s_mean": float(train_rows["time/step_s"].mean()),
        "params": sum(p.numel() for p in model.parameters()),
        "trainable_params": sum(p.numel() for p in model.parameters() if p.requires_grad),
    }
