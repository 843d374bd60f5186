"""Where the tests find the system tools they run, and what happens when one is missing.

Debian's ``prometheus`` package gives ``prometheus`` and ``promtool`` (``make prometheus``), its
``valgrind`` package gives ``valgrind`` (``make valgrind``); ``.ci/run`` runs both targets before
the tests. Without a tool a test is skipped (``-ra`` lists the skip and its reason) on a
developer's machine, and fails in CI (the ``CI`` variable set, as ``.ci/run`` and CI services
set it): there, a missing tool is a broken set-up, not a reason to pass.
"""

from __future__ import annotations

import os
import shutil

import pytest


def in_ci() -> bool:
    """Whether the tests run in CI: ``CI`` set to anything but empty, ``0`` or ``false``."""
    return os.environ.get("CI", "").strip().lower() not in {"", "0", "false"}


def require_tool(name: str, package: str = "prometheus") -> str:
    """The path of ``name`` (from Debian's ``package``, installed by ``make <package>``); skip
    without it, fail in CI."""
    path = shutil.which(name)
    if path is not None:
        return path
    message = f"{name} is not installed (Debian's {package} package: `make {package}`)"
    if in_ci():
        pytest.fail(f"{message}; CI must have it (CI={os.environ['CI']!r})")
    pytest.skip(message)
