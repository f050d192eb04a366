"""A Qwen2-shaped model with Qwen2.5's vocabulary and random weights, built from its config and saved once.

The model has Qwen2.5's 151,936 output rows on a small body (hidden 256, 4 layers, GQA, tied embeddings,
about 43M parameters), beside a small byte-level BPE tokenizer trained here on generated text (the rows
beyond the tokenizer are tokens it never produces): the shape where the output layer, not the body,
decides the memory of the log-prob path. No hub access is needed. `benchmarks/logprob_memory.py` builds
it on first use; `grpo-lab bench --model DIR` and any config's `model=DIR` load it like a user's model.
Usage:

    python benchmarks/qwen_vocab_model.py DIR"""

import argparse
import random
from pathlib import Path

QWEN_VOCAB = 151_936
"""Qwen2.5's vocabulary: the output layer's rows"""


def corpus(lines: int, seed: int = 0) -> list[str]:
    """Generated text for the tokenizer: sums as the arith task writes them, and made-up words."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    out = []
    for _ in range(lines):
        a, b = rng.randrange(100), rng.randrange(100)
        words = " ".join("".join(rng.choices(letters, k=rng.randrange(2, 8))) for _ in range(5))
        out.append(f"{a}+{b}={a + b} {words}")
    return out


def build_model(path: Path) -> None:
    """The Qwen2-shaped model with random weights and its BPE tokenizer, saved at `path`."""
    import torch
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(corpus(20_000), vocab_size=1000, special_tokens=["<pad>", "<eos>"])
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, pad_token="<pad>", eos_token="<eos>")
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=QWEN_VOCAB,
        hidden_size=256,
        intermediate_size=1024,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=None,
    )
    Qwen2ForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("dir", type=Path, help="where to save the model (created if absent)")
    args = parser.parse_args()
    if (args.dir / "config.json").exists():
        print(f"{args.dir} already holds a model; nothing to do")
        return
    build_model(args.dir)
    print(f"saved the Qwen-vocabulary model at {args.dir}")


if __name__ == "__main__":
    main()
