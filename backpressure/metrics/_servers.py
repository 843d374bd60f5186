"""The per-server metrics: the pacers' snapshots and the server choice's signals, and their values.

Nothing is counted on the attempt path for these: at scrape or collection time the exporters
read, for every server of every covered client, a pacer's ``ServerPacerSnapshot`` or a server
choice's ``ServerSignal`` (:func:`server_snapshots`), and each metric of ``SERVER_METRICS`` takes
its value from it (:func:`server_value`, :func:`server_readings`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Optional, Union

from backpressure.core.adaptive import ClientPacers, ServerPacerSnapshot
from backpressure.core.choice import ServerSignal
from backpressure.core.client_state import ClientState
from backpressure.core.events import Address
from backpressure.metrics._attributes import AttributeValue, server_attributes
from backpressure.metrics._catalogue import (
    CHOICE_AVOIDED,
    CHOICE_METRICS,
    CHOICE_ROUTED_AROUND,
    CHOICE_SIGNAL,
    PACING_BACKLOG,
    PACING_COMPETING,
    PACING_LAST_CHANCES,
    PACING_PACED,
    PACING_PUSHBACKS,
    PACING_RATE,
    PACING_WAITING,
    MetricSpec,
)

__all__ = [
    "ServerSnapshot",
    "pacer_snapshots",
    "pacing_value",
    "server_readings",
    "server_snapshots",
    "server_value",
]

ServerSnapshot = Union[ServerPacerSnapshot, ServerSignal]
"""What a per-server metric is read from: a pacer's snapshot or a server choice signal."""

LabelledStates = Sequence[tuple[str, ClientState]]
"""``(client label, state)`` of every covered client (the label of ``backpressure.client``)."""


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


def _client_server(label: str, server: Address) -> dict[str, AttributeValue]:
    """``backpressure.client``, ``server.address`` and ``server.port``."""
    return {"backpressure.client": label, **server_attributes(server)}


def pacer_snapshots(
    labelled: LabelledStates,
) -> list[tuple[dict[str, AttributeValue], ServerPacerSnapshot]]:
    """The attributes and pacing state of every server of every adaptive client of
    ``labelled``, servers in order."""
    found = []
    for label, state in labelled:
        pacers = state.controller.pacing
        if not isinstance(pacers, ClientPacers):
            continue
        for server, snapshot in sorted(pacers.snapshot().items()):
            found.append((_client_server(label, server), snapshot))
    return found


def server_snapshots(
    labelled: LabelledStates,
) -> list[tuple[dict[str, AttributeValue], ServerSnapshot]]:
    """The attributes and snapshot of every server a pacer or a server choice of ``labelled``
    knows (:func:`pacer_snapshots`, then the server choice's signals)."""
    found: list[tuple[dict[str, AttributeValue], ServerSnapshot]] = list(pacer_snapshots(labelled))
    for label, state in labelled:
        if state.choice is None:
            continue
        for server, signal in sorted(state.choice.signals().items()):
            found.append((_client_server(label, server), signal))
    return found


def server_readings(
    metric: MetricSpec, servers: Iterable[tuple[dict[str, AttributeValue], ServerSnapshot]]
) -> Iterator[tuple[dict[str, AttributeValue], float]]:
    """The attributes and value of ``metric`` (one of ``SERVER_METRICS``) for each of
    ``servers`` that has one (see :func:`server_value`)."""
    for attributes, snapshot in servers:
        value = server_value(metric, snapshot)
        if value is not None:
            yield attributes, value
