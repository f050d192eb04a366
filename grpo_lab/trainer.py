"""The GRPO training loop, top to bottom like the algorithm:
sample -> score -> fixed log-probs (old, reference) -> advantages -> update (micro-batched) -> log.
Every variant enters through `Objective`, composed once from the config."""

import collections
import contextlib
import copy
import dataclasses
import functools
import math
import resource
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import pandas as pd
import torch
from torch import Tensor
from tqdm.auto import tqdm

from grpo_lab import checkpoint, faults
from grpo_lab.analysis.diagnostics import diagnose, diversity
from grpo_lab.compose import Objective, StepTensors
from grpo_lab.config import Config
from grpo_lab.evaluation import decode, encode_prompts, evaluate
from grpo_lab.models.loading import Policy, load_policy
from grpo_lab.models.logprobs import completion_logits, logprobs_and_entropy, token_logprobs
from grpo_lab.models.sampler import Rollout, concat, sample
from grpo_lab.objective import BatchTotals, exact_kl, masked_mean
from grpo_lab.rewards import score
from grpo_lab.runlog import RunWriter, environment, read_config, read_metrics
from grpo_lab.tasks import Task, make_task
from grpo_lab.tricks import (
    EntropyController,
    KLController,
    KLScheduleParams,
    LearnableTemperature,
    group_temperatures,
    shape_length,
    zero_variance_groups,
)


class Callback(Protocol):
    """Receives the run log live: every row as it is logged, then the summary."""

    def on_step(self, step: int, row: dict) -> None: ...

    def on_end(self, summary: dict) -> None: ...


EXACT_KL_MAX_VOCAB = 4096
"""the exact per-token KL sums over the vocabulary: logged only for vocabularies up to this size"""


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' was asked for but torch sees no CUDA device; use 'auto' or 'cpu'")
    return torch.device(name)


def autocast(device: torch.device) -> contextlib.AbstractContextManager:
    """bf16 autocast on CUDA; full precision on CPU."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def micro_batches(n: int, size: int) -> list[Tensor]:
    size = size or n
    return [torch.arange(i, min(i + size, n)) for i in range(0, n, size)]


@torch.no_grad()
def fixed_logprobs(
    model: torch.nn.Module, rollout: Rollout, chunks: list[Tensor], temperature: float, keep_logits: bool
) -> tuple[Tensor, Tensor | None]:
    """Log-probs (N, T) that stay fixed during the updates (old policy, reference), and optionally
    their log-softmax (N, T, V) for the exact KL."""
    logps, logsm = [], []
    for rows in chunks:
        logits = completion_logits(model, rollout.select(rows), temperature)  # (n, T, V)
        logps.append(token_logprobs(logits, rollout.completion_ids[rows]))
        if keep_logits:
            logsm.append(torch.log_softmax(logits, dim=-1))
    return torch.cat(logps), (torch.cat(logsm) if keep_logits else None)


def token_credit(
    task: Task, completions: list[str], answers: list[str], t: int, policy: Policy
) -> Tensor | None:
    """The task's per-character credit as per-token rewards (N, T); character tokenizers only."""
    if task.token_credit is None:
        return None
    if len(policy.tokenizer) > 256:
        raise ValueError("token-level task credit needs the embedded character tokenizer")
    rows = [(task.token_credit(c, a) + [0.0] * t)[:t] for c, a in zip(completions, answers)]
    return torch.tensor(rows)


def group_stats(rewards: Tensor, group_size: int) -> dict[str, float]:
    """TRL's reward metrics: `reward`, `reward_std` (mean within-group std), `frac_reward_zero_std`."""
    g = rewards.nan_to_num(0.0).view(-1, group_size)  # (B, G)
    std = g.std(dim=1) if group_size > 1 else torch.zeros(g.shape[0])  # (B,)
    return {
        "reward": float(rewards.nanmean()),
        "reward_std": float(std.mean()),
        "frac_reward_zero_std": float(torch.isclose(std, torch.zeros_like(std)).float().mean()),
    }


@dataclasses.dataclass
class Scored:
    """Sampled completions with their rewards (one or several sampling rounds)."""

    rollout: Rollout
    rewards: Tensor
    """(N,) weighted sum of the reward functions"""
    per_func: dict[str, Tensor]
    """each reward function's raw values (N,)"""
    completions: list[str]
    prompts: list[str]
    answers: list[str]
    sampled_tokens: int
    """completion tokens generated, kept or not (the sampling cost)"""
    dropped_groups: int = 0
    fault_stats: dict[str, float] = dataclasses.field(default_factory=dict)

    def select(self, rows: Tensor) -> "Scored":
        idx = rows.tolist()
        return Scored(
            self.rollout.select(rows),
            self.rewards[rows],
            {k: v[rows] for k, v in self.per_func.items()},
            [self.completions[i] for i in idx],
            [self.prompts[i] for i in idx],
            [self.answers[i] for i in idx],
            self.sampled_tokens,
            self.dropped_groups,
            self.fault_stats,
        )

    def keep_groups(self, keep: Tensor, group_size: int) -> "Scored":
        """Only the groups flagged in `keep` (B,); the others are counted as dropped."""
        kept = self.select(keep.repeat_interleave(group_size).nonzero().squeeze(-1))
        kept.dropped_groups = self.dropped_groups + int((~keep).sum())
        return kept

    def first(self, n: int) -> "Scored":
        return self.select(torch.arange(min(n, len(self.prompts))))

    @staticmethod
    def merge(parts: list["Scored"], pad_id: int) -> "Scored":
        return Scored(
            concat([p.rollout for p in parts], pad_id),
            torch.cat([p.rewards for p in parts]),
            {k: torch.cat([p.per_func[k] for p in parts]) for k in parts[0].per_func},
            [x for p in parts for x in p.completions],
            [x for p in parts for x in p.prompts],
            [x for p in parts for x in p.answers],
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
    temperature: float,
    reward_funcs: list,
    reward_weights: tuple[float, ...],
    generator: torch.Generator,
    fault_gen: torch.Generator,
    device: torch.device,
) -> Scored:
    """Sample G completions for each prompt (KV-cached, optionally with per-group temperature
    noise) and score them with the reward functions, prompts repeated per completion. Fault
    injectors, when switched on, act here: forced lengths, repeats and junk before scoring, reward
    noise after (on their own generator, so switching them never changes the sampling)."""
    prompt_ids, prompt_mask = encode_prompts(tok, [ex.prompt for ex in examples], device)
    n = len(examples) * c.group_size
    temps = temperature
    if c.temperature_jitter > 0:
        temps = group_temperatures(len(examples), c.group_size, temperature, c.temperature_jitter, generator)
    forced = faults.select_rows(n, c.fault_long_frac, fault_gen).to(device) if c.fault_long_frac else None
    sampler_model.eval()
    with autocast(device):
        rollout = sample(sampler_model, prompt_ids, prompt_mask, c.group_size, c.max_completion_length, temps,
                         tok.eos_token_id, tok.pad_token_id, generator, suppress_eos=forced)  # fmt: skip
    model.train()
    stats = {"fault/long_frac": float(forced.float().mean())} if forced is not None else {}
    if c.fault_repeat_k:
        (ids, mask, logp, truncated), fs = faults.repeat_samples(
            rollout.completion_ids, rollout.completion_mask, rollout.sampler_logp, rollout.truncated,
            c.group_size, c.fault_repeat_k, fault_gen,
        )  # fmt: skip
        rollout = dataclasses.replace(
            rollout, completion_ids=ids, completion_mask=mask, sampler_logp=logp, truncated=truncated
        )
        stats.update(fs)
    if c.fault_junk_frac:
        rollout, fs = pad_with_junk(rollout, model, tok, c, temperature, fault_gen, device)
        stats.update(fs)
    prompts = [ex.prompt for ex in examples for _ in range(c.group_size)]
    answers = [ex.answer for ex in examples for _ in range(c.group_size)]
    completions = decode(tok, rollout.completion_ids, rollout.completion_mask)
    rewards, per_func = score(reward_funcs, reward_weights, prompts, completions, answer=answers)  # (N,)
    if c.fault_reward_sigma or c.fault_reward_flip:
        low, high = task.reward_range
        rewards, fs = faults.reward_noise(rewards, c.group_size, c.fault_reward_sigma, c.fault_reward_flip,
                                          c.fault_group_fraction, low, high, fault_gen)  # fmt: skip
        stats.update(fs)
    tokens = int(rollout.completion_mask.sum())
    return Scored(rollout, rewards, per_func, completions, prompts, answers, tokens, fault_stats=stats)


@torch.no_grad()
def pad_with_junk(
    rollout: Rollout, model: torch.nn.Module, tok, c: Config, temperature: float, fault_gen, device
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
        logits = completion_logits(model, rollout.select(idx), temperature)  # (n, T', V)
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
    temperature: float,
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
            logits = completion_logits(model, rollout.select(rows), temperature)  # (n, T, V)
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


def train(
    config: Config, out: str | Path | None = None, callbacks: Sequence[Callback] = (), resume: bool = False
) -> pd.DataFrame:
    """Train with GRPO (or any variant the config composes); return the metrics, one row per step.
    With `out`, the run is also written there (config.json, metrics.jsonl, samples.jsonl, summary.json,
    and checkpoint.pt every `checkpoint_every` steps). `resume` continues an interrupted run from its
    last checkpoint and gives the same metrics, step for step, as an uninterrupted run.
    Each callback's `on_step(step, row)` sees every logged row as it is written (live tracking)."""
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
    device = pick_device(c.device)
    task = make_task(c.task, c.task_digits or None)
    objective = Objective(c)
    reward_names = c.rewards or task.default_rewards
    missing = [n for n in reward_names if n not in task.rewards]
    if missing:
        raise ValueError(f"task {c.task!r} has no reward {missing}; valid: {', '.join(task.rewards)}")
    reward_funcs = [(n, task.rewards[n]) for n in reward_names]
    reward_weights = c.reward_weights or (1.0,) * len(reward_names)
    if c.token_adv_mix > 0 and task.token_credit is None and not objective.kl_in_reward:
        raise ValueError(
            "token_adv_mix > 0 needs token-level rewards: "
            "task 'arith' (per-digit credit) or kl_placement='reward'"
        )
    policy = load_policy(
        c.model, c.task, c.task_digits or None, device, c.lora, c.lora_r, c.lora_alpha, c.uses_reference
    )
    model, tok = policy.model, policy.tokenizer
    params = [p for p in model.parameters() if p.requires_grad]
    param_groups = [{"params": params}]
    tau = LearnableTemperature().to(device) if c.learnable_temperature else None
    if tau is not None:
        param_groups.append({"params": list(tau.parameters()), "lr": c.temperature_lr, "weight_decay": 0.0})
    optimizer = torch.optim.AdamW(param_groups, lr=c.learning_rate, weight_decay=c.weight_decay)
    prev_model = copy.deepcopy(model).eval().requires_grad_(False) if c.kl_prev_coef > 0 else None
    kl_ctl = KLController(c.kl_coef, c.kl_schedule, KLScheduleParams(
        c.kl_coef, c.kl_coef_final, c.kl_target, c.kl_growth, c.kl_horizon, c.batch_size))  # fmt: skip
    ent_ctl = EntropyController(c.entropy_coef, c.entropy_target, c.entropy_coef_delta, c.entropy_coef_max)
    generator = torch.Generator(device).manual_seed(c.seed)
    fault_gen = torch.Generator().manual_seed(c.seed + 1)  # faults never shift the sampler's random stream
    sampler = Sampler(model, c.fault_stale_k, c.fault_sampler_dtype)
    skipped, start = 0, 0
    if saved is not None:  # continue exactly where the checkpoint was taken
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        if tau is not None:
            tau.load_state_dict(saved["tau"])
        if prev_model is not None:
            prev_model.load_state_dict(saved["prev_model"])
        sampler.history.extend(saved["sampler_history"])
        kl_ctl.coef, kl_ctl.triggered = saved["kl_ctl"]
        ent_ctl.coef, ent_ctl.active = saved["ent_ctl"]
        checkpoint.restore_rng_states(saved["rng"], generator, fault_gen)
        skipped, start = saved["skipped"], saved["step"]
    env = environment(str(device))
    writer = (
        RunWriter(out, c.to_dict(), env, resume_from=start if resume else None) if out is not None else None
    )
    val_set = task.validation(c.val_size)
    validate = functools.partial(
        evaluate, model, tok, task, val_set, c.max_completion_length, reward_names, reward_weights
    )
    exact = len(tok) <= EXACT_KL_MAX_VOCAB
    rows: list[dict] = read_metrics(out).to_dict("records") if start else []
    rows = [{k: v for k, v in r.items() if v == v} for r in rows]  # drop the NaN fill of absent metrics
    bar = tqdm(range(start, c.steps), desc=f"{c.preset} seed {c.seed}", disable=not c.progress, leave=False)
    for step in bar:
        row: dict = {"step": step}
        if step % c.eval_every == 0:
            with autocast(device):
                row.update(validate())
        t_step = time.perf_counter()  # validation is not part of the step's cost
        temperature = c.temperature * (tau().item() if tau is not None else 1.0)

        # 1. sample G completions per prompt and score them (TRL reward signature); with dynamic
        #    sampling, groups whose rewards are all equal are dropped and refilled from new prompts
        sampler_model = sampler.weights(model)
        batch = []
        for round_ in range(c.dynamic_sampling_max_rounds + 1):
            examples = task.batch(c.seed, step, c.prompts_per_step, round_)
            scored = sample_and_score(sampler_model, model, tok, task, examples, c, temperature,
                                      reward_funcs, reward_weights, generator, fault_gen, device)  # fmt: skip
            if c.dynamic_sampling:
                scored = scored.keep_groups(~zero_variance_groups(scored.rewards, c.group_size), c.group_size)
            batch.append(scored)
            if not c.dynamic_sampling or sum(len(b.prompts) for b in batch) >= c.batch_size:
                break
        else:
            raise RuntimeError(
                f"dynamic sampling found only {sum(len(b.prompts) for b in batch) // c.group_size} of "
                f"{c.prompts_per_step} groups with reward variance after {c.dynamic_sampling_max_rounds} "
                f"extra rounds at step {step}; raise dynamic_sampling_max_rounds or use an easier task"
            )
        scored = Scored.merge(batch, tok.pad_token_id).first(
            c.batch_size
        )  # refills beyond the batch are unused
        rollout, rewards, per_func, completions = (
            scored.rollout,
            scored.rewards,
            scored.per_func,
            scored.completions,
        )
        lengths = rollout.lengths  # (N,)
        rewards, length_stats = shape_length(
            rewards, lengths, c.max_completion_length, c.length_penalty, c.length_norm_ref,
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
                old_logp, _ = fixed_logprobs(model, rollout, chunks, temperature, keep_logits=False)  # (N, T)
            if c.uses_reference:
                with policy.as_reference() as ref:
                    ref_logp, ref_logsm = fixed_logprobs(
                        ref, rollout, chunks, c.temperature, keep_logits=exact
                    )
            if prev_model is not None:
                prev_logp, _ = fixed_logprobs(prev_model, rollout, chunks, temperature, keep_logits=False)
                prev_model.load_state_dict(model.state_dict())  # next step's "previous" is this policy
        t_logprob = time.perf_counter()

        # 3. advantages (KL may be folded into the reward first), tricks on them, sequence weights,
        #    sampler importance correction
        kl_reward = (
            objective.reward_kl(old_logp, ref_logp, mask, kl_ctl.coef) if objective.kl_in_reward else None
        )
        credit = (
            token_credit(task, completions, scored.answers, mask.shape[1], policy)
            if c.token_adv_mix > 0
            else None
        )
        adv, adv_stats = objective.advantages(rewards, lengths, mask, kl_reward, credit)  # (N, T)
        seq_w = objective.sequence_weights(lengths, rewards)  # (N,)
        is_w, is_stats = torch.ones_like(mask), {}  # (N, T)
        if old_logp is not None:
            is_w, is_stats = objective.correction(old_logp, rollout.sampler_logp, mask)
        fixed = StepTensors(adv, loss_mask, seq_w, is_w, old_logp, ref_logp, prev_logp)
        totals = BatchTotals.of(loss_mask, c.max_completion_length)
        entropy_coef = ent_ctl.coef if ent_ctl.active else 0.0
        if c.grad_cos_every and step % c.grad_cos_every == 0:  # diagnostic: do the loss terms pull apart?
            parts = {}
            for name, weight in zip(per_func, reward_weights):
                parts[f"policy:{name}"] = (
                    objective.advantages(weight * per_func[name], lengths, mask, None, None)[0],
                    0,
                    0,
                )
            if c.length_penalty or c.length_norm_ref or c.overlong_buffer:
                length_adv = objective.advantages(rewards - scored.rewards, lengths, mask, None, None)[0]
                parts["length"] = (length_adv, 0.0, 0.0)
            if objective.kl_in_loss:
                parts["kl"] = (torch.zeros_like(adv), kl_ctl.coef, 0.0)
            if entropy_coef:
                parts["entropy"] = (torch.zeros_like(adv), 0.0, entropy_coef)
            row.update(
                gradient_cosines(model, params, rollout, chunks, temperature, objective, fixed, totals, parts)
            )

        # 4. update: num_iterations passes over the batch, micro-batched with gradient accumulation;
        #    the normalizers are those of the whole batch, so the gradient does not depend on chunking
        losses, grad_norms, t_fb, t_opt = [], [], 0.0, 0.0
        for _ in range(c.num_iterations):
            t0 = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            loss_sum = 0.0
            logp_full = torch.zeros_like(mask)  # (N, T) detached, for whole-batch statistics
            entropy_full = torch.zeros_like(mask)
            exact_full = torch.zeros_like(mask) if ref_logsm is not None else None
            for rows_ in chunks:
                with autocast(device):
                    logits = completion_logits(model, rollout.select(rows_), c.temperature)  # (n, T, V)
                if tau is not None:
                    logits = logits / tau()  # the trainable temperature gets its gradient here
                logp, entropy = logprobs_and_entropy(logits, rollout.completion_ids[rows_])  # (n, T)
                entropy = entropy if entropy_coef else entropy.detach()  # a gradient only for the bonus
                loss = objective.loss(logp, entropy, fixed.select(rows_), totals, kl_ctl.coef, entropy_coef)
                loss.backward()
                loss_sum += loss.item()
                logp_full[rows_] = logp.detach()
                entropy_full[rows_] = entropy.detach()
                if exact_full is not None:
                    exact_full[rows_] = exact_kl(logits.detach(), ref_logsm[rows_])
            t1 = time.perf_counter()
            norm = torch.nn.utils.clip_grad_norm_(
                params, c.max_grad_norm if c.max_grad_norm > 0 else math.inf
            )
            if not (math.isfinite(loss_sum) and torch.isfinite(norm)):
                quantity = "loss" if not math.isfinite(loss_sum) else "gradient norm"
                if not c.skip_nonfinite:
                    raise FloatingPointError(
                        f"non-finite {quantity} at step {step}; the weights were not updated "
                        "(set skip_nonfinite=true to skip and count such steps instead)"
                    )
                optimizer.zero_grad(set_to_none=True)  # the weights never see a non-finite update
                skipped += 1
                break
            optimizer.step()
            losses.append(loss_sum)
            grad_norms.append(float(norm))
            t_fb, t_opt = t_fb + t1 - t0, t_opt + time.perf_counter() - t1
        t_train = time.perf_counter()
        if old_logp is None:  # one on-policy update: the policy just evaluated is the sampler's trainer twin
            _, is_stats = objective.correction(logp_full, rollout.sampler_logp, mask)

        # 5. controllers see this step's measurements and set the next step's coefficients
        old_for_stats = old_logp if old_logp is not None else logp_full
        row.update(objective.stats(logp_full, old_for_stats, ref_logp, adv, mask))
        row["kl/coef"] = kl_ctl.coef
        if ref_logp is not None:
            kl_ctl.update(row["kl"], step, c.steps)
        entropy_now = float(masked_mean(entropy_full, mask))
        row["entropy/coef"] = entropy_coef
        ent_ctl.update(entropy_now)

        # 6. log: TRL's names where TRL has one, namespaces otherwise
        row.update(group_stats(rewards, c.group_size))
        for name, values in per_func.items():
            row[f"rewards/{name}/mean"] = float(values.nanmean())
            row[f"rewards/{name}/std"] = (
                float(values[~values.isnan()].std()) if (~values.isnan()).sum() > 1 else 0.0
            )
        if exact_full is not None:
            row["kl/exact"] = float(masked_mean(exact_full, mask))
        if prev_logp is not None:
            row["kl/prev"] = float(masked_mean(objective.kl_prev_fn(logp_full, prev_logp), mask))
        if kl_reward is not None:
            row["kl_reward/mean"] = float((kl_reward * mask).sum(-1).mean())
        row.update({k: float(v) for k, v in is_stats.items()})
        row.update(length_stats)
        row.update(adv_stats)
        row.update(scored.fault_stats)
        row["sampling/kl_sampler_trainer"] = float(masked_mean(rollout.sampler_logp - old_for_stats, mask))
        if c.skip_nonfinite:
            row["nonfinite/skipped_steps"] = skipped
        if c.diversity_every and step % c.diversity_every == 0:
            row.update(diversity(completions, c.group_size))
        terminated = lengths[~rollout.truncated]
        fixed_passes = (old_logp, ref_logp, prev_logp)
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
            "learning_rate": optimizer.param_groups[0]["lr"],
            "sampling/temperature": temperature,
            "sampling/rounds": len(batch),
            "sampling/dropped_groups": scored.dropped_groups,
            "time/sample_s": t_sample - t_step,
            "time/logprob_s": t_logprob - t_sample,
            "time/forward_backward_s": t_fb,
            "time/optimizer_s": t_opt,
            "time/train_s": t_train - t_logprob,
            "time/step_s": time.perf_counter() - t_step,
            "cost/forward_passes": c.num_iterations + sum(x is not None for x in fixed_passes),
            "cost/backward_passes": c.num_iterations,
            "cost/sampled_tokens": float(scored.sampled_tokens),
            "cost/peak_rss_mb": peak_memory_mb(device),
        })  # fmt: skip
        if tau is not None:
            row["temperature/learned"] = tau().item()
        rows.append(row)
        for callback in callbacks:
            callback.on_step(step, row)
        if writer is not None:
            writer.log(row)
            if step % c.samples_every == 0:
                shown = zip(scored.prompts, completions, rewards.tolist(), rollout.truncated.tolist())
                writer.samples(step, [
                    {"prompt": p, "completion": s, "reward": r, "truncated": t}
                    for p, s, r, t in list(shown)[: c.samples_per_log]
                ])  # fmt: skip
        if writer is not None and c.checkpoint_every and (step + 1) % c.checkpoint_every == 0:
            checkpoint.save(out, {
                "step": step + 1,
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "tau": tau.state_dict() if tau is not None else None,
                "prev_model": prev_model.state_dict() if prev_model is not None else None,
                "sampler_history": list(sampler.history),
                "kl_ctl": (kl_ctl.coef, kl_ctl.triggered),
                "ent_ctl": (ent_ctl.coef, ent_ctl.active),
                "rng": checkpoint.rng_states(generator, fault_gen),
                "skipped": skipped,
            })  # fmt: skip
        bar.set_postfix(reward=f"{row['reward']:.3f}", kl=f"{row.get('kl', 0.0):.4f}")

    with autocast(device):
        final = {"step": c.steps, **validate()}
    rows.append(final)
    metrics = pd.DataFrame(rows)
    summary = summarize(metrics, model)
    summary["findings"] = [dataclasses.asdict(f) for f in diagnose(metrics, config=c.to_dict())]
    for callback in callbacks:
        callback.on_step(c.steps, final)
        callback.on_end(summary)
    if writer is not None:
        writer.log(final)
        writer.finish(summary)
    return metrics


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
