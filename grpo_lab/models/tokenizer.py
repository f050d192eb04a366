"""Character-level tokenizer for the embedded model: one token per character, so every
task string (digits, operators, spaces, letters) round-trips exactly. Its characters are the tasks'
(`tasks.base.CHARSET`): the model is built for what the tasks write."""

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from grpo_lab.tasks.base import CHARSET

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"


def build_char_tokenizer(charset: str = CHARSET) -> PreTrainedTokenizerFast:
    """WordLevel over single characters, wrapped as a HF fast tokenizer with left padding."""
    vocab = {tok: i for i, tok in enumerate([PAD, EOS, UNK, *charset])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        eos_token=EOS,
        unk_token=UNK,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
