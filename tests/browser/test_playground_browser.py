"""Notebook 10_playground in a real browser: JupyterLab runs it, the KL slider is moved with the keyboard,
Train is pressed, and the plot and the displayed KL coefficient must follow; then the ε-high slider is
moved down, Train is pressed again, and the high side of the clip must bite more."""

import re
from pathlib import Path

import pytest

from grpo_lab.playground import CSS

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "10_playground.ipynb"
RUN_ALL_MS = 150_000
"""kernel start, imports, the model and the notebook's scripted steps (about 30 s on 2 busy cores)"""
TRAIN_MS = 60_000
BROWSER_ARGS = ["--no-sandbox", "--disable-dev-shm-usage"]
"""CI runs as root (Chromium's sandbox refuses root) and containers have a small /dev/shm"""

ALL_CELLS_RAN = """() => {
    const dialog = document.querySelector('.jp-Dialog');
    if (dialog) return 'a dialog opened: ' + dialog.textContent;
    const outputs = [...document.querySelectorAll('.jp-Notebook .jp-OutputArea-output')];
    if (outputs.some(o => o.textContent.includes('Traceback'))) return 'error';
    const prompts = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputArea-prompt')];
    return prompts.length > 0 && prompts.every(p => /\\[\\d+\\]/.test(p.textContent)) ? 'done' : null;
}"""
"""'done' once every code cell has an execution count; 'error' as soon as a cell raised, or the dialog's
text when JupyterLab asks something instead of running"""

PLOT_LOADED = "img => img.complete && img.naturalWidth > 0"


def _text(page, css: str, part: str = "") -> str:
    return page.locator(f".{css} {part}".strip()).inner_text().strip()


def _last_step(status: str) -> int:
    found = re.match(r"step (\d+) ", status)
    assert found, f"the status line shows no step: {status!r}"
    return int(found.group(1))


def _high_clip(status: str) -> float:
    """The high-side clipped share of the last step, from the status line."""
    found = re.search(r"high ([0-9.]+)\)", status)
    assert found, f"the status line shows no high-side clipped share: {status!r}"
    return float(found.group(1))


def _press_train(page, step_before: int, steps_per_click: int) -> None:
    page.locator(f"button.{CSS['train']}").click()
    page.wait_for_function(
        "([sel, text]) => document.querySelector(sel).textContent.startsWith(text)",
        arg=[f".{CSS['status']}", f"step {step_before + steps_per_click} "],
        timeout=TRAIN_MS,
    )
    page.wait_for_selector(f"button.{CSS['train']}:not([disabled])", timeout=TRAIN_MS)


def _move(page, css: str, key: str, presses: int, field: str) -> float:
    """Move a slider's handle with the keyboard, as a user would; wait until the kernel has the new
    value (the status announces it); return the slider's new readout."""
    readout_before = _text(page, css, ".widget-readout")
    page.locator(f".{css} .noUi-handle").focus()
    for _ in range(presses):
        page.keyboard.press(key)
    page.wait_for_function(
        "([sel, old]) => document.querySelector(sel).textContent.trim() !== old",
        arg=[f".{css} .widget-readout", readout_before],
    )
    page.wait_for_function(
        "([sel, text]) => document.querySelector(sel).textContent.includes(text)",
        arg=[f".{CSS['status']}", f"next step uses {field}"],
    )
    return float(_text(page, css, ".widget-readout"))


def _plot(page) -> bytes:
    plot = page.locator(f"img.{CSS['plot']}")
    page.wait_for_function(f"() => ({PLOT_LOADED})(document.querySelector('img.{CSS['plot']}'))")
    return plot.screenshot()


def _run_all(page, lab) -> None:
    page.goto(lab.page_url("lab/tree/notebooks/10_playground.ipynb"))
    page.wait_for_selector(".jp-NotebookPanel .jp-CodeCell", timeout=60_000)
    # Run All before the kernel is connected asks for a kernel in a dialog instead of running
    kernel_idle = page.locator(".jp-StatusBar-TextItem", has_text=re.compile(r"\| Idle$"))
    kernel_idle.wait_for(timeout=60_000)
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
    outcome = page.wait_for_function(ALL_CELLS_RAN, timeout=RUN_ALL_MS).json_value()
    assert outcome == "done", "\n".join(page.locator(".jp-OutputArea-output").all_inner_texts())[-3000:]


def _drive(page, lab) -> None:
    _run_all(page, lab)
    page.wait_for_selector(f".{CSS['coef_in_use']}")
    coef_before = float(_text(page, CSS["coef_in_use"], ".widget-html-content"))
    step_before = _last_step(_text(page, CSS["status"]))
    steps_per_click = int(_text(page, CSS["steps_per_click"], ".widget-readout"))
    plot_before = _plot(page)

    # move the KL slider one notch to the right with the keyboard, as a user would
    readout_before = _text(page, CSS["kl_coef"], ".widget-readout")
    slider_value = _move(page, CSS["kl_coef"], "ArrowRight", 1, "kl_coef")
    assert slider_value > float(readout_before)
    _press_train(page, step_before, steps_per_click)

    coef_after = float(_text(page, CSS["coef_in_use"], ".widget-html-content"))
    assert coef_after != coef_before
    assert coef_after == pytest.approx(slider_value, rel=5e-3)
    plot_after_kl = _plot(page)
    assert plot_after_kl != plot_before

    # then ε high down by a decade (ten notches of the log slider): the high side must clip more
    status = _text(page, CSS["status"])
    high_before, step = _high_clip(status), _last_step(status)
    eps_before = float(_text(page, CSS["eps_high"], ".widget-readout"))
    eps_after = _move(page, CSS["eps_high"], "ArrowLeft", 10, "eps_high")
    assert eps_after == pytest.approx(eps_before / 10, rel=0.05)
    _press_train(page, step, steps_per_click)
    high_after = _high_clip(_text(page, CSS["status"]))
    assert high_after > high_before, f"high-side clipped share {high_before} -> {high_after}"
    assert _plot(page) != plot_after_kl


@pytest.mark.slow
@pytest.mark.browser
def test_playground_reacts_to_the_kl_slider_and_the_train_button(lab, chromium, unchanged, tmp_path: Path):
    from playwright.sync_api import sync_playwright

    unchanged(NOTEBOOK)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(chromium), headless=True, args=BROWSER_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            try:
                _drive(page, lab)
                page.screenshot(path=tmp_path / "playground.png", full_page=True)  # both change markers
                print(f"the playground after both changes: {tmp_path / 'playground.png'}")
            except Exception:
                page.screenshot(path=tmp_path / "failure.png", full_page=True)
                print(f"page at failure: {tmp_path / 'failure.png'}\nserver log:\n{lab.log_tail()}")
                raise
        finally:
            browser.close()
