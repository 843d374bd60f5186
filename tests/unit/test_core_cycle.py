"""Timelines of the attempt cycle, driven directly on a fake clock (no executor, no sleeping).

Each test runs the loop every executor runs (admit, wait, recheck, send, record, decide) with a
``drive`` helper that "sleeps" by moving the fake clock, and reads the answers as a timeline.
"""

from __future__ import annotations

import logging
from typing import Callable, Optional, Union

import pytest
from pymongo.errors import NetworkTimeout, OperationFailure, PyMongoError

from backpressure.core.adaptive import LocalOverloadError, pacers_for
from backpressure.core.client_state import ClientState
from backpressure.core.cycle import SEND, AttemptCycle, Backoff, Step, Stop, Wait, WaitOut
from backpressure.core.decision import RetryController, StopReason
from backpressure.core.events import OperationFinishedEvent, retry_summary
from backpressure.core.labels import RETRYABLE, SYSTEM_OVERLOADED
from backpressure.core.policy import ADAPTIVE, CURRENT_SPEC, DRAFT, Policy
from tests.fakes import FakeClock

A = ("a", 27017)
B = ("b", 27017)


def overload() -> PyMongoError:
    """A load-shedding error as the server sends it."""
    return PyMongoError("rate exceeded", error_labels=[SYSTEM_OVERLOADED, RETRYABLE])


class Finished:
    """An operation listener keeping every finished event."""

    def __init__(self) -> None:
        """No events yet."""
        self.events: list[OperationFinishedEvent] = []

    def operation_finished(self, event: OperationFinishedEvent) -> None:
        """Keep ``event``."""
        self.events.append(event)


def client(policy: Policy, clock: FakeClock, listeners: tuple[object, ...] = ()) -> ClientState:
    """One client's state on ``clock``, jitter 1 (the full backoff)."""
    controller = RetryController(
        policy, random=lambda: 1.0, clock=clock, pacing=pacers_for(policy, clock=clock)
    )
    return ClientState(controller, listeners=listeners)


Reply = Union[None, BaseException]
"""What the server answers an attempt: None (success) or an error."""


def drive(
    cycle: AttemptCycle,
    clock: FakeClock,
    replies: Callable[[tuple[str, int]], Reply],
    *,
    deadline: Optional[float] = None,
    servers: tuple[tuple[str, int], ...] = (A, B),
) -> list[str]:
    """Run one operation through ``cycle`` as an executor does; return the timeline.

    Sleeps and waits move ``clock``; the server is the first of ``servers`` unless the cycle
    asked to retarget or avoids a paced one.
    """
    timeline: list[str] = []
    avoid: Optional[tuple[str, int]] = None
    while True:
        paced = cycle.paced()
        choices = [s for s in servers if s != avoid] or list(servers)
        if paced is not None:
            choices = [s for s in choices if not paced(s)] or choices
        server = choices[0]
        waits = cycle.wait_out(cycle.admit(server, deadline))
        for seconds in waits:
            timeline.append(f"wait {seconds:.3f}")
            clock.advance(seconds)
        step = waits.answer
        if type(step) is Stop:
            timeline.append(f"refused: {step.reason.value if step.reason else None}")
            return timeline
        assert step is SEND
        cycle.started(server)
        reply = replies(server)
        if reply is None:
            cycle.succeeded()
            timeline.append(f"ok on {server[0]}")
            return timeline
        now = clock() if deadline is not None else None
        answer = cycle.failed(reply, deadline=deadline, now=now, classic_retryable=True)
        if type(answer) is Stop:
            timeline.append(f"stop: {answer.reason.value if answer.reason else None}")
            return timeline
        assert type(answer) is Backoff
        timeline.append(f"backoff {answer.seconds:.3f} from {server[0]}")
        clock.advance(answer.seconds)
        avoid = server if answer.retarget else None


def test_success_on_the_first_attempt_allocates_no_record() -> None:
    """A first-attempt success is counted without creating the per-operation record."""
    clock = FakeClock()
    state = client(CURRENT_SPEC, clock)
    cycle = AttemptCycle(state, "find")
    assert drive(cycle, clock, lambda _server: None) == ["ok on a"]
    assert cycle.retries is None
    assert state.snapshot().operations == 1


def test_overload_then_success_backs_off_and_records_the_retry() -> None:
    """Two overloads, then a reply: backoffs 0.2 and 0.4 s (jitter 1), no retargeting."""
    clock = FakeClock()
    finished = Finished()
    cycle = AttemptCycle(client(CURRENT_SPEC, clock, (finished,)), "find")
    replies = iter([overload(), overload(), None])
    timeline = drive(cycle, clock, lambda _server: next(replies))
    assert timeline == ["backoff 0.200 from a", "backoff 0.400 from a", "ok on a"]
    assert clock.now == pytest.approx(100.6)
    (event,) = finished.events
    assert event.succeeded
    assert event.retry_delays == pytest.approx((0.2, 0.4))
    assert event.attempt_servers == (A, A, A)


def test_retries_run_out_with_the_summary_on_the_error() -> None:
    """Every attempt overloaded: two retries, then the last error, with its summary."""
    clock = FakeClock()
    errors: list[BaseException] = []

    def reply(_server: tuple[str, int]) -> Reply:
        errors.append(overload())
        return errors[-1]

    cycle = AttemptCycle(client(CURRENT_SPEC, clock), "insert")
    timeline = drive(cycle, clock, reply)
    assert timeline[-1] == f"stop: {StopReason.ATTEMPTS_EXHAUSTED.value}"
    summary = retry_summary(errors[-1])
    assert summary is not None
    assert summary.attempts == 3
    assert summary.stop_reason is StopReason.ATTEMPTS_EXHAUSTED


def test_budget_exhausted_stops_before_the_retry_cap() -> None:
    """A budget of 1 token: one retry (retargeted to B), then the budget stops the operation."""
    clock = FakeClock()
    policy = DRAFT.replace(budget_capacity=1.0, budget_retry_cost=1.0)
    cycle = AttemptCycle(client(policy, clock), "find")
    timeline = drive(cycle, clock, lambda _server: overload())
    assert timeline == ["backoff 0.100 from a", f"stop: {StopReason.BUDGET_EMPTY.value}"]


def test_deadline_reached_stops_instead_of_sleeping_past_it() -> None:
    """A backoff that would end past the deadline is not slept: the operation stops."""
    clock = FakeClock()
    cycle = AttemptCycle(client(CURRENT_SPEC, clock), "find")
    timeline = drive(cycle, clock, lambda _server: overload(), deadline=clock.now + 0.3)
    assert timeline == ["backoff 0.200 from a", f"stop: {StopReason.DEADLINE.value}"]


def test_an_error_that_is_no_overload_stops_at_once() -> None:
    """A network timeout is not an overload: no retry, nothing recorded for the pacing."""
    clock = FakeClock()
    cycle = AttemptCycle(client(ADAPTIVE, clock), "find")
    assert drive(cycle, clock, lambda _server: NetworkTimeout("slow")) == [
        f"stop: {StopReason.NOT_RETRYABLE.value}"
    ]
    assert not cycle.pushed_back


def test_unsent_records_the_stop_of_an_operation_that_sent_nothing_more() -> None:
    """No server for the retry, or its deadline passed before it: ``unsent`` asks the retry
    rules, which stop the operation (no attempt is added) and put the summary on the error."""
    clock = FakeClock()
    finished = Finished()
    cycle = AttemptCycle(client(CURRENT_SPEC, clock, (finished,)), "find")
    cycle.started(A)
    first = overload()
    retry = cycle.failed(first)
    assert type(retry) is Backoff
    step = cycle.unsent(first, deadline=clock.now - 1.0)
    assert type(step) is Stop
    assert step.reason is StopReason.DEADLINE
    summary = retry_summary(first)
    assert summary is not None
    assert summary.attempts == 1
    assert summary.stop_reason is StopReason.DEADLINE
    (event,) = finished.events
    assert not event.succeeded
    assert event.stop_reason is StopReason.DEADLINE


def test_decided_inside_hands_the_outcome_to_the_pacing_without_a_decision() -> None:
    """An error an inner retry loop already decided about: the attempt's outcome goes to the
    pacing and the budget, no retry rule is asked (no summary, no finished event)."""
    clock = FakeClock()
    finished = Finished()
    state = client(ADAPTIVE, clock, (finished,))
    cycle = AttemptCycle(state, "create")
    assert cycle.admit(A, None) is SEND
    cycle.started(A)
    error = overload()
    cycle.decided_inside(error)
    assert cycle.pushed_back  # the pacing saw the pushback
    assert not cycle.attempt_open
    assert retry_summary(error) is None
    assert finished.events == []
    assert cycle.record().attempts == 1


def close_pacing(state: ClientState, clock: FakeClock, server: tuple[str, int] = A) -> None:
    """Run operations whose attempts to ``server`` are pushed back until its pacer closes."""
    for _ in range(100):
        cycle = AttemptCycle(state, "find")
        assert cycle.admit(server, None) is SEND
        cycle.started(server)
        cycle.failed(overload(), classic_retryable=True)
        clock.advance(0.001)
        paced = cycle.paced()
        if paced is not None and paced(server):
            return
    raise AssertionError("the pacer never closed")


def test_paced_wait_then_send_on_the_recheck() -> None:
    """Once a server pushes back, the next attempts wait for their slots, asking again each
    time a wait is over; a selection with a choice avoids the paced server."""
    clock = FakeClock()
    state = client(ADAPTIVE.replace(adaptive_min_rate=2.0, max_local_wait=30.0), clock)
    close_pacing(state, clock)
    waits = []
    for _ in range(3):
        cycle = AttemptCycle(state, "find")
        step = cycle.admit(A, None)
        waits.append(step)
        if step is SEND:
            cycle.started(A)  # (a Wait holds its slot without being carried out)
    assert waits[0] is SEND or isinstance(waits[0], Wait)
    assert all(isinstance(step, Wait) for step in waits[1:])
    cycle = AttemptCycle(state, "find")
    timeline = drive(cycle, clock, lambda _server: None, servers=(A,))
    assert timeline[0].startswith("wait ")
    assert timeline[-1] == "ok on a"
    cycle = AttemptCycle(state, "find")
    assert drive(cycle, clock, lambda _server: None) == ["ok on b"]  # A is avoided


def test_wait_out_asks_again_only_once_each_wait_is_over() -> None:
    """The one wait-and-recheck loop: each Wait's seconds go out in turn, ``waited`` is asked
    only when the next item is (the executor has slept), and the last answer stays readable."""
    calls: list[str] = []
    answers: list[Step] = [Wait(0.2), SEND]

    def waited() -> Step:
        calls.append("waited")
        return answers.pop(0)

    waits = WaitOut(waited, Wait(0.1))
    for seconds in waits:
        calls.append(f"slept {seconds}")
    assert calls == ["slept 0.1", "waited", "slept 0.2", "waited"]
    assert waits.answer is SEND
    error = LocalOverloadError("refused", reason=StopReason.LOCAL_WAIT_LIMIT, server=A, wait=9.0)
    refused = Stop(error, error.reason)
    at_once = WaitOut(waited, refused)  # not a Wait: the answer at once, nothing asked
    assert list(at_once) == []
    assert at_once.answer is refused
    assert calls == ["slept 0.1", "waited", "slept 0.2", "waited"]


def test_refusal_when_the_wait_would_pass_the_deadline() -> None:
    """A paced attempt whose slot comes after its deadline is held, then refused: nothing is
    sent, and the error carries the summary of an operation that sent nothing."""
    clock = FakeClock()
    state = client(ADAPTIVE.replace(adaptive_min_rate=0.01, adaptive_decrease=0.01), clock)
    close_pacing(state, clock)
    for _ in range(3):  # take the next slots
        AttemptCycle(state, "find").admit(A, None)
    cycle = AttemptCycle(state, "find")
    waits = cycle.wait_out(cycle.admit(A, clock.now + 0.05))
    for seconds in waits:
        clock.advance(seconds)
    step = waits.answer
    assert type(step) is Stop
    assert isinstance(step.error, LocalOverloadError)
    assert step.reason is StopReason.LOCAL_WAIT_DEADLINE
    summary = retry_summary(step.error)
    assert summary is not None
    assert summary.attempts == 0


def test_refusal_by_max_local_wait_names_its_reason() -> None:
    """Without a deadline the bound is ``max_local_wait``: the refusal says so."""
    clock = FakeClock()
    policy = ADAPTIVE.replace(adaptive_min_rate=0.01, adaptive_decrease=0.01, max_local_wait=0.05)
    state = client(policy, clock)
    close_pacing(state, clock)
    for _ in range(3):
        AttemptCycle(state, "find").admit(A, None)
    timeline = drive(AttemptCycle(state, "find"), clock, lambda _server: None, servers=(A,))
    assert timeline[-1] == f"refused: {StopReason.LOCAL_WAIT_LIMIT.value}"


def test_a_retry_of_a_pushed_back_attempt_is_marked_for_the_queue() -> None:
    """After a pushback the cycle asks the pacing as a retry (it goes ahead of first attempts)."""
    clock = FakeClock()
    state = client(ADAPTIVE, clock)
    cycle = AttemptCycle(state, "find")
    cycle.admit(A, None)
    cycle.started(A)
    assert type(cycle.failed(overload(), classic_retryable=True)) is Backoff
    assert cycle.pushed_back
    cycle.admit(A, None)
    cycle.started(A)
    cycle.succeeded()
    assert not cycle.pushed_back


class CountingError(PyMongoError):
    """An overload error that counts the lookups of its labels."""

    reads = 0

    def has_error_label(self, label: str) -> bool:
        """Count the lookup, then answer it."""
        self.reads += 1
        return super().has_error_label(label)


def test_a_failed_attempt_reads_its_error_labels_once_for_every_check(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The pacing, the ledger, the budget and the retry rules share one reading of the error's
    labels (two lookups); with no retry listener and no INFO log, nothing else reads them."""
    caplog.set_level(logging.WARNING, logger="backpressure")
    clock = FakeClock()
    cycle = AttemptCycle(client(ADAPTIVE, clock), "find")
    cycle.admit(A, None)
    cycle.started(A)
    error = CountingError("rate exceeded", error_labels=[SYSTEM_OVERLOADED, RETRYABLE])
    assert type(cycle.failed(error, classic_retryable=True)) is Backoff
    assert error.reads == 2
    assert cycle.pushed_back


def test_an_attempt_started_while_the_last_is_open_is_a_classic_retry() -> None:
    """pymongo's own loop retried an error without asking: the ledger sees a classic retry."""
    clock = FakeClock()
    cycle = AttemptCycle(client(CURRENT_SPEC, clock), "find")
    cycle.started(A)
    cycle.started(B)
    cycle.succeeded()
    retries = cycle.retries
    assert retries is not None
    assert retries.servers == (A, B)
    assert retries.attempts == 2


def test_hedged_race_one_rule_for_who_wins_and_when_to_raise() -> None:
    """The race both hedging executors follow: a success wins once; a fatal failure of the
    first attempt ends the read at once; a non-fatal one waits for the hedges, and when every
    attempt failed the first attempt's error is raised."""
    from pymongo.errors import AutoReconnect, OperationFailure

    from backpressure.adapters.hedging.race import _Attempt
    from backpressure.core.hedging import HedgeRace

    race = HedgeRace()
    first, hedge = _Attempt(race, None, 0), _Attempt(race, A, 1)
    race.launched()
    race.launched()
    network = AutoReconnect("first attempt's connection closed")
    assert race.failed(first, network) is None  # non-fatal: the hedge may still answer
    assert race.failed(hedge, overload()) is network  # every attempt failed: the first's error

    race = HedgeRace()
    first, hedge = _Attempt(race, None, 0), _Attempt(race, A, 1)
    race.launched()
    race.launched()
    assert race.failed(hedge, overload()) is None  # the first attempt is still running
    assert race.claim(first)
    assert not race.claim(hedge)  # one winner

    race = HedgeRace()
    first = _Attempt(race, None, 0)
    race.launched()
    race.launched()
    bad_query = OperationFailure("bad query", code=2)
    assert race.failed(first, bad_query) is bad_query  # fatal: no member could answer


def test_an_attempt_sent_without_asking_admit_carries_no_earlier_admission() -> None:
    """While nothing is paced an executor sends without asking ``admit``: the attempt is
    recorded unpaced, whatever an earlier attempt of the operation was admitted with."""
    clock = FakeClock()
    state = client(ADAPTIVE.replace(adaptive_min_rate=2.0, max_local_wait=30.0), clock)
    close_pacing(state, clock)
    cycle = AttemptCycle(state, "find")
    step = cycle.admit(A, None)
    assert step is SEND or isinstance(step, Wait)
    assert cycle.grant is not None
    cycle.started(A)
    assert type(cycle.failed(overload(), classic_retryable=True)) is Backoff
    cycle.started(B)  # no admit: sent unpaced
    assert cycle.grant is None
    assert cycle.address is None


class CountingClock(FakeClock):
    """A fake clock that counts how often it is read."""

    def __init__(self) -> None:
        """Start at the fake clock's time, read 0 times."""
        super().__init__()
        self.reads = 0

    def __call__(self) -> float:
        """Count the read, return the fake time."""
        self.reads += 1
        return self.now


def test_without_operation_listeners_an_operation_reads_no_clock() -> None:
    """Untimed (no listener: metrics off): a first-attempt success never reads the clock and
    its cycle has no start time; with a listener it is timed, and removing it untimes it."""
    clock = CountingClock()
    state = client(CURRENT_SPEC, clock)
    cycle = AttemptCycle(state, "find")
    assert drive(cycle, clock, lambda _server: None) == ["ok on a"]
    assert (cycle.started_at, clock.reads, state.timed) == (None, 0, False)
    finished = Finished()
    state.add_listener(finished)
    assert state.timed
    cycle = AttemptCycle(state, "find")
    assert drive(cycle, clock, lambda _server: None) == ["ok on a"]
    assert clock.reads == 2  # the start and the end
    state.remove_listener(finished)
    reads = clock.reads
    assert drive(AttemptCycle(state, "find"), clock, lambda _server: None) == ["ok on a"]
    assert (state.timed, clock.reads) == (False, reads)


def test_timed_operations_carry_their_name_duration_and_error_type() -> None:
    """With an operation listener every operation's event has its name and its duration from
    start to end (each attempt takes 0.01 s, backoffs included); a failure has its error type
    (the overload label for a server's overload error, else the class name) and code."""
    clock = FakeClock()
    finished = Finished()
    state = client(CURRENT_SPEC, clock, (finished,))

    def slow(reply: Reply) -> Callable[[tuple[str, int]], Reply]:
        def answer(_server: tuple[str, int]) -> Reply:
            clock.advance(0.01)
            return reply

        return answer

    drive(AttemptCycle(state, "find"), clock, slow(None))
    replies = iter([overload(), overload(), None])
    drive(AttemptCycle(state, "insert"), clock, lambda s: slow(next(replies))(s))
    shed = OperationFailure("shed", 462, {"errorLabels": [SYSTEM_OVERLOADED, RETRYABLE]})
    drive(AttemptCycle(state, "update"), clock, slow(shed))
    drive(AttemptCycle(state, "delete"), clock, slow(NetworkTimeout("slow")))
    events = [
        (e.operation, round(e.duration or -1, 6), e.error_type, e.error_code, e.server)
        for e in finished.events
    ]
    assert events == [
        ("find", 0.01, None, None, A),
        ("insert", 0.03 + 0.2 + 0.4, None, None, A),
        ("update", 0.03 + 0.2 + 0.4, "SystemOverloadedError", 462, A),
        ("delete", 0.01, "NetworkTimeout", None, A),
    ]
