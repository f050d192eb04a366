"""`grpo_lab.analysis` only reads run logs: none of its modules imports what trains, samples or loads
a model, so that reading results never needs (or silently starts) training."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ANALYSIS = Path(__file__).resolve().parents[2] / "grpo_lab" / "analysis"
FORBIDDEN = ("training", "models", "experiments", "comparisons", "studies")
"""subpackages and modules of grpo_lab that train, sample or load a model"""


def imported(source: str) -> set[str]:
    """Every module an import statement of `source` names, `from grpo_lab import x` giving
    'grpo_lab.x' (x may be a module); relative imports are resolved within grpo_lab.analysis."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                parent = ["grpo_lab", "analysis"][: max(0, 3 - node.level)]
                module = ".".join([*parent, module] if module else parent)
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def forbidden(names: set[str]) -> list[str]:
    bad = tuple(f"grpo_lab.{name}" for name in FORBIDDEN)
    return sorted(n for n in names if n in bad or n.startswith(tuple(f"{b}." for b in bad)))


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import grpo_lab.training.trainer", ["grpo_lab.training.trainer"]),
        ("from grpo_lab import training, runlog", ["grpo_lab.training"]),
        (
            "from grpo_lab.models.loading import load_policy",
            ["grpo_lab.models.loading", "grpo_lab.models.loading.load_policy"],
        ),
        (
            "def f():\n    from grpo_lab.experiments import run_design",
            ["grpo_lab.experiments", "grpo_lab.experiments.run_design"],
        ),
        ("from ..studies import base", ["grpo_lab.studies", "grpo_lab.studies.base"]),
        ("from grpo_lab.analysis.stats import curve\nimport numpy", []),
        ("from grpo_lab import runlog", []),
    ],
)
def test_the_check_finds_every_form_of_import(source, expected):
    assert forbidden(imported(source)) == expected


@pytest.mark.parametrize("module", sorted(ANALYSIS.glob("*.py")), ids=lambda p: p.name)
def test_analysis_modules_import_nothing_that_trains(module):
    assert forbidden(imported(module.read_text())) == []


@pytest.mark.parametrize("module", ["grpo_lab.analysis", "grpo_lab.runlog"])
def test_reading_run_logs_loads_neither_the_trainer_nor_a_model_library(module):
    """At run time, not only in the source text: a fresh interpreter that imports `module` has not
    loaded the trainer or transformers, and `grpo_lab.Trainer` still loads when asked for."""
    code = (
        f"import sys, {module}\n"
        "loaded = [m for m in ('transformers', 'grpo_lab.training.trainer') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
        "import grpo_lab\n"
        "assert grpo_lab.Trainer.__module__ == 'grpo_lab.training.trainer' and callable(grpo_lab.train)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
