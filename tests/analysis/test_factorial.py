"""Main effects of a factorial screen on synthetic scores with known effects: the estimates recover
them (interactions do not bias them at resolution IV), the intervals cover at their level over
repeated noise, the two variance estimates, the verdicts, the alias table and the errors; and a
replicated design fitted saturated, on pure error, with Lenth's check and the half-normal plot."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from grpo_lab.analysis import factorial
from grpo_lab.experiments.designs import factorial_matrix

NAMES = [f"f{i:02d}" for i in range(16)]
EFFECTS = np.array([0.2, -0.15, 0.1, 0, 0, 0.05, 0, 0, -0.08, 0, 0, 0, 0.3, 0, 0, 0])
"""the true main effects (on minus off) of the 16 factors"""


def synthetic(
    blocks: int, sd: float, rng: np.random.Generator, interaction: float = 0.0, names=NAMES, effects=EFFECTS
) -> pd.DataFrame:
    """One score per run of the 32-run resolution IV design in each seed block: a block level, half
    of each main effect times the factor's +-1, `interaction` times f00×f01, and noise of sd `sd`."""
    x = factorial_matrix(names).to_numpy()  # (runs, factors)
    frames = []
    for seed in range(blocks):
        level = 0.5 + 0.1 * rng.standard_normal()  # the block's own level: it cancels from every effect
        y = level + x @ effects / 2 + interaction * x[:, 0] * x[:, 1] + sd * rng.standard_normal(len(x))
        frame = pd.DataFrame(x > 0, columns=names)
        frames.append(frame.assign(seed=seed, score=y))
    return pd.concat(frames, ignore_index=True)


def test_effects_are_mean_on_minus_mean_off_and_interactions_do_not_bias_them():
    scored = synthetic(3, 0.0, np.random.default_rng(0), interaction=0.4)
    table = factorial.main_effects(scored, margin=0.05).set_index("factor")
    assert list(table.index) == NAMES
    np.testing.assert_allclose(table["effect"], EFFECTS, atol=1e-12)  # f00×f01 is aliased with no main effect
    direct = scored.groupby("f05")["score"].mean()
    assert table.loc["f05", "effect"] == pytest.approx(direct[True] - direct[False])
    assert (table["seeds"] == 3).all() and (table["runs"] == 96).all()


def test_blocks_recover_the_effects_with_the_spread_of_the_block_estimates():
    rng = np.random.default_rng(1)
    scored = synthetic(4, 0.05, rng)
    table = factorial.main_effects(scored, margin=0.05, variance=factorial.BETWEEN_BLOCKS)
    table = table.set_index("factor")
    assert (table["variance"] == factorial.BETWEEN_BLOCKS).all() and (table["df"] == 3).all()
    assert (table["ci_low"] < table["effect"]).all() and (table["effect"] < table["ci_high"]).all()
    # 4 blocks of 32 runs: the sd of one effect is 2 * 0.05 / sqrt(128) ~ 0.009
    np.testing.assert_allclose(table["effect"], EFFECTS, atol=0.04)
    assert table.loc["f12", "verdict"] == "better" and table.loc["f01", "verdict"] == "worse"
    # the MDE is (t(0.975, 3) + t(0.8, 3)) times the standard error: 4.16 / 3.18 of the half-width
    half = (table["ci_high"] - table["ci_low"]) / 2
    np.testing.assert_allclose(table["mde"] / half, 4.1588 / 3.1824, rtol=1e-3)
    # each factor's own spread: the interval of f00 equals the paired t-interval of its block effects
    per_block = [
        block.groupby("f00")["score"].mean()[True] - block.groupby("f00")["score"].mean()[False]
        for _, block in scored.groupby("seed")
    ]
    se = np.std(per_block, ddof=1) / 2
    assert table.loc["f00", "ci_high"] - table.loc["f00", "effect"] == pytest.approx(3.1824 * se, rel=1e-4)


@pytest.mark.parametrize(
    "blocks, variance",
    [(1, factorial.POOLED_INTERACTIONS), (3, factorial.POOLED_INTERACTIONS), (4, factorial.BETWEEN_BLOCKS)],
)
def test_intervals_cover_the_true_effects_at_their_level(blocks, variance):
    rng = np.random.default_rng(2)
    covered = []
    for _ in range(60):
        table = factorial.main_effects(synthetic(blocks, 0.1, rng), margin=0.05, variance=variance)
        covered += list((table["ci_low"] <= EFFECTS) & (EFFECTS <= table["ci_high"]))
    # 960 intervals at 95%: the binomial sd of the rate is 0.007
    assert 0.92 <= np.mean(covered) <= 0.975


def test_one_block_pools_the_interaction_columns():
    rng = np.random.default_rng(3)
    table = factorial.main_effects(synthetic(1, 0.05, rng), margin=0.05)
    assert (table["variance"] == factorial.POOLED_INTERACTIONS).all() and (table["df"] == 15).all()
    assert (table["verdict"] == "too few seeds").all()  # one seed block decides nothing
    width = table["ci_high"] - table["ci_low"]
    np.testing.assert_allclose(width, width.iloc[0])  # one pooled variance for all
    np.testing.assert_allclose(table["effect"], EFFECTS, atol=0.06)
    # a real interaction lands in the pooled columns: wider intervals (conservative), same effects
    with_2fi = factorial.main_effects(
        synthetic(1, 0.05, np.random.default_rng(3), interaction=0.3), margin=0.05
    )
    np.testing.assert_allclose(with_2fi["effect"], table["effect"], atol=1e-12)
    assert (with_2fi["ci_high"] - with_2fi["ci_low"] > 2 * (table["ci_high"] - table["ci_low"])).all()


def test_verdicts_against_the_margin():
    effects = np.zeros(16)
    effects[0], effects[1] = 0.2, -0.2
    table = factorial.main_effects(
        synthetic(4, 0.01, np.random.default_rng(4), effects=effects), margin=0.05
    ).set_index("factor")
    assert table.loc["f00", "verdict"] == "better" and table.loc["f01", "verdict"] == "worse"
    assert (table["variance"] == factorial.POOLED_INTERACTIONS).all() and (table["df"] == 128 - 4 - 16).all()
    null = table.iloc[2:]  # 14 factors without effect: an interval that holds 0 shows it is within the margin
    holds_zero = (null["ci_low"] <= 0) & (0 <= null["ci_high"])
    assert holds_zero.sum() >= 12 and (null.loc[holds_zero, "verdict"] == "no difference").all()
    loose = factorial.main_effects(synthetic(4, 0.5, np.random.default_rng(4), effects=effects), margin=0.01)
    assert "undecided" in set(loose["verdict"])


def test_a_saturated_design_in_one_block_has_no_error_estimate():
    names = [f"g{i}" for i in range(7)]
    x = factorial_matrix(names, resolution=3).to_numpy()  # (8, 7)
    scored = pd.DataFrame(x > 0, columns=names).assign(seed=0, score=x @ np.arange(7) / 10)
    table = factorial.main_effects(scored, margin=0.05)
    np.testing.assert_allclose(table["effect"], np.arange(7) / 5, atol=1e-12)
    assert (table["variance"] == factorial.NO_VARIANCE).all() and table["ci_low"].isna().all()
    assert (table["verdict"] == "too few seeds").all()


def test_the_alias_table_of_the_scored_runs():
    scored = synthetic(2, 0.05, np.random.default_rng(5))
    table = factorial.aliases(scored)
    assert table.attrs["resolution"] == 4
    assert list(table.loc[table["kind"] == "main effect", "effect"]) == NAMES
    assert (table.loc[table["kind"] == "main effect", "aliases"] == "none").all()
    chains = table.loc[table["kind"] == "2FI chain", "aliases"]
    assert len(chains) == 15 and all(len(c.split(" = ")) == 8 for c in chains)
    text = factorial.report(factorial.main_effects(scored, margin=0.05), table)
    assert "main effects:" in text and "f00×f01" in text and "resolution IV" in text


def test_alias_table_finds_resolution_iii_and_v():
    names = ["a", "b", "c"]
    full = factorial_matrix(names)  # 3 factors in 8 runs: the full factorial
    assert factorial.alias_table(full).attrs["resolution"] == 5
    chains = factorial.alias_table(full)
    assert list(chains.loc[chains["kind"] == "2FI chain", "aliases"]) == ["a×b", "a×c", "b×c"]
    x = full.to_numpy()  # (8, 3)
    with_d = full.assign(d=-x[:, 0] * x[:, 1])  # d = -ab: a resolution III column
    table = factorial.alias_table(with_d).set_index("effect")
    assert table.attrs["resolution"] == 3 and table.loc["d", "aliases"] == "−a×b"
    assert table.loc["a", "aliases"] == "−b×d"


def test_errors_name_what_is_wrong():
    scored = synthetic(2, 0.05, np.random.default_rng(6))
    with pytest.raises(ValueError, match=r"2 of 64 runs have no finite score \(seed 1\)"):
        factorial.main_effects(
            scored.assign(score=scored["score"].where(~scored.index.isin([40, 41]))), margin=0.05
        )
    with pytest.raises(
        ValueError, match=r"seed block 1 is not a balanced two-level design: f00 \(15 on, 16 off\)"
    ):
        factorial.main_effects(scored.drop(index=32), margin=0.05)
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['seed'\]"):
        factorial.main_effects(scored.drop(columns="seed"), margin=0.05)
    with pytest.raises(ValueError, match="no factor columns"):
        factorial.main_effects(scored[["seed", "score"]], margin=0.05)
    with pytest.raises(ValueError, match="f00 and copy are correlated"):
        factorial.main_effects(scored.assign(copy=scored["f00"]), margin=0.05)
    with pytest.raises(ValueError, match="must be True/False or \\+1/-1, got 2"):
        factorial.alias_table(pd.DataFrame({"a": [1, -1, 2, -1]}))
    other = synthetic(1, 0.05, np.random.default_rng(7), names=[*NAMES[1:], NAMES[0]]).assign(seed=1)
    with pytest.raises(ValueError, match="seed block 1 does not hold the same runs as block 0"):
        factorial.aliases(pd.concat([scored[scored["seed"] == 0], other[scored.columns]], ignore_index=True))


def replicated(
    replicates: int, sd: float, rng: np.random.Generator, chain: float = 0.0, effects=EFFECTS
) -> pd.DataFrame:
    """`replicates` blocks of the 32-run design, each run with a seed of its own (no block level: the
    runs share nothing): half of each main effect times the factor's +-1, `chain` times f00×f01 (so
    the chain holding it has effect 2 x `chain`), and noise of sd `sd`."""
    x = factorial_matrix(NAMES).to_numpy()  # (runs, factors)
    frames = []
    for block in range(replicates):
        y = 0.5 + x @ effects / 2 + chain * x[:, 0] * x[:, 1] + sd * rng.standard_normal(len(x))
        seeds = 1000 * block + np.arange(len(x))
        frames.append(pd.DataFrame(x > 0, columns=NAMES).assign(seed=block, run_seed=seeds, score=y))
    return pd.concat(frames, ignore_index=True)


def test_a_replicated_design_recovers_every_contrast_on_pure_error():
    """4 replicates of the 32 runs with noise sd 0.05: the saturated fit has the 16 main effects and
    the 15 chains, recovers the main effects and the active chain (f00×f01 = ..., effect 0.2), and its
    pure-error sd matches the simulated noise on 128 - 32 = 96 degrees of freedom."""
    table = factorial.saturated(replicated(4, 0.05, np.random.default_rng(10), chain=0.1), margin=0.05)
    assert len(table) == 31 and list(table["column"][:16]) == NAMES
    assert list(table["kind"]) == [factorial.MAIN_EFFECT] * 16 + [factorial.CHAIN] * 15
    assert (table["df"] == 96).all() and (table["variance"] == factorial.PURE_ERROR).all()
    assert table["pure_error_sd"].iloc[0] == pytest.approx(0.05, rel=0.15)  # its sd: 0.05 / sqrt(192)
    mains = table.set_index("column").loc[NAMES]
    # each effect's standard error is 2 x 0.05 / sqrt(128) = 0.0088
    np.testing.assert_allclose(mains["effect"], EFFECTS, atol=0.035)
    holding = table[table["aliases"].str.contains("f00×f01")].iloc[0]
    assert holding["kind"] == factorial.CHAIN and holding["effect"] == pytest.approx(0.2, abs=0.035)
    assert holding["verdict"] == "better" and (table["seeds"] == 128).all()
    se = 2 * table["pure_error_sd"].iloc[0] / np.sqrt(128)
    assert (table["ci_high"] - table["effect"]).iloc[0] == pytest.approx(1.98498 * se, rel=1e-4)
    inactive = table[(table["kind"] == factorial.CHAIN) & (table["column"] != holding["column"])]
    assert (inactive["effect"].abs() < 0.035).all()


def test_pure_error_intervals_cover_every_contrast_at_their_level():
    rng = np.random.default_rng(11)
    truth = np.concatenate([EFFECTS, np.zeros(15)])  # no interaction: every chain is 0
    covered = []
    for _ in range(40):
        table = factorial.saturated(replicated(2, 0.1, rng), margin=0.05)
        covered += list((table["ci_low"] <= truth) & (truth <= table["ci_high"]))
    # 1240 intervals at 95%
    assert 0.92 <= np.mean(covered) <= 0.975


def test_the_main_effects_of_a_replicated_design_rest_on_pure_error_and_lenth_checks_it():
    scored = replicated(3, 0.05, np.random.default_rng(12), chain=0.2)
    table = factorial.replicated_effects(scored, margin=0.05).set_index("factor")
    assert list(table.index) == NAMES and (table["variance"] == factorial.PURE_ERROR).all()
    assert (table["df"] == 96 - 32).all() and (table["error term"] == factorial.PURE_ERROR_NOTE).all()
    # the active chain does not widen the main effects' intervals, as it does the pooled residual's
    pooled = factorial.main_effects(scored, margin=0.05).set_index("factor")
    width = (table["ci_high"] - table["ci_low"]).iloc[0]
    assert width < 0.5 * (pooled["ci_high"] - pooled["ci_low"]).iloc[0]
    np.testing.assert_allclose(table["effect"], pooled["effect"], atol=1e-12)
    contrasts = factorial.saturated(scored, margin=0.05)
    pse, me = factorial.lenth(contrasts["effect"])
    assert table["lenth_pse"].iloc[0] == pytest.approx(pse) and table["lenth_me"].iloc[0] == pytest.approx(me)
    assert pse == pytest.approx(2 * 0.05 / np.sqrt(96), rel=0.35)  # the inactive contrasts' sd


def test_one_replicate_falls_back_to_the_residual_and_says_so():
    scored = replicated(1, 0.05, np.random.default_rng(13), chain=0.2)
    table = factorial.replicated_effects(scored, margin=0.05)
    pooled = factorial.main_effects(scored, margin=0.05)
    assert (table["variance"] == factorial.POOLED_INTERACTIONS).all() and (table["df"] == 15).all()
    assert table["error term"].str.startswith("NOT PURE ERROR").all()
    np.testing.assert_allclose(table["ci_low"], pooled["ci_low"])
    assert table["pure_error_sd"].isna().all() and np.isfinite(table["lenth_pse"]).all()
    contrasts = factorial.saturated(scored, margin=0.05)
    assert (contrasts["variance"] == factorial.NO_VARIANCE).all() and contrasts["ci_low"].isna().all()
    assert (contrasts["df"] == 0).all() and len(contrasts) == 31


def test_lenth_pse_and_the_half_normal_plot():
    pse, me = factorial.lenth([0.1] * 30 + [10.0])
    assert pse == pytest.approx(0.15) and me == pytest.approx(stats.t.ppf(0.975, 31 / 3) * 0.15)
    assert factorial.lenth([0.0, 0.0, 0.0]) == (0.0, 0.0)
    scored = replicated(2, 0.02, np.random.default_rng(14), chain=0.1)
    plot = factorial.half_normal(factorial.saturated(scored, margin=0.05))
    assert len(plot) == 31 and plot["size"].is_monotonic_increasing
    m = 31
    assert plot["quantile"].iloc[0] == pytest.approx(stats.norm.ppf(0.5 + 0.25 / m))
    assert plot["quantile"].iloc[-1] == pytest.approx(stats.norm.ppf(0.5 + 0.5 * (m - 0.5) / m))
    top = plot.tail(6)  # the five non-zero main effects and the active chain
    assert set(top["column"]) >= {"f00", "f01", "f02", "f08", "f12"}
    chain = top[top["kind"] == factorial.CHAIN].iloc[0]
    assert "f00×f01" in chain["aliases"] and chain["lenth_active"] and chain["decided"]
    assert not plot.head(20)["lenth_active"].any()  # the smallest of the 25 inactive contrasts


def test_a_full_factorial_has_its_higher_order_column():
    names = ["a", "b", "c"]
    x = factorial_matrix(names).to_numpy()  # (8, 3): the full factorial
    rng = np.random.default_rng(15)
    scored = pd.concat(
        [
            pd.DataFrame(x > 0, columns=names).assign(
                seed=b, score=0.3 * np.prod(x, axis=1) / 2 + 0.01 * rng.standard_normal(8)
            )
            for b in range(3)
        ]
    )
    table = factorial.saturated(scored, margin=0.05).set_index("column")
    assert list(table["kind"]) == [factorial.MAIN_EFFECT] * 3 + [factorial.CHAIN] * 3 + [factorial.HIGHER]
    assert table.loc["a×b×c", "effect"] == pytest.approx(0.3, abs=0.03) and (table["df"] == 16).all()


def test_the_mde_of_replicates_on_pure_error():
    assert factorial.replicated_mde(0.01, 32, 1) == np.inf
    expected = (stats.t.ppf(0.975, 64) + stats.t.ppf(0.8, 64)) * 2 * 0.01 / np.sqrt(96)
    assert factorial.replicated_mde(0.01, 32, 3) == pytest.approx(expected)
    assert factorial.replicated_mde(0.01, 32, 4) < factorial.replicated_mde(0.01, 32, 3)
    with pytest.raises(ValueError, match="sd must be a finite number >= 0"):
        factorial.replicated_mde(-1.0, 32, 2)
    with pytest.raises(ValueError, match="replicates >= 1"):
        factorial.replicated_mde(0.01, 32, 0)


def test_a_saturated_fit_needs_one_design_in_every_block():
    scored = replicated(2, 0.05, np.random.default_rng(16))
    other = replicated(1, 0.05, np.random.default_rng(17))
    other = other.rename(columns={NAMES[0]: NAMES[1], NAMES[1]: NAMES[0]}).assign(seed=1)
    with pytest.raises(ValueError, match="seed block 1 does not hold the same runs as block 0"):
        factorial.saturated(pd.concat([scored[scored["seed"] == 0], other[scored.columns]]), margin=0.05)
    with pytest.raises(ValueError, match="at least 3 finite contrasts"):
        factorial.lenth([0.1, np.nan, 0.2])
    with pytest.raises(ValueError, match="needs the columns of `saturated`"):
        factorial.half_normal(pd.DataFrame({"effect": [0.1]}))
