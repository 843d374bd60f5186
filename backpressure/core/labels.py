"""Error labels and the one place that classifies errors as overload errors.

The server marks load-shed requests with the ``SystemOverloadedError`` label; when the request is
safe to send again it adds ``RetryableError`` too.  Everything else in the package asks this module
instead of looking at labels itself.

Labels are read through pymongo's public API only (``PyMongoError.has_error_label`` and
``OperationFailure.details``); the core imports pymongo's public error classes, which are stable
API, and no private pymongo name except ``_add_error_label`` in :func:`add_overload_labels`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

from pymongo.errors import ClientBulkWriteException, PyMongoError

__all__ = [
    "NO_WRITES_PERFORMED",
    "RETRYABLE",
    "RETRYABLE_WRITE",
    "SYSTEM_OVERLOADED",
    "OverloadLabels",
    "add_overload_labels",
    "error_labels",
    "has_no_writes_performed",
    "is_overload",
    "is_retryable_overload",
    "is_timeout",
    "overload_labels",
    "server_base_backoff",
    "valid_milliseconds",
]

SYSTEM_OVERLOADED = "SystemOverloadedError"
"""Label the server puts on errors caused by overload (load shedding)."""

RETRYABLE = "RetryableError"
"""Label meaning the operation may safely be sent again, whatever its kind."""

NO_WRITES_PERFORMED = "NoWritesPerformed"
"""Label meaning the failed attempt wrote nothing (the previous error is the one to report)."""

RETRYABLE_WRITE = "RetryableWriteError"
"""Label of the classic retryable-writes mechanism."""

# Largest server hint we accept, in milliseconds (one day); larger values are treated as garbage.
_MAX_SERVER_BACKOFF_MS = 86_400_000.0


KNOWN_LABELS: tuple[str, ...] = (
    SYSTEM_OVERLOADED,
    RETRYABLE,
    RETRYABLE_WRITE,
    NO_WRITES_PERFORMED,
    "TransientTransactionError",
    "UnknownTransactionCommitResult",
    "ResumableChangeStreamError",
)
"""Labels looked up with ``has_error_label`` (pymongo has no public way to list them all)."""


def _has(exc: object, label: str) -> bool:
    """``exc.has_error_label(label)`` for a PyMongoError, False for anything else or odd state."""
    if not isinstance(exc, PyMongoError):
        return False
    try:
        return bool(exc.has_error_label(label))
    except Exception:  # a broken error object must not break classification
        return False


def _labels_of(exc: object) -> set[str]:
    """The labels of one PyMongoError, through pymongo's public API only.

    The server's labels come from ``details["errorLabels"]`` (``OperationFailure.details``, the
    server reply), the driver's own from ``has_error_label`` on the known labels.
    """
    if not isinstance(exc, PyMongoError):
        return set()
    labels = {label for label in KNOWN_LABELS if _has(exc, label)}
    try:
        details = getattr(exc, "details", None)
        raw: Any = details.get("errorLabels") if isinstance(details, Mapping) else None
        if isinstance(raw, (list, tuple)):
            labels.update(label for label in raw if isinstance(label, str) and _has(exc, label))
    except Exception:
        pass
    return labels


def error_labels(exc: BaseException) -> frozenset[str]:
    """Return the error labels of ``exc`` (empty for anything that is not a PyMongoError).

    For a ``ClientBulkWriteException`` the labels of its top-level ``error`` are included too.
    """
    labels = _labels_of(exc)
    inner = _bulk_inner_error(exc)
    if inner is not None and inner is not exc:
        labels |= _labels_of(inner)
    return frozenset(labels)


def _bulk_inner_error(exc: BaseException) -> Optional[PyMongoError]:
    """Return the top-level ``error`` of a ClientBulkWriteException if it is a PyMongoError."""
    if not isinstance(exc, ClientBulkWriteException):
        return None
    try:
        inner = exc.error
    except Exception:
        return None
    return inner if isinstance(inner, PyMongoError) else None


def _carries(exc: BaseException, label: str) -> bool:
    """Whether ``exc`` (or a client bulk write's top-level error) carries ``label``."""
    if _has(exc, label):
        return True
    inner = _bulk_inner_error(exc)
    return inner is not None and inner is not exc and _has(inner, label)


def is_overload(exc: BaseException) -> bool:
    """Return True if ``exc`` carries the ``SystemOverloadedError`` label."""
    return _carries(exc, SYSTEM_OVERLOADED)


def is_retryable_overload(exc: BaseException) -> bool:
    """Return True if ``exc`` carries both ``SystemOverloadedError`` and ``RetryableError``."""
    return _carries(exc, SYSTEM_OVERLOADED) and _carries(exc, RETRYABLE)


@dataclass(frozen=True)
class OverloadLabels:
    """The overload labels of one error, read once: the answers of :func:`is_overload` and
    :func:`is_retryable_overload` for it, for a failed attempt's several checks."""

    overload: bool
    """The error carries ``SystemOverloadedError`` (:func:`is_overload`)."""
    retryable: bool
    """It carries ``RetryableError`` too (:func:`is_retryable_overload`)."""


_NO_OVERLOAD = OverloadLabels(overload=False, retryable=False)
_OVERLOAD = OverloadLabels(overload=True, retryable=False)
_RETRYABLE_OVERLOAD = OverloadLabels(overload=True, retryable=True)


def overload_labels(exc: BaseException) -> OverloadLabels:
    """Read the overload labels of ``exc`` once (as :func:`is_overload` and
    :func:`is_retryable_overload` do, a client bulk write's top-level error included)."""
    if not _carries(exc, SYSTEM_OVERLOADED):
        return _NO_OVERLOAD
    return _RETRYABLE_OVERLOAD if _carries(exc, RETRYABLE) else _OVERLOAD


def is_timeout(exc: BaseException) -> bool:
    """Whether ``exc`` is a timeout (pymongo's ``PyMongoError.timeout``: a network timeout,
    ``MaxTimeMSExpired``, a pool checkout that timed out, or a CSOT expiry)."""
    return isinstance(exc, PyMongoError) and exc.timeout is True


def has_no_writes_performed(exc: BaseException) -> bool:
    """Return True if ``exc`` carries the ``NoWritesPerformed`` label."""
    return _carries(exc, NO_WRITES_PERFORMED)


def valid_milliseconds(value: object) -> Optional[float]:
    """Return ``value`` as milliseconds if it is a positive, finite, sane real number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        ms = float(value)
    except (OverflowError, ValueError):
        return None
    if not math.isfinite(ms) or ms <= 0 or ms > _MAX_SERVER_BACKOFF_MS:
        return None
    return ms


def server_base_backoff(exc: BaseException) -> Optional[float]:
    """Return the server's ``baseBackoffMS`` hint in **seconds**, or None when absent or invalid.

    The hint is read from ``exc.details`` (the server reply of an OperationFailure, public API;
    pymongo >= 4.18 reads the same field).  Only positive, finite int/float values (not bool) up
    to one day are accepted; anything else is ignored.  Never raises.
    """
    try:
        candidates: list[object] = []
        sources: list[BaseException] = [exc]
        inner = _bulk_inner_error(exc)
        if inner is not None and inner is not exc:
            sources.append(inner)
        for source in sources:
            details = getattr(source, "details", None)
            if isinstance(details, Mapping):
                candidates.append(details.get("baseBackoffMS"))
        for value in candidates:
            ms = valid_milliseconds(value)
            if ms is not None:
                return ms / 1000.0
    except Exception:
        return None
    return None


def add_overload_labels(exc: BaseException) -> None:
    """Add ``SystemOverloadedError`` and ``RetryableError`` to a PyMongoError (idempotent).

    Other exceptions are left untouched.  pymongo has no public way to add a label: this calls
    ``PyMongoError._add_error_label`` (present since pymongo 3.7), the one private pymongo name
    the core uses.
    """
    if isinstance(exc, PyMongoError):
        for label in (SYSTEM_OVERLOADED, RETRYABLE):
            if not exc.has_error_label(label):
                exc._add_error_label(label)
