"""The backend-neutral part of the metrics: a listener, its aggregates and the covered clients.

``MetricsListener`` receives the retry and operation events, and the adaptive policy's local
waits and refusals, of the clients it covers and hands them to a ``MetricsBackend``
(Prometheus aggregates them itself, OpenTelemetry forwards them to its instruments).  Gauges
are read when the backend is scraped: the budget of every covered client, and the
amplification (attempts over operations) of the operations that finished in the last
``window`` seconds.  Nothing here imports prometheus-client or OpenTelemetry.
"""

from __future__ import annotations

import collections
import math
import threading
import time
import weakref
from collections.abc import Iterable, Sequence
from typing import Any, Callable, Optional, Protocol, Union

from backpressure.core.adaptive import LocalRefusalEvent, LocalWaitEvent
from backpressure.core.client_state import ClientState
from backpressure.core.events import (
    Address,
    GiveUpEvent,
    HedgeEvent,
    OperationFinishedEvent,
    RetryEvent,
)
from backpressure.switch import registry
from backpressure.switch.client import state as client_state

__all__ = [
    "ATTEMPT_BUCKETS",
    "BACKOFF_BUCKETS",
    "AmplificationWindow",
    "MetricsBackend",
    "MetricsListener",
    "format_server",
]

ATTEMPT_BUCKETS: tuple[float, ...] = (1, 2, 3, 4, 5, 6, 8, 11, 16, 21, 51, 101)
"""Histogram bounds of attempts per operation (1 = no retry; a policy allows at most 101)."""

BACKOFF_BUCKETS: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
"""Histogram bounds of backoff delays and local waits in seconds (the default ceiling is 10 s)."""


def format_server(server: Optional[Address]) -> str:
    """Format a server address as ``host:port`` ("unknown" when None)."""
    return "unknown" if server is None else f"{server[0]}:{server[1]}"


class AmplificationWindow:
    """Attempts over operations for the operations finished in the last ``window`` seconds.

    Counts are kept in one-second slots on ``clock``, so memory stays bounded whatever the
    rate; the ratio is 0.0 when no operation finished in the window.
    """

    def __init__(
        self, window: float = 60.0, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        """Keep ``window`` seconds (a finite number >= 1) of counts measured on ``clock``."""
        if isinstance(window, bool) or not isinstance(window, (int, float)):
            raise TypeError(f"window must be a number of seconds, got {window!r}")
        if not math.isfinite(window) or window < 1:
            raise ValueError(f"window must be a finite number of seconds >= 1, got {window!r}")
        self._window = float(window)
        self._clock = clock
        self._lock = threading.Lock()
        self._slots: collections.deque[list[int]] = collections.deque()

    @property
    def window(self) -> float:
        """Length of the window in seconds."""
        return self._window

    def _expire(self, now: float) -> None:
        """Drop the slots older than the window (lock held)."""
        oldest = math.floor(now - self._window) + 1
        while self._slots and self._slots[0][0] < oldest:
            self._slots.popleft()

    def add(self, attempts: int) -> None:
        """Account for one finished operation that sent ``attempts`` attempts."""
        now = self._clock()
        second = math.floor(now)
        with self._lock:
            if self._slots and self._slots[-1][0] == second:
                slot = self._slots[-1]
                slot[1] += attempts
                slot[2] += 1
            else:
                self._slots.append([second, attempts, 1])
                self._expire(now)

    def ratio(self) -> float:
        """Return attempts over operations in the window (0.0 when there were none)."""
        with self._lock:
            self._expire(self._clock())
            attempts = sum(slot[1] for slot in self._slots)
            operations = sum(slot[2] for slot in self._slots)
        return attempts / operations if operations else 0.0


class MetricsBackend(Protocol):
    """Where ``MetricsListener`` sends what happened."""

    def retry(
        self, operation: str, server: str, retry_number: int, error_code: str, delay: float
    ) -> None:
        """Count one retry and record its backoff."""

    def give_up(self, reason: str) -> None:
        """Count one give-up."""

    def operation(self, attempts: int) -> None:
        """Record the attempts of one finished operation."""

    def local_wait(self, server: str, wait: float) -> None:
        """Count one local wait of the adaptive policy and record its seconds."""

    def local_refusal(self, reason: str) -> None:
        """Count one attempt the adaptive policy refused locally."""

    def hedge(self, server: str) -> None:
        """Count one hedged read sent to ``server``."""


def _reason_label(event: Union[GiveUpEvent, LocalRefusalEvent]) -> str:
    """The stop reason as a label value (``attempts_exhausted``, ``local_wait_limit``, ...)."""
    return event.reason.name.lower()


class MetricsListener:
    """Listener feeding one backend from the clients it covers (all enabled ones, or some).

    It implements ``RetryListener``, ``OperationListener``, ``AdmissionListener`` (the
    adaptive policy's local waits and refusals) and ``HedgeListener`` (hedged reads).

    With ``clients`` None it covers every client enabled now and later (it is registered with
    ``backpressure.register``); otherwise only the clients given (each must be enabled).
    """

    def __init__(
        self,
        backend: MetricsBackend,
        clients: Optional[Iterable[Any]] = None,
        *,
        window: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Attach to the covered clients.

        Raises:
            ValueError: one of ``clients`` is not enabled.
        """
        self._backend = backend
        self._amplification = AmplificationWindow(window, clock=clock)
        self._closed = False
        self._all = clients is None
        self._states: list[weakref.ref[ClientState]] = []
        if clients is None:
            registry.register(self)
            for _client, found in registry.enabled_states():
                found.add_listener(self)
        else:
            states = []
            for client in clients:
                enabled = client_state(client)
                if enabled is None:
                    raise ValueError(
                        "metrics can only cover clients with backpressure enabled; "
                        f"{client!r} is not"
                    )
                states.append(enabled)
            for enabled in states:
                enabled.add_listener(self)
                self._states.append(weakref.ref(enabled))

    def covered_states(self) -> Sequence[ClientState]:
        """Return the live client states this listener is attached to."""
        if self._closed:
            return []
        if self._all:
            return [
                found
                for _client, found in registry.enabled_states()
                if any(listener is self for listener in found.listeners)
            ]
        return [found for ref in self._states if (found := ref()) is not None]

    def budget_tokens(self) -> list[tuple[str, float]]:
        """Return ``(client label, tokens)`` for every covered client with a budget.

        Clients with the same label get ``#2``, ``#3`` ... appended, in enabling order.
        """
        seen: dict[str, int] = {}
        values = []
        for found in self.covered_states():
            if not found.policy.budget_enabled:
                continue
            label = found.label or "client"
            count = seen[label] = seen.get(label, 0) + 1
            values.append(
                (label if count == 1 else f"{label}#{count}", found.controller.budget.tokens)
            )
        return values

    def amplification(self) -> float:
        """Return attempts over operations in the sliding window (0.0 when idle)."""
        return self._amplification.ratio()

    def retried(self, event: RetryEvent) -> None:
        """Count a retry and its backoff."""
        if self._closed:
            return
        code = "none" if event.error_code is None else str(event.error_code)
        self._backend.retry(
            event.operation, format_server(event.server), event.attempt, code, event.delay
        )

    def gave_up(self, event: GiveUpEvent) -> None:
        """Count a give-up by reason."""
        if not self._closed:
            self._backend.give_up(_reason_label(event))

    def operation_finished(self, event: OperationFinishedEvent) -> None:
        """Record the attempts of a finished operation."""
        if self._closed:
            return
        attempts = event.attempts
        self._backend.operation(attempts)
        self._amplification.add(attempts)

    def waited(self, event: LocalWaitEvent) -> None:
        """Count a local wait of the adaptive policy and its seconds."""
        if not self._closed:
            self._backend.local_wait(format_server(event.server), event.wait)

    def refused(self, event: LocalRefusalEvent) -> None:
        """Count a local refusal of the adaptive policy by reason."""
        if not self._closed:
            self._backend.local_refusal(_reason_label(event))

    def hedged(self, event: HedgeEvent) -> None:
        """Count a hedged read by the server it was sent to."""
        if not self._closed:
            self._backend.hedge(format_server(event.server))

    def close(self) -> None:
        """Stop recording and detach from every client (their metrics stop changing)."""
        if self._closed:
            return
        states = self.covered_states()
        self._closed = True
        if self._all:
            registry.unregister(self)
        for found in states:
            found.remove_listener(self)
