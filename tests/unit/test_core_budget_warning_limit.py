"""Tests for the rate limit of the budget-empty WARNING (a LogRateLimit), on a fake clock."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from pymongo.errors import OperationFailure

from backpressure.core.client_state import ClientState
from backpressure.core.decision import GiveUp, RetryController, StopReason
from backpressure.core.events import GiveUpEvent, RetryEvent
from backpressure.core.labels import RETRYABLE, SYSTEM_OVERLOADED
from backpressure.core.log_limit import LogRateLimit
from backpressure.core.policy import DRAFT
from tests.fakes import FakeClock

A = ("a.example", 27017)


class Recorder:
    """A listener that records give-ups."""

    def __init__(self) -> None:
        """Start with no events."""
        self.give_ups: list[GiveUpEvent] = []

    def retried(self, event: RetryEvent) -> None:
        """Ignore retries."""

    def gave_up(self, event: GiveUpEvent) -> None:
        """Record a give-up."""
        self.give_ups.append(event)


def overload() -> OperationFailure:
    """Build an overload error as the server sends it."""
    doc: dict[str, Any] = {"ok": 0, "code": 462, "errorLabels": [SYSTEM_OVERLOADED, RETRYABLE]}
    return OperationFailure("rate exceeded", 462, doc)


def empty_budget_state(clock: FakeClock, listener: Recorder) -> ClientState:
    """A client state whose budget is empty and whose controller runs on ``clock``."""
    controller = RetryController(DRAFT.replace(budget_capacity=1), random=lambda: 1.0, clock=clock)
    assert controller.budget.try_acquire()
    return ClientState(controller, (listener,))


def give_up(state: ClientState) -> None:
    """Run one operation that gives up on its first overload (budget empty)."""
    op = state.new_operation("insert")
    op.attempt_started(A)
    assert op.failed(overload()) == GiveUp(StopReason.BUDGET_EMPTY)


def budget_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The give-up log records, in order."""
    return [r for r in caplog.records if "retry budget empty" in r.getMessage()]


def test_first_warning_then_debug_then_one_warning_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """WARNING, then DEBUG within the interval, then one WARNING telling the count suppressed."""
    caplog.set_level(logging.DEBUG, logger="backpressure")
    clock = FakeClock()
    listener = Recorder()
    state = empty_budget_state(clock, listener)
    give_up(state)
    for _ in range(3):
        clock.now += 1.0
        give_up(state)
    clock.now += 1.999  # 4.999 s after the first WARNING: still inside the interval
    give_up(state)
    clock.now += 0.001  # exactly 5 s after it: a WARNING again
    give_up(state)
    give_up(state)
    records = budget_records(caplog)
    levels = [r.levelno for r in records]
    assert levels == [logging.WARNING] + [logging.DEBUG] * 4 + [logging.WARNING, logging.DEBUG]
    assert "suppressed" not in records[0].getMessage()
    assert "logged at DEBUG" not in records[0].getMessage()
    assert (
        records[5]
        .getMessage()
        .endswith("; 4 more budget-empty give-up(s) logged at DEBUG since the previous warning")
    )
    assert records[6].getMessage() == records[1].getMessage()
    # Listeners are not rate-limited: every give-up reaches them.
    assert len(listener.give_ups) == 7
    assert all(e.reason is StopReason.BUDGET_EMPTY for e in listener.give_ups)


def test_limit_is_per_client(caplog: pytest.LogCaptureFixture) -> None:
    """Each client (ClientState) has its own limit."""
    caplog.set_level(logging.DEBUG, logger="backpressure")
    clock = FakeClock()
    first, second = (empty_budget_state(clock, Recorder()) for _ in range(2))
    give_up(first)
    give_up(second)
    give_up(first)
    levels = [r.levelno for r in budget_records(caplog)]
    assert levels == [logging.WARNING, logging.WARNING, logging.DEBUG]
    assert first.budget_warning_limit is not second.budget_warning_limit


def test_other_give_ups_are_not_limited(caplog: pytest.LogCaptureFixture) -> None:
    """Only budget-empty give-ups count; other reasons keep their INFO line every time."""
    caplog.set_level(logging.DEBUG, logger="backpressure")
    controller = RetryController(DRAFT, random=lambda: 1.0, clock=FakeClock())
    state = ClientState(controller)
    for _ in range(3):
        op = state.new_operation("find")
        op.attempt_started(A)
        assert op.failed(overload(), retries_allowed=False) == GiveUp(StopReason.RETRIES_DISABLED)
    assert [r.levelno for r in caplog.records] == [logging.INFO] * 3
    assert state.budget_warning_limit.admit() == 0  # never used


def test_admit_counts() -> None:
    """admit returns the count logged at DEBUG since the previous WARNING, or None."""
    clock = FakeClock()
    warnings = LogRateLimit(2.0, clock=clock)
    assert warnings.interval == 2.0
    assert warnings.admit() == 0
    assert warnings.admit() is None
    clock.now += 1.0
    assert warnings.admit() is None
    clock.now += 1.0
    assert warnings.admit() == 2
    clock.now += 10.0
    assert warnings.admit() == 0


def test_zero_interval_always_warns() -> None:
    """An interval of 0 disables the limit."""
    warnings = LogRateLimit(0, clock=FakeClock())
    assert [warnings.admit() for _ in range(3)] == [0, 0, 0]


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_invalid_interval(bad: float) -> None:
    """A negative or non-finite interval is refused."""
    with pytest.raises(ValueError, match="interval"):
        LogRateLimit(bad)


@pytest.mark.parametrize("bad", [True, "5", None])
def test_interval_type(bad: Any) -> None:
    """A non-number interval is refused."""
    with pytest.raises(TypeError, match="interval"):
        LogRateLimit(bad)
