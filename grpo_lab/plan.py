"""`grpo-lab plan`: before a long job, the runs each notebook needs under a profile, how many the run
store already holds finished and current, and the core-hours of the rest.

- The runs of a notebook: the designs of the modules `grpo_lab.studies.NOTEBOOKS` lists for it (its
  study modules, and a shared design of `grpo_lab.comparisons` it runs itself), each resolved by the
  module's own `settings(profile)` with its seeds: one `Config` per (configuration, seed). Runs are
  shared through the store by their key (`experiments.store.run_dir`), so a run two notebooks need
  is counted once, for the first notebook (in the order `grpo-lab figures` runs them) that needs it.
- Stored: a current run (`experiments.store.is_current`: sealed by this behaviour of the training
  code, every file as sealed; what the store loads instead of training) under the run's own key in
  the profile's store; a stored run that is torn or stale is counted apart, and trained again. A
  run of another configuration (an older study base, another build of the embedded model, another
  task file) has another key, so it does not count. `from_empty` ignores the store.
- Cost of a run still to train, on one core: setup + steps x seconds per step + evaluations x seconds
  per evaluation, from the committed calibration (`CALIBRATION`, written by `calibrate`: the study
  base timed on one torch thread on this kind of machine; a named pretrained model from its own bed's
  timing, `calibrate(model=...)`, under `models`). A configuration whose batch, passes,
  completion length or validation prompts differ from the calibrated base is scaled by
  `step_seconds` and `evaluation_seconds`; where another seed of the same configuration is finished
  in the store, its own measured step time (`time/step_s_mean`) is used instead.
- Spent, of a stored run: what it took on one core, by the same rule with its own measured mean
  step time (the load of the machine it ran on included) and the calibrated evaluations, which the
  run log does not time: the measured cost of what the store holds.
Hours on this machine: the core-hours over `os.cpu_count()`, one worker per core (the pool's
default); the cost study (08) times its runs one after the other, which this leaves out."""

import datetime
import importlib
import importlib.util
import json
import os
import platform
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from grpo_lab.analysis.plots import project_root
from grpo_lab.config import Config
from grpo_lab.experiments.store import run_dir
from grpo_lab.experiments.store import state as store_state
from grpo_lab.models.pretrained import is_pretrained
from grpo_lab.profiles import PROFILES, Profile
from grpo_lab.runlog import is_finished, read_config, read_summary
from grpo_lab.studies import NOTEBOOKS

CALIBRATION = Path(__file__).parent / "studies" / "calibration.json"
"""the committed calibration: seconds of the study base on one torch thread (`calibrate` writes it)"""
CALIBRATED_FIELDS = (
    "prompts_per_step",
    "group_size",
    "max_completion_length",
    "num_iterations",
    "num_mini_batches",
    "val_size",
    "val_sampled_size",
    "val_samples",
)
"""the fields of the calibrated config the proportional rule scales by"""
CALIBRATION_STEPS = 4
"""steps of the calibration run: the first (warm-up) is not timed; validation at steps 0 and 2"""
PACKAGES = ("grpo_lab.studies", "grpo_lab.comparisons")
"""where the modules `NOTEBOOKS` names live"""
ALLOWANCE = "allowance"
"""the state of a planned run that stands for runs a study chooses later (`study_allowance`)"""
SHOWN = 10
"""unusable stored runs the printed plan names (the rest are counted)"""
TOTAL = "total"
"""the key of the totals in the JSON form"""
KEYS = ("runs", "stored", "to_train", "core_hours", "spent_core_hours", "stale", "torn", "allowance")
"""what the plan gives per notebook and in total: runs needed, current in the store, still to train
(with their core-hours), the core-hours the stored ones took (their measured step times), and among
those to train the stored ones that are stale (of another behaviour of the training code) or torn
(unsealed, or a file changed since sealing; a run being trained or interrupted is neither, and is
named in the printed plan), and the allowance: runs a study chooses once earlier results are in,
counted at their cost until then"""


@dataclass(frozen=True)
class PlannedRun:
    """One run a notebook needs."""

    notebook: str
    """the first notebook (in execution order) that needs it"""
    config: Config
    """the full config, seed set"""
    path: Path
    """its directory in the store (named by its key)"""
    stored: bool
    """finished and current in the store (always False from empty)"""
    state: str
    """`experiments.store.state` of its directory ('missing' from empty)"""
    why: str
    """what is wrong with a stored run that may not be used ('' otherwise)"""
    seconds: float
    """estimated seconds to train it on one core (0 when stored)"""
    spent: float = 0.0
    """seconds the stored run took on one core: `run_seconds` with its own measured mean step time
    (0 when not stored)"""


@dataclass(frozen=True)
class Plan:
    """The runs of a profile's notebooks, each attributed to the first notebook that needs it."""

    profile: str
    notebooks: tuple[str, ...]
    """every planned notebook, in execution order"""
    runs: tuple[PlannedRun, ...]
    shared: dict[str, int]
    """notebook -> runs it needs that an earlier notebook already counts"""
    store: Path
    """the run store looked in"""
    from_empty: bool
    calibration: dict[str, Any]
    complete: bool = False
    """planned every notebook (no `only`)"""

    def counts(self) -> dict[str, dict[str, float]]:
        """{notebook: {runs, stored, to_train, core_hours}, ..., "total": {...}}."""
        table = {}
        for notebook in [*self.notebooks, TOTAL]:
            mine = [r for r in self.runs if notebook in (TOTAL, r.notebook)]
            stored = sum(r.stored for r in mine)
            hours = sum(r.seconds for r in mine) / 3600
            spent = sum(r.spent for r in mine) / 3600
            stale = sum(r.state == "stale" for r in mine)
            torn = sum(r.state in ("unsealed", "torn") for r in mine)
            table[notebook] = {"runs": len(mine), "stored": stored, "to_train": len(mine) - stored,
                               "core_hours": round(hours, 3), "spent_core_hours": round(spent, 3),
                               "stale": stale, "torn": torn,
                               "allowance": sum(r.state == ALLOWANCE for r in mine)}  # fmt: skip
        return table

    def to_train(self) -> list[PlannedRun]:
        """The runs still to train, in execution order."""
        return [r for r in self.runs if not r.stored]

    def unused(self) -> list[Path]:
        """The run directories in the store that no planned run names (sorted): runs of an old start
        or behaviour, of a design since changed, or made by hand. Only a plan of every notebook can
        say so (an error under `only`, or from empty)."""
        if self.from_empty or not self.complete:
            raise ValueError("only the plan of every notebook against the store knows which runs are unused")
        planned = {r.path for r in self.runs}
        found = sorted(p for p in self.store.iterdir() if p.is_dir()) if self.store.is_dir() else []
        return [p for p in found if p not in planned]

    def format(self, cores: int | None = None) -> str:
        """The plan as a table: per notebook and in total, runs, stored, to train, core-hours and
        hours on `cores` (default: this machine's) with one worker per core."""
        cores = cores or os.cpu_count() or 1
        width = max([len(TOTAL), *map(len, self.notebooks)])
        columns = ("runs", "stored", "to train", "stale", "torn", "core-h", f"h on {cores}", "spent")
        header = f"{'notebook':{width}s} " + " ".join(f"{c:>9s}" for c in columns)
        lines = [header, "-" * len(header)]
        for notebook, row in self.counts().items():
            if notebook == TOTAL:
                lines.append("-" * len(header))
            hours = row["core_hours"]
            lines.append(
                f"{notebook:{width}s} {row['runs']:9d} {row['stored']:9d} {row['to_train']:9d} "
                f"{row['stale']:9d} {row['torn']:9d} {hours:9.2f} {hours / cores:9.2f} "
                f"{row['spent_core_hours']:9.2f}"
            )
        shared = {k: v for k, v in self.shared.items() if v}
        store = "the store ignored (--from-empty)" if self.from_empty else f"the store {self.store}"
        notes = [
            f"profile {self.profile!r}; {store}.",
            "A run two notebooks need is counted once, under the first; runs a notebook needs that an "
            "earlier one counts: "
            + (", ".join(f"{k} {v}" for k, v in shared.items()) if shared else "none")
            + ".",
            f"Core-hours: one core per run, from {describe(self.calibration)}; "
            f"hours on {cores} cores: one worker per core; spent: the core-hours the stored runs took, "
            "from their own measured step times (under the load they ran with) and calibrated evaluations.",
        ]
        allowed = [r for r in self.runs if r.state == ALLOWANCE]
        if allowed:
            notes.append(
                f"Allowance: {len(allowed)} runs ({sum(r.seconds for r in allowed) / 3600:.2f} core-h) "
                "stand for runs chosen once earlier results are stored (02's leave-one-out confirms what "
                "the screen finds)."
            )
        unusable = [r for r in self.runs if r.why and r.state != "missing"]
        if unusable:
            notes.append(
                f"Stored runs that may not be used and are trained again ({len(unusable)}; an unfinished one "
                "may also be training now):"
            )
            notes += [f"  {r.path.name}: {r.state}, {r.why}" for r in unusable[:SHOWN]]
            if len(unusable) > SHOWN:
                notes.append(f"  and {len(unusable) - SHOWN} more")
        return "\n".join([*lines, "", *notes])


def notebooks(only: list[str] | None = None, root: Path | None = None) -> list[Path]:
    """The numbered notebooks under `root`/notebooks, in execution order; with `only`, those named
    (by stem, e.g. '03_schemes', or by number, '03'). A name that matches none is an error naming
    the valid ones."""
    found = sorted(((root or project_root()) / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    if not only:
        return found
    unknown = [n for n in only if not any(n in (p.stem, p.stem.split("_", 1)[0]) for p in found)]
    if unknown:
        raise ValueError(f"no notebook matches {unknown}; valid: {', '.join(p.stem for p in found)}")
    return [p for p in found if p.stem in only or p.stem.split("_", 1)[0] in only]


def runs_root(profile: str) -> Path:
    """The shared run store of `profile` (`Profile.runs_dir()`)."""
    return _profile(profile).runs_dir()


def _profile(name: str) -> Profile:
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; valid: {', '.join(PROFILES)}")
    return PROFILES[name]


def notebook_studies(path: Path) -> list[str]:
    """The modules whose designs the notebook `path` runs, its own study first, as the one notebook
    table `grpo_lab.studies.NOTEBOOKS` lists them (none for a notebook it does not list)."""
    return list(NOTEBOOKS.get(path.stem, ()))


def _module(name: str) -> ModuleType:
    """The module of a design `NOTEBOOKS` names: a study module (`grpo_lab.studies.NAME`), else a
    shared design of the comparisons layer (`grpo_lab.comparisons.NAME`); module names are unique in
    the package, so at most one exists."""
    for package in PACKAGES:
        if importlib.util.find_spec(f"{package}.{name}") is not None:
            return importlib.import_module(f"{package}.{name}")
    raise ValueError(f"no module {name!r} in {' or '.join(PACKAGES)}")


def study_runs(name: str, profile: str, store: Path | None = None) -> list[Config]:
    """Every run of a module's design under `profile`: its `design(settings(profile))` over the
    settings' seeds, or the module's `runs(design, settings, store)` where it chooses its runs itself
    (the screen seeds each run; the schemes follow the sequential rule over what `store` holds, None:
    an empty store; a study of several designs, each on its own profile, lists them all)."""
    module = _module(name)
    settings = module.settings(profile)
    designs = module.design(settings)
    if hasattr(module, "runs"):
        return list(module.runs(designs, settings, store))
    return [point.config.replace(seed=seed) for point in designs for seed in settings.seeds]


def study_allowance(name: str, profile: str) -> list[Config]:
    """The runs a study will add once earlier results are in (its `allowance(settings)`: 02's
    leave-one-out confirms the tricks the screen finds active), counted at their cost until then."""
    module = _module(name)
    return list(module.allowance(module.settings(profile))) if hasattr(module, "allowance") else []


def plan(
    profile: str,
    only: Sequence[str] | None = None,
    from_empty: bool = False,
    root: Path | None = None,
    store: Path | None = None,
    calibration: dict[str, Any] | None = None,
) -> Plan:
    """The plan of the notebooks under `root` (default: the project's; `only` as for
    `figures.notebooks`) for `profile`, against the run store `store` (default: the profile's
    shared store) unless `from_empty`, costed by `calibration` (default: the committed one)."""
    _profile(profile)
    store = Path(store) if store is not None else runs_root(profile)
    calibration = calibration if calibration is not None else load_calibration()
    measured = {} if from_empty else measured_step_seconds(store)
    runs: dict[Path, PlannedRun] = {}
    names, shared = [], {}
    for path in notebooks(list(only) if only else None, root):
        names.append(path.stem)
        shared[path.stem] = 0
        for name in notebook_studies(path):
            for config in study_runs(name, profile, None if from_empty else store):
                where = run_dir(config, store)
                if where in runs:
                    shared[path.stem] += runs[where].notebook != path.stem
                    continue
                state, why = ("missing", "") if from_empty else store_state(where)
                stored = state == "current"
                seconds = 0.0 if stored else run_seconds(config, calibration, measured.get(_sibling(config)))
                spent = run_seconds(config, calibration, own_step_seconds(where)) if stored else 0.0
                runs[where] = PlannedRun(path.stem, config, where, stored, state, why, seconds, spent)
            for config in study_allowance(name, profile):
                where = run_dir(config, store)
                if where not in runs:
                    seconds = run_seconds(config, calibration, measured.get(_sibling(config)))
                    runs[where] = PlannedRun(path.stem, config, where, False, ALLOWANCE, "", seconds)
    return Plan(profile, tuple(names), tuple(runs.values()), shared, store, from_empty, calibration, not only)


# --- cost -------------------------------------------------------------------------------------------


def load_calibration(path: Path = CALIBRATION) -> dict[str, Any]:
    """The committed calibration; a clear error when there is none."""
    if not path.exists():
        raise ValueError(f"no calibration at {path}: run `grpo-lab plan --calibrate` once on this machine")
    return json.loads(path.read_text())


def describe(calibration: dict[str, Any]) -> str:
    """Where the seconds come from, in a few words."""
    machine = calibration["machine"]
    return (
        f"the calibration of {calibration['date']} ({machine['cpu']}, {calibration['torch_threads']} torch "
        f"thread; {calibration['seconds']['step']:.2f} s per base step)"
    )


def calibrated(config: Config, calibration: dict[str, Any]) -> tuple[dict[str, Any], dict[str, float]]:
    """The calibrated config fields and seconds that `config`'s cost is scaled from: the entry of
    `calibration["models"]` for a named pretrained model (`models.pretrained.PRETRAINED`: a model of
    another size costs another time a token, which no proportional rule from the embedded model gives;
    one with no calibration is an error that says how to measure it), else the study base's (the
    embedded model, or a user's model directory, priced as if it were the embedded model)."""
    if not is_pretrained(config.model):
        return calibration["config"], calibration["seconds"]
    models = calibration.get("models", {})
    if config.model not in models:
        calibrated_models = ", ".join(["embedded", *models])
        raise ValueError(
            f"no calibration for the model {config.model!r} (calibrated: {calibrated_models}): run "
            f"`grpo-lab plan --calibrate --model {config.model}` once on this machine"
        )
    return models[config.model]["config"], models[config.model]["seconds"]


def evaluations(config: Config) -> int:
    """Validation passes of a run: before step 0, before every `eval_every`-th step from
    `eval_start` on, and one after the last update."""
    due = range(0, config.steps, config.eval_every)
    return sum(step == 0 or step >= config.eval_start for step in due) + 1


def step_seconds(config: Config, calibration: dict[str, Any]) -> float:
    """Seconds of one training step of `config` on one core, scaled from the calibrated base by the
    proportional rule: sampling and the fixed log-probs by the tokens of the batch (completions x
    maximum completion length), the updates by those tokens times the passes over the batch
    (`num_iterations`), the rest of the step (scoring, controllers, logging) by the completions.
    Mini-batches only split the updates (their optimizer steps are cheap on the small model);
    resampling tricks (dynamic sampling, dynamic group size) cost more than the rule says, which the
    cost study (08) measures."""
    base, seconds = calibrated(config, calibration)
    completions = config.prompts_per_step * config.group_size
    base_completions = base["prompts_per_step"] * base["group_size"]
    tokens = completions * config.max_completion_length / (base_completions * base["max_completion_length"])
    passes = config.num_iterations / base["num_iterations"]
    rest = seconds["step"] - seconds["sample"] - seconds["logprob"] - seconds["train"]
    return (
        (seconds["sample"] + seconds["logprob"]) * tokens
        + seconds["train"] * tokens * passes
        + max(rest, 0.0) * completions / base_completions
    )


def validation_completions(fields: dict[str, Any]) -> int:
    """Completions decoded by one validation pass of a config's `fields`: one greedy completion per
    validation prompt and `val_samples` sampled ones per prompt of the sampled validation set
    (`Trainer.validate`)."""
    return int(fields["val_size"] + fields["val_sampled_size"] * fields["val_samples"])


def evaluation_seconds(config: Config, calibration: dict[str, Any]) -> float:
    """Seconds of one validation pass of `config` on one core: the calibrated pass scaled by the
    completions it decodes (`validation_completions`) times the maximum completion length."""
    base, seconds = calibrated(config, calibration)
    scale = (validation_completions(config.to_dict()) * config.max_completion_length) / (
        validation_completions(base) * base["max_completion_length"]
    )
    return seconds["evaluation"] * scale


def run_seconds(config: Config, calibration: dict[str, Any], measured_step: float | None = None) -> float:
    """Seconds to train `config` on one core: setup + steps x step seconds (`measured_step`, another
    seed's own mean step time, when given; else `step_seconds`) + evaluations x `evaluation_seconds`."""
    step = measured_step if measured_step is not None else step_seconds(config, calibration)
    return (
        calibrated(config, calibration)[1]["setup"]
        + config.steps * step
        + evaluations(config) * evaluation_seconds(config, calibration)
    )


def _sibling(config: Config) -> str:
    """The key of a configuration whatever its seed: the runs whose step times stand for each other."""
    return config.replace(seed=0).key()


def own_step_seconds(path: Path) -> float | None:
    """The mean step time a finished run measured (`time/step_s_mean` of its summary.json), if any."""
    value = (read_summary(path) or {}).get("time/step_s_mean")
    return None if value is None else float(value)


def measured_step_seconds(store: Path) -> dict[str, float]:
    """Sibling key (`_sibling`) -> the mean step time a finished run of that configuration measured
    (`time/step_s_mean` of its summary.json); runs whose config no longer loads are left out."""
    found: dict[str, float] = {}
    for path in sorted(p for p in store.glob("*") if p.is_dir()):
        summary = read_summary(path) or {}
        if "time/step_s_mean" not in summary:
            continue
        try:
            config = Config.from_dict(read_config(path))
        except (ValueError, TypeError, KeyError):  # a run of an older Config: its fields changed
            continue
        found[_sibling(config)] = float(summary["time/step_s_mean"])
    return found


def calibrate(
    path: Path = CALIBRATION, steps: int = CALIBRATION_STEPS, model: str | None = None
) -> dict[str, Any]:
    """Time a base configuration on one torch thread: the setup of a run (model and task loaded; the
    embedded model built or the pretrained one converted beforehand, untimed), `steps` training steps
    (the first, warm-up, left out; each phase as the trainer logs it) and the validation passes at steps
    0 and 2 (a step's wall time minus its logged step time). `model` None times the study base
    (`comparisons.bed.base("full")`, its own batch) and writes the top of `path`; a pretrained model's
    name times the pretrained bed (`comparisons.pretrained_bed.base`, under the full profile) and writes
    it under `models` in `path`, the rest of the file kept. Each record holds the date, the machine, the
    torch threads and what was timed; returns the record written."""
    import torch

    from grpo_lab.comparisons import bed, pretrained_bed
    from grpo_lab.experiments.execution import prebuild
    from grpo_lab.threads import torch_threads
    from grpo_lab.training.trainer import Trainer

    if steps < 3:
        raise ValueError(f"the calibration needs at least 3 steps (warm-up, validation at 2), got {steps}")
    if model is not None and model != pretrained_bed.MODEL:
        raise ValueError(f"no bed to calibrate {model!r} on; calibrated models: {pretrained_bed.MODEL!r}")
    if model is None:
        base, what = bed.base("full"), "the study base (comparisons.bed.base('full'))"
    else:
        base = pretrained_bed.base(pretrained_bed.pilot_settings("full"))
        what = f"the pretrained bed of {model} (comparisons.pretrained_bed.base, full profile)"
    config = base.replace(steps=steps, eval_every=2)
    prebuild([config])
    rows, validations = [], []
    with torch_threads(1):
        start = time.perf_counter()
        trainer = Trainer(config, None)
        setup = time.perf_counter() - start
        for _ in range(steps):
            start = time.perf_counter()
            row = trainer.step()
            wall = time.perf_counter() - start
            if "val/accuracy" in row:
                validations.append(wall - row["time/step_s"])
            rows.append(row)
    timed = rows[1:]
    phases = {
        "step": "time/step_s",
        "sample": "time/sample_s",
        "logprob": "time/logprob_s",
        "train": "time/train_s",
    }
    seconds = {name: sum(r[column] for r in timed) / len(timed) for name, column in phases.items()}
    record = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": {"cpu": _cpu_name(), "cores": os.cpu_count(), "platform": platform.platform()},
        "torch": torch.__version__,
        "torch_threads": 1,
        "timed": (
            f"{what}, seed {config.seed}: the setup of a run "
            f"(model and task loaded), {len(timed)} training steps after one warm-up step (each phase as "
            f"the trainer logs it) and {len(validations)} validation passes of {config.val_size} prompts"
        ),
        "config": {field: getattr(config, field) for field in CALIBRATED_FIELDS},
        "seconds": {"setup": setup, **seconds, "evaluation": sum(validations) / len(validations)},
    }
    kept = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps(merged(kept, record, model), indent=2) + "\n")
    return record


def merged(kept: dict[str, Any], record: dict[str, Any], model: str | None) -> dict[str, Any]:
    """The calibration file with `record` written in: the study base's at the top (`model` None), a
    pretrained model's under `models`; every other record of `kept` stays."""
    if model is None:
        return {**record, **({"models": kept["models"]} if "models" in kept else {})}
    return {**kept, "models": {**kept.get("models", {}), model: record}}


def _cpu_name() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo), else what `platform` knows."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


# --- progress ---------------------------------------------------------------------------------------


class Progress:
    """Progress over the runs a plan still has to train, read from the store: `poll()` returns a
    line per run that finished (summary.json) or failed (an error.json written after the watch
    began) since the last call, with the runs done so far and an estimate of the time left: the
    remaining runs' estimated core-seconds over the workers, scaled by how the finished runs' wall
    time compared with their estimate."""

    def __init__(self, plan: Plan, workers: int | None = None) -> None:
        self.pending = {r.path: r for r in plan.to_train()}
        self.total = len(self.pending)
        self.workers = workers or os.cpu_count() or 1
        self.started = time.time()
        self.done_seconds = 0.0

    def poll(self) -> list[str]:
        """Lines for the runs that ended since the last call."""
        lines = []
        for path, run in list(self.pending.items()):
            failed = (path / "error.json").exists() and (path / "error.json").stat().st_mtime >= self.started
            if not (is_finished(path) or failed):
                continue
            del self.pending[path]
            self.done_seconds += run.seconds
            done = self.total - len(self.pending)
            status = "FAILED" if failed else "done"
            lines.append(
                f"[{done}/{self.total} runs] {run.notebook}: {path.name} {status}; {self.left()} left"
            )
        return lines

    def left(self) -> str:
        """The estimated wall time left, as hours and minutes."""
        remaining = sum(r.seconds for r in self.pending.values()) / self.workers
        if self.done_seconds > 0:
            remaining *= (time.time() - self.started) / (self.done_seconds / self.workers)
        hours, minutes = divmod(round(remaining / 60), 60)
        return f"about {hours} h {minutes:02d} min" if hours else f"about {minutes} min"
