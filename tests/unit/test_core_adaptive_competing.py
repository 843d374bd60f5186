"""The competing mode on a fake clock: next to a stock-like sender, and among adaptive peers.

A small event loop runs closed-loop callers with the current spec's retries (2 retries, backoff
``jitter * 0.1 * 2 ** retry``) against one token-bucket server.  Stock-like clients send every
attempt at once; adaptive ones ask the real :class:`ClientPacers` first and hand it every
reply.
"""

from __future__ import annotations

import heapq
import math
import random
import statistics
from dataclasses import dataclass, field
from typing import Callable, Optional

import pytest

from backpressure.core.adaptive import ClientPacers, Refusal, ServerPacer, SlotGrant
from backpressure.core.policy import ADAPTIVE
from tests.fakes import FakeClock

SERVER = ("primary", 27017)
RTT = 0.005
BURST = 1.0
START = 1000.0
DEADLINE = 1.0


@dataclass
class Bucket:
    """A token bucket of ``capacity(t)`` per second holding ``BURST`` seconds of it (full at the
    start, as mongod's is)."""

    capacity: Callable[[float], float]
    tokens: Optional[float] = None
    """Tokens at START (None: full, as mongod's bucket starts)."""
    stamp: float = START

    def __post_init__(self) -> None:
        if self.tokens is None:
            self.tokens = self.capacity(0.0) * BURST

    def admit(self, now: float) -> bool:
        rate = self.capacity(now - START)
        assert self.tokens is not None
        self.tokens = min(rate * BURST, self.tokens + (now - self.stamp) * rate)
        self.stamp = now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


@dataclass
class Sender:
    """One client process: stock-like (``control`` None) or adaptive."""

    control: Optional[ClientPacers]
    successes: int = 0
    errors: int = 0
    competed: list[float] = field(default_factory=list)
    """Times (seconds after START) at which its pacer was seen competing."""
    succeeded: list[float] = field(default_factory=list)
    """Times (seconds after START) of its successes."""

    @property
    def competing(self) -> bool:
        """Whether its pacer competes now."""
        return self.control is not None and self.control.pacer(SERVER).competing


def run(
    senders: list[Sender], bucket: Bucket, clock: FakeClock, until: float, seed: int = 1
) -> None:
    """Run 8 closed-loop callers per sender for ``until`` seconds (``seed``: the backoff jitter)."""
    jitter = random.Random(seed).random
    events: list[tuple[float, int, int, str, int, float, Optional[SlotGrant]]] = []
    order = 0

    def push(
        at: float, who: int, kind: str, retry: int, start: float, admission: Optional[SlotGrant]
    ) -> None:
        nonlocal order
        heapq.heappush(events, (at, order, who, kind, retry, start, admission))
        order += 1

    for who in range(len(senders)):
        for caller in range(8):
            push(START + caller * 0.001, who, "attempt", 0, START + caller * 0.001, None)
    end = START + until
    while events:
        now, _, who, kind, retry, start, admission = heapq.heappop(events)
        if now >= end:
            break
        clock.now = now
        sender = senders[who]
        control = sender.control
        if sender.competing:
            sender.competed.append(now - START)
        if kind == "attempt":
            if control is None:
                push(now + RTT, who, "reply", retry, start, None)
                continue
            decision = control.admit(SERVER, start + DEADLINE)
            if isinstance(decision, Refusal):
                sender.errors += 1
                push(now + 0.001, who, "attempt", 0, now + 0.001, None)
                continue
            push(now + decision.wait, who, "send", retry, start, decision)
        elif kind == "send":
            assert control is not None
            assert admission is not None
            again = control.recheck(SERVER, admission)
            if isinstance(again, Refusal):
                sender.errors += 1
                push(now + 0.001, who, "attempt", 0, now + 0.001, None)
            elif again > 0.0:
                push(now + again, who, "send", retry, start, admission)
            else:
                push(now + RTT, who, "reply", retry, start, admission)
        else:
            admitted = bucket.admit(now - RTT / 2)
            if control is not None:
                control.record(SERVER, overloaded=not admitted, grant=admission)
            if admitted:
                sender.successes += 1
                sender.succeeded.append(now - START)
            elif retry < ADAPTIVE.max_retries:
                backoff = jitter() * ADAPTIVE.base_backoff * 2.0 ** (retry + 1)
                if now + backoff < start + DEADLINE:
                    push(now + backoff, who, "attempt", retry + 1, start, None)
                    continue
                sender.errors += 1
            else:
                sender.errors += 1
            push(now + 0.001, who, "attempt", 0, now + 0.001, None)


def adaptive(clock: FakeClock) -> Sender:
    """An adaptive sender with its own admission control."""
    return Sender(ClientPacers(ADAPTIVE, clock=clock))


def test_next_to_a_stock_sender_the_adaptive_one_competes() -> None:
    """One stock-like sender and one adaptive sender share 100/s, over 20 backoff-jitter seeds.
    Polite, the adaptive one gets about a tenth of the server; its cuts do not move the
    pushback, so it competes, keeps competing (no flip-flop), and from then on gets at least
    85 % of the stock sender's successes (86-106 % over these seeds).

    The issue's goal is 95 % of the whole run: starved by its neighbour, the adaptive sender
    sees only a reply or two per cut, so its evidence takes a few tests to add up, and when it
    adds up is sensitive to single replies: 1.5 to 38.5 s over these seeds (median 5.5 s), and
    not within the 40 s in one of them.  So the verdict's timing is asserted over the seeds,
    not for one."""
    firsts: list[float] = []
    for seed in range(1, 21):
        clock = FakeClock(START)
        stock, paced = Sender(None), adaptive(clock)
        run([stock, paced], Bucket(lambda t: 100.0), clock, until=40.0, seed=seed)
        assert paced.successes + stock.successes >= 0.95 * 100.0 * 39.0  # the server stays busy
        if not paced.competed:
            firsts.append(math.inf)
            continue
        first = paced.competed[0]
        firsts.append(first)
        seconds = {int(t) for t in paced.competed}
        assert seconds == set(range(int(first), 40)), seed  # it keeps competing: no flip-flop
        since = int(first) + 1
        ours = sum(1 for t in paced.succeeded if t >= since)
        theirs = sum(1 for t in stock.succeeded if t >= since)
        assert ours >= 0.85 * theirs, seed
        before = sum(1 for t in paced.succeeded if 1.0 <= t < first)
        assert before <= 0.3 * sum(1 for t in stock.succeeded if 1.0 <= t < first), seed  # polite
    assert sum(1 for first in firsts if first < 20.0) >= 16  # 17 of the 20
    assert statistics.median(firsts) <= 6.0


def test_polite_peers_never_compete() -> None:
    """Four adaptive senders through capacity steps 200 -> 100 -> 300/s: every cut they make
    together drains the pushback, so none of them ever competes, and the errors stay few."""
    clock = FakeClock(START)
    peers = [adaptive(clock) for _ in range(4)]

    def capacity(t: float) -> float:
        return 200.0 if t < 10.0 else 100.0 if t < 20.0 else 300.0

    run(peers, Bucket(capacity), clock, until=30.0)
    assert [peer.competed for peer in peers] == [[], [], [], []]
    successes = sum(peer.successes for peer in peers)
    errors = sum(peer.errors for peer in peers)
    assert errors <= 0.05 * (successes + errors)


def _feed(
    pacer: ServerPacer,
    seconds: float,
    pushed: Callable[[float, int], bool],
    start: float = 0.0,
    per_second: int = 12,
) -> list[float]:
    """Hand ``pacer`` ``per_second`` replies a second from ``start`` to ``seconds`` after
    START; reply ``number`` at ``t`` seconds after START is an overload error when
    ``pushed(t, number)``. Return the times (seconds after START) at which the pacer was seen
    competing."""
    competed = []
    step = 1.0 / per_second
    for number in range(round(start * per_second), round(seconds * per_second)):
        t = number * step
        if pushed(t, number):
            pacer.record_pushback(START + t, START + t)
        else:
            pacer.record_admitted(START + t, START + t)
        if pacer.competing:
            competed.append(t)
    return competed


def _in_cut(t: float) -> bool:
    """Whether ``t`` (seconds after START, on the test grid) falls in a cut, past its first
    bucket: the replies a test judges."""
    return 0.1 <= t % 1.0 < 0.5 and t >= 1.0


def test_a_cut_that_moves_nothing_makes_the_pacer_compete() -> None:
    """A quarter of the replies pushed back, inside the cuts as outside them: the evidence adds
    up over the tests, and the pacer competes within six seconds (a window to settle after it
    closed, then a test every second, each judging 4 or 5 replies against a cut that drains to
    a fifth: four tests)."""
    pacer = ServerPacer(ADAPTIVE)
    competed = _feed(pacer, 8.0, lambda t, n: n % 4 == 3)
    assert pacer.paced
    assert competed
    assert competed[0] < 6.0


def test_a_marking_pacer_cuts_with_its_neighbours_but_takes_no_verdict() -> None:
    """The same undrained cuts, with the client marking work sheddable (a sheddable attempt
    asks every half second): its last chances are sent beyond its rate, so the pushback its
    cuts leave says nothing about the neighbours.  It never competes, yet it cuts exactly as
    an unmarked pacer fed the same replies does (its peers' tests need its cut), up to the
    moment that one competes."""
    marking = ServerPacer(ADAPTIVE)
    unmarked = ServerPacer(ADAPTIVE)
    same_rates = 0
    for number in range(12 * 12):
        t = number / 12
        for pacer in (marking, unmarked):
            if number % 6 == 0:
                pacer.admit(START + t, 10.0, True, sheddable=pacer is marking)
            if number % 4 == 3:
                pacer.record_pushback(START + t, START + t)
            else:
                pacer.record_admitted(START + t, START + t)
        assert not marking.competing, t
        if not unmarked.competing:
            rate = marking.snapshot(START + t).rate
            assert rate == unmarked.snapshot(START + t).rate, t
            same_rates += rate is not None
    assert unmarked.competing
    assert marking.paced
    assert same_rates >= 60  # five seconds paced, four test instants among them


def test_a_drained_cut_keeps_the_pacer_polite() -> None:
    """A quarter pushed back outside the cuts and none inside (peers that cut too): the pacer
    never competes, even when one cut has a pushback (a late reply), and one pushback among a
    cut's few replies is evidence, not a verdict."""
    drained = ServerPacer(ADAPTIVE)
    assert not _feed(drained, 12.0, lambda t, n: n % 4 == 3 and not _in_cut(t))
    assert drained.paced
    late = ServerPacer(ADAPTIVE)
    assert not _feed(
        late,
        12.0,
        lambda t, n: (n % 4 == 3 and not _in_cut(t)) or abs(t - 2.1667) < 0.01,
    )


def test_a_first_test_that_begins_late_judges_only_its_own_cut() -> None:
    """Peers that closed with this pacer (at 0.42 s) settle with it and cut when it does: its
    first test begins 1.42 s in, late in its second, and stops with the others at 1.5 s. Three
    quarters of the replies outside the cuts are pushed back, none inside. The pushback from
    1.1 s to the cut and the reply at 1.5 s that ends it are no evidence: the pacer never
    competes (it did at 1.5 s when they counted)."""
    pacer = ServerPacer(ADAPTIVE)
    closed: Optional[float] = None
    for number in range(5 * 24):
        t = number / 24
        cutting = closed is not None and t >= closed + 1.0 and t % 1.0 < 0.5
        if t >= 0.3 and not cutting and number % 4 != 0:
            pacer.record_pushback(START + t, START + t)
        else:
            pacer.record_admitted(START + t, START + t)
        if closed is None and pacer.paced:
            closed = t
        assert not pacer.competing, t
    assert closed is not None
    assert 0.4 < closed < 0.5


def test_a_competing_pacer_whose_cut_drains_is_polite_again() -> None:
    """Once competing (half its replies pushed back), cuts that drain the pushback (the
    neighbours left, or every client competed and all cut together) take the pacer back to
    polite: it tests at one instant in 16, one lucky cut next to stock clients is not enough,
    and at 12 replies a second a cut judges 4 (those from its second bucket to its end), so the
    third drained cut, at 40 s, ends the spell (the grid's instants count from the clock's zero:
    the competing cuts fall at 8, 24 and 40 s after START)."""
    pacer = ServerPacer(ADAPTIVE)
    began = _feed(pacer, 6.0, lambda t, n: n % 2 == 1)
    assert began
    assert pacer.competing
    assert pacer.snapshot(START + 6.0).competing_spells == 1
    later = 6.0

    def pushed(t: float, n: int) -> bool:
        # A competing pacer cuts at one instant in 16.
        in_cut = _in_cut(t) and round(START + t) % 16 == 0
        return n % 2 == 1 and (t < later or not in_cut)

    competed = _feed(pacer, 24.9, pushed, start=later)
    assert pacer.competing  # the drained cuts at 8 and 24 s
    competed = _feed(pacer, 41.0, pushed, start=24.9)
    assert not pacer.competing
    assert 40.0 <= competed[-1] < 41.0  # the third drained cut, at 40 s
    # The snapshot counts the spell from its first competing reply to the polite one after
    # its last (one reply, 1/12 s, later), and still one spell.
    snapshot = pacer.snapshot(START + 41.0)
    assert snapshot.competing_spells == 1
    spell = competed[-1] - began[0]
    assert spell <= snapshot.competed_s <= spell + 0.1


def test_one_drained_cut_with_many_replies_does_not_make_a_competing_pacer_polite() -> None:
    """A competing pacer with many replies per cut (48 a second here, a dozen in its cut): a
    joint cut of competing peers next to a stock sender drains for a moment, and one such cut
    alone must not end the competing mode, however many replies say so. It takes two drained
    cuts, as with few replies."""
    pacer = ServerPacer(ADAPTIVE)
    assert _feed(pacer, 6.0, lambda t, n: n % 2 == 1, per_second=48)
    assert pacer.competing
    later = 6.0

    def pushed(t: float, n: int) -> bool:
        # A competing pacer cuts at one instant in 16.
        in_cut = _in_cut(t) and round(START + t) % 16 == 0
        return n % 2 == 1 and (t < later or not in_cut)

    competed = _feed(pacer, 23.0, pushed, start=later, per_second=48)
    assert pacer.competing  # the drained cut at 8 s alone did not end it
    assert competed[-1] >= 22.9
    competed = _feed(pacer, 24.9, pushed, start=23.0, per_second=48)
    assert not pacer.competing  # the second drained cut, at 24 s, did
    assert 24.0 <= competed[-1] < 24.9
    assert pacer.snapshot(START + 24.9).competing_spells == 1
    # Outside the cuts the pushback never moved (a stock neighbour): the next polite test (at
    # 26 s, one instant in 3) says so, and the pacer competes again.
    assert _feed(pacer, 27.0, pushed, start=24.9, per_second=48)
    assert pacer.snapshot(START + 27.0).competing_spells == 2


def test_a_fault_that_admits_nothing_is_not_a_neighbour() -> None:
    """Every reply pushed back (a fault rejecting everything): no test runs, so the pacer does
    not take the fault for neighbours that do not cut."""
    pacer = ServerPacer(ADAPTIVE)
    assert not _feed(pacer, 10.0, lambda t, n: t >= 1.0 or n % 4 == 3)
    assert pacer.paced


def test_a_climbing_pacer_cuts_with_its_neighbours_and_climbs_on_from_the_cut() -> None:
    """Closed by a quarter pushed back, then a second without pushback: the fast climb passes the
    rate of the last decrease, so at the next test instant (4 s) the pacer cuts with its peers
    although none of its replies was pushed back (else its climb would fill what their joint
    cut leaves).  The cut stands after the test: the climb goes on from it, not from the rate
    before it, and no verdict is taken."""
    pacer = ServerPacer(ADAPTIVE)
    _feed(pacer, 3.0, lambda t, n: n % 4 == 3)
    assert pacer.paced
    _feed(pacer, 4.0, lambda t, n: False, start=3.0)
    before = pacer.snapshot(START + 4.0)
    assert before.rate is not None
    assert before.peak is not None
    assert before.rate > before.peak
    _feed(pacer, 4.05, lambda t, n: False, start=4.0)
    cut = pacer.snapshot(START + 4.05).rate
    assert cut is not None
    assert cut <= 0.8 * before.rate
    _feed(pacer, 4.6, lambda t, n: False, start=4.05)
    after = pacer.snapshot(START + 4.6).rate
    assert after is not None
    assert 2.0 * cut <= after
    assert not pacer.competing


def test_a_cut_without_pushback_lasts_the_whole_half_window() -> None:
    """A polite pacer whose cut has its replies admitted (peers that cut too) still cuts 0.45
    window in, with four such replies: a peer back at its rate early would push back the cuts
    still running, and a peer with few replies would take that for neighbours that do not cut.
    After the half window it sends at the rate the test returns to."""
    pacer = ServerPacer(ADAPTIVE)
    rates: dict[float, tuple[float, float]] = {}
    probes = [2.45, 2.6]
    for number in range(3 * 12):
        t = number / 12
        while probes and t >= probes[0]:
            at = probes.pop(0)
            first = pacer.admit(START + at, 10.0, deadline_bound=False)
            second = pacer.admit(START + at, 10.0, deadline_bound=False)
            assert isinstance(first, SlotGrant)
            assert isinstance(second, SlotGrant)
            assert first.slot is not None
            assert second.slot is not None
            returns_to = pacer.snapshot(START + at).rate
            assert returns_to is not None
            rates[at] = (1.0 / (second.slot - first.slot), returns_to)
        in_cut = t >= 1.0 and t % 1.0 < 0.5
        if number % 4 == 3 and not in_cut:
            pacer.record_pushback(START + t, START + t)
        else:
            pacer.record_admitted(START + t, START + t)
    cutting, returns_to = rates[2.45]
    assert cutting < 0.9 * returns_to  # still the cut (it ended at 2.42 s when it could end early)
    sending, returns_to = rates[2.6]
    assert sending == pytest.approx(returns_to)
