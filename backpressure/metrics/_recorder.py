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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol, Union

from backpressure.core.adaptive import (
    ClientPacers,
    LocalRefusalEvent,
    LocalWaitEvent,
    ServerPacerSnapshot,
)
from backpressure.core.choice import ServerSignal
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
    "AMPLIFICATION",
    "BACKOFF_BUCKETS",
    "BUDGET_TOKENS",
    "CHOICE_AVOIDED",
    "CHOICE_METRICS",
    "CHOICE_ROUTED_AROUND",
    "CHOICE_SIGNAL",
    "DURATION_BUCKETS",
    "GIVEUPS",
    "HEDGES",
    "LOCAL_REFUSALS",
    "LOCAL_WAITS",
    "LOCAL_WAIT_DURATION",
    "METRICS",
    "OPERATIONS",
    "OPERATION_DURATION",
    "OPERATION_RETRIES",
    "OPERATION_RETRY_DELAY",
    "PACING_BACKLOG",
    "PACING_COMPETING",
    "PACING_GAUGES",
    "PACING_PACED",
    "PACING_PUSHBACKS",
    "PACING_RATE",
    "PACING_WAITING",
    "RETRIES",
    "RETRY_BUCKETS",
    "SERVER_METRICS",
    "AmplificationWindow",
    "AttributeValue",
    "MetricSpec",
    "MetricsBackend",
    "MetricsListener",
    "ServerSnapshot",
    "duration_attributes",
    "pacing_value",
    "server_attributes",
    "server_value",
]

AttributeValue = Union[str, int]
"""The value of a metric attribute (an OpenTelemetry attribute, a Prometheus label)."""

RETRY_BUCKETS: tuple[float, ...] = (1, 2, 3, 4, 5, 7, 10, 15, 20, 50, 100)
"""Histogram bounds of retries per retried operation (gRPC A96 advises 1-5; a policy allows
up to 100)."""

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
    25.0,
)
"""Histogram bounds of backoff delays and local waits in seconds (one retry's ceiling is 10 s
by default; an operation's total may be several)."""

DURATION_BUCKETS: tuple[float, ...] = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0)
"""Histogram bounds of operation durations in seconds: the boundaries OpenTelemetry's database
client metrics advise for ``db.client.operation.duration``."""

DB_SYSTEM = "mongodb"
"""The value of ``db.system.name`` (OpenTelemetry's well-known name for MongoDB)."""

_PROMETHEUS_UNITS = {"s": "seconds"}
"""OpenTelemetry units with a Prometheus suffix (``{annotations}`` get none, ``{annotation}/s``
gets ``per_second``; ``1`` on a gauge is ``ratio``)."""


@dataclass(frozen=True)
class MetricSpec:
    """One metric as both exporters name it: an OpenTelemetry instrument and its attributes.

    The Prometheus names follow OpenTelemetry's mapping to Prometheus: dots become
    underscores, the unit ``s`` adds ``_seconds``, a gauge of unit ``1`` adds ``_ratio``, a
    counter's samples end in ``_total`` (prometheus-client adds it) and a ``{annotation}``
    unit adds nothing.
    """

    name: str
    kind: str
    unit: str
    description: str
    attributes: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()

    @property
    def prometheus_name(self) -> str:
        """The Prometheus family name (a counter's samples add ``_total``)."""
        name = self.name.replace(".", "_")
        suffix = _PROMETHEUS_UNITS.get(self.unit)
        if suffix is None and self.unit.startswith("{") and self.unit.endswith("}/s"):
            suffix = "per_second"
        if suffix is None and self.unit == "1" and self.kind == "gauge":
            suffix = "ratio"
        return name if suffix is None else f"{name}_{suffix}"

    @property
    def prometheus_labels(self) -> tuple[str, ...]:
        """The Prometheus label names (the attributes with underscores for dots)."""
        return tuple(attribute.replace(".", "_") for attribute in self.attributes)


_OPERATION = ("db.system.name", "db.operation.name")
_SERVER = ("server.address", "server.port")

OPERATION_DURATION = MetricSpec(
    "db.client.operation.duration",
    "histogram",
    "s",
    "Duration of database client operations (retries, backoffs and local waits included).",
    (*_OPERATION, "error.type", "db.response.status_code", *_SERVER),
    DURATION_BUCKETS,
)
OPERATIONS = MetricSpec(
    "backpressure.client.operations",
    "counter",
    "{operation}",
    "Operations finished, by outcome (succeeded or failed).",
    ("db.system.name", "backpressure.outcome"),
)
OPERATION_RETRIES = MetricSpec(
    "backpressure.client.operation.retries",
    "histogram",
    "{retry}",
    "Retries of each retried operation (an operation without retries records nothing).",
    _OPERATION,
    RETRY_BUCKETS,
)
OPERATION_RETRY_DELAY = MetricSpec(
    "backpressure.client.operation.retry_delay",
    "histogram",
    "s",
    "Total backoff of each retried operation (the time without an attempt in flight).",
    _OPERATION,
    BACKOFF_BUCKETS,
)
RETRIES = MetricSpec(
    "backpressure.retries",
    "counter",
    "{retry}",
    "Overload retries, by server, error code and retry number.",
    (*_OPERATION, *_SERVER, "db.response.status_code", "backpressure.retry.number"),
)
GIVEUPS = MetricSpec(
    "backpressure.giveups",
    "counter",
    "{giveup}",
    "Operations that stopped retrying an overload error, by reason.",
    ("backpressure.reason",),
)
BUDGET_TOKENS = MetricSpec(
    "backpressure.budget.tokens",
    "gauge",
    "{token}",
    "Tokens in the retry budget.",
    ("backpressure.client",),
)
AMPLIFICATION = MetricSpec(
    "backpressure.amplification",
    "gauge",
    "1",
    "Attempts over operations finished in the sliding window.",
)
LOCAL_WAITS = MetricSpec(
    "backpressure.local.waits",
    "counter",
    "{wait}",
    "Attempts the adaptive policy held locally before sending them.",
    _SERVER,
)
LOCAL_WAIT_DURATION = MetricSpec(
    "backpressure.local.wait.duration",
    "histogram",
    "s",
    "Local wait of each attempt held by the adaptive policy.",
    (),
    BACKOFF_BUCKETS,
)
LOCAL_REFUSALS = MetricSpec(
    "backpressure.local.refusals",
    "counter",
    "{refusal}",
    "Attempts the adaptive policy refused locally (not sent).",
    ("backpressure.reason",),
)
HEDGES = MetricSpec(
    "backpressure.hedges",
    "counter",
    "{hedge}",
    "Hedged reads sent, by the server they went to.",
    _SERVER,
)
_PACED_SERVER = ("backpressure.client", *_SERVER)

PACING_PACED = MetricSpec(
    "backpressure.pacing.paced",
    "gauge",
    "{server}",
    "1 while the adaptive policy paces the attempts to the server, else 0.",
    _PACED_SERVER,
)
PACING_RATE = MetricSpec(
    "backpressure.pacing.rate",
    "gauge",
    "{attempt}/s",
    "The paced send rate to the server (only while it is paced).",
    _PACED_SERVER,
)
PACING_WAITING = MetricSpec(
    "backpressure.pacing.waiting",
    "gauge",
    "{attempt}",
    "Attempts waiting locally for their reserved send slot to the server.",
    _PACED_SERVER,
)
PACING_BACKLOG = MetricSpec(
    "backpressure.pacing.backlog",
    "gauge",
    "s",
    "Seconds of reserved send slots ahead of a new attempt to the server.",
    _PACED_SERVER,
)
PACING_PUSHBACKS = MetricSpec(
    "backpressure.pacing.pushbacks",
    "counter",
    "{pushback}",
    "Overload errors (pushbacks) the server returned, as the pacing counted them.",
    _PACED_SERVER,
)
PACING_COMPETING = MetricSpec(
    "backpressure.pacing.competing",
    "gauge",
    "{server}",
    "1 while the pacing competes (its cuts did not move the pushback), else 0.",
    _PACED_SERVER,
)

PACING_LAST_CHANCES = MetricSpec(
    "backpressure.pacing.last_chance_sends",
    "counter",
    "{attempt}",
    "Critical attempts (first attempts or retries) no send slot could serve, sent once just "
    "before their bound and answered (the client marks work sheddable).",
    _PACED_SERVER,
)

PACING_GAUGES: tuple[MetricSpec, ...] = (
    PACING_PACED,
    PACING_RATE,
    PACING_WAITING,
    PACING_BACKLOG,
    PACING_PUSHBACKS,
    PACING_COMPETING,
    PACING_LAST_CHANCES,
)
"""The per-server pacing metrics, read from the pacers' snapshots at scrape/collection time."""


CHOICE_SIGNAL = MetricSpec(
    "backpressure.server_choice.signal",
    "gauge",
    "1",
    "Share of the server's recent attempts pushed back (overload errors, timeouts), as the "
    "server choice sees it (0..1, halving each second).",
    _PACED_SERVER,
)
CHOICE_AVOIDED = MetricSpec(
    "backpressure.server_choice.avoided",
    "gauge",
    "{server}",
    "1 while selections with a choice of server steer away from the server, else 0.",
    _PACED_SERVER,
)
CHOICE_ROUTED_AROUND = MetricSpec(
    "backpressure.server_choice.routed_around",
    "counter",
    "{selection}",
    "Selections with a choice of server that left the server out.",
    _PACED_SERVER,
)

CHOICE_METRICS: tuple[MetricSpec, ...] = (CHOICE_SIGNAL, CHOICE_AVOIDED, CHOICE_ROUTED_AROUND)
"""The per-server server choice metrics, read from its signals at scrape/collection time."""

SERVER_METRICS: tuple[MetricSpec, ...] = (*PACING_GAUGES, *CHOICE_METRICS)
"""Every per-server metric read from a snapshot (see :func:`server_value`)."""

ServerSnapshot = Union[ServerPacerSnapshot, ServerSignal]
"""What a per-server metric is read from: a pacer's snapshot or a server choice signal."""


def server_value(metric: MetricSpec, snapshot: ServerSnapshot) -> Optional[float]:
    """The value ``metric`` (one of ``SERVER_METRICS``) reports for ``snapshot`` (None: none,
    or a snapshot of the other kind)."""
    if isinstance(snapshot, ServerSignal):
        if metric is CHOICE_SIGNAL:
            return snapshot.signal
        if metric is CHOICE_AVOIDED:
            return 1.0 if snapshot.avoided else 0.0
        if metric is CHOICE_ROUTED_AROUND:
            return float(snapshot.routed_around)
        return None
    if metric in CHOICE_METRICS:
        return None
    return pacing_value(metric, snapshot)


def pacing_value(metric: MetricSpec, snapshot: ServerPacerSnapshot) -> Optional[float]:
    """The value ``metric`` (one of ``PACING_GAUGES``) reports for ``snapshot`` (None: none)."""
    if metric is PACING_PACED:
        return 1.0 if snapshot.paced else 0.0
    if metric is PACING_RATE:
        return snapshot.rate
    if metric is PACING_WAITING:
        return float(snapshot.waiting)
    if metric is PACING_BACKLOG:
        return snapshot.backlog
    if metric is PACING_PUSHBACKS:
        return float(snapshot.pushbacks)
    if metric is PACING_COMPETING:
        return 1.0 if snapshot.competing else 0.0
    if metric is PACING_LAST_CHANCES:
        return float(snapshot.last_chance_sends)
    raise ValueError(f"{metric.name} is not a pacing metric")


METRICS: tuple[MetricSpec, ...] = (
    OPERATION_DURATION,
    OPERATIONS,
    OPERATION_RETRIES,
    OPERATION_RETRY_DELAY,
    RETRIES,
    GIVEUPS,
    BUDGET_TOKENS,
    AMPLIFICATION,
    LOCAL_WAITS,
    LOCAL_WAIT_DURATION,
    LOCAL_REFUSALS,
    HEDGES,
    *PACING_GAUGES,
    *CHOICE_METRICS,
)
"""Every metric both exporters serve, in the order they list them."""


def server_attributes(server: Optional[Address]) -> dict[str, AttributeValue]:
    """``server.address`` and ``server.port`` of ``server`` (none when it is unknown)."""
    return {} if server is None else {"server.address": server[0], "server.port": server[1]}


def duration_attributes(event: OperationFinishedEvent) -> dict[str, AttributeValue]:
    """The attributes of ``db.client.operation.duration`` for a finished operation.

    ``db.system.name``, ``db.operation.name`` (the command), the last attempt's
    ``server.address`` and ``server.port`` when known, and for a failure ``error.type`` and
    ``db.response.status_code`` (when the error has a code).
    """
    attributes: dict[str, AttributeValue] = {
        "db.system.name": DB_SYSTEM,
        "db.operation.name": event.operation or "unknown",
    }
    if event.error_type is not None:
        attributes["error.type"] = event.error_type
    if event.error_code is not None:
        attributes["db.response.status_code"] = str(event.error_code)
    attributes.update(server_attributes(event.server))
    return attributes


_SUCCEEDED: dict[str, AttributeValue] = {
    "db.system.name": DB_SYSTEM,
    "backpressure.outcome": "succeeded",
}
_FAILED: dict[str, AttributeValue] = {"db.system.name": DB_SYSTEM, "backpressure.outcome": "failed"}


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

    def record(
        self, metric: MetricSpec, value: float, attributes: Mapping[str, AttributeValue]
    ) -> None:
        """Add ``value`` to a counter, or observe it in a histogram, under ``attributes``."""


def _reason_label(event: Union[GiveUpEvent, LocalRefusalEvent]) -> str:
    """The stop reason as a label value (``attempts_exhausted``, ``local_wait_limit``, ...)."""
    return event.reason.name.lower()


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
        found_pacing = []
        for label, found in self._labelled_states():
            pacers = found.controller.pacing
            if not isinstance(pacers, ClientPacers):
                continue
            for server, snapshot in sorted(pacers.snapshot().items()):
                attributes: dict[str, AttributeValue] = {
                    "backpressure.client": label,
                    **server_attributes(server),
                }
                found_pacing.append((attributes, snapshot))
        return found_pacing

    def servers(self) -> list[tuple[dict[str, AttributeValue], ServerSnapshot]]:
        """Return the attributes and snapshot of every server a pacer or a server choice
        knows, for every covered client (:meth:`pacing`, then the server choice's signals)."""
        found: list[tuple[dict[str, AttributeValue], ServerSnapshot]] = list(self.pacing())
        for label, state in self._labelled_states():
            if state.choice is None:
                continue
            for server, signal in sorted(state.choice.signals().items()):
                attributes: dict[str, AttributeValue] = {
                    "backpressure.client": label,
                    **server_attributes(server),
                }
                found.append((attributes, signal))
        return found

    def amplification(self) -> float:
        """Return attempts over operations in the sliding window (0.0 when idle)."""
        return self._amplification.ratio()

    def retried(self, event: RetryEvent) -> None:
        """Count a retry by operation, server, error code and retry number."""
        if self._closed:
            return
        code = "none" if event.error_code is None else str(event.error_code)
        attributes: dict[str, AttributeValue] = {
            "db.system.name": DB_SYSTEM,
            "db.operation.name": event.operation,
            **server_attributes(event.server),
            "db.response.status_code": code,
            "backpressure.retry.number": event.attempt,
        }
        self._backend.record(RETRIES, 1, attributes)

    def gave_up(self, event: GiveUpEvent) -> None:
        """Count a give-up by reason."""
        if not self._closed:
            self._backend.record(GIVEUPS, 1, {"backpressure.reason": _reason_label(event)})

    def operation_finished(self, event: OperationFinishedEvent) -> None:
        """Count a finished operation and record its duration (when it was timed); for a
        retried one, record its retries and backoff."""
        if self._closed:
            return
        backend = self._backend
        backend.record(OPERATIONS, 1, _SUCCEEDED if event.succeeded else _FAILED)
        duration = event.duration
        if duration is not None:
            backend.record(OPERATION_DURATION, duration, duration_attributes(event))
        retries = event.retries
        if retries:
            attributes: dict[str, AttributeValue] = {
                "db.system.name": DB_SYSTEM,
                "db.operation.name": event.operation or "unknown",
            }
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
            reason = _reason_label(event)
            self._backend.record(LOCAL_REFUSALS, 1, {"backpressure.reason": reason})

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
