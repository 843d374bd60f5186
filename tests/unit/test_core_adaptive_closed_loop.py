"""A closed loop of many callers against a rate-limited server, on a fake clock (no sleeping).

The server is a token bucket (``CAPACITY`` per second, one second of burst) that answers after
``REPLY_TIME``; every operation may take ``ALLOWED_WAIT`` seconds; a caller whose attempt is
refused locally starts its next operation after ``REFUSAL_COST`` (its own work between calls).
A waiting caller rechecks when its wait is over, as the adapters do (its slot may have moved).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Optional

import pytest

from backpressure.core.adaptive import ClientPacers, Refusal, SlotGrant
from backpressure.core.policy import ADAPTIVE
from tests.fakes import FakeClock

SERVER = ("primary", 27017)
CAPACITY = 200.0
ALLOWED_WAIT = 1.0
REPLY_TIME = 0.02
REFUSAL_COST = 0.05
START = 100.0


@dataclass
class LoopResult:
    """What the callers saw."""

    sent: int = 0
    replies_in_time: int = 0
    replies_too_late: int = 0
    refused: int = 0
    final_rate: Optional[float] = None


def run_closed_loop(workers: int, seconds: float) -> LoopResult:
    """Drive ``workers`` callers back to back for ``seconds`` through the real pacing core."""
    clock = FakeClock(START)
    control = ClientPacers(ADAPTIVE, clock=clock)
    result = LoopResult()
    tokens = CAPACITY
    refilled = START
    end = START + seconds
    queue: list[tuple[float, int, str, int, float, Optional[SlotGrant]]] = []
    order = 0

    def schedule(at: float, kind: str, deadline: float, admission: Optional[SlotGrant]) -> None:
        nonlocal order
        heapq.heappush(queue, (at, order, kind, 0, deadline, admission))
        order += 1

    for _ in range(workers):
        schedule(START, "start", 0.0, None)
    while queue:
        now, _, kind, _, deadline, admission = heapq.heappop(queue)
        clock.now = now
        if kind == "start":
            if now >= end:
                continue
            deadline = now + ALLOWED_WAIT
            kind = "admit"
        if kind == "admit":
            decision = control.admit(SERVER, deadline)
            if isinstance(decision, Refusal):
                result.refused += 1
                schedule(now + REFUSAL_COST, "start", 0.0, None)
            else:
                schedule(now + decision.wait, "send", deadline, decision)
        elif kind == "send":
            assert admission is not None
            again = control.recheck(SERVER, admission)
            if isinstance(again, Refusal):  # held until its bound, then refused
                result.refused += 1
                schedule(now + REFUSAL_COST, "start", 0.0, None)
                continue
            if again > 0.0:
                schedule(now + again, "send", deadline, admission)
                continue
            result.sent += 1
            tokens = min(CAPACITY, tokens + (now - refilled) * CAPACITY)
            refilled = now
            served = tokens >= 1.0
            if served:
                tokens -= 1.0
            schedule(now + REPLY_TIME, "reply" if served else "pushback", deadline, admission)
        elif now > deadline:  # the caller gave up before the reply: nothing is recorded
            result.replies_too_late += 1
            schedule(now, "start", 0.0, None)
        elif kind == "reply":
            control.record(SERVER, overloaded=False, grant=admission)
            result.replies_in_time += 1
            schedule(now, "start", 0.0, None)
        else:
            control.record(SERVER, overloaded=True, grant=admission)
            schedule(now, "admit", deadline, None)  # the overload retry
    result.final_rate = control.snapshot()[SERVER].rate
    return result


@pytest.mark.parametrize("workers", [32, 128, 512])
def test_closed_loop_keeps_the_server_busy_with_replies_that_arrive_in_time(workers: int) -> None:
    """Goodput stays near capacity however many callers wait, and few replies come too late.

    With 512 callers and a one-second deadline only ``CAPACITY`` of them fit per second: the
    others must be refused locally, and a freed slot must not go to a caller whose deadline
    ends before the reply can arrive (its reply would be wasted and the learned rate would sink).
    """
    seconds = 6.0
    result = run_closed_loop(workers, seconds)
    # The bucket's one-second burst plus the refill: at most CAPACITY * (seconds + 1) replies.
    assert result.replies_in_time >= 0.9 * CAPACITY * seconds
    assert result.replies_too_late <= 0.02 * result.sent
    assert result.final_rate is not None
    assert result.final_rate >= 0.8 * CAPACITY


def test_a_slot_whose_reply_would_miss_the_deadline_is_held_then_refused() -> None:
    """Once replies take ``REPLY_TIME``, a wait that leaves no time for the reply is refused.

    The caller is not refused at once (a closed loop would spin): it is held until its
    deadline, and refused when it asks again; nothing is reserved for it.
    """
    clock = FakeClock(START)
    control = ClientPacers(ADAPTIVE, clock=clock)
    control.record(SERVER, overloaded=False)
    clock.now += 0.01
    control.record(SERVER, overloaded=True)
    control.record(SERVER, overloaded=True)  # the second pushback in the window closes it
    first = control.admit(SERVER, clock.now + 1.0)
    assert isinstance(first, SlotGrant)
    assert first.slot is not None
    clock.now = first.slot + REPLY_TIME
    control.record(SERVER, overloaded=False, grant=first)
    # Fill the queue so that a new caller has to wait.
    for _ in range(5):
        assert isinstance(control.admit(SERVER, clock.now + 1.0), SlotGrant)
    backlog = control.snapshot()[SERVER].backlog
    assert backlog > 0.0
    # The deadline leaves room for the send but not for the reply: held until the deadline.
    deadline = clock.now + backlog + REPLY_TIME / 2
    late = control.admit(SERVER, deadline)
    assert isinstance(late, SlotGrant)
    assert late.wait == pytest.approx(deadline - clock.now)
    assert control.snapshot()[SERVER].backlog == pytest.approx(backlog)  # nothing reserved
    clock.now = deadline
    assert isinstance(control.recheck(SERVER, late), Refusal)
