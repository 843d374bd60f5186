"""Per-member counters of the embedded server: commands, connections, rejected connections."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Optional

__all__ = [
    "CommandCounters",
    "ConnectionRecord",
    "MemberStats",
    "ShardHopCounters",
    "merge_stats",
]


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


@dataclass
class ShardHopCounters:
    """What one mongos's commands met at the shard behind it (sharded topology only)."""

    forwarded: int = 0
    """Commands the mongos sent on to the shard (each counted once, retries not included)."""
    shard_rejections: int = 0
    """Overload errors the shard answered to this mongos (first attempts and retries)."""
    retries: int = 0
    """Times this mongos retried a command after a shard overload error."""
    retries_exhausted: int = 0
    """Commands whose retries ran out: the client got the shard's overload error."""
    backoff_seconds: float = 0.0
    """Time this mongos spent backing off before its retries."""

    def to_document(self) -> dict[str, Any]:
        """Render as a BSON-ready document."""
        return {
            "forwarded": self.forwarded,
            "shardRejections": self.shard_rejections,
            "retries": self.retries,
            "retriesExhausted": self.retries_exhausted,
            "backoffSeconds": self.backoff_seconds,
        }


_HOP_KEYS = ("forwarded", "shardRejections", "retries", "retriesExhausted", "backoffSeconds")


class MemberStats:
    """All counters of one member; the transport updates them, ``backpressureStats`` reads them."""

    def __init__(self, shard_hop: bool = False) -> None:
        """Start with empty counters (``shard_hop``: a mongos with a shard behind it)."""
        self.commands: dict[str, CommandCounters] = {}
        self.shard_hop: Optional[ShardHopCounters] = ShardHopCounters() if shard_hop else None
        """The mongos side of the shard hop (None except on a sharded topology's routers)."""
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
        if self.shard_hop is not None:
            self.shard_hop = ShardHopCounters()

    def to_document(self, transactions: list[dict[str, Any]]) -> dict[str, Any]:
        """Render everything, with the engine's per-transaction attempts, as a document."""
        doc = {
            "commands": {name: c.to_document() for name, c in sorted(self.commands.items())},
            "connections": [c.to_document() for c in self.connections.values()],
            "connectionsRejected": self.connections_rejected,
            "transactions": transactions,
        }
        if self.shard_hop is not None:
            doc["shardHop"] = {"mongos": self.shard_hop.to_document()}
        return doc


def merge_stats(per_member: list[dict[str, Any]]) -> dict[str, Any]:
    """Sum the command counters of several members' ``backpressureStats`` documents.

    A sharded topology's ``shardHop``: the mongos counters are summed; the shard's, shared by
    every mongos, come from the first document (read before any ``reset`` of the others)."""
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
    merged: dict[str, Any] = {
        "commands": dict(sorted(commands.items())),
        "connections": connections,
        "connectionsRejected": rejected,
        "transactions": transactions,
        "members": per_member,
    }
    hops = [doc["shardHop"] for doc in per_member if "shardHop" in doc]
    if hops:
        mongos: dict[str, Any] = dict.fromkeys(_HOP_KEYS, 0)
        for hop in hops:
            for key in _HOP_KEYS:
                mongos[key] += hop.get("mongos", {}).get(key, 0)
        merged["shardHop"] = {"mongos": mongos, "shard": hops[0].get("shard", {})}
    return merged
