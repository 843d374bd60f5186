"""Hedged reads end to end on the embedded replica set: sync, async and Motor, every era.

One secondary is made slow with a ``failCommand`` fail point that blocks the read (and, where the
test must know which reply won, then fails it with a fatal error).  Reads use ``nearest``, so the
first attempt of a read lands on the slow member about one time in three; the tests read until
that happens (a hedge event, or a command started there), never for a fixed time.

Where the outcome does not depend on how long the members take to answer, the tests run the
client's hedging on a fake clock (:func:`on_clock`, through the client's timing hook): the wait
for a hedge is slept with a sleep that moves that clock instead of waiting, so every read is
hedged as soon as its first attempt is on its way, and each hedge's ``after`` is exact.  The
tests of a slow member keep the real clock: they need reads to the fast members answered before
the hedge delay (on the fake clock every read is hedged, the slow member always has hedges in
flight, and pymongo's own choice, the member with fewer operations in flight, then never picks
it for a first attempt).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import threading
import time
from typing import Any, Callable

import pytest
from pymongo import ReadPreference

import backpressure
from backpressure import CURRENT_SPEC, DRAFT
from backpressure.adapters import seams
from backpressure.adapters.hedging import ASYNC_HEDGING
from backpressure.adapters.hedging.reads import _candidates
from backpressure.core.events import HedgeEvent
from backpressure.switch.client import _pymongo_client, set_timing
from backpressure.switch.client import budget as budget_of
from backpressure.switch.client import state as state_of
from backpressure.testing.server.embedded import EmbeddedServer
from tests.fakes import FakeClock
from tests.integration import conftest
from tests.integration.conftest import (
    ClientFactory,
    CommandRecorder,
    overload_fail_point,
    resolve,
    to_list,
    wait_for,
    wait_for_members,
)

HEDGED = DRAFT.replace(hedge_delay=0.0625)
"""Hedge after 62.5 ms without a reply (a power of two: times on the fake clock add up exactly)."""

SLOW_MS = 3000
"""How long the slow member holds a read (the hedge is sent after 62.5 ms)."""

ONE_SLOW_MS = 1000
"""How long a member that answers late, but before the slow ones, holds a read."""

SLOW = 1
"""The slow member: a secondary."""


class HedgeRecorder:
    """A backpressure listener that keeps hedge events (thread-safe)."""

    def __init__(self) -> None:
        """Start empty."""
        self._lock = threading.Lock()
        self.events: list[HedgeEvent] = []

    def hedged(self, event: HedgeEvent) -> None:
        """Record a hedge."""
        with self._lock:
            self.events.append(event)


def from_slow(hedges: HedgeRecorder, slow: Any) -> list[HedgeEvent]:
    """The hedges of reads whose first attempt went to ``slow`` (a loaded machine may make any
    member late now and then, so other reads may be hedged too)."""
    with hedges._lock:
        return [e for e in hedges.events if e.first_server == slow]


def slow_fail_point(command: str, block_ms: int, *, then_fail: bool = False) -> dict[str, Any]:
    """Block ``command`` for ``block_ms``; with ``then_fail``, then fail it with code 2 (fatal)."""
    data: dict[str, Any] = {
        "failCommands": [command],
        "blockConnection": True,
        "blockTimeMS": block_ms,
    }
    if then_fail:
        data["errorCode"] = 2
    return {"configureFailPoint": "failCommand", "mode": "alwaysOn", "data": data}


def on_clock(client: Any, ready: Callable[[int], bool] = lambda _number: True) -> FakeClock:
    """Run an enabled client's hedging (and pacing, server choice) on a fake clock, which each
    of the client's sleeps moves on instead of waiting; return the clock.

    With ``ready``, sleep number ``n`` (1 for the first) first waits (really) until
    ``ready(n)`` holds.  The sleep still yields, so the event loop or the other threads run.
    The client starts afresh (the timing hook ``set_timing``): call this before the test's
    operations.
    """
    clock = FakeClock(1000.0)
    limit = time.monotonic() + 60.0
    sleeps = itertools.count(1)

    def wait_until_ready(number: int) -> bool:
        assert time.monotonic() < limit, "the client's sleep waited a minute for the test"
        return ready(number)

    if seams.is_async_client(_pymongo_client(client)):

        async def sleep_async(seconds: float) -> None:
            number = next(sleeps)
            while not wait_until_ready(number):
                await asyncio.sleep(0.001)
            clock.advance(seconds)
            await asyncio.sleep(0)

        set_timing(client, clock=clock, sleep=sleep_async)
    else:

        def sleep(seconds: float) -> None:
            number = next(sleeps)
            while not wait_until_ready(number):
                time.sleep(0.001)
            clock.advance(seconds)
            time.sleep(0)

        set_timing(client, clock=clock, sleep=sleep)
    return clock


def in_flight(commands: CommandRecorder, command: str) -> bool:
    """Whether a ``command`` was sent and has neither succeeded nor failed yet."""
    with commands._lock:
        finished = sum(
            e.command_name == command for e in (*commands.succeeded_log, *commands.failed_log)
        )
        return sum(e.command_name == command for e in commands.started_log) > finished


def require_hedging(clients: ClientFactory) -> None:
    """Skip on an ``AsyncMongoClient`` whose reads block the event loop (no hedge can start)."""
    if clients.is_async and not ASYNC_HEDGING:
        pytest.skip("this pymongo's AsyncMongoClient blocks the event loop while it reads")


def hedged_client(
    clients: ClientFactory,
    server: EmbeddedServer,
    commands: CommandRecorder,
    hedges: HedgeRecorder,
    policy: Any = HEDGED,
    *,
    fake_clock: bool = False,
    **kwargs: Any,
) -> Any:
    """A client of the test's flavour that reads ``nearest`` and hedges with ``policy`` (with
    ``fake_clock``, on a fake clock: :func:`on_clock`).

    Every member stays in the latency window, however loaded the machine, so reads spread over
    all of them.
    """
    kwargs.setdefault("readPreference", "nearest")
    kwargs.setdefault("localThresholdMS", 60_000)
    client = conftest.enabled_client(
        clients, server.uri, policy, listeners=[hedges], event_listeners=[commands], **kwargs
    )
    if fake_clock:
        on_clock(client)
    return client


def finished_at(commands: CommandRecorder, command: str, address: Any) -> bool:
    """Whether a ``command`` sent to ``address`` has succeeded or failed."""
    events = [*commands.succeeded_log, *commands.failed_log]
    return any(
        e.command_name == command and tuple(e.connection_id) == tuple(address) for e in events
    )


READS: dict[str, tuple[Callable[[Any], Any], str, str, Any]] = {
    "find_one": (lambda coll: coll.find_one({"_id": 1}), "find", "find", {"_id": 1, "x": 1}),
    "count_documents": (lambda coll: coll.count_documents({}), "aggregate", "count", 1),
    "estimated_document_count": (lambda coll: coll.estimated_document_count(), "count", "count", 1),
    "distinct": (lambda coll: coll.distinct("x"), "distinct", "distinct", [1]),
}
"""Hedged reads: (call, command sent, operation named in the event, expected result)."""


@pytest.mark.parametrize("read", sorted(READS))
async def test_a_slow_member_is_hedged_and_the_faster_reply_wins(
    clients: ClientFactory,
    replicaset_server: EmbeddedServer,
    commands: CommandRecorder,
    read: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A read stuck on the slow member is hedged to another member, whose reply is returned.

    The slow member fails the read with a fatal error after holding it: had its reply come
    first, the read would raise.  The hedge is an event and an INFO line.
    """
    require_hedging(clients)
    caplog.set_level(logging.INFO, logger="backpressure")
    hedges = HedgeRecorder()
    client = hedged_client(clients, replicaset_server, commands, hedges)
    await resolve(client.db.coll.insert_one({"_id": 1, "x": 1}))
    await wait_for_members(client)
    call, command, operation, expected = READS[read]
    slow = replicaset_server.addresses[SLOW]
    replicaset_server.configure_fail_point(
        slow_fail_point(command, SLOW_MS, then_fail=True), member=SLOW
    )
    for _ in range(200):
        assert await resolve(call(client.db.coll)) == expected
        if from_slow(hedges, slow):
            break
    assert from_slow(hedges, slow), "no read went to the slow member first"
    (event,) = from_slow(hedges, slow)
    assert (event.operation, event.hedge) == (operation, 1)
    assert event.server != slow
    assert event.server in replicaset_server.addresses
    assert event.after >= HEDGED.hedge_delay
    assert commands.addresses(command).count(event.server) >= 1
    assert any(m.startswith(f"hedging {operation} to ") for m in caplog.messages)
    if clients.is_async and command != "find":
        return  # the loser was cancelled
    # The loser finishes on its own (its error is dropped): wait so no attempt outlives the test.
    await wait_for(lambda: finished_at(commands, command, slow), "the slow member's reply")


async def test_a_losing_find_has_its_server_cursor_killed(
    clients: ClientFactory, replicaset_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """The winner's cursor is read to the end; the slow member's cursor is killed."""
    require_hedging(clients)
    hedges = HedgeRecorder()
    client = hedged_client(clients, replicaset_server, commands, hedges)
    await resolve(client.db.coll.insert_many([{"_id": i} for i in range(5)]))
    await wait_for_members(client)
    slow = replicaset_server.addresses[SLOW]
    replicaset_server.configure_fail_point(slow_fail_point("find", 500), member=SLOW)
    for _ in range(200):
        docs = await to_list(client.db.coll.find({}, batch_size=2).sort("_id"))
        assert [d["_id"] for d in docs] == [0, 1, 2, 3, 4]
        if from_slow(hedges, slow):
            break
    assert from_slow(hedges, slow), "no read went to the slow member first"
    assert slow not in commands.addresses("getMore")
    await wait_for(lambda: slow in commands.addresses("killCursors"), "the loser's killCursors")


async def test_no_hedge_while_a_server_pushes_back(
    clients: ClientFactory, replicaset_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """After an overload reply from any server, a read stuck on the slow member waits instead."""
    require_hedging(clients)
    hedges = HedgeRecorder()
    policy = HEDGED.replace(hedge_pushback_pause=600.0)
    client = hedged_client(clients, replicaset_server, commands, hedges, policy, fake_clock=True)
    await resolve(client.db.coll.insert_one({"_id": 1}))
    await wait_for_members(client)
    replicaset_server.configure_fail_point(overload_fail_point(["insert"], times=1), member=0)
    await resolve(client.db.coll.insert_one({"_id": 2}))  # pushed back once, then retried
    assert commands.started_names().count("insert") == 3
    slow = replicaset_server.addresses[SLOW]
    replicaset_server.configure_fail_point(slow_fail_point("find", 300), member=SLOW)
    for _ in range(200):
        assert await resolve(client.db.coll.find_one({"_id": 1})) == {"_id": 1}
        if slow in commands.addresses("find"):
            break
    assert slow in commands.addresses("find")
    assert hedges.events == []
    assert finished_at(commands, "find", slow)  # the read waited for the slow member


async def test_no_hedge_without_a_budget_token(
    clients: ClientFactory, replicaset_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """With no token in the target's budget, a read stuck on the slow member is not hedged."""
    require_hedging(clients)
    hedges = HedgeRecorder()
    # A per-server budget of 0.5 tokens never grants a 1-token hedge (or retry).
    policy = HEDGED.replace(budget_scope="server", budget_capacity=0.5)
    client = hedged_client(clients, replicaset_server, commands, hedges, policy, fake_clock=True)
    await resolve(client.db.coll.insert_one({"_id": 1}))
    await wait_for_members(client)
    slow = replicaset_server.addresses[SLOW]
    replicaset_server.configure_fail_point(slow_fail_point("find", 300), member=SLOW)
    for _ in range(200):
        assert await resolve(client.db.coll.find_one({"_id": 1})) == {"_id": 1}
        if slow in commands.addresses("find"):
            break
    assert slow in commands.addresses("find")
    assert hedges.events == []
    budget = budget_of(client)
    assert budget is not None
    assert budget.refused >= 1


async def test_writes_transactions_and_other_reads_are_never_hedged(
    clients: ClientFactory, replicaset_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """With a hedge delay of 0, only eligible reads are hedged; every other command is sent once.

    Writes, transactions, explicit sessions, primary reads, aggregate and getMore are never
    hedged.
    """
    hedges = HedgeRecorder()
    client = hedged_client(
        clients, replicaset_server, commands, hedges, DRAFT.replace(hedge_delay=0)
    )
    coll = client.db.coll
    await resolve(coll.insert_one({"_id": 1, "n": 0}))  # an async client connects on its first
    await wait_for_members(client)
    await resolve(coll.update_one({"_id": 1}, {"$inc": {"n": 1}}))
    await resolve(coll.find_one_and_update({"_id": 1}, {"$inc": {"n": 1}}))
    await resolve(coll.insert_many([{"_id": i} for i in range(2, 7)]))
    await resolve(coll.delete_one({"_id": 6}))
    session = await resolve(client.start_session())
    try:
        await resolve(session.start_transaction(read_preference=ReadPreference.PRIMARY))
        await resolve(coll.insert_one({"_id": 10}, session=session))
        assert await resolve(coll.find_one({"_id": 10}, session=session)) == {"_id": 10}
        await resolve(session.commit_transaction())
        assert await resolve(coll.find_one({"_id": 1}, session=session)) == {"_id": 1, "n": 2}
        assert await resolve(coll.count_documents({}, session=session)) == 6
    finally:
        await resolve(session.end_session())
    primary = coll.with_options(read_preference=ReadPreference.PRIMARY)
    assert await resolve(primary.find_one({"_id": 2})) == {"_id": 2}
    assert len(await to_list(await resolve(coll.aggregate([{"$match": {}}])))) == 6
    assert hedges.events == []
    assert commands.started_names() == [
        "insert",
        "update",
        "findAndModify",
        "insert",
        "delete",
        "insert",
        "find",
        "commitTransaction",
        "find",
        "aggregate",
        "find",
        "aggregate",
    ]
    commands.reset()
    # A hedge may be sent for the first batch (unless the first reply beats it), never for the
    # getMores that follow.
    docs = await to_list(coll.find({}, batch_size=2).sort("_id"))
    assert len(docs) == 6
    assert commands.started_names().count("getMore") == 2
    assert all(e.operation == "find" for e in hedges.events)
    # Every hedge sent was announced (one announced may find the read over before it sends).
    assert commands.started_names().count("find") - 1 <= len(hedges.events)


async def test_disable_and_reenable_remove_and_restore_hedging(
    clients: ClientFactory, replicaset_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """Hedging follows the policy: gone after disable or a policy without it, back after enable."""
    from backpressure.adapters import hedging

    hedges = HedgeRecorder()
    client = hedged_client(clients, replicaset_server, commands, hedges)
    target = client
    assert hedging.installed(target)
    backpressure.enable(client, DRAFT)
    assert not hedging.installed(target)
    backpressure.enable(client, HEDGED, listeners=[hedges])
    assert hedging.installed(target)
    backpressure.disable(client)
    assert not hedging.installed(target)
    assert "_run_operation" not in vars(target)
    assert "_select_server" not in vars(target)


async def test_motor_client_hedges_a_read_stuck_on_the_slow_member(
    replicaset_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """Motor: a read stuck on the slow member is hedged through the sync delegate."""
    hedges = HedgeRecorder()
    client = backpressure.AsyncIOMotorClient(
        replicaset_server.uri,
        backpressure=HEDGED,
        backpressure_listeners=[hedges],
        readPreference="nearest",
        localThresholdMS=60_000,
        event_listeners=[commands],
        serverSelectionTimeoutMS=3000,
    )
    try:
        await client.db.coll.insert_one({"_id": 1})
        await wait_for_members(client.delegate)
        slow = replicaset_server.addresses[SLOW]
        replicaset_server.configure_fail_point(
            slow_fail_point("find", SLOW_MS, then_fail=True), member=SLOW
        )
        for _ in range(200):
            assert await client.db.coll.find_one({"_id": 1}) == {"_id": 1}
            if from_slow(hedges, slow):
                break
        assert [(e.operation, e.hedge) for e in from_slow(hedges, slow)] == [("find", 1)]
        await wait_for(lambda: finished_at(commands, "find", slow), "the slow member's reply")
    finally:
        client.close()


async def test_hedges_are_counted_in_prometheus_and_opentelemetry(
    clients: ClientFactory, replicaset_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """Every hedge increments backpressure_hedges_total / backpressure.hedges for its server."""
    require_hedging(clients)
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    import backpressure.metrics

    registry = CollectorRegistry()
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    backpressure.metrics.enable_prometheus(registry)
    backpressure.metrics.enable_opentelemetry(provider)
    try:
        hedges = HedgeRecorder()
        client = hedged_client(clients, replicaset_server, commands, hedges)
        await resolve(client.db.coll.insert_one({"_id": 1}))
        await wait_for_members(client)
        slow = replicaset_server.addresses[SLOW]
        replicaset_server.configure_fail_point(slow_fail_point("find", 300), member=SLOW)
        for _ in range(200):
            assert await resolve(client.db.coll.find_one({"_id": 1})) == {"_id": 1}
            if from_slow(hedges, slow):
                break
        assert from_slow(hedges, slow), "no read went to the slow member first"
        expected: dict[str, int] = {}
        for event in hedges.events:
            expected[event.server] = expected.get(event.server, 0) + 1
        text = generate_latest(registry).decode()
        families = {f.name: f.samples for f in text_string_to_metric_families(text)}
        counted = {
            (s.labels["server_address"], int(s.labels["server_port"])): s.value
            for s in families["backpressure_hedges"]
        }
        assert counted == expected
        assert {s.name for s in families["backpressure_hedges"]} == {"backpressure_hedges_total"}
        data = reader.get_metrics_data()
        assert data is not None
        points = [
            (dict(point.attributes), point.value)
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == "backpressure.hedges"
            for point in metric.data.data_points
        ]
        assert {
            (attributes["server.address"], attributes["server.port"]): value
            for attributes, value in points
        } == expected
        await wait_for(lambda: finished_at(commands, "find", slow), "the slow member's reply")
    finally:
        backpressure.metrics.disable_metrics()
        provider.shutdown()


async def test_a_read_stuck_on_one_mongos_is_hedged_to_the_other(
    clients: ClientFactory, sharded_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """Sharded: every mongos is eligible, so a read stuck on one router goes to the other."""
    require_hedging(clients)
    hedges = HedgeRecorder()
    client = hedged_client(clients, sharded_server, commands, hedges)
    await resolve(client.db.coll.insert_one({"_id": 1}))
    await conftest.wait_for_mongoses(client)
    slow = sharded_server.addresses[1]
    sharded_server.configure_fail_point(slow_fail_point("find", SLOW_MS, then_fail=True), member=1)
    for _ in range(200):
        assert await resolve(client.db.coll.find_one({"_id": 1})) == {"_id": 1}
        if from_slow(hedges, slow):
            break
    assert from_slow(hedges, slow), "no read went to the slow router first"
    (event,) = from_slow(hedges, slow)
    assert event.server == sharded_server.addresses[0]
    await wait_for(lambda: finished_at(commands, "find", slow), "the slow router's reply")


async def test_a_second_hedge_follows_at_twice_the_delay(
    clients: ClientFactory, replicaset_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """max_hedges=2 with every member slow: the read is sent to all three, one member each."""
    require_hedging(clients)
    hedges = HedgeRecorder()
    client = hedged_client(
        clients, replicaset_server, commands, hedges, HEDGED.replace(max_hedges=2)
    )
    # The wait for hedge n ends once n finds were sent (the first attempt and the hedges before),
    # so each hedge knows the members tried and is sent before the clock moves on.
    on_clock(client, ready=lambda number: commands.started_names().count("find") >= number)
    await resolve(client.db.coll.insert_one({"_id": 1}))
    await wait_for_members(client)
    # Every member holds the find far longer than both hedge delays, so whichever member the
    # first attempt goes to, both hedges are due before any reply.  The primary answers after
    # ONE_SLOW_MS; the secondaries fail (a fatal error) after SLOW_MS, so the primary's reply
    # wins whatever the order of the attempts.
    replicaset_server.configure_fail_point(slow_fail_point("find", ONE_SLOW_MS), member=0)
    for member in (1, 2):
        replicaset_server.configure_fail_point(
            slow_fail_point("find", SLOW_MS, then_fail=True), member=member
        )
    assert await resolve(client.db.coll.find_one({"_id": 1})) == {"_id": 1}
    first, second = sorted(hedges.events, key=lambda e: e.hedge)
    assert (first.hedge, second.hedge) == (1, 2)
    assert first.first_server == second.first_server
    assert {first.first_server, first.server, second.server} == set(replicaset_server.addresses)
    assert first.after >= HEDGED.hedge_delay
    assert second.after >= 2 * HEDGED.hedge_delay
    # Exactly on time: the race waited on the client's clock, not on real time.
    assert (first.after, second.after) == (HEDGED.hedge_delay, 2 * HEDGED.hedge_delay)
    for address in replicaset_server.addresses:
        await wait_for(
            lambda a=address: finished_at(commands, "find", a), "every member's reply", 60.0
        )


def _choice_of(client: Any) -> Any:
    """The client's server choice (None: turned off)."""
    state = state_of(client)
    assert state is not None
    return state.choice


ON_CLOCK = CURRENT_SPEC.replace(hedge_delay=0.015625, hedge_pushback_pause=0.001)
"""The default policy, hedging after 1/64 s on the client's clock; an overload reply holds hedges
for 1 ms of it only, so they resume while the server choice still avoids the member."""


async def test_hedges_avoid_a_member_the_server_choice_avoids(
    clients: ClientFactory, replicaset_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """Server choice: once a secondary pushed back, hedges go to the other untried member.

    The client's clock moves only when it sleeps, so every read is hedged at once (its wait
    for the hedge is slept on that clock) and the choice's signal does not fade with real time.
    The random source is pinned to 0 and the hot member is the first secondary among the
    members the read preference lists: without the rule, a read whose first attempt went to the
    primary would be hedged to the first untried member, the hot one.
    """
    require_hedging(clients)
    hedges = HedgeRecorder()
    client = hedged_client(clients, replicaset_server, commands, hedges, ON_CLOCK, fake_clock=True)
    await resolve(client.db.coll.insert_one({"_id": 1}))
    await wait_for_members(client, 3)
    primary = replicaset_server.primary_address
    listed = _candidates(_pymongo_client(client), ReadPreference.NEAREST)
    hot = next(address for address in listed if address != primary)
    replicaset_server.configure_fail_point(
        overload_fail_point(["find"]), member=replicaset_server.addresses.index(hot)
    )
    for _ in range(200):
        assert await resolve(client.db.coll.find_one({"_id": 1})) == {"_id": 1}
        if hot in commands.addresses("find"):
            break
    assert hot in commands.addresses("find"), "no read reached the hot member"
    choice = _choice_of(client)
    # A hedge's reply may come after the read returned (a sync loser finishes in its thread).
    await wait_for(lambda: choice.engaged, "the hot member's pushback")
    await wait_for(lambda: not in_flight(commands, "find"), "the reads' last attempts")
    with hedges._lock:
        hedges.events.clear()
    commands.reset()
    for _ in range(200):
        assert await resolve(client.db.coll.find_one({"_id": 1})) == {"_id": 1}
        if len([e for e in from_slow(hedges, primary) if e.first_server == primary]) >= 5:
            break
    assert len(from_slow(hedges, primary)) >= 5, "too few reads went to the primary first"
    assert hedges.events
    assert all(e.server != hot for e in hedges.events)
    assert hot not in commands.addresses("find")
    assert choice.signals()[hot].avoided


async def test_the_outcome_of_a_hedge_reaches_the_server_choice(
    clients: ClientFactory, replicaset_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """A hedge pushed back by the member it went to raises that member's overload signal, as any
    other attempt would (the read's first attempt went elsewhere).

    The other members hold each find for a while, so a read's hedge is always sent before its
    first attempt's reply; before each read the client's clock moves a minute on, so the hot
    member's earlier signal has faded and the hedge is free to go there.  Reads go on until one
    whose first attempt went elsewhere is hedged there (the draws are seeded, not pinned, so
    either untried member may be the hedge's target).
    """
    require_hedging(clients)
    hedges = HedgeRecorder()
    draws = random.Random(47)
    client = hedged_client(
        clients, replicaset_server, commands, hedges, ON_CLOCK, random=draws.random
    )
    clock = on_clock(client)
    await resolve(client.db.coll.insert_one({"_id": 1}))
    await wait_for_members(client, 3)
    hot = replicaset_server.addresses[1]
    replicaset_server.configure_fail_point(overload_fail_point(["find"]), member=1)
    for member in (0, 2):
        replicaset_server.configure_fail_point(slow_fail_point("find", 200), member=member)
    choice = _choice_of(client)
    for _ in range(200):
        # pymongo's own choice prefers the member with fewer operations in flight: let the
        # previous read's losers end, or the hot member (which answers at once) looks best.
        await wait_for(lambda: not in_flight(commands, "find"), "the previous read's attempts")
        clock.advance(60.0)  # sixty half-lives: any earlier signal has faded
        signal = choice.signals().get(hot)
        assert signal is None or signal.signal < 1e-6
        with hedges._lock:
            hedges.events.clear()
        commands.reset()
        assert await resolve(client.db.coll.find_one({"_id": 1})) == {"_id": 1}
        with hedges._lock:
            to_hot = [e for e in hedges.events if e.server == hot]
        if to_hot and to_hot[0].first_server not in (None, hot):
            break
    else:
        raise AssertionError("no read was hedged to the hot member from another one")
    assert to_hot[0].first_server in commands.addresses("find")  # the first attempt went there
    assert hot in commands.addresses("find")  # the hedge was sent

    def pushed_back() -> bool:
        signal = choice.signals().get(hot)
        return signal is not None and signal.signal >= 0.25  # one pushback moves it by 0.3

    await wait_for(pushed_back, "the hedge's pushback in the hot member's signal")
