"""mongod's error-label rules and the error replies the transport builds itself.

mongod computes labels from the error code and the command's context: ``RetryableWriteError`` for
retryable codes on retryable writes (``txnNumber`` outside a transaction, or commit/abort),
``TransientTransactionError`` for transient errors inside a transaction, and the overload labels
for code 462. A fail point's ``errorLabels`` replaces all of them (an empty list suppresses them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from backpressure.testing.server.errors import code_name_of

__all__ = [
    "RATE_LIMITED_ERRMSG",
    "RETRYABLE_CODES",
    "error_reply",
    "in_transaction",
    "is_retryable_write",
    "mongod_labels",
    "operation_limited_reply",
    "rate_limited_reply",
    "unsatisfiable_write_concern",
]

RETRYABLE_CODES = frozenset(
    {6, 7, 89, 91, 134, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436, 10058}
)
"""mongod's ``RetriableError`` category, as the retryable-writes spec lists it."""

_TRANSIENT_CODES = frozenset({24, 112, 267, 13388, 249, 246, 239, 150})
"""WriteConflict, LockTimeout, PreparedTransactionInProgress, StaleConfig, StaleDbVersion,
SnapshotUnavailable, SnapshotTooOld, StaleEpoch: transient inside a transaction and on commit or
abort alike (mongod's ``isTransientTransactionError``)."""

_OVERLOAD_LABELS: Mapping[int, tuple[str, ...]] = {
    462: ("SystemOverloadedError", "RetryableError"),
    463: ("SystemOverloadedError", "RetryableError", "NoWritesPerformed"),
    473: ("SystemOverloadedError",),
}
"""The overload codes and their labels (the Atlas overload-errors page): 462 the ingress request
limiter, 463 the operation rate limiter (8.3+), 473 the query sentinel (not retryable)."""

_NO_SUCH_TRANSACTION = 251
_COMMIT_OR_ABORT = frozenset({"commitTransaction", "abortTransaction"})

RATE_LIMITED_ERRMSG = "Rate limiter 'ingressRequestRateLimiter' rate exceeded"
"""The ``errmsg`` of a request-limiter rejection."""


def in_transaction(body: Mapping[str, Any]) -> bool:
    """True for a command that runs inside a multi-document transaction."""
    return "txnNumber" in body and body.get("autocommit") is False


def is_retryable_write(name: str, body: Mapping[str, Any]) -> bool:
    """True when mongod would treat the command as a retryable write attempt."""
    if name in _COMMIT_OR_ABORT:
        return True
    return "txnNumber" in body and "autocommit" not in body


def mongod_labels(
    code: int, name: str, body: Mapping[str, Any], *, write_concern_error: bool = False
) -> list[str]:
    """The labels mongod computes for ``code`` raised by command ``name`` with ``body``."""
    labels: list[str] = []
    commit_or_abort = name in _COMMIT_OR_ABORT
    if in_transaction(body) and not commit_or_abort:
        if code in RETRYABLE_CODES or code in _TRANSIENT_CODES or code == _NO_SUCH_TRANSACTION:
            labels.append("TransientTransactionError")
    elif commit_or_abort:
        if (code == _NO_SUCH_TRANSACTION and not write_concern_error) or code in _TRANSIENT_CODES:
            labels.append("TransientTransactionError")
        elif code in RETRYABLE_CODES:
            labels.append("RetryableWriteError")
    elif is_retryable_write(name, body) and code in RETRYABLE_CODES:
        labels.append("RetryableWriteError")
    labels += _OVERLOAD_LABELS.get(code, ())
    return labels


def error_reply(
    code: int,
    errmsg: str,
    *,
    name: str,
    body: Mapping[str, Any],
    labels: Optional[list[str] | tuple[str, ...]] = None,
    code_name: Optional[str] = None,
) -> dict[str, Any]:
    """An ``ok: 0`` reply; ``labels=None`` computes mongod's labels."""
    reply: dict[str, Any] = {
        "ok": 0.0,
        "errmsg": errmsg,
        "code": code,
        "codeName": code_name or code_name_of(code),
    }
    final = mongod_labels(code, name, body) if labels is None else list(labels)
    if final:
        reply["errorLabels"] = final
    return reply


def rate_limited_reply(allow_retries: bool, no_writes_performed: bool = False) -> dict[str, Any]:
    """The request limiter's rejection: ``RetryableError`` only when retries are allowed,
    ``NoWritesPerformed`` from 8.2.6 on (SERVER-113311)."""
    labels = ["SystemOverloadedError"]
    if allow_retries:
        labels.append("RetryableError")
    if no_writes_performed:
        labels.append("NoWritesPerformed")
    return {
        "ok": 0.0,
        "errmsg": RATE_LIMITED_ERRMSG,
        "code": 462,
        "codeName": "IngressRequestRateLimitExceeded",
        "errorLabels": labels,
    }


OPERATION_LIMITED_ERRMSG = "Operation rate limiter rate exceeded"
"""The ``errmsg`` of an operation-limiter rejection (mongod's wording is not known)."""


def operation_limited_reply() -> dict[str, Any]:
    """The operation rate limiter's rejection: code 463 with SystemOverloadedError,
    RetryableError and NoWritesPerformed."""
    return {
        "ok": 0.0,
        "errmsg": OPERATION_LIMITED_ERRMSG,
        "code": 463,
        "codeName": "IngressOperationRateLimitExceeded",
        "errorLabels": list(_OVERLOAD_LABELS[463]),
    }


def unsatisfiable_write_concern(
    body: Mapping[str, Any], data_bearing: int
) -> Optional[dict[str, Any]]:
    """The ``writeConcernError`` mongod reports after a write whose ``w`` it cannot satisfy.

    A number above the data-bearing members gives UnsatisfiableWriteConcern (100); a tag set name
    other than ``majority`` gives UnknownReplWriteConcern (79). The write itself is applied.
    """
    concern = body.get("writeConcern")
    w = concern.get("w") if isinstance(concern, Mapping) else None
    if isinstance(w, (int, float)) and not isinstance(w, bool) and w > data_bearing:
        return {
            "code": 100,
            "codeName": "UnsatisfiableWriteConcern",
            "errmsg": "Not enough data-bearing nodes",
        }
    if isinstance(w, str) and w != "majority":
        return {
            "code": 79,
            "codeName": "UnknownReplWriteConcern",
            "errmsg": f"No write concern mode named '{w}' found in replica set configuration",
        }
    return None
