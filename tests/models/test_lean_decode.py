"""The lean path computes the transformers model's function: logits at every decode position and
of the teacher-forced forward, gradients, samples drawn with a fixed generator, LoRA and GQA included."""

import dataclasses

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from grpo_lab.models import lean_decode
from grpo_lab.models.lean_decode import LeanDecoder, shared_prompt_logits, unsupported_reason, use_lean
from grpo_lab.models.loading import load_policy
from grpo_lab.models.logprobs import completion_logits, token_logprobs
from grpo_lab.models.sampler import Rollout, TransformersDecoder, encode_prompts, positions, sample
from grpo_lab.models.tokenizer import build_char_tokenizer

CPU = torch.device("cpu")
PROMPTS = ["1+2=", "37+48=", "5+55=", "123+9="]  # different lengths: left padding on most rows
G, T_MAX = 4, 12
TOL = dict(atol=2e-5, rtol=2e-5)


def perturb(model, pattern, scale=0.5, seed=0):
    """Random values in the parameters whose name contains `pattern` (LoRA B starts at zero)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if pattern in name:
                p.copy_(torch.randn(p.shape, generator=gen) * scale)


def qwen2_gqa():
    """A tiny Qwen2 with grouped-query attention (4 query heads, 2 key/value heads) and q/k/v biases."""
    tok = build_char_tokenizer()
    torch.manual_seed(1)
    cfg = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=None,
        tie_word_embeddings=False,
    )
    model = Qwen2ForCausalLM(cfg).eval()
    perturb(model, "bias", scale=0.2)
    return model, tok


@pytest.fixture(scope="module", params=["llama", "llama-lora", "qwen2-gqa"])
def net(request, tiny_model_path):
    """(model, tokenizer) in eval mode: the tiny Llama, the same under a perturbed LoRA adapter, a Qwen2."""
    if request.param == "qwen2-gqa":
        return qwen2_gqa()
    policy = load_policy(
        tiny_model_path, "arith", None, CPU, lora=request.param == "llama-lora", need_reference=False
    )
    if policy.lora:
        perturb(policy.model, "lora_B")
    return policy.model.eval(), policy.tokenizer


def prompts(tok):
    return encode_prompts(tok, PROMPTS, CPU)


def draw(model, tok, path, *, seed, group_size=G, max_new_tokens=T_MAX, temperature=1.0, **options):
    """`sample` on PROMPTS through forward `path`, with a generator seeded `seed`."""
    ids, mask = prompts(tok)
    return sample(
        model,
        ids,
        mask,
        group_size=group_size,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        eos_id=tok.eos_token_id,
        pad_id=tok.pad_token_id,
        generator=torch.Generator().manual_seed(seed),
        path=path,
        **options,
    )


def test_every_architecture_here_is_supported(net):
    assert unsupported_reason(net[0]) is None
    assert use_lean(net[0])


def test_decode_logits_match_at_every_position(net):
    """Prefill on padded prompts, then the same token stream through both decoders; some rows end
    early (their padding tokens attend but are never attended to)."""
    model, tok = net
    ids, mask = prompts(tok)
    n, p = len(PROMPTS) * G, ids.shape[1]
    assert (mask == 0).any()  # left padding is exercised
    pos = positions(mask)
    lean, ref = LeanDecoder(model, n, p + T_MAX), TransformersDecoder(model)
    gen = torch.Generator().manual_seed(0)
    next_pos = pos[:, -1:].repeat_interleave(G, dim=0) + 1  # (N, 1)
    with torch.no_grad():
        a, b = lean.prefill(ids, mask, pos, G), ref.prefill(ids, mask, pos, G)
        torch.testing.assert_close(a, b, **TOL)
        alive = torch.ones(n, dtype=torch.bool)
        for t in range(T_MAX - 1):
            tok_ids = torch.randint(3, len(tok), (n,), generator=gen)
            if t == 3:
                alive[::3] = False  # these rows ended: from now on they feed padding
            tok_ids = torch.where(alive, tok_ids, tok.pad_token_id)
            a, b = lean.step(tok_ids, alive, next_pos), ref.step(tok_ids, alive, next_pos)
            torch.testing.assert_close(a[alive], b[alive], **TOL)
            assert torch.isfinite(a).all()
            next_pos = next_pos + 1


@pytest.mark.parametrize("temperature", [1.0, 0.7, "per-row"])
def test_same_tokens_as_the_transformers_path(net, temperature):
    model, tok = net
    if temperature == "per-row":
        temperature = torch.linspace(0.5, 1.5, len(PROMPTS) * G)
    rollouts = {
        path: draw(model, tok, path, seed=3, temperature=temperature) for path in ("lean", "transformers")
    }
    lean, ref = rollouts["lean"], rollouts["transformers"]
    assert torch.equal(lean.completion_ids, ref.completion_ids)
    assert torch.equal(lean.completion_mask, ref.completion_mask)
    assert torch.equal(lean.truncated, ref.truncated)
    torch.testing.assert_close(lean.sampler_logp, ref.sampler_logp, **TOL)
    assert len({tuple(r) for r in lean.completion_ids.tolist()}) > len(PROMPTS)  # it really sampled


def test_same_greedy_and_forced_length_as_the_transformers_path(net):
    model, tok = net
    forced = torch.zeros(len(PROMPTS) * 2, dtype=torch.bool)
    forced[1::2] = True
    for greedy, suppress in ((True, None), (False, forced)):
        lean, ref = (
            draw(model, tok, path, seed=5, group_size=2, greedy=greedy, suppress_eos=suppress)
            for path in ("lean", "transformers")
        )
        assert torch.equal(lean.completion_ids, ref.completion_ids)
        assert torch.equal(lean.truncated, ref.truncated)
        if suppress is not None:
            assert lean.truncated[forced].all()


def rollout_with_ends(model, tok, seed=0):
    """A sampled rollout whose completions end at different lengths (some before the last column)."""
    r = draw(model, tok, "transformers", seed=seed)
    ended = r.completion_mask[:, -1] == 0
    if not ended.any():  # a random tiny model rarely samples EOS: end some rows by hand
        cut = torch.arange(len(r.truncated)) % 3 == 0
        comp, cmask = r.completion_ids.clone(), r.completion_mask.clone()
        comp[cut, 4], comp[cut, 5:], cmask[cut, 5:] = tok.eos_token_id, tok.pad_token_id, 0.0
        r = Rollout(r.prompt_ids, r.prompt_mask, comp, cmask, r.sampler_logp * cmask, r.truncated & ~cut)
    return r


def test_shared_prompt_forward_matches_logits_and_gradients(net):
    model, tok = net
    r = rollout_with_ends(model, tok)
    valid = r.completion_mask.bool()
    assert (~valid).any()
    model.train()
    try:
        grads = {}
        for path in ("lean", "transformers"):
            model.zero_grad(set_to_none=True)
            logits = completion_logits(model, r, 0.8, path=path)  # (N, T, V)
            logp = token_logprobs(logits, r.completion_ids)
            (logp * r.completion_mask).sum().backward()
            grads[path] = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
            if path == "lean":
                lean_logits = logits.detach()
        ref_logits = logits.detach()
    finally:
        model.zero_grad(set_to_none=True)
        model.eval()
    torch.testing.assert_close(lean_logits[valid], ref_logits[valid], **TOL)
    assert grads["lean"].keys() == grads["transformers"].keys() and grads["lean"]
    for name, g in grads["transformers"].items():
        torch.testing.assert_close(
            grads["lean"][name], g, atol=1e-5 * max(1.0, float(g.abs().max())), rtol=1e-4
        )


def test_shared_prompt_forward_on_mixed_rows_and_single_tokens(net):
    """Rows of one prompt need not be adjacent (micro-batches, merged refills); one-token completions."""
    model, tok = net
    r = rollout_with_ends(model, tok, seed=1)
    rows = torch.randperm(len(r.truncated), generator=torch.Generator().manual_seed(0))[:7]
    sub = r.select(rows)
    one_token = dataclasses.replace(
        sub,
        completion_ids=sub.completion_ids[:, :1],
        completion_mask=sub.completion_mask[:, :1],
        sampler_logp=sub.sampler_logp[:, :1],
    )
    with torch.no_grad():
        for part in (sub, one_token):
            valid = part.completion_mask.bool()
            lean = shared_prompt_logits(
                model, part.prompt_ids, part.prompt_mask, part.completion_ids, part.completion_mask
            )
            ref = completion_logits(model, part, 1.0, path="transformers")
            assert lean.shape == ref.shape
            torch.testing.assert_close(lean[valid], ref[valid], **TOL)


def test_activation_checkpointing_gives_the_same_gradients(tiny_model_path, monkeypatch):
    policy = load_policy(tiny_model_path, "arith", None, CPU, need_reference=False)
    model, tok = policy.model, policy.tokenizer
    r = rollout_with_ends(model.eval(), tok)
    model.train()
    recomputed = []

    def counting(fn, *args, **kwargs):
        recomputed.append(args[0])
        return torch.utils.checkpoint.checkpoint(fn, *args, **kwargs)

    monkeypatch.setattr(lean_decode, "checkpoint", counting)
    grads = []
    for checkpointing in (False, True):
        if checkpointing:
            assert not recomputed
            model.activation_checkpointing_enable(every_n_layers=2)  # layer 0 only
        model.zero_grad(set_to_none=True)
        logp = token_logprobs(completion_logits(model, r, 1.0, path="lean"), r.completion_ids)
        (logp * r.completion_mask).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    assert recomputed == [0]  # layer 0, prompts and completions in one call
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, **TOL)


def test_reads_the_live_weights(tiny_model_path):
    """No copy goes stale: after an optimizer step the lean path samples the updated policy."""
    policy = load_policy(tiny_model_path, "arith", None, CPU, need_reference=False)
    model, tok = policy.model.eval(), policy.tokenizer
    ids, mask = prompts(tok)
    pos = positions(mask)
    before = LeanDecoder(model, len(PROMPTS), ids.shape[1] + 1).prefill(ids, mask, pos, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    model(input_ids=ids).logits.square().mean().backward()
    opt.step()
    with torch.no_grad():
        after = LeanDecoder(model, len(PROMPTS), ids.shape[1] + 1).prefill(ids, mask, pos, 1)
        ref = TransformersDecoder(model).prefill(ids, mask, pos, 1)
    assert (after - before).abs().max() > 1e-3
    torch.testing.assert_close(after, ref, **TOL)


def test_lora_reference_runs_with_the_adapter_off(tiny_model_path):
    policy = load_policy(tiny_model_path, "arith", None, CPU, lora=True, need_reference=False)
    perturb(policy.model, "lora_B")
    model, tok = policy.model.eval(), policy.tokenizer
    r = rollout_with_ends(model, tok)
    valid = r.completion_mask.bool()
    with torch.no_grad(), policy.as_reference() as ref:
        lean_ref = completion_logits(ref, r, 1.0, path="lean")
        hf_ref = completion_logits(ref, r, 1.0, path="transformers")
    with torch.no_grad():
        adapted = completion_logits(model, r, 1.0, path="lean")
    torch.testing.assert_close(lean_ref[valid], hf_ref[valid], **TOL)
    assert (adapted - lean_ref)[valid].abs().max() > 1e-2


def unsupported_models():
    tok = build_char_tokenizer()
    base = dict(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=None,
    )
    dynamic = LlamaConfig(**base, rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4})
    sliding = Qwen2Config(**base, use_sliding_window=True, sliding_window=4, max_window_layers=0)

    class Subclass(LlamaForCausalLM):
        pass

    return {
        "RoPE type 'dynamic'": LlamaForCausalLM(dynamic),
        "sliding-window": Qwen2ForCausalLM(sliding),
        "architecture Subclass": Subclass(LlamaConfig(**base)),
    }, tok


def test_unsupported_models_fall_back_or_refuse():
    models, tok = unsupported_models()
    for reason, model in models.items():
        model.eval()
        assert reason in unsupported_reason(model)
        assert not use_lean(model)
        with pytest.raises(ValueError, match="lean path does not support"):
            use_lean(model, "lean")
        auto, ref = (
            draw(model, tok, path, seed=0, group_size=2, max_new_tokens=4) for path in (None, "transformers")
        )
        assert torch.equal(auto.completion_ids, ref.completion_ids)


def test_path_switch(tiny_model_path, monkeypatch):
    model = load_policy(tiny_model_path, "arith", None, CPU, need_reference=False).model
    assert use_lean(model, "auto") and use_lean(model, "lean") and not use_lean(model, "transformers")
    with pytest.raises(ValueError, match="unknown forward path 'fast'; valid: auto, lean, transformers"):
        use_lean(model, "fast")
    monkeypatch.setattr(lean_decode, "DEFAULT_PATH", "transformers")
    assert not use_lean(model)
    assert use_lean(model, "lean")  # an explicit path wins over the default


@pytest.mark.parametrize("precision", ["bf16-autocast", "bf16-weights"])
def test_low_precision_agrees_to_bf16_tolerance(tiny_model_path, precision):
    """What CUDA runs (bf16 autocast) and the low-precision sampler fault (a bf16 copy), on CPU."""
    policy = load_policy(tiny_model_path, "arith", None, CPU, need_reference=False)
    model, tok = policy.model.eval(), policy.tokenizer
    if precision == "bf16-weights":
        model = model.to(torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-autocast"):
        lean, ref = (draw(model, tok, path, seed=0) for path in ("lean", "transformers"))
        valid = ref.completion_mask.bool()
        forward = (
            completion_logits(model, ref, 1.0, path="lean"),
            completion_logits(model, ref, 1.0, path="transformers"),
        )
    assert forward[0].dtype == forward[1].dtype == torch.float32
    bf16 = dict(atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(forward[0][valid], forward[1][valid], **bf16)
    # at this precision a near-tie may send a row down another path now and then: compare the rows that agree
    t = min(lean.completion_ids.shape[1], ref.completion_ids.shape[1])
    same = (lean.completion_ids[:, :t] == ref.completion_ids[:, :t]).all(-1)
    assert same.float().mean() > 0.9
    torch.testing.assert_close(lean.sampler_logp[same, :t], ref.sampler_logp[same, :t], **bf16)
