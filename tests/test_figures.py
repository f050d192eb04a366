"""The index of figures: built from executed notebooks (papermill's record) and the PNGs they wrote,
on a fake project; and `regenerate` end to end on a tiny real notebook."""

import datetime
import json
import os
import time
from pathlib import Path

import nbformat
import pytest

from grpo_lab import figures

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


def figure(root: Path, name: str, written: datetime.datetime) -> Path:
    path = root / "figures" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x89PNG fake")
    os.utime(path, (written.timestamp(), written.timestamp()))
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
    figure(root, "06_sensitivity.png", T0 + datetime.timedelta(seconds=100))
    figure(root, "07_kl_tokens.png", T0 + datetime.timedelta(minutes=5, seconds=30))
    figure(root, "07_kl_gradients.png", T0 + datetime.timedelta(minutes=5, seconds=59))
    figure(root, "99_old.png", T0 - datetime.timedelta(days=3))
    figure(root, "06_sensitivity_smoke.png", T0 - datetime.timedelta(days=3))


def test_index_lists_each_figure_under_the_execution_that_wrote_it(tmp_path):
    fake_project(tmp_path)
    path = figures.write_index(tmp_path, "full")
    assert path == tmp_path / "figures" / "README.md"
    text = path.read_text()
    sections = {s.split("\n", 1)[0]: s for s in text.split("\n## ")[1:]}
    assert set(sections) == {"06_sensitivity", "07_kl", "Figures no recorded execution wrote"}
    assert "[06_sensitivity.png](06_sensitivity.png)" in sections["06_sensitivity"]
    assert "07_kl" not in sections["06_sensitivity"]
    assert "[07_kl_tokens.png]" in sections["07_kl"] and "[07_kl_gradients.png]" in sections["07_kl"]
    assert "`profile='full'`" in sections["06_sensitivity"]
    assert "`seeds=None`" in sections["06_sensitivity"] and "`seeds=[0, 1]`" in sections["07_kl"]
    assert "`failure_margin=0.1`" in sections["06_sensitivity"]  # the parameters cell's own value
    assert "steps=75, eval_every=75" in sections["06_sensitivity"]
    assert "steps=75, eval_every=75" in sections["07_kl"] and "steps=6, eval_every=75" in sections["07_kl"]
    assert "`abc123`" in sections["06_sensitivity"] and "`abc123+dirty`" in sections["07_kl"]
    assert "2026-01-02 10:00:00 to 10:02:00 UTC (120 s)" in sections["06_sensitivity"]
    orphans = sections["Figures no recorded execution wrote"]
    assert "99_old.png" in orphans and "_smoke" not in orphans  # smoke figures are not the full index's


def test_a_notebook_without_an_execution_here_keeps_its_section(tmp_path):
    """`grpo-lab figures --only 07_kl` on a machine without 06's execution: 06's section and the
    figures it lists stay as the index had them; 07's section is written anew."""
    fake_project(tmp_path)
    figures.write_index(tmp_path, "full")
    (tmp_path / "figures" / "notebooks" / "06_sensitivity.ipynb").unlink()
    executed_notebook(
        tmp_path / "figures" / "notebooks" / "07_kl.ipynb",
        T0 + datetime.timedelta(hours=1),
        60,
        {"profile": "full"},
        "def456",
    )
    figure(tmp_path, "07_kl_tokens.png", T0 + datetime.timedelta(hours=1, seconds=30))
    text = figures.write_index(tmp_path, "full").read_text()
    sections = {s.split("\n", 1)[0]: s for s in text.split("\n## ")[1:]}
    assert list(sections) == ["06_sensitivity", "07_kl", "Figures no recorded execution wrote"]
    assert "`abc123`" in sections["06_sensitivity"] and "[06_sensitivity.png]" in sections["06_sensitivity"]
    assert "`def456`" in sections["07_kl"] and "[07_kl_tokens.png]" in sections["07_kl"]
    orphans = sections["Figures no recorded execution wrote"]
    assert "06_sensitivity.png" not in orphans and "07_kl_gradients.png" in orphans  # 07 no longer wrote it


def test_a_fresh_clone_keeps_the_sections_of_the_notebooks_not_executed_now(tmp_path):
    """In a fresh clone every figure's modification time is the checkout's, inside no recorded
    execution: `--only 07_kl` rewrites 07's section and keeps 06's as the index had it."""
    fake_project(tmp_path)
    before = figures.write_index(tmp_path, "full").read_text()
    checkout = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=5)
    for png in (tmp_path / "figures").glob("*.png"):
        os.utime(png, (checkout.timestamp(), checkout.timestamp()))
    executed_notebook(
        tmp_path / "figures" / "notebooks" / "07_kl.ipynb",
        datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=1),
        60,
        {"profile": "full"},
        "def456",
    )
    figure(tmp_path, "07_kl_tokens.png", datetime.datetime.now(datetime.timezone.utc))
    text = figures.write_index(tmp_path, "full", {"07_kl"}).read_text()
    sections = {s.split("\n", 1)[0]: s for s in text.split("\n## ")[1:]}
    assert sections["06_sensitivity"].rstrip() == before.split("\n## ")[1].rstrip()
    assert "`def456`" in sections["07_kl"] and "[07_kl_tokens.png]" in sections["07_kl"]
    everything = figures.write_index(tmp_path, "full").read_text()  # every section from the file times
    assert "No figure was written by this execution." in everything.split("\n## ")[1]


def test_each_figure_is_listed_with_what_it_shows_kept_sections_too(tmp_path):
    """The 'shows' column is the title the figure's data records; a section kept from an index
    written before the column existed gets it too."""
    fake_project(tmp_path)
    drawn = {"title": "KL estimators |\n on the batches", "axes": [{"title": "k3"}]}
    (tmp_path / "figures" / "07_kl_tokens.json").write_text(json.dumps(drawn))
    (tmp_path / "figures" / "06_sensitivity.json").write_text(
        json.dumps({"title": "", "axes": [{"title": "lr"}]})
    )
    text = figures.write_index(tmp_path, "full").read_text()
    assert "| figure | written (UTC) | shows |" in text
    assert (
        "| [07_kl_tokens.png](07_kl_tokens.png) | 2026-01-02 10:05:30 | KL estimators / on the batches |"
        in text
    )
    assert "| no data written beside it |" in text  # 07_kl_gradients
    index = tmp_path / "figures" / "README.md"
    old = text.replace(" | shows |", " |").replace("|---|---|---|", "|---|---|")
    old = "\n".join(
        line.rsplit(" | ", 1)[0] + " |" if line.startswith("| [") else line for line in old.split("\n")
    )
    index.write_text(old)
    (tmp_path / "figures" / "notebooks" / "06_sensitivity.ipynb").unlink()
    kept = figures.write_index(tmp_path, "full").read_text().split("\n## ")[1]
    assert "| [06_sensitivity.png](06_sensitivity.png) | 2026-01-02 10:01:40 | lr |" in kept


def test_other_profiles_index_beside_the_executed_notebooks(tmp_path):
    fake_project(tmp_path, "smoke")
    path = figures.write_index(tmp_path, "smoke")
    assert path == tmp_path / "notebooks" / "executed" / "figures_smoke.md"
    text = path.read_text()
    assert "(../../figures/06_sensitivity.png)" in text and "06_sensitivity_smoke.png" in text


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
    """A one-figure notebook under papermill in a scratch project: the index names it, with the
    injected profile and the figure it wrote."""
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "grpo_lab").mkdir()
    line_notebook(tmp_path, 1.0, name="f'05_line_{profile}'")
    assert figures.regenerate("full", root=tmp_path) == []
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
