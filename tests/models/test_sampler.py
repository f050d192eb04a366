import pytest
import torch

from grpo_lab.models.loading import load_policy
from grpo_lab.models.logprobs import completion_logits, token_logprobs
from grpo_lab.models.sampler import MULTINOMIAL_MAX_VOCAB, draw, encode_prompts, positions, sample

CPU = torch.device("cpu")
PROMPTS = ["1+2=", "37+48=", "5+55="]
G, T_MAX = 16, 20


def load(path, **kwargs):
    return load_policy(path, "arith", None, CPU, need_reference=kwargs.pop("need_reference", False), **kwargs)


def perturb_lora(model, seed=0):
    gen = torch.Generator().manual_seed(seed)
    names = []
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
                names.append(name)
    assert names


def run(policy, temperature=1.0, seed=0, greedy=False, group_size=G, prompts=PROMPTS, max_new=T_MAX):
    tok = policy.tokenizer
    ids, mask = encode_prompts(tok, prompts, CPU)
    gen = torch.Generator().manual_seed(seed)
    return sample(
        policy.model,
        ids,
        mask,
        group_size,
        max_new,
        temperature,
        tok.eos_token_id,
        tok.pad_token_id,
        gen,
        greedy,
    )


@pytest.fixture(scope="module")
def policy(tiny_model_path):
    p = load(tiny_model_path)
    p.model.eval()
    return p


@pytest.fixture(scope="module")
def lora_policy(tiny_model_path):
    p = load(tiny_model_path, lora=True)
    perturb_lora(p.model)
    p.model.eval()
    return p


@pytest.fixture(scope="module")
def rollout(policy):
    return run(policy)


def test_shapes(policy, rollout):
    n = len(PROMPTS) * G
    p = rollout.prompt_ids.shape[1]
    assert p == max(map(len, PROMPTS))
    t = rollout.completion_ids.shape[1]
    assert 1 <= t <= T_MAX
    assert rollout.prompt_mask.shape == (n, p)
    assert (
        rollout.completion_ids.shape == rollout.completion_mask.shape == rollout.sampler_logp.shape == (n, t)
    )
    assert rollout.truncated.shape == (n,) and rollout.truncated.dtype == torch.bool
    assert rollout.completion_mask.dtype == torch.float32
    assert rollout.input_ids().shape == rollout.attention_mask().shape == (n, p + t)
    assert torch.equal(rollout.lengths, rollout.completion_mask.sum(-1))
    # each prompt repeated G times, contiguously
    ids, mask = encode_prompts(policy.tokenizer, PROMPTS, CPU)
    assert torch.equal(rollout.prompt_ids, ids.repeat_interleave(G, dim=0))
    assert torch.equal(rollout.prompt_mask, mask.repeat_interleave(G, dim=0))
    sub = rollout.select(torch.tensor([0, 5]))
    assert torch.equal(sub.completion_ids, rollout.completion_ids[[0, 5]])
    assert torch.equal(sub.truncated, rollout.truncated[[0, 5]])


def test_mask_eos_padding_and_truncation(policy, rollout):
    eos, pad = policy.tokenizer.eos_token_id, policy.tokenizer.pad_token_id
    ids, mask, t = rollout.completion_ids, rollout.completion_mask, rollout.completion_ids.shape[1]
    has_eos = (ids == eos).any(-1)
    assert torch.equal(rollout.truncated, ~has_eos)
    # the test means something only if both kinds of row occur
    assert has_eos.any() and (~has_eos).any()
    for row_ids, row_mask, trunc in zip(ids.tolist(), mask.tolist(), rollout.truncated.tolist()):
        if trunc:
            assert row_mask == [1.0] * t
            assert t == T_MAX
        else:
            first = row_ids.index(eos)
            assert row_mask == [1.0] * (first + 1) + [0.0] * (t - first - 1)
            assert row_ids[first + 1 :] == [pad] * (t - first - 1)
            assert eos not in row_ids[first + 1 :]
    assert (rollout.sampler_logp[mask == 0] == 0).all()
    assert (rollout.sampler_logp[mask == 1] < 0).all()


def test_attention_mask_covers_completion(rollout):
    am = rollout.attention_mask()
    p = rollout.prompt_ids.shape[1]
    assert torch.equal(am[:, p:], rollout.completion_mask.long())
    assert torch.equal(am[:, :p], rollout.prompt_mask)


def assert_sampler_logp_matches(policy, r, temperature):
    lp = token_logprobs(completion_logits(policy.model, r, temperature), r.completion_ids)
    valid = r.completion_mask.bool()
    assert valid.sum() > len(PROMPTS) * G
    torch.testing.assert_close(r.sampler_logp[valid], lp[valid], atol=1e-5, rtol=0)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampler_logprobs_match_a_full_forward(policy, temperature):
    r = run(policy, temperature=temperature)
    assert_sampler_logp_matches(policy, r, temperature)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampler_logprobs_match_a_full_forward_with_lora(lora_policy, temperature):
    r = run(lora_policy, temperature=temperature)
    assert_sampler_logp_matches(lora_policy, r, temperature)


def test_temperature_changes_logprobs(policy):
    r = run(policy, temperature=0.7)
    valid = r.completion_mask.bool()
    lp1 = token_logprobs(completion_logits(policy.model, r, 1.0), r.completion_ids)
    assert not torch.allclose(r.sampler_logp[valid], lp1[valid], atol=1e-3)


def test_same_seed_same_samples_different_seed_different(policy, rollout):
    again = run(policy, seed=0)
    assert torch.equal(again.completion_ids, rollout.completion_ids)
    assert torch.equal(again.sampler_logp, rollout.sampler_logp)
    other = run(policy, seed=1)
    t = min(other.completion_ids.shape[1], rollout.completion_ids.shape[1])
    assert not torch.equal(other.completion_ids[:, :t], rollout.completion_ids[:, :t])


def test_group_members_differ_when_sampling(rollout):
    first_group = rollout.completion_ids[:G]
    assert len({tuple(row) for row in first_group.tolist()}) > 1


def test_greedy_is_argmax_of_full_forward(policy):
    r = run(policy, greedy=True, group_size=2)
    assert torch.equal(r.completion_ids[0::2], r.completion_ids[1::2])  # greedy copies agree
    valid = r.completion_mask.bool()
    logits = completion_logits(policy.model, r, 1.0)
    assert torch.equal(logits.argmax(-1)[valid], r.completion_ids[valid])
    # and step by step on the unpadded prompt, without cache or padding
    tok = policy.tokenizer
    for row, prompt in zip(range(0, len(r.truncated), 2), PROMPTS):
        ids = tok(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
        for t in range(int(r.lengths[row])):
            with torch.no_grad():
                nxt = policy.model(input_ids=ids).logits[0, -1].argmax()
            assert int(nxt) == int(r.completion_ids[row, t])
            ids = torch.cat([ids, nxt.view(1, 1)], dim=1)


def test_greedy_ignores_the_generator(policy):
    a = run(policy, greedy=True, seed=0, group_size=1)
    b = run(policy, greedy=True, seed=123, group_size=1)
    assert torch.equal(a.completion_ids, b.completion_ids)


def test_positions_start_at_first_real_token():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 1, 1, 0, 1]])
    assert positions(mask).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4], [0, 0, 1, 1, 2]]


def test_lora_reference_is_the_base_model(tiny_model_path, lora_policy):
    base = load(tiny_model_path).model.eval()
    x = lora_policy.tokenizer(["37+48=85"], add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        base_logits = base(input_ids=x).logits
        adapted = lora_policy.model(input_ids=x).logits
        with lora_policy.as_reference() as ref:
            ref_logits = ref(input_ids=x).logits
        after = lora_policy.model(input_ids=x).logits
    assert lora_policy.reference is None and lora_policy.lora
    torch.testing.assert_close(ref_logits, base_logits)
    assert (adapted - base_logits).abs().max() > 1e-2
    torch.testing.assert_close(after, adapted)  # the adapter is back on


def test_lora_trains_only_the_adapter(lora_policy):
    trainable = [n for n, p in lora_policy.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)


def test_reference_is_a_frozen_copy(tiny_model_path):
    policy = load(tiny_model_path, need_reference=True)
    ref = policy.reference
    assert ref is not None and ref is not policy.model and not policy.lora
    assert not ref.training
    assert all(not p.requires_grad for p in ref.parameters())
    assert all(p.requires_grad for p in policy.model.parameters())
    before = {n: p.detach().clone() for n, p in ref.named_parameters()}
    x = torch.tensor([[13, 14, 15, 16]])
    with torch.no_grad():
        ref_before = ref(input_ids=x).logits
    opt = torch.optim.SGD(policy.model.parameters(), lr=1.0)
    policy.model(input_ids=x).logits.square().mean().backward()
    opt.step()
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(0.1)
        moved = policy.model(input_ids=x).logits
    for n, p in ref.named_parameters():
        assert torch.equal(p, before[n]), n
    with policy.as_reference() as r, torch.no_grad():
        assert r is ref
        torch.testing.assert_close(r(input_ids=x).logits, ref_before)
    assert (moved - ref_before).abs().max() > 1e-2


def test_missing_reference_raises(policy):
    assert policy.reference is None
    with pytest.raises(RuntimeError, match="reference model was not built"):
        with policy.as_reference():
            pass


def test_a_small_vocabulary_draws_with_multinomial_bit_for_bit():
    logp = torch.log_softmax(torch.randn(6, MULTINOMIAL_MAX_VOCAB), -1)
    expected = torch.multinomial(logp.exp(), 1, generator=torch.Generator().manual_seed(3)).squeeze(-1)
    assert torch.equal(draw(logp, torch.Generator().manual_seed(3)), expected)


def test_a_large_vocabulary_draws_from_the_same_distribution():
    """The inverse-CDF draw: each token's frequency within 4 standard errors of its probability, and a
    token of probability 0 (a suppressed EOS, the vocabulary's last row) never drawn."""
    v = MULTINOMIAL_MAX_VOCAB + 1
    logits = torch.full((v,), -30.0)
    logits[:5] = torch.tensor([0.0, 1.0, -1.0, 2.0, 0.5])
    logits[-1] = -torch.inf
    probs = torch.softmax(logits, -1)
    n = 40_000
    tokens = draw(torch.log_softmax(logits, -1).expand(n, v), torch.Generator().manual_seed(0))  # (n,)
    counts = torch.bincount(tokens, minlength=v).double()
    assert counts[-1] == 0 and counts[5:].sum() <= 2  # the rest: 4,091 tokens of probability ~1e-13
    se = (probs[:5] * (1 - probs[:5]) / n).sqrt()
    assert ((counts[:5] / n - probs[:5]).abs() < 4 * se).all()
