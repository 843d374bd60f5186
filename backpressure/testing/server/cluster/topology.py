"""Topology shapes of the embedded server: members, roles and the hello replies they send.

The server never advertises ``topologyVersion``, so pymongo's monitors poll once per
``heartbeatFrequencyMS`` instead of streaming awaitable hellos (valid for every pymongo 4.x).
Replica-set members report ``lastWrite`` (the cluster clock's latest time; all members share one
data store, so secondaries are never behind), which ``maxStalenessSeconds`` needs.
"""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from bson.binary import Binary
from bson.int64 import Int64
from bson.objectid import ObjectId
from bson.timestamp import Timestamp

from backpressure.testing.server.wire.framing import MAX_MESSAGE_SIZE_BYTES

__all__ = [
    "DEFAULT_MEMBERS",
    "MAX_BSON_OBJECT_SIZE",
    "MAX_WRITE_BATCH_SIZE",
    "SET_NAME",
    "TOPOLOGIES",
    "ClusterClock",
    "Member",
    "Topology",
    "version_array",
]

TOPOLOGIES = ("standalone", "replicaset", "sharded")
"""The topology kinds the server can emulate."""

DEFAULT_MEMBERS = {"standalone": 1, "replicaset": 3, "sharded": 2}
"""Members per topology kind when none is given."""

SET_NAME = "rs0"
"""The replica set name."""

MAX_BSON_OBJECT_SIZE = 16 * 1024 * 1024
"""``maxBsonObjectSize`` advertised in hello."""
MAX_WRITE_BATCH_SIZE = 100_000
"""``maxWriteBatchSize`` advertised in hello."""
LOGICAL_SESSION_TIMEOUT_MINUTES = 30
"""``logicalSessionTimeoutMinutes``: its presence enables sessions and retryable writes."""


@dataclass(frozen=True)
class Member:
    """One server of a topology."""

    index: int
    """Position in the topology (0 is the primary of a replica set)."""
    host: str
    """The host name clients use."""
    port: int
    """The bound port."""
    role: str
    """``standalone``, ``primary``, ``secondary`` or ``mongos``."""
    service_id: ObjectId = field(default_factory=ObjectId, compare=False)
    """The ``serviceId`` a mongos names in a load-balanced handshake."""

    @property
    def address(self) -> str:
        """``host:port``, an IPv6 host in brackets (``[::1]:27017``) as mongod writes it."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


class ClusterClock:
    """A monotonically increasing ``$clusterTime`` shared by a topology's members."""

    def __init__(self) -> None:
        """Start at the current wall-clock second."""
        self._seconds = int(time.time())
        self._increment = 0

    def tick(self) -> Timestamp:
        """Advance and return the cluster time."""
        now = int(time.time())
        if now > self._seconds:
            self._seconds, self._increment = now, 1
        else:
            self._increment += 1
        return Timestamp(self._seconds, self._increment)

    def latest(self) -> Timestamp:
        """The latest cluster time handed out, without advancing."""
        return Timestamp(self._seconds, self._increment)

    def gossip(self, timestamp: Timestamp) -> dict[str, Any]:
        """The ``$clusterTime`` document for ``timestamp`` (unsigned)."""
        return {
            "clusterTime": timestamp,
            "signature": {"hash": Binary(b"\x00" * 20), "keyId": 0},
        }


def version_array(version: str) -> list[int]:
    """``"8.2.0"`` -> ``[8, 2, 0, 0]`` as in ``buildInfo.versionArray``."""
    parts = [int(p) for p in version.split(".")[:4] if p.isdigit()]
    return [*parts, 0, 0, 0, 0][:4]


class Topology:
    """A topology kind and its members, known once every member has bound its port."""

    def __init__(
        self,
        kind: str,
        members: list[Member],
        *,
        max_wire_version: int = 25,
        server_version: str = "8.2.6",
    ) -> None:
        """Describe ``members`` of a ``kind`` topology."""
        if kind not in TOPOLOGIES:
            raise ValueError(f"unknown topology {kind!r}; expected one of {TOPOLOGIES}")
        self.kind = kind
        self.members = members
        self.max_wire_version = max_wire_version
        self.server_version = server_version
        self.clock = ClusterClock()

    @staticmethod
    def roles(kind: str, count: int) -> list[str]:
        """The role of each of ``count`` members of a ``kind`` topology."""
        if kind == "standalone":
            if count != 1:
                raise ValueError("a standalone topology has exactly one member")
            return ["standalone"]
        if count < 1:
            raise ValueError("a topology needs at least one member")
        if kind == "replicaset":
            return ["primary"] + ["secondary"] * (count - 1)
        return ["mongos"] * count

    @property
    def gossips_cluster_time(self) -> bool:
        """Replica sets and sharded clusters attach ``$clusterTime``/``operationTime``."""
        return self.kind != "standalone"

    @property
    def primary(self) -> Optional[Member]:
        """The primary of a replica set, else ``None``."""
        return next((m for m in self.members if m.role == "primary"), None)

    def uri(self) -> str:
        """The connection string for the whole topology."""
        hosts = ",".join(m.address for m in self.members)
        if self.kind == "replicaset":
            return f"mongodb://{hosts}/?replicaSet={SET_NAME}"
        return f"mongodb://{hosts}/"

    def hello(
        self,
        member: Member,
        *,
        connection_id: int,
        legacy: bool,
        compression: Optional[list[str]] = None,
    ) -> dict[str, Any]:
        """The reply to ``hello`` (``legacy``: ``isMaster``, which says ``ismaster``)."""
        writable = member.role in ("standalone", "primary", "mongos")
        reply: dict[str, Any] = {"helloOk": True}
        reply["ismaster" if legacy else "isWritablePrimary"] = writable
        if self.kind == "replicaset":
            primary = self.primary
            reply.update(
                setName=SET_NAME,
                setVersion=1,
                hosts=[m.address for m in self.members],
                me=member.address,
                secondary=member.role == "secondary",
            )
            if primary is not None:
                reply["primary"] = primary.address
            reply["lastWrite"] = self._last_write()
            if member.role == "secondary":
                reply["ismaster" if legacy else "isWritablePrimary"] = False
        elif self.kind == "sharded":
            reply["msg"] = "isdbgrid"
        reply.update(
            maxBsonObjectSize=MAX_BSON_OBJECT_SIZE,
            maxMessageSizeBytes=MAX_MESSAGE_SIZE_BYTES,
            maxWriteBatchSize=MAX_WRITE_BATCH_SIZE,
            localTime=datetime.datetime.now(tz=datetime.timezone.utc),
            logicalSessionTimeoutMinutes=LOGICAL_SESSION_TIMEOUT_MINUTES,
            connectionId=connection_id,
            minWireVersion=0,
            maxWireVersion=self.max_wire_version,
            readOnly=False,
        )
        if compression:
            reply["compression"] = compression
        reply["ok"] = 1.0
        return reply

    def _last_write(self) -> dict[str, Any]:
        """``lastWrite`` of a replica-set hello: op times and their wall-clock dates.

        mongod's dates have second precision (they come from the op time's seconds).
        """
        ts = self.clock.latest()
        op_time = {"ts": ts, "t": Int64(1)}
        date = datetime.datetime.fromtimestamp(ts.time, tz=datetime.timezone.utc)
        return {
            "opTime": op_time,
            "lastWriteDate": date,
            "majorityOpTime": dict(op_time),
            "majorityWriteDate": date,
        }
