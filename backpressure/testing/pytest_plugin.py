"""pytest fixtures that start the embedded server on ephemeral ports.

Loaded only when a test run asks for it: ``pytest -p backpressure.testing.pytest_plugin``, the
same in ``addopts``, or ``pytest_plugins = ["backpressure.testing.pytest_plugin"]`` in the
top-level ``conftest.py``.  Installing the package registers no plugin.  Fixtures (none is
autouse):

* ``embedded_server_factory``: call it with ``EmbeddedServer`` keyword arguments; it starts the
  server and stops every server it started at the end of the test.
* ``standalone_server``, ``replicaset_server`` (3 members), ``sharded_server`` (2 mongos):
  in-process servers started once per session and ``reset()`` before each test that uses them.

The plugin costs nothing until a test asks for one of these fixtures: the embedded server (and
mongomock, from the ``server`` extra) is imported by the first fixture that needs it, and a
missing extra fails that test with an error naming it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Callable

import pytest

from backpressure.core.extras import require

if TYPE_CHECKING:
    from backpressure.testing.server.embedded import EmbeddedServer

__all__ = [
    "embedded_server_factory",
    "replicaset_server",
    "sharded_server",
    "standalone_server",
]

ServerFactory = Callable[..., "EmbeddedServer"]


def _server_class() -> type[EmbeddedServer]:
    """Import the embedded server on first use (raises MissingExtraError without mongomock)."""
    require("mongomock", "server", "The embedded test server")
    from backpressure.testing.server.embedded import EmbeddedServer

    return EmbeddedServer


@pytest.fixture
def embedded_server_factory() -> Iterator[ServerFactory]:
    """Start ``EmbeddedServer(**kwargs)`` on demand; stop them all at teardown.

    The servers stop in reverse order, every one of them even if stopping another fails.
    """
    with contextlib.ExitStack() as started:

        def factory(**kwargs: Any) -> EmbeddedServer:
            return started.enter_context(_server_class()(**kwargs))

        yield factory


def _session_server(topology: str) -> Callable[[], Iterator[EmbeddedServer]]:
    def fixture() -> Iterator[EmbeddedServer]:
        with _server_class()(topology) as server:
            yield server

    fixture.__doc__ = f"One in-process {topology} embedded server for the whole session."
    return fixture


_standalone_session = pytest.fixture(scope="session", name="_backpressure_standalone")(
    _session_server("standalone")
)
_replicaset_session = pytest.fixture(scope="session", name="_backpressure_replicaset")(
    _session_server("replicaset")
)
_sharded_session = pytest.fixture(scope="session", name="_backpressure_sharded")(
    _session_server("sharded")
)


@pytest.fixture
def standalone_server(_backpressure_standalone: EmbeddedServer) -> EmbeddedServer:
    """A shared standalone server, reset to its start state for this test."""
    _backpressure_standalone.reset()
    return _backpressure_standalone


@pytest.fixture
def replicaset_server(_backpressure_replicaset: EmbeddedServer) -> EmbeddedServer:
    """A shared 3-member replica set (``rs0``), reset to its start state for this test."""
    _backpressure_replicaset.reset()
    return _backpressure_replicaset


@pytest.fixture
def sharded_server(_backpressure_sharded: EmbeddedServer) -> EmbeddedServer:
    """A shared sharded cluster of 2 mongos routers, reset to its start state for this test."""
    _backpressure_sharded.reset()
    return _backpressure_sharded
