"""`grpo-lab figures`: execute every notebook headlessly with papermill; their cells write figures/."""

import sys
import time
from pathlib import Path

from grpo_lab.analysis.plots import project_root


def notebooks(only: list[str] | None = None) -> list[Path]:
    found = sorted((project_root() / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    if only:
        found = [p for p in found if p.stem in only or p.stem.split("_", 1)[0] in only]
        if not found:
            raise ValueError(f"no notebook matches {only}")
    return found


def regenerate(profile: str = "full", only: list[str] | None = None) -> list[str]:
    """Run the notebooks with `profile`; executed copies go to notebooks/executed/. Returns failures."""
    import papermill

    root = project_root()
    executed = root / "notebooks" / "executed"
    executed.mkdir(parents=True, exist_ok=True)
    failures = []
    for nb in notebooks(only):
        start = time.perf_counter()
        try:
            papermill.execute_notebook(
                str(nb),
                str(executed / nb.name),
                parameters={"profile": profile},
                cwd=str(root),
                progress_bar=False,
            )
            print(f"{nb.name}: ok in {time.perf_counter() - start:.0f} s")
        except Exception as err:  # report every notebook, then fail
            failures.append(nb.name)
            print(f"{nb.name}: FAILED ({type(err).__name__}: {str(err)[:500]})", file=sys.stderr)
    return failures
