"""Timelines of the adaptive pacing core (fake clock, no sleeping)."""

from __future__ import annotations

import logging
import threading

import pytest
from pymongo.errors import PyMongoError

from backpressure.core.adaptive import (
    ClientPacers,
    LocalOverloadError,
    LocalRefusalEvent,
    LocalWaitEvent,
    LogRateLimit,
    PacingGate,
    Refusal,
    SlotGrant,
)
from backpressure.core.decision import StopReason
from backpressure.core.labels import RETRYABLE, SYSTEM_OVERLOADED
from backpressure.core.policy import ADAPTIVE, Policy
from tests.fakes import FakeClock

A = ("a", 27017)
B = ("b", 27017)


def overload_error() -> PyMongoError:
    """A load-shedding error as the server sends it."""
    return PyMongoError("rate exceeded", error_labels=[SYSTEM_OVERLOADED, RETRYABLE])


def admitted(
    control: ClientPacers,
    clock: FakeClock,
    server: tuple[str, int],
    rate: float,
    seconds: float,
) -> None:
    """Feed ``rate`` admitted replies per second for ``seconds`` (unpaced sends)."""
    step = 1.0 / rate
    for _ in range(round(rate * seconds)):
        clock.advance(step)
        control.record(server, overloaded=False)


def close(control: ClientPacers, server: tuple[str, int] = A) -> None:
    """Record pushbacks until the pacer of ``server`` closes (an overload, not a blip)."""
    for _ in range(1000):
        control.record(server, overloaded=True)
        if control.is_paced(server):
            return
    raise AssertionError("the pacer never closed")


def test_open_pacer_sends_everything_at_once_and_creates_nothing() -> None:
    """Without pushback every attempt is sent now and no pacer is created by admit."""
    control = ClientPacers(ADAPTIVE, clock=FakeClock())
    for _ in range(1000):
        assert control.admit(A) == SlotGrant(0.0)
    assert control.snapshot() == {}
    assert not control.pushing_back()


def test_paced_attempts_get_consecutive_slots_in_arrival_order() -> None:
    """Callers arriving together get waits 0, 1/r, 2/r, ... (first come, first served)."""
    clock = FakeClock()
    control = ClientPacers(ADAPTIVE, clock=clock)
    admitted(control, clock, A, 100.0, 1.0)
    close(control)
    rate = control.snapshot()[A].rate
    assert rate is not None
    waits = []
    for _ in range(5):
        decision = control.admit(A)
        assert isinstance(decision, SlotGrant)
        waits.append(decision.wait)
    assert waits == pytest.approx([i / rate for i in range(5)], rel=1e-3)
    assert not control.is_paced(B)
    assert control.is_paced(A)


def paced_at_90(clock: FakeClock) -> tuple[ClientPacers, float]:
    """A control whose pacer of A paces at about 90/s (no probe yet); returns it and its rate."""
    control = ClientPacers(ADAPTIVE.replace(adaptive_decrease=0.9), clock=clock)
    admitted(control, clock, A, 100.0, 1.0)
    close(control)
    rate = control.snapshot()[A].rate
    assert rate is not None
    return control, rate


def waits_of(decisions: list[object]) -> list[float]:
    """The waits of admissions (fails on a refusal)."""
    waits = []
    for decision in decisions:
        assert isinstance(decision, SlotGrant)
        waits.append(decision.wait)
    return waits


def admission(decision: object) -> SlotGrant:
    """The decision as an SlotGrant (fails on a refusal)."""
    assert isinstance(decision, SlotGrant)
    return decision


def rechecked(control: ClientPacers, decision: SlotGrant) -> float:
    """What a recheck of ``decision`` answers as a further wait (fails on a refusal)."""
    again = control.recheck(A, decision)
    assert isinstance(again, float)
    return again


def test_a_retry_after_pushback_takes_the_first_waiting_slot_and_moves_the_queue_back() -> None:
    """The retry takes the slot of the first waiting first attempt; each waiting first attempt
    learns on recheck that it moved to the slot of the one behind it, and the last one to the
    next free slot: no slot is given twice."""
    clock = FakeClock()
    control, rate = paced_at_90(clock)
    queued = [admission(control.admit(A)) for _ in range(5)]
    assert [d.wait for d in queued] == pytest.approx([i / rate for i in range(5)], rel=1e-3)
    assert queued[0].ticket is None  # sent now: nothing to move
    retry = admission(control.admit(A, retry=True))
    assert retry.wait == pytest.approx(1 / rate, rel=1e-3)  # the first waiting slot
    assert retry.slot == queued[1].slot
    clock.advance(1 / rate)  # the first waiting caller wakes at its old slot
    assert rechecked(control, queued[1]) == pytest.approx(1 / rate, rel=1e-3)
    assert rechecked(control, retry) == 0.0
    later = admission(control.admit(A))
    assert later.wait == pytest.approx(5 / rate, rel=1e-3)  # slot 6: one behind the old back
    slots = [d.send_slot for d in (*queued, retry, later)]
    assert len(set(slots)) == len(slots)
    start = queued[0].slot
    assert start is not None
    assert sorted(s - start for s in slots if s is not None) == pytest.approx(
        [k / rate for k in range(7)], rel=1e-3
    )


def test_waiting_retries_keep_their_order() -> None:
    """A second retry goes behind the first one (and ahead of the first attempts)."""
    clock = FakeClock()
    control, rate = paced_at_90(clock)
    queued = [admission(control.admit(A)) for _ in range(4)]
    first = admission(control.admit(A, retry=True))
    second = admission(control.admit(A, retry=True))
    assert first.wait == pytest.approx(1 / rate, rel=1e-3)
    assert second.wait == pytest.approx(2 / rate, rel=1e-3)
    assert rechecked(control, first) == pytest.approx(1 / rate, rel=1e-3)
    assert rechecked(control, second) == pytest.approx(2 / rate, rel=1e-3)
    assert [rechecked(control, d) for d in queued[1:]] == pytest.approx(
        [3 / rate, 4 / rate, 5 / rate], rel=1e-3
    )


def test_a_first_attempt_moved_past_its_deadline_is_refused_on_recheck() -> None:
    """The shift stops at the first attempt it would push past its bound: that one is refused
    when it asks again, and the ones behind it keep their slots."""
    clock = FakeClock()
    control, rate = paced_at_90(clock)
    admission(control.admit(A))  # sent now
    tight = admission(control.admit(A, deadline=clock.now + 1.5 / rate))  # slot 1, bound 1.5
    behind = [admission(control.admit(A)) for _ in range(3)]
    retry = admission(control.admit(A, retry=True))
    assert retry.slot == tight.slot
    refusal = control.recheck(A, tight)
    assert isinstance(refusal, Refusal)
    assert refusal.reason is StopReason.LOCAL_WAIT_DEADLINE
    assert refusal.wait == pytest.approx(2 / rate, rel=1e-3)
    assert [rechecked(control, d) for d in behind] == pytest.approx(
        [d.wait for d in behind], rel=1e-3
    )
    later = admission(control.admit(A))
    assert later.wait == pytest.approx(5 / rate, rel=1e-3)  # the back did not move


def test_a_retry_queues_at_the_back_when_no_first_attempt_waits() -> None:
    """With nobody waiting, or only retries, a retry takes the next free slot like anyone."""
    clock = FakeClock()
    control, rate = paced_at_90(clock)
    assert admission(control.admit(A, retry=True)).wait == 0.0
    assert admission(control.admit(A, retry=True)).wait == pytest.approx(1 / rate, rel=1e-3)
    assert admission(control.admit(A, retry=True)).wait == pytest.approx(2 / rate, rel=1e-3)


def test_retries_and_first_attempts_together_hold_one_slot_each() -> None:
    """However retries and first attempts interleave, n admissions hold n distinct slots spaced
    one interval apart (the send rate is the pace)."""
    clock = FakeClock()
    control, rate = paced_at_90(clock)
    decisions = [
        admission(control.admit(A, retry=retry))
        for retry in (False, False, True, True, False, True, False, True, True, False)
    ]
    slots = sorted(d.send_slot or 0.0 for d in decisions)
    gaps = [b - a for a, b in zip(slots, slots[1:])]
    assert gaps == pytest.approx([1 / rate] * (len(slots) - 1), rel=1e-3)
    assert control.snapshot()[A].backlog == pytest.approx(len(slots) / rate, rel=1e-3)


def test_a_retry_goes_ahead_where_a_first_attempt_would_miss_its_deadline() -> None:
    """Behind a queue longer than the time left, a first attempt is refused and a retry is not."""
    clock = FakeClock()
    control, rate = paced_at_90(clock)
    admission(control.admit(A))
    waits_of([control.admit(A) for _ in range(45)])  # half a second of queue
    deadline = clock.now + 0.3
    first = admission(control.admit(A, deadline=deadline))  # held until its deadline ...
    assert first.wait == pytest.approx(0.3)
    refusal = control.recheck(A, first)  # ... and then refused, never sent
    assert isinstance(refusal, Refusal)
    assert refusal.reason is StopReason.LOCAL_WAIT_DEADLINE
    retry = admission(control.admit(A, deadline=deadline, retry=True))
    assert retry.wait == pytest.approx(1 / rate, rel=1e-3)


def test_recheck_of_an_attempt_sent_now_or_past_its_slot_answers_zero() -> None:
    """No ticket, or the slot reached: send now."""
    clock = FakeClock()
    control, rate = paced_at_90(clock)
    now = admission(control.admit(A))
    waiting = admission(control.admit(A))
    assert rechecked(control, now) == 0.0
    assert rechecked(control, waiting) == pytest.approx(1 / rate, rel=1e-3)
    clock.advance(1 / rate - 1e-4)  # a timer firing a little early still sends
    assert rechecked(control, waiting) == 0.0


def test_gate_recheck_refusal_raises_and_notifies() -> None:
    """The gate turns a refusal on recheck into LocalOverloadError and a refusal event."""
    clock = FakeClock()
    control, rate = paced_at_90(clock)
    refusals: list[LocalRefusalEvent] = []

    class Listener:
        def refused(self, event: LocalRefusalEvent) -> None:
            refusals.append(event)

    gate = PacingGate(control, listeners=[Listener()])
    gate.admit("find", A, None)
    tight = gate.admit("find", A, clock.now + 1.5 / rate)
    gate.admit("find", A, None, retry=True)
    with pytest.raises(LocalOverloadError) as raised:
        gate.recheck("find", A, tight)
    assert raised.value.reason is StopReason.LOCAL_WAIT_DEADLINE
    assert [e.operation for e in refusals] == ["find"]
    assert gate.recheck("find", A, gate.admit("find", A, None)) > 0.0


def test_gate_that_may_not_hold_sends_now_and_reserves_nothing() -> None:
    """hold=False (test mode): a paced server's attempts go now, unrefused, unannounced, and
    the queue is left as it was (the next held attempt gets the slot it would have had)."""
    clock = FakeClock()
    control, rate = paced_at_90(clock)
    events: list[object] = []

    class Listener:
        def waited(self, event: LocalWaitEvent) -> None:
            events.append(event)

        def refused(self, event: LocalRefusalEvent) -> None:
            events.append(event)

    gate = PacingGate(control, listeners=[Listener()])
    assert gate.admit("find", A, None).wait == 0.0  # the slot due now
    for _ in range(1000):  # far past max_local_wait and any deadline, were they held
        assert gate.admit("find", A, clock.now, hold=False) == SlotGrant(0.0)
    assert events == []
    assert gate.admit("find", A, None).wait == pytest.approx(1 / rate)
    assert control.is_paced(A)


def test_retry_priority_does_nothing_while_the_server_is_unpaced() -> None:
    """An open pacer sends every attempt now, retry or not."""
    control = ClientPacers(ADAPTIVE, clock=FakeClock())
    assert control.admit(A, retry=True) == SlotGrant(0.0)
    control.record(A, overloaded=False)
    assert control.admit(A, retry=True) == SlotGrant(0.0)


def test_wait_past_max_local_wait_is_held_then_refused_without_reserving() -> None:
    """A wait longer than max_local_wait is held that long, then refused (a closed loop must
    not spin on refusals); it leaves the queue as it was."""
    clock = FakeClock()
    policy = ADAPTIVE.replace(max_local_wait=0.05, adaptive_min_rate=1.0, adaptive_decrease=0.9)
    control = ClientPacers(policy, clock=clock)
    admitted(control, clock, A, 100.0, 1.0)
    close(control)  # paced at about 90/s
    rate = control.snapshot()[A].rate
    assert rate is not None
    assert 85 < rate < 95
    decisions = [admission(control.admit(A)) for _ in range(8)]
    answers = [control.recheck(A, d) for d in decisions]
    refused = [r for r in answers if isinstance(r, Refusal)]
    assert len(refused) == 3
    assert [d.wait for d in decisions[5:]] == pytest.approx([0.05] * 3)  # held, not spun
    assert all(r.reason is StopReason.LOCAL_WAIT_LIMIT for r in refused)
    assert refused[0].wait == pytest.approx(5 / rate, rel=1e-3)
    backlog = control.snapshot()[A].backlog
    assert backlog == pytest.approx(5 / rate, rel=1e-3)


def test_wait_past_the_deadline_is_refused_with_the_deadline_reason() -> None:
    """The deadline bounds the wait when it is closer than max_local_wait; a caller whose
    deadline has passed is refused at once (there is nothing left to hold)."""
    clock = FakeClock()
    control = ClientPacers(ADAPTIVE, clock=clock)
    admitted(control, clock, A, 10.0, 2.0)
    close(control)  # 8/s
    assert isinstance(control.admit(A, deadline=clock.now + 1.0), SlotGrant)
    held = admission(control.admit(A, deadline=clock.now + 0.05))
    assert held.wait == pytest.approx(0.05)
    clock.advance(held.wait)
    decision = control.recheck(A, held)
    assert isinstance(decision, Refusal)
    assert decision.reason is StopReason.LOCAL_WAIT_DEADLINE
    past = control.admit(A, deadline=clock.now - 1.0)
    assert isinstance(past, Refusal)
    assert past.reason is StopReason.LOCAL_WAIT_DEADLINE


def test_pacer_reopens_when_nobody_waited_for_a_window() -> None:
    """Once demand falls below the paced rate for a window, the server is unthrottled."""
    clock = FakeClock()
    control = ClientPacers(ADAPTIVE, clock=clock)
    admitted(control, clock, A, 100.0, 1.0)
    control.record(A, overloaded=True)
    for _ in range(3):  # light demand: 1 attempt every 0.5 s never waits
        clock.advance(0.5)
        decision = control.admit(A)
        assert decision == SlotGrant(0.0, decision.round if isinstance(decision, SlotGrant) else 0)
    assert not control.is_paced(A)
    assert control.admit(A) == SlotGrant(0.0)


def test_refused_callers_keep_the_pacer_closed() -> None:
    """A pacer that refuses callers limits them: it does not reopen as if nobody waited."""
    clock = FakeClock()
    policy = ADAPTIVE.replace(adaptive_increase=0.001, adaptive_quiet=60.0)
    control = ClientPacers(policy, clock=clock)
    admitted(control, clock, A, 100.0, 1.0)
    close(control)
    for _ in range(300):  # a queue three seconds deep, then only refusals for two seconds
        assert isinstance(control.admit(A, deadline=clock.now + 5.0), SlotGrant)
    for _ in range(200):
        clock.advance(0.01)
        held = admission(control.admit(A, deadline=clock.now + 0.05))
        assert isinstance(control.recheck(A, held), Refusal)
    assert control.is_paced(A)


def test_an_inflated_reply_time_never_refuses_every_caller() -> None:
    """The reply-time margin takes at most half the time left, so a stall cannot lock out."""
    clock = FakeClock()
    control = ClientPacers(ADAPTIVE, clock=clock)
    admitted(control, clock, A, 100.0, 1.0)
    control.record(A, overloaded=True)
    admission = control.admit(A, deadline=clock.now + 1.0)
    assert isinstance(admission, SlotGrant)
    clock.advance(0.9)  # one reply after a 0.9 s stall: estimate 0.45 s, margin 0.9 s
    control.record(A, overloaded=False, grant=admission)
    assert isinstance(control.admit(A, deadline=clock.now + 1.0), SlotGrant)


def test_rate_never_goes_below_min_rate() -> None:
    """Repeated pushback (each round admitting something) bottoms out at adaptive_min_rate."""
    clock = FakeClock()
    policy = ADAPTIVE.replace(adaptive_min_rate=5.0, adaptive_increase=0.001)
    control = ClientPacers(policy, clock=clock)
    close(control)
    rates = []
    for _ in range(100):
        clock.advance(0.2)  # a round is at least a tenth of the window
        for overloaded in (False, True):
            sent = admission(control.admit(A))
            clock.advance(sent.wait)
            control.record(A, overloaded=overloaded, grant=sent)
        rates.append(control.snapshot()[A].rate)
    # (A pushback that no cut moves makes the pacer compete after a while: its rate then
    # stays where it was.)
    assert min(rates) == pytest.approx(5.0, rel=1e-3)
    assert rates.index(min(rates)) < 20


def test_unknown_server_is_never_paced() -> None:
    """An attempt whose server is unknown is sent at once and records nothing."""
    control = ClientPacers(ADAPTIVE, clock=FakeClock())
    control.record(None, overloaded=True)
    assert control.admit(None) == SlotGrant(0.0)
    assert control.snapshot() == {}


def test_a_caller_admitted_as_the_rising_rate_respaces_the_queue_joins_the_queue() -> None:
    """When a caller's admission finds the rate risen enough to re-space the waiting slots, the
    caller's own slot is queued behind them (it moves with later re-spacings, and the snapshot
    counts it): every caller still waiting is in the queue, before and after the re-spacing."""
    clock = FakeClock()
    control, rate = paced_at_90(clock)
    grants: list[SlotGrant] = []
    respaced = False
    for _ in range(14):
        grants += [admission(control.admit(A)) for _ in range(10)]
        now = clock()
        tickets = [g.ticket for g in grants if g.ticket is not None]
        outstanding = sum(1 for t in tickets if not t.refused and t.slot > now)
        snapshot = control.snapshot()[A]
        assert snapshot.waiting == outstanding
        assert snapshot.rate is not None
        respaced = respaced or snapshot.rate > 1.1 * rate
        clock.advance(0.1)
    assert respaced  # the rate rose past the re-spacing threshold while callers waited


def test_concurrent_reservations_never_share_a_slot() -> None:
    """Threads reserving at once get distinct slots (the lock covers the arithmetic)."""
    clock = FakeClock()
    control = ClientPacers(ADAPTIVE.replace(max_local_wait=1000.0), clock=clock)
    admitted(control, clock, A, 100.0, 1.0)
    close(control)
    waits: list[float] = []
    lock = threading.Lock()

    def reserve() -> None:
        for _ in range(200):
            decision = control.admit(A)
            assert isinstance(decision, SlotGrant)
            with lock:
                waits.append(decision.send_slot or 0.0)

    threads = [threading.Thread(target=reserve) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({round(w, 9) for w in waits}) == 800


class Recorder:
    """An pacing listener that keeps what it receives."""

    def __init__(self) -> None:
        self.events: list[object] = []

    def waited(self, event: LocalWaitEvent) -> None:
        self.events.append(event)

    def refused(self, event: LocalRefusalEvent) -> None:
        self.events.append(event)


class Broken:
    """A listener whose callbacks fail."""

    def waited(self, event: LocalWaitEvent) -> None:
        raise RuntimeError("listener bug")


def test_gate_announces_waits_and_raises_local_overload_on_refusal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Waits and refusals are events; a refusal raises a PyMongoError labelled overload only."""
    clock = FakeClock()
    control = ClientPacers(ADAPTIVE.replace(max_local_wait=0.015), clock=clock)
    recorder = Recorder()
    gate = PacingGate(control, listeners=[Broken(), recorder, object()])
    admitted(control, clock, A, 100.0, 1.0)
    while not control.is_paced(A):
        gate.record(A, None, overload_error())
    caplog.set_level(logging.INFO, logger="backpressure")
    assert gate.admit("find", A, None).wait == 0.0
    assert gate.admit("find", A, None).wait > 0.0
    held = gate.admit("insert", A, None)  # held for max_local_wait, then refused
    assert held.wait == pytest.approx(0.015)
    with pytest.raises(LocalOverloadError) as info:
        gate.recheck("insert", A, held)
    error = info.value
    assert isinstance(error, PyMongoError)
    assert error.has_error_label(SYSTEM_OVERLOADED)
    assert not error.has_error_label(RETRYABLE)
    assert error.reason is StopReason.LOCAL_WAIT_LIMIT
    assert error.server == A
    kinds = [type(e).__name__ for e in recorder.events]
    assert kinds == ["LocalWaitEvent", "LocalRefusalEvent"]  # a hold is announced as the refusal
    refusal = recorder.events[1]
    assert isinstance(refusal, LocalRefusalEvent)
    assert refusal.operation == "insert"
    assert "pacing listener" in caplog.text  # the broken listener is logged, not raised
    assert "not sending insert to a:27017" in caplog.text


def test_gate_ignores_errors_that_are_not_overload() -> None:
    """A network error says nothing about the server's rate: the pacer stays open."""
    clock = FakeClock()
    control = ClientPacers(ADAPTIVE, clock=clock)
    gate = PacingGate(control)
    assert gate.record(A, None, PyMongoError("connection reset")) is False
    assert not control.is_paced(A)
    assert gate.record(A, None, None) is False
    assert gate.record(A, None, overload_error()) is True  # pushed back: the retry goes first
    assert not control.is_paced(A)  # one pushback is a blip
    assert gate.record(A, None, overload_error()) is True
    assert control.is_paced(A)  # two within the window, a tenth of the replies: overload


def test_gate_logs_are_rate_limited(caplog: pytest.LogCaptureFixture) -> None:
    """Many waits within the interval make one log line, the next line counts the rest."""
    clock = FakeClock()
    control = ClientPacers(ADAPTIVE.replace(max_local_wait=1000.0), clock=clock)
    gate = PacingGate(control, log_interval=0.2)
    admitted(control, clock, A, 100.0, 1.0)
    while not control.is_paced(A):
        gate.record(A, None, overload_error())
    caplog.set_level(logging.INFO, logger="backpressure")
    for _ in range(50):
        gate.admit("find", A, None)
    lines = [r for r in caplog.records if "holding find" in r.getMessage()]
    assert len(lines) == 1
    clock.advance(0.2)
    gate.admit("find", A, None)
    lines = [r.getMessage() for r in caplog.records if "holding find" in r.getMessage()]
    assert len(lines) == 2
    assert "48 more local wait(s)" in lines[1]


def test_log_rate_limit_validates_interval() -> None:
    """The interval must be a finite number >= 0."""
    with pytest.raises(TypeError, match="interval"):
        LogRateLimit("5")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="interval"):
        LogRateLimit(-1.0)


@pytest.mark.parametrize(
    ("field", "value", "allowed"),
    [
        ("max_local_wait", 0.0, "> 0"),
        ("adaptive_decrease", 1.0, "> 0 and < 1"),
        ("adaptive_window", 0.01, "0.05..60"),
        ("adaptive_increase", 0.0, "> 0 and <= 1e6"),
        ("adaptive_increase", 2e6, "> 0 and <= 1e6"),
        ("adaptive_quiet", 0.01, "0.05..60"),
        ("adaptive_quiet", 61.0, "0.05..60"),
        ("adaptive_min_rate", 0.0, "> 0"),
        ("budget_ratio", 0.0, "> 0 and <= 1"),
        ("budget_scope", "cluster", "'client', 'server'"),
        ("budget_mode", "leaky", "'bucket', 'ratio', 'a6'"),
        ("budget_mode", 3, "'bucket', 'ratio', 'a6'"),
        ("adaptive", "yes", "a bool"),
        ("max_local_wait", float("inf"), "finite"),
    ],
)
def test_adaptive_fields_are_validated(field: str, value: object, allowed: str) -> None:
    """Every new field names itself and its allowed range in the error."""
    with pytest.raises(Exception, match=f"Policy.{field} must be") as info:
        Policy(**{field: value})
    assert allowed in str(info.value)
