"""Greedy validation: accuracy and mean reward of a model on a task's held-out prompts."""

import torch

from grpo_lab.models.sampler import sample
from grpo_lab.rewards import score
from grpo_lab.tasks.base import Example, Task


def encode_prompts(tokenizer, prompts: list[str], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    enc = tokenizer(prompts, padding=True, return_tensors="pt", add_special_tokens=False)
    return enc["input_ids"].to(device), enc["attention_mask"].to(device)


def decode(tokenizer, ids: torch.Tensor, mask: torch.Tensor) -> list[str]:
    """Completions as text, EOS and padding dropped."""
    return [tokenizer.decode(row[m.bool()], skip_special_tokens=True) for row, m in zip(ids, mask)]


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
