"""Every notebook executes headlessly under papermill with the smoke profile: every cell runs without an
error and the notebook writes its figure."""

import json
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def test_there_are_notebooks():
    assert NOTEBOOKS


@pytest.mark.slow
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
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
