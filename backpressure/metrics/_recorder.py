"""The metrics listener: the covered clients' events, handed to one backend as instrument records.

``MetricsListener`` receives the retry and operation events, and the adaptive policy's local
waits and refusals and the hedged reads, of the clients it covers, and hands each to a
``MetricsBackend`` as a value of one metric of ``_catalogue`` with its attributes
(``_attributes``); Prometheus aggregates them itself, OpenTelemetry forwards them to its
instruments.  It also answers what the gauges read when the backend is scraped: the budget of
every covered client, the amplification of the last ``window`` seconds (``_window``) and the
per-server snapshots (``_servers``).  Nothing here imports prometheus-client or OpenTelemetry.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Callable, Optional, Protocol

from backpressure.core.adaptive import LocalRefusalEvent, LocalWaitEvent, ServerPacerSnapshot
from backpressure.core.client_state import ClientState
from backpressure.core.events import GiveUpEvent, HedgeEvent, OperationFinishedEvent, RetryEvent
from backpressure.metrics._attributes import (
    AttributeValue,
    duration_attributes,
    operation_attributes,
    outcome_attributes,
    reason_attributes,
    retry_attributes,
    server_attributes,
)
from backpressure.metrics._catalogue import (
    GIVEUPS,
    HEDGES,
    LOCAL_REFUSALS,
    LOCAL_WAIT_DURATION,
    LOCAL_WAITS,
    OPERATION_DURATION,
    OPERATION_RETRIES,
    OPERATION_RETRY_DELAY,
    OPERATIONS,
    RETRIES,
    MetricSpec,
)
from backpressure.metrics._servers import ServerSnapshot, pacer_snapshots, server_snapshots
from backpressure.metrics._window import AmplificationWindow
from backpressure.switch import registry
from backpressure.switch.client import state as client_state

__all__ = ["MetricsBackend", "MetricsListener"]


class MetricsBackend(Protocol):
    """Where ``MetricsListener`` sends what happened."""

    def record(
        self, metric: MetricSpec, value: float, attributes: Mapping[str, AttributeValue]
    ) -> None:
        """Add ``value`` to a counter, or observe it in a histogram, under ``attributes``."""


class MetricsListener:
    """Listener feeding one backend from the clients it covers (all enabled ones, or some).

    It implements ``RetryListener``, ``OperationListener``, ``PacingListener`` (the
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

    def _labelled_states(self) -> list[tuple[str, ClientState]]:
        """Return ``(client label, state)`` for every covered client.

        Clients with the same label get ``#2``, ``#3`` ... appended, in enabling order.
        """
        seen: dict[str, int] = {}
        labelled = []
        for found in self.covered_states():
            label = found.label or "client"
            count = seen[label] = seen.get(label, 0) + 1
            labelled.append((label if count == 1 else f"{label}#{count}", found))
        return labelled

    def budget_tokens(self) -> list[tuple[str, float]]:
        """Return ``(client label, tokens)`` for every covered client with a budget.

        Clients with the same label get ``#2``, ``#3`` ... appended, in enabling order.
        """
        return [
            (label, found.controller.budget.tokens)
            for label, found in self._labelled_states()
            if found.policy.budget_enabled
        ]

    def pacing(self) -> list[tuple[dict[str, AttributeValue], ServerPacerSnapshot]]:
        """Return the attributes and pacing state of every server of every adaptive client.

        Read from the pacers' snapshots (nothing is counted on the attempt path); the
        attributes are the client label (as :meth:`budget_tokens` names it) and the server.
        """
        return pacer_snapshots(self._labelled_states())

    def servers(self) -> list[tuple[dict[str, AttributeValue], ServerSnapshot]]:
        """Return the attributes and snapshot of every server a pacer or a server choice
        knows, for every covered client (:meth:`pacing`, then the server choice's signals)."""
        return server_snapshots(self._labelled_states())

    def amplification(self) -> float:
        """Return attempts over operations in the sliding window (0.0 when idle)."""
        return self._amplification.ratio()

    def retried(self, event: RetryEvent) -> None:
        """Count a retry by operation, server, error code and retry number."""
        if not self._closed:
            self._backend.record(RETRIES, 1, retry_attributes(event))

    def gave_up(self, event: GiveUpEvent) -> None:
        """Count a give-up by reason."""
        if not self._closed:
            self._backend.record(GIVEUPS, 1, reason_attributes(event))

    def operation_finished(self, event: OperationFinishedEvent) -> None:
        """Count a finished operation and record its duration (when it was timed); for a
        retried one, record its retries and backoff."""
        if self._closed:
            return
        backend = self._backend
        backend.record(OPERATIONS, 1, outcome_attributes(event.succeeded))
        duration = event.duration
        if duration is not None:
            backend.record(OPERATION_DURATION, duration, duration_attributes(event))
        retries = event.retries
        if retries:
            attributes = operation_attributes(event)
            backend.record(OPERATION_RETRIES, retries, attributes)
            backend.record(OPERATION_RETRY_DELAY, event.total_backoff, attributes)
        self._amplification.add(event.attempts)

    def waited(self, event: LocalWaitEvent) -> None:
        """Count a local wait of the adaptive policy and record its seconds."""
        if not self._closed:
            self._backend.record(LOCAL_WAITS, 1, server_attributes(event.server))
            self._backend.record(LOCAL_WAIT_DURATION, event.wait, {})

    def refused(self, event: LocalRefusalEvent) -> None:
        """Count a local refusal of the adaptive policy by reason."""
        if not self._closed:
            self._backend.record(LOCAL_REFUSALS, 1, reason_attributes(event))

    def hedged(self, event: HedgeEvent) -> None:
        """Count a hedged read by the server it was sent to."""
        if not self._closed:
            self._backend.record(HEDGES, 1, server_attributes(event.server))

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
