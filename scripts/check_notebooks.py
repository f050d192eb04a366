"""Fail when a committed notebook holds outputs, execution counts or saved widget state (run `make format`
to strip them), defines functions in its cells, or lacks a `parameters`-tagged cell."""

import json
import sys
from pathlib import Path

problems = []
for path in sorted(Path("notebooks").glob("*.ipynb")):
    notebook = json.loads(path.read_text())
    cells = notebook["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    if any(c.get("outputs") or c.get("execution_count") for c in code):
        problems.append(f"{path}: has outputs; strip them (make format)")
    if "widgets" in notebook.get("metadata", {}):
        problems.append(
            f"{path}: has saved widget state (JupyterLab's 'Save Widget State'); strip it (make format)"
        )
    if any(
        line.lstrip().startswith(("def ", "class "))
        for c in code
        for line in "".join(c["source"]).splitlines()
    ):
        problems.append(f"{path}: defines a function or class in a cell; move it into the package")
    if not any("parameters" in c.get("metadata", {}).get("tags", []) for c in code):
        problems.append(f"{path}: no cell tagged 'parameters'")
print("\n".join(problems) or "notebooks: clean")
sys.exit(1 if problems else 0)
