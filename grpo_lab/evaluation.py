"""Validation on a task's held-out prompts, under the name the studies, the benchmarks and the docs
import it by: the measures live in `grpo_lab.models.evaluation` (the embedded model's warm start
stops on them, so they sit in the models layer) and the prompt encoding in `grpo_lab.models.sampler`."""

from grpo_lab.models.evaluation import VAL_SEED, evaluate, sampled_correct, sampling_seed
from grpo_lab.models.sampler import decode, encode_prompts

__all__ = ["VAL_SEED", "decode", "encode_prompts", "evaluate", "sampled_correct", "sampling_seed"]
