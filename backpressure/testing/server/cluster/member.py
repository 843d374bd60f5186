"""The mutable state of one embedded member and of each of its client connections (no I/O)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional

from backpressure.testing.server.cluster.topology import Member, Topology
from backpressure.testing.server.control.failpoints import FailCommand, TransactionalWriteFailPoint
from backpressure.testing.server.control.parameters import ServerParameters
from backpressure.testing.server.control.profiles import profile_for
from backpressure.testing.server.control.ratelimit import AdmissionLimiter
from backpressure.testing.server.control.stats import ConnectionRecord, MemberStats

if TYPE_CHECKING:
    from backpressure.testing.server.cluster.shard import ShardHop
    from backpressure.testing.server.engine.dispatch import Engine

__all__ = ["CONTROL_APP_NAME", "ConnectionState", "MemberState"]

CONTROL_APP_NAME = "backpressure-embedded-control"
"""appName of the control connections of ``EmbeddedServer``: exempt from fail points, limiters
and statistics so that helpers keep working whatever a test injected."""


@dataclass
class ConnectionState:
    """What the server knows about one client connection."""

    record: ConnectionRecord
    """The statistics record (also holds the handshake)."""
    compression: list[str] = field(default_factory=list)
    """Compressors negotiated in the handshake."""
    control: bool = False
    """True for an ``EmbeddedServer`` control connection."""
    peer_host: Optional[str] = None
    """The client's IP address (for ``ingressRequestRateLimiterExemptions``)."""

    @property
    def connection_id(self) -> int:
        """The server-side connection id."""
        return self.record.connection_id

    @property
    def app_name(self) -> Optional[str]:
        """The handshake's appName."""
        return self.record.app_name


class MemberState:
    """Parameters, fail points, limiters and statistics of one member."""

    def __init__(
        self,
        member: Member,
        topology: Topology,
        engine: Engine,
        start_parameters: Mapping[str, Any],
        shard: Optional[ShardHop] = None,
        *,
        limiter_clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Build the member's state from its start-up parameters (``shard``: the shard behind
        a sharded topology's routers, shared by all of them); its limiters refill on
        ``limiter_clock``."""
        self.member = member
        self.topology = topology
        self.engine = engine
        self.start_parameters = dict(start_parameters)
        self.profile = profile_for(topology.server_version)
        """The limiter behaviours of the member's server version."""
        self.parameters = ServerParameters(start_parameters, self.profile)
        self.fail_command = FailCommand()
        self.transactional_write = TransactionalWriteFailPoint()
        """The ``onPrimaryTransactionalWrite`` fail point."""
        self.request_limiter = AdmissionLimiter(
            self.parameters.request_limiter(), clock=limiter_clock
        )
        self.connection_limiter = AdmissionLimiter(
            self.parameters.connection_limiter(), clock=limiter_clock
        )
        self.operation_limiter = AdmissionLimiter(
            self.parameters.operation_limiter(), clock=limiter_clock
        )
        """The operation rate limiter (code 463; 8.3+ profiles only)."""
        self.shard = shard
        """The shard hop (sharded topology only), shared by every mongos."""
        self.stats = MemberStats(shard_hop=shard is not None)
        self.queue_interrupted_by_max_time = 0
        """Queued requests (9.0) whose maxTimeMS ran out before they got a token."""
        self.queue_interrupted_by_disconnect = 0
        """Queued requests (9.0) whose client closed the connection before they got a token."""
        self.establishment_interrupted = 0
        """Connections whose client closed them while they waited for a connection token."""
        self.establishment_queued_micros = 0
        """Time connections spent in the establishment queue, in microseconds (all of them)."""
        self.establishment_queued = 0
        """Connections that left the establishment queue (admitted or interrupted)."""
        self.started = time.monotonic()
        self.requests = 0
        """Requests handled since start (control connections included)."""
        self.cpu_seconds = 0.0
        """Thread CPU time spent handling requests since start."""
        self.total_connections = 0
        """Connections accepted since start."""

    def apply_parameters(self) -> None:
        """Push the current parameter values into the limiters."""
        self.request_limiter.apply(self.parameters.request_limiter())
        self.connection_limiter.apply(self.parameters.connection_limiter())
        self.operation_limiter.apply(self.parameters.operation_limiter())

    def reset(self) -> None:
        """Fail points off, parameters and limiters back to start-up settings, counters zeroed."""
        self.fail_command.disable()
        self.transactional_write.disable()
        self.parameters = ServerParameters(self.start_parameters, self.profile)
        self.request_limiter.apply(self.parameters.request_limiter())
        self.connection_limiter.apply(self.parameters.connection_limiter())
        self.operation_limiter.apply(self.parameters.operation_limiter())
        for limiter in (self.request_limiter, self.connection_limiter, self.operation_limiter):
            limiter.bucket.refill_to_capacity()
            limiter.reset_counters()
        self.stats.reset()
        if self.shard is not None:
            self.shard.reset()
        self.queue_interrupted_by_max_time = self.queue_interrupted_by_disconnect = 0
        self.establishment_interrupted = 0
        self.establishment_queued_micros = self.establishment_queued = 0

    def close(self) -> None:
        """Release every limiter waiter."""
        self.request_limiter.close()
        self.connection_limiter.close()
        self.operation_limiter.close()
