"""`grpo-lab figures`: execute every notebook headlessly with papermill; their cells write figures/.
Before any notebook runs, the plan of the profile (`grpo_lab.plan`: runs per notebook, how many are
stored, the core-hours of the rest) is printed; while the notebooks run, a line per finished run with
the estimated time left, read from the run store. Each notebook runs with its name, the profile and
the commit in its kernel's environment (`recording`), so every figure it saves records them in its
data (`plots.provenance`). Then the index of the figures (figures/README.md under the full profile)
is built from those records and nothing else: each figure under the notebook its record names, with
the studies that notebook reads (`grpo_lab.studies.NOTEBOOKS`) and its executed copy's papermill
record (parameters, start and end times), the profile it resolved (the `Profile(...)` it displayed)
and the commit it ran on.

The full profile's executed notebooks are kept beside its figures (figures/notebooks/, committed);
`check` re-executes them against the committed runs (`results/`) under `pytest --nbval`, training
nothing, and compares the data of every figure they write with the committed figure's (its
provenance aside), so a printed table or a figure that no longer follows from the logs fails; every
committed figure must record the notebook that wrote it."""

import ast
import contextlib
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from grpo_lab.analysis.plots import (
    COMMIT_ENV,
    FIGURES_DIR,
    NOTEBOOK_ENV,
    PROFILE_ENV,
    PROVENANCE,
    UNKNOWN,
    git_commit,
    project_root,
)
from grpo_lab.experiments.store import NO_TRAIN
from grpo_lab.plan import Progress, notebooks, plan
from grpo_lab.studies import NOTEBOOKS

INDEX = "README.md"
"""the index of figures/ written by the full profile (other profiles write theirs into executed/)"""
PROFILE_REPR = re.compile(
    r"Profile\(name='[^']*', seeds=\([^)]*\), steps=\d+, eval_every=\d+, val_size=\d+, eval_start=\d+\)"
)
PROGRESS_EVERY_S = 10.0
"""how often the run store is read for finished runs while the notebooks execute"""
SANITIZE = Path(__file__).with_name("nbval_sanitize.cfg")
"""the regular expressions `check` applies to both sides of an output before comparing (times,
dates, paths, the random ids of styled tables)"""
RTOL = 1e-5
"""relative tolerance between a regenerated figure's numbers and the committed ones: one unit in the
sixth significant digit they are kept to, whose last digit flips where another CPU sums in another
order (a mean of 03's curves read 0.0146979 on an AVX2 machine, 0.0146978 where it was committed)"""
UNCHECKED = {
    "10_playground": "a live session: it trains in the notebook, so its figure follows from no stored run",
}
"""the executed notebooks `check` leaves out, with why: their outputs do not follow from `results/`"""


def regenerate(
    profile: str = "full", only: list[str] | None = None, root: Path | None = None, train: bool = True
) -> list[str]:
    """Print the plan of `profile` (`grpo_lab.plan`), then run the notebooks with it, printing a line
    per finished run with the time left (`watch`); executed copies go to notebooks/executed/,
    stamped with the commit they ran on, each figure they save recording the notebook, the profile
    and the commit (`recording`); then write the index of figures (`write_index`). Returns
    the failures. With `train=False` nothing may be trained: a plan with runs to train (missing,
    stale or torn in the store) is an error that names them, before any notebook runs."""
    root = root or project_root()
    planned = plan(profile, only, root=root)
    print(planned.format(), flush=True)
    pending = planned.to_train()
    if not train and pending:
        named = ", ".join(f"{r.notebook}: {r.path.name} ({r.state})" for r in pending[:5])
        raise ValueError(
            f"{len(pending)} runs are not current in the store {planned.store} and --no-train forbids "
            f"training them: {named}{' ...' if len(pending) > 5 else ''}"
        )
    chosen = notebooks(only, root)
    with watch(Progress(planned)):
        failures = _execute(profile, chosen, executed_dir(root, profile), root)
    print(f"index of figures: {write_index(root, profile)}")
    return failures


@contextlib.contextmanager
def watch(progress: "Progress", every: float = PROGRESS_EVERY_S) -> Iterator[None]:
    """While the block runs, print every `every` seconds, from a daemon thread, the lines of
    `progress.poll()` (each run that ended and the time left); once more when the block ends."""
    stop = threading.Event()

    def report() -> None:
        for line in progress.poll():
            print(line, flush=True)

    def loop() -> None:
        while not stop.wait(every):
            report()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        report()


def executed_dir(root: Path, profile: str) -> Path:
    """Where the executed notebooks of `profile` go: figures/notebooks/ for the full profile (they
    are committed with its figures), notebooks/executed/ otherwise (not committed)."""
    return root / "figures" / "notebooks" if profile == "full" else root / "notebooks" / "executed"


def _execute(profile: str, paths: list[Path], executed: Path, root: Path) -> list[str]:
    """Execute each notebook of `paths` with `profile` into `executed`, each stamped with the
    commit and recording it, with its name and `profile`, in the figures it saves (`recording`);
    returns the names of those that failed (every notebook runs)."""
    import papermill

    executed.mkdir(parents=True, exist_ok=True)
    commit = git_commit(root)
    failures = []
    for nb in paths:
        start = time.perf_counter()
        try:
            with recording(nb.stem, profile, commit):
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
        if (executed / nb.name).exists():
            stamp(executed / nb.name, commit)
    return failures


@contextlib.contextmanager
def recording(notebook: str, profile: str, commit: str) -> Iterator[None]:
    """Within the block, this process's environment names the notebook being executed, its profile
    and the commit (`plots.NOTEBOOK_ENV`, `PROFILE_ENV`, `COMMIT_ENV`): the kernel papermill starts
    inherits it, so each figure the notebook saves records them (`plots.provenance`). The variables
    are restored after the block."""
    values = {NOTEBOOK_ENV: notebook, PROFILE_ENV: profile, COMMIT_ENV: commit}
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def stamp(path: Path, commit: str) -> None:
    """Record the commit in an executed notebook's metadata (`grpo_lab.commit`)."""
    nb = json.loads(path.read_text())
    nb["metadata"].setdefault("grpo_lab", {})["commit"] = commit
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


def index_path(root: Path, profile: str) -> Path:
    """figures/README.md for the full profile; notebooks/executed/figures_<profile>.md otherwise
    (smoke figures are not committed, so neither is their index)."""
    if profile == "full":
        return root / "figures" / INDEX
    return root / "notebooks" / "executed" / f"figures_{profile}.md"


def execution_record(path: Path) -> dict[str, Any]:
    """What an executed notebook says about its run: name, start and end (UTC), parameters (the
    parameters cell's values, overridden by the injected ones), every distinct profile it displayed
    (a notebook with several studies shows one per study: the settings its runs used), the commit."""
    nb = json.loads(path.read_text())
    meta = nb["metadata"].get("papermill", {})
    if not meta.get("start_time") or not meta.get("end_time"):
        raise ValueError(f"{path} was not executed by papermill (no start and end time in its metadata)")
    parameters = {}
    for cell in nb["cells"]:
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            parameters.update(_assignments("".join(cell["source"])))
    parameters.update(meta.get("parameters", {}))
    outputs = [_text(out) for cell in nb["cells"] for out in cell.get("outputs", [])]
    shown = list(dict.fromkeys(m for out in outputs for m in PROFILE_REPR.findall(out)))
    return {
        "notebook": path.stem,
        "start": _utc(meta["start_time"]),
        "end": _utc(meta["end_time"]),
        "parameters": parameters,
        "profiles": shown,
        "commit": nb["metadata"].get("grpo_lab", {}).get("commit", UNKNOWN),
        "failed": bool(meta.get("exception")),
    }


def _assignments(source: str) -> dict[str, Any]:
    """`name = literal` statements of a parameters cell."""
    values = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                values[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                values[node.targets[0].id] = ast.unparse(node.value)
    return values


def _text(output: dict) -> str:
    if "text" in output:
        return "".join(output["text"])
    return "".join(output.get("data", {}).get("text/plain", ""))


def _utc(stamp: str) -> datetime.datetime:
    moment = datetime.datetime.fromisoformat(stamp)
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.timezone.utc)


UNRECORDED = "Figures without a notebook on record"
"""the index's last section: figures whose data records no notebook of `NOTEBOOKS` (or nothing)"""


def recorded(figure: Path) -> dict[str, Any] | None:
    """The provenance a figure's data records (`plots.provenance`: notebook, profile, commit,
    written); None when no data was written beside it or the data records none."""
    data = figure.with_suffix(".json")
    if not data.exists():
        return None
    record = json.loads(data.read_text()).get(PROVENANCE)
    return record if isinstance(record, dict) else None


def write_index(root: Path, profile: str) -> Path:
    """Write the index of figures for `profile` (see `index_path`) from what is recorded, nothing
    guessed: a section per notebook of `NOTEBOOKS` (in its order) that has an executed copy
    (`executed_dir`) or a figure recording it, with the studies it reads, its execution's parameters,
    resolved profile, commit and dates, then the figures whose data record that notebook and
    `profile` (`recorded`), each with when and on which commit it was written, and the markdown tables
    written beside them (`<figure>.md`, e.g. the verdict table); last, the figures whose record names
    no notebook of `NOTEBOOKS` or no profile, or is missing, each with why. A figure recorded under
    another profile belongs to that profile's index and is left out."""
    path = index_path(root, profile)
    where = executed_dir(root, profile).relative_to(root)
    executed = {p.stem: execution_record(p) for p in sorted((root / where).glob("[0-9][0-9]_*.ipynb"))}
    placed: dict[str, list[Path]] = {}
    unplaced: list[tuple[Path, str]] = []
    for figure in sorted((root / "figures").glob("*.png")):
        if profile == "full" and figure.stem.endswith("_smoke"):
            continue  # a smoke figure is never committed: it has no place in the committed index
        record = recorded(figure)
        if record is None:
            unplaced.append((figure, "no provenance recorded in its data"))
        elif record.get("profile", UNKNOWN) not in (profile, UNKNOWN):
            continue
        elif UNKNOWN in (record.get("profile", UNKNOWN), record.get("notebook", UNKNOWN)):
            unplaced.append((figure, f"its record names no notebook or no profile ({_described(record)})"))
        elif record["notebook"] not in NOTEBOOKS:
            unplaced.append((figure, f"its record names {record['notebook']}, not a notebook of the table"))
        else:
            placed.setdefault(record["notebook"], []).append(figure)
    link = {f: os.path.relpath(f, path.parent) for f in (root / "figures").glob("*.png")}
    lines = [
        "# Figures",
        "",
        f"Index written by `grpo-lab figures --profile {profile}` from the records: each figure is listed "
        "under the notebook its data records as having written it (`provenance` in the figure's `.json`), "
        "with the studies that notebook reads (`grpo_lab.studies.NOTEBOOKS`) and its executed copy's "
        f"(`{where}/`) parameters, profile, commit and dates (UTC). "
        "Do not edit by hand.",
    ]
    for notebook in NOTEBOOKS:
        if notebook in executed or notebook in placed:
            mine = placed.get(notebook, [])
            lines += ["", *_section(notebook, executed.get(notebook), mine, link, f"{where}/")]
    if unplaced:
        lines += ["", f"## {UNRECORDED}", ""]
        lines += [f"- [{f.name}]({link[f]}): {why}" for f, why in unplaced]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def _described(record: dict[str, Any]) -> str:
    """A provenance record's fields in words, e.g. 'notebook unknown, profile unknown, commit 0ab1'."""
    return ", ".join(f"{key} {record.get(key, UNKNOWN)}" for key in ("notebook", "profile", "commit"))


FIGURES_HEADER = "| figure | written (UTC) | commit | shows |"
"""the header of a section's table of figures"""


def _section(
    notebook: str, record: dict[str, Any] | None, mine: list[Path], link: dict[Path, str], where: str
) -> list[str]:
    """The index's section of one notebook: the studies it reads, its executed copy's record (when
    `where` has one) and the figures that record it."""
    studies = ", ".join(f"`{study}`" for study in NOTEBOOKS[notebook]) or "none (it reads no stored runs)"
    lines = [
        f"## {notebook}" + (" (FAILED)" if record and record["failed"] else ""),
        "",
        f"- studies (its own first): {studies}",
    ]
    if record is None:
        lines.append(f"- executed: no executed copy in `{where}`")
    else:
        duration = (record["end"] - record["start"]).total_seconds()
        params = ", ".join(f"`{k}={v!r}`" for k, v in record["parameters"].items())
        lines += [
            f"- executed: {record['start']:%Y-%m-%d %H:%M:%S} to {record['end']:%H:%M:%S} UTC "
            f"({duration:.0f} s)",
            f"- commit: `{record['commit']}`",
            f"- parameters: {params or 'none'}",
            "- resolved profile: " + "; ".join(f"`{p}`" for p in record["profiles"])
            if record["profiles"]
            else "- resolved profile: not displayed",
        ]
    lines.append("")
    if not mine:
        return [*lines, "No figure records this notebook."]
    lines += [FIGURES_HEADER, "|---|---|---|---|"]
    for f in mine:
        made = recorded(f) or {}
        commit = made.get("commit", UNKNOWN)
        lines.append(f"| [{f.name}]({link[f]}) | {_written(made)} | `{commit}` | {shows(f)} |")
    for table in (f.with_suffix(".md") for f in mine if f.with_suffix(".md").exists()):
        lines += ["", f"Table written with {table.stem}.png:", "", table.read_text().rstrip()]
    return lines


def _written(record: dict[str, Any]) -> str:
    """When a figure was written, as its record says (UTC), or `UNKNOWN`."""
    if "written" not in record:
        return UNKNOWN
    return f"{_utc(record['written']).astimezone(datetime.timezone.utc):%Y-%m-%d %H:%M:%S}"


def shows(figure: Path) -> str:
    """What a figure shows, for the index: the title its own data records (`plots.figure_data`,
    written beside it: the figure's suptitle, else its first panel's title) on one line."""
    data = figure.with_suffix(".json")
    if not data.exists():
        return "no data written beside it"
    drawn = json.loads(data.read_text())
    title = drawn.get("title") or next((a["title"] for a in drawn.get("axes", []) if a.get("title")), "")
    return " ".join(title.split()).replace("|", "/") or "untitled"


def check(root: Path | None = None, workers: int = 2) -> list[str]:
    """Check the committed full-profile figures against the committed runs; returns the problems
    (none: every check passed). For the notebooks executed under the full profile (`executed_dir`),
    but those of `UNCHECKED`:
    the plan must have nothing to train for them; `pytest --nbval` re-executes each against the store
    with training forbidden (`NO_TRAIN`), comparing every output with the committed one after
    `SANITIZE`; the figures it writes go to a scratch directory, and each must show the same data
    (`figures_differ` of their `drawn` data: the provenance is not what is checked) as the committed
    figure of that name (PNG and JSON), and every committed figure of a checked notebook (`NN_*`)
    must have been written again. Every committed figure, the unchecked notebooks' too, must record
    its provenance (`provenance_problems`)."""
    root = root or project_root()
    found = sorted(executed_dir(root, "full").glob("[0-9][0-9]_*.ipynb"))
    executed = [p for p in found if p.stem not in UNCHECKED]
    for skipped in sorted({p.stem for p in found} & UNCHECKED.keys()):
        print(f"not checked: {skipped}, {UNCHECKED[skipped]}", flush=True)
    if not executed:
        return [f"no executed full-profile notebook in {executed_dir(root, 'full')}"]
    planned = plan("full", [p.stem for p in executed], root=root)
    pending = planned.to_train()
    if pending:
        return [f"{r.notebook}: run {r.path.name} is {r.state} in {planned.store}" for r in pending]
    problems = [
        f"{nb.stem}: {nb.relative_to(root)} was executed from another version of "
        f"notebooks/{nb.name}: regenerate it"
        for nb in executed
        if code_cells(nb) != code_cells(root / "notebooks" / nb.name)
    ]
    problems += provenance_problems(root)
    print(f"checking {', '.join(p.stem for p in executed)} against {planned.store}", flush=True)
    with tempfile.TemporaryDirectory() as scratch:
        env = {**os.environ, NO_TRAIN: "1", FIGURES_DIR: scratch}
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval"]
        command += [
            "--nbval-sanitize-with",
            str(SANITIZE),
            *(["-n", str(workers), "--dist", "loadfile"] if workers > 1 else []),
        ]
        result = subprocess.run([*command, *map(str, executed)], cwd=root, env=env)
        if result.returncode:
            problems.append(f"pytest --nbval failed (exit {result.returncode})")
        written = {p.stem: p for p in Path(scratch).glob("*.json")}
        committed = {
            p.stem
            for nb in executed
            for p in (root / "figures").glob(f"{nb.stem.split('_', 1)[0]}_*.*")
            if p.suffix in (".png", ".json") and not p.stem.endswith("_smoke")
        }
        for name in sorted(committed - written.keys()):
            problems.append(f"{name}: committed, but its notebook no longer writes it")
        for name, path in sorted(written.items()):
            data = root / "figures" / f"{name}.json"
            if not data.exists() or not data.with_suffix(".png").exists():
                problems.append(
                    f"{name}: written from the runs, but not committed in figures/ (PNG and JSON)"
                )
                continue
            difference = figures_differ(
                drawn(json.loads(data.read_text())), drawn(json.loads(path.read_text()))
            )
            if difference:
                problems.append(f"{name}: differs from the committed figure at {difference}")
    return problems


def provenance_problems(root: Path) -> list[str]:
    """What is wrong with the provenance of the committed figures (the full profile's data,
    figures/*.json but `*_smoke`): each must record the notebook that wrote it, one of notebooks/,
    and the full profile (`plots.provenance`)."""
    problems = []
    for data in sorted((root / "figures").glob("*.json")):
        if data.stem.endswith("_smoke"):
            continue
        record = recorded(data)
        if record is None:
            problems.append(f"{data.stem}: its data records no provenance: regenerate it")
            continue
        notebook, profile = record.get("notebook", UNKNOWN), record.get("profile", UNKNOWN)
        if not (root / "notebooks" / f"{notebook}.ipynb").exists():
            problems.append(
                f"{data.stem}: its provenance names the notebook {notebook}, not one of notebooks/"
            )
        elif profile != "full":
            problems.append(
                f"{data.stem}: written by {notebook} under the profile {profile}, not the full one"
            )
    return problems


def drawn(data: dict[str, Any]) -> dict[str, Any]:
    """A figure's data without its provenance: what it draws, which `check` compares."""
    return {key: value for key, value in data.items() if key != PROVENANCE}


def code_cells(path: Path) -> list[str]:
    """The sources of a notebook's code cells, without the parameters papermill injected (an
    executed copy's code is its source notebook's exactly when these are equal)."""
    if not path.exists():
        return []
    cells = json.loads(path.read_text())["cells"]
    return [
        "".join(c["source"])
        for c in cells
        if c["cell_type"] == "code" and "injected-parameters" not in c.get("metadata", {}).get("tags", [])
    ]


def figures_differ(expected: Any, actual: Any, where: str = "", rtol: float = RTOL) -> str | None:
    """The first place (a path into the data, e.g. 'axes[0].lines[1][3][1]: 0.25 != 0.26') where two
    figures' data (`plots.figure_data`) differ beyond `rtol`; None when they agree."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        if expected.keys() != actual.keys():
            return f"{where or 'top'}: keys {sorted(expected)} != {sorted(actual)}"
        for key in expected:
            found = figures_differ(expected[key], actual[key], f"{where}.{key}" if where else key, rtol)
            if found:
                return found
        return None
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            return f"{where}: {len(expected)} items != {len(actual)}"
        for i, (e, a) in enumerate(zip(expected, actual)):
            found = figures_differ(e, a, f"{where}[{i}]", rtol)
            if found:
                return found
        return None
    numbers = (int, float)
    if isinstance(expected, numbers) and isinstance(actual, numbers) and not isinstance(expected, bool):
        close = abs(expected - actual) <= rtol * max(abs(expected), abs(actual)) + 1e-12
        return None if close else f"{where}: {expected!r} != {actual!r}"
    return None if expected == actual else f"{where}: {expected!r} != {actual!r}"
