"""Connection-establishment errors as overloads, for ``MongoClient`` on pymongo 4.9-4.16
(the sync flavour).

``BackpressurePool`` (and, for pools created before the install, an instance-level
``connect``) labels connection-establishment errors as overload errors; the gated
``Topology.handle_error`` then leaves the server known and its pool intact.

The sync twin ``sync_pool.py`` is generated from ``async_pool.py`` by ``scripts/unasync.py``:
edit the async file, then run ``python scripts/unasync.py``.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from pymongo.errors import (
    ConnectionFailure,
    PyMongoError,
)

from backpressure.adapters.backport import shared as _shared
from backpressure.core.labels import is_overload

# isort: split
# The flavour's own modules (sync_cycle and pymongo.synchronous in the generated twin).
from pymongo.synchronous.pool import Pool as _Pool

__all__ = ["BackpressurePool"]


def _handle_error_with_skip(original: Any) -> Callable[..., Any]:
    """Wrap ``Topology.handle_error``: overload-labelled connection errors leave SDAM alone."""

    def handle_error(self: Any, address: Any, err_ctx: Any) -> None:
        error = err_ctx.error
        if (
            isinstance(error, ConnectionFailure)
            and is_overload(error)
            and _shared.topology_enabled(self._topology_id)
        ):
            return  # the server shed the connection: keep it known and its pool intact
        original(self, address, err_ctx)

    return handle_error


class BackpressurePool(_Pool):
    """Connection pool of an enabled client: connection-establishment errors become overloads."""

    def connect(self, *args: Any, **kwargs: Any) -> Any:
        """Open a connection; label network errors and timeouts with the overload labels."""
        try:
            return super().connect(*args, **kwargs)
        except PyMongoError as exc:
            _shared.label_connection_error(self, exc)
            raise


def _labelling_connect(pool: Any) -> Callable[..., Any]:
    """Build an instance-level ``connect`` labelling errors for a pool created before install."""
    original = pool.connect

    def connect(*args: Any, **kwargs: Any) -> Any:
        try:
            return original(*args, **kwargs)
        except PyMongoError as exc:
            _shared.label_connection_error(pool, exc)
            raise

    return connect


def _tag_pool(pool: Any) -> Any:
    """Make an existing pool label connection errors (no-op for our own pool class)."""
    if not isinstance(pool, BackpressurePool) and "connect" not in vars(pool):
        pool.connect = _labelling_connect(pool)
    return pool


def _replace_srv_pool_class(client: Any, old: Optional[type], new: Optional[type]) -> None:
    """Give the topology a ``mongodb+srv`` client builds on first use ``new`` as its pool class,
    if ``old`` is the one it would get (None: pymongo's own)."""
    srv_info = client._resolve_srv_info
    if srv_info.get("pool_class") is old:
        srv_info["pool_class"] = new


def _tag_topology(client: Any) -> None:
    """Tag the client topology's current pools and the ones it creates later.

    A ``mongodb+srv`` client of pymongo 4.11-4.16 has no topology before its first use (it
    resolves the SRV record then): the topology it builds gets our pool class instead, through
    the settings it will build from (``_resolve_srv_info``), unless the application chose one.
    """
    topology = client._topology
    if topology is None:
        _replace_srv_pool_class(client, None, BackpressurePool)
        return
    for server in list(topology._servers.values()):
        _tag_pool(server.pool)
    if "_create_pool_for_server" not in vars(topology):
        create = topology._create_pool_for_server
        topology._create_pool_for_server = lambda address: _tag_pool(create(address))


def _untag_topology(client: Any) -> None:
    """Remove what ``_tag_topology`` put on the client (pools built since stay inert)."""
    topology = client._topology
    if topology is None:
        _replace_srv_pool_class(client, BackpressurePool, None)
        return
    vars(topology).pop("_create_pool_for_server", None)
    for server in list(topology._servers.values()):
        vars(server.pool).pop("connect", None)
