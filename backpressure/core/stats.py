"""Aggregate statistics of one client: counters fed by finished operations, frozen snapshots.

``StatsRecorder`` is an ``OperationListener`` that every enabled client carries; it adds each
finished operation to its counters under a lock held only around the arithmetic.
``snapshot()`` returns a ``BackpressureStats`` value (frozen, with read-only mappings) that never
changes afterwards.  Per server: attempts are counted on the server they went to, a retry and
its backoff on the server whose failure caused it, an operation and its give-up on the server of
its last attempt.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Optional

from backpressure.core.adaptive.pacer import ServerPacerSnapshot
from backpressure.core.choice import ServerSignal
from backpressure.core.decision import StopReason
from backpressure.core.events import Address, OperationFinishedEvent

__all__ = ["BackpressureStats", "ServerStats", "StatsRecorder"]


@dataclass(frozen=True)
class ServerStats:
    """What one server saw of a client's operations (see the module docstring for attribution)."""

    operations: int
    """Operations whose last attempt went to this server."""
    attempts: int
    """Attempts sent to this server."""
    retries: int
    """Retries granted after an overload error from this server."""
    gave_up: Mapping[StopReason, int]
    """Give-ups by reason whose last attempt went to this server."""
    backoff_seconds: float
    """Backoff granted after overload errors from this server, in seconds."""


@dataclass(frozen=True)
class BackpressureStats:
    """A frozen snapshot of one client's retry statistics since it was enabled."""

    operations: int
    """Operations finished (succeeded or raised)."""
    succeeded: int
    """Operations that succeeded (on the first attempt or on a retry)."""
    failed: int
    """Operations that raised an error (give-ups and errors unrelated to overload)."""
    attempts: int
    """Attempts sent by finished operations."""
    retries: int
    """Overload retries granted."""
    gave_up: Mapping[StopReason, int]
    """Operations that stopped retrying an overload error, by reason."""
    backoff_seconds: float
    """Backoff granted in all, in seconds (what the retry loops slept, except in test mode)."""
    servers: Mapping[Address, ServerStats]
    """The same per server ``(host, port)``; attempts whose server is unknown are left out."""
    pacing: Mapping[Address, ServerPacerSnapshot] = field(
        default_factory=lambda: MappingProxyType({})
    )
    """The adaptive policy's pacing state per server at the snapshot (whether it is paced, the
    rate, the waiting callers and their backlog, the pushbacks, whether it competes); empty
    for the other policies and before any reply."""
    server_choice: Mapping[Address, ServerSignal] = field(
        default_factory=lambda: MappingProxyType({})
    )
    """The server choice's signal per server that pushed back (the share of recent attempts
    pushed back, whether selections avoid it, how many avoided it); empty while none did, or
    with ``route_around`` off."""

    @property
    def gave_up_total(self) -> int:
        """Give-ups of every reason."""
        return sum(self.gave_up.values())

    @property
    def attempts_per_operation(self) -> float:
        """Attempts over operations (1.0 means no retries; 0.0 before any operation)."""
        return self.attempts / self.operations if self.operations else 0.0


class _ServerCounters:
    """Mutable per-server counters behind ``StatsRecorder``'s lock."""

    __slots__ = ("attempts", "backoff", "gave_up", "operations", "retries")

    def __init__(self) -> None:
        """Start at zero."""
        self.operations = 0
        self.attempts = 0
        self.retries = 0
        self.backoff = 0.0
        self.gave_up: dict[StopReason, int] = {}

    def freeze(self) -> ServerStats:
        """Return the counters as a ``ServerStats``."""
        return ServerStats(
            operations=self.operations,
            attempts=self.attempts,
            retries=self.retries,
            gave_up=MappingProxyType(dict(self.gave_up)),
            backoff_seconds=self.backoff,
        )


class _Tally:
    """A lock-free success counter: ``itertools.count``, read by :meth:`take` under a lock."""

    __slots__ = ("counter", "reads", "server", "taken")

    def __init__(self, server: Optional[Address]) -> None:
        """Count successes on ``server`` from zero."""
        self.server = server
        self.counter: Iterator[int] = itertools.count()
        self.reads = 0  # next() calls made by take() itself
        self.taken = 0  # successes already handed out by take()

    def take(self) -> int:
        """Return the successes counted since the previous call (the recorder's lock held).

        Reading an ``itertools.count`` advances it, so each read is subtracted: the value
        returned by the n-th read (0-based) is the successes so far plus n.
        """
        total = next(self.counter) - self.reads
        self.reads += 1
        new, self.taken = total - self.taken, total
        return new


class StatsRecorder:
    """Thread-safe counters of finished operations; an ``OperationListener``."""

    def __init__(self) -> None:
        """Start with every counter at zero."""
        self._lock = threading.Lock()
        self._operations = 0
        self._succeeded = 0
        self._attempts = 0
        self._retries = 0
        self._backoff = 0.0
        self._gave_up: dict[StopReason, int] = {}
        self._servers: dict[Address, _ServerCounters] = {}
        self._first_attempt_successes: dict[Optional[Address], int] = {}
        self._tallies: dict[Hashable, _Tally] = {}
        self.tallies: Mapping[Hashable, Iterator[int]] = {}
        """The lock-free first-attempt success counters by key (see :meth:`tally`); read-only."""

    def _server(self, address: Address) -> _ServerCounters:
        """Return the counters of ``address`` (created on first use; lock held)."""
        counters = self._servers.get(address)
        if counters is None:
            counters = self._servers[address] = _ServerCounters()
        return counters

    def operation_finished(self, event: OperationFinishedEvent) -> None:
        """Add one finished operation to the counters."""
        servers = event.attempt_servers
        delays = event.retry_delays
        last: Optional[Address] = servers[-1] if servers else None
        with self._lock:
            self._operations += 1
            self._attempts += event.attempts
            if event.succeeded:
                self._succeeded += 1
            if delays:
                self._retries += len(delays)
                self._backoff += sum(delays)
            reason = event.stop_reason
            if reason is not None:
                self._gave_up[reason] = self._gave_up.get(reason, 0) + 1
            for address in servers:
                if address is not None:
                    self._server(address).attempts += 1
            for index, delay in enumerate(delays):
                address = servers[index] if index < len(servers) else None
                if address is not None:
                    counters = self._server(address)
                    counters.retries += 1
                    counters.backoff += delay
            if last is not None:
                counters = self._server(last)
                counters.operations += 1
                if reason is not None:
                    counters.gave_up[reason] = counters.gave_up.get(reason, 0) + 1

    def first_attempt_succeeded(self, server: Optional[Address]) -> None:
        """Add one operation that succeeded on its first attempt (the adapters' fast path).

        One count per server under the lock; :meth:`snapshot` folds them into the counters.
        """
        with self._lock:
            self._first_attempt_successes[server] = self._first_attempt_successes.get(server, 0) + 1

    def tally(self, key: Hashable, server: Optional[Address]) -> Iterator[int]:
        """Return the lock-free counter of first-attempt successes on ``server``, known as ``key``.

        The adapters' cheapest success path: they keep ``key`` (e.g. pymongo's ``Server``
        object, whose address costs a property call to read) and count one success with
        ``next(tallies[key])``, one C call that is atomic under the GIL, so no lock is taken.
        ``key`` must stand for one address for as long as this recorder lives.
        """
        with self._lock:
            found = self._tallies.get(key)
            if found is None:
                found = self._tallies[key] = _Tally(server)
                self.tallies = {**self.tallies, key: found.counter}
            return found.counter

    def _fold_first_attempt_successes(self) -> None:
        """Add the first-attempt successes counted so far to the counters (lock held)."""
        for found in self._tallies.values():
            count = found.take()
            if count:
                self._first_attempt_successes[found.server] = (
                    self._first_attempt_successes.get(found.server, 0) + count
                )
        for server, count in self._first_attempt_successes.items():
            self._operations += count
            self._attempts += count
            self._succeeded += count
            if server is not None:
                counters = self._server(server)
                counters.attempts += count
                counters.operations += count
        self._first_attempt_successes.clear()

    def snapshot(
        self,
        pacing: Optional[Mapping[Address, ServerPacerSnapshot]] = None,
        server_choice: Optional[Mapping[Address, ServerSignal]] = None,
    ) -> BackpressureStats:
        """Return the counters so far as a frozen ``BackpressureStats``.

        ``pacing`` is the pacers' state to report with them (see ``ClientPacers.snapshot``),
        ``server_choice`` the server choice's signals (``ServerChoice.signals``).
        """
        with self._lock:
            self._fold_first_attempt_successes()
            return BackpressureStats(
                operations=self._operations,
                succeeded=self._succeeded,
                failed=self._operations - self._succeeded,
                attempts=self._attempts,
                retries=self._retries,
                gave_up=MappingProxyType(dict(self._gave_up)),
                backoff_seconds=self._backoff,
                servers=MappingProxyType(
                    {address: counters.freeze() for address, counters in self._servers.items()}
                ),
                pacing=MappingProxyType(dict(pacing or {})),
                server_choice=MappingProxyType(dict(server_choice or {})),
            )
