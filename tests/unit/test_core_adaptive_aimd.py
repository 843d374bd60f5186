"""Timelines of the AIMD pacer on a fake clock (no sleeping): fleets, transients, faults.

A small event loop drives greedy clients (each always has an attempt ready, like a closed loop
with many callers) through the real :class:`ClientPacers` against one server: a token
bucket of ``capacity`` per second (``BURST`` seconds of burst, full at the start as mongod's
is) that answers after ``RTT``, and
that can be told to reject everything for a while.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Callable, Optional

import pytest

from backpressure.core.adaptive import ClientPacers, Refusal, SlotGrant
from backpressure.core.budget import budget_for
from backpressure.core.policy import ADAPTIVE, Policy
from tests.fakes import FakeClock

SERVER = ("primary", 27017)
RTT = 0.005
BURST = 0.05
START = 1000.0


@dataclass
class Server:
    """A token bucket whose rate may change, and windows in which it rejects everything."""

    capacity: Callable[[float], float]
    rejects: Callable[[float], bool] = lambda t: False
    tokens: Optional[float] = None
    """Tokens at START (None: full, as mongod's bucket starts)."""
    stamp: float = START

    def __post_init__(self) -> None:
        if self.tokens is None:
            self.tokens = self.capacity(START) * BURST

    def admit(self, now: float) -> bool:
        rate = self.capacity(now)
        assert self.tokens is not None
        self.tokens = min(rate * BURST, self.tokens + (now - self.stamp) * rate)
        self.stamp = now
        if self.rejects(now) or self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


@dataclass
class Client:
    """One greedy client: its admission control and what it saw."""

    control: ClientPacers
    joins: float = START
    admitted: list[float] = field(default_factory=list)
    rejected: list[float] = field(default_factory=list)


def run(
    clients: list[Client],
    server: Server,
    clock: FakeClock,
    until: float,
    callers: int = 8,
    stall: tuple[float, float] = (0.0, 0.0),
) -> None:
    """Run ``callers`` greedy callers per client until ``until`` (seconds after START).

    A send due within ``stall`` (seconds after START) waits for its end: the callers are held
    outside the pacing (a pool reopening its connections after a reset).
    """
    events: list[tuple[float, int, int, str, Optional[SlotGrant]]] = []
    order = 0

    def push(at: float, index: int, kind: str, admission: Optional[SlotGrant] = None) -> None:
        nonlocal order
        heapq.heappush(events, (at, order, index, kind, admission))
        order += 1

    for index, client in enumerate(clients):
        for _ in range(callers):
            push(client.joins, index, "admit")
    end = START + until
    while events:
        now, _, index, kind, admission = heapq.heappop(events)
        if now >= end:
            break
        clock.now = now
        client = clients[index]
        control = client.control
        if kind == "admit":
            decision = control.admit(SERVER, now + 1.0)
            assert isinstance(decision, SlotGrant)  # greedy callers never wait a second
            push(now + decision.wait, index, "send", decision)
        elif kind == "send":
            assert admission is not None
            again = control.recheck(SERVER, admission)
            assert not isinstance(again, Refusal)
            if again > 0.0:
                push(now + again, index, "send", admission)
            elif START + stall[0] <= now < START + stall[1]:
                push(START + stall[1], index, "send", admission)
            else:
                push(now + RTT, index, "ok" if server.admit(now) else "pushback", admission)
        else:
            overloaded = kind == "pushback"
            control.record(SERVER, overloaded=overloaded, grant=admission)
            (client.rejected if overloaded else client.admitted).append(now - START)
            push(now + 0.001, index, "admit")  # the caller's own work between attempts


def count(times: list[float], start: float, end: float) -> int:
    """How many of ``times`` fall in [start, end)."""
    return sum(1 for t in times if start <= t < end)


def jain(shares: list[float]) -> float:
    """Jain's fairness index."""
    return sum(shares) ** 2 / (len(shares) * sum(s * s for s in shares))


def client(clock: FakeClock, joins: float = 0.0, policy: Policy = ADAPTIVE) -> Client:
    """A client with its own admission control, joining ``joins`` seconds after START."""
    return Client(ClientPacers(policy, clock=clock), joins=START + joins)


def test_two_clients_converge_to_fair_shares() -> None:
    """A client joining late, while the first one holds the whole server, gets half of it
    within seconds (additive increase, multiplicative decrease), and the server stays busy."""
    clock = FakeClock(START)
    server = Server(capacity=lambda t: 200.0)
    first, late = client(clock), client(clock, joins=5.0)
    run([first, late], server, clock, until=20.0)
    shares = [count(c.admitted, 10.0, 20.0) / 10.0 for c in (first, late)]
    assert jain(shares) >= 0.95
    assert sum(shares) >= 0.9 * 200.0
    attempts = sum(count(c.admitted + c.rejected, 10.0, 20.0) for c in (first, late))
    assert attempts <= 1.1 * sum(count(c.admitted, 10.0, 20.0) for c in (first, late))


def test_a_stall_outside_the_pacing_does_not_cut_the_rate() -> None:
    """A paced client whose callers are held elsewhere for most of a second (its pool reopening
    connections after a reset: nothing sent, no reply) takes no neighbour test on its return,
    which would cut to what it sent meanwhile (nothing): it serves the server's capacity
    again at once, where the cut left it at a few attempts a second for seconds."""
    clock = FakeClock(START)
    alone = client(clock)
    run([alone], Server(capacity=lambda t: 200.0), clock, until=9.0, stall=(5.3, 6.2))
    assert count(alone.admitted, 4.0, 5.0) >= 0.9 * 200.0  # paced at the capacity before
    assert count(alone.admitted, 6.2, 7.2) >= 0.8 * 200.0
    assert count(alone.admitted, 7.2, 8.2) >= 0.9 * 200.0


def test_a_blip_changes_nothing() -> None:
    """A few rejections among many admitted replies (a transient) do not close the pacer:
    the transient costs the rejected attempts and nothing else."""
    clock = FakeClock(START)
    control = ClientPacers(ADAPTIVE, clock=clock)
    for _ in range(100):  # 100/s admitted
        clock.now += 0.01
        control.record(SERVER, overloaded=False)
    for _ in range(3):
        control.record(SERVER, overloaded=True)
    assert not control.is_paced(SERVER)
    for _ in range(400):  # demand x4 right after: nothing waits
        clock.now += 0.0025
        assert control.admit(SERVER, clock.now + 1.0) == SlotGrant(0.0)
        control.record(SERVER, overloaded=False)


def test_total_rejection_holds_the_rate_and_recovers_within_a_second() -> None:
    """A fault rejecting everything for 3 s does not collapse the rate (it is held once a round
    admits nothing: the client goes on probing at a steady pace), and the client is back at
    full rate within a second of the end."""
    clock = FakeClock(START)
    server = Server(capacity=lambda t: 200.0, rejects=lambda t: 5.0 <= t - START < 8.0)
    alone = client(clock)
    run([alone], server, clock, until=10.0)
    assert count(alone.admitted, 5.0 + RTT, 8.0) == 0  # nothing sent during the fault
    probes = [count(alone.rejected, t, t + 1.0) for t in (5.0, 6.0, 7.0)]
    assert min(probes) >= 0.3 * 200.0  # the pace is held, not collapsed
    assert probes[2] >= 0.8 * probes[1]
    assert count(alone.admitted, 8.0, 8.2) > 0
    assert count(alone.admitted, 8.5, 10.0) >= 0.9 * 200.0 * 1.5


def test_the_first_admitted_round_after_a_total_rejection_starts_the_climb() -> None:
    """A fault rejecting everything ends at 7.5 s (between two of the competing tests'
    instants): once the server has admitted everything for a round, the held rate climbs at
    once, so the client serves 70 % of the capacity in the 0.5 s after the end (waiting the
    held quiet stretch after the last pushback first, it served 60 of 100)."""
    clock = FakeClock(START)
    server = Server(capacity=lambda t: 200.0, rejects=lambda t: 5.0 <= t - START < 7.5)
    alone = client(clock)
    run([alone], server, clock, until=9.0)
    assert count(alone.admitted, 5.0 + RTT, 7.5) == 0
    assert count(alone.admitted, 7.5, 8.0) >= 0.7 * 200.0 * 0.5


def test_follows_a_capacity_drop_and_rise() -> None:
    """Capacity 200 -> 50 -> 300: the client follows the drop within two seconds, and the
    rise within five (a single client's additive increase is slow; the fast climb starts
    after a second without pushback)."""
    clock = FakeClock(START)

    def capacity(t: float) -> float:
        elapsed = t - START
        return 200.0 if elapsed < 5.0 else 50.0 if elapsed < 10.0 else 300.0

    alone = client(clock)
    run([alone], Server(capacity=capacity), clock, until=20.0)
    assert count(alone.admitted, 7.0, 10.0) >= 0.9 * 50.0 * 3.0
    attempts = count(alone.admitted + alone.rejected, 7.0, 10.0)
    assert attempts <= 1.2 * count(alone.admitted, 7.0, 10.0)
    assert count(alone.admitted, 15.0, 20.0) >= 0.9 * 300.0 * 5.0


def test_after_a_capacity_rise_the_climb_has_no_ceiling() -> None:
    """Capacity 50/s for 10 s, then 400/s: once the server has been quiet for
    ``adaptive_quiet`` (1 s), the rate doubles every quarter window past the rate of the last
    decrease, so the client serves more than 85 % of the new capacity from 1.75 s after the
    rise (capped at that rate for 2 windows, it served 58 %)."""
    clock = FakeClock(START)

    def capacity(t: float) -> float:
        return 50.0 if t - START < 10.0 else 400.0

    alone = client(clock)
    run([alone], Server(capacity=capacity), clock, until=13.0)
    assert count(alone.admitted, 8.0, 10.0) >= 0.9 * 50.0 * 2.0
    assert count(alone.admitted, 11.75, 12.75) >= 0.85 * 400.0
    attempts = count(alone.admitted + alone.rejected, 10.0, 13.0)
    assert attempts <= 1.1 * count(alone.admitted, 10.0, 13.0)


def _limited(limit_s: float) -> Callable[[float], float]:
    """5,000/s (above the greedy client's demand), and 60/s from 5 s after START for
    ``limit_s`` seconds (a tight limit)."""

    def capacity(t: float) -> float:
        return 60.0 if 5.0 <= t - START < 5.0 + limit_s else 5000.0

    return capacity


def test_after_a_tight_limit_of_a_second_the_client_is_back_at_its_demand_at_once() -> None:
    """A client sending about 1,300 attempts/s meets a 60/s limit for 1 s: a young overload,
    whose rate is still coming down, so its pushback rounds come a tenth of a window apart.
    Three of their gaps without one end it, and the climb starts from what the server admitted
    before the limit: from 0.5 s after the end the client is back at 90 % of its demand
    (waiting ``adaptive_quiet``, 1 s, and doubling from the limit's pace, it served 13 %)."""
    clock = FakeClock(START)
    alone = client(clock)
    run([alone], Server(capacity=_limited(1.0), tokens=250.0), clock, until=7.0)
    demand = count(alone.admitted, 4.0, 5.0)
    assert demand >= 1000
    assert count(alone.admitted, 6.5, 7.0) >= 0.9 * demand * 0.5


def test_a_converged_overload_keeps_its_quiet() -> None:
    """The same limit for 5 s: the pacer has converged (its pushbacks are far apart), so its
    end is taken only after ``adaptive_quiet`` without a pushback: for 0.7 s after the limit
    the client still sends at about the limit's pace."""
    clock = FakeClock(START)
    alone = client(clock)
    run([alone], Server(capacity=_limited(5.0), tokens=250.0), clock, until=11.0)
    assert count(alone.admitted, 9.0, 10.0) >= 0.8 * 60.0
    assert count(alone.admitted, 10.0, 10.7) <= 1.5 * 60.0 * 0.7


def test_a_pacer_quiet_for_two_windows_stops_cutting_with_the_tests_and_reopens() -> None:
    """A client whose first attempts met an empty bucket closes at once, then sees no pushback
    at all (5,000/s, far above its demand).  Its climb passes the rate of its last decrease, so
    it cuts at the neighbour tests' instants while its peers may still be overloaded; but not
    once it has had no pushback for 2 windows: its callers then stop waiting and it reopens
    within 4 s (cutting at every instant, its callers waited after each cut, and it stayed
    paced for more than 6 s)."""
    clock = FakeClock(START)
    alone = client(clock)
    # An empty bucket, as mongod's limiter just switched on (switching it on does not refill).
    run([alone], Server(capacity=lambda t: 5000.0, tokens=0.0), clock, until=4.0)
    assert alone.rejected
    assert max(alone.rejected) < 0.1
    assert not alone.control.is_paced(SERVER)
    assert count(alone.admitted, 3.5, 4.0) >= 0.9 * count(alone.admitted, 3.0, 4.0) / 2


def test_a_sparse_client_starts_with_one_retry_token() -> None:
    """With a per-server "ratio" budget that starts with one token (opt-in: ``adaptive`` keeps
    the current spec's retries, no budget), a client of a fleet gets no free budget: a tenth
    of a token per success, so the server sees at most 1.1 attempts per operation from it."""
    policy = ADAPTIVE.replace(
        budget_enabled=True,
        budget_scope="server",
        budget_mode="ratio",
        budget_capacity=10.0,
        budget_initial=1.0,
    )
    budget = budget_for(policy).for_server(SERVER)
    assert budget.tokens == pytest.approx(1.0)
    assert budget.try_acquire()
    assert not budget.try_acquire()
    for _ in range(9):
        budget.record_success(retried=False)
    assert not budget.try_acquire()
    budget.record_success(retried=False)
    assert budget.try_acquire()


def test_a_sparse_client_learns_no_pace_from_one_rejected_operation() -> None:
    """At a few operations per minute, an operation rejected once and then admitted on its
    retry is a blip: nothing is paced, so the next operation is not held."""
    clock = FakeClock(START)
    control = ClientPacers(ADAPTIVE, clock=clock)
    for _ in range(5):
        clock.now += 20.0
        assert control.admit(SERVER, clock.now + 1.0) == SlotGrant(0.0)
        control.record(SERVER, overloaded=True)
        control.record(SERVER, overloaded=False)
        assert not control.is_paced(SERVER)
