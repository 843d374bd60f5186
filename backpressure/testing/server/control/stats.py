"""Per-member counters of the embedded server: commands, connections, rejected connections."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Optional

__all__ = ["CommandCounters", "ConnectionRecord", "MemberStats", "merge_stats"]


@dataclass
class CommandCounters:
    """How one command name fared on one member."""

    received: int = 0
    """Requests with this command name (rejected ones included)."""
    failed: int = 0
    """Replies with ``ok: 0`` (injected, engine and limiter errors) and closed connections."""
    rejected: int = 0
    """Requests the ingress request limiter rejected."""

    def to_document(self) -> dict[str, int]:
        """Render as a BSON-ready document."""
        return {"received": self.received, "failed": self.failed, "rejected": self.rejected}


@dataclass
class ConnectionRecord:
    """One client connection, open or closed."""

    connection_id: int
    """The server-side id sent as ``connectionId`` in hello replies."""
    remote: str
    """The client's address as ``host:port``."""
    opened_at: float = field(default_factory=time.time)
    """Wall-clock time of accept."""
    closed_at: Optional[float] = None
    """Wall-clock time of close, ``None`` while open."""
    handshake: Optional[dict[str, Any]] = None
    """The first hello document the client sent on this connection."""
    app_name: Optional[str] = None
    """``client.application.name`` from the handshake."""
    commands: int = 0
    """Requests received on this connection."""

    @property
    def open(self) -> bool:
        """True until the connection closes."""
        return self.closed_at is None

    def to_document(self) -> dict[str, Any]:
        """Render as a BSON-ready document."""
        return {
            "connectionId": self.connection_id,
            "remote": self.remote,
            "open": self.open,
            "openedAt": self.opened_at,
            "closedAt": self.closed_at,
            "appName": self.app_name,
            "handshake": self.handshake,
            "commands": self.commands,
        }


class MemberStats:
    """All counters of one member; the transport updates them, ``backpressureStats`` reads them."""

    def __init__(self) -> None:
        """Start with empty counters."""
        self.commands: dict[str, CommandCounters] = {}
        self.connections: dict[int, ConnectionRecord] = {}
        self.connections_rejected = 0
        """Connections closed by the connection-establishment limiter before their handshake."""

    def command(self, name: str) -> CommandCounters:
        """Return (creating) the counters of ``name``."""
        counters = self.commands.get(name)
        if counters is None:
            counters = self.commands[name] = CommandCounters()
        return counters

    def reset(self) -> None:
        """Zero the counters and forget closed connections."""
        self.commands.clear()
        self.connections = {k: v for k, v in self.connections.items() if v.open}
        self.connections_rejected = 0

    def to_document(self, transactions: list[dict[str, Any]]) -> dict[str, Any]:
        """Render everything, with the engine's per-transaction attempts, as a document."""
        return {
            "commands": {name: c.to_document() for name, c in sorted(self.commands.items())},
            "connections": [c.to_document() for c in self.connections.values()],
            "connectionsRejected": self.connections_rejected,
            "transactions": transactions,
        }


def merge_stats(per_member: list[dict[str, Any]]) -> dict[str, Any]:
    """Sum the command counters of several members' ``backpressureStats`` documents."""
    commands: dict[str, dict[str, int]] = {}
    connections: list[dict[str, Any]] = []
    rejected = 0
    for doc in per_member:
        for name, counters in doc.get("commands", {}).items():
            total = commands.setdefault(name, {"received": 0, "failed": 0, "rejected": 0})
            for key, value in counters.items():
                total[key] = total.get(key, 0) + value
        connections.extend(doc.get("connections", []))
        rejected += doc.get("connectionsRejected", 0)
    transactions = per_member[0].get("transactions", []) if per_member else []
    return {
        "commands": dict(sorted(commands.items())),
        "connections": connections,
        "connectionsRejected": rejected,
        "transactions": transactions,
        "members": per_member,
    }
