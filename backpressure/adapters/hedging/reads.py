"""Which reads are hedged, on which members, and what a hedge's call is given.

The rules are in :mod:`backpressure.adapters.hedging` (*What is hedged*, *Shared state*).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Optional

from pymongo import _csot

from backpressure.core.events import Address

__all__ = ["ASYNC_HEDGING", "HEDGED_COMMANDS"]

_LOGGER = logging.getLogger("backpressure")


def _async_reads_yield() -> bool:
    """Whether ``AsyncMongoClient`` waits for a reply without blocking the event loop."""
    try:
        from pymongo import network_layer
    except ImportError:  # pragma: no cover - every supported pymongo has the module
        return False
    return hasattr(network_layer, "async_receive_message")


ASYNC_HEDGING: bool = _async_reads_yield()
"""Whether ``AsyncMongoClient`` reads are hedged.  Before pymongo 4.13 (at the latest) its
reads wait for the reply in a blocking call that holds the event loop, so no hedge could start
while the first attempt waits: those clients are left unhedged (Motor and sync clients are not
affected)."""

HEDGED_COMMANDS: frozenset[str] = frozenset({"find", "count", "distinct"})
"""The commands whose reads may be hedged (the other rules: the package docstring)."""

_NON_CURSOR_COMMANDS = frozenset({"count", "distinct"})


def _with_address(args: tuple[Any, ...], kwargs: dict[str, Any], address: Address) -> Any:
    """``_select_server``'s arguments with ``address`` (select that member by address)."""
    if len(args) > 3:
        return (*args[:3], address, *args[4:]), kwargs
    return args, {**kwargs, "address": address}


def _argument(args: tuple[Any, ...], kwargs: Mapping[str, Any], index: int, name: str) -> Any:
    """The argument ``name`` given at position ``index`` or as a keyword (None if absent)."""
    if len(args) > index:
        return args[index]
    return kwargs.get(name)


def _session_allows(session: Any) -> bool:
    """Whether a read with ``session`` may be hedged: none, or implicit and no transaction."""
    if session is None:
        return True
    return bool(getattr(session, "_implicit", False)) and not session.in_transaction


def _discard_when_done(session: Any) -> None:
    """Keep an implicit session's server session out of the pool once it ends.

    A losing attempt may still use it on another member; a pooled copy could be handed to the
    next operation while that attempt runs.
    """
    server_session = getattr(session, "_server_session", None)
    mark_dirty = getattr(server_session, "mark_dirty", None)
    if callable(mark_dirty):
        mark_dirty()


def _candidates(client: Any, read_preference: Any) -> list[Address]:
    """The members ``read_preference`` allows now (mongos routers in a sharded cluster)."""
    from pymongo.server_selectors import Selection

    topology = getattr(client, "_topology", None)
    description = getattr(topology, "description", None)
    if description is None or read_preference is None:
        return []
    kind = description.topology_type_name
    known = [sd for sd in description.known_servers if sd.is_readable]
    if kind == "Sharded":
        return [sd.address for sd in known if sd.server_type_name == "Mongos"]
    if kind not in ("ReplicaSetWithPrimary", "ReplicaSetNoPrimary"):
        return []
    primary = next((sd for sd in known if sd.server_type_name == "RSPrimary"), None)
    selection = Selection(description, known, description.common_wire_version, primary)
    try:
        chosen = read_preference(selection)
    except Exception:  # a selector we do not understand: do not hedge
        return []
    return [sd.address for sd in chosen.server_descriptions]


def _close_server_cursor(client: Any, result: Any) -> None:
    """Kill the server cursor a losing ``find`` opened (none for single-batch results)."""
    docs = getattr(result, "docs", None)
    if not docs or not isinstance(docs[0], Mapping):
        return
    cursor = docs[0].get("cursor")
    if not isinstance(cursor, Mapping):
        return
    cursor_id, namespace = cursor.get("id"), cursor.get("ns")
    if not isinstance(cursor_id, int) or not cursor_id or not isinstance(namespace, str):
        return
    from pymongo.message import _CursorAddress

    try:
        client._close_cursor_soon(int(cursor_id), _CursorAddress(result.address, namespace))
    except Exception:  # the client is closing: its server cursors go with it
        _LOGGER.debug("could not schedule killCursors for a losing hedged find", exc_info=True)


def _deadline_at(now: float) -> Optional[float]:
    """The operation's CSOT deadline on a clock that reads ``now``: ``now`` plus the time pymongo
    says remains on its own clock (None: no timeout applies)."""
    remaining = _csot.remaining()
    return None if remaining is None else now + remaining


def _timeout_of(client: Any) -> Optional[float]:
    """The client's timeoutMS (seconds) when no CSOT timeout applies yet, else None."""
    if _csot.get_timeout() is not None:
        return None
    timeout = getattr(client, "_timeout", None)
    return timeout if isinstance(timeout, (int, float)) else None
