"""The competing mode on a fake clock: next to a stock-like sender, and among adaptive peers.

A small event loop runs closed-loop callers with the current spec's retries (2 retries, backoff
``jitter * 0.1 * 2 ** retry``) against one token-bucket server.  Stock-like clients send every
attempt at once; adaptive ones ask the real :class:`ClientPacers` first and hand it every
reply.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field
from typing import Callable, Optional

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
    """A token bucket of ``capacity(t)`` per second holding ``BURST`` seconds of it."""

    capacity: Callable[[float], float]
    tokens: float = 0.0
    stamp: float = START

    def admit(self, now: float) -> bool:
        rate = self.capacity(now - START)
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

    @property
    def competing(self) -> bool:
        """Whether its pacer competes now."""
        return self.control is not None and self.control.pacer(SERVER).competing


def run(senders: list[Sender], bucket: Bucket, clock: FakeClock, until: float) -> None:
    """Run 8 closed-loop callers per sender for ``until`` seconds."""
    jitter = random.Random(1).random
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
    """One stock-like sender and one adaptive sender share 100/s: the adaptive one finds that
    its cuts do not move the pushback (two tests in a row), competes within 10 s, and its
    successes are at least 50 % of the stock sender's (polite throughout: about a tenth).

    The issue's goal is 95 %: the polite seconds before the switch and the competing mode's
    own tests (one second at half rate every 12 s) cost the rest."""
    clock = FakeClock(START)
    stock, paced = Sender(None), adaptive(clock)
    run([stock, paced], Bucket(lambda t: 100.0), clock, until=30.0)
    assert paced.competed, "the adaptive sender never competed"
    assert paced.competed[0] < 10.0
    assert paced.successes >= 0.5 * stock.successes
    assert paced.successes + stock.successes >= 0.95 * 100.0 * 29.0  # the server stays busy


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


def _replies(pacer: ServerPacer, start: float, end: float, pushbacks: set[int]) -> None:
    """Hand ``pacer`` a reply every 1/12 s from ``start`` to ``end``; the ones numbered in
    ``pushbacks`` (from 0) are overload errors."""
    step = 1.0 / 12.0
    for number in range(round((end - start) / step)):
        now = start + number * step
        if number in pushbacks:
            pacer.record_pushback(now, now)
        else:
            pacer.record_admitted(now, now)


def _two_tests(pushbacks_in_test: set[int]) -> ServerPacer:
    """A pacer 25 % pushed back for two test periods; in each test (the first window of a
    period) the replies numbered in ``pushbacks_in_test`` are pushed back."""
    pacer = ServerPacer(ADAPTIVE)
    quarter = set(range(3, 48, 4))
    _replies(pacer, START + 1.0, START + 4.0, quarter)
    assert pacer.paced
    for period in (4.0, 8.0):
        _replies(pacer, START + period, START + period + 1.0, pushbacks_in_test)
        _replies(pacer, START + period + 1.0, START + period + 4.0, quarter)
    return pacer


def test_one_pushback_in_a_test_is_noise_not_a_failed_test() -> None:
    """A client of an 8 x 8 fleet sees about a dozen replies a second; when its peers cut too,
    one of its test's replies may still be pushed back.  One pushback is not a failed test:
    two such tests in a row do not make the pacer compete (the simulated 8 x 8 fleet's Jain
    index fell to 0.85 when they did).  Three pushbacks in each test (a share that did not
    fall) still do."""
    assert not _two_tests({2}).competing
    assert _two_tests({2, 5, 8}).competing
