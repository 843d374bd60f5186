"""Hedged reads end to end on the embedded replica set: sync, async and Motor, every era.

One secondary is made slow with a ``failCommand`` fail point that blocks the read (and, where the
test must know which reply won, then fails it with a fatal error).  Reads use ``nearest``, so the
first attempt of a read lands on the slow member about one time in three; the tests read until
that happens (a hedge event, or a command started there), never for a fixed time.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

import pytest
from pymongo import ReadPreference

import backpressure
from backpressure import DRAFT
from backpressure.adapters.hedging import ASYNC_HEDGING
from backpressure.core.events import HedgeEvent
from backpressure.switch.client import budget as budget_of
from backpressure.testing.server.embedded import EmbeddedServer
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

HEDGED = DRAFT.replace(hedge_delay=0.05)
"""Hedge after 50 ms without a reply."""

SLOW_MS = 3000
"""How long the slow member holds a read (the hedge is sent after 50 ms)."""

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
    **kwargs: Any,
) -> Any:
    """A client of the test's flavour that reads ``nearest`` and hedges with ``policy``.

    Every member stays in the latency window, however loaded the machine, so reads spread over
    all of them.
    """
    kwargs.setdefault("readPreference", "nearest")
    kwargs.setdefault("localThresholdMS", 60_000)
    return conftest.enabled_client(
        clients, server.uri, policy, listeners=[hedges], event_listeners=[commands], **kwargs
    )


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
    client = hedged_client(clients, replicaset_server, commands, hedges, policy)
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
    client = hedged_client(clients, replicaset_server, commands, hedges, policy)
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
    for address in replicaset_server.addresses:
        await wait_for(
            lambda a=address: finished_at(commands, "find", a), "every member's reply", 60.0
        )
