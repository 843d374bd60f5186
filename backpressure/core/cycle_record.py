"""Per-operation retry state shared by every pymongo adapter (sync, async and native).

Theory of operation: an adapter creates one ``CycleRecord`` per operation and calls
``attempt_started(server)`` before each attempt, then ``succeeded()``, ``classic_retry(error)``
(pymongo's own rules retry an error that is no overload) or ``failed(error, ...)``.  Every call
is written to the operation's :class:`~backpressure.core.ledger.AttemptLedger`, which decides
the rules that depend on the whole history (the retry number, the cap when errors mix, the
transaction rules).  ``failed`` asks the controller, does the budget accounting, logs, notifies
listeners and returns ``Retry`` (the adapter sleeps ``delay`` and tries again) or ``GiveUp`` (the
adapter raises the error, which now carries a :class:`~backpressure.core.events.RetrySummary`).
Nothing here sleeps or does I/O.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Callable, Optional

from backpressure.core.adaptive import LocalOverloadError
from backpressure.core.decision import Decision, GiveUp, Retry, RetryController, StopReason
from backpressure.core.events import (
    Address,
    GiveUpEvent,
    OperationFinishedEvent,
    RetryEvent,
    RetryListener,
    RetrySummary,
    attach_summary,
)
from backpressure.core.labels import (
    SYSTEM_OVERLOADED,
    OverloadLabels,
    error_labels,
    is_overload,
    overload_labels,
)
from backpressure.core.ledger import AttemptLedger, AttemptOutcome
from backpressure.core.log_limit import LogRateLimit
from backpressure.core.overrides import Criticality

__all__ = ["CycleRecord", "error_type"]

_LOGGER = logging.getLogger("backpressure")


def _error_code(error: BaseException) -> Optional[int]:
    """Return the integer server error code of ``error``, if any."""
    try:
        code = getattr(error, "code", None)
    except Exception:
        return None
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def error_type(error: BaseException) -> str:
    """The class of error an operation ended with, as metrics name it (``error.type``).

    ``SystemOverloadedError`` for a server's overload error (whatever pymongo class carries
    the label), otherwise the exception's class name (``LocalOverloadError`` for a local
    refusal, though it carries the label too).
    """
    return _error_type(error, None)


def _error_type(error: BaseException, overload: Optional[bool]) -> str:
    """:func:`error_type`, with ``overload`` the error's label when it was read (None: not)."""
    if isinstance(error, LocalOverloadError):
        return type(error).__name__  # it carries the label, but is a local refusal
    if overload is None:
        overload = is_overload(error)
    return SYSTEM_OVERLOADED if overload else type(error).__name__


def _describe(error: BaseException) -> str:
    """Describe an error for a log line: class, code and labels."""
    parts = [type(error).__name__]
    code = _error_code(error)
    if code is not None:
        parts.append(f"code {code}")
    labels = sorted(error_labels(error))
    if labels:
        parts.append("labels " + "+".join(labels))
    return ", ".join(parts)


def _format_server(server: Optional[Address]) -> str:
    """Format an address as ``host:port``."""
    return "unknown server" if server is None else f"{server[0]}:{server[1]}"


class CycleRecord:
    """Retry bookkeeping for one operation: attempts, servers, backoff, events, logs."""

    def __init__(
        self,
        controller: RetryController,
        operation: str,
        *,
        listeners: Sequence[RetryListener] = (),
        logger: logging.Logger = _LOGGER,
        budget_warning_limit: Optional[LogRateLimit] = None,
        on_finished: Optional[Callable[[OperationFinishedEvent], None]] = None,
        criticality: Criticality = Criticality.CRITICAL,
        opens_transaction: bool = False,
        started: Optional[float] = None,
    ) -> None:
        """Start tracking ``operation`` (a command name) under ``controller``.

        ``budget_warning_limit`` is the client's rate limit of budget-empty WARNINGs (shared by its
        operations); by default the operation gets its own (so its give-up is a WARNING).
        ``on_finished`` receives one ``OperationFinishedEvent`` when the operation succeeds or
        gives up (the client's statistics and metrics).  ``criticality`` is the operation's hint
        from ``backpressure.overrides`` (for a policy that sheds sheddable work first).
        ``opens_transaction``: the operation is the first statement of a transaction.
        ``started``: when the operation started on the controller's clock, for a timed
        operation (its finished event then has a ``duration``); None: untimed.
        """
        self._controller = controller
        self._started = started
        self._budget_warning_limit = (
            LogRateLimit(clock=controller.clock)
            if budget_warning_limit is None
            else budget_warning_limit
        )
        self._operation = operation
        self._listeners = tuple(listeners)
        self._logger = logger
        self._ledger = AttemptLedger(opens_transaction=opens_transaction)
        self._retries = 0
        self._tokens_taken = 0
        self._total_backoff = 0.0
        self._current_server: Optional[Address] = None
        self._stop_reason: Optional[StopReason] = None
        self._on_finished = on_finished
        self._criticality = criticality
        self._delays: list[float] = []

    @property
    def controller(self) -> RetryController:
        """The client's controller."""
        return self._controller

    @property
    def criticality(self) -> Criticality:
        """The operation's criticality hint (critical unless overridden)."""
        return self._criticality

    @property
    def operation(self) -> str:
        """The operation (command) name."""
        return self._operation

    @property
    def ledger(self) -> AttemptLedger:
        """Every attempt of the operation (the history the retry rules are decided on)."""
        return self._ledger

    @property
    def attempts(self) -> int:
        """Attempts started so far."""
        return self._ledger.attempts

    @property
    def retries(self) -> int:
        """Retries granted by the overload policy so far (classic retries not included)."""
        return self._retries

    @property
    def total_backoff(self) -> float:
        """Sum of the granted retry delays, in seconds."""
        return self._total_backoff

    @property
    def servers(self) -> tuple[Address, ...]:
        """Servers tried, in order, without duplicates."""
        return self._ledger.servers()

    @property
    def stop_reason(self) -> Optional[StopReason]:
        """Why retrying stopped, or None while it has not."""
        return self._stop_reason

    def summary(self) -> RetrySummary:
        """Return the summary of what happened so far."""
        return RetrySummary(
            attempts=self._ledger.attempts,
            total_backoff=self._total_backoff,
            servers=self.servers,
            stop_reason=self._stop_reason,
        )

    def attempt_started(self, server: Optional[Address]) -> None:
        """Record the start of an attempt on ``server`` (None when unknown)."""
        self._current_server = server
        self._ledger.started(server)

    def succeeded(self) -> None:
        """Record success and deposit tokens (more when it succeeded on a retry)."""
        self._ledger.finished(AttemptOutcome.SUCCESS)
        self._stop_reason = None
        self._controller.record_success(retried=self._tokens_taken > 0, server=self._current_server)
        self._finish(succeeded=True, reason=None)

    def stopped(self, reason: StopReason) -> None:
        """Record that the operation gives up without a decision of ``failed`` (a local refusal).

        Listeners get a ``GiveUpEvent`` with ``reason`` (so the give-ups metric counts local
        refusals of first attempts and of retries alike); ``attempts`` is what was sent, 0 when
        the first attempt was refused.  Not logged here: the pacing gate logs refusals.
        """
        self._stop_reason = reason
        event = GiveUpEvent(
            operation=self._operation,
            attempts=self._ledger.attempts,
            reason=reason,
            total_backoff=self._total_backoff,
            servers=self.servers,
            error_code=None,
        )
        for listener in self._listeners:
            try:
                listener.gave_up(event)
            except Exception:
                self._logger.exception("backpressure retry listener %r failed", listener)

    def ended(self, error: Optional[BaseException] = None) -> None:
        """Report the operation as finished with ``error``, if no outcome was reported yet.

        For adapters whose operation raises without a decision of the core (e.g. no server
        could be selected for a granted retry).
        """
        self._finish(succeeded=False, reason=self._stop_reason, error=error)

    def _finish(
        self,
        *,
        succeeded: bool,
        reason: Optional[StopReason],
        error: Optional[BaseException] = None,
        overload: Optional[bool] = None,
    ) -> None:
        """Send the ``OperationFinishedEvent`` (once) to ``on_finished`` (``overload``: the
        error's overload label, when it was read)."""
        callback, self._on_finished = self._on_finished, None
        if callback is None:
            return
        started = self._started
        event = OperationFinishedEvent(
            operation=self._operation,
            attempt_servers=tuple(record.server for record in self._ledger.records),
            retry_delays=tuple(self._delays),
            succeeded=succeeded,
            stop_reason=reason,
            duration=None if started is None else self._controller.clock() - started,
            error_type=None if error is None else _error_type(error, overload),
            error_code=None if error is None else _error_code(error),
        )
        try:
            callback(event)
        except Exception:
            self._logger.exception("backpressure operation listener failed")

    def command_processed(self) -> None:
        """Record that the server processed one of the operation's commands (see the ledger)."""
        self._ledger.command_processed()

    def classic_retry(self, error: Optional[BaseException] = None) -> None:
        """Record an attempt that failed with an error pymongo's own rules retry (no overload).

        ``error`` is None when the adapter only learns of the failure from the next attempt
        (pymongo's native loop retries such errors without asking us).  A failed retry without
        the overload label refunds a token.
        """
        self._ledger.finished(AttemptOutcome.CLASSIC_RETRYABLE)
        if self._tokens_taken > 0 and (error is None or not is_overload(error)):
            self._controller.budget.record_non_overload_failure()

    def failed(
        self,
        error: BaseException,
        *,
        deadline: Optional[float] = None,
        retries_allowed: bool = True,
        now: Optional[float] = None,
        classic_retryable: bool = False,
        labels: Optional[OverloadLabels] = None,
    ) -> Decision:
        """Record a failed attempt and return ``Retry`` or ``GiveUp``.

        ``classic_retryable``: pymongo's own retryable read/write rules would retry ``error``
        (the controller then keeps that retry for an overload error without ``RetryableError``).
        The retry number counts every failed attempt (the ledger's), classic ones included.
        A ``GiveUp`` for an error unrelated to overload on an operation that was never retried is
        logged at DEBUG only and not reported to listeners: it is not a backpressure event.
        ``labels``: ``error``'s overload labels when the caller has read them (None: read here,
        once for every check of the attempt).
        """
        if labels is None:
            labels = overload_labels(error)
        if labels.overload:
            outcome = AttemptOutcome.OVERLOAD
        elif classic_retryable:
            outcome = AttemptOutcome.CLASSIC_RETRYABLE
        else:
            outcome = AttemptOutcome.OTHER
        self._ledger.finished(outcome)
        server = self._current_server
        self._controller.record_failure(
            error, retried=self._tokens_taken > 0, server=server, labels=labels
        )
        decision = self._controller.decide(
            retry_number=max(self._ledger.retry_number(), 1),
            error=error,
            deadline=deadline,
            retries_allowed=retries_allowed,
            now=now,
            classic_retryable=classic_retryable,
            server=server,
            sheddable=self._criticality is Criticality.SHEDDABLE,
            labels=labels,
        )
        if isinstance(decision, Retry):
            self._on_retry(error, decision)
        else:
            self._on_give_up(error, decision, labels.overload)
        return decision

    def _on_retry(self, error: BaseException, decision: Retry) -> None:
        """Account for, log and announce a granted retry."""
        self._retries += 1
        if decision.from_budget:
            self._tokens_taken += 1
        self._total_backoff += decision.delay
        self._delays.append(decision.delay)
        attempt = max(self._ledger.attempts, 1)
        if self._logger.isEnabledFor(logging.INFO):  # skip formatting when nobody reads it
            self._logger.info(
                "retrying %s after attempt %d in %.3fs on %s: %s",
                self._operation,
                attempt,
                decision.delay,
                _format_server(self._current_server),
                _describe(error),
            )
        if not self._listeners:
            return  # nobody reads the event: its label copy is not built
        event = RetryEvent(
            operation=self._operation,
            attempt=attempt,
            delay=decision.delay,
            server=self._current_server,
            error_code=_error_code(error),
            error_labels=tuple(sorted(error_labels(error))),
            retarget=decision.retarget,
            budget_tokens=self._controller.budget.for_server(self._current_server).tokens,
        )
        for listener in self._listeners:
            try:
                listener.retried(event)
            except Exception:
                self._logger.exception("backpressure retry listener %r failed", listener)

    def _on_give_up(self, error: BaseException, decision: GiveUp, overload: bool) -> None:
        """Log, announce and attach the summary when retrying stops (``overload``: the error
        carries ``SystemOverloadedError``)."""
        self._stop_reason = decision.reason
        attach_summary(error, self.summary())
        unrelated = (
            decision.reason is StopReason.NOT_RETRYABLE and self._retries == 0 and not overload
        )
        if unrelated:
            if self._logger.isEnabledFor(logging.DEBUG):
                self._logger.debug(
                    "not retrying %s: %s (%s)",
                    self._operation,
                    decision.reason.value,
                    _describe(error),
                )
            self._finish(succeeded=False, reason=None, error=error, overload=overload)
            return
        level = logging.INFO
        note = ""
        if decision.reason is StopReason.BUDGET_EMPTY:
            suppressed = self._budget_warning_limit.admit()
            if suppressed is None:
                level = logging.DEBUG  # a WARNING for this was logged less than interval ago
            else:
                level = logging.WARNING
                if suppressed:
                    note = (
                        f"; {suppressed} more budget-empty give-up(s) logged at DEBUG "
                        "since the previous warning"
                    )
        if self._logger.isEnabledFor(level):
            self._logger.log(
                level,
                "giving up %s after %d attempt(s) on %s, %.3fs total backoff: %s (%s)%s",
                self._operation,
                max(self._ledger.attempts, 1),
                ", ".join(_format_server(s) for s in self.servers) or "unknown server",
                self._total_backoff,
                decision.reason.value,
                _describe(error),
                note,
            )
        event = GiveUpEvent(
            operation=self._operation,
            attempts=max(self._ledger.attempts, 1),
            reason=decision.reason,
            total_backoff=self._total_backoff,
            servers=self.servers,
            error_code=_error_code(error),
        )
        for listener in self._listeners:
            try:
                listener.gave_up(event)
            except Exception:
                self._logger.exception("backpressure retry listener %r failed", listener)
        self._finish(succeeded=False, reason=decision.reason, error=error, overload=overload)
