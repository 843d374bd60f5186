"""Predicates for an application's own retry loop (tenacity, stamina, hand-written) around ours.

An outer loop that retries what this package already retried multiplies the attempts (3 outer
tries x 3 attempts of the default preset = 9 commands per operation under overload; x 6 = 18
with ``draft``).  ``retry_outside(exc)`` answers
the outer loop's question "retry this?": yes for transient errors (network errors, server
selection timeouts, errors labelled ``RetryableWriteError``/``TransientTransactionError``) that
this package did not already handle; no for overload errors and for operations on which the
package already spent retries.

tenacity::

    @tenacity.retry(retry=tenacity.retry_if_exception(backpressure.retry_outside),
                    stop=tenacity.stop_after_attempt(3), wait=tenacity.wait_random_exponential())

stamina::

    @stamina.retry(on=backpressure.retry_outside, attempts=3)
"""

from __future__ import annotations

from pymongo.errors import ConnectionFailure, PyMongoError

from backpressure.core.decision import StopReason
from backpressure.core.events import retry_summary
from backpressure.core.labels import error_labels, is_overload

__all__ = ["handled_by_backpressure", "is_transient", "retry_outside"]

_TRANSIENT_LABELS = frozenset({"RetryableWriteError", "TransientTransactionError"})
_GAVE_UP = frozenset({StopReason.ATTEMPTS_EXHAUSTED, StopReason.BUDGET_EMPTY, StopReason.DEADLINE})


def handled_by_backpressure(exc: BaseException) -> bool:
    """Return True when an outer loop must not retry ``exc``: this package already handled it.

    That is an overload error (labelled ``SystemOverloadedError``: retried here until the policy,
    the budget or the deadline said stop, or refused because retries are off), or any error
    raised when this package stopped retrying for its policy, budget or deadline.
    """
    if is_overload(exc):
        return True
    summary = retry_summary(exc)
    return summary is not None and summary.stop_reason in _GAVE_UP


def is_transient(exc: BaseException) -> bool:
    """Return True for a pymongo error worth retrying later: network, selection, labelled."""
    if not isinstance(exc, PyMongoError):
        return False
    return isinstance(exc, ConnectionFailure) or bool(error_labels(exc) & _TRANSIENT_LABELS)


def retry_outside(exc: BaseException) -> bool:
    """Return True when an outer retry loop should retry ``exc`` (transient, not handled here)."""
    return is_transient(exc) and not handled_by_backpressure(exc)
