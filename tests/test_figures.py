"""The index of figures: built from executed notebooks (papermill's record) and the provenance each
figure's data records, on a fake project, never from file times; the provenance `check` asks of the
committed figures; and `regenerate` end to end on a tiny real notebook."""

import datetime
import json
import os
import time
from pathlib import Path

import nbformat
import pytest

from grpo_lab import figures
from grpo_lab.analysis import plots
from grpo_lab.analysis.plots import PROVENANCE

T0 = datetime.datetime(2026, 1, 2, 10, 0, 0, tzinfo=datetime.timezone.utc)


PROFILE = "Profile(name='full', seeds=(0, 1, 2), steps=75, eval_every=75, val_size=200, eval_start=0)"


def executed_notebook(
    path: Path,
    start: datetime.datetime,
    seconds: float,
    injected: dict,
    commit: str,
    shown: str = PROFILE,
) -> None:
    """A notebook as papermill leaves it: parameters cell, injected cell, a displayed Profile."""
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell('profile = "smoke"\nseeds = None\nfailure_margin = 0.1')
    params.metadata["tags"] = ["parameters"]
    injected_cell = nbformat.v4.new_code_cell("\n".join(f"{k} = {v!r}" for k, v in injected.items()))
    injected_cell.metadata["tags"] = ["injected-parameters"]
    display = nbformat.v4.new_code_cell("settings")
    display.outputs = [nbformat.v4.new_output("execute_result", {"text/plain": shown}, execution_count=3)]
    nb.cells = [params, injected_cell, display]
    end = start + datetime.timedelta(seconds=seconds)
    nb.metadata["papermill"] = {
        "parameters": injected,
        "start_time": start.isoformat(),
        "end_time": end.isoformat(),
        "exception": None,
    }
    nb.metadata["grpo_lab"] = {"commit": commit}
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


TABLE = {"05_line": (), "06_sensitivity": ("sensitivity",), "07_kl": ("kl", "schemes"), "10_playground": ()}
"""the notebook table the fake projects' index reads (for `grpo_lab.studies.NOTEBOOKS`)"""


@pytest.fixture(autouse=True)
def notebook_table(monkeypatch):
    monkeypatch.setattr(figures, "NOTEBOOKS", TABLE)


def figure(
    root: Path,
    name: str,
    written: datetime.datetime | None,
    notebook: str = "",
    commit: str = "abc123",
    **drawn,
) -> Path:
    """A PNG and its data as `plots.save` writes them, recording `notebook` under the full profile
    (no data at all when `written` is None); the file times are set to a day before T0, every file
    alike, so nothing can be read from them."""
    path = root / "figures" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x89PNG fake")
    if written is not None:
        record = {"notebook": notebook, "profile": "full", "commit": commit, "written": written.isoformat()}
        data = {"title": "", "axes": [], **drawn, PROVENANCE: record}
        path.with_suffix(".json").write_text(json.dumps(data))
    for made in (path, path.with_suffix(".json")):
        if made.exists():
            os.utime(made, ((T0 - datetime.timedelta(days=1)).timestamp(),) * 2)
    return path


def fake_project(root: Path, profile: str = "full") -> None:
    executed = figures.executed_dir(root, profile)
    executed_notebook(executed / "06_sensitivity.ipynb", T0, 120, {"profile": "full"}, "abc123")
    two = "{'training': " + PROFILE + ", 'cost': " + PROFILE.replace("steps=75", "steps=6") + "}"
    executed_notebook(
        executed / "07_kl.ipynb",
        T0 + datetime.timedelta(minutes=5),
        60,
        {"profile": "full", "seeds": [0, 1]},
        "abc123+dirty",
        shown=two,
    )
    figure(root, "06_sensitivity.png", T0 + datetime.timedelta(seconds=100), "06_sensitivity")
    figure(root, "07_kl_tokens.png", T0 + datetime.timedelta(minutes=5, seconds=30), "07_kl", "abc123+dirty")
    figure(
        root, "07_kl_gradients.png", T0 + datetime.timedelta(minutes=5, seconds=59), "07_kl", "abc123+dirty"
    )
    figure(root, "99_old.png", None)


def sections_of(text: str) -> dict[str, str]:
    return {s.split("\n", 1)[0]: s for s in text.split("\n## ")[1:]}


def test_index_lists_each_figure_under_the_notebook_its_record_names(tmp_path):
    fake_project(tmp_path)
    path = figures.write_index(tmp_path, "full")
    assert path == tmp_path / "figures" / "README.md"
    sections = sections_of(path.read_text())
    assert list(sections) == ["06_sensitivity", "07_kl", figures.UNRECORDED]
    assert "[06_sensitivity.png](06_sensitivity.png)" in sections["06_sensitivity"]
    assert "07_kl" not in sections["06_sensitivity"]
    assert "[07_kl_tokens.png]" in sections["07_kl"] and "[07_kl_gradients.png]" in sections["07_kl"]
    assert "- studies (its own first): `sensitivity`" in sections["06_sensitivity"]
    assert "- studies (its own first): `kl`, `schemes`" in sections["07_kl"]
    assert "`profile='full'`" in sections["06_sensitivity"]
    assert "`seeds=None`" in sections["06_sensitivity"] and "`seeds=[0, 1]`" in sections["07_kl"]
    assert "`failure_margin=0.1`" in sections["06_sensitivity"]  # the parameters cell's own value
    assert "steps=75, eval_every=75" in sections["06_sensitivity"]
    assert "steps=75, eval_every=75" in sections["07_kl"] and "steps=6, eval_every=75" in sections["07_kl"]
    assert "- commit: `abc123`" in sections["06_sensitivity"] and "`abc123+dirty`" in sections["07_kl"]
    assert "2026-01-02 10:00:00 to 10:02:00 UTC (120 s)" in sections["06_sensitivity"]
    assert (
        "| [07_kl_tokens.png](07_kl_tokens.png) | 2026-01-02 10:05:30 | `abc123+dirty` |" in sections["07_kl"]
    )
    assert sections[figures.UNRECORDED].strip().splitlines()[-1] == (
        "- [99_old.png](99_old.png): no provenance recorded in its data"
    )


def test_the_index_follows_the_records_not_the_file_times(tmp_path):
    """File times that say otherwise (06's figure touched inside 07's execution, 07's figure long
    before any): each figure stays under the notebook its data records."""
    fake_project(tmp_path)
    during_07 = (T0 + datetime.timedelta(minutes=5, seconds=10)).timestamp()
    os.utime(tmp_path / "figures" / "06_sensitivity.png", (during_07, during_07))
    os.utime(tmp_path / "figures" / "99_old.png", (during_07, during_07))
    long_before = (T0 - datetime.timedelta(days=30)).timestamp()
    os.utime(tmp_path / "figures" / "07_kl_tokens.png", (long_before, long_before))
    sections = sections_of(figures.write_index(tmp_path, "full").read_text())
    assert (
        "[06_sensitivity.png]" in sections["06_sensitivity"] and "06_sensitivity.png" not in sections["07_kl"]
    )
    assert "[07_kl_tokens.png]" in sections["07_kl"] and "| 2026-01-02 10:05:30 |" in sections["07_kl"]
    assert "99_old.png" in sections[figures.UNRECORDED] and "99_old" not in sections["07_kl"]


def test_a_figure_is_placed_by_its_record_only(tmp_path):
    """A figure whose record names no notebook (saved outside `grpo-lab figures`) or one outside the
    table goes in the last section with why; one of another profile is that profile's index's; a
    notebook of the table with figures on record but no executed copy here gets its section."""
    fake_project(tmp_path)
    figure(tmp_path, "07_kl_by_hand.png", T0, figures.UNKNOWN, "abc123")
    figure(tmp_path, "42_elsewhere.png", T0, "42_elsewhere")
    smoke = figure(tmp_path, "07_kl_tokens_smoke.png", T0, "07_kl")
    record = json.loads(smoke.with_suffix(".json").read_text())
    record[PROVENANCE]["profile"] = "smoke"
    smoke.with_suffix(".json").write_text(json.dumps(record))
    figure(tmp_path, "10_playground_live.png", T0, "10_playground")
    sections = sections_of(figures.write_index(tmp_path, "full").read_text())
    assert list(sections) == ["06_sensitivity", "07_kl", "10_playground", figures.UNRECORDED]
    unplaced = sections[figures.UNRECORDED]
    assert (
        "- [07_kl_by_hand.png](07_kl_by_hand.png): its record names no notebook or no profile "
        "(notebook unknown, profile full, commit abc123)"
    ) in unplaced
    assert "- [42_elsewhere.png](42_elsewhere.png): its record names 42_elsewhere, not a notebook" in unplaced
    assert "_smoke" not in figures.write_index(tmp_path, "full").read_text()
    playground = sections["10_playground"]
    assert (
        "- studies (its own first): none" in playground
        and "no executed copy in `figures/notebooks/`" in playground
    )
    assert "[10_playground_live.png]" in playground


def test_each_figure_is_listed_with_what_it_shows_and_the_tables_written_with_it(tmp_path):
    """The 'shows' column is the title the figure's data records; a markdown table written beside a
    figure follows it."""
    fake_project(tmp_path)
    written = T0 + datetime.timedelta(minutes=5, seconds=30)
    figure(
        tmp_path,
        "07_kl_tokens.png",
        written,
        "07_kl",
        "abc123+dirty",
        title="KL estimators |\n on the batches",
    )
    figure(tmp_path, "06_sensitivity.png", written, "06_sensitivity", axes=[{"title": "lr"}])
    (tmp_path / "figures" / "06_sensitivity.md").write_text("| knob | best |\n|---|---|\n| lr | 1e-3 |\n")
    text = figures.write_index(tmp_path, "full").read_text()
    assert "| figure | written (UTC) | commit | shows |" in text
    assert (
        "| [07_kl_tokens.png](07_kl_tokens.png) | 2026-01-02 10:05:30 | `abc123+dirty` "
        "| KL estimators / on the batches |" in text
    )
    assert "| [06_sensitivity.png](06_sensitivity.png) | 2026-01-02 10:05:30 | `abc123` | lr |" in text
    assert "Table written with 06_sensitivity.png:\n\n| knob | best |" in sections_of(text)["06_sensitivity"]


def test_other_profiles_index_beside_the_executed_notebooks(tmp_path):
    fake_project(tmp_path, "smoke")
    smoke = figure(tmp_path, "06_sensitivity_smoke.png", T0, "06_sensitivity")
    record = json.loads(smoke.with_suffix(".json").read_text())
    record[PROVENANCE]["profile"] = "smoke"
    smoke.with_suffix(".json").write_text(json.dumps(record))
    path = figures.write_index(tmp_path, "smoke")
    assert path == tmp_path / "notebooks" / "executed" / "figures_smoke.md"
    sections = sections_of(path.read_text())
    assert "(../../figures/06_sensitivity_smoke.png)" in sections["06_sensitivity"]
    assert "06_sensitivity.png" not in path.read_text()  # the full profile's


def test_full_profile_notebooks_are_kept_beside_the_figures_others_are_not(tmp_path):
    assert figures.executed_dir(tmp_path, "full") == tmp_path / "figures" / "notebooks"
    assert figures.executed_dir(tmp_path, "smoke") == tmp_path / "notebooks" / "executed"


def test_a_notebook_not_run_by_papermill_is_refused(tmp_path):
    path = tmp_path / "figures" / "notebooks" / "01_x.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(), path)
    with pytest.raises(ValueError, match="not executed by papermill"):
        figures.write_index(tmp_path, "full")


def test_stamp_records_the_commit(tmp_path):
    path = tmp_path / "nb.ipynb"
    nbformat.write(nbformat.v4.new_notebook(), path)
    figures.stamp(path, "0123abc")
    assert json.loads(path.read_text())["metadata"]["grpo_lab"]["commit"] == "0123abc"
    assert figures.git_commit(tmp_path) == "unknown"  # not a git checkout


def test_recording_names_the_execution_to_the_kernel_and_restores_the_environment(monkeypatch):
    monkeypatch.setenv(plots.PROFILE_ENV, "before")
    monkeypatch.delenv(plots.NOTEBOOK_ENV, raising=False)
    with figures.recording("03_schemes", "full", "0123abc+dirty"):
        assert plots.provenance() | {"written": None} == {
            "notebook": "03_schemes",
            "profile": "full",
            "commit": "0123abc+dirty",
            "written": None,
        }
    assert os.environ[plots.PROFILE_ENV] == "before" and plots.NOTEBOOK_ENV not in os.environ


def test_check_compares_what_a_figure_draws_not_its_provenance():
    drawn = {"title": "t", "axes": [{"lines": [[[0.0, 0.25]]]}]}
    committed = {**drawn, PROVENANCE: {"notebook": "03_schemes", "profile": "full", "commit": "abc"}}
    regenerated = {**drawn, PROVENANCE: {"notebook": "unknown", "profile": "unknown", "commit": "def"}}
    assert figures.figures_differ(figures.drawn(committed), figures.drawn(regenerated)) is None
    assert figures.drawn(committed) == drawn


def test_each_committed_figure_must_record_a_notebook_that_exists(tmp_path):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "06_sensitivity.ipynb").write_text("{}")
    figure(tmp_path, "06_sensitivity.png", T0, "06_sensitivity")
    figure(tmp_path, "06_by_hand.png", T0, figures.UNKNOWN)
    figure(tmp_path, "07_gone.png", T0, "07_gone")
    smoke = figure(tmp_path, "06_smoke_run.png", T0, "06_sensitivity")
    record = json.loads(smoke.with_suffix(".json").read_text())
    record[PROVENANCE]["profile"] = "smoke"
    smoke.with_suffix(".json").write_text(json.dumps(record))
    (tmp_path / "figures" / "06_old.json").write_text(json.dumps({"title": "", "axes": []}))
    figure(tmp_path, "06_sensitivity_smoke.png", T0, figures.UNKNOWN)  # not committed: left out
    assert figures.provenance_problems(tmp_path) == [
        "06_by_hand: its provenance names the notebook unknown, not one of notebooks/",
        "06_old: its data records no provenance: regenerate it",
        "06_smoke_run: written by 06_sensitivity under the profile smoke, not the full one",
        "07_gone: its provenance names the notebook 07_gone, not one of notebooks/",
    ]


def line_notebook(root: Path, y: float, name: str = "'05_line'") -> Path:
    """A study-free notebook (nothing to train) that prints a number and saves a one-line figure
    named by the expression `name`."""
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell('profile = "smoke"')
    params.metadata["tags"] = ["parameters"]
    draw = nbformat.v4.new_code_cell(
        "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
        "from grpo_lab.analysis import plots\n"
        f"fig, ax = plt.subplots()\nax.plot([0, 1], [0, {y}])\n"
        f"plots.save(fig, {name})\nprint('slope', {y!r})"
    )
    nb.cells = [params, draw]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    (root / "notebooks").mkdir(exist_ok=True)
    path = root / "notebooks" / "05_line.ipynb"
    nbformat.write(nb, path)
    return path


@pytest.mark.slow
def test_regenerate_runs_a_notebook_and_indexes_its_figure(tmp_path):
    """A one-figure notebook under papermill in a scratch project: the figure's data records the
    notebook, the profile and the commit, passed to the kernel through its environment; the index
    names it under that notebook, with the injected profile."""
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "grpo_lab").mkdir()
    line_notebook(tmp_path, 1.0, name="f'05_line_{profile}'")
    before = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    assert figures.regenerate("full", root=tmp_path) == []
    record = json.loads((tmp_path / "figures" / "05_line_full.json").read_text())[PROVENANCE]
    assert {k: record[k] for k in ("notebook", "profile", "commit")} == {
        "notebook": "05_line",
        "profile": "full",
        "commit": "unknown",  # the scratch project is no git checkout
    }
    assert (
        before
        <= datetime.datetime.fromisoformat(record["written"])
        <= datetime.datetime.now(datetime.timezone.utc)
    )
    assert plots.NOTEBOOK_ENV not in os.environ  # restored once the notebook ran
    text = (tmp_path / "figures" / "README.md").read_text()
    assert "## 05_line" in text and "[05_line_full.png](05_line_full.png)" in text
    assert "`profile='full'`" in text and "commit: `unknown`" in text


def test_notebooks_name_the_valid_ones_when_one_does_not_match():
    assert [p.stem for p in figures.notebooks(["01", "03_schemes"])] == ["01_baseline", "03_schemes"]
    with pytest.raises(ValueError, match=r"no notebook matches \['99'\]; valid: 01_baseline, 02_ablations"):
        figures.notebooks(["01", "99"])


class Ticking:
    """A progress that has one line ready at each poll."""

    def __init__(self) -> None:
        self.polls = 0

    def poll(self) -> list[str]:
        self.polls += 1
        return [f"line {self.polls}"]


def test_watch_prints_the_progress_while_the_block_runs_and_once_at_the_end(capsys):
    progress = Ticking()
    with figures.watch(progress, every=0.01):
        while progress.polls < 2:
            time.sleep(0.005)
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"line {i}" for i in range(1, progress.polls + 1)] and len(lines) >= 3


def test_figures_differ_names_the_first_difference_beyond_the_tolerance():
    committed = {"title": "t", "axes": [{"lines": [[[0.0, 0.25], [1.0, None]]], "texts": ["a"]}]}
    assert figures.figures_differ(committed, json.loads(json.dumps(committed))) is None
    moved = {"title": "t", "axes": [{"lines": [[[0.0, 0.26], [1.0, None]]], "texts": ["a"]}]}
    assert figures.figures_differ(committed, moved) == "axes[0].lines[0][0][1]: 0.25 != 0.26"
    assert figures.figures_differ({"x": [1.0]}, {"x": [1.0 + 1e-9]}) is None  # within 6 digits
    assert figures.figures_differ({"x": [0.0146978]}, {"x": [0.0146979]}) is None  # the 6th digit flips
    assert figures.figures_differ({"x": [0.0146978]}, {"x": [0.0146981]}) is not None
    assert figures.figures_differ({"x": [1.0]}, {"x": [1.0, 2.0]}) == "x: 1 items != 2"
    assert figures.figures_differ({"x": [None]}, {"x": [0.0]}) == "x[0]: None != 0.0"
    assert figures.figures_differ({"x": "a"}, {"y": "a"}) == "top: keys ['x'] != ['y']"


@pytest.mark.slow
def test_check_passes_on_what_the_notebooks_give_and_names_what_no_longer_follows(tmp_path, monkeypatch):
    """`regenerate` under the full profile keeps the executed notebook beside its figure and data;
    `check` re-executes it under nbval into a scratch directory and passes; then a committed figure
    whose data no longer follows, a printed output that changed, and a committed figure its notebook
    no longer writes each fail it, named."""
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "grpo_lab").mkdir()
    monkeypatch.delenv("GRPO_LAB_FIGURES", raising=False)
    line_notebook(tmp_path, 0.5)
    monkeypatch.chdir(tmp_path)
    assert figures.regenerate("full", root=tmp_path) == []
    assert (tmp_path / "figures" / "notebooks" / "05_line.ipynb").exists()
    committed = tmp_path / "figures" / "05_line.json"
    assert json.loads(committed.read_text())["axes"][0]["lines"] == [[[0.0, 0.0], [1.0, 0.5]]]
    assert figures.check(tmp_path, workers=1) == []

    executed = tmp_path / "figures" / "notebooks" / "05_line.ipynb"
    kept = executed.read_text()
    executed.write_text(kept.replace("slope 0.5", "slope 0.4"))  # a printed output that no longer follows
    assert figures.check(tmp_path, workers=1) == ["pytest --nbval failed (exit 1)"]
    executed.write_text(kept)

    committed.write_text(committed.read_text().replace("0.5", "0.625"))
    (tmp_path / "figures" / "05_old.png").write_bytes(b"\x89PNG left from an earlier version")
    line_notebook(tmp_path, 0.75)  # the source changed since the committed execution
    assert figures.check(tmp_path, workers=1) == [
        "05_line: figures/notebooks/05_line.ipynb was executed from another version of "
        "notebooks/05_line.ipynb: regenerate it",
        "05_old: committed, but its notebook no longer writes it",
        "05_line: differs from the committed figure at axes[0].lines[0][1][1]: 0.625 != 0.5",
    ]
