"""A JupyterLab server on 127.0.0.1 and headless Chromium driven by Playwright, for the real-browser tests.

The browser is the system's Chromium (Debian's `chromium` package; `.ci/run` installs it): Playwright is
pointed at it and never downloads its own. Without Chromium or Playwright the tests are skipped, unless
`GRPO_LAB_REQUIRE_BROWSER=1` or `CI=true` (as in `.ci/run`), where a missing browser is a failure."""

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path(os.environ.get("GRPO_LAB_CHROMIUM", "/usr/bin/chromium"))
REQUIRED = os.environ.get("GRPO_LAB_REQUIRE_BROWSER") == "1" or os.environ.get("CI") == "true"
SERVER_START_S = 60.0

LAB_SETTINGS = {
    # never write the notebook back: the committed copy stays output-free whatever the test runs
    "@jupyterlab/docmanager-extension/plugin": {"autosave": False},
    # no news pop-up over the page (and no request leaving the machine)
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    # every cell stays in the page, so prompts and outputs can be read wherever they are scrolled
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
}
"""JupyterLab user settings of the test server: {plugin path: settings}"""


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "browser: drives JupyterLab in headless Chromium (tests/browser)")


@dataclass(frozen=True)
class Lab:
    """A running JupyterLab server."""

    url: str
    token: str
    log: Path

    def page_url(self, path: str) -> str:
        return f"{self.url}/{path}?token={self.token}"

    def log_tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:]


def _need(condition: bool, reason: str) -> None:
    if not condition:
        if REQUIRED:
            pytest.fail(f"{reason} (required here: GRPO_LAB_REQUIRE_BROWSER=1 or CI=true)")
        pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_settings(directory: Path) -> None:
    for plugin, values in LAB_SETTINGS.items():
        path = directory / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


def _wait_until_up(server: subprocess.Popen, lab: Lab) -> None:
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"jupyter lab exited with {server.returncode}:\n{lab.log_tail()}")
        try:
            with urllib.request.urlopen(lab.page_url("api/status"), timeout=2):
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.25)
    pytest.fail(f"jupyter lab did not answer within {SERVER_START_S:.0f} s:\n{lab.log_tail()}")


def _stop(server: subprocess.Popen) -> None:
    """SIGTERM (the server shuts its kernels down), then SIGKILL the whole group if it hangs."""
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)


@pytest.fixture(scope="session")
def chromium() -> Path:
    """The system Chromium, with Playwright importable."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _need(False, "playwright is not installed (pip install -e '.[browser]')")
    _need(
        CHROMIUM.exists(), f"no Chromium at {CHROMIUM} (apt-get install chromium, or set GRPO_LAB_CHROMIUM)"
    )
    return CHROMIUM


@pytest.fixture(scope="session")
def lab(chromium, embedded_arith_path, tmp_path_factory) -> Iterator[Lab]:
    """JupyterLab on 127.0.0.1 (a free port, a random token) serving the repository, with its own
    settings, workspaces, config and runtime directories so it neither reads nor leaves anything in
    the user's. The embedded model is built before (`embedded_arith_path`), not inside the browser's
    wait. Stopped at the end, its kernels with it."""
    home = tmp_path_factory.mktemp("jupyter")
    _write_settings(home / "settings")
    (home / "config").mkdir()
    # jupyter-lsp would write .virtual_documents/ into the repository
    (home / "config" / "jupyter_server_config.json").write_text(
        json.dumps({"ServerApp": {"jpserver_extensions": {"jupyter_lsp": False}}})
    )
    port, token = _free_port(), secrets.token_hex(16)
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
    }
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
               f"--ServerApp.token={token}", f"--ServerApp.root_dir={ROOT}", "--allow-root",
               f"--LabApp.user_settings_dir={home / 'settings'}",
               f"--LabApp.workspaces_dir={home / 'workspaces'}"]  # fmt: skip
    log = home / "server.log"
    with open(log, "w") as out:
        server = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    running = Lab(f"http://127.0.0.1:{port}", token, log)
    try:
        _wait_until_up(server, running)
        yield running
    finally:
        _stop(server)


@pytest.fixture
def unchanged() -> Iterator[Callable[[Path], None]]:
    """`unchanged(path)`: the test must leave that file byte for byte as it was. Checked afterwards
    (and restored if it was written); a .ipynb_checkpoints folder created next to it is removed."""
    snapshots: dict[Path, bytes] = {}
    new_checkpoints: list[Path] = []

    def watch(path: Path) -> None:
        snapshots[path] = path.read_bytes()
        checkpoints = path.parent / ".ipynb_checkpoints"
        if not checkpoints.exists():
            new_checkpoints.append(checkpoints)

    yield watch
    for folder in new_checkpoints:
        shutil.rmtree(folder, ignore_errors=True)
    changed = [path for path, before in snapshots.items() if path.read_bytes() != before]
    for path in changed:
        path.write_bytes(snapshots[path])
    assert not changed, f"the browser session wrote {changed} (restored from before the test)"
