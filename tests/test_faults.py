"""Fault injectors change what they should and nothing else; the reward-hacking terms pay as designed."""

import pytest
import torch

from grpo_lab.rewards import score
from grpo_lab.tasks.hacking import HACKING_REWARDS, format_strict, length_bonus, verbose
from grpo_lab.training import faults

G, B, T = 4, 6, 5
N = G * B
LOW, HIGH = 0.0, 1.0


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def distinct_rewards() -> torch.Tensor:
    return torch.linspace(0.05, 0.95, N)  # (N,) inside (LOW, HIGH), none equal to its flip


def rollout(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Distinct completions: ids (N, T) with EOS=1 at varying places, mask, sampler log-probs, truncated."""
    g = gen(seed)
    ids = torch.randint(3, 20, (N, T), generator=g)  # (N, T)
    lengths = torch.randint(1, T + 1, (N,), generator=g)  # (N,)
    truncated = (lengths == T) | (torch.arange(N) % 3 == 0)  # (N,) some rows run to the budget, no EOS
    lengths = torch.where(truncated, torch.full_like(lengths, T), lengths)
    col = torch.arange(T)
    mask = (col[None, :] < lengths[:, None]).float()  # (N, T)
    eos_at = (col[None, :] == lengths[:, None] - 1) & ~truncated[:, None]  # (N, T)
    ids = torch.where(eos_at, torch.ones_like(ids), ids)
    ids = torch.where(mask.bool(), ids, torch.zeros_like(ids))  # pad id 0
    ids[:, 0] = torch.arange(N) + 30  # every row unique
    logp = -torch.rand(N, T, generator=g) * mask  # (N, T)
    return ids, mask, logp, truncated


# --- select_rows -------------------------------------------------------------------------------------


@pytest.mark.parametrize("fraction, expected", [(0.0, 0), (0.25, 6), (0.5, 12), (1.0, 24)])
def test_select_rows_exact_count_and_seeded(fraction, expected):
    rows = faults.select_rows(N, fraction, gen(3))
    assert rows.dtype == torch.bool and rows.shape == (N,) and int(rows.sum()) == expected
    assert torch.equal(rows, faults.select_rows(N, fraction, gen(3)))


def test_select_rows_rejects_bad_fraction():
    with pytest.raises(ValueError):
        faults.select_rows(N, 1.5, gen())


# --- reward_noise ------------------------------------------------------------------------------------


def test_reward_noise_off_is_bit_identical_and_draws_nothing():
    r = distinct_rewards()
    g = gen(1)
    state = g.get_state()
    out, stats = faults.reward_noise(r, G, 0.0, 0.0, 1.0, LOW, HIGH, g)
    assert torch.equal(out.view(torch.int32), r.view(torch.int32))
    assert torch.equal(g.get_state(), state)
    assert stats and all(k.startswith("fault/") and v == 0.0 for k, v in stats.items())


def test_flips_hit_only_the_chosen_groups():
    r = distinct_rewards()
    out, stats = faults.reward_noise(r, G, 0.0, 1.0, 0.5, LOW, HIGH, gen(2))
    hit = torch.isclose(out, LOW + HIGH - r).view(B, G).all(dim=1)  # (B,) groups flipped entirely
    assert int(hit.sum()) == B // 2
    for b in range(B):  # the other groups are bit-identical
        rows = slice(b * G, (b + 1) * G)
        assert bool(hit[b]) or torch.equal(out[rows], r[rows])
    assert stats["fault/reward_groups_frac"] == 0.5 and stats["fault/reward_flip_frac"] == 0.5


def test_noise_only_in_chosen_groups_and_flip_prob_zero_flips_nothing():
    r = distinct_rewards()
    out, stats = faults.reward_noise(r, G, 0.3, 0.0, 1 / 3, LOW, HIGH, gen(4))
    changed = (out != r).view(B, G)  # (B, G)
    assert int(changed.all(dim=1).sum()) == 2 and int(changed.any(dim=1).sum()) == 2
    assert stats["fault/reward_flip_frac"] == 0.0 and stats["fault/reward_abs_change"] > 0


def test_strength_does_not_change_which_groups_are_hit():
    r = distinct_rewards()
    weak, _ = faults.reward_noise(r, G, 0.01, 0.0, 0.5, LOW, HIGH, gen(5))
    strong, _ = faults.reward_noise(r, G, 1.0, 0.3, 0.5, LOW, HIGH, gen(5))
    assert torch.equal((weak != r).view(B, G).any(1), (strong != r).view(B, G).any(1))


def test_nan_rewards_stay_nan_and_noise_is_seeded():
    r = distinct_rewards()
    r[[0, 5, 17]] = float("nan")
    a, _ = faults.reward_noise(r, G, 0.5, 0.5, 1.0, LOW, HIGH, gen(6))
    b, _ = faults.reward_noise(r, G, 0.5, 0.5, 1.0, LOW, HIGH, gen(6))
    c, _ = faults.reward_noise(r, G, 0.5, 0.5, 1.0, LOW, HIGH, gen(7))
    assert torch.equal(a.isnan(), r.isnan())
    assert torch.allclose(a, b, equal_nan=True)
    assert not torch.allclose(a, c, equal_nan=True)


def test_reward_noise_validates():
    with pytest.raises(ValueError):
        faults.reward_noise(distinct_rewards(), 5, 0.1, 0.0, 1.0, LOW, HIGH, gen())
    with pytest.raises(ValueError):
        faults.reward_noise(distinct_rewards(), G, -0.1, 0.0, 1.0, LOW, HIGH, gen())


# --- repeat_samples ----------------------------------------------------------------------------------


def test_repeat_zero_is_identity_and_draws_nothing():
    tensors = rollout()
    g = gen(1)
    state = g.get_state()
    out, stats = faults.repeat_samples(*tensors, G, 0, g)
    assert all(o is t for o, t in zip(out, tensors)) and stats["fault/repeat_frac"] == 0.0
    assert torch.equal(g.get_state(), state)


def test_repeat_all_but_one_makes_groups_constant_copies_of_a_member():
    tensors = rollout()
    out, stats = faults.repeat_samples(*tensors, G, G - 1, gen(2))
    for new, old in zip(out, tensors):
        assert new.shape == old.shape and new.dtype == old.dtype
        for b in range(B):
            group = new[b * G : (b + 1) * G]
            assert all(torch.equal(row, group[0]) for row in group)
    ids = out[0]
    for b in range(B):  # the copied row is one of the group's own, the same one in all four tensors
        src = [i for i in range(b * G, (b + 1) * G) if torch.equal(tensors[0][i], ids[b * G])]
        assert len(src) == 1
        assert torch.equal(out[2][b * G], tensors[2][src[0]]) and out[3][b * G] == tensors[3][src[0]]
    assert stats["fault/repeat_frac"] == (G - 1) / G


@pytest.mark.parametrize("k", [1, 2])
def test_repeat_k_replaces_k_rows_per_group_with_one_member(k):
    tensors = rollout()
    (ids, *_), _ = faults.repeat_samples(*tensors, G, k, gen(3))
    old = tensors[0]
    for b in range(B):
        rows = range(b * G, (b + 1) * G)
        changed = [i for i in rows if not torch.equal(ids[i], old[i])]
        assert len(changed) == k
        copies = {int(ids[i, 0]) for i in changed}
        assert len(copies) == 1 and copies <= {int(old[i, 0]) for i in rows}
        assert sum(int(ids[i, 0]) in copies for i in rows) == k + 1


def test_repeat_is_seeded_and_validates_k():
    tensors = rollout()
    a, _ = faults.repeat_samples(*tensors, G, 2, gen(4))
    b, _ = faults.repeat_samples(*tensors, G, 2, gen(4))
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    with pytest.raises(ValueError):
        faults.repeat_samples(*tensors, G, G, gen())


# --- junk_padding ------------------------------------------------------------------------------------

EOS, PAD = 1, 0
JUNK = torch.tensor([40, 41, 42])


def test_junk_padding_touches_only_selected_rows():
    ids, mask, _, truncated = rollout()
    rows = faults.select_rows(N, 0.25, gen(5))
    max_len = T + 3
    (new_ids, new_mask, new_trunc), stats = faults.junk_padding(
        ids, mask, truncated, rows, max_len, JUNK, EOS, PAD, gen(6)
    )
    assert new_ids.shape == new_mask.shape == (N, max_len)
    # unselected rows: same tokens, padded with pad and mask 0 beyond T
    keep = ~rows
    assert torch.equal(new_ids[keep, :T], ids[keep]) and torch.equal(new_mask[keep, :T], mask[keep])
    assert (new_ids[keep, T:] == PAD).all() and (new_mask[keep, T:] == 0).all()
    assert torch.equal(new_trunc[keep], truncated[keep])
    # selected rows: the text before EOS kept, then junk to max_len, no EOS, all valid, truncated
    for i in torch.nonzero(rows).flatten().tolist():
        kept = int(mask[i].sum()) - (0 if truncated[i] else 1)
        assert torch.equal(new_ids[i, :kept], ids[i, :kept])
        assert torch.isin(new_ids[i, kept:], JUNK).all() and not (new_ids[i] == EOS).any()
        assert (new_mask[i] == 1).all() and bool(new_trunc[i])
    assert stats["fault/junk_rows_frac"] == 0.25 and stats["fault/junk_tokens_mean"] > 3


def test_junk_padding_without_selection_is_identity_and_seeded_otherwise():
    ids, mask, _, truncated = rollout()
    none = torch.zeros(N, dtype=torch.bool)
    g = gen(1)
    state = g.get_state()
    out, _ = faults.junk_padding(ids, mask, truncated, none, T + 2, JUNK, EOS, PAD, g)
    assert out[0] is ids and out[1] is mask and out[2] is truncated and torch.equal(g.get_state(), state)
    rows = faults.select_rows(N, 0.5, gen(2))
    a, _ = faults.junk_padding(ids, mask, truncated, rows, T, JUNK, EOS, PAD, gen(3))
    b, _ = faults.junk_padding(ids, mask, truncated, rows, T, JUNK, EOS, PAD, gen(3))
    assert all(torch.equal(x, y) for x, y in zip(a, b)) and a[0].shape == (N, T)


def test_junk_padding_validates():
    ids, mask, _, truncated = rollout()
    rows = torch.ones(N, dtype=torch.bool)
    with pytest.raises(ValueError):
        faults.junk_padding(ids, mask, truncated, rows, T - 1, JUNK, EOS, PAD, gen())
    with pytest.raises(ValueError):
        faults.junk_padding(ids, mask, truncated, rows, T, torch.tensor([EOS, 5]), EOS, PAD, gen())


# --- reward-hacking terms ----------------------------------------------------------------------------


def test_length_bonus_pays_for_length_and_saturates():
    values = length_bonus(["p"] * 4, ["", "12", "x" * 10, "x" * 50])
    assert values == [0.0, 0.1, 0.5, 1.0]


def test_format_strict_and_verbose_pull_apart():
    short, long = ["1358", ">85", "-7"], ["7+8=15,3+4+1=8>85", "the answer is 85 because " * 2]
    prompts = ["p"] * 5
    strict, wordy = format_strict(prompts, short + long), verbose(prompts, short + long)
    assert strict == [1.0, 1.0, 1.0, 0.0, 0.0]
    assert all(s > w for s, w in zip(strict[:3], wordy[:3]))
    assert all(w > s for s, w in zip(strict[3:], wordy[3:]))
    assert format_strict(["p"] * 2, ["1234567", "12 "]) == [0.0, 0.0]


def test_hacking_rewards_fit_the_scoring_convention():
    funcs = list(HACKING_REWARDS.items())
    assert set(HACKING_REWARDS) == {"length_bonus", "format_strict", "verbose"}
    rewards, per_func = score(funcs, [1.0] * 3, ["2+2="] * 2, ["4", "four!"], answer=["4", "4"])
    assert rewards.shape == (2,) and set(per_func) == set(HACKING_REWARDS)


def test_stale_sampler_samples_with_the_policy_of_k_updates_ago_and_checkpoints_its_history():
    policy = torch.nn.Linear(2, 1, bias=False)
    sampler = faults.Sampler(policy, stale_k=1, dtype="none")
    weights = []
    for value in (1.0, 2.0, 3.0):
        policy.weight.data.fill_(value)
        weights.append(float(sampler.weights(policy).weight[0, 0]))
    assert weights == [1.0, 1.0, 2.0]
    again = faults.Sampler(policy, stale_k=1, dtype="none")
    again.load_state_dict(sampler.state_dict())
    policy.weight.data.fill_(4.0)
    assert float(again.weights(policy).weight[0, 0]) == 3.0
