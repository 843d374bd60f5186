"""One command as the engine's handlers see it: the transport's context, the request, handlers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from backpressure.testing.server.engine.cursors import CursorRegistry
from backpressure.testing.server.engine.sessions import SessionRegistry, Transaction, session_key
from backpressure.testing.server.engine.store import DataStore
from backpressure.testing.server.errors import CommandError

__all__ = ["CommandContext", "Handler", "Request", "collection_name", "session_key_of"]


@dataclass
class CommandContext:
    """What the transport knows about the request being executed."""

    connection_id: int
    """The server-side id of the connection the request arrived on."""
    app_name: Optional[str]
    """The client's ``appName`` from its handshake, if any."""
    role: str
    """The member's role: ``standalone``, ``primary``, ``secondary`` or ``mongos``."""
    max_wire_version: int
    """The wire version the member advertises."""
    member_index: int = 0
    """The member's position in the topology (tells one mongos from another)."""


@dataclass
class Request:
    """One command as seen by a command handler."""

    name: str
    """The command name (the body's first key)."""
    db: str
    """The target database (``$db``)."""
    body: dict[str, Any]
    """The command document, document sequences merged."""
    ctx: CommandContext
    """The transport's context."""
    store: DataStore
    """The data the command reads and writes (a transaction's workspace inside transactions)."""
    cursors: CursorRegistry
    """The engine's open cursors."""
    sessions: SessionRegistry
    """The engine's sessions, retryable-write records and transactions."""
    txn: Optional[Transaction] = None
    """The running transaction this command belongs to, if any."""

    @property
    def target(self) -> Any:
        """The value of the command-name field (usually the collection name)."""
        return self.body[self.name]


Handler = Callable[[Request], dict[str, Any]]
"""A command implementation: request in, ``ok: 1`` reply out (or ``CommandError`` raised)."""


def collection_name(req: Request, field: Optional[str] = None, *, virtual: bool = False) -> str:
    """Return the collection named by ``field`` (default: the command field), validated.

    With ``virtual``, cursor namespaces such as ``$cmd.aggregate`` are accepted too.
    """
    key = field or req.name
    value = req.body.get(key)
    if not isinstance(value, str):
        raise CommandError(
            73,
            f"collection name has invalid type {type(value).__name__}",
            extra={"field": key} if field else None,
        )
    if not value or "\x00" in value or (value.startswith("$") and not virtual):
        raise CommandError(73, f"Invalid namespace specified '{req.db}.{value}'")
    return value


def session_key_of(req: Request) -> Any:
    """Return the session key of a request (``lsid.id``), or None."""
    return session_key(req.body.get("lsid"))
