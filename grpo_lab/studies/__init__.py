"""The notebook studies: the study base every study derives from (`base`), the designs shared by
several studies, and one module per study. Every study module has the same entry points:
`settings(profile, seeds=None, steps=None)` (its own full-profile budget, `profiles.Budget`, as a
module constant), `design(settings)` (the labelled configurations), `run(points, settings)`, its
measures and `figure(...)` (docs/studies.md).

`NOTEBOOKS` is the one table of which notebook reads which studies' runs: `grpo-lab plan`, the index
of figures and the docs all read it."""

from grpo_lab.studies.base import base
from grpo_lab.studies.designs import fault_points, for_profile, variant_points

NOTEBOOKS: dict[str, tuple[str, ...]] = {
    "01_baseline": ("baseline",),
    "02_ablations": ("ablations", "screen"),
    "03_schemes": ("schemes",),
    "04_fault_injection": ("faults",),
    "05_long_horizon": ("horizon",),
    "06_sensitivity": ("sensitivity",),
    "07_kl_estimators": ("kl_estimators",),
    "08_cost": ("cost",),
    "09_claims": ("claims",),
    "10_playground": (),
    "11_your_task": ("your_task",),
    "12_verdicts": ("verdicts",),
    "13_troubleshooting": ("troubleshooting",),
    "14_scenarios": ("scenarios", "schemes"),
    "15_long_verdicts": ("long_verdicts", "schemes"),
    "16_scheme_sensitivity": ("scheme_sensitivity",),
    "17_fault_robustness": ("fault_robustness",),
}
"""notebook (its file's stem) -> the study modules (of this package) whose designs its runs come from,
its own study first; the playground trains live and reads no stored runs"""

__all__ = ["NOTEBOOKS", "base", "fault_points", "for_profile", "variant_points"]
