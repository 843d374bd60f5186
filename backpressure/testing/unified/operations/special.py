"""The format's special test operations (``object: testRunner``): fail points, entities, event
and session assertions."""

from __future__ import annotations

import asyncio
import importlib
import time
from collections.abc import Mapping
from typing import Any

from pymongo import MongoClient

from backpressure.testing.unified.entities import (
    TestContext,
    Unsupported,
    create_entities,
    maybe_await,
)
from backpressure.testing.unified.events import ObservedEvent
from backpressure.testing.unified.matching import MatchError
from backpressure.testing.unified.operations.arguments import Arguments, Operation

__all__ = ["TEST_RUNNER_OPERATIONS", "match_event_fields", "wait_for_events"]


async def _runner_fail_point(ctx: TestContext, _: Any, raw: dict[str, Any]) -> Any:
    """``failPoint``: configure it through the named client (on the primary) and remember it."""
    args = Arguments(ctx, "failPoint", raw)
    client = ctx.entities.client(args.required("client")).client
    fail_point = args.required("failPoint")
    args.done()
    await maybe_await(client.admin.command(fail_point))
    ctx.fail_points.append((client, fail_point["configureFailPoint"]))
    return None


def _driver_session(session: Any) -> Any:
    """The pymongo ``ClientSession`` of a session entity (Motor wraps it as its delegate)."""
    return session.delegate if type(session).__module__.startswith("motor") else session


def _pinned_server(session: Any) -> Any:
    """The ``(host, port)`` a session's transaction is pinned to, or None.

    The format asserts on driver state that pymongo keeps private: the transaction's
    ``pinned_address`` (set to the mongos of a sharded transaction, also after it ended).
    """
    return _driver_session(session)._transaction.pinned_address


def _direct_client(ctx: TestContext, address: Any) -> Any:
    """A sync client connected directly to one server (kept until the test ends)."""
    host, port = address
    key = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if key not in ctx.direct_clients:
        ctx.direct_clients[key] = MongoClient(
            f"mongodb://{key}/", directConnection=True, serverSelectionTimeoutMS=10000
        )
    return ctx.direct_clients[key]


async def _runner_targeted_fail_point(ctx: TestContext, _: Any, raw: dict[str, Any]) -> Any:
    """``targetedFailPoint``: on the mongos the session is pinned to, else on the primary."""
    args = Arguments(ctx, "targetedFailPoint", raw)
    session = ctx.entities.get(args.required("session"))
    fail_point = args.required("failPoint")
    args.done()
    if ctx.topology in ("sharded", "load-balanced"):
        address = _pinned_server(session)
        if address is None:
            raise AssertionError("targetedFailPoint: the session is not pinned to a mongos")
        client: Any = _direct_client(ctx, address)
    else:
        # Without mongos pinning a session's operations go to the primary.
        client = session.client
    await maybe_await(client.admin.command(fail_point))
    ctx.fail_points.append((client, fail_point["configureFailPoint"]))
    return None


async def _runner_assert_session_pinned(ctx: TestContext, _: Any, raw: dict[str, Any]) -> Any:
    """``assertSessionPinned``."""
    args = Arguments(ctx, "assertSessionPinned", raw)
    session = ctx.entities.get(args.required("session"))
    args.done()
    if _pinned_server(session) is None:
        raise AssertionError("assertSessionPinned: the session is not pinned to a server")
    return None


async def _runner_assert_session_unpinned(ctx: TestContext, _: Any, raw: dict[str, Any]) -> Any:
    """``assertSessionUnpinned``."""
    args = Arguments(ctx, "assertSessionUnpinned", raw)
    session = ctx.entities.get(args.required("session"))
    args.done()
    if (address := _pinned_server(session)) is not None:
        raise AssertionError(f"assertSessionUnpinned: the session is pinned to {address}")
    return None


def _collection_exists(ctx: TestContext, database: str, collection: str) -> bool:
    """Whether a collection exists (read with the runner's internal client)."""
    names = ctx.internal_client[database].list_collection_names(filter={"name": collection})
    return collection in names


def _index_exists(ctx: TestContext, database: str, collection: str, index: str) -> bool:
    """Whether an index exists (a missing collection has none)."""
    if not _collection_exists(ctx, database, collection):
        return False
    indexes = ctx.internal_client[database][collection].list_indexes()
    return any(spec["name"] == index for spec in indexes)


def _assert_collection(name: str, exists: bool) -> Operation:
    """``assertCollectionExists``/``assertCollectionNotExists``."""

    async def run(ctx: TestContext, _: Any, raw: dict[str, Any]) -> Any:
        """Check the collection."""
        args = Arguments(ctx, name, raw)
        database = args.required("databaseName")
        collection = args.required("collectionName")
        args.done()
        if _collection_exists(ctx, database, collection) != exists:
            state = "does not exist" if exists else "exists"
            raise AssertionError(f"{name}: collection {database}.{collection} {state}")
        return None

    run.__doc__ = f"``{name}``."
    return run


def _assert_index(name: str, exists: bool) -> Operation:
    """``assertIndexExists``/``assertIndexNotExists``."""

    async def run(ctx: TestContext, _: Any, raw: dict[str, Any]) -> Any:
        """Check the index."""
        args = Arguments(ctx, name, raw)
        database = args.required("databaseName")
        collection = args.required("collectionName")
        index = args.required("indexName")
        args.done()
        if _index_exists(ctx, database, collection, index) != exists:
            state = "does not exist" if exists else "exists"
            raise AssertionError(f"{name}: index {index!r} on {database}.{collection} {state}")
        return None

    run.__doc__ = f"``{name}``."
    return run


async def _runner_create_entities(ctx: TestContext, _: Any, raw: dict[str, Any]) -> Any:
    """``createEntities``."""
    args = Arguments(ctx, "createEntities", raw)
    docs = args.required("entities")
    args.done()
    await create_entities(ctx, docs)
    return None


def _matching_events(ctx: TestContext, client_id: str, event: Mapping[str, Any]) -> int:
    """How many recorded events of a client match ``{eventName: {fields}}``."""
    ((name, fields),) = event.items()
    recorder = ctx.entities.client(client_id).recorder
    if name not in recorder.observe:
        raise Unsupported(f"event {name!r} is not observed by client {client_id!r}")
    count = 0
    for observed in recorder.named(name):
        try:
            match_event_fields(ctx, fields, observed)
        except MatchError:
            continue
        count += 1
    return count


def match_event_fields(ctx: TestContext, fields: Mapping[str, Any], event: ObservedEvent) -> None:
    """Match an expected event's fields; ``command`` and ``reply`` are root-level documents."""
    matcher = ctx.get_matcher()
    for key, value in fields.items():
        actual = event.fields.get(key)
        if key not in event.fields:
            raise Unsupported(f"{event.name}.{key} is not supported by the runner")
        matcher.match(value, actual, root=key in ("command", "reply"), path=f"{event.name}.{key}")


async def wait_for_events(
    ctx: TestContext, client_id: str, event: Mapping[str, Any], count: int, timeout: float = 10.0
) -> None:
    """Wait until ``count`` matching events were recorded (raise on timeout)."""
    deadline = time.monotonic() + timeout
    while _matching_events(ctx, client_id, event) < count:
        if time.monotonic() > deadline:
            found = _matching_events(ctx, client_id, event)
            raise AssertionError(f"waitForEvent: {found} of {count} events {event!r} in {timeout}s")
        await asyncio.sleep(0.01)


async def _runner_wait_for_event(ctx: TestContext, _: Any, raw: dict[str, Any]) -> Any:
    """``waitForEvent``."""
    args = Arguments(ctx, "waitForEvent", raw)
    client_id = args.required("client")
    event = args.required("event")
    count = args.required("count")
    args.done()
    await wait_for_events(ctx, client_id, event, count)
    return None


async def _runner_assert_event_count(ctx: TestContext, _: Any, raw: dict[str, Any]) -> Any:
    """``assertEventCount``."""
    args = Arguments(ctx, "assertEventCount", raw)
    client_id = args.required("client")
    event = args.required("event")
    count = args.required("count")
    args.done()
    found = _matching_events(ctx, client_id, event)
    if found != count:
        raise AssertionError(f"assertEventCount: expected {count} events {event!r}, got {found}")
    return None


async def _runner_assert_session_transaction_state(
    ctx: TestContext, _: Any, raw: dict[str, Any]
) -> Any:
    """``assertSessionTransactionState``."""
    args = Arguments(ctx, "assertSessionTransactionState", raw)
    session = ctx.entities.get(args.required("session"))
    state = args.required("state")
    args.done()
    names = {
        "none": "NONE",
        "starting": "STARTING",
        "in_progress": "IN_PROGRESS",
        "committed": "COMMITTED",
        "aborted": "ABORTED",
    }
    # The format asserts on the driver's transaction state, which pymongo keeps private.
    txn_state = importlib.import_module("pymongo.synchronous.client_session")._TxnState
    actual = _driver_session(session)._transaction.state
    if actual != getattr(txn_state, names[state]):
        raise AssertionError(f"session transaction state: expected {state}, got {actual}")
    return None


def _last_two_lsids(ctx: TestContext, client_id: str) -> tuple[Any, Any]:
    """The lsids of the last two commandStartedEvents of a client."""
    started = ctx.entities.client(client_id).recorder.named("commandStartedEvent")
    if len(started) < 2:
        raise AssertionError(f"client {client_id!r} has fewer than two commandStartedEvents")
    return started[-2].fields["command"].get("lsid"), started[-1].fields["command"].get("lsid")


async def _runner_assert_same_lsid(ctx: TestContext, _: Any, raw: dict[str, Any]) -> Any:
    """``assertSameLsidOnLastTwoCommands``."""
    args = Arguments(ctx, "assertSameLsidOnLastTwoCommands", raw)
    first, second = _last_two_lsids(ctx, args.required("client"))
    args.done()
    if first != second:
        raise AssertionError(f"lsids differ: {first} != {second}")
    return None


async def _runner_assert_different_lsid(ctx: TestContext, _: Any, raw: dict[str, Any]) -> Any:
    """``assertDifferentLsidOnLastTwoCommands``."""
    args = Arguments(ctx, "assertDifferentLsidOnLastTwoCommands", raw)
    first, second = _last_two_lsids(ctx, args.required("client"))
    args.done()
    if first == second:
        raise AssertionError(f"lsids are the same: {first}")
    return None


async def _runner_wait(ctx: TestContext, _: Any, raw: dict[str, Any]) -> Any:
    """``wait``: sleep ``ms`` milliseconds."""
    args = Arguments(ctx, "wait", raw)
    ms = args.required("ms")
    args.done()
    await asyncio.sleep(ms / 1000.0)
    return None


TEST_RUNNER_OPERATIONS: dict[str, Operation] = {
    "failPoint": _runner_fail_point,
    "targetedFailPoint": _runner_targeted_fail_point,
    "createEntities": _runner_create_entities,
    "waitForEvent": _runner_wait_for_event,
    "assertEventCount": _runner_assert_event_count,
    "assertSessionTransactionState": _runner_assert_session_transaction_state,
    "assertSessionPinned": _runner_assert_session_pinned,
    "assertSessionUnpinned": _runner_assert_session_unpinned,
    "assertCollectionExists": _assert_collection("assertCollectionExists", exists=True),
    "assertCollectionNotExists": _assert_collection("assertCollectionNotExists", exists=False),
    "assertIndexExists": _assert_index("assertIndexExists", exists=True),
    "assertIndexNotExists": _assert_index("assertIndexNotExists", exists=False),
    "assertSameLsidOnLastTwoCommands": _runner_assert_same_lsid,
    "assertDifferentLsidOnLastTwoCommands": _runner_assert_different_lsid,
    "wait": _runner_wait,
}
"""Operations with ``object: testRunner``."""
