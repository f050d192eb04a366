"""The GRPO training loop, top to bottom like the algorithm (`Trainer.step`):
sample -> score -> fixed log-probs (old, reference) -> advantages -> update (micro-batched) -> log.
Every variant enters through `Objective`, composed from the config (again after a live change).
`Trainer` advances one step at a time and takes live changes between steps; `train` runs it through."""

import collections
import contextlib
import copy
import dataclasses
import functools
import json
import math
import resource
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import pandas as pd
import torch
from torch import Tensor
from tqdm.auto import tqdm

from grpo_lab import checkpoint, faults
from grpo_lab.analysis.diagnostics import diagnose, diversity
from grpo_lab.compose import Objective, StepTensors
from grpo_lab.config import Config, field_names
from grpo_lab.evaluation import decode, encode_prompts, evaluate
from grpo_lab.models.loading import Policy, load_policy
from grpo_lab.models.logprobs import completion_logits, logprobs_and_entropy, token_logprobs
from grpo_lab.models.sampler import Rollout, concat, sample
from grpo_lab.objective import BatchTotals, exact_kl, masked_mean
from grpo_lab.objective.groups import Groups, padded
from grpo_lab.rewards import score
from grpo_lab.runlog import RunWriter, environment, read_config, read_jsonl, read_metrics, write_text_atomic
from grpo_lab.tasks import Task, make_task
from grpo_lab.tricks import (
    EntropyController,
    KLController,
    KLScheduleParams,
    LearnableTemperature,
    group_temperatures,
    shape_length,
    still_uniform,
    zero_variance_groups,
)


class Callback(Protocol):
    """Receives the run log live: every row as it is logged, then the summary."""

    def on_step(self, step: int, row: dict) -> None: ...

    def on_end(self, summary: dict) -> None: ...


EXACT_KL_MAX_VOCAB = 4096
"""the exact per-token KL sums over the vocabulary: logged only for vocabularies up to this size"""


def pick_device(name: str) -> torch.device:
    """The device to train on; on CUDA, float32 matmuls may use TF32 (what bf16 autocast leaves in fp32)."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' was asked for but torch sees no CUDA device; use 'auto' or 'cpu'")
    if name == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return torch.device(name)


def autocast(device: torch.device) -> contextlib.AbstractContextManager:
    """bf16 autocast on CUDA; full precision on CPU."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def micro_batches(n: int, size: int) -> list[Tensor]:
    size = size or n
    return [torch.arange(i, min(i + size, n)) for i in range(0, n, size)]


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
    own temperature (N,), and optionally their log-softmax (N, T, V) for the exact KL."""
    logps, logsm = [], []
    for rows in chunks:
        logits = completion_logits(model, rollout.select(rows), temperatures[rows])  # (n, T, V)
        logps.append(token_logprobs(logits, rollout.completion_ids[rows]))
        if keep_logits:
            logsm.append(torch.log_softmax(logits, dim=-1))
    return torch.cat(logps), (torch.cat(logsm) if keep_logits else None)


def token_credit(
    task: Task, completions: list[str], answers: list[str], t: int, policy: Policy
) -> Tensor | None:
    """The task's per-character credit as per-token rewards (N, T) on the policy's device; character
    tokenizers only."""
    if task.token_credit is None:
        return None
    if len(policy.tokenizer) > 256:
        raise ValueError("token-level task credit needs the embedded character tokenizer")
    rows = [(task.token_credit(c, a) + [0.0] * t)[:t] for c, a in zip(completions, answers)]
    return torch.tensor(rows, device=next(policy.model.parameters()).device)


def group_stats(rewards: Tensor, groups: Groups) -> dict[str, float]:
    """TRL's reward metrics: `reward`, `reward_std` (mean within-group unbiased std),
    `frac_reward_zero_std`; groups may be ragged."""
    g, m = padded(rewards.nan_to_num(0.0), groups)  # (B, G)
    n = m.sum(-1)  # (B,)
    mean = masked_mean(g, m, dim=-1)  # (B,)
    std = (((g - mean[:, None]) ** 2 * m).sum(-1) / (n - 1).clamp(min=1)).sqrt()  # (B,) 0 for G = 1
    return {
        "reward": float(rewards.nanmean()),
        "reward_std": float(std.mean()),
        "frac_reward_zero_std": float(torch.isclose(std, torch.zeros_like(std)).float().mean()),
    }


@dataclasses.dataclass
class Scored:
    """Sampled completions with their rewards (one or several sampling rounds), in groups: the rows
    of one prompt are contiguous, `group_sizes` says how many each prompt has."""

    rollout: Rollout
    rewards: Tensor
    """(N,) weighted sum of the reward functions"""
    per_func: dict[str, Tensor]
    """each reward function's raw values (N,)"""
    completions: list[str]
    prompts: list[str]
    answers: list[str]
    group_sizes: Tensor
    """(B,) completions of each prompt"""
    temperatures: Tensor
    """(N,) the temperature each completion was sampled at (one per group with temperature noise)"""
    sampled_tokens: int
    """completion tokens generated, kept or not (the sampling cost)"""
    dropped_groups: int = 0
    fault_stats: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def groups(self) -> Groups:
        """The group layout for the objective: one int when every group has the same size (the
        equal-groups code path), else the sizes (B,)."""
        sizes = self.group_sizes
        return int(sizes[0]) if bool((sizes == sizes[0]).all()) else sizes

    def take(self, rows: Tensor, group_sizes: Tensor) -> "Scored":
        """These rows, in this order, forming groups of these sizes."""
        idx = rows.tolist()
        return Scored(
            self.rollout.select(rows),
            self.rewards[rows],
            {k: v[rows] for k, v in self.per_func.items()},
            [self.completions[i] for i in idx],
            [self.prompts[i] for i in idx],
            [self.answers[i] for i in idx],
            group_sizes,
            self.temperatures[rows],
            self.sampled_tokens,
            self.dropped_groups,
            self.fault_stats,
        )

    def keep_groups(self, keep: Tensor) -> "Scored":
        """Only the groups flagged in `keep` (B,); the others are counted as dropped."""
        keep = keep.cpu()  # (B,) like the group sizes
        kept = self.take(
            keep.repeat_interleave(self.group_sizes).nonzero().squeeze(-1), self.group_sizes[keep]
        )
        kept.dropped_groups = self.dropped_groups + int((~keep).sum())
        return kept

    def heads(self, k: int) -> "Scored":
        """The first k completions of every group (no group is smaller than k)."""
        starts = self.group_sizes.cumsum(0) - self.group_sizes  # (B,)
        rows = (starts[:, None] + torch.arange(k)).flatten()  # (B * k,)
        return self.take(rows, torch.full_like(self.group_sizes, k))

    def first_groups(self, k: int) -> "Scored":
        """The first k groups (all of them when there are fewer)."""
        sizes = self.group_sizes[:k]
        return self.take(torch.arange(int(sizes.sum())), sizes)

    def regroup(self, prompt_of: Tensor, num_prompts: int) -> "Scored":
        """Rows reordered so each prompt's are contiguous (prompt order, then sampling order), given
        each row's prompt index (N,): how extra completions join their prompt's group."""
        order = torch.argsort(prompt_of, stable=True)  # (N,)
        return self.take(order, torch.bincount(prompt_of, minlength=num_prompts))

    @staticmethod
    def merge(parts: list["Scored"], pad_id: int) -> "Scored":
        return Scored(
            concat([p.rollout for p in parts], pad_id),
            torch.cat([p.rewards for p in parts]),
            {k: torch.cat([p.per_func[k] for p in parts]) for k in parts[0].per_func},
            [x for p in parts for x in p.completions],
            [x for p in parts for x in p.prompts],
            [x for p in parts for x in p.answers],
            torch.cat([p.group_sizes for p in parts]),
            torch.cat([p.temperatures for p in parts]),
            sum(p.sampled_tokens for p in parts),
            sum(p.dropped_groups for p in parts),
            parts[0].fault_stats,
        )


def sample_and_score(
    sampler_model: torch.nn.Module,
    model: torch.nn.Module,
    tok,
    task: Task,
    examples: list,
    c: Config,
    group_size: int,
    temperature: float,
    prompt_temps: Tensor | None,
    reward_funcs: list,
    reward_weights: tuple[float, ...],
    generator: torch.Generator,
    fault_gen: torch.Generator,
    device: torch.device,
) -> Scored:
    """Sample `group_size` completions for each prompt (KV-cached, at `temperature` or at each
    prompt's own `prompt_temps` (B,)) and score them with the reward functions, prompts repeated
    per completion. Fault injectors, when switched on, act here: forced lengths, repeats and junk
    before scoring, reward noise after (on their own generator, so switching them never changes the
    sampling). In a group smaller than fault_repeat_k + 1 (a dynamic group size round), all but
    one completion are repeats."""
    prompt_ids, prompt_mask = encode_prompts(tok, [ex.prompt for ex in examples], device)
    n = len(examples) * group_size
    if prompt_temps is not None:
        temps = prompt_temps.to(device, torch.float32).repeat_interleave(group_size)  # (N,)
    else:
        temps = torch.full((n,), temperature, device=device)  # (N,)
    forced = faults.select_rows(n, c.fault_long_frac, fault_gen).to(device) if c.fault_long_frac else None
    sampler_model.eval()
    with autocast(device):
        rollout = sample(sampler_model, prompt_ids, prompt_mask, group_size, c.max_completion_length, temps,
                         tok.eos_token_id, tok.pad_token_id, generator, suppress_eos=forced)  # fmt: skip
    model.train()
    stats = {"fault/long_frac": float(forced.float().mean())} if forced is not None else {}
    if c.fault_repeat_k:
        (ids, mask, logp, truncated), fs = faults.repeat_samples(
            rollout.completion_ids, rollout.completion_mask, rollout.sampler_logp, rollout.truncated,
            group_size, min(c.fault_repeat_k, group_size - 1), fault_gen,
        )  # fmt: skip
        rollout = dataclasses.replace(
            rollout, completion_ids=ids, completion_mask=mask, sampler_logp=logp, truncated=truncated
        )
        stats.update(fs)
    if c.fault_junk_frac:
        rollout, fs = pad_with_junk(rollout, model, tok, c, temps, fault_gen, device)
        stats.update(fs)
    prompts = [ex.prompt for ex in examples for _ in range(group_size)]
    answers = [ex.answer for ex in examples for _ in range(group_size)]
    completions = decode(tok, rollout.completion_ids, rollout.completion_mask)
    rewards, per_func = score(reward_funcs, reward_weights, prompts, completions, answer=answers)  # (N,)
    rewards, per_func = (
        rewards.to(device),
        {k: v.to(device) for k, v in per_func.items()},
    )  # next to the masks
    if c.fault_reward_sigma or c.fault_reward_flip:
        low, high = task.reward_range
        rewards, fs = faults.reward_noise(rewards, group_size, c.fault_reward_sigma, c.fault_reward_flip,
                                          c.fault_group_fraction, low, high, fault_gen)  # fmt: skip
        stats.update(fs)
    tokens = int(rollout.completion_mask.sum())
    sizes = torch.full((len(examples),), group_size, dtype=torch.long)
    return Scored(
        rollout, rewards, per_func, completions, prompts, answers, sizes, temps, tokens, fault_stats=stats
    )


@torch.no_grad()
def pad_with_junk(
    rollout: Rollout, model: torch.nn.Module, tok, c: Config, temperatures: Tensor, fault_gen, device
) -> tuple[Rollout, dict[str, float]]:
    """Fault: pad a fraction of completions with junk tokens up to the maximum length; the junk's
    sampler log-probs are those of the policy (it never sampled them)."""
    rows = faults.select_rows(len(rollout.truncated), c.fault_junk_frac, fault_gen).to(device)  # (N,)
    junk_ids = torch.tensor([i for i in range(len(tok)) if i not in tok.all_special_ids], device=device)
    (ids, mask, truncated), stats = faults.junk_padding(
        rollout.completion_ids, rollout.completion_mask, rollout.truncated, rows, c.max_completion_length,
        junk_ids, tok.eos_token_id, tok.pad_token_id, fault_gen,
    )  # fmt: skip
    width = ids.shape[1] - rollout.sampler_logp.shape[1]
    logp = torch.nn.functional.pad(rollout.sampler_logp, (0, width))  # (N, T')
    rollout = dataclasses.replace(rollout, completion_ids=ids, completion_mask=mask, sampler_logp=logp,
                                  truncated=truncated)  # fmt: skip
    idx = rows.nonzero().squeeze(-1)
    if len(idx):
        logits = completion_logits(model, rollout.select(idx), temperatures[idx])  # (n, T', V)
        logp[idx] = token_logprobs(logits, ids[idx]) * mask[idx]
    return rollout, stats


class Sampler:
    """Which weights sample: the policy itself or, under fault injection, the policy of k updates
    ago (asynchronous lag) or a lower-precision copy (sampler-trainer mismatch)."""

    def __init__(self, policy: torch.nn.Module, stale_k: int, dtype: str) -> None:
        self.copy = None
        if stale_k or dtype != "none":
            self.copy = copy.deepcopy(policy).eval().requires_grad_(False)
        if dtype != "none":
            self.copy.to(getattr(torch, dtype))
        self.history: collections.deque = collections.deque(maxlen=stale_k + 1)
        self.stale = stale_k > 0

    def weights(self, policy: torch.nn.Module) -> torch.nn.Module:
        """The model to sample this step with (call once per step, before its update)."""
        if self.copy is None:
            return policy
        state = policy.state_dict()
        if self.stale:  # the oldest kept state is the policy of k updates ago (or the first, early on)
            self.history.append({k: v.detach().clone() for k, v in state.items()})
            state = self.history[0]
        self.copy.load_state_dict(state)  # casts to the copy's precision
        return self.copy


def gradient_cosines(
    model: torch.nn.Module,
    params: list[torch.nn.Parameter],
    rollout: Rollout,
    chunks: list[Tensor],
    temperatures: Tensor,
    objective: Objective,
    fixed: StepTensors,
    totals: BatchTotals,
    parts: dict[str, tuple[Tensor, float, float]],
) -> dict[str, float]:
    """Cosine between the gradients of loss components computed alone; `parts` maps a component to
    (advantages (N, T), KL coefficient, entropy coefficient). Leaves no gradient behind."""
    grads = {}
    for name, (adv, kl_coef, entropy_coef) in parts.items():
        model.zero_grad(set_to_none=True)
        alone = dataclasses.replace(
            fixed, adv=adv, ref_logp=fixed.ref_logp if kl_coef else None, prev_logp=None
        )
        for rows in chunks:
            logits = completion_logits(model, rollout.select(rows), temperatures[rows])  # (n, T, V)
            logp, entropy = logprobs_and_entropy(logits, rollout.completion_ids[rows])
            entropy = entropy if entropy_coef else entropy.detach()
            objective.loss(logp, entropy, alone.select(rows), totals, kl_coef, entropy_coef).backward()
        grads[name] = torch.cat(
            [p.grad.flatten() if p.grad is not None else p.new_zeros(p.numel()) for p in params]
        )
    model.zero_grad(set_to_none=True)
    names = list(grads)
    return {
        f"grad_cos/{a}__{b}": float(torch.nn.functional.cosine_similarity(grads[a], grads[b], dim=0))
        for i, a in enumerate(names)
        for b in names[i + 1 :]
    }


def peak_memory_mb(device: torch.device) -> float:
    """Peak memory so far: CUDA's allocator peak on GPU, the process's peak RSS on CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


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

EVENTS = "events.jsonl"
"""the run directory's record of live reconfigurations: one JSON object per change, with its step"""


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


@dataclasses.dataclass
class Growth:
    """What dynamic group size did in one step (summed over its rounds of new prompts)."""

    prompts: int = 0
    """prompts sampled"""
    grown: int = 0
    """prompts whose first group had all-equal rewards and got extra completions"""
    rescued: int = 0
    """grown prompts whose extra completions brought a reward that differs"""
    rounds: int = 0
    """rounds of extra completions"""
    extra_completions: int = 0
    """completions sampled beyond group_size per prompt"""
    extra_tokens: int = 0
    """completion tokens of those (the extra sampling cost)"""

    def stats(self, group_sizes: Tensor) -> dict[str, float]:
        """`group_size/*` metrics, with the group sizes of the batch trained on (B,)."""
        sizes = group_sizes.float()
        return {
            "group_size/mean": float(sizes.mean()),
            "group_size/min": float(sizes.min()),
            "group_size/max": float(sizes.max()),
            "group_size/grown_frac": self.grown / max(self.prompts, 1),
            "group_size/rescued_frac": self.rescued / self.grown if self.grown else math.nan,
            "group_size/rounds": float(self.rounds),
            "group_size/extra_completions": float(self.extra_completions),
            "group_size/extra_tokens": float(self.extra_tokens),
        }


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

    `config` is the current config (the starting one with every live change applied), `kl_coef` the
    KL coefficient of the next step, `events` every live change as {"step", "event", "changes":
    {field: [old, new]}}, `metrics` the rows so far."""

    def __init__(
        self,
        config: Config,
        out: str | Path | None = None,
        callbacks: Sequence[Callback] = (),
        resume: bool = False,
    ) -> None:
        c = config
        if resume and out is None:
            raise ValueError("resume needs the run directory (out) of the interrupted run")
        saved = checkpoint.load(out) if resume else None
        if saved is not None and read_config(out) != c.to_dict():
            differ = sorted(k for k, v in read_config(out).items() if c.to_dict().get(k) != v)
            raise ValueError(f"cannot resume {out}: its config differs from this one in {differ}")
        if c.torch_threads:
            torch.set_num_threads(c.torch_threads)
        torch.manual_seed(c.seed)
        self.config = c
        self.out = Path(out) if out is not None else None
        self.callbacks = list(callbacks)
        self.device = device = pick_device(c.device)
        self.task = task = make_task(c.task, c.task_digits or None, c.rewards, c.model)
        self.objective = Objective(c)
        reward_names = c.rewards or task.default_rewards
        missing = [n for n in reward_names if n not in task.rewards]
        if missing:
            raise ValueError(f"task {c.task!r} has no reward {missing}; valid: {', '.join(task.rewards)}")
        self.reward_funcs = [(n, task.rewards[n]) for n in reward_names]
        self.reward_weights = c.reward_weights or (1.0,) * len(reward_names)
        if c.token_adv_mix > 0 and task.token_credit is None and not self.objective.kl_in_reward:
            raise ValueError(
                "token_adv_mix > 0 needs token-level rewards: "
                "task 'arith' (per-digit credit) or kl_placement='reward'"
            )
        self.policy = load_policy(
            c.model, c.task, c.task_digits or None, device, c.lora, c.lora_r, c.lora_alpha, c.uses_reference
        )
        self.model, self.tok = self.policy.model, self.policy.tokenizer
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        param_groups = [{"params": self.params}]
        self.tau = LearnableTemperature().to(device) if c.learnable_temperature else None
        if self.tau is not None:
            param_groups.append(
                {"params": list(self.tau.parameters()), "lr": c.temperature_lr, "weight_decay": 0.0}
            )
        # the fused kernel updates every tensor in one pass (on CPU the default loops per parameter)
        self.optimizer = torch.optim.AdamW(
            param_groups, lr=c.learning_rate, weight_decay=c.weight_decay, fused=True
        )
        self.prev_model = (
            copy.deepcopy(self.model).eval().requires_grad_(False) if c.kl_prev_coef > 0 else None
        )
        self.kl_ctl = KLController(c.kl_coef, c.kl_schedule, KLScheduleParams(
            c.kl_coef, c.kl_coef_final, c.kl_target, c.kl_growth, c.kl_horizon, c.batch_size))  # fmt: skip
        self.ent_ctl = EntropyController(
            c.entropy_coef, c.entropy_target, c.entropy_coef_delta, c.entropy_coef_max
        )
        self.generator = torch.Generator(device).manual_seed(c.seed)
        self.fault_gen = torch.Generator().manual_seed(c.seed + 1)  # faults never shift the sampler's stream
        self.sampler = Sampler(self.model, c.fault_stale_k, c.fault_sampler_dtype)
        self.skipped, self.step_index = 0, 0
        if saved is not None:  # continue exactly where the checkpoint was taken, live changes included
            if saved.get("config", c.to_dict()) != c.to_dict():
                self._apply(Config.from_dict(saved["config"]))
            self.model.load_state_dict(saved["model"])
            self.optimizer.load_state_dict(saved["optimizer"])
            if self.tau is not None:
                self.tau.load_state_dict(saved["tau"])
            if self.prev_model is not None:
                self.prev_model.load_state_dict(saved["prev_model"])
            self.sampler.history.extend(saved["sampler_history"])
            self.kl_ctl.coef, self.kl_ctl.triggered = saved["kl_ctl"]
            if "kl_params" in saved:
                self.kl_ctl.params = KLScheduleParams(**saved["kl_params"])
            self.ent_ctl.coef, self.ent_ctl.active = saved["ent_ctl"]
            checkpoint.restore_rng_states(saved["rng"], self.generator, self.fault_gen)
            self.skipped, self.step_index = saved["skipped"], saved["step"]
        start = self.step_index
        env = environment(str(device))
        self.writer = (
            RunWriter(out, c.to_dict(), env, resume_from=start if resume else None)
            if out is not None
            else None
        )
        self.events: list[dict] = []
        if self.writer is not None and (self.out / EVENTS).exists():  # keep what happened before `start`
            self.events = [e for e in read_jsonl(self.out / EVENTS) if resume and e["step"] < start]
            write_text_atomic(self.out / EVENTS, "".join(json.dumps(e) + "\n" for e in self.events))
        val_set = task.validation(c.val_size)
        self.validate = functools.partial(
            evaluate, self.model, self.tok, task, val_set, c.max_completion_length, reward_names,
            self.reward_weights,
        )  # fmt: skip
        self.exact = len(self.tok) <= EXACT_KL_MAX_VOCAB
        rows: list[dict] = read_metrics(out).to_dict("records") if start else []
        self.rows = [{k: v for k, v in r.items() if v == v} for r in rows]  # drop NaN fill of absent metrics
        self.finished = False
        self.bar = tqdm(total=c.steps, initial=start, desc=f"{c.preset} seed {c.seed}",
                        disable=not c.progress, leave=False)  # fmt: skip

    @property
    def done(self) -> bool:
        """Whether every training step of the config has been taken."""
        return self.step_index >= self.config.steps

    @property
    def kl_coef(self) -> float:
        """The KL coefficient the next step uses (the schedule's current value)."""
        return self.kl_ctl.coef

    @property
    def metrics(self) -> pd.DataFrame:
        """The rows logged so far, one per step (and the final validation row once finished)."""
        return pd.DataFrame(self.rows)

    def step(self) -> dict:
        """One training step: validation when due, then sample, score, fixed log-probs, advantages,
        update, controllers, log. Returns the logged row."""
        if self.done:
            raise RuntimeError(
                f"the run is done: all {self.config.steps} steps are taken; run() writes its summary"
            )
        c, step, model, device = self.config, self.step_index, self.model, self.device
        objective, kl_ctl, ent_ctl, tau = self.objective, self.kl_ctl, self.ent_ctl, self.tau
        row: dict = {"step": step}
        if step % c.eval_every == 0:
            with autocast(device):
                row.update(self.validate())
        t_step = time.perf_counter()  # validation is not part of the step's cost
        tau_now = tau().item() if tau is not None else 1.0
        temperature = c.temperature * tau_now

        # 1. sample G completions per prompt and score them (TRL reward signature); with dynamic
        #    group size, prompts whose rewards are all equal get more (ragged groups); with dynamic
        #    sampling, groups whose rewards are still all equal are dropped and refilled from new prompts
        scored, rounds, growth = self._sample(step, temperature)
        rollout, per_func, completions, groups = (
            scored.rollout,
            scored.per_func,
            scored.completions,
            scored.groups,
        )
        lengths = rollout.lengths  # (N,)
        # each row's temperature without the learned factor: the trainer divides by that factor itself
        base_temps = scored.temperatures / tau_now  # (N,)
        rewards, length_stats = shape_length(
            scored.rewards, lengths, c.max_completion_length, c.length_penalty, c.length_norm_ref,
            c.overlong_buffer, c.overlong_factor,
        )  # fmt: skip
        mask = rollout.completion_mask  # (N, T) tokens the policy produced
        loss_mask = mask * (~rollout.truncated)[:, None] if c.mask_truncated else mask  # (N, T)
        t_sample = time.perf_counter()

        # 2. log-probs that stay fixed during the updates: old policy (only when it can differ from
        #    the current one or is needed now), reference (only when the KL uses it) and the previous
        #    step's policy (two-layer KL)
        chunks = micro_batches(len(rollout.truncated), c.micro_batch_size)
        old_logp = ref_logp = ref_logsm = prev_logp = None
        with autocast(device):
            if c.fault_stale_k:  # an asynchronous trainer only has the behaviour policy's log-probs
                old_logp = rollout.sampler_logp  # (N, T)
            elif objective.needs_old_logp:
                old_logp, _ = fixed_logprobs(model, rollout, chunks, scored.temperatures, keep_logits=False)
            if c.uses_reference:
                with self.policy.as_reference() as ref:
                    ref_logp, ref_logsm = fixed_logprobs(
                        ref, rollout, chunks, base_temps, keep_logits=self.exact
                    )  # (N, T)
            if self.prev_model is not None:
                prev_logp, _ = fixed_logprobs(
                    self.prev_model, rollout, chunks, scored.temperatures, keep_logits=False
                )
                self.prev_model.load_state_dict(model.state_dict())  # next step's "previous" is this policy
        t_logprob = time.perf_counter()

        # 3. advantages (KL may be folded into the reward first), tricks on them, sequence weights,
        #    sampler importance correction
        kl_reward = (
            objective.reward_kl(old_logp, ref_logp, mask, kl_ctl.coef) if objective.kl_in_reward else None
        )
        credit = (
            token_credit(self.task, completions, scored.answers, mask.shape[1], self.policy)
            if c.token_adv_mix > 0
            else None
        )
        adv, adv_stats = objective.advantages(rewards, lengths, mask, kl_reward, credit, groups)  # (N, T)
        seq_w = objective.sequence_weights(
            lengths, rewards, groups
        )  # (N,) with ragged groups: every prompt weighs the same
        is_w, is_stats = torch.ones_like(mask), {}  # (N, T)
        if old_logp is not None:
            is_w, is_stats = objective.correction(old_logp, rollout.sampler_logp, mask)
        fixed = StepTensors(adv, loss_mask, seq_w, is_w, old_logp, ref_logp, prev_logp)
        entropy_coef = ent_ctl.coef if ent_ctl.active else 0.0
        if c.grad_cos_every and step % c.grad_cos_every == 0:  # diagnostic: do the loss terms pull apart?
            totals = objective.totals(loss_mask, groups)  # whole-batch normalizers
            parts = {}
            for name, weight in zip(per_func, self.reward_weights):
                parts[f"policy:{name}"] = (
                    objective.advantages(weight * per_func[name], lengths, mask, None, None, groups)[0],
                    0,
                    0,
                )
            if c.length_penalty or c.length_norm_ref or c.overlong_buffer:
                length_adv = objective.advantages(
                    rewards - scored.rewards, lengths, mask, None, None, groups
                )[0]
                parts["length"] = (length_adv, 0.0, 0.0)
            if objective.kl_in_loss:
                parts["kl"] = (torch.zeros_like(adv), kl_ctl.coef, 0.0)
            if entropy_coef:
                parts["entropy"] = (torch.zeros_like(adv), 0.0, entropy_coef)
            row.update(gradient_cosines(
                model, self.params, rollout, chunks, scored.temperatures, objective, fixed, totals, parts
            ))  # fmt: skip

        # 4. update: num_iterations passes over the batch in num_mini_batches optimizer steps each,
        #    micro-batched with gradient accumulation; each mini-batch's normalizers are its own, so
        #    the gradient does not depend on the micro-batch size
        update = self._update(rollout, base_temps, fixed, groups, entropy_coef, ref_logsm)
        t_train = time.perf_counter()
        if old_logp is None:  # one on-policy update: the policy just evaluated is the sampler's trainer twin
            _, is_stats = objective.correction(update.logp, rollout.sampler_logp, mask)

        # 5. controllers see this step's measurements and set the next step's coefficients
        old_for_stats = old_logp if old_logp is not None else update.logp
        row.update(objective.stats(update.logp, old_for_stats, ref_logp, adv, mask, update.entropy))
        row["kl/coef"] = kl_ctl.coef
        if ref_logp is not None:
            kl_ctl.update(row["kl"], step, c.steps)
        entropy_now = float(masked_mean(update.entropy, mask))
        row["entropy/coef"] = entropy_coef
        ent_ctl.update(entropy_now)

        # 6. log: TRL's names where TRL has one, namespaces otherwise
        row.update(group_stats(rewards, groups))
        for name, values in per_func.items():
            row[f"rewards/{name}/mean"] = float(values.nanmean())
            row[f"rewards/{name}/std"] = (
                float(values[~values.isnan()].std()) if (~values.isnan()).sum() > 1 else 0.0
            )
        if update.exact_kl is not None:
            row["kl/exact"] = float(masked_mean(update.exact_kl, mask))
        if prev_logp is not None:
            row["kl/prev"] = float(masked_mean(objective.kl_prev_fn(update.logp, prev_logp), mask))
        if kl_reward is not None:
            row["kl_reward/mean"] = float((kl_reward * mask).sum(-1).mean())
        row.update({k: float(v) for k, v in is_stats.items()})
        row.update(length_stats)
        row.update(adv_stats)
        row.update(scored.fault_stats)
        row["sampling/kl_sampler_trainer"] = float(masked_mean(rollout.sampler_logp - old_for_stats, mask))
        if c.skip_nonfinite:
            row["nonfinite/skipped_steps"] = self.skipped
        if c.diversity_every and step % c.diversity_every == 0:  # over each prompt's first group_size
            row.update(diversity(scored.heads(c.group_size).completions, c.group_size))
        terminated = lengths[~rollout.truncated]
        fixed_passes = (old_logp, ref_logp, prev_logp)
        losses, grad_norms = update.losses, update.grad_norms
        row.update({
            "entropy": entropy_now,
            "completions/mean_length": float(lengths.mean()),
            "completions/min_length": float(lengths.min()),
            "completions/max_length": float(lengths.max()),
            "completions/clipped_ratio": float(rollout.truncated.float().mean()),
            "completions/mean_terminated_length": float(terminated.mean()) if len(terminated) else 0.0,
            "advantages/mean": float(masked_mean(adv, mask)),
            "advantages/abs_mean": float(masked_mean(adv.abs(), mask)),
            "loss": sum(losses) / len(losses) if losses else math.nan,
            "grad_norm": sum(grad_norms) / len(grad_norms) if grad_norms else math.nan,
            "learning_rate": self.optimizer.param_groups[0]["lr"],
            "sampling/temperature": temperature,
            "sampling/temperature_std": float(scored.temperatures.std()) if len(lengths) > 1 else 0.0,
            "sampling/rounds": rounds,
            "sampling/dropped_groups": scored.dropped_groups,
            "sampling/completions": len(rollout.truncated),
            "time/sample_s": t_sample - t_step,
            "time/logprob_s": t_logprob - t_sample,
            "time/forward_backward_s": update.t_forward_backward,
            "time/optimizer_s": update.t_optimizer,
            "time/train_s": t_train - t_logprob,
            "time/step_s": time.perf_counter() - t_step,
            "cost/forward_passes": c.num_iterations + sum(x is not None for x in fixed_passes),
            "cost/backward_passes": c.num_iterations,
            "cost/optimizer_steps": len(losses),
            "cost/sampled_tokens": float(scored.sampled_tokens),
            "cost/peak_rss_mb": peak_memory_mb(device),
        })  # fmt: skip
        if c.dynamic_group_size:
            row.update(growth.stats(scored.group_sizes))
        if tau is not None:
            row["temperature/learned"] = tau().item()
        self._log(step, row, scored, rewards)
        self.step_index = step + 1
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
        nothing. A kl_coef set live is the coefficient of the next step whatever the schedule; the
        schedule continues from it (a linear one then runs from it to kl_coef_final over the steps
        left). Switching the KL on in a run started without it loads the reference: the weights the
        run started from, as if the KL had been on from the start. Returns the new config."""
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
        diff = {k: [getattr(self.config, k), getattr(new, k)] for k in changes}
        diff = {k: v for k, v in diff.items() if v[0] != v[1]}
        if not diff:
            return self.config
        self._apply(new)
        if "kl_coef" in diff:  # the next step uses it; the schedule restarts from it
            self.kl_ctl.coef = new.kl_coef
            self.kl_ctl.params = dataclasses.replace(
                self.kl_ctl.params, initial=new.kl_coef, start_step=self.step_index
            )
        event = {"step": self.step_index, "event": "reconfigure", "changes": diff}
        self.events.append(event)
        if self.writer is not None:
            with open(self.out / EVENTS, "a") as f:
                f.write(json.dumps(event) + "\n")
        return new

    def _apply(self, new: Config) -> None:
        """Make `new` the current config: objective, reference, schedule parameters, learning rate."""
        if new.uses_reference and not self.policy.lora and self.policy.reference is None:
            self.policy.reference = self._load_reference(new)  # may fail: before anything else changes
        self.config = new
        self.objective = Objective(new)
        self.kl_ctl.params = dataclasses.replace(self.kl_ctl.params, batch_size=new.batch_size)
        self.optimizer.param_groups[0]["lr"] = new.learning_rate  # group 0 holds the model's weights

    def _load_reference(self, c: Config) -> torch.nn.Module:
        """The weights the run started from, frozen: the reference a run with the KL on would have."""
        start = load_policy(c.model, c.task, c.task_digits or None, self.device, need_reference=False)
        return start.model.eval().requires_grad_(False)

    def _sample(self, step: int, temperature: float) -> tuple[Scored, int, Growth]:
        """This step's scored batch, the number of rounds of new prompts it took, and what dynamic
        group size did. With dynamic sampling, groups whose rewards are all equal (after any growth)
        are dropped and refilled from new prompts."""
        c = self.config
        sampler_model = self.sampler.weights(self.model)
        batch, growth = [], Growth()
        for round_ in range(c.dynamic_sampling_max_rounds + 1):
            examples = self.task.batch(c.seed, step, c.prompts_per_step, round_)
            scored = self._sample_groups(sampler_model, examples, temperature, growth)
            if c.dynamic_sampling:
                scored = scored.keep_groups(~zero_variance_groups(scored.rewards, scored.groups))
            batch.append(scored)
            if not c.dynamic_sampling or sum(len(b.group_sizes) for b in batch) >= c.prompts_per_step:
                break
        else:
            raise RuntimeError(
                f"dynamic sampling found only {sum(len(b.group_sizes) for b in batch)} of "
                f"{c.prompts_per_step} groups with reward variance after {c.dynamic_sampling_max_rounds} "
                f"extra rounds at step {step}; raise dynamic_sampling_max_rounds or use an easier task"
            )
        merged = Scored.merge(batch, self.tok.pad_token_id)
        return merged.first_groups(c.prompts_per_step), len(batch), growth  # refills beyond are unused

    def _sample_groups(
        self, sampler_model: torch.nn.Module, examples: list, temperature: float, growth: "Growth"
    ) -> Scored:
        """group_size completions for each prompt, scored; with dynamic group size, every prompt whose
        rewards are all equal gets group_size more (fewer in the last round) until a reward differs or
        its group reaches group_size_max. Sequential sampling with elimination, as in Reinforce-Ada
        (arXiv 2510.04996): a prompt leaves the sampling as soon as its group holds a contrasting
        reward, so the extra compute goes where GRPO would otherwise get no signal (DAPO's
        zero-variance groups, arXiv 2503.14476) instead of being thrown away with them. The groups come
        back ragged, each prompt's rows contiguous; the objective then weighs every prompt equally
        (`objective.groups.prompt_balance`). With temperature noise, a prompt's extra completions are
        sampled at that prompt's temperature."""
        c = self.config
        sample = functools.partial(
            sample_and_score, sampler_model, self.model, self.tok, self.task, reward_funcs=self.reward_funcs,
            reward_weights=self.reward_weights, generator=self.generator, fault_gen=self.fault_gen,
            device=self.device,
        )  # fmt: skip
        temps = None  # (B,) one temperature per prompt, with temperature noise
        if c.temperature_jitter > 0:
            temps = group_temperatures(len(examples), 1, temperature, c.temperature_jitter, self.generator)
        scored = sample(examples, c, c.group_size, temperature, temps)
        if not c.dynamic_group_size:
            return scored
        first = scored.rewards[:: c.group_size]  # (B,) every reward of a growing group equals its first
        growing = zero_variance_groups(scored.rewards, c.group_size)  # (B,)
        parts, prompt_of = [scored], [torch.arange(len(examples)).repeat_interleave(c.group_size)]
        grown, size = growing.clone(), c.group_size
        while bool(growing.any()) and size < c.group_size_max:
            extra = min(c.group_size, c.group_size_max - size)
            idx = growing.nonzero().squeeze(-1)  # (b,)
            part = sample([examples[i] for i in idx.tolist()], c, extra, temperature,
                          temps[idx] if temps is not None else None)  # fmt: skip
            growing[idx] = still_uniform(first[idx], part.rewards.view(len(idx), extra))
            parts.append(part)
            prompt_of.append(idx.cpu().repeat_interleave(extra))
            growth.rounds += 1
            growth.extra_completions += len(idx) * extra
            growth.extra_tokens += part.sampled_tokens
            size += extra
        growth.prompts += len(examples)
        growth.grown += int(grown.sum())
        growth.rescued += int((grown & ~growing).sum())
        return Scored.merge(parts, self.tok.pad_token_id).regroup(torch.cat(prompt_of), len(examples))

    def _update(
        self,
        rollout: Rollout,
        temperatures: Tensor,
        fixed: StepTensors,
        groups: Groups,
        entropy_coef: float,
        ref_logsm: Tensor | None,
    ) -> Update:
        """num_iterations passes over the batch, each split into num_mini_batches mini-batches of
        whole groups; each mini-batch is one clipped optimizer step, its gradient accumulated over
        micro-batches and normalized by that mini-batch's totals. A non-finite loss or gradient
        stops the run or, with skip_nonfinite, skips the rest of the step's updates (counted)."""
        c, model, tau = self.config, self.model, self.tau
        mask = rollout.completion_mask  # (N, T)
        losses, grad_norms, t_fb, t_opt = [], [], 0.0, 0.0
        logp_full = torch.zeros_like(mask)  # (N, T) detached, for whole-batch statistics
        entropy_full = torch.zeros_like(mask)  # (N, T)
        exact_full = torch.zeros_like(mask) if ref_logsm is not None else None  # (N, T)
        minis = mini_batches(groups, len(mask), c.num_mini_batches)
        for rows, mini_groups in (m for _ in range(c.num_iterations) for m in minis):
            t0 = time.perf_counter()
            self.optimizer.zero_grad(set_to_none=True)
            totals = self.objective.totals(fixed.mask[rows], mini_groups)  # this mini-batch's normalizers
            loss_sum = 0.0
            for chunk in micro_batches(len(rows), c.micro_batch_size):
                rows_ = rows[chunk]
                with autocast(self.device):
                    logits = completion_logits(model, rollout.select(rows_), temperatures[rows_])  # (n, T, V)
                if tau is not None:
                    logits = logits / tau()  # the trainable temperature gets its gradient here
                logp, entropy = logprobs_and_entropy(logits, rollout.completion_ids[rows_])  # (n, T)
                entropy = entropy if entropy_coef else entropy.detach()  # a gradient only for the bonus
                loss = self.objective.loss(
                    logp, entropy, fixed.select(rows_), totals, self.kl_ctl.coef, entropy_coef
                )
                loss.backward()
                loss_sum += loss.item()
                logp_full[rows_] = logp.detach()
                entropy_full[rows_] = entropy.detach()
                if exact_full is not None:
                    exact_full[rows_] = exact_kl(logits.detach(), ref_logsm[rows_])
            t1 = time.perf_counter()
            norm = torch.nn.utils.clip_grad_norm_(
                self.params, c.max_grad_norm if c.max_grad_norm > 0 else math.inf
            )
            if not (math.isfinite(loss_sum) and torch.isfinite(norm)):
                quantity = "loss" if not math.isfinite(loss_sum) else "gradient norm"
                if not c.skip_nonfinite:
                    raise FloatingPointError(
                        f"non-finite {quantity} at step {self.step_index}; the weights were not updated "
                        "(set skip_nonfinite=true to skip and count such steps instead)"
                    )
                self.optimizer.zero_grad(set_to_none=True)  # the weights never see a non-finite update
                self.skipped += 1
                break
            self.optimizer.step()
            losses.append(loss_sum)
            grad_norms.append(float(norm))
            t_fb, t_opt = t_fb + t1 - t0, t_opt + time.perf_counter() - t1
        return Update(losses, grad_norms, logp_full, entropy_full, exact_full, t_fb, t_opt)

    def _log(self, step: int, row: dict, scored: Scored, rewards: Tensor) -> None:
        """Hand the row to the callbacks and the run log; example completions and the checkpoint
        when due."""
        c = self.config
        self.rows.append(row)
        for callback in self.callbacks:
            callback.on_step(step, row)
        if self.writer is not None:
            self.writer.log(row)
            if step % c.samples_every == 0:
                shown = zip(
                    scored.prompts, scored.completions, rewards.tolist(), scored.rollout.truncated.tolist()
                )
                self.writer.samples(step, [
                    {"prompt": p, "completion": s, "reward": r, "truncated": t}
                    for p, s, r, t in list(shown)[: c.samples_per_log]
                ])  # fmt: skip
        if self.writer is not None and c.checkpoint_every and (step + 1) % c.checkpoint_every == 0:
            checkpoint.save(self.out, {
                "step": step + 1,
                "config": c.to_dict(),
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "tau": self.tau.state_dict() if self.tau is not None else None,
                "prev_model": self.prev_model.state_dict() if self.prev_model is not None else None,
                "sampler_history": list(self.sampler.history),
                "kl_ctl": (self.kl_ctl.coef, self.kl_ctl.triggered),
                "kl_params": dataclasses.asdict(self.kl_ctl.params),
                "ent_ctl": (self.ent_ctl.coef, self.ent_ctl.active),
                "rng": checkpoint.rng_states(self.generator, self.fault_gen),
                "skipped": self.skipped,
            })  # fmt: skip
        self.bar.update(1)
        self.bar.set_postfix(reward=f"{row['reward']:.3f}", kl=f"{row.get('kl', 0.0):.4f}")

    def _finish(self) -> None:
        """The final validation row, the summary with its diagnostics, and the end of the run log."""
        c = self.config
        self.bar.close()
        with autocast(self.device):
            final = {"step": c.steps, **self.validate()}
        self.rows.append(final)
        metrics = self.metrics
        summary = summarize(metrics, self.model)
        summary["findings"] = [dataclasses.asdict(f) for f in diagnose(metrics, config=c.to_dict())]
        for callback in self.callbacks:
            callback.on_step(c.steps, final)
            callback.on_end(summary)
        if self.writer is not None:
            self.writer.log(final)
            self.writer.finish(summary)
        self.finished = True


def train(
    config: Config, out: str | Path | None = None, callbacks: Sequence[Callback] = (), resume: bool = False
) -> pd.DataFrame:
    """Train with GRPO (or any variant the config composes); return the metrics, one row per step.
    With `out`, the run is also written there (config.json, metrics.jsonl, samples.jsonl, summary.json,
    and checkpoint.pt every `checkpoint_every` steps). `resume` continues an interrupted run from its
    last checkpoint and gives the same metrics, step for step, as an uninterrupted run.
    Each callback's `on_step(step, row)` sees every logged row as it is written (live tracking).
    `Trainer` is the same run one step at a time, with live changes between steps."""
    return Trainer(config, out, callbacks, resume).run()


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
