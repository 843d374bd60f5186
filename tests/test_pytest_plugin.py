"""The pytest plugin loads only when a run asks for it, and then costs nothing until its fixtures
are used."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[1]

UNUSED = """
import sys

def test_plugin_imported_nothing_heavy():
    assert "backpressure.testing.pytest_plugin" in sys.modules
    assert "mongomock" not in sys.modules
    assert "backpressure.testing.server" not in sys.modules
"""

USED = """
import sys

def test_fixture_starts_a_server(standalone_server):
    assert "mongomock" in sys.modules
    assert standalone_server.uri.startswith("mongodb://127.0.0.1:")
"""

CONFTEST = """
pytest_plugins = ["backpressure.testing.pytest_plugin"]
"""

BLOCKED = """
import sys
sys.modules["mongomock"] = None

def test_fixture_names_the_extra(standalone_server):
    pass
"""


PLUGIN = "backpressure.testing.pytest_plugin"

ASK = ("-p", "no:backpressure", "-p", PLUGIN)
"""Ask for the plugin by its module name. ``no:backpressure`` blocks the name an install of the
package made before the plugin became opt-in registers it under (its ``pytest11`` entry point),
which would register the module a second time; nothing else bears that name."""


def _pytest(
    tmp_path: Path, source: str, *args: str, conftest: str = ""
) -> subprocess.CompletedProcess[str]:
    """Run pytest on ``source`` alone in ``tmp_path`` (outside this project's conftest files)."""
    (tmp_path / "test_user.py").write_text(source, encoding="utf-8")
    if conftest:
        (tmp_path / "conftest.py").write_text(conftest, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    env["PYTHONPATH"] = str(ROOT)  # this tree's package, wherever it is installed from
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, "test_user.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=110,
        env=env,
        check=False,
    )


def test_plugin_loads_only_when_asked(tmp_path: Path) -> None:
    """Installing the package registers no plugin: a run that does not ask has no fixtures.

    Fails where the installed distribution predates the opt-in plugin (reinstall the package).
    """
    result = _pytest(tmp_path, USED)
    stale = (
        "a plugin provided the fixtures unasked: is an install of the package from before the "
        "plugin became opt-in (a pytest11 entry point) in this environment? Reinstall it.\n"
    )
    assert result.returncode == 1, stale + result.stdout + result.stderr
    assert "fixture 'standalone_server' not found" in result.stdout


def test_pytest_plugins_in_a_conftest_asks_for_it(tmp_path: Path) -> None:
    """``pytest_plugins = ["backpressure.testing.pytest_plugin"]`` in a conftest loads it."""
    result = _pytest(tmp_path, USED, "-p", "no:backpressure", conftest=CONFTEST)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


def test_unused_plugin_imports_no_server_and_no_mongomock(tmp_path: Path) -> None:
    """A test asking for no fixture runs with neither mongomock nor the server imported."""
    result = _pytest(tmp_path, UNUSED, *ASK)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


def test_fixture_imports_the_server_on_first_use(tmp_path: Path) -> None:
    """Asking for standalone_server imports and starts the embedded server."""
    result = _pytest(tmp_path, USED, *ASK)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


def test_missing_server_extra_is_named(tmp_path: Path) -> None:
    """Without mongomock the fixture errors with the extra to install."""
    result = _pytest(tmp_path, BLOCKED, *ASK)
    assert result.returncode == 1
    assert "pip install 'pymongo-backpressure[server]'" in result.stdout
