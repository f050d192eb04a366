"""The layer order of docs/architecture.md holds for every import statement of the package: a module
imports only from the rows below its own (and from its own package), whether the import is at the top,
inside a function or under TYPE_CHECKING; no two packages or top-level modules import each other,
directly or through others. The diagram is read from the doc, so the doc and this test cannot
disagree, and there is no exception list."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "grpo_lab"
DOC = ROOT / "docs" / "architecture.md"


def layer_rows(doc: str) -> list[list[str]]:
    """The diagram's rows, top first: the first ```text block of the doc, one row per line."""
    match = re.search(r"```text\n(.*?)```", doc, re.S)
    assert match, "docs/architecture.md has no ```text block with the layer diagram"
    return [line.split() for line in match.group(1).splitlines() if line.strip()]


def module_names(package: Path) -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name, from its __init__)."""
    names = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def imports(name: str, source: str, is_package: bool, modules: set[str]) -> set[str]:
    """The grpo_lab modules that the module `name` imports, from every import statement anywhere in
    `source`: `from a import b` names a.b when that is a module, else a; relative imports are resolved
    against `name`'s package; imports of other distributions are left out."""
    package = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:  # `import grpo_lab.a.b.c` names module grpo_lab.a.b
                target = target.rpartition(".")[0]
            if target:
                found.add(target)
    return found


def unit(module: str) -> str:
    """The package or top-level module `module` belongs to: grpo_lab.models.sampler -> models;
    the package's own __init__ is the unit grpo_lab."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def unit_graph(package: Path) -> dict[str, dict[str, list[str]]]:
    """unit -> imported unit -> the 'module -> module' imports that make the edge (other units only)."""
    modules = module_names(package)
    graph: dict[str, dict[str, list[str]]] = {unit(m): {} for m in modules}
    for name, path in modules.items():
        for target in imports(name, path.read_text(), path.name == "__init__.py", set(modules)):
            if unit(target) != unit(name):
                graph[unit(name)].setdefault(unit(target), []).append(f"{name} -> {target}")
    return graph


def cycles(graph: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """The strongly connected components of more than one unit (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, {}):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def violations(graph: dict[str, dict[str, list[str]]], rows: list[list[str]]) -> list[str]:
    """Every import from a unit's own row or a row above it (rows top first)."""
    height = {name: len(rows) - i for i, row in enumerate(rows) for name in row}
    return [
        f"{edge} (row {height[source]} imports row {height[target]})"
        for source, targets in sorted(graph.items())
        for target, edges in sorted(targets.items())
        if height[target] >= height[source]
        for edge in edges
    ]


GRAPH = unit_graph(PACKAGE)
ROWS = layer_rows(DOC.read_text())


def test_the_diagram_places_every_package_and_module_once():
    placed = [name for row in ROWS for name in row]
    assert len(placed) == len(set(placed)), "a name appears twice in the diagram"
    assert sorted(placed) == sorted(GRAPH)


def test_every_import_follows_the_layer_order():
    assert violations(GRAPH, ROWS) == []


def test_no_packages_import_each_other():
    assert cycles(GRAPH) == []


def study_imports(package: Path) -> list[str]:
    """Every 'study -> study' import between two modules of `grpo_lab.studies` (the package's own
    __init__ aside): what one study takes from another belongs in the comparisons layer."""
    modules = module_names(package)
    studies = {name for name in modules if name.startswith("grpo_lab.studies.")}
    return sorted(
        f"{name} -> {target}"
        for name in studies
        for target in imports(name, modules[name].read_text(), False, set(modules))
        if target in studies and target != name
    )


def shared_names(package: Path) -> dict[str, list[str]]:
    """Module base names (a package's own name for its __init__) used by more than one module."""
    by_name: dict[str, list[str]] = {}
    for name in module_names(package):
        by_name.setdefault(name.rpartition(".")[2], []).append(name)
    return {base: names for base, names in sorted(by_name.items()) if len(names) > 1}


def test_no_study_module_imports_another():
    assert study_imports(PACKAGE) == []


def test_no_two_modules_share_a_name():
    assert shared_names(PACKAGE) == {}


def test_one_study_module_per_notebook_named_after_it():
    """`grpo_lab/studies/` holds a module per notebook, its name the notebook's without the number
    (the playground, an application of its own, has none), and the notebook table lists every
    notebook with its own study first."""
    from grpo_lab.studies import NOTEBOOKS

    notebooks = {p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")}
    own = {stem: stem.split("_", 1)[1] for stem in notebooks if stem != "10_playground"}
    studies = {p.stem for p in (PACKAGE / "studies").glob("*.py") if p.stem != "__init__"}
    assert studies == set(own.values())
    assert set(NOTEBOOKS) == notebooks
    assert {stem: names[0] for stem, names in NOTEBOOKS.items() if names} == own


# --- the checks themselves find what they are for ---

FAKE_MODULES = {"grpo_lab", "grpo_lab.a", "grpo_lab.a.x", "grpo_lab.a.y", "grpo_lab.b", "grpo_lab.c"}


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import grpo_lab.b", {"grpo_lab.b"}),
        ("import numpy, grpo_lab.a.x.thing", {"grpo_lab.a.x"}),
        ("from grpo_lab import b, c", {"grpo_lab.b", "grpo_lab.c"}),
        ("from grpo_lab import Config", {"grpo_lab"}),
        ("from grpo_lab.a.x import f", {"grpo_lab.a.x"}),
        ("def f():\n    from grpo_lab.b import g", {"grpo_lab.b"}),
        ("if TYPE_CHECKING:\n    from grpo_lab.c import T", {"grpo_lab.c"}),
        ("from . import y", {"grpo_lab.a.y"}),
        ("from .y import f", {"grpo_lab.a.y"}),
        ("from ..b import f", {"grpo_lab.b"}),
        ("from torch import nn", set()),
    ],
)
def test_imports_finds_every_form_of_import(source, expected):
    assert imports("grpo_lab.a.x", source, False, FAKE_MODULES) == expected


def test_violations_flag_an_import_from_the_same_row_or_above():
    rows = [["top"], ["mid", "side"], ["low"]]
    graph = {
        "top": {"low": ["t -> l"]},
        "mid": {"top": ["m -> t"], "side": ["m -> s"]},
        "low": {},
        "side": {},
    }
    assert violations(graph, rows) == ["m -> s (row 2 imports row 2)", "m -> t (row 2 imports row 3)"]


def test_the_study_and_name_checks_find_what_they_are_for(tmp_path):
    studies = tmp_path / "grpo_lab" / "studies"
    studies.mkdir(parents=True)
    (tmp_path / "grpo_lab" / "__init__.py").write_text("")
    (studies / "__init__.py").write_text("")
    (studies / "a.py").write_text("from grpo_lab.studies import b\n")
    (studies / "b.py").write_text("import grpo_lab.studies\n")
    (tmp_path / "grpo_lab" / "b.py").write_text("")
    assert study_imports(tmp_path / "grpo_lab") == ["grpo_lab.studies.a -> grpo_lab.studies.b"]
    assert shared_names(tmp_path / "grpo_lab") == {"b": ["grpo_lab.b", "grpo_lab.studies.b"]}


def test_cycles_finds_an_indirect_cycle_and_nothing_in_a_chain():
    assert cycles({"a": {"b": []}, "b": {"c": []}, "c": {"a": []}, "d": {"a": []}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b": []}, "b": {"c": []}, "c": {}}) == []
