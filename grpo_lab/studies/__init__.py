"""The notebook studies: one module per notebook, named after it (notebooks/NN_name.ipynb ->
`studies/name.py`), holding that notebook's settings, measures and figures. A study derives its
configurations from the study bed and shares designs, arms, sequential looks and verdict rules through
`grpo_lab.comparisons`; no study module imports another. Every study module has the same entry points:
`settings(profile, seeds=None, steps=None)` (its own full-profile budget, `profiles.Budget`, as a
module constant), `design(settings)` (the labelled configurations), `run(points, settings)`, its
measures and `figure(...)` (docs/studies.md).

`NOTEBOOKS` is the one table of which notebook reads which designs' runs: `grpo-lab plan`, the index
of figures and the docs all read it."""

NOTEBOOKS: dict[str, tuple[str, ...]] = {
    "01_baseline": ("baseline",),
    "02_ablations": ("ablations", "screen", "schemes"),
    "03_schemes": ("schemes",),
    "04_fault_injection": ("fault_injection",),
    "05_long_horizon": ("long_horizon",),
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
    "18_transfer": ("transfer",),
}
"""notebook (its file's stem) -> the modules whose designs its runs come from, its own study first: a
study module of this package, or a design of `grpo_lab.comparisons` a notebook runs itself (02's
factorial `screen`); module names are unique in the package, so a name says which. The playground
trains live and reads no stored runs"""

__all__ = ["NOTEBOOKS"]
