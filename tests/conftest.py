"""Set-up shared by the whole suite."""

from __future__ import annotations

import asyncio

import pytest


def pytest_configure(config: pytest.Config) -> None:
    """The main thread starts with no current event loop, as it is after ``asyncio.run()``.

    Otherwise the first ``asyncio.get_event_loop()`` there creates a loop that nobody closes:
    pytest-asyncio 1.2 (the newest for Python 3.9) calls it while setting up an async test and
    keeps the loop it got as the current one; the unified runner's ``asyncio.run()`` later
    replaces it, and the garbage collector reports "unclosed event loop" in whichever test runs
    then (pytest-asyncio issue 724). No test relies on that implicit creation: from Python 3.10
    on it warns, and warnings are errors here.
    """
    asyncio.set_event_loop(None)
