"""The schemes study's design and sequential seeds: a scheme that drops the KL besides its mechanism
is also compared with its matched comparator, an arm trained on the same seeds; look by look, a
decided comparison stops taking seeds, and an arm goes on while any of its comparisons does; until a
look is stored the plan counts every remaining seed (an upper bound)."""

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from grpo_lab.analysis.verdict_table import MARGIN_OF_GAIN, STABILITY_COLUMNS
from grpo_lab.comparisons import scheme_arms, sequential_seeds
from grpo_lab.experiments.store import BEHAVIOUR, expected_start, run_dir
from grpo_lab.runlog import CONFIG, METRICS, SUMMARY, seal
from grpo_lab.studies import schemes


def store_run(config, root, level: float, start: float = 0.1) -> None:
    """A sealed run of `config` whose headline score (sampled accuracy in the last half) is `level`,
    recorded as starting from today's weights (so the store counts it as current)."""
    path = run_dir(config, root)
    path.mkdir(parents=True)
    weights = {"init_sha256": expected_start(config.to_dict()), "reference_sha256": None}
    (path / CONFIG).write_text(json.dumps({"config": config.to_dict(), "start": weights}))
    rows = [{"step": 0, "val/sampled_accuracy": start}]
    tail = range(config.steps // 2, config.steps + 1, 5)
    rows += [{"step": s, "val/sampled_accuracy": level} for s in tail]
    (path / METRICS).write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / SUMMARY).write_text("{}")
    seal(path, BEHAVIOUR)


CLOSE = (0.02, -0.015, 0.005)
"""differences within noise: too few seeds to call a comparison either way at the first look"""


def test_the_design_adds_each_schemes_matched_comparator_once():
    settings = schemes.settings("full")
    labels = [p.label for p in schemes.design(settings, ["grpo", "scheme_a", "dapo_loss", "cispo"])]
    assert labels == ["grpo", "scheme_a", "dapo_loss", "cispo", "grpo_no_kl"]
    assert [p.label for p in schemes.design(settings, ["grpo", "scheme_a"])] == ["grpo", "scheme_a"]
    points = {p.label: p.config for p in schemes.design(settings)}
    assert points["grpo_no_kl"] == points["grpo"].replace(
        preset="grpo_no_kl", kl_coef=0.0, kl_placement="off"
    )
    assert (
        points["dapo_loss"].replace(preset="grpo_no_kl", eps_high=0.2, aggregation="seq-mean-token-mean")
        == (points["grpo_no_kl"])
    )  # the matched pair differs in dapo_loss's mechanism alone, on the same study base


def test_a_scheme_that_drops_the_kl_is_judged_against_grpo_and_against_grpo_without_it():
    labels = ["grpo", "scheme_a", "dapo_loss", "grpo_no_kl"]
    assert scheme_arms.comparisons(labels) == [
        ("scheme_a", "grpo"),
        ("dapo_loss", "grpo"),
        ("dapo_loss", "grpo_no_kl"),
        ("grpo_no_kl", "grpo"),
    ]
    assert scheme_arms.comparisons(["grpo", "dapo_loss"]) == [
        ("dapo_loss", "grpo")
    ]  # no comparator arm, no matched pair
    assert scheme_arms.arms(set(labels)) == [
        ("scheme_a", "scheme", "scheme_a", "grpo"),
        ("dapo_loss", "scheme", "dapo_loss", "grpo"),
        ("dapo_loss", "scheme vs grpo_no_kl", "dapo_loss", "grpo_no_kl"),
        ("grpo_no_kl", "scheme", "grpo_no_kl", "grpo"),
    ]


def test_a_clear_arm_stops_at_the_first_look_and_a_close_one_goes_on(tmp_path):
    settings = schemes.settings("full")
    assert sequential_seeds.looks(settings) == (3, 6, 9) and settings.seeds == tuple(range(9))
    points = schemes.design(settings, ["grpo", "scheme_a", "dapo_loss"])
    by = {p.label: p.config for p in points}
    everything = schemes.runs(points, settings, None)
    assert len(everything) == 4 * 9  # nothing stored: every seed of every arm, grpo_no_kl's too
    for seed in range(3):
        store_run(by["grpo"].replace(seed=seed), tmp_path, 0.2 + 0.001 * seed)
        store_run(by["dapo_loss"].replace(seed=seed), tmp_path, 0.1 + CLOSE[seed] / 40)  # far below both
        store_run(by["grpo_no_kl"].replace(seed=seed), tmp_path, 0.3 - CLOSE[seed] / 40)  # far above grpo
        store_run(by["scheme_a"].replace(seed=seed), tmp_path, 0.2 + CLOSE[seed])
    chosen, open_arms = sequential_seeds.sequential_seeds(points, settings, tmp_path)
    assert open_arms == {"scheme_a", "grpo"}
    assert chosen == {
        "grpo": tuple(range(6)),
        "scheme_a": tuple(range(6)),
        "dapo_loss": (0, 1, 2),
        "grpo_no_kl": (0, 1, 2),
    }
    planned = schemes.runs(points, settings, tmp_path)
    assert sorted(c.seed for c in planned if c == by["dapo_loss"].replace(seed=c.seed)) == [0, 1, 2]
    assert (
        len(planned) == 3 + 3 + 9 + 9
    )  # dapo_loss and grpo_no_kl decided at 3; grpo and scheme_a up to the cap


def test_an_arm_decided_against_grpo_goes_on_while_its_matched_comparison_is_open(tmp_path):
    settings = schemes.settings("full")
    points = schemes.design(settings, ["grpo", "scheme_a", "dapo_loss"])
    by = {p.label: p.config for p in points}
    assert sequential_seeds.sequential_seeds(points, settings, tmp_path) == (
        {label: (0, 1, 2) for label in by},
        set(by),
    )
    for seed in range(3):
        store_run(by["grpo"].replace(seed=seed), tmp_path, 0.2 + 0.001 * seed)
        store_run(by["scheme_a"].replace(seed=seed), tmp_path, 0.1 + CLOSE[seed] / 40)  # far below grpo
        store_run(by["dapo_loss"].replace(seed=seed), tmp_path, 0.1 + CLOSE[seed] / 40)  # far below grpo ...
        store_run(by["grpo_no_kl"].replace(seed=seed), tmp_path, 0.1 + CLOSE[seed])  # ... close to grpo_no_kl
    chosen, open_arms = sequential_seeds.sequential_seeds(points, settings, tmp_path)
    # dapo_loss against grpo and scheme_a are decided; dapo_loss against grpo_no_kl, and grpo_no_kl
    # against grpo (noisy), are not: dapo_loss, grpo_no_kl and grpo take the next look's seeds, scheme_a
    # stops
    assert open_arms == {"dapo_loss", "grpo_no_kl", "grpo"}
    assert chosen == {
        "grpo": tuple(range(6)),
        "scheme_a": (0, 1, 2),
        "dapo_loss": tuple(range(6)),
        "grpo_no_kl": tuple(range(6)),
    }
    assert len(schemes.runs(points, settings, tmp_path)) == 3 + 3 * 9


def scored(effects: dict[str, float], seeds: int = 4) -> pd.DataFrame:
    """Per-run scores of arms whose headline score is grpo's (0.3, from a start of 0.1) plus their
    effect, with a little noise per seed, and equal step times and stability figures."""
    noise = np.array([0.002, -0.001, 0.0, -0.001, 0.001, 0.0])[:seeds]
    rows = [
        {
            "label": label,
            "seed": seed,
            "score": 0.3 + effect + noise[seed] * (i + 1),
            "start": 0.1,
            "step_s": 1.0,
        }
        | {k: 1.0 for k in STABILITY_COLUMNS}
        for i, (label, effect) in enumerate({"grpo": 0.0, **effects}.items())
        for seed in range(seeds)
    ]
    return pd.DataFrame(rows)


def test_the_table_has_a_row_against_the_matched_comparator_with_grpos_margin():
    table = schemes.table(scored({"dapo_loss": -0.05, "grpo_no_kl": -0.04, "scheme_a": 0.0}))
    assert list(zip(table["row"], table["kind"])) == [
        ("scheme_a", "scheme"),
        ("dapo_loss", "scheme"),
        ("dapo_loss", "scheme vs grpo_no_kl"),
        ("grpo_no_kl", "scheme"),
    ]
    by_kind = table.set_index(["row", "kind"])
    assert by_kind.loc[("dapo_loss", "scheme"), "effect"] == pytest.approx(-0.05, abs=0.01)
    assert by_kind.loc[("dapo_loss", "scheme vs grpo_no_kl"), "effect"] == pytest.approx(-0.01, abs=0.01)
    assert table["margin"].to_numpy() == pytest.approx(MARGIN_OF_GAIN * 0.2)  # grpo's gain, every row


def test_outside_the_full_profile_every_seed_is_one_look():
    smoke = schemes.settings("smoke")
    assert sequential_seeds.looks(smoke) == (len(smoke.seeds),)
    short = replace(schemes.settings("full"), seeds=(0, 1))
    assert sequential_seeds.looks(short) == (2,)


def test_the_rule_closes_at_the_cap_and_the_plan_then_counts_only_what_was_taken(tmp_path):
    settings = replace(schemes.settings("full"), seeds=(0, 1, 2, 3, 4, 5))
    assert sequential_seeds.looks(settings) == (3, 6)
    points = schemes.design(settings, ["grpo", "scheme_a"])
    by = {p.label: p.config for p in points}
    close = (0.02, -0.015, 0.005, -0.01, 0.012, -0.004)
    for seed in settings.seeds:
        store_run(by["grpo"].replace(seed=seed), tmp_path, 0.2)
        store_run(by["scheme_a"].replace(seed=seed), tmp_path, 0.2 + close[seed])
    chosen, open_arms = sequential_seeds.sequential_seeds(points, settings, tmp_path)
    assert open_arms == frozenset() and chosen == {"grpo": settings.seeds, "scheme_a": settings.seeds}
    assert len(schemes.runs(points, settings, tmp_path)) == 12
