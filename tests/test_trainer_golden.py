"""Row for row: every preset, every trick and every fault, trained on the tiny model, give exactly the
metrics stored in tests/data/golden_metrics.json (CPU, one thread). A refactor of the loop must leave
them unchanged; a deliberate change of behaviour regenerates them with

    GRPO_LAB_REGENERATE_GOLDEN=1 python -m pytest -q tests/test_trainer_golden.py

and says why in its commit.

Exact floats depend on the CPU kernels torch and its BLAS dispatch to, which follow the CPU's
capability (`torch.backends.cpu.get_cpu_capability()`) and its vendor (MKL takes other paths on AMD
than on Intel): on a machine other than `REFERENCE_MACHINE` the metrics round differently in the last
bits, and where a run makes a discrete choice on them (kl_cov's top tokens, a sampled token) they
part. Such a machine compares with golden data of its own kind (`golden_metrics.<capability>-<vendor>.json`),
which records the reference data it was made beside: after a change of the reference data,
regenerate them on a machine of that kind too (the same command writes the file of the machine it
runs on). The reference data alone define the store's behaviour version."""

import hashlib
import json
import math
import os
from pathlib import Path
from typing import cast

import pytest
import torch

from grpo_lab import Config, Trainer, preset
from grpo_lab.experiments.store import BEHAVIOUR, COMPATIBLE
from grpo_lab.presets import PRESETS

GOLDEN = Path(__file__).parent / "data" / "golden_metrics.json"
"""the reference golden data, made on a `REFERENCE_MACHINE`"""
REFERENCE_MACHINE = "AVX512-AuthenticAMD"


def cpu_vendor() -> str:
    """The CPU's vendor as /proc/cpuinfo names it (GenuineIntel, AuthenticAMD), else 'unknown'."""
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("vendor_id")), "unknown")


MACHINE = f"{torch.backends.cpu.get_cpu_capability()}-{cpu_vendor()}"
"""this machine's kind for the golden data: torch's CPU capability and the CPU's vendor"""
REGENERATE = os.environ.get("GRPO_LAB_REGENERATE_GOLDEN") == "1"


def golden_file(machine: str) -> Path:
    """The golden data a machine of kind `machine` compares with."""
    return GOLDEN if machine == REFERENCE_MACHINE else GOLDEN.with_name(f"golden_metrics.{machine}.json")


def reference_digest() -> str:
    return hashlib.sha256(GOLDEN.read_bytes()).hexdigest()


TINY = dict(
    task="judge",
    steps=3,
    prompts_per_step=4,
    group_size=4,
    max_completion_length=10,
    val_size=8,
    eval_every=2,
    learning_rate=1e-2,
    progress=False,
)

EVERY_TRICK = dict(
    PRESETS["all_tricks"].changes,
    num_iterations=2,
    num_mini_batches=2,
    micro_batch_size=6,
    kl_prev_coef=0.05,
    adv_clip=1.5,
    grad_cos_every=1,
    diversity_every=1,
    kl_token_weight="position",
    is_correction="tis_token",
    seq_weight="length",
)
"""every trick over grpo (growth and dynamic sampling, learnable temperature, two-layer KL, ...)"""

CONFIGS: dict[str, dict] = {
    **{f"preset:{name}": {"preset": name} for name in PRESETS},
    "every_trick": {"preset": "grpo", **EVERY_TRICK},
    "every_trick_kl_in_reward": {
        "preset": "scheme_b",
        **{**EVERY_TRICK, "kl_schedule": "linear", "kl_coef_final": 0.01, "token_adv_mix": 0.5},
    },
    "clip_cov": {"preset": "grpo", "surrogate": "clip_cov", "cov_ratio": 0.2, "num_iterations": 2},
    "kl_cov": {
        "preset": "grpo",
        "surrogate": "kl_cov",
        "cov_ratio": 0.2,
        "gmpo_eps": 0.3,
        "num_iterations": 2,
    },
    "gmpo_dual_clip": {"preset": "gmpo", "gmpo_eps": 0.1, "dual_clip_c": 2.0, "num_iterations": 2},
    "arith_token_credit": {"preset": "scheme_b", "task": "arith", "kl_schedule": "proportional"},
    "faults_stale": {
        "preset": "grpo",
        "fault_reward_sigma": 0.1,
        "fault_reward_flip": 0.2,
        "fault_group_fraction": 0.5,
        "fault_long_frac": 0.25,
        "fault_junk_frac": 0.25,
        "fault_repeat_k": 1,
        "fault_stale_k": 1,
        "skip_nonfinite": True,
        "is_correction": "mis_seq",
    },
    "faults_dtype_growth": {
        "preset": "grpo",
        "fault_reward_flip": 0.3,
        "fault_long_frac": 0.25,
        "fault_junk_frac": 0.25,
        "fault_repeat_k": 2,
        "fault_sampler_dtype": "bfloat16",
        "dynamic_group_size": True,
        "temperature_jitter": 0.1,
        "grad_cos_every": 2,
    },
}


def metrics(rows: list[dict]) -> list[dict]:
    """The rows without wall-clock and memory measurements, NaN as a string (JSON-comparable)."""
    return [
        {
            k: ("nan" if isinstance(v, float) and math.isnan(v) else v)
            for k, v in row.items()
            if not k.startswith("time/") and k != "cost/peak_rss_mb"
        }
        for row in rows
    ]


RESUMED = dict(
    TINY,
    steps=4,
    checkpoint_every=2,
    kl_schedule="threshold",
    kl_target=1e-6,
    entropy_coef=0.01,
    entropy_target=5.0,
)
"""the run that is interrupted after a checkpoint and resumed"""


def golden_config(name: str, model: str) -> Config | None:
    """The config of a golden run (None for `reconfigure`, whose config changes while it runs)."""
    if name == "resume":
        return preset("grpo", model=model, **RESUMED)
    if name == "reconfigure":
        return None
    changes = dict(CONFIGS[name])
    return preset(changes.pop("preset"), model=model, **{**TINY, **changes})


def run(name: str, model: str, tmp_path: Path) -> list[dict]:
    if name == "resume":  # interrupted after a checkpoint, then resumed: must equal the golden rows
        config = preset("grpo", model=model, **RESUMED)
        first = Trainer(config, tmp_path / "run")
        first.step(), first.step(), first.step()
        return Trainer(config, tmp_path / "run", resume=True).run().to_dict("records")
    if name == "reconfigure":
        trainer = Trainer(preset("grpo", model=model, **{**TINY, "steps": 4, "kl_schedule": "linear"}))
        trainer.step()
        trainer.reconfigure(kl_coef=0.2, eps_high=0.28, group_size=3)
        trainer.step()
        trainer.reconfigure(kl_placement="reward", kl_estimator="k1")
        return trainer.run().to_dict("records")
    return Trainer(cast(Config, golden_config(name, model))).run().to_dict("records")


NAMES = [*CONFIGS, "resume", "reconfigure"]


@pytest.fixture(scope="module")
def golden() -> dict:
    if REGENERATE:
        return {}
    file = golden_file(MACHINE)
    if not file.exists():
        pytest.fail(f"no golden data for the machine kind {MACHINE}: make {file.name} on this machine "
                    "with GRPO_LAB_REGENERATE_GOLDEN=1 (see this module's docstring)")  # fmt: skip
    data = json.loads(file.read_text())
    if file == GOLDEN:
        return data
    if data["reference"] != reference_digest():
        pytest.fail(f"{file.name} was made beside other reference data than {GOLDEN.name}: regenerate it on "
                    f"a {MACHINE} machine with GRPO_LAB_REGENERATE_GOLDEN=1")  # fmt: skip
    return data["metrics"]


@pytest.fixture(scope="module", autouse=True)
def write_golden(golden):
    yield
    if REGENERATE:
        file = golden_file(MACHINE)
        data = golden if file == GOLDEN else {"reference": reference_digest(), "metrics": golden}
        file.write_text(json.dumps(data, indent=0, sort_keys=True) + "\n")


@pytest.mark.parametrize("name", NAMES)
def test_same_metrics_row_for_row(name, golden, tiny_model_path, tmp_path):
    rows = json.loads(json.dumps(metrics(run(name, tiny_model_path, tmp_path))))
    if REGENERATE:
        golden[name] = rows
    assert rows == golden[name]


def test_the_store_behaviour_version_follows_the_golden_data():
    """Stored runs (`results/`) are sealed with `store.BEHAVIOUR`; when the golden data changes,
    training computes something else, so that version must change with it (and every kept run
    becomes stale) instead of mixing runs of two behaviours in one figure."""
    digest = hashlib.sha256(GOLDEN.read_bytes()).hexdigest()[: len(BEHAVIOUR)]
    assert BEHAVIOUR == digest, f"set grpo_lab.experiments.store.BEHAVIOUR = {digest!r}"


@pytest.mark.parametrize("version", sorted(COMPATIBLE))
def test_a_compatible_behaviour_computes_what_today_does_wherever_it_is_accepted(version):
    """A behaviour version in `store.COMPATIBLE` keeps stored runs whose config its predicate accepts:
    its golden data (golden_metrics.<version>.json, with the configs they were made of) must equal
    today's on every metric it logged, for every golden config that is the same today and that the
    predicate accepts; and where the rows differ, the predicate must reject the config."""
    old = json.loads(GOLDEN.with_name(f"golden_metrics.{version}.json").read_text())
    today = json.loads(GOLDEN.read_text())
    accepted = 0
    for name, config in old["configs"].items():
        now = golden_config(name, "tiny")
        if config is None or now is None or Config.from_dict({**config, "model": "tiny"}) != now:
            continue  # a config that is not the same today says nothing of the behaviour
        same = all(
            {k: new.get(k) for k in was} == was
            for was, new in zip(old["metrics"][name], today[name], strict=True)
        )
        assert same or not COMPATIBLE[version](config), f"{name}: rows changed, yet {version}'s runs are kept"
        accepted += same and COMPATIBLE[version](config)
    assert accepted >= len(old["configs"]) // 2, "the check should cover most golden configs"
