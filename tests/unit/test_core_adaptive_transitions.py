"""What an operator is told when a server becomes paced and when it reopens (fake clock)."""

from __future__ import annotations

import logging
import threading

import pytest
from pymongo.errors import PyMongoError

from backpressure.core.adaptive import ClientPacers, PacingGate, ServerPacerSnapshot, SlotGrant
from backpressure.core.labels import RETRYABLE, SYSTEM_OVERLOADED
from backpressure.core.policy import ADAPTIVE
from tests.fakes import FakeClock

A = ("a", 27017)
B = ("b", 27018)


def overload_error() -> PyMongoError:
    """A load-shedding error as the server sends it."""
    return PyMongoError("rate exceeded", error_labels=[SYSTEM_OVERLOADED, RETRYABLE])


def admitted(gate: PacingGate, clock: FakeClock, server: tuple[str, int], rate: float) -> None:
    """Feed one second of ``rate`` admitted replies per second."""
    for _ in range(round(rate)):
        clock.advance(1.0 / rate)
        gate.record(server, None)


def close(gate: PacingGate, server: tuple[str, int]) -> int:
    """Record pushbacks until ``server`` is paced; return how many it took."""
    for count in range(1, 1000):
        gate.record(server, None, overload_error())
        if gate.is_paced(server):
            return count
    raise AssertionError("the pacer never closed")


def reopen(gate: PacingGate, clock: FakeClock, server: tuple[str, int]) -> None:
    """Light demand (one attempt every 0.5 s never waits) until ``server`` reopens."""
    for _ in range(20):
        clock.advance(0.5)
        decision = gate.admit("find", server, None)
        assert isinstance(decision, SlotGrant)
        gate.record(server, decision)
        if not gate.is_paced(server):
            return
    raise AssertionError("the pacer never reopened")


def lines(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    """The INFO messages of the ``backpressure`` logger containing ``text``."""
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == "backpressure"
        and record.levelno == logging.INFO
        and text in record.getMessage()
    ]


def test_one_line_when_a_server_becomes_paced_and_one_when_it_reopens(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The line names the server, the paced rate and the window's pushback share."""
    caplog.set_level(logging.INFO, logger="backpressure")
    clock = FakeClock()
    gate = PacingGate(ClientPacers(ADAPTIVE, clock=clock))
    admitted(gate, clock, A, 100.0)
    pushbacks = close(gate, A)
    assert pushbacks >= 2  # one pushback is a blip: no line for it
    closed = gate.pacers.snapshot()[A]  # the clock has not moved since the close
    rate = closed.rate
    assert rate is not None
    assert closed.pushback_share >= 0.1  # a tenth of the window's replies closes it
    for _ in range(30):  # more pushbacks while paced: no new line
        gate.record(A, None, overload_error())
    paced = lines(caplog, "pacing attempts to a:27017")
    assert len(paced) == 1
    assert f"pacing attempts to a:27017 at {rate:.1f}/s:" in paced[0]
    share = 100.0 * closed.pushback_share
    assert f"it pushed back {share:.0f}% of the replies of the last 1.0s window" in paced[0]
    assert lines(caplog, "no longer pacing") == []
    reopen(gate, clock, A)
    reopened = lines(caplog, "no longer pacing attempts to a:27017")
    assert len(reopened) == 1
    assert "no pushback and no local wait for a 1.0s window" in reopened[0]
    assert len(lines(caplog, "pacing attempts to a:27017")) == 2  # nothing else was logged


def test_transition_lines_are_rate_limited_per_server_and_state(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Within the interval a flapping server logs one line per state; the next counts the rest.

    Another server's lines are not held back by the first one's.
    """
    caplog.set_level(logging.INFO, logger="backpressure")
    clock = FakeClock()
    gate = PacingGate(ClientPacers(ADAPTIVE, clock=clock), log_interval=30.0)
    start = clock.now
    for _ in range(3):  # three close/reopen cycles, well within 30 s
        admitted(gate, clock, A, 100.0)
        close(gate, A)
        reopen(gate, clock, A)
    assert clock.now - start < 30.0
    assert len(lines(caplog, "pacing attempts to a:27017")) == 2  # one of each state
    assert len(lines(caplog, "no longer pacing attempts to a:27017")) == 1
    admitted(gate, clock, B, 100.0)
    close(gate, B)
    assert len(lines(caplog, "pacing attempts to b:27018")) == 1
    clock.advance(30.0)
    admitted(gate, clock, A, 100.0)
    close(gate, A)
    paced = [
        line for line in lines(caplog, "pacing attempts to a:27017") if "no longer" not in line
    ]
    assert len(paced) == 2
    assert paced[1].endswith("; 2 more such change(s) since the previous line")


def test_each_change_is_told_once_with_the_snapshot_after_it() -> None:
    """``on_transition`` hears every close and every reopening once, whoever noticed it."""
    clock = FakeClock()
    pacers = ClientPacers(ADAPTIVE, clock=clock)
    gate = PacingGate(pacers)
    told: list[tuple[tuple[str, int], ServerPacerSnapshot]] = []
    pacers.on_transition = lambda server, snapshot: told.append((server, snapshot))
    admitted(gate, clock, A, 100.0)
    close(gate, A)
    for _ in range(10):
        gate.record(A, None, overload_error())
    assert [(server, snapshot.paced) for server, snapshot in told] == [(A, True)]
    closed = told[0][1]
    assert closed.rate is not None
    assert closed.rate > 0.0
    assert 0.0 < closed.pushback_share < 1.0
    assert closed.reply_rate > 0.0
    reopen(gate, clock, A)
    assert not gate.is_paced(A)  # asked again: nothing new to tell
    assert [(server, snapshot.paced) for server, snapshot in told] == [(A, True), (A, False)]
    assert told[1][1].rate is None


def test_racing_callers_tell_one_close_once() -> None:
    """Threads recording pushbacks together report the close exactly once."""
    clock = FakeClock()
    pacers = ClientPacers(ADAPTIVE, clock=clock)
    told: list[bool] = []
    pacers.on_transition = lambda _server, snapshot: told.append(snapshot.paced)
    for _ in range(100):
        clock.advance(0.01)
        pacers.record(A, overloaded=False)
    barrier = threading.Barrier(8)

    def push() -> None:
        barrier.wait()
        for _ in range(50):
            pacers.record(A, overloaded=True)

    threads = [threading.Thread(target=push) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert told == [True]


def test_snapshot_counts_the_waiting_callers_and_their_backlog() -> None:
    """Callers holding a slot that is not due are counted; the backlog covers their slots."""
    clock = FakeClock()
    pacers = ClientPacers(ADAPTIVE.replace(max_local_wait=1000.0), clock=clock)
    gate = PacingGate(pacers)
    admitted(gate, clock, A, 100.0)
    close(gate, A)
    snapshot = pacers.snapshot()[A]
    assert snapshot.waiting == 0
    rate = snapshot.rate
    assert rate is not None
    waits = [gate.admit("find", A, None).wait for _ in range(5)]
    snapshot = pacers.snapshot()[A]
    assert waits[0] == 0.0  # sent now: not waiting
    assert snapshot.waiting == 4
    assert snapshot.backlog == pytest.approx(5 / rate, rel=0.05)
    clock.advance(10.0)  # every slot is due
    assert pacers.snapshot()[A].waiting == 0
