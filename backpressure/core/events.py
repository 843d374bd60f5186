"""Typed retry instrumentation: frozen event objects, the listener protocol, per-error summaries."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Optional, Protocol

from backpressure.core.decision import StopReason
from backpressure.core.policy import InvalidPolicyError, short_repr

__all__ = [
    "LISTENER_METHODS",
    "GiveUpEvent",
    "HedgeEvent",
    "HedgeListener",
    "InvalidListenerError",
    "OperationFinishedEvent",
    "OperationListener",
    "RetryEvent",
    "RetryListener",
    "RetrySummary",
    "attach_summary",
    "check_listener",
    "retry_summary",
]

Address = tuple[str, int]
"""A server address, ``(host, port)``."""

_SUMMARY_ATTR = "_backpressure_retry_summary"


@dataclass(frozen=True)
class RetryEvent:
    """An overload error is about to be retried after ``delay`` seconds."""

    operation: str
    attempt: int  # the attempt that failed, 1-based
    delay: float
    server: Optional[Address]
    error_code: Optional[int]
    error_labels: tuple[str, ...]
    retarget: bool
    budget_tokens: float


@dataclass(frozen=True)
class GiveUpEvent:
    """An operation stopped retrying and its last error is being raised.

    Also sent when the adaptive pacing refused an attempt locally (``reason`` is
    ``LOCAL_WAIT_DEADLINE`` or ``LOCAL_WAIT_LIMIT``); ``attempts`` then counts the attempts sent
    before it, 0 when the first attempt was refused.
    """

    operation: str
    attempts: int
    reason: StopReason
    total_backoff: float
    servers: tuple[Address, ...]
    error_code: Optional[int]


@dataclass(frozen=True)
class OperationFinishedEvent:
    """One operation finished: it succeeded, gave up, or raised an error we do not retry.

    ``attempt_servers`` holds the server of each attempt in order (None where unknown);
    ``retry_delays`` the backoff granted after each failed attempt (one per retry).
    ``stop_reason`` is set when the operation gave up on an overload error (what listeners get
    a ``GiveUpEvent`` for); it is None when it succeeded and when it failed on an error that has
    nothing to do with overload.

    An operation is timed when its client had an operation listener (metrics, or one of yours)
    as it started: ``duration`` is then the seconds from its start to its end on the client's
    monotonic clock, retries, backoffs and local waits included.  An untimed operation (no
    listener: the cheapest success path reads no clock) has ``duration`` None, and ``operation``
    None when it succeeded on its first attempt (its command name is not resolved either).
    ``error_type`` is set when the operation failed: ``SystemOverloadedError`` for a server's
    overload error, otherwise the exception's class name (``LocalOverloadError`` for a local
    refusal); ``error_code`` is the server's error code when the error has one.
    """

    operation: Optional[str]
    attempt_servers: tuple[Optional[Address], ...]
    retry_delays: tuple[float, ...]
    succeeded: bool
    stop_reason: Optional[StopReason]
    duration: Optional[float] = None
    error_type: Optional[str] = None
    error_code: Optional[int] = None

    @property
    def server(self) -> Optional[Address]:
        """The server of the last attempt (None when unknown or when nothing was sent)."""
        return self.attempt_servers[-1] if self.attempt_servers else None

    @property
    def attempts(self) -> int:
        """Attempts sent (at least 1)."""
        return max(len(self.attempt_servers), 1)

    @property
    def retries(self) -> int:
        """Retries granted."""
        return len(self.retry_delays)

    @property
    def total_backoff(self) -> float:
        """Sum of the granted backoff delays, in seconds."""
        return sum(self.retry_delays)


@dataclass(frozen=True)
class HedgeEvent:
    """A hedged copy of a read was sent to ``server`` while the first attempt had no reply.

    ``hedge`` numbers the hedges of the read (1 for the first); ``after`` is the time since the
    read started, in seconds; ``first_server`` is where the first attempt went (None when it was
    not selected yet); ``budget_tokens`` what ``server``'s budget holds after the hedge's token.
    """

    operation: str
    server: Address
    first_server: Optional[Address]
    hedge: int
    after: float
    budget_tokens: float


class HedgeListener(Protocol):
    """Receives one event per hedge sent (a RetryListener may implement it too)."""

    def hedged(self, event: HedgeEvent) -> None:
        """Called when a hedged copy of a read is sent."""


@dataclass(frozen=True)
class RetrySummary:
    """What the retry machinery did for one operation (``stop_reason`` None when it succeeded)."""

    attempts: int
    total_backoff: float
    servers: tuple[Address, ...]
    stop_reason: Optional[StopReason]


class RetryListener(Protocol):
    """Receives retry events; exceptions it raises are logged and ignored."""

    def retried(self, event: RetryEvent) -> None:
        """Called before sleeping for a retry."""

    def gave_up(self, event: GiveUpEvent) -> None:
        """Called when retrying stops and the error is raised."""


class OperationListener(Protocol):
    """Receives one event per finished operation (metrics and statistics use it).

    A listener passed to ``enable`` or ``backpressure.register`` may implement this method as
    well as (or instead of) the ``RetryListener`` ones; exceptions it raises are logged and
    ignored.
    """

    def operation_finished(self, event: OperationFinishedEvent) -> None:
        """Called once when an operation succeeds, gives up or fails."""


def retry_summary(exc: BaseException) -> Optional[RetrySummary]:
    """Return the RetrySummary attached to ``exc``, or None."""
    summary = getattr(exc, _SUMMARY_ATTR, None)
    return summary if isinstance(summary, RetrySummary) else None


def attach_summary(exc: BaseException, summary: RetrySummary) -> None:
    """Store ``summary`` on ``exc``; silently does nothing if the exception forbids attributes."""
    with contextlib.suppress(Exception):
        setattr(exc, _SUMMARY_ATTR, summary)


LISTENER_METHODS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "RetryListener": ("retried", "gave_up"),
        "OperationListener": ("operation_finished",),
        "PacingListener": ("waited", "refused"),
        "HedgeListener": ("hedged",),
    }
)
"""The listener protocols, each with its methods (``PacingListener`` is in
:mod:`backpressure.core.adaptive`).  A listener implements at least one of these methods; each
method it lacks is simply not called."""


class InvalidListenerError(InvalidPolicyError, TypeError):
    """An object given as a listener implements no method of any listener protocol.

    Raised alike by ``backpressure.register``, ``enable(listeners=...)`` and the
    ``backpressure_listeners`` keyword of the client classes.  It is an
    :class:`~backpressure.InvalidPolicyError` (as every invalid option is) and a ``TypeError``
    (as pymongo's ``monitoring.register`` raises for an object that is no listener).
    """


def _accepted() -> str:
    """Name the accepted methods, by protocol, for an error message."""
    return "; ".join(
        f"{protocol}: {', '.join(f'{method}()' for method in methods)}"
        for protocol, methods in LISTENER_METHODS.items()
    )


def check_listener(listener: object, where: str) -> None:
    """Raise unless ``listener`` implements at least one method of a listener protocol.

    Args:
        listener: the object to check.
        where: how the caller names it in the message (``"register()"``,
            ``"backpressure_listeners[0]"``).

    Raises:
        InvalidListenerError: ``listener`` has none of the methods in ``LISTENER_METHODS``;
            the message names ``where``, the object's type and every accepted method.
    """
    for methods in LISTENER_METHODS.values():
        if any(callable(getattr(listener, method, None)) for method in methods):
            return
    raise InvalidListenerError(
        f"{where} must be a listener, an object with at least one of these methods "
        f"({_accepted()}); got {type(listener).__name__} {short_repr(listener)}"
    )
