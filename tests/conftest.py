"""Set-up shared by the whole suite: the embedded server's fixtures, the main thread's event
loop, and coverage across pytest-xdist workers (``make test``).

The fixtures come from the package's pytest plugin, which loads only when a test run asks for it
(as a user's run asks, with ``-p backpressure.testing.pytest_plugin``): this suite asks for it in
``pytest_configure``.

``make test`` sets ``COVERAGE_PROCESS_START``, so coverage's own start-up hook (the ``.pth`` file
coverage installs) measures the pytest process and every xdist worker from interpreter start,
before the package's pytest plugin imports the package. Each process writes its own data file
(``parallel = true``), and ``coverage combine`` merges them. The subprocesses the tests start
(CLIs, servers in a subprocess) are not measured, as in a single process: the process that runs
the tests takes the variable out of its environment before the first test.

A test marked ``unmeasured`` runs with the tracer off on its own thread: a test that only
re-checks a committed figure by re-running the simulator, whose code paths the other tests
(including one measured run of the same check) cover, and which coverage would make several
times slower.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import sys
from collections.abc import Generator

import pytest

STRICT_CYCLE = os.environ.setdefault("BACKPRESSURE_STRICT_CYCLE", "1") == "1"
"""The attempt cycle checks the order of its calls in every test run (``AttemptCycle`` raises
``CycleOrderError`` on a call out of order): on at import time, before any cycle exists, and
through the environment for the tests' subprocesses (a run with the variable set to another
value leaves the check off)."""

import backpressure.core.cycle  # noqa: E402  (after the variable: the module reads it)

backpressure.core.cycle.STRICT = STRICT_CYCLE


def _runs_tests(config: pytest.Config) -> bool:
    """Whether this process runs tests: an xdist worker, or pytest without workers."""
    distributes = getattr(config.option, "dist", "no") != "no"
    return bool(os.environ.get("PYTEST_XDIST_WORKER")) or not distributes


PLUGIN = "backpressure.testing.pytest_plugin"
"""The package's pytest plugin (the embedded server's fixtures)."""


def pytest_configure(config: pytest.Config) -> None:
    """Load the package's pytest plugin, start the main thread with no current event loop, and
    keep the tests' own subprocesses out of the coverage measurement (workers inherit the
    variable first).

    Without a current loop, as after ``asyncio.run()``: otherwise the first
    ``asyncio.get_event_loop()`` there creates a loop that nobody closes: pytest-asyncio 1.2 (the
    newest for Python 3.9) calls it while setting up an async test and keeps the loop it got as
    the current one; the unified runner's ``asyncio.run()`` later replaces it, and the garbage
    collector reports "unclosed event loop" in whichever test runs then (pytest-asyncio issue
    724). No test relies on that implicit creation: from Python 3.10 on it warns, and warnings
    are errors here.

    The plugin is loaded unless a ``-p`` option already did; an install of the package made
    before the plugin became opt-in registers it under the name ``backpressure``, which is left
    as it is (registering the module twice is an error).
    """
    manager = config.pluginmanager
    loaded = sys.modules.get(PLUGIN)
    if loaded is None or not manager.is_registered(loaded):
        manager.import_plugin(PLUGIN)
    asyncio.set_event_loop(None)
    if _runs_tests(config):
        os.environ.pop("COVERAGE_PROCESS_START", None)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Save a worker's coverage data now: a worker does not always exit through ``atexit``."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    import coverage

    current = coverage.Coverage.current()
    if current is not None:
        current.stop()
        current.save()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    """Run an ``unmeasured`` test with this thread's coverage tracer off, then put it back.

    Only this thread's trace function is taken away (``sys.settrace``), so threads that other
    tests started (servers of a session) stay measured; coverage's tracer takes itself back as
    its C trace function at the next call. Without coverage running, nothing changes.
    """
    tracer = sys.gettrace()
    if tracer is None or item.get_closest_marker("unmeasured") is None:
        return (yield)
    import coverage

    if coverage.Coverage.current() is None:
        return (yield)
    sys.settrace(None)
    try:
        return (yield)
    finally:
        sys.settrace(tracer)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist worker, put the ``slow`` tests first in each worker's share.

    The work-stealing scheduler hands each of the ``n`` workers a contiguous share of the
    collection, in order (the first ``len // n`` tests, then a share of the rest, ...), and an
    idle worker later takes the back half of the longest queue. A slow test that came late
    in its share would start near the end and run alone; so the slow tests are dealt round
    the shares, at their heads, and every other test keeps its order. Every worker reorders
    the same collection alike, as xdist requires.
    """
    workers = int(getattr(config, "workerinput", {}).get("workercount", 0))
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    if workers < 2 or not slow:
        return
    rest = iter([item for item in items if item.get_closest_marker("slow") is None])
    shares: list[list[pytest.Item]] = [slow[index::workers] for index in range(workers)]
    left = len(items)
    ordered: list[pytest.Item] = []
    for index, share in enumerate(shares):
        size = left // (workers - index)  # the scheduler's split of what is left
        share += itertools.islice(rest, max(0, size - len(share)))
        ordered += share
        left -= len(share)
    ordered += rest
    items[:] = ordered
