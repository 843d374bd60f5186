"""Two clients sharing one rate-limited server converge to fair shares: over TCP, on a clock the
test steps.

The server's ingress limiter, both clients' pacing, the adapters' local waits, the retries'
backoffs (in our loop, or in pymongo's own from 4.17) and the workload's own pace all run on one
discrete-event clock (:class:`EventClock`): time moves only when every worker sleeps, to the
earliest wake-up, and stands still while a command is on the wire.  What the limiter admits, and
when each client may send, therefore depends on no machine's speed; the commands themselves are
real pymongo commands over real sockets.  The retries' jitter is drawn from a seeded source, so
that a run is repeatable; the same checks hold for each of the first 100 seeds.

The scenario: the server admits 100 requests/s.  Client A alone wants 150/s for 2 s; then
client B, a separate client with its own pacing, wants 150/s as well.  Over the last 10 s both
get about half of the capacity each, the server stays near its capacity, and hardly any attempt
is rejected.  Fair shares are an average: additive increase and multiplicative decrease move two
clients' rates around each other, so that over 3 s one of them may get up to 65 % (with some
seeds), while over 10 s the larger share stayed at or below 59 % (Jain index >= 0.969) for each
of the first 100 seeds, with sync, async and Motor clients, on pymongo 4.16 and 4.20.1 alike.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import random
import threading
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest
from pymongo.errors import PyMongoError

import backpressure
from backpressure.adapters import seams
from backpressure.switch.client import _pymongo_client, set_timing
from backpressure.switch.client import state as state_of
from backpressure.testing.server.embedded import EmbeddedServer
from tests.integration import conftest
from tests.integration.conftest import ClientFactory, CommandRecorder, resolve

CAPACITY = 100.0
"""Requests per second the server's ingress limiter admits."""
WORKERS = 3
"""Workers per client; each wants ``DEMAND / WORKERS`` operations per second."""
DEMAND = 150.0
"""Operations per second each client wants: 1.5 times the whole capacity."""
JOIN = 2.0
"""Seconds after the start at which client B starts."""
END = 16.0
"""Seconds after the start at which both stop."""
MEASURE = 6.0
"""The shares are measured from here to ``END``."""
JITTER_SEED = 1
"""Seed of the retries' jitter source (``random.random``, which the clients draw from)."""
STALL = 60.0
"""Seconds of real time a worker may stay on the wire before the test calls it a hang."""


class EventClock:
    """A discrete-event clock: time moves only when every worker sleeps on it.

    Workers sleep on it from threads (:meth:`sleep`) or from the event loop
    (:meth:`sleep_async`); :meth:`run`, in a thread of its own, waits until every live worker
    sleeps, moves the time to the earliest wake-up and wakes those due.  A worker that is done
    calls :meth:`retire`.
    """

    def __init__(self, workers: int, start: float = 1000.0) -> None:
        """``workers`` live workers; the time starts at ``start``."""
        self.now = start
        self._live = workers
        self._sleepers: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._changed = threading.Condition()

    def __call__(self) -> float:
        """The current time (the server's limiter and the clients' pacing read it)."""
        return self.now

    def _park(self, seconds: float, wake: Callable[[], None]) -> None:
        with self._changed:
            heapq.heappush(self._sleepers, (self.now + max(0.0, seconds), next(self._order), wake))
            self._changed.notify_all()

    def sleep(self, seconds: float) -> None:
        """Block the calling thread until the clock has moved ``seconds`` on."""
        woken = threading.Event()
        self._park(seconds, woken.set)
        if not woken.wait(STALL):
            raise AssertionError("the event clock stopped")

    async def sleep_async(self, seconds: float) -> None:
        """Suspend the calling task until the clock has moved ``seconds`` on."""
        loop = asyncio.get_running_loop()
        woken: asyncio.Future[None] = loop.create_future()

        def settle() -> None:
            if not woken.done():
                woken.set_result(None)

        def wake() -> None:
            loop.call_soon_threadsafe(settle)

        self._park(seconds, wake)
        await asyncio.wait_for(woken, STALL)

    def retire(self) -> None:
        """A worker is done: the clock no longer waits for it."""
        with self._changed:
            self._live -= 1
            self._changed.notify_all()

    def run(self) -> None:
        """Move the time on until every worker has retired."""
        while True:
            with self._changed:
                settled = self._changed.wait_for(
                    lambda: self._live == 0 or len(self._sleepers) >= self._live, STALL
                )
                if not settled:
                    raise AssertionError("a worker neither slept nor retired (a hang)")
                if self._live == 0:
                    return
                self.now = max(self.now, self._sleepers[0][0])
                while self._sleepers and self._sleepers[0][0] <= self.now:
                    heapq.heappop(self._sleepers)[2]()


@dataclass
class ClientRun:
    """One client's outcomes: the issue time of every success and failure."""

    commands: CommandRecorder
    successes: list[float] = field(default_factory=list)
    failures: list[float] = field(default_factory=list)

    def served(self, start: float, end: float) -> int:
        """Successes of operations issued in [start, end)."""
        return sum(1 for t in self.successes if start <= t < end)


def _jain(shares: list[float]) -> float:
    """Jain's fairness index of ``shares`` (1.0: all equal)."""
    return sum(shares) ** 2 / (len(shares) * sum(s * s for s in shares))


async def _converge(
    make_client: Callable[[str, CommandRecorder], Any],
    is_async: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Run the scenario with two clients from ``make_client(uri, commands)``; check the shares.

    ``is_async``: the clients' operations are awaited (each worker a task), else called (each
    worker a thread).
    """
    clock = EventClock(workers=2 * WORKERS)
    monkeypatch.setattr(random, "random", random.Random(JITTER_SEED).random)
    with EmbeddedServer(limiter_clock=clock) as server:
        server.set_rate_limit(int(CAPACITY), burst_seconds=0.2)
        start = clock.now
        runs = []
        for _ in range(2):
            commands = CommandRecorder()
            client = make_client(server.uri, commands)
            # The pacing on the scenario's clock, and every local wait and backoff (pymongo's
            # own loop's included) slept on it: the client's private timing hook.
            async_client = seams.is_async_client(_pymongo_client(client))
            set_timing(
                client, clock=clock, sleep=clock.sleep_async if async_client else clock.sleep
            )
            state = state_of(client)
            assert state is not None
            assert state.controller.pacing is not None
            runs.append((client, ClientRun(commands)))
        interval = WORKERS / DEMAND

        def plan(index: int, worker: int) -> tuple[float, ClientRun, Any]:
            client, run = runs[index]
            first = start + (JOIN if index else 0.0) + worker * interval / WORKERS
            return first, run, client.db.coll

        try:
            if is_async:

                async def worker(first: float, run: ClientRun, coll: Any) -> None:
                    try:
                        await clock.sleep_async(first - clock.now)
                        issue = first
                        while clock.now < start + END:
                            issued = clock.now
                            try:
                                await coll.find_one({})
                                run.successes.append(issued - start)
                            except PyMongoError:
                                run.failures.append(issued - start)
                            issue = max(issue + interval, clock.now)
                            await clock.sleep_async(issue - clock.now)
                    finally:
                        clock.retire()

                scheduler = threading.Thread(target=clock.run, daemon=True)
                scheduler.start()
                tasks: list[Awaitable[None]] = [
                    worker(*plan(i, w)) for i in range(2) for w in range(WORKERS)
                ]
                await asyncio.gather(*tasks)
                await asyncio.to_thread(scheduler.join, STALL)
            else:
                errors: list[BaseException] = []

                def sync_worker(first: float, run: ClientRun, coll: Any) -> None:
                    try:
                        clock.sleep(first - clock.now)
                        issue = first
                        while clock.now < start + END:
                            issued = clock.now
                            try:
                                coll.find_one({})
                                run.successes.append(issued - start)
                            except PyMongoError:
                                run.failures.append(issued - start)
                            issue = max(issue + interval, clock.now)
                            clock.sleep(issue - clock.now)
                    except BaseException as exc:  # reported below
                        errors.append(exc)
                    finally:
                        clock.retire()

                threads = [
                    threading.Thread(target=sync_worker, args=plan(i, w), daemon=True)
                    for i in range(2)
                    for w in range(WORKERS)
                ]
                for thread in threads:
                    thread.start()
                clock.run()
                for thread in threads:
                    thread.join(STALL)
                assert errors == []
        finally:
            for client, _ in runs:
                await resolve(client.close())

    (_, a), (_, b) = runs
    shares = [a.served(MEASURE, END) / (END - MEASURE), b.served(MEASURE, END) / (END - MEASURE)]
    attempts = sum(len(r.commands.started_commands("find")) for r in (a, b))
    operations = sum(len(r.successes) + len(r.failures) for r in (a, b))
    failures = len(a.failures) + len(b.failures)
    report = (
        f"shares {shares[0]:.1f}/s and {shares[1]:.1f}/s, "
        f"A alone {a.served(0.5, JOIN) / (JOIN - 0.5):.1f}/s, "
        f"{attempts / operations:.3f} attempts/op, {failures} of {operations} operations failed"
    )
    print(report)
    assert a.served(0.5, JOIN) / (JOIN - 0.5) >= 0.9 * CAPACITY, report
    assert _jain(shares) >= 0.95, report
    assert sum(shares) >= 0.9 * CAPACITY, report
    assert attempts / operations <= 1.1, report
    assert failures <= 0.01 * operations, report


@pytest.mark.slow
async def test_two_clients_converge_to_fair_shares_of_the_server(
    clients: ClientFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A alone, then A and B at 1.5 times the capacity each: fair shares, the server busy
    (sync and async clients, on the native adapter or the backport)."""

    def make(uri: str, commands: CommandRecorder) -> Any:
        # The default jitter source (``random.random``, seeded by the scenario), not the
        # conftest's zero jitter: the retries' backoffs are drawn as in production.
        return conftest.enabled_client(
            clients, uri, "adaptive", event_listeners=[commands], random=lambda: random.random()
        )

    await _converge(make, clients.is_async, monkeypatch)


async def test_two_motor_clients_converge_to_fair_shares_of_the_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same with Motor clients (their pymongo calls, and local waits, in Motor's threads)."""
    pytest.importorskip("motor")

    def make(uri: str, commands: CommandRecorder) -> Any:
        return backpressure.AsyncIOMotorClient(
            uri, backpressure="adaptive", event_listeners=[commands], serverSelectionTimeoutMS=3000
        )

    await _converge(make, True, monkeypatch)
