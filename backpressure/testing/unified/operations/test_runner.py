"""Operations with ``object: testRunner``: fail points, entities, event and session assertions."""

from __future__ import annotations

import asyncio
import importlib
import time
from collections.abc import Mapping
from typing import Any

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


async def _runner_targeted_fail_point(ctx: TestContext, _: Any, raw: dict[str, Any]) -> Any:
    """``targetedFailPoint``: without mongos pinning the session's server is the primary."""
    if ctx.topology in ("sharded", "load-balanced"):
        raise Unsupported("targetedFailPoint on a sharded deployment (mongos pinning)")
    args = Arguments(ctx, "targetedFailPoint", raw)
    session = ctx.entities.get(args.required("session"))
    fail_point = args.required("failPoint")
    args.done()
    client = session.client
    await maybe_await(client.admin.command(fail_point))
    ctx.fail_points.append((client, fail_point["configureFailPoint"]))
    return None


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
    inner = session.delegate if type(session).__module__.startswith("motor") else session
    actual = inner._transaction.state
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
    "assertSameLsidOnLastTwoCommands": _runner_assert_same_lsid,
    "assertDifferentLsidOnLastTwoCommands": _runner_assert_different_lsid,
    "wait": _runner_wait,
}
"""Operations with ``object: testRunner``."""
