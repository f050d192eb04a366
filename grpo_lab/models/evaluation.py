"""Validation on a task's held-out prompts: greedy accuracy and mean reward, and sampled accuracy.

Greedy accuracy is a step function of the weights (a small update flips many argmax answers), so it
swings between evaluations; sampled accuracy, the mean correctness of k completions per prompt at the
sampling temperature, is smooth in the weights and is what the objective optimizes (the score of
ScaleRL, Khatri et al. 2025). Its samples come from a generator seeded by the evaluation alone
(`sampling_seed`), so every arm and every seed of a study sees the same prompts and the same sampling
stream at the same step: common random numbers that pair the evaluation noise too. It sits in the
models layer, beside the sampler it drives, because the embedded model's warm start stops on it
(`models.embedded`)."""

import math

import torch

from grpo_lab.models.sampler import decode, encode_prompts, sample
from grpo_lab.rewards import score
from grpo_lab.tasks.base import Example, Task

VAL_SEED = 20_251_202
"""the seed of the validation sampler at step 0; step s uses VAL_SEED + s (never a run's seed)"""


def sampling_seed(step: int) -> int:
    """The seed of the validation samples at `step`: the same for every arm and every run seed."""
    return VAL_SEED + step


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    tokenizer,
    task: Task,
    examples: list[Example],
    max_new_tokens: int,
    reward_names: tuple[str, ...],
    reward_weights: tuple[float, ...],
    batch_size: int = 256,
) -> dict[str, float]:
    """Greedy decoding on `examples`: `val/accuracy` (exact answers) and `val/reward`."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    correct, total_reward = 0, 0.0
    for start in range(0, len(examples), batch_size):
        chunk = examples[start : start + batch_size]
        prompts = [ex.prompt for ex in chunk]
        ids, mask = encode_prompts(tokenizer, prompts, device)
        rollout = sample(
            model,
            ids,
            mask,
            1,
            max_new_tokens,
            1.0,
            tokenizer.eos_token_id,
            tokenizer.pad_token_id,
            greedy=True,
        )
        texts = decode(tokenizer, rollout.completion_ids, rollout.completion_mask)
        answers = [ex.answer for ex in chunk]
        correct += sum(task.is_correct(t, a) for t, a in zip(texts, answers))
        funcs = [(n, task.rewards[n]) for n in reward_names]
        rewards, _ = score(funcs, reward_weights, prompts, texts, answer=answers)
        total_reward += float(rewards.nan_to_num(0.0).sum())
    model.train(was_training)
    return {
        "val/accuracy": correct / len(examples),
        "val/reward": total_reward / len(examples),
    }


@torch.no_grad()
def sampled_correct(
    model: torch.nn.Module,
    tokenizer,
    task: Task,
    examples: list[Example],
    samples: int,
    max_new_tokens: int,
    temperature: float,
    seed: int,
    batch_size: int = 64,
) -> torch.Tensor:
    """(n, samples) bool: whether each of `samples` completions per prompt, drawn at `temperature`
    from a generator seeded with `seed` alone, answers its prompt correctly. The prompts are sampled
    in chunks of `batch_size` from one generator, so the result depends only on the model, the
    prompts, the seed and the chunk size."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    generator = torch.Generator(device).manual_seed(seed)
    rows = []
    for start in range(0, len(examples), batch_size):
        chunk = examples[start : start + batch_size]
        ids, mask = encode_prompts(tokenizer, [ex.prompt for ex in chunk], device)
        rollout = sample(
            model,
            ids,
            mask,
            samples,
            max_new_tokens,
            temperature,
            tokenizer.eos_token_id,
            tokenizer.pad_token_id,
            generator=generator,
        )
        texts = decode(tokenizer, rollout.completion_ids, rollout.completion_mask)  # prompt-major
        answers = [ex.answer for ex in chunk for _ in range(samples)]
        hits = [task.is_correct(t, a) for t, a in zip(texts, answers)]
        rows.append(torch.tensor(hits, dtype=torch.bool).view(len(chunk), samples))  # (b, k)
    model.train(was_training)
    return torch.cat(rows)  # (n, k)


def pass_ks(samples: int) -> list[int]:
    """The k of the pass@k a validation with `samples` completions per prompt logs: 2, 4, 8, ... up
    to `samples` (pass@1 is the sampled accuracy itself)."""
    return [2**i for i in range(1, samples.bit_length()) if 2**i <= samples]


def pass_at_k(hits: torch.Tensor, k: int) -> float:
    """The unbiased pass@k (Chen et al. 2021, arXiv 2107.03374) from `hits` (n, s): per prompt with c
    correct of s samples, 1 - C(s - c, k) / C(s, k), the chance that k of its s samples drawn without
    replacement hold a correct one; averaged over the n prompts."""
    s = hits.shape[1]
    if not 1 <= k <= s:
        raise ValueError(f"pass@{k} needs 1 <= k <= samples per prompt ({s})")
    correct = hits.sum(dim=1).tolist()
    return sum(1 - math.comb(s - c, k) / math.comb(s, k) for c in correct) / len(correct)
