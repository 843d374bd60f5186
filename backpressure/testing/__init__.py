"""Testing tools: an embedded MongoDB-compatible server with fail points and rate limiters.

``EmbeddedServer`` runs a standalone, replica set or sharded topology on loopback ports, in a
thread or a subprocess (``python -m backpressure.testing.server``); the pytest plugin exposes it
as fixtures. Names are imported lazily so that ``python -m backpressure.testing.server`` does not
import its own module twice.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from backpressure.core.extras import require

if TYPE_CHECKING:
    from backpressure.testing.server.embedded import EmbeddedServer, EmbeddedServerError, MemberRef
    from backpressure.testing.server.transport.deployment import Deployment
    from backpressure.testing.testmode import set_testing

__all__ = ["Deployment", "EmbeddedServer", "EmbeddedServerError", "MemberRef", "set_testing"]

_LAZY = {
    "EmbeddedServer": "backpressure.testing.server.embedded",
    "EmbeddedServerError": "backpressure.testing.server.embedded",
    "MemberRef": "backpressure.testing.server.embedded",
    "Deployment": "backpressure.testing.server.transport.deployment",
    "set_testing": "backpressure.testing.testmode",
}


def __getattr__(name: str) -> Any:
    """Import the public names on first use."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name != "set_testing":  # the server's query engine is mongomock, the 'server' extra
        require("mongomock", "server", f"backpressure.testing.{name}")
    return getattr(importlib.import_module(module), name)
