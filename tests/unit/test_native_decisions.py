"""The native adapter's retry decision takes its data as parameters: the error from the one seam
that reads it (``seams.handled_error``), the CSOT deadline moved onto the client's clock
(``seams.csot_deadline_and_now``), and a decision outside an operation from the cycle
(``AttemptCycle.failed_alone``).  Every clock here is a fake one the test gives; nothing sleeps.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pymongo
import pytest
from pymongo import _csot
from pymongo.errors import PyMongoError

from backpressure.adapters import seams
from backpressure.adapters.native import GrantedDelay
from backpressure.adapters.native.cycles import TrackedCycle
from backpressure.core.client_state import ClientState
from backpressure.core.cycle import AttemptCycle, Backoff, Stop
from backpressure.core.decision import RetryController, StopReason
from backpressure.core.events import RetryEvent
from backpressure.core.labels import RETRYABLE, SYSTEM_OVERLOADED
from backpressure.core.policy import DRAFT, Policy
from tests.fakes import FakeClock

A = ("a", 27017)


def overload() -> PyMongoError:
    """A load-shedding error as the server sends it."""
    return PyMongoError("overloaded", error_labels=[SYSTEM_OVERLOADED, RETRYABLE])


def client_state(policy: Policy, clock: FakeClock, listeners: tuple[Any, ...] = ()) -> ClientState:
    """One client's state whose retry rules run on ``clock`` (jitter 1.0: full delays)."""
    return ClientState(RetryController(policy, random=lambda: 1.0, clock=clock), listeners)


def no_clock() -> float:
    """A clock that must not be read."""
    raise AssertionError("the clock was read")


class Recorder:
    """Records the retry events it is told about."""

    def __init__(self) -> None:
        """Start with none."""
        self.events: list[Any] = []

    def retried(self, event: RetryEvent) -> None:
        """Record a retry."""
        self.events.append(event)

    def gave_up(self, event: Any) -> None:
        """Record a give-up."""
        self.events.append(event)


def test_handled_error_is_the_error_of_the_enclosing_except_block() -> None:
    """The seam returns the exception being handled, and None outside an ``except`` block."""
    error = overload()
    try:
        raise error
    except PyMongoError:
        assert seams.handled_error() is error
    assert seams.handled_error() is None


def test_without_a_timeout_there_is_no_deadline_and_no_clock_read() -> None:
    """No CSOT timeout: ``(None, None)``, and the client's clock is not read."""
    assert seams.csot_deadline_and_now(no_clock) == (None, None)


def test_the_csot_deadline_is_moved_onto_the_given_clock() -> None:
    """Under ``pymongo.timeout(10)`` the deadline lies up to 10 s after the given clock's now."""
    clock = FakeClock(now=5.0)  # far from pymongo's clock: an unmoved deadline would be wrong
    with pymongo.timeout(10):
        deadline, now = seams.csot_deadline_and_now(clock)
    assert now == 5.0
    assert deadline is not None
    assert 5.0 < deadline <= 15.0


def test_on_pymongo_clock_the_csot_deadline_is_pymongos_own() -> None:
    """Given pymongo's clock itself, the deadline is exactly the one pymongo keeps."""
    with pymongo.timeout(10):
        deadline, now = seams.csot_deadline_and_now(seams.CSOT_CLOCK)
        assert deadline == _csot.get_deadline()
    assert now is not None
    assert now < deadline


def test_a_lone_failure_is_decided_with_the_callers_retry_number() -> None:
    """``failed_alone`` numbers the retry as told: the delay doubles, the cap stops the third."""
    state = client_state(DRAFT.replace(max_retries=2), FakeClock())
    error = overload()
    first = AttemptCycle.failed_alone(state, error, retry_number=1)
    second = AttemptCycle.failed_alone(state, error, retry_number=2)
    third = AttemptCycle.failed_alone(state, error, retry_number=3)
    assert isinstance(first, Backoff)
    assert first.seconds == pytest.approx(0.1)
    assert isinstance(second, Backoff)
    assert second.seconds == pytest.approx(0.2)
    assert third == Stop(error, StopReason.ATTEMPTS_EXHAUSTED)
    assert AttemptCycle.failed_alone(state, error, retry_number=0) == first  # at least 1


def test_a_lone_failure_records_nothing() -> None:
    """No record, event or statistic: only the retry rules answer."""
    recorder = Recorder()
    state = client_state(DRAFT.replace(max_retries=2), FakeClock(), (recorder,))
    before = state.snapshot()
    AttemptCycle.failed_alone(state, overload(), retry_number=1)
    AttemptCycle.failed_alone(state, overload(), retry_number=3)
    assert recorder.events == []
    assert state.snapshot() == before


def test_a_lone_failure_compares_the_deadline_on_the_given_clock() -> None:
    """A delay past ``deadline`` (both on the client's clock) stops with the deadline reason;
    a later deadline lets the same retry go."""
    clock = FakeClock(now=50.0)
    state = client_state(DRAFT.replace(max_retries=2), clock)
    error = overload()
    late = AttemptCycle.failed_alone(
        state, error, retry_number=1, deadline=clock.now + 0.05, now=clock.now
    )
    assert late == Stop(error, StopReason.DEADLINE)
    early = AttemptCycle.failed_alone(
        state, error, retry_number=1, deadline=clock.now + 1.0, now=clock.now
    )
    assert isinstance(early, Backoff)


def tracked(state: ClientState) -> TrackedCycle:
    """A native operation (no session) on ``state`` whose first attempt went to A."""
    installation = SimpleNamespace(state=state)
    operation = TrackedCycle(installation, None, "find")  # type: ignore[arg-type]
    operation.attempt_started(SimpleNamespace(description=SimpleNamespace(address=A)))
    return operation


def test_the_native_decision_takes_the_error_and_compares_on_the_clients_clock() -> None:
    """``TrackedCycle.decide(error)`` asks the cycle with the CSOT deadline moved onto the
    client's clock: a 5 s backoff passes a 1 s timeout, not a 60 s one."""
    policy = DRAFT.replace(max_retries=2, base_backoff=5.0, max_backoff=10.0)
    clock = FakeClock(now=0.0)  # far from pymongo's clock
    with pymongo.timeout(1):
        assert tracked(client_state(policy, clock)).decide(overload()) is None
    with pymongo.timeout(60):
        assert tracked(client_state(policy, clock)).decide(overload()) == pytest.approx(5.0)
    assert tracked(client_state(policy, clock)).decide(overload()) == pytest.approx(5.0)


def test_a_granted_delay_is_a_float() -> None:
    """What pymongo sleeps is the delay itself; only its type carries the decision."""
    delay = GrantedDelay(0.25)
    assert delay == 0.25
    assert isinstance(delay, float)
    assert type(delay) is GrantedDelay
