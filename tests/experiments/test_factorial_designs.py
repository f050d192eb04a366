"""The two-level fractional factorial designs: run counts, balance, orthogonality, resolution IV (no
main-effect column is the product of two others), the alias chains, the points' configurations and
the errors on bad factors."""

import itertools

import numpy as np
import pytest

from grpo_lab import experiments
from grpo_lab.config import Config
from grpo_lab.experiments.designs import (
    Point,
    factorial_aliases,
    factorial_matrix,
    factorial_points,
    factorial_runs,
)
from grpo_lab.presets import TRICKS, preset

SIXTEEN = {**TRICKS, "group_reward_norm": ({"advantage": "grpo"}, {"advantage": "dr_grpo"})}


def test_the_exports():
    assert experiments.factorial_points is factorial_points
    assert experiments.factorial_matrix is factorial_matrix
    assert experiments.factorial_aliases is factorial_aliases


@pytest.mark.parametrize(
    ("factors", "resolution", "runs"),
    [(1, 4, 8), (4, 4, 8), (5, 4, 16), (8, 4, 16), (9, 4, 32), (16, 4, 32), (17, 4, 64),
     (7, 3, 8), (8, 3, 16), (15, 3, 16), (16, 3, 32)],
)  # fmt: skip
def test_the_fewest_runs_that_hold_the_factors(factors, resolution, runs):
    assert factorial_runs(factors, resolution) == runs


def test_sixteen_factors_in_32_runs_balanced_orthogonal_and_of_resolution_iv():
    matrix = factorial_matrix(SIXTEEN)
    assert matrix.shape == (32, 16) and list(matrix.columns) == list(SIXTEEN)
    assert matrix.index[0] == "r01" and matrix.index[-1] == "r32"
    x = matrix.to_numpy()  # (runs, factors)
    assert set(np.unique(x)) == {-1, 1}
    assert (x.sum(axis=0) == 0).all()  # every factor on in 16 runs, off in 16
    assert (x.T @ x == 32 * np.eye(16)).all()  # every pair of columns orthogonal
    assert len({tuple(row) for row in x}) == 32  # no run repeated
    for a, b in itertools.combinations(range(16), 2):
        product = x[:, a] * x[:, b]  # (runs,)
        assert not (x.T @ product).any(), (
            a,
            b,
        )  # a two-factor interaction is orthogonal to every main effect
        for c in range(16):
            assert not (product == x[:, c]).all() and not (product == -x[:, c]).all(), (a, b, c)


@pytest.mark.parametrize("factors", [3, 4, 5, 8, 9, 12])
def test_every_size_is_balanced_orthogonal_and_of_resolution_iv_at_least(factors):
    x = factorial_matrix([f"f{i}" for i in range(factors)]).to_numpy()  # (runs, factors)
    assert (x.sum(axis=0) == 0).all() and (x.T @ x == len(x) * np.eye(factors)).all()
    for a, b in itertools.combinations(range(factors), 2):
        assert not (x.T @ (x[:, a] * x[:, b])).any()


def test_resolution_iii_is_the_saturated_hadamard_design():
    x = factorial_matrix([f"f{i}" for i in range(7)], resolution=3).to_numpy()  # (8, 7)
    assert x.shape == (8, 7) and (x.sum(axis=0) == 0).all() and (x.T @ x == 8 * np.eye(7)).all()
    table = factorial_aliases([f"f{i}" for i in range(7)], resolution=3)
    assert table.attrs["resolution"] == 3
    mains = table[table["kind"] == "main effect"].set_index("effect")["aliases"]
    assert (mains != "none").all()  # each main effect carries three 2FIs
    assert all(len(chain.split(" = ")) == 3 for chain in mains)


def test_the_alias_table_of_the_screen_design():
    table = factorial_aliases(SIXTEEN)
    assert table.attrs["resolution"] == 4 and "no main effect is aliased" in table.attrs["note"]
    mains, chains = table[table["kind"] == "main effect"], table[table["kind"] == "2FI chain"]
    assert list(mains["effect"]) == list(SIXTEEN) and (mains["aliases"] == "none").all()
    assert len(chains) == 15  # the 31 contrasts of 32 runs: 16 main effects, 15 chains
    members = [term for chain in chains["aliases"] for term in chain.split(" = ")]
    assert len(members) == len(set(members)) == 120  # each of the 16 * 15 / 2 interactions in one chain of 8
    x = factorial_matrix(SIXTEEN)
    for chain in chains["aliases"]:  # the members of a chain, signed as written, have one contrast
        contrasts = set()
        for term in chain.split(" = "):
            a, b = term.removeprefix("−").split("×")
            contrasts.add(tuple((-1 if term.startswith("−") else 1) * x[a] * x[b]))
        assert len(contrasts) == 1


def test_points_switch_exactly_their_factors_fields():
    base = preset("grpo", task="worked", max_completion_length=48, steps=4)
    points = factorial_points(base, SIXTEEN)
    assert len(points) == 32 and len({p.config.key() for p in points}) == 32
    defaults = Config().to_dict()
    matrix = factorial_matrix(SIXTEEN)
    for point in points:
        assert point.columns == {"run": point.label, **point.values}
        assert point.values == {f: bool(matrix.loc[point.label, f] > 0) for f in SIXTEEN}
        expected = base.to_dict()
        for name, on in point.values.items():
            changes = SIXTEEN[name]
            on_changes, off_changes = changes if isinstance(changes, tuple) else (changes, {})
            off_values = {**{k: defaults[k] for k in on_changes}, **off_changes}
            expected.update(on_changes if on else off_values)
        assert point.config.to_dict() == expected, point.label
    first = points[0]
    assert all(first.values.values())  # r01 has every factor on: every trick over grpo's advantage
    assert first.config.adv_clip == 2.0 and first.config.advantage == "grpo"
    off = next(p for p in points if not any(p.values.values()))
    assert off.config.advantage == "dr_grpo" and off.config.aggregation == base.aggregation
    assert off.config.kl_coef == base.kl_coef and off.config.adv_clip == 0.0


def test_a_point_of_another_design_keeps_its_old_shape():
    point = Point("a", {"arm": "a"}, Config())
    assert point.values == {}


def test_resolution_must_be_iii_or_iv():
    with pytest.raises(ValueError, match=r"resolution 5 is not built; valid: 3, 4"):
        factorial_points(Config(), {"clip": {"adv_clip": 2.0}}, resolution=5)


@pytest.mark.parametrize(
    ("factors", "message"),
    [
        ({}, "needs at least one factor"),
        (
            {"warp": {"warp_drive": 1}},
            r"factor 'warp' sets unknown config field\(s\) \['warp_drive'\]; valid: ",
        ),
        ({"s": {"seed": 3}}, "sets 'seed': the seeds are the replicate blocks"),
        ({"nothing": {"adv_clip": 0.0}}, "factor 'nothing' changes nothing"),
        ({"both": ({"adv_clip": 1.0}, {"adv_clip": 1.0})}, "factor 'both' changes nothing"),
        ({"a": {"adv_clip": 2.0}, "b": {"adv_clip": 2.0}}, "factors 'a' and 'b' make the same changes"),
        (
            {"a": {"adv_clip": 2.0}, "b": {"adv_clip": 3.0, "mask_truncated": True}},
            r"factors \['a', 'b'\] all set 'adv_clip'",
        ),
        ({"seed": {"adv_clip": 2.0}}, r"factor name\(s\) \['seed'\] are taken by result columns"),
        ({"a": [("adv_clip", 2.0)]}, "factor 'a' must be a mapping of config changes or an"),
        ({"a": ({"adv_clip": 2.0},)}, "factor 'a' must be a mapping of config changes or an"),
    ],
)
def test_bad_factors_are_refused(factors, message):
    with pytest.raises(ValueError, match=message):
        factorial_points(Config(), factors)


def test_names_given_twice_or_not_a_mapping_are_refused():
    with pytest.raises(ValueError, match=r"factor\(s\) \['a'\] named more than once"):
        factorial_matrix(["a", "b", "a"])
    with pytest.raises(ValueError, match="collection of names, got the string"):
        factorial_matrix("abc")
    with pytest.raises(ValueError, match="factors must map each factor's name"):
        factorial_points(Config(), ["adv_clip"])  # type: ignore[arg-type]


def test_a_run_with_an_invalid_combination_is_named():
    # adaptive entropy needs a starting coefficient: a factor that sets only the target breaks the runs
    # where the coefficient factor is off
    factors = {"target": {"entropy_target": 0.3}, "coef": {"entropy_coef": 0.001}}
    with pytest.raises(
        ValueError, match=r"run r\d+ of the factorial design \(on: target; off: coef\) is not a"
    ):
        factorial_points(Config(), factors)


def test_every_run_of_the_screen_builds_a_valid_config_under_both_study_profiles():
    from grpo_lab.comparisons.bed import base

    for profile in ("smoke", "full"):
        points = factorial_points(base(profile), SIXTEEN)
        assert len(points) == 32 and all(isinstance(p.config, Config) for p in points)
