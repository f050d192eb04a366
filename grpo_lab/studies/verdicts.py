"""The verdict table (notebook 12; `docs/sources.md`, Evaluation guide §6.3 and Tricks review
§3.1): every scheme against `grpo` and every trick left out of all tricks on, on the study base, arms
paired on seeds. It asks for the designs of `studies.schemes` (notebook 03) and of the tricks'
leave-one-out in `studies.ablations` (notebook 02) under their own settings, so their runs are shared
through the store and, after those notebooks, this one only loads.

The study has two settings, one per design, so `settings` and `design` return dicts keyed by
'schemes' and 'tricks' (and `run` a `SweepResult` per key); the rest is the one table and figure."""

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd

from grpo_lab.analysis import verdicts
from grpo_lab.analysis.plots import project_root
from grpo_lab.config import Config
from grpo_lab.experiments import SweepResult
from grpo_lab.experiments.designs import Point
from grpo_lab.profiles import Profile
from grpo_lab.runlog import write_text_atomic
from grpo_lab.studies import ablations, paired, schemes

DESIGNS = ("schemes", "tricks")
"""the two designs of the table, each under its own study's settings"""


def settings(
    profile: str, seeds: Sequence[int] | None = None, steps: int | None = None
) -> dict[str, Profile]:
    """The profile of each design: 'schemes', `schemes.settings` (03's runs); 'tricks',
    `ablations.settings` (02's runs); `seeds` and `steps` apply to both."""
    return {
        "schemes": schemes.settings(profile, seeds, steps),
        "tricks": ablations.settings(profile, seeds, steps),
    }


def design(settings: Mapping[str, Profile]) -> dict[str, list[Point]]:
    """Each design under its settings: the schemes of `schemes.design`, the leave-one-out of
    `ablations.trick_points`."""
    return {
        "schemes": schemes.design(settings["schemes"]),
        "tricks": ablations.trick_points(settings["tricks"]),
    }


def runs(
    designs: Mapping[str, Sequence[Point]], settings: Mapping[str, Profile], root: str | Path | None = None
) -> list[Config]:
    """The runs both designs need (what `grpo-lab plan` counts): the schemes' under the sequential
    rule (`schemes.runs`, against the store `root`; None: an empty one), the leave-one-out's over
    its seeds."""
    tricks = [p.config.replace(seed=seed) for p in designs["tricks"] for seed in settings["tricks"].seeds]
    return [*schemes.runs(designs["schemes"], settings["schemes"], root), *tricks]


def run(
    designs: Mapping[str, Sequence[Point]], settings: Mapping[str, Profile], **options: Any
) -> dict[str, SweepResult]:
    """Train (or load) each design in its run store: the schemes look by look under the sequential
    rule (`schemes.run`), the leave-one-out over its seeds; a failed run is an error (a verdict
    needs every arm). `options` as for `experiments.execute`."""
    return {
        "schemes": schemes.run(designs["schemes"], settings["schemes"], **options),
        "tricks": paired.run(designs["tricks"], settings["tricks"], **options),
    }


def scores(results: Mapping[str, SweepResult]) -> pd.DataFrame:
    """One row per run of both designs with its scores (`schemes.scores`, `ablations.scores`)."""
    return pd.concat(
        [schemes.scores(results["schemes"]), ablations.scores(results["tricks"])], ignore_index=True
    )


def table(scored: pd.DataFrame, margin: float | None = None) -> pd.DataFrame:
    """The verdict table: schemes against grpo, then tricks (all on against all but that one);
    `margin` as for `analysis.verdicts.compare` (None: a share of each reference's gain)."""
    rows = [schemes.table(scored, margin), ablations.table(scored, margin)]
    return pd.concat(rows, ignore_index=True)


def figure(verdict_table: pd.DataFrame, settings: Mapping[str, Profile]) -> plt.Figure:
    """The table as a forest plot (`paired.forest`), with each design's steps."""
    runs = f"{settings['schemes'].steps} steps (schemes), {settings['tricks'].steps} (tricks)"
    return paired.forest(verdict_table, runs, "schemes vs grpo, tricks left out of all on")


def save_markdown(verdict_table: pd.DataFrame, name: str) -> Path:
    """Write the table as markdown to figures/<name>.md, next to its figure (the figures index
    includes it)."""
    path = project_root() / "figures" / f"{name}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, verdicts.markdown(verdict_table))
    return path
