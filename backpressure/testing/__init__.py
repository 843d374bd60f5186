"""Testing tools: an embedded MongoDB-compatible server with fail points and rate limiters.

``EmbeddedServer`` runs a standalone, replica set or sharded topology on loopback ports, in a
thread or a subprocess (``python -m backpressure.testing.server``); the pytest plugin exposes it
as fixtures.
"""

from __future__ import annotations

from backpressure.testing.embedded import EmbeddedServer, EmbeddedServerError, MemberRef
from backpressure.testing.server import Deployment

__all__ = ["Deployment", "EmbeddedServer", "EmbeddedServerError", "MemberRef"]
