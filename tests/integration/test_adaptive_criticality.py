"""Criticality that acts, over real TCP: a paced server serves critical operations first.

The ordering test runs the pacing on a clock the test steps, so which operation is sent when
does not depend on the machine's speed.  The load test saturates a rate-limited embedded server
with critical and sheddable workers back to back and checks that the critical ones keep their
(generous) deadline while the sheddable ones absorb the loss; it stops on a count, not a time.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable

import pymongo
import pytest
from pymongo.errors import PyMongoError

import backpressure
from backpressure import ADAPTIVE
from backpressure.core.events import retry_summary
from backpressure.switch.client import state as state_of
from backpressure.testing import set_testing
from backpressure.testing.server.embedded import EmbeddedServer
from tests.integration.conftest import (
    NEVER_WAIT_TWICE,
    ClientFactory,
    CommandRecorder,
    overload_fail_point,
    resolve,
    wait_for,
)
from tests.integration.test_adaptive import (
    Background,
    PacingRecorder,
    SteppedClock,
    adaptive_client,
    close_pacing,
    pace_on,
)


@pytest.fixture
def recorder() -> PacingRecorder:
    """A fresh PacingRecorder."""
    return PacingRecorder()


def sheddable(clients: ClientFactory, operation: Callable[[], Any]) -> Callable[[], Any]:
    """``operation`` run under ``overrides(criticality="sheddable")`` (in its own thread/task)."""
    if clients.is_async:

        async def run_async() -> Any:
            with backpressure.overrides(criticality="sheddable"):
                return await operation()

        return run_async

    def run() -> Any:
        with backpressure.overrides(criticality="sheddable"):
            return operation()

    return run


async def test_a_critical_read_is_sent_before_the_sheddable_reads_waiting_ahead_of_it(
    clients: ClientFactory,
    standalone_server: EmbeddedServer,
    commands: CommandRecorder,
    recorder: PacingRecorder,
) -> None:
    """Two sheddable reads wait for slots +50 and +100 ms; a critical read arriving after them
    takes the +50 ms slot and is sent first; each sheddable read moves one slot back."""
    policy = ADAPTIVE.replace(adaptive_min_rate=20.0, max_local_wait=30.0)
    client = adaptive_client(clients, standalone_server, commands, recorder, policy)
    clock = SteppedClock()
    pace_on(client, clock)
    await close_pacing(client, standalone_server, commands)  # paced at 20/s; next slot +50 ms
    start = clock.now
    coll = client.db.coll
    shed = []
    for index in range(2):
        shed.append(
            Background(clients, sheddable(clients, lambda i=index: coll.find_one({"shed": i})))
        )
        await wait_for(lambda n=index + 1: len(recorder.waits) == n, "a sheddable read to wait")
    critical = Background(clients, lambda: coll.find_one({"critical": True}))
    await wait_for(lambda: len(recorder.waits) == 3, "the critical read to wait")
    assert commands.started_names() == []

    clock.now = start + 0.05  # the first slot: the critical read's
    await critical.join()
    assert [c["filter"] for c in commands.started_commands("find")] == [{"critical": True}]
    assert not shed[0].done
    assert not shed[1].done

    clock.now = start + 0.10
    await shed[0].join()
    clock.now = start + 0.15
    await shed[1].join()
    assert [c["filter"] for c in commands.started_commands("find")] == [
        {"critical": True},
        {"shed": 0},
        {"shed": 1},
    ]
    assert recorder.refusals == []


class Tally:
    """Successes and errors per class of operation (thread-safe)."""

    def __init__(self) -> None:
        """Start at zero."""
        self._lock = threading.Lock()
        self.ok = {"critical": 0, "sheddable": 0}
        self.errors = {"critical": 0, "sheddable": 0}
        self.onset_errors = {"critical": 0, "sheddable": 0}
        """Errors of operations that finished in the overload's onset (counted in ``errors``
        too)."""
        self.last: dict[str, str] = {}

    def add(self, kind: str, ok: bool, onset: bool = False) -> None:
        """Count one finished operation of ``kind`` (``onset``: it finished in the onset)."""
        with self._lock:
            (self.ok if ok else self.errors)[kind] += 1
            if onset and not ok:
                self.onset_errors[kind] += 1

    def done(self, kind: str) -> int:
        """Finished operations of ``kind``."""
        with self._lock:
            return self.ok[kind] + self.errors[kind]


CRITICAL_WORKERS = 4
"""Workers sending critical operations back to back (as many send sheddable ones)."""

ONSET = 2 * CRITICAL_WORKERS
"""Critical operations the overload's onset may cost: those finished within the first
``adaptive_window`` of the run, while the pacing closes and its once-a-round decreases come down
from the closing rate (half the send rate, far above the server's 40/s), each rejected three
times in a row (the current spec's two retries).  On a machine loaded with three busy
processes, every critical error of 10 runs came within the first 0.3 s: 2-5 a run, none later.
It was one per critical worker (first 3, then 4), counted over the whole run, and CI failed with
5, all in the onset."""


async def test_at_saturation_critical_operations_keep_their_deadline_and_sheddable_ones_shed(
    clients: ClientFactory,
    standalone_server: EmbeddedServer,
    commands: CommandRecorder,
    recorder: PacingRecorder,
) -> None:
    """Four critical and four sheddable workers back to back against a server limited to 40/s
    (each class alone would saturate it; sheddable operations under a 1 s timeout, critical ones
    10 s): at most 1% of the critical operations fail after the overload's onset (the first
    window, while the pacing closes and comes down, may cost up to ``ONSET``), and the
    sheddable ones fail at least as often and get a small share."""
    standalone_server.set_rate_limit(40, burst_seconds=0.25)
    client = adaptive_client(clients, standalone_server, commands, recorder, timeoutMS=10_000)
    coll = client.db.coll
    tally = Tally()
    target = 200  # critical operations to finish before every worker stops
    stop = threading.Event()
    onset_ends = time.monotonic() + ADAPTIVE.adaptive_window

    async def worker(kind: str, index: int) -> None:
        count = 0
        while not stop.is_set():
            count += 1
            document = {"kind": kind, "worker": index, "n": count}
            try:
                if kind == "sheddable":
                    with backpressure.overrides(criticality="sheddable"), pymongo.timeout(1.0):
                        await resolve(coll.insert_one(document))
                else:
                    await resolve(coll.insert_one(document))
            except PyMongoError as exc:
                tally.add(kind, False, onset=time.monotonic() < onset_ends)
                tally.last[kind] = repr(retry_summary(exc) or exc)
            else:
                tally.add(kind, True)
            if kind == "critical" and tally.done("critical") >= target:
                stop.set()

    kinds = [(kind, i) for kind in ("critical", "sheddable") for i in range(CRITICAL_WORKERS)]
    if clients.is_async:
        tasks = [asyncio.ensure_future(worker(kind, i)) for kind, i in kinds]
        await wait_for(lambda: stop.is_set(), "the critical workers to finish", timeout=120.0)
        await asyncio.gather(*tasks)
    else:
        threads = [
            threading.Thread(target=asyncio.run, args=(worker(kind, i),), daemon=True)
            for kind, i in kinds
        ]
        for thread in threads:
            thread.start()
        await wait_for(lambda: stop.is_set(), "the critical workers to finish", timeout=120.0)
        for thread in threads:
            thread.join(60.0)
            assert not thread.is_alive()
    state = state_of(client)
    assert state is not None
    assert state.controller.pacing is not None
    assert recorder.waits  # the server was paced
    critical = tally.done("critical")
    outcome = (tally.ok, tally.errors, tally.last)
    # The onset, while the pacing closes and comes down to the server's rate, may cost a few:
    # the current spec's two retries (the preset had five) fail an operation rejected three
    # times in a row.  After it, at most 1 % of the critical operations fail.
    onset = tally.onset_errors["critical"]
    assert onset <= ONSET, (onset, outcome)
    assert tally.errors["critical"] - onset <= 0.01 * critical, (onset, outcome)
    assert tally.errors["sheddable"] >= tally.errors["critical"], outcome
    assert tally.ok["sheddable"] < tally.ok["critical"] / 4, outcome


LAST_CHANCE_POLICY = NEVER_WAIT_TWICE.replace(adaptive_min_rate=0.01, max_local_wait=0.5)
"""Once the pacing closes, slots 100 s apart for the whole test however slow the machine (see
``NEVER_WAIT_TWICE``), and a local wait of at most 0.5 s."""


@pytest.mark.parametrize("marks", [True, False], ids=["marking", "unmarked"])
async def test_a_critical_read_no_slot_can_serve_gets_a_last_chance_once_the_client_marks_work(
    clients: ClientFactory,
    standalone_server: EmbeddedServer,
    commands: CommandRecorder,
    recorder: PacingRecorder,
    marks: bool,
) -> None:
    """Paced with slots 100 s apart: the first read takes the slot due now (sheddable when the
    client marks work).  The next critical read needs a 100 s wait: a marking client sends it
    once (its 0.5 s bound is less than the lead a last chance keeps before it, a fifth of the
    60 s window, so at once) and the server admits it; an unmarked client holds it for its
    bound, then refuses it, as before.  A sheddable read is held, then refused, either way."""
    client = adaptive_client(clients, standalone_server, commands, recorder, LAST_CHANCE_POLICY)
    with set_testing(True):  # the overload's retries are sent at once; nothing is paced yet
        await close_pacing(client, standalone_server, commands)
    coll = client.db.coll
    address = standalone_server.addresses[0]
    with backpressure.overrides(criticality="sheddable" if marks else "critical"):
        assert await resolve(coll.find_one({"closing": True})) is not None
    assert recorder.waits == []
    if marks:
        assert await resolve(coll.find_one({"closing": True})) is not None
        assert recorder.refusals == []
    else:
        with pytest.raises(backpressure.LocalOverloadError):
            await resolve(coll.find_one({"closing": True}))
        assert [event.operation for event in recorder.refusals] == ["find"]
    assert len(commands.started_commands("find")) == (2 if marks else 1)
    pacing = backpressure.stats(client).pacing[address]
    assert pacing.paced
    assert pacing.last_chance_sends == (1 if marks else 0)
    assert pacing.pushbacks == 2  # the last chance's reply is kept out of the pacing
    refused = len(recorder.refusals)
    with (
        backpressure.overrides(criticality="sheddable"),
        pytest.raises(backpressure.LocalOverloadError),
    ):
        await resolve(coll.find_one({"closing": True}))
    assert len(recorder.refusals) == refused + 1
    assert backpressure.stats(client).pacing[address].last_chance_sends == (1 if marks else 0)


async def test_a_marking_clients_critical_retry_no_slot_can_serve_gets_a_last_chance(
    clients: ClientFactory,
    standalone_server: EmbeddedServer,
    commands: CommandRecorder,
    recorder: PacingRecorder,
) -> None:
    """Paced with slots 100 s apart, in a client that marks work: a critical read no slot can
    serve is sent on its last chance and the server pushes it back once; its retry, which no
    slot can serve either, gets a last chance too (before, it was held until its bound, then
    refused) and the server admits it.  Both count as last chances answered."""
    client = adaptive_client(clients, standalone_server, commands, recorder, LAST_CHANCE_POLICY)
    with set_testing(True):
        await close_pacing(client, standalone_server, commands)
    coll = client.db.coll
    address = standalone_server.addresses[0]
    with backpressure.overrides(criticality="sheddable"):
        assert await resolve(coll.find_one({"closing": True})) is not None
    before = backpressure.stats(client).pacing[address]
    standalone_server.configure_fail_point(overload_fail_point(["find"], times=1))
    assert await resolve(coll.find_one({"closing": True})) is not None
    assert len(commands.started_commands("find")) == 3
    assert recorder.refusals == []
    after = backpressure.stats(client).pacing[address]
    assert after.last_chance_sends == before.last_chance_sends + 2
    assert after.pushbacks == before.pushbacks + 1
