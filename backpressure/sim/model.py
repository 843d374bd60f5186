"""What a simulated deployment and its clients are made of: frozen, validated specs.

A :class:`Scenario` names servers (:class:`ServerSpec`, each with an ingress request limiter and
an optional connection-establishment limiter) and groups of identical clients
(:class:`ClientGroup`, open loop or closed loop).  Nothing here runs; :mod:`backpressure.sim.engine`
does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Union

__all__ = [
    "READ_PREFERENCES",
    "ROLES",
    "ClientGroup",
    "ClosedLoop",
    "LimiterSpec",
    "OpenLoop",
    "Phase",
    "Scenario",
    "ServerSpec",
]

ROLES: tuple[str, ...] = ("primary", "secondary", "mongos", "standalone")
"""Allowed ``ServerSpec.role`` values."""

READ_PREFERENCES: tuple[str, ...] = (
    "primary",
    "primaryPreferred",
    "secondary",
    "secondaryPreferred",
    "nearest",
)
"""Allowed ``ClientGroup.read_preference`` values (pymongo's mode names)."""

DEFAULT_REJECTION_COST = 0.25
"""Server work of one rejected request, as a fraction of an admitted operation's.

A rejection reads and parses the whole request, consults the limiter and sends an error reply:
the work of a ``ping``, not of a query.  On the embedded server a ping costs 13-16 us against
51-55 us for a find by ``_id`` (0.25-0.3 of it); mongod's ratio is of the same order (its
admission check sits after message parsing, before any storage work).
"""


def _check(name: str, value: object, *, minimum: float = 0.0, positive: bool = False) -> float:
    """Validate a number field; raise ValueError or TypeError naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number (int or float), got {value!r}")
    number = float(value)
    if not math.isfinite(number) or number < minimum or (positive and number <= 0):
        bound = "> 0" if positive else f">= {minimum:g}"
        raise ValueError(f"{name} must be a finite number {bound}, got {value!r}")
    return number


def _check_int(name: str, value: object, minimum: int) -> int:
    """Validate an int field."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


@dataclass(frozen=True)
class LimiterSpec:
    """A token-bucket limiter: ``rate_per_s``, a bucket of ``burst_seconds`` of it, a FIFO queue.

    Mirrors mongod's ``ingressRequestAdmission*`` (and ``ingressConnectionEstablishment*``)
    parameters: the bucket holds ``max(1, rate * burst_seconds)`` tokens and starts full; a request
    that finds no token waits in a queue of at most ``queue_depth`` entries (0: rejected at once).
    ``changes`` are ``(time_s, rate_per_s)`` pairs at which the rate changes (tokens kept, clipped).
    """

    rate_per_s: float
    burst_seconds: float = 1.0
    queue_depth: int = 0
    changes: tuple[tuple[float, float], ...] = ()

    def __post_init__(self) -> None:
        """Validate every field."""
        _check("LimiterSpec.rate_per_s", self.rate_per_s)
        _check("LimiterSpec.burst_seconds", self.burst_seconds, positive=True)
        _check_int("LimiterSpec.queue_depth", self.queue_depth, 0)
        previous = -math.inf
        for at, rate in self.changes:
            _check("LimiterSpec.changes time_s", at)
            _check("LimiterSpec.changes rate_per_s", rate)
            if at <= previous:
                raise ValueError("LimiterSpec.changes must be in increasing time")
            previous = at

    def rate_at(self, time_s: float) -> float:
        """The rate in force at ``time_s``."""
        rate = self.rate_per_s
        for at, new_rate in self.changes:
            if at > time_s:
                break
            rate = new_rate
        return rate


@dataclass(frozen=True)
class ServerSpec:
    """One mongod or mongos as the clients see it."""

    name: str
    role: str = "primary"
    """One of :data:`ROLES`."""
    limiter: Optional[LimiterSpec] = None
    """The ingress request limiter (None: disabled, every request admitted)."""
    connection_limiter: Optional[LimiterSpec] = None
    """The connection-establishment limiter (None: disabled)."""
    base_backoff_ms: float = 0.0
    """``externalClientBaseBackoffMS``: attached as ``baseBackoffMS`` to rejections (0: none)."""
    service_ms: float = 0.5
    """Server time to execute one admitted operation when the server is not saturated."""
    work_capacity_per_s: Optional[float] = None
    """Admitted-operation equivalents the server can process per second.

    None: 4x the limiter's initial rate (unlimited without a limiter).  That sizes the limiter
    so that, at the default rejection cost, the server sheds a 10x overload of first attempts
    without saturating (1 + 9 x 0.25 = 3.25 < 4 units per admitted operation) but not a retry
    storm at 10x (three attempts per operation: 1 + 29 x 0.25 = 8.25).  Work beyond the capacity
    queues, which delays every reply."""
    rejection_cost: float = DEFAULT_REJECTION_COST
    """Work of one rejection as a fraction of an admitted operation (see DEFAULT_REJECTION_COST)."""
    rtt_ms: float = 0.3
    """Network round trip between a client and this server."""
    handshake_ms: float = 1.0
    """Time to establish one connection (TCP + hello), on top of the round trip."""
    reject_windows: tuple[tuple[float, float], ...] = ()
    """``(start_s, end_s)`` windows in which the server rejects every request with an overload
    error (a ``failCommand`` fail point in ``alwaysOn`` mode); no limiter token is taken."""
    reject_bursts: tuple[tuple[float, int], ...] = ()
    """``(time_s, count)``: from ``time_s`` on, the next ``count`` requests are rejected with an
    overload error (a fail point in ``{times: count}`` mode)."""

    def __post_init__(self) -> None:
        """Validate every field."""
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"ServerSpec.name must be a non-empty str, got {self.name!r}")
        if self.role not in ROLES:
            raise ValueError(f"ServerSpec.role must be one of {ROLES}, got {self.role!r}")
        _check("ServerSpec.base_backoff_ms", self.base_backoff_ms)
        _check("ServerSpec.service_ms", self.service_ms)
        if self.work_capacity_per_s is not None:
            _check("ServerSpec.work_capacity_per_s", self.work_capacity_per_s, positive=True)
        _check("ServerSpec.rejection_cost", self.rejection_cost)
        _check("ServerSpec.rtt_ms", self.rtt_ms)
        _check("ServerSpec.handshake_ms", self.handshake_ms)
        previous = -math.inf
        for start, end in self.reject_windows:
            _check("ServerSpec.reject_windows start_s", start)
            _check("ServerSpec.reject_windows end_s", end)
            if end <= start or start < previous:
                raise ValueError(
                    "ServerSpec.reject_windows must be non-overlapping (start, end) pairs in "
                    f"increasing time, got {self.reject_windows!r}"
                )
            previous = end
        previous = -math.inf
        for at, count in self.reject_bursts:
            _check("ServerSpec.reject_bursts time_s", at)
            _check_int("ServerSpec.reject_bursts count", count, 1)
            if at < previous:
                raise ValueError("ServerSpec.reject_bursts must be in increasing time")
            previous = at

    def rejecting_at(self, time_s: float) -> bool:
        """Whether a reject window is open at ``time_s``."""
        return any(start <= time_s < end for start, end in self.reject_windows)

    def work_capacity(self) -> float:
        """Admitted-operation equivalents per second (inf: never saturated)."""
        if self.work_capacity_per_s is not None:
            return float(self.work_capacity_per_s)
        if self.limiter is None:
            return math.inf
        return 4.0 * max(self.limiter.rate_per_s, 1.0)


@dataclass(frozen=True)
class Phase:
    """A stretch of constant arrival rate of an open-loop group (all its clients together)."""

    duration_s: float
    rate_per_s: float
    name: str = ""

    def __post_init__(self) -> None:
        """Validate the numbers."""
        _check("Phase.duration_s", self.duration_s, positive=True)
        _check("Phase.rate_per_s", self.rate_per_s)


@dataclass(frozen=True)
class OpenLoop:
    """Arrivals independent of completions: Poisson or evenly spaced, phase by phase.

    ``threads`` models an application that serves arrivals from a fixed pool of threads (the
    benchmark's workload driver): an arrival waits for a free thread of its client, and one still
    waiting ``max_lag_s`` after it was due is skipped (never sent, an app error).  None: every
    arrival runs at once.
    """

    phases: tuple[Phase, ...]
    arrivals: str = "poisson"
    """"poisson" or "scheduled" (evenly spaced, offset by half a gap, as the workload driver)."""
    threads: Optional[int] = None
    max_lag_s: float = 1.0
    start_jitter_ms: float = 0.0
    """Mean of an exponential delay between an arrival and its first send (thread wake-up and
    GIL hand-off in a real process; it keeps evenly spaced arrivals from locking in phase with
    the limiter's refill)."""

    def __post_init__(self) -> None:
        """Validate the fields."""
        if not self.phases:
            raise ValueError("OpenLoop.phases must name at least one Phase")
        if self.arrivals not in ("poisson", "scheduled"):
            raise ValueError(
                f"OpenLoop.arrivals must be 'poisson' or 'scheduled', got {self.arrivals!r}"
            )
        if self.threads is not None:
            _check_int("OpenLoop.threads", self.threads, 1)
        _check("OpenLoop.max_lag_s", self.max_lag_s)
        _check("OpenLoop.start_jitter_ms", self.start_jitter_ms)

    @property
    def duration_s(self) -> float:
        """Total length of the phases."""
        return sum(phase.duration_s for phase in self.phases)


@dataclass(frozen=True)
class ClosedLoop:
    """Each client runs ``workers`` loops of operations, ``think_ms`` apart, for ``duration_s``."""

    workers: int
    duration_s: float
    think_ms: float = 0.0

    def __post_init__(self) -> None:
        """Validate the fields."""
        _check_int("ClosedLoop.workers", self.workers, 1)
        _check("ClosedLoop.duration_s", self.duration_s, positive=True)
        _check("ClosedLoop.think_ms", self.think_ms)


Workload = Union[OpenLoop, ClosedLoop]
"""Either loop shape."""


@dataclass(frozen=True)
class ClientGroup:
    """``count`` identical client processes (one pymongo client each) running ``workload``."""

    count: int
    workload: Workload
    read_fraction: float = 0.5
    """Share of reads; the rest are writes (which go to a primary or any mongos)."""
    read_preference: str = "primary"
    """One of :data:`READ_PREFERENCES` (replica sets only)."""
    timeout_ms: Optional[float] = None
    """CSOT ``timeoutMS`` per operation (None: no deadline)."""
    max_pool_size: int = 100
    max_connecting: int = 2
    cpu_ms_per_attempt: float = 0.0
    """Client CPU per attempt, serialised per client (one GIL): half before sending, half after
    the reply, with the connection still checked out; 0: free."""
    name: str = "clients"
    sheddable_fraction: float = 0.0
    """Share of the operations run under ``overrides(criticality="sheddable")``; the rest are
    critical (0: none marked, the default)."""
    arm: Optional[str] = None
    """The arm this group's clients run, by name (a mixed fleet: some processes still on
    stock pymongo); None: the arm the scenario is run under."""

    def __post_init__(self) -> None:
        """Validate the fields."""
        _check_int("ClientGroup.count", self.count, 1)
        if self.arm is not None and (not isinstance(self.arm, str) or not self.arm):
            raise ValueError(f"ClientGroup.arm must be None or an arm name, got {self.arm!r}")
        _check("ClientGroup.sheddable_fraction", self.sheddable_fraction)
        if self.sheddable_fraction > 1:
            raise ValueError(
                f"ClientGroup.sheddable_fraction must be <= 1, got {self.sheddable_fraction!r}"
            )
        _check("ClientGroup.read_fraction", self.read_fraction)
        if self.read_fraction > 1:
            raise ValueError(f"ClientGroup.read_fraction must be <= 1, got {self.read_fraction!r}")
        if self.read_preference not in READ_PREFERENCES:
            raise ValueError(
                f"ClientGroup.read_preference must be one of {READ_PREFERENCES}, "
                f"got {self.read_preference!r}"
            )
        if self.timeout_ms is not None:
            _check("ClientGroup.timeout_ms", self.timeout_ms, positive=True)
        _check_int("ClientGroup.max_pool_size", self.max_pool_size, 1)
        _check_int("ClientGroup.max_connecting", self.max_connecting, 1)
        _check("ClientGroup.cpu_ms_per_attempt", self.cpu_ms_per_attempt)


@dataclass(frozen=True)
class Scenario:
    """A deployment, its clients and how long to run them."""

    name: str
    description: str
    servers: tuple[ServerSpec, ...]
    clients: tuple[ClientGroup, ...]
    drain_s: float = 5.0
    """Extra simulated time for operations still running after the last arrival."""
    bucket_s: float = 1.0
    """Width of the timeline buckets."""
    phases: tuple[tuple[float, str], ...] = field(default=())
    """``(start_s, label)`` marks drawn on the chart."""
    overload_end_s: Optional[float] = None
    """When the overload ends (recovery time is measured from there; None: not measured)."""
    settle_s: float = 2.0
    """Seconds after each phase mark left out of that phase's goodput (the clients adapt)."""

    def __post_init__(self) -> None:
        """Validate the topology."""
        if not self.servers:
            raise ValueError("Scenario.servers must name at least one server")
        if not self.clients:
            raise ValueError("Scenario.clients must name at least one ClientGroup")
        names = [server.name for server in self.servers]
        if len(set(names)) != len(names):
            raise ValueError(f"Scenario.servers must have distinct names, got {names}")
        roles = {server.role for server in self.servers}
        if "mongos" in roles and roles != {"mongos"}:
            raise ValueError("Scenario.servers: mongos routers cannot be mixed with other roles")
        if "standalone" in roles and len(self.servers) != 1:
            raise ValueError("Scenario.servers: a standalone must be the only server")
        if roles & {"primary", "secondary"} and sum(s.role == "primary" for s in self.servers) != 1:
            raise ValueError("Scenario.servers: a replica set needs exactly one primary")
        _check("Scenario.drain_s", self.drain_s)
        _check("Scenario.bucket_s", self.bucket_s, positive=True)
        _check("Scenario.settle_s", self.settle_s)

    @property
    def duration_s(self) -> float:
        """Arrivals stop after this many seconds (the longest group)."""
        return max(group.workload.duration_s for group in self.clients)

    @property
    def topology(self) -> str:
        """ "sharded", "replicaset" or "standalone"."""
        roles = {server.role for server in self.servers}
        if roles == {"mongos"}:
            return "sharded"
        if roles == {"standalone"}:
            return "standalone"
        return "replicaset"
