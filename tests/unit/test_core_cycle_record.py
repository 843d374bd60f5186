"""Tests for CycleRecord: accounting, logging, listeners and summaries."""

from __future__ import annotations

import logging
from typing import Any, cast

import pytest
from pymongo.errors import AutoReconnect, DuplicateKeyError, OperationFailure

from backpressure.core.cycle_record import CycleRecord
from backpressure.core.decision import GiveUp, Retry, RetryController, StopReason
from backpressure.core.events import (
    GiveUpEvent,
    RetryEvent,
    RetryListener,
    RetrySummary,
    attach_summary,
    retry_summary,
)
from backpressure.core.labels import RETRYABLE, SYSTEM_OVERLOADED
from backpressure.core.policy import CURRENT_SPEC, DRAFT, Policy


def near(value: float) -> float:
    """Return a float stand-in that compares approximately equal (for frozen dataclasses)."""
    return cast(float, pytest.approx(value))


A = ("a.example", 27017)
B = ("b.example", 27017)


def overload(backoff_ms: Any = None) -> OperationFailure:
    """Build an overload error as the server sends it."""
    doc: dict[str, Any] = {"ok": 0, "code": 462, "errorLabels": [SYSTEM_OVERLOADED, RETRYABLE]}
    if backoff_ms is not None:
        doc["baseBackoffMS"] = backoff_ms
    return OperationFailure("rate exceeded", 462, doc)


class Recorder:
    """A listener that records every event."""

    def __init__(self) -> None:
        """Start with no events."""
        self.events: list[RetryEvent | GiveUpEvent] = []

    def retried(self, event: RetryEvent) -> None:
        """Record a retry."""
        self.events.append(event)

    def gave_up(self, event: GiveUpEvent) -> None:
        """Record a give-up."""
        self.events.append(event)


class Raising:
    """A listener that always raises."""

    def retried(self, event: RetryEvent) -> None:
        """Raise."""
        raise RuntimeError("listener broke")

    def gave_up(self, event: GiveUpEvent) -> None:
        """Raise."""
        raise RuntimeError("listener broke")


def make(policy: Policy = DRAFT, *listeners: RetryListener, jitter: float = 1.0) -> CycleRecord:
    """Build an CycleRecord over a controller with fixed jitter and a frozen clock."""
    ctl = RetryController(policy, random=lambda: jitter, clock=lambda: 0.0)
    return CycleRecord(ctl, "insert", listeners=listeners)


def test_retry_then_success(caplog: pytest.LogCaptureFixture) -> None:
    """Two overload failures then success: delays, servers, events, logs and tokens."""
    recorder = Recorder()
    op = make(DRAFT, recorder)
    caplog.set_level(logging.INFO, logger="backpressure")
    op.attempt_started(A)
    first = op.failed(overload())
    op.attempt_started(B)
    second = op.failed(overload())
    op.attempt_started(A)
    op.succeeded()
    assert first == Retry(1, near(0.1), True)
    assert second == Retry(2, near(0.2), True)
    assert op.attempts == 3
    assert op.retries == 2
    assert op.total_backoff == pytest.approx(0.3)
    assert op.servers == (A, B)
    assert op.summary() == RetrySummary(3, near(0.3), (A, B), None)
    assert op.controller.budget.tokens == 999.1  # 1000 - 1 - 1 + 1.1
    assert op.operation == "insert"
    assert op.stop_reason is None
    events = recorder.events
    assert events == [
        RetryEvent(
            "insert",
            1,
            near(0.1),
            A,
            462,
            (RETRYABLE, SYSTEM_OVERLOADED),
            True,
            999.0,
        ),
        RetryEvent(
            "insert",
            2,
            near(0.2),
            B,
            462,
            (RETRYABLE, SYSTEM_OVERLOADED),
            True,
            998.0,
        ),
    ]
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "retrying insert after attempt 1 in 0.100s on a.example:27017: "
        "OperationFailure, code 462, labels RetryableError+SystemOverloadedError",
        "retrying insert after attempt 2 in 0.200s on b.example:27017: "
        "OperationFailure, code 462, labels RetryableError+SystemOverloadedError",
    ]
    assert all(r.levelno == logging.INFO for r in caplog.records)


def test_exhausted_attaches_summary(caplog: pytest.LogCaptureFixture) -> None:
    """When attempts run out the last error carries the summary and listeners hear it."""
    recorder = Recorder()
    op = make(CURRENT_SPEC, recorder)
    caplog.set_level(logging.INFO, logger="backpressure")
    decisions = []
    error = overload()
    for server in (A, A, B):
        op.attempt_started(server)
        error = overload()
        decisions.append(op.failed(error))
    assert decisions[-1] == GiveUp(StopReason.ATTEMPTS_EXHAUSTED)
    summary = retry_summary(error)
    assert summary == RetrySummary(3, near(0.6), (A, B), StopReason.ATTEMPTS_EXHAUSTED)
    assert recorder.events[-1] == GiveUpEvent(
        "insert", 3, StopReason.ATTEMPTS_EXHAUSTED, near(0.6), (A, B), 462
    )
    last = caplog.records[-1]
    assert last.levelno == logging.INFO
    assert last.getMessage() == (
        "giving up insert after 3 attempt(s) on a.example:27017, b.example:27017, "
        "0.600s total backoff: attempts exhausted "
        "(OperationFailure, code 462, labels RetryableError+SystemOverloadedError)"
    )


def test_budget_empty_logs_warning(caplog: pytest.LogCaptureFixture) -> None:
    """An empty budget gives up with a WARNING."""
    op = make(DRAFT.replace(budget_capacity=1))
    caplog.set_level(logging.INFO, logger="backpressure")
    op.attempt_started(A)
    assert isinstance(op.failed(overload()), Retry)
    op.attempt_started(A)
    error = overload()
    assert op.failed(error) == GiveUp(StopReason.BUDGET_EMPTY)
    assert caplog.records[-1].levelno == logging.WARNING
    assert "retry budget empty" in caplog.records[-1].getMessage()
    summary = retry_summary(error)
    assert summary is not None
    assert summary.stop_reason is StopReason.BUDGET_EMPTY


def test_deadline_give_up() -> None:
    """A deadline that the delay would pass gives up without spending a token."""
    op = make(DRAFT)
    op.attempt_started(A)
    assert op.failed(overload(), deadline=0.05, now=0.0) == GiveUp(StopReason.DEADLINE)
    assert op.controller.budget.tokens == 1000.0


def test_retries_disabled() -> None:
    """retries_allowed=False is passed to the controller."""
    op = make(DRAFT)
    op.attempt_started(A)
    assert op.failed(overload(), retries_allowed=False) == GiveUp(StopReason.RETRIES_DISABLED)


def test_unrelated_error_is_quiet(caplog: pytest.LogCaptureFixture) -> None:
    """A first-attempt error unrelated to overload is logged at DEBUG and not announced."""
    recorder = Recorder()
    op = make(DRAFT, recorder)
    caplog.set_level(logging.DEBUG, logger="backpressure")
    op.attempt_started(A)
    error = DuplicateKeyError("dup", 11000, {"code": 11000})
    assert op.failed(error) == GiveUp(StopReason.NOT_RETRYABLE)
    assert recorder.events == []
    assert [r.levelno for r in caplog.records] == [logging.DEBUG]
    summary = retry_summary(error)
    assert summary == RetrySummary(1, 0.0, (A,), StopReason.NOT_RETRYABLE)


def test_non_overload_failure_after_retry_refunds_and_gives_up() -> None:
    """A retry failing with a plain error refunds a token and is announced as a give-up."""
    recorder = Recorder()
    op = make(DRAFT, recorder)
    op.attempt_started(A)
    op.failed(overload())
    assert op.controller.budget.tokens == 999.0
    op.attempt_started(B)
    error = AutoReconnect("connection closed")
    assert op.failed(error) == GiveUp(StopReason.NOT_RETRYABLE)
    assert op.controller.budget.tokens == 1000.0
    last = recorder.events[-1]
    assert isinstance(last, GiveUpEvent)
    assert last.reason is StopReason.NOT_RETRYABLE
    assert last.error_code is None


def test_overload_without_retryable_label_is_announced() -> None:
    """An overload error lacking RetryableError is a backpressure give-up even on attempt 1."""
    recorder = Recorder()
    op = make(DRAFT, recorder)
    op.attempt_started(None)
    error = OperationFailure("x", 462, {"errorLabels": [SYSTEM_OVERLOADED]})
    assert op.failed(error) == GiveUp(StopReason.NOT_RETRYABLE)
    assert recorder.events == [
        GiveUpEvent("insert", 1, StopReason.NOT_RETRYABLE, 0.0, (), 462),
    ]


def test_raising_listener_does_not_break(caplog: pytest.LogCaptureFixture) -> None:
    """A listener that raises is logged and the next listener still runs."""
    recorder = Recorder()
    op = make(CURRENT_SPEC, Raising(), recorder)
    caplog.set_level(logging.INFO, logger="backpressure")
    for _ in range(3):
        op.attempt_started(A)
        decision = op.failed(overload())
    assert decision == GiveUp(StopReason.ATTEMPTS_EXHAUSTED)
    assert len(recorder.events) == 3
    failures = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(failures) == 3
    assert all(r.exc_info is not None for r in failures)


def test_server_unknown_and_no_attempt_started(caplog: pytest.LogCaptureFixture) -> None:
    """Failing without attempt_started still reports attempt 1 on an unknown server."""
    op = make(DRAFT, jitter=0.0)
    caplog.set_level(logging.INFO, logger="backpressure")
    assert op.failed(overload()) == Retry(1, 0.0, True)
    assert "after attempt 1 in 0.000s on unknown server" in caplog.records[0].getMessage()


def test_custom_logger(caplog: pytest.LogCaptureFixture) -> None:
    """An injected logger receives the messages."""
    ctl = RetryController(DRAFT, random=lambda: 0.5)
    op = CycleRecord(ctl, "find", logger=logging.getLogger("custom.bp"))
    caplog.set_level(logging.INFO, logger="custom.bp")
    op.attempt_started(A)
    op.failed(overload())
    assert caplog.records[0].name == "custom.bp"


def test_server_backoff_hint_flows_through() -> None:
    """The server's baseBackoffMS sets the delay seen by the operation."""
    op = make(DRAFT)
    op.attempt_started(A)
    decision = op.failed(overload(backoff_ms=30))
    assert isinstance(decision, Retry)
    assert decision.delay == pytest.approx(0.03)


def test_attach_summary_tolerates_slots() -> None:
    """attach_summary never fails, even on objects that forbid attributes."""

    class Slotted(Exception):
        """An exception that refuses new attributes."""

        def __setattr__(self, name: str, value: object) -> None:
            """Refuse every attribute."""
            raise AttributeError(name)

    exc = Slotted()
    attach_summary(exc, RetrySummary(1, 0.0, (), None))
    assert retry_summary(exc) is None
    assert retry_summary(ValueError()) is None


def test_error_with_raising_code_property() -> None:
    """An error whose ``code`` property raises is reported with no code."""

    class Odd(OperationFailure):
        """An overload error whose code cannot be read."""

        @property
        def code(self) -> int | None:
            """Raise on access."""
            raise RuntimeError("no code")

    recorder = Recorder()
    op = make(DRAFT, recorder)
    op.attempt_started(A)
    op.failed(Odd("x", 462, {"errorLabels": [SYSTEM_OVERLOADED, RETRYABLE]}))
    event = recorder.events[0]
    assert isinstance(event, RetryEvent)
    assert event.error_code is None


@pytest.mark.parametrize("sent", [0, 1])
def test_local_refusal_is_a_give_up_with_the_attempts_sent(sent: int) -> None:
    """stopped(reason): listeners get a GiveUpEvent, for a refused first attempt (0 sent) too."""
    recorder = Recorder()
    ops = make(DRAFT, recorder)
    if sent:
        ops.attempt_started(A)
        decision = ops.failed(overload())
        assert isinstance(decision, Retry)
    ops.stopped(StopReason.LOCAL_WAIT_DEADLINE)
    gave_up = [e for e in recorder.events if isinstance(e, GiveUpEvent)]
    assert len(gave_up) == 1
    assert gave_up[0].reason is StopReason.LOCAL_WAIT_DEADLINE
    assert gave_up[0].attempts == sent
    assert gave_up[0].error_code is None
    assert ops.summary().stop_reason is StopReason.LOCAL_WAIT_DEADLINE
