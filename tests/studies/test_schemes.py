"""The schemes study's sequential seeds: look by look, an arm whose comparison with grpo is decided
stops taking seeds; until a look is stored the plan counts every remaining seed (an upper bound)."""

import json
from dataclasses import replace

from grpo_lab.experiments.store import BEHAVIOUR, run_dir
from grpo_lab.runlog import METRICS, SUMMARY, seal
from grpo_lab.studies import schemes


def store_run(config, root, level: float, start: float = 0.1) -> None:
    """A sealed run of `config` whose headline score (sampled accuracy in the last half) is `level`."""
    path = run_dir(config, root)
    path.mkdir(parents=True)
    rows = [{"step": 0, "val/sampled_accuracy": start}]
    tail = range(config.steps // 2, config.steps + 1, 5)
    rows += [{"step": s, "val/sampled_accuracy": level} for s in tail]
    (path / METRICS).write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / SUMMARY).write_text("{}")
    seal(path, BEHAVIOUR)


def test_a_clear_arm_stops_at_the_first_look_and_a_close_one_goes_on(tmp_path):
    settings = schemes.settings("full")
    assert schemes.looks(settings) == (3, 6, 9) and settings.seeds == tuple(range(9))
    points = schemes.design(settings, ["grpo", "scheme_a", "dapo"])
    by = {p.label: p.config for p in points}
    everything = schemes.runs(points, settings, None)
    assert len(everything) == 3 * 9  # nothing stored: every seed of every arm, the upper bound
    close = (0.02, -0.015, 0.005)  # scheme_a: within noise of grpo, too few seeds to call it either way
    for seed in range(3):
        store_run(by["grpo"].replace(seed=seed), tmp_path, 0.2 + 0.001 * seed)
        store_run(by["dapo"].replace(seed=seed), tmp_path, 0.1 + close[seed] / 40)  # far below grpo, t ~ 350
        store_run(by["scheme_a"].replace(seed=seed), tmp_path, 0.2 + close[seed])
    chosen, open_arms = schemes.sequential_seeds(points, settings, tmp_path)
    assert open_arms == {"scheme_a"}
    assert chosen == {"grpo": tuple(range(6)), "scheme_a": tuple(range(6)), "dapo": (0, 1, 2)}
    planned = schemes.runs(points, settings, tmp_path)
    assert sorted(c.seed for c in planned if c == by["dapo"].replace(seed=c.seed)) == [0, 1, 2]
    assert len(planned) == 3 + 9 + 9  # dapo decided at 3; grpo and scheme_a up to the cap


def test_outside_the_full_profile_every_seed_is_one_look():
    smoke = schemes.settings("smoke")
    assert schemes.looks(smoke) == (len(smoke.seeds),)
    short = replace(schemes.settings("full"), seeds=(0, 1))
    assert schemes.looks(short) == (2,)


def test_the_rule_closes_at_the_cap_and_the_plan_then_counts_only_what_was_taken(tmp_path):
    settings = replace(schemes.settings("full"), seeds=(0, 1, 2, 3, 4, 5))
    assert schemes.looks(settings) == (3, 6)
    points = schemes.design(settings, ["grpo", "scheme_a"])
    by = {p.label: p.config for p in points}
    close = (0.02, -0.015, 0.005, -0.01, 0.012, -0.004)
    for seed in settings.seeds:
        store_run(by["grpo"].replace(seed=seed), tmp_path, 0.2)
        store_run(by["scheme_a"].replace(seed=seed), tmp_path, 0.2 + close[seed])
    chosen, open_arms = schemes.sequential_seeds(points, settings, tmp_path)
    assert open_arms == frozenset() and chosen == {"grpo": settings.seeds, "scheme_a": settings.seeds}
    assert len(schemes.runs(points, settings, tmp_path)) == 12
