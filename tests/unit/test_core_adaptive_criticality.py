"""Timelines of the pacer's two classes: critical attempts first, sheddable ones shed first."""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from pymongo.errors import PyMongoError

from backpressure.core.adaptive import (
    ClientPacers,
    LocalOverloadError,
    PacingGate,
    Refusal,
    SlotGrant,
    SlotTicket,
)
from backpressure.core.adaptive.pacer import ServerPacer
from backpressure.core.decision import GiveUp, Retry, RetryController, StopReason
from backpressure.core.labels import RETRYABLE, SYSTEM_OVERLOADED
from backpressure.core.policy import ADAPTIVE
from tests.fakes import FakeClock

A = ("a", 27017)


def paced(clock: FakeClock, **changes: float) -> tuple[ClientPacers, float]:
    """A control whose pacer of ``A`` closed after 1 s of 100 admitted replies/s; its rate."""
    control = ClientPacers(ADAPTIVE.replace(**changes), clock=clock)
    for _ in range(100):
        clock.advance(0.01)
        control.record(A, overloaded=False)
    for _ in range(1000):
        control.record(A, overloaded=True)
        if control.is_paced(A):
            break
    rate = control.snapshot()[A].rate
    assert rate is not None
    return control, rate


def admission(decision: object) -> SlotGrant:
    """The decision as an SlotGrant (fails on a refusal)."""
    assert isinstance(decision, SlotGrant)
    return decision


def slot(decision: SlotGrant) -> float:
    """The slot the decision reserved (fails when nothing was reserved)."""
    assert decision.ticket is not None
    return decision.ticket.slot


def test_open_pacer_sends_sheddable_attempts_now() -> None:
    """Before a server pushes back, criticality changes nothing: every attempt is sent now."""
    control = ClientPacers(ADAPTIVE, clock=FakeClock())
    assert control.admit(A, sheddable=True) == SlotGrant(0.0)
    assert control.admit(A, sheddable=True, retry=True) == SlotGrant(0.0)


def test_critical_attempts_take_the_slots_of_waiting_sheddable_ones_in_arrival_order() -> None:
    """Critical callers arriving behind sheddable ones are served first, first come first served;
    each sheddable caller moves back one slot per critical caller."""
    clock = FakeClock()
    control, rate = paced(clock)
    start = clock()
    shed = [admission(control.admit(A, sheddable=True)) for _ in range(4)]
    crit = [admission(control.admit(A)) for _ in range(2)]
    step = 1.0 / rate
    assert shed[0].wait == 0.0  # due now: already sending, nothing takes its place
    assert [slot(d) for d in crit] == pytest.approx([start + step, start + 2 * step])
    assert [slot(d) for d in shed[1:]] == pytest.approx([start + i * step for i in (3, 4, 5)])
    assert control.snapshot()[A].backlog == pytest.approx(6 * step)


def test_classes_order_critical_retries_critical_first_attempts_then_sheddable() -> None:
    """The queue is in class order: critical retries, critical first attempts, sheddable retries,
    sheddable first attempts, whatever order they arrived in."""
    clock = FakeClock()
    control, rate = paced(clock)
    control.admit(A)  # takes the slot due now
    arrivals = [
        ("shed", admission(control.admit(A, sheddable=True))),
        ("shed-retry", admission(control.admit(A, sheddable=True, retry=True))),
        ("crit", admission(control.admit(A))),
        ("crit-retry", admission(control.admit(A, retry=True))),
    ]
    order = [name for name, d in sorted(arrivals, key=lambda item: slot(item[1]))]
    assert order == ["crit-retry", "crit", "shed-retry", "shed"]
    slots = sorted(slot(d) for _, d in arrivals)
    assert [b - a for a, b in zip(slots, slots[1:])] == pytest.approx([1.0 / rate] * 3)


def test_sheddable_attempt_moved_past_its_deadline_is_held_until_it_then_refused() -> None:
    """A sheddable caller pushed past its deadline by critical ones is not refused early (a closed
    loop would spin): its recheck holds it until its bound, then refuses it."""
    clock = FakeClock()
    control, rate = paced(clock, adaptive_min_rate=1.0)
    control.admit(A)  # the slot due now
    step = 1.0 / rate
    deadline = clock() + 2.5 * step  # room for slot 1 or 2, not 3
    shed = admission(control.admit(A, deadline, sheddable=True))
    assert slot(shed) == pytest.approx(clock() + step)
    for _ in range(2):
        admission(control.admit(A, clock() + 10.0))
    assert shed.ticket is not None
    assert shed.ticket.refused
    hold = control.recheck(A, shed)
    assert hold == pytest.approx(deadline - clock())  # held, not refused yet
    clock.advance(hold)
    refusal = control.recheck(A, shed)
    assert isinstance(refusal, Refusal)
    assert refusal.reason is StopReason.LOCAL_WAIT_DEADLINE


def test_a_move_back_stops_at_the_attempt_it_refuses() -> None:
    """A critical caller moves the sheddable ones behind it back one slot each until one passes
    its bound: that one is refused (holding the slot it would have had), the ones behind it keep
    their slots and the backlog does not grow."""
    clock = FakeClock()
    control, rate = paced(clock, adaptive_min_rate=1.0)
    control.admit(A)  # the slot due now
    start, step = clock(), 1.0 / rate
    loose = clock() + 10.0
    shed = [
        admission(control.admit(A, deadline, sheddable=True))
        for deadline in (loose, clock() + 2.5 * step, loose, loose)
    ]
    assert [slot(d) for d in shed] == pytest.approx([start + i * step for i in (1, 2, 3, 4)])
    crit = admission(control.admit(A, loose))
    assert slot(crit) == pytest.approx(start + step)
    assert [slot(d) for d in shed] == pytest.approx([start + i * step for i in (2, 3, 3, 4)])
    assert [d.ticket is not None and d.ticket.refused for d in shed] == [False, True, False, False]
    assert control.snapshot()[A].backlog == pytest.approx(5 * step)
    assert control.snapshot()[A].waiting == 4  # the refused one left the queue
    later = admission(control.admit(A, loose))  # the next critical caller takes slot 2
    assert slot(later) == pytest.approx(start + 2 * step)
    assert [slot(d) for d in shed] == pytest.approx([start + i * step for i in (3, 3, 4, 5)])


@given(st.lists(st.integers(0, 3), max_size=300).map(sorted), st.integers(0, 2))
def test_the_class_boundary_is_the_first_waiting_attempt_of_a_later_class(
    ranks: list[int], rank: int
) -> None:
    """In a queue in class order, the boundary an attempt of ``rank`` takes its place at is the
    first waiting attempt of a later class, however long the queue and its classes."""
    assume(bool(ranks) and ranks[-1] > rank)
    waiting = deque(
        SlotTicket(float(i), 10.0, StopReason.LOCAL_WAIT_LIMIT, r in (0, 2), r >= 2)
        for i, r in enumerate(ranks)
    )
    assert [t.rank for t in waiting] == ranks
    first = next(i for i, t in enumerate(waiting) if t.rank > rank)
    assert ServerPacer._class_end(waiting, rank) == first


def test_critical_attempt_moved_past_its_bound_by_a_retry_is_refused_as_before() -> None:
    """Unmarked operations keep today's rule: a first attempt moved past its bound by a retry
    learns it on its next recheck."""
    clock = FakeClock()
    control, rate = paced(clock)
    control.admit(A)
    step = 1.0 / rate
    first = admission(control.admit(A, clock() + 1.5 * step))
    admission(control.admit(A, clock() + 10.0, retry=True))
    assert isinstance(control.recheck(A, first), Refusal)


def test_critical_caller_does_not_jump_a_sheddable_slot_it_cannot_wait_for() -> None:
    """A critical caller whose bound comes before the first sheddable slot is held and refused;
    the queue stays as it was."""
    clock = FakeClock()
    control, rate = paced(clock)
    step = 1.0 / rate
    for _ in range(3):
        control.admit(A)
    shed = admission(control.admit(A, sheddable=True))
    before = slot(shed)
    crit = admission(control.admit(A, clock() + 1.5 * step))
    assert crit.ticket is not None
    assert crit.ticket.refused
    assert slot(shed) == before


def test_gate_refuses_a_held_sheddable_attempt_with_local_overload_error() -> None:
    """Through the gate, a sheddable attempt moved past its bound is held, then raises
    LocalOverloadError; a critical one keeps its slot."""
    clock = FakeClock()
    control, rate = paced(clock)
    gate = PacingGate(control)
    step = 1.0 / rate
    gate.admit("find", A, None)
    shed = gate.admit("find", A, clock() + 1.5 * step, sheddable=True)
    crit = gate.admit("find", A, clock() + 10.0)
    assert slot(crit) == pytest.approx(clock() + step)
    wait = gate.recheck("find", A, shed)
    assert wait > 0.0
    clock.advance(wait)
    with pytest.raises(LocalOverloadError):
        gate.recheck("find", A, shed)


def test_at_twice_the_rate_critical_callers_keep_their_deadline_and_sheddable_ones_are_shed() -> (
    None
):
    """Offered twice the paced rate, half of it sheddable: every critical caller is sent within
    its deadline; the sheddable callers absorb the whole excess."""
    clock = FakeClock()
    control, rate = paced(clock, adaptive_increase=1e-6, adaptive_quiet=60.0)
    timeout = 0.5
    sent = {"crit": 0, "shed": 0}
    refused = {"crit": 0, "shed": 0}
    waiting: list[tuple[str, SlotGrant, float]] = []
    dt = 1.0 / (2.0 * rate)
    for i in range(round(4.0 * rate)):  # 2 s at twice the rate, alternating classes
        kind = "shed" if i % 2 else "crit"
        decision = control.admit(A, clock() + timeout, sheddable=kind == "shed")
        if isinstance(decision, Refusal):
            refused[kind] += 1
        elif decision.wait == 0.0:
            sent[kind] += 1
        else:
            waiting.append((kind, decision, clock() + decision.wait))
        clock.advance(dt)
        due = [w for w in waiting if w[2] <= clock() + 1e-9]
        waiting = [w for w in waiting if w[2] > clock() + 1e-9]
        for kind_, decision_, _ in due:
            again = control.recheck(A, decision_)
            if isinstance(again, Refusal):
                refused[kind_] += 1
            elif again <= 0.0:
                sent[kind_] += 1
                control.record(A, overloaded=False, grant=decision_)
            else:
                waiting.append((kind_, decision_, clock() + again))
    offered = 2.0 * rate  # per class
    assert refused["crit"] == 0
    assert sent["crit"] >= offered - 2  # all of them (the last may still be waiting)
    assert sent["shed"] <= 0.05 * offered
    assert refused["shed"] >= 0.7 * offered  # the rest are held until their deadline


def test_a_sheddable_retry_leaves_the_last_budget_token_to_critical_ones() -> None:
    """With one token left, a sheddable operation's retry is refused for budget and a critical
    one takes the token; with a full budget both retry."""
    clock = FakeClock()
    error = PyMongoError("rate exceeded", error_labels=[SYSTEM_OVERLOADED, RETRYABLE])
    # adaptive keeps the current spec's retries (no budget): a per-server budget is opt-in.
    policy = ADAPTIVE.replace(
        budget_enabled=True, budget_scope="server", budget_mode="ratio", budget_capacity=10.0
    )
    controller = RetryController(
        policy.replace(budget_initial=1.0), random=lambda: 0.0, clock=clock
    )
    budget = controller.budget.for_server(A)
    assert budget.tokens == 1.0  # one token per server to start with
    shed = controller.decide(retry_number=1, error=error, server=A, sheddable=True)
    assert shed == GiveUp(StopReason.BUDGET_EMPTY)
    assert isinstance(controller.decide(retry_number=1, error=error, server=A), Retry)
    full = RetryController(policy.replace(budget_initial=10), random=lambda: 0.0, clock=clock)
    decision = full.decide(retry_number=1, error=error, server=A, sheddable=True)
    assert isinstance(decision, Retry)


def queue_for(control: ClientPacers, clock: FakeClock, seconds: float) -> None:
    """Reserve critical slots (generous deadlines) until a new caller would wait ``seconds``."""
    while control.snapshot()[A].backlog < seconds:
        admission(control.admit(A, clock() + 100.0))


def test_a_marking_clients_critical_attempt_no_slot_can_serve_is_sent_before_its_bound() -> None:
    """Once the client marks work sheddable, a critical first attempt whose slot is past its
    deadline waits until a fifth of a window before its bound (room for a retry) and is sent
    then (its last chance), instead of failing unsent; the reply, pushed back or admitted,
    changes neither the rate nor the counts the pacing judges by."""
    clock = FakeClock()
    control, _ = paced(clock)
    control.admit(A, sheddable=True)  # the slot due now: the client marks work
    queue_for(control, clock, 0.5)
    deadline = clock() + 0.4
    grant = admission(control.admit(A, deadline))
    assert grant.ticket is not None
    assert grant.ticket.last_chance
    # No reply time learned yet (no margin); a fifth of the 1 s window before the deadline.
    assert grant.wait == pytest.approx(0.4 - 0.2)
    clock.advance(0.1)
    assert control.recheck(A, grant) == pytest.approx(0.1)
    clock.advance(0.1)
    assert control.recheck(A, grant) == 0.0  # sent now
    before = control.snapshot()[A]
    control.record(A, overloaded=True, grant=grant)
    after = control.snapshot()[A]
    assert (after.rate, after.reply_rate, after.pushback_share) == (
        before.rate,
        before.reply_rate,
        before.pushback_share,
    )
    assert after.pushbacks == before.pushbacks + 1
    assert after.last_chance_sends == 1
    # Less than the lead left: sent at once.
    again = admission(control.admit(A, clock() + 0.1))
    assert again.ticket is not None
    assert again.ticket.last_chance
    assert again.wait == 0.0
    before = control.snapshot()[A]
    control.record(A, overloaded=False, grant=again)
    after = control.snapshot()[A]
    assert (after.rate, after.reply_rate) == (before.rate, before.reply_rate)
    assert after.last_chance_sends == 2


def test_only_a_marking_clients_critical_attempts_get_a_last_chance() -> None:
    """Unmarked work keeps the rule of every other attempt: held until its bound, then refused;
    so do a marking client's sheddable attempts, retries or not.  Its critical retry gets one."""
    clock = FakeClock()
    control, rate = paced(clock)
    step = 1.0 / rate
    for _ in range(3):
        control.admit(A)
    unmarked = admission(control.admit(A, clock() + 1.5 * step))
    assert unmarked.ticket is not None
    assert unmarked.ticket.refused
    assert not unmarked.ticket.last_chance
    clock.advance(unmarked.wait)
    assert isinstance(control.recheck(A, unmarked), Refusal)
    control.admit(A, sheddable=True)  # the client marks work from here on
    for _ in range(3):
        control.admit(A, clock() + 10.0)
    for retry in (False, True):
        # A quarter step: too soon for the first waiting slot a retry could take.
        grant = admission(control.admit(A, clock() + 0.25 * step, retry=retry, sheddable=True))
        assert grant.ticket is not None
        assert grant.ticket.refused
        assert not grant.ticket.last_chance
    assert control.snapshot()[A].last_chance_sends == 0
    retry = admission(control.admit(A, clock() + 0.25 * step, retry=True))
    assert retry.ticket is not None
    assert retry.ticket.last_chance
    assert retry.wait == 0.0  # less than the lead left: sent at once
    control.record(A, overloaded=False, grant=retry)
    assert control.snapshot()[A].last_chance_sends == 1


def test_a_critical_attempt_moved_past_its_bound_gets_its_last_chance_on_recheck() -> None:
    """A marking client's critical first attempt moved past its bound by a retry going ahead
    learns on its recheck that it is sent (less than the lead was left before its bound); a
    last chance whose caller wakes after its deadline is refused (the reply could not be
    used)."""
    clock = FakeClock()
    control, rate = paced(clock)
    step = 1.0 / rate
    control.admit(A, sheddable=True)  # the slot due now: the client marks work
    first = admission(control.admit(A, clock() + 1.5 * step))
    assert slot(first) == pytest.approx(clock() + step)
    admission(control.admit(A, clock() + 10.0, retry=True))  # takes its slot
    assert first.ticket is not None
    assert first.ticket.refused
    assert control.recheck(A, first) == 0.0
    assert first.ticket.last_chance
    queue_for(control, clock, 1.0)
    deadline = clock() + 0.5
    late = admission(control.admit(A, deadline))
    assert late.ticket is not None
    assert late.ticket.last_chance
    clock.advance(deadline - clock() + step)
    refusal = control.recheck(A, late)
    assert isinstance(refusal, Refusal)
    assert refusal.reason is StopReason.LOCAL_WAIT_DEADLINE


def test_a_client_stops_marking_work_five_windows_after_its_last_sheddable_attempt() -> None:
    """The last chance lasts while the client marks work: 4.5 windows after its last sheddable
    attempt a critical one no slot can serve still gets it, 5.5 windows after it is refused."""
    clock = FakeClock()
    control, rate = paced(clock, adaptive_increase=1e-6, adaptive_quiet=60.0)
    step = 1.0 / rate
    control.admit(A, sheddable=True)
    marked = clock()

    def tight() -> SlotGrant:
        """A critical first attempt the queue cannot serve before its deadline."""
        return admission(control.admit(A, clock() + 1.5 * step))

    outcomes = {}
    while clock() - marked < 5.5:
        for _ in range(round(rate)):  # a second of critical callers: the queue stays long
            control.admit(A, clock() + 100.0)
        clock.advance(0.5)
        if clock() - marked in (4.5, 5.5):
            grant = tight()
            assert grant.ticket is not None
            outcomes[clock() - marked] = grant.ticket.last_chance
    assert outcomes == {4.5: True, 5.5: False}
