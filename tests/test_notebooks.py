"""Every notebook executes headlessly under papermill with the smoke profile: every cell runs without an
error and the notebook writes its figure."""

import json
import re
import time
from pathlib import Path

import pytest

from grpo_lab.figures import _assignments

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def test_there_are_notebooks():
    assert NOTEBOOKS


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebooks_are_stored_without_outputs_and_with_cell_ids(notebook):
    """Outputs belong to the executed copies under figures/; a cell without an id is a hard error in
    future nbformat releases (papermill warns today)."""
    cells = json.loads(notebook.read_text())["cells"]
    assert all("id" in c for c in cells), f"{notebook.name}: a cell without an id"
    code = [c for c in cells if c["cell_type"] == "code"]
    assert all(not c["outputs"] and c["execution_count"] is None for c in code), notebook.name


def test_test_modules_have_unique_names():
    """pytest's default import mode puts each test directory on sys.path and imports by basename:
    two test files of one name in different folders fail collection."""
    names = [p.name for p in (ROOT / "tests").rglob("test_*.py")]
    assert len(names) == len(set(names)), sorted({n for n in names if names.count(n) > 1})


STUDIES = [p for p in NOTEBOOKS if p.stem != "10_playground"]
"""the notebooks of a study module (the playground is a live session, not a study)"""
TIMING = re.compile(r"\d\s*(s|seconds?|min|minutes?|h|hours?)\b|\b(an?|about) (hour|minute)")
"""a measured time: a number with a unit of time, or 'about an hour'"""


@pytest.mark.parametrize("notebook", STUDIES, ids=lambda p: p.stem)
def test_parameters_cells_leave_budgets_and_timings_to_the_modules(notebook):
    """A parameters cell sets the profile, seeds=None and steps=None (the study module's budget) and
    what a user tweaks, never a list or dict of what the study compares (a copy would drift from the
    module's, and runs shared with another notebook would silently stop being shared) nor a measured
    time (it goes stale: docs/studies.md, Timings; `grpo-lab plan` gives the current ones)."""
    cells = json.loads(notebook.read_text())["cells"]
    (source,) = ["".join(c["source"]) for c in cells if "parameters" in c["metadata"].get("tags", [])]
    values = _assignments(source)
    assert (values["profile"], values["seeds"], values["steps"]) == ("smoke", None, None)
    copied = {k: v for k, v in values.items() if isinstance(v, (list, tuple, dict)) and v}
    assert not copied, f"{notebook.name}: lists or dicts in the parameters cell: {sorted(copied)}"
    assert not TIMING.search(source), f"{notebook.name}: a timing in the parameters cell"


@pytest.mark.slow
@pytest.mark.parametrize(
    "notebook",
    [pytest.param(p, id=p.stem, marks=pytest.mark.xdist_group(p.stem)) for p in NOTEBOOKS],
)
def test_papermill_smoke(notebook, tmp_path):
    import papermill

    out = tmp_path / notebook.name
    started = time.time()
    papermill.execute_notebook(
        str(notebook), str(out), parameters={"profile": "smoke"}, cwd=str(ROOT), progress_bar=False
    )
    cells = json.loads(out.read_text())["cells"]
    assert any(c.get("metadata", {}).get("tags") == ["injected-parameters"] for c in cells)
    errors = [
        o
        for c in cells
        if c["cell_type"] == "code"
        for o in c.get("outputs", [])
        if o["output_type"] == "error"
    ]
    assert not errors
    prefix = notebook.stem.split("_", 1)[0]
    written = [p for p in (ROOT / "figures").glob(f"{prefix}_*_smoke.png") if p.stat().st_mtime >= started]
    assert written, f"{notebook.name} wrote no figure under figures/ in the smoke profile"
