"""Typed retry instrumentation: frozen event objects, the listener protocol, per-error summaries."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Optional, Protocol

from backpressure.core.decision import StopReason

__all__ = [
    "GiveUpEvent",
    "RetryEvent",
    "RetryListener",
    "RetrySummary",
    "attach_summary",
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
    """An operation stopped retrying and its last error is being raised."""

    operation: str
    attempts: int
    reason: StopReason
    total_backoff: float
    servers: tuple[Address, ...]
    error_code: Optional[int]


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


def retry_summary(exc: BaseException) -> Optional[RetrySummary]:
    """Return the RetrySummary attached to ``exc``, or None."""
    summary = getattr(exc, _SUMMARY_ATTR, None)
    return summary if isinstance(summary, RetrySummary) else None


def attach_summary(exc: BaseException, summary: RetrySummary) -> None:
    """Store ``summary`` on ``exc``; silently does nothing if the exception forbids attributes."""
    with contextlib.suppress(Exception):
        setattr(exc, _SUMMARY_ATTR, summary)
