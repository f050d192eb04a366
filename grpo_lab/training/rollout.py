"""One step's batch: sample completions for the step's prompts, score them, and group them by prompt.
Dynamic group size grows groups whose rewards are all equal; dynamic sampling drops the groups that
stay so and refills the batch from new prompts; the rollout faults act between sampling and scoring
(`faults.corrupt_rollout`), reward noise after it."""

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from grpo_lab.config import Config
from grpo_lab.models.sampler import Rollout, concat, decode, encode_prompts, sample
from grpo_lab.objective.groups import Groups
from grpo_lab.rewards import score
from grpo_lab.tasks import Task
from grpo_lab.training import faults
from grpo_lab.training.devices import autocast
from grpo_lab.tricks import group_temperatures, still_uniform, uniform_groups


@dataclass
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
    fault_stats: dict[str, float] = field(default_factory=dict)

    @property
    def groups(self) -> Groups:
        """The group layout for the objective: one int when every group has the same size (the
        equal-groups code path), else the sizes (B,)."""
        sizes = self.group_sizes
        return int(sizes[0]) if bool((sizes == sizes[0]).all()) else sizes

    def take(self, rows: Tensor, group_sizes: Tensor) -> "Scored":
        """These rows, in this order, forming groups of these sizes."""
        idx = rows.tolist()
        return dataclasses.replace(
            self,
            rollout=self.rollout.select(rows),
            rewards=self.rewards[rows],
            per_func={k: v[rows] for k, v in self.per_func.items()},
            completions=[self.completions[i] for i in idx],
            prompts=[self.prompts[i] for i in idx],
            answers=[self.answers[i] for i in idx],
            group_sizes=group_sizes,
            temperatures=self.temperatures[rows],
        )

    def keep_groups(self, keep: Tensor) -> "Scored":
        """Only the groups flagged in `keep` (B,); the others are counted as dropped."""
        keep = keep.cpu()  # (B,) like the group sizes
        rows = keep.repeat_interleave(self.group_sizes).nonzero().squeeze(-1)  # (n,)
        kept = self.take(rows, self.group_sizes[keep])
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
            rollout=concat([p.rollout for p in parts], pad_id),
            rewards=torch.cat([p.rewards for p in parts]),
            per_func={k: torch.cat([p.per_func[k] for p in parts]) for k in parts[0].per_func},
            completions=[x for p in parts for x in p.completions],
            prompts=[x for p in parts for x in p.prompts],
            answers=[x for p in parts for x in p.answers],
            group_sizes=torch.cat([p.group_sizes for p in parts]),
            temperatures=torch.cat([p.temperatures for p in parts]),
            sampled_tokens=sum(p.sampled_tokens for p in parts),
            dropped_groups=sum(p.dropped_groups for p in parts),
            fault_stats=parts[0].fault_stats,
        )


@dataclass
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


@dataclass
class Batch:
    """One step's scored batch and how it was gathered."""

    scored: Scored
    rounds: int
    """rounds of new prompts it took (more than one with dynamic sampling)"""
    growth: Growth
    temperature: float
    """the step's base sampling temperature (the learned factor included)"""


@dataclass
class Sampling:
    """What sampling and scoring need besides the config: the models, tokenizer, task, reward
    functions and the two random streams (the sampler's, and the faults' own)."""

    policy: torch.nn.Module
    """the trained policy (junk faults take their log-probs from it)"""
    tokenizer: Any
    task: Task
    reward_funcs: list
    reward_weights: tuple[float, ...]
    generator: torch.Generator
    fault_generator: torch.Generator
    device: torch.device


def sample_batch(
    s: Sampling, sampler_model: torch.nn.Module, c: Config, step: int, temperature: float
) -> Batch:
    """This step's scored batch of c.prompts_per_step groups. With dynamic sampling, groups whose
    rewards are all equal (after any growth) are dropped and refilled from new prompts."""
    parts, growth = [], Growth()
    for round_ in range(c.dynamic_sampling_max_rounds + 1):
        examples = s.task.batch(c.seed, step, c.prompts_per_step, round_)
        scored = sample_groups(s, sampler_model, c, examples, temperature, growth)
        if c.dynamic_sampling:
            scored = scored.keep_groups(~uniform_groups(scored.rewards, scored.groups))
        parts.append(scored)
        if not c.dynamic_sampling or sum(len(b.group_sizes) for b in parts) >= c.prompts_per_step:
            break
    else:
        raise RuntimeError(
            f"dynamic sampling found only {sum(len(b.group_sizes) for b in parts)} of "
            f"{c.prompts_per_step} groups with reward variance after {c.dynamic_sampling_max_rounds} "
            f"extra rounds at step {step}; raise dynamic_sampling_max_rounds or use an easier task"
        )
    merged = Scored.merge(parts, s.tokenizer.pad_token_id)
    return Batch(merged.first_groups(c.prompts_per_step), len(parts), growth, temperature)  # refills unused


def sample_groups(
    s: Sampling, sampler_model: torch.nn.Module, c: Config, examples: list, temperature: float, growth: Growth
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
    temps = None  # (B,) one temperature per prompt, with temperature noise
    if c.temperature_jitter > 0:
        temps = group_temperatures(len(examples), 1, temperature, c.temperature_jitter, s.generator)
    scored = sample_and_score(s, sampler_model, c, examples, c.group_size, temperature, temps)
    if not c.dynamic_group_size:
        return scored
    first = scored.rewards[:: c.group_size]  # (B,) every reward of a growing group equals its first
    growing = uniform_groups(scored.rewards, c.group_size)  # (B,)
    parts, prompt_of = [scored], [torch.arange(len(examples)).repeat_interleave(c.group_size)]
    grown, size = growing.clone(), c.group_size
    while bool(growing.any()) and size < c.group_size_max:
        extra = min(c.group_size, c.group_size_max - size)
        idx = growing.nonzero().squeeze(-1)  # (b,)
        part_temps = temps[idx] if temps is not None else None  # (b,)
        part = sample_and_score(
            s, sampler_model, c, [examples[i] for i in idx.tolist()], extra, temperature, part_temps
        )
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
    return Scored.merge(parts, s.tokenizer.pad_token_id).regroup(torch.cat(prompt_of), len(examples))


def sample_and_score(
    s: Sampling,
    sampler_model: torch.nn.Module,
    c: Config,
    examples: list,
    group_size: int,
    temperature: float,
    prompt_temps: Tensor | None,
) -> Scored:
    """Sample `group_size` completions for each prompt (KV-cached, at `temperature` or at each
    prompt's own `prompt_temps` (B,)) and score them with the reward functions, prompts repeated
    per completion. The switched-on faults act here: forced lengths, repeats and junk before
    scoring, reward noise after, all on their own generator, so switching them never changes the
    sampling."""
    device = s.device
    prompt_ids, prompt_mask = encode_prompts(s.tokenizer, [ex.prompt for ex in examples], device)
    n = len(examples) * group_size
    if prompt_temps is not None:
        temps = prompt_temps.to(device, torch.float32).repeat_interleave(group_size)  # (N,)
    else:
        temps = torch.full((n,), temperature, device=device)  # (N,)
    forced = faults.long_rows(n, c, s.fault_generator, device)  # (N,) or None
    sampler_model.eval()
    with autocast(device):
        rollout = sample(
            sampler_model,
            prompt_ids,
            prompt_mask,
            group_size,
            c.max_completion_length,
            temps,
            eos_id=s.tokenizer.eos_token_id,
            pad_id=s.tokenizer.pad_token_id,
            generator=s.generator,
            suppress_eos=forced,
        )
    s.policy.train()
    rollout, stats = faults.corrupt_rollout(
        rollout,
        c,
        group_size=group_size,
        forced=forced,
        policy=s.policy,
        tokenizer=s.tokenizer,
        temperatures=temps,
        generator=s.fault_generator,
    )
    prompts = [ex.prompt for ex in examples for _ in range(group_size)]
    answers = [ex.answer for ex in examples for _ in range(group_size)]
    completions = decode(s.tokenizer, rollout.completion_ids, rollout.completion_mask)
    rewards, per_func = score(s.reward_funcs, s.reward_weights, prompts, completions, answer=answers)  # (N,)
    rewards = rewards.to(device)  # next to the masks
    per_func = {k: v.to(device) for k, v in per_func.items()}
    rewards, reward_stats = faults.corrupt_rewards(
        rewards, c, group_size=group_size, reward_range=s.task.reward_range, generator=s.fault_generator
    )
    return Scored(
        rollout=rollout,
        rewards=rewards,
        per_func=per_func,
        completions=completions,
        prompts=prompts,
        answers=answers,
        group_sizes=torch.full((len(examples),), group_size, dtype=torch.long),
        temperatures=temps,
        sampled_tokens=int(rollout.completion_mask.sum()),
        fault_stats={**stats, **reward_stats},
    )


def token_credit(task: Task, scored: Scored, tokenizer: Any) -> Tensor | None:
    """The task's per-character credit as per-token rewards (N, T) next to the completions, or None
    when the task has none; character tokenizers only."""
    if task.token_credit is None:
        return None
    if len(tokenizer) > 256:
        raise ValueError("token-level task credit needs the embedded character tokenizer")
    mask = scored.rollout.completion_mask  # (N, T)
    t = mask.shape[1]
    rows = [(task.token_credit(c, a) + [0.0] * t)[:t] for c, a in zip(scored.completions, scored.answers)]
    return torch.tensor(rows, device=mask.device)
