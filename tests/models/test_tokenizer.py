import pytest
from transformers import AutoTokenizer

from grpo_lab.models.tokenizer import CHARSET, EOS, PAD, UNK, build_char_tokenizer


@pytest.fixture(scope="module")
def saved_tok(tmp_path_factory):
    path = tmp_path_factory.mktemp("char-tok")
    build_char_tokenizer().save_pretrained(path)
    return AutoTokenizer.from_pretrained(path)


@pytest.fixture(scope="module", params=["built", "reloaded"])
def tok(request, saved_tok):
    return build_char_tokenizer() if request.param == "built" else saved_tok


@pytest.mark.parametrize(
    "text",
    [
        "37+48=",
        "a b",
        "  leading and trailing  ",
        "sort 5183:",
        "line one\nline two\n",
        "\na\nb\n",
        "7+8=15,3+4+1=8>85",
        CHARSET,
        CHARSET[::-1],
    ],
)
def test_round_trip_one_token_per_char(tok, text):
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text)
    assert tok.decode(ids) == text
    assert tok.convert_ids_to_tokens(ids) == list(text)


@pytest.mark.parametrize("text", ["a\n\nb", "\n\n", "1\n\n\n2"])
def test_round_trip_consecutive_newlines(tok, text):
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.unk_token_id not in ids
    assert tok.decode(ids) == text


def test_vocabulary_layout(tok):
    assert len(tok) == 3 + len(CHARSET) == len(set(CHARSET)) + 3
    assert (tok.pad_token, tok.eos_token, tok.unk_token) == (PAD, EOS, UNK)
    assert len({tok.pad_token_id, tok.eos_token_id, tok.unk_token_id}) == 3
    assert tok.pad_token_id is not None and tok.eos_token_id is not None


def test_special_tokens_are_not_split_and_are_skipped(tok):
    ids = tok("12" + EOS, add_special_tokens=False)["input_ids"]
    assert ids[-1] == tok.eos_token_id and len(ids) == 3
    assert tok.decode(ids, skip_special_tokens=True) == "12"
    assert tok.decode(
        [tok.pad_token_id, *ids[:2], tok.eos_token_id, tok.pad_token_id], skip_special_tokens=True
    ) == ("12")


def test_no_special_tokens_added_by_default(tok):
    assert tok("12")["input_ids"] == tok("12", add_special_tokens=False)["input_ids"]


def test_left_padding(tok):
    assert tok.padding_side == "left"
    enc = tok(["1+2=", "37+48="], padding=True, add_special_tokens=False)
    short, long_ = enc["input_ids"]
    assert enc["attention_mask"] == [[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]]
    assert short[:2] == [tok.pad_token_id] * 2
    assert tok.decode(short, skip_special_tokens=True) == "1+2="
    assert tok.decode(long_) == "37+48="


def test_unknown_chars_map_to_unk(tok):
    ids = tok("A!é1", add_special_tokens=False)["input_ids"]
    assert ids == [tok.unk_token_id] * 3 + [tok.convert_tokens_to_ids("1")]


def test_custom_charset():
    t = build_char_tokenizer("ab")
    assert len(t) == 5
    assert t("abc", add_special_tokens=False)["input_ids"] == [3, 4, t.unk_token_id]
