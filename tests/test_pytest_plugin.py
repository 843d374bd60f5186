"""The pytest plugin costs nothing until its fixtures are used, and can be turned off."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

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

BLOCKED = """
import sys
sys.modules["mongomock"] = None

def test_fixture_names_the_extra(standalone_server):
    pass
"""


def _pytest(tmp_path: Path, source: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run pytest on ``source`` alone in ``tmp_path`` (outside this project's conftest files)."""
    (tmp_path / "test_user.py").write_text(source, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, "test_user.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=110,
        env=env,
        check=False,
    )


def test_unused_plugin_imports_no_server_and_no_mongomock(tmp_path: Path) -> None:
    """A test asking for no fixture runs with neither mongomock nor the server imported."""
    result = _pytest(tmp_path, UNUSED)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


def test_fixture_imports_the_server_on_first_use(tmp_path: Path) -> None:
    """Asking for standalone_server imports and starts the embedded server."""
    result = _pytest(tmp_path, USED)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


def test_missing_server_extra_is_named(tmp_path: Path) -> None:
    """Without mongomock the fixture errors with the extra to install."""
    result = _pytest(tmp_path, BLOCKED)
    assert result.returncode == 1
    assert "pip install 'pymongo-backpressure[server]'" in result.stdout


def test_plugin_can_be_turned_off(tmp_path: Path) -> None:
    """-p no:backpressure removes the fixtures."""
    result = _pytest(tmp_path, USED, "-p", "no:backpressure")
    assert result.returncode == 1
    assert "fixture 'standalone_server' not found" in result.stdout
