"""Start the embedded server the demo and the benchmarks drive."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Callable

from backpressure.workload.driver import LoadTarget

__all__ = ["ServerFactory", "embedded_server"]

ServerFactory = Callable[[], AbstractContextManager[Any]]
"""Returns a context manager whose value is a :class:`LoadTarget`."""


def embedded_server(
    topology: str = "replicaset", members: int = 3, subprocess: bool = True
) -> AbstractContextManager[LoadTarget]:
    """Return the embedded server (in a subprocess: no GIL contention with the client)."""
    from backpressure.testing import EmbeddedServer

    server: AbstractContextManager[LoadTarget] = EmbeddedServer(
        topology=topology, members=members, subprocess=subprocess
    )
    return server
