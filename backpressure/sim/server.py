"""Simulated servers: the ingress limiters, the server's own work capacity and its counters.

Theory of operation.  A :class:`Limiter` is the embedded server's (and mongod's) admission rule
as arithmetic rather than as waiting tasks: a token bucket whose tokens may go negative, each
negative token being a request reserved in the FIFO queue.  A request that finds no queue and a
whole token is admitted; otherwise, if fewer than ``queue_depth`` requests wait, it takes a token
on credit and is admitted when the refill pays that credit back (an instant computed at once,
since every rate change of a scenario is known in advance); otherwise it is rejected.  So the
server answers every request the moment it arrives, and the simulator needs no event for it.

A :class:`SimServer` adds the work the server does: every admitted request costs one unit and
every rejection ``rejection_cost`` units of a FIFO processor running ``work_capacity`` units per
second.  While the server keeps up, a reply leaves ``service_ms`` (or ``rejection_cost`` of it)
after the request arrived; past that, replies queue behind the backlog: this is how a retry
storm of cheap rejections still slows everything down.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Optional

from pymongo.errors import AutoReconnect, OperationFailure

from backpressure.core.labels import add_overload_labels
from backpressure.sim.model import LimiterSpec, ServerSpec

__all__ = ["ADMITTED", "QUEUED", "REJECTED", "Limiter", "SimServer"]

ADMITTED, QUEUED, REJECTED = 0, 1, 2
"""Outcomes of :meth:`Limiter.arrive`."""

RATE_LIMIT_CODE = 462
"""mongod's ``IngressRequestRateLimitExceeded``."""


class Limiter:
    """A token bucket with a FIFO queue, answered by arithmetic (see the module docstring)."""

    __slots__ = (
        "_burst",
        "_changes",
        "_index",
        "_queue",
        "depth",
        "rate",
        "size",
        "stamp",
        "tokens",
    )

    def __init__(self, spec: LimiterSpec) -> None:
        """Start full at time 0."""
        self._burst = float(spec.burst_seconds)
        self._changes = [(float(t), float(r)) for t, r in spec.changes]
        self._index = 0
        self.rate = float(spec.rate_per_s)
        while self._index < len(self._changes) and self._changes[self._index][0] <= 0:
            self.rate = self._changes[self._index][1]
            self._index += 1
        self.size = max(1.0, self.rate * self._burst)
        self.tokens = self.size
        self.stamp = 0.0
        self.depth = int(spec.queue_depth)
        self._queue: deque[float] = deque()

    def _refill(self, now: float) -> None:
        """Earn tokens up to ``now``, applying rate changes on the way."""
        changes = self._changes
        while now > self.stamp:
            change_at = changes[self._index][0] if self._index < len(changes) else math.inf
            end = now if now < change_at else change_at
            if end > self.stamp:
                self.tokens = min(self.size, self.tokens + (end - self.stamp) * self.rate)
                self.stamp = end
            if change_at <= now:
                self.rate = changes[self._index][1]
                self.size = max(1.0, self.rate * self._burst)
                if self.tokens > self.size:
                    self.tokens = self.size
                self._index += 1
            else:
                break

    def _paid_back(self) -> float:
        """When the (negative) token balance reaches 0 again (inf if it never does)."""
        owed = -self.tokens
        now, rate, index = self.stamp, self.rate, self._index
        changes = self._changes
        while True:
            change_at = changes[index][0] if index < len(changes) else math.inf
            if rate > 0 and now + owed / rate <= change_at:
                return now + owed / rate
            if change_at == math.inf:
                return math.inf
            owed -= (change_at - now) * rate
            now = change_at
            rate = changes[index][1]
            index += 1

    def arrive(self, now: float) -> tuple[int, float]:
        """Admit, queue or reject a request arriving at ``now``: ``(outcome, admission time)``.

        Arrivals must come in non-decreasing time (a late one is treated as arriving at the
        latest time seen).
        """
        self._refill(now)
        now = self.stamp if self.stamp > now else now
        queue = self._queue
        while queue and queue[0] <= now:
            queue.popleft()
        if not queue and self.tokens >= 1.0:
            self.tokens -= 1.0
            return ADMITTED, now
        if len(queue) < self.depth:
            self.tokens -= 1.0
            at = self._paid_back()
            queue.append(at)
            return QUEUED, at
        return REJECTED, now


def overload_error(spec: ServerSpec) -> OperationFailure:
    """The error a rejected request raises in pymongo: code 462 with both overload labels."""
    details: dict[str, object] = {
        "ok": 0,
        "errmsg": "Rate limiter 'ingressRequestRateLimiter' rate exceeded",
        "code": RATE_LIMIT_CODE,
        "codeName": "IngressRequestRateLimitExceeded",
        "errorLabels": ["SystemOverloadedError", "RetryableError"],
    }
    if spec.base_backoff_ms > 0:
        details["baseBackoffMS"] = spec.base_backoff_ms
    return OperationFailure(str(details["errmsg"]), RATE_LIMIT_CODE, details)


def connection_refused_error(spec: ServerSpec) -> AutoReconnect:
    """The error a refused connection raises: a network error pymongo labels as overload."""
    error = AutoReconnect(f"connection to {spec.name} closed before the handshake")
    add_overload_labels(error)
    return error


class SimServer:
    """One simulated mongod or mongos: limiters, work capacity, counters."""

    def __init__(self, spec: ServerSpec, index: int) -> None:
        """Build the server's limiters and errors from ``spec``."""
        self.spec = spec
        self.index = index
        self.address: tuple[str, int] = (spec.name, 27017)
        self.limiter: Optional[Limiter] = None if spec.limiter is None else Limiter(spec.limiter)
        self.connection_limiter: Optional[Limiter] = (
            None if spec.connection_limiter is None else Limiter(spec.connection_limiter)
        )
        self.error = overload_error(spec)
        self.connection_error = connection_refused_error(spec)
        self.half_rtt = spec.rtt_ms / 2000.0
        self.service = spec.service_ms / 1000.0
        self.rejection_service = self.service * spec.rejection_cost
        capacity = spec.work_capacity()
        self._unit = 0.0 if capacity == math.inf else 1.0 / capacity
        self._rejection_unit = self._unit * spec.rejection_cost
        self.handshake = spec.handshake_ms / 1000.0 + spec.rtt_ms / 1000.0
        self._busy_until = 0.0
        self._windows = list(spec.reject_windows)
        self._bursts = list(spec.reject_bursts)
        self._burst_index = 0
        self._burst_left = 0
        self.received = 0
        self.admitted = 0
        self.rejected = 0
        self.connections_refused = 0
        self.work = 0.0
        """Units of work done (admitted operations + rejection_cost per rejection)."""

    def request(self, arrive: float) -> tuple[bool, float]:
        """Handle a request arriving at ``arrive``: ``(admitted, when its reply is back)``."""
        self.received += 1
        limiter = self.limiter
        if (self._windows or self._bursts) and self._faulted(arrive):
            outcome, start = REJECTED, arrive
        elif limiter is None:
            outcome, start = ADMITTED, arrive
        else:
            outcome, start = limiter.arrive(arrive)
        if outcome == REJECTED:
            self.rejected += 1
            self.work += self.spec.rejection_cost
            begin = self._busy_until if self._busy_until > arrive else arrive
            self._busy_until = begin + self._rejection_unit
            return False, begin + self.rejection_service + self.half_rtt
        self.admitted += 1
        self.work += 1.0
        if start == math.inf:
            return True, math.inf
        begin = self._busy_until if self._busy_until > start else start
        self._busy_until = begin + self._unit
        return True, begin + self.service + self.half_rtt

    def _faulted(self, arrive: float) -> bool:
        """Whether a fault (a reject window or a burst of rejections) rejects this request."""
        windows = self._windows
        while windows and windows[0][1] <= arrive:
            windows.pop(0)
        if windows and windows[0][0] <= arrive:
            return True
        bursts = self._bursts
        while self._burst_index < len(bursts) and bursts[self._burst_index][0] <= arrive:
            self._burst_left += bursts[self._burst_index][1]
            self._burst_index += 1
        if self._burst_left > 0:
            self._burst_left -= 1
            return True
        return False

    def connect(self, arrive: float) -> tuple[bool, float]:
        """Establish a connection arriving at ``arrive``: ``(accepted, time it is usable)``."""
        limiter = self.connection_limiter
        if limiter is None:
            return True, arrive + self.handshake
        outcome, start = limiter.arrive(arrive)
        if outcome == REJECTED:
            self.connections_refused += 1
            return False, arrive + self.half_rtt
        return True, start + self.handshake

    def capacity_at(self, now: float) -> float:
        """The request limiter's rate at ``now`` (inf without a limiter; 0 in a reject window)."""
        if self.spec.rejecting_at(now):
            return 0.0
        limiter = self.spec.limiter
        return math.inf if limiter is None else limiter.rate_at(now)
