"""The attribute values each event is recorded under (OpenTelemetry's semantic conventions).

One function per kind of attribute set: the server of an attempt, a finished operation and its
duration, a retry, an outcome, a stop reason.  The names are the ones ``_catalogue`` lists in
each ``MetricSpec``'s attributes; Prometheus turns them into labels.
"""

from __future__ import annotations

from typing import Optional, Union

from backpressure.core.adaptive import LocalRefusalEvent
from backpressure.core.events import Address, GiveUpEvent, OperationFinishedEvent, RetryEvent

__all__ = [
    "DB_SYSTEM",
    "AttributeValue",
    "duration_attributes",
    "operation_attributes",
    "outcome_attributes",
    "reason_attributes",
    "retry_attributes",
    "server_attributes",
]

AttributeValue = Union[str, int]
"""The value of a metric attribute (an OpenTelemetry attribute, a Prometheus label)."""

DB_SYSTEM = "mongodb"
"""The value of ``db.system.name`` (OpenTelemetry's well-known name for MongoDB)."""


def server_attributes(server: Optional[Address]) -> dict[str, AttributeValue]:
    """``server.address`` and ``server.port`` of ``server`` (none when it is unknown)."""
    return {} if server is None else {"server.address": server[0], "server.port": server[1]}


def operation_attributes(event: OperationFinishedEvent) -> dict[str, AttributeValue]:
    """``db.system.name`` and ``db.operation.name`` (the command) of a finished operation."""
    return {"db.system.name": DB_SYSTEM, "db.operation.name": event.operation or "unknown"}


def duration_attributes(event: OperationFinishedEvent) -> dict[str, AttributeValue]:
    """The attributes of ``db.client.operation.duration`` for a finished operation.

    ``db.system.name``, ``db.operation.name`` (the command), the last attempt's
    ``server.address`` and ``server.port`` when known, and for a failure ``error.type`` and
    ``db.response.status_code`` (when the error has a code).
    """
    attributes = operation_attributes(event)
    if event.error_type is not None:
        attributes["error.type"] = event.error_type
    if event.error_code is not None:
        attributes["db.response.status_code"] = str(event.error_code)
    attributes.update(server_attributes(event.server))
    return attributes


def retry_attributes(event: RetryEvent) -> dict[str, AttributeValue]:
    """The attributes of a retry: its operation, server, error code (``none`` without one) and
    retry number."""
    code = "none" if event.error_code is None else str(event.error_code)
    return {
        "db.system.name": DB_SYSTEM,
        "db.operation.name": event.operation,
        **server_attributes(event.server),
        "db.response.status_code": code,
        "backpressure.retry.number": event.attempt,
    }


_SUCCEEDED: dict[str, AttributeValue] = {
    "db.system.name": DB_SYSTEM,
    "backpressure.outcome": "succeeded",
}
_FAILED: dict[str, AttributeValue] = {"db.system.name": DB_SYSTEM, "backpressure.outcome": "failed"}


def outcome_attributes(succeeded: bool) -> dict[str, AttributeValue]:
    """The attributes of a finished operation's outcome (one shared mapping per outcome: do not
    change it)."""
    return _SUCCEEDED if succeeded else _FAILED


def reason_attributes(event: Union[GiveUpEvent, LocalRefusalEvent]) -> dict[str, AttributeValue]:
    """``backpressure.reason``: the stop reason as a label value (``attempts_exhausted``,
    ``local_wait_limit``, ...)."""
    return {"backpressure.reason": event.reason.name.lower()}
