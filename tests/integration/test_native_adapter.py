"""Mechanics of the pymongo >= 4.17 adapter: the policy object, options, wrappers, restoration."""

from __future__ import annotations

import gc
import inspect
import weakref
from typing import Any

import pymongo
import pytest
from pymongo.errors import OperationFailure, PyMongoError

import backpressure
from backpressure import DRAFT
from backpressure.adapters import native, seams
from backpressure.core.client_state import ClientState
from backpressure.core.labels import RETRYABLE, SYSTEM_OVERLOADED
from backpressure.switch.client import budget as budget_of
from backpressure.switch.client import state as state_of
from backpressure.testing.server.embedded import EmbeddedServer
from tests.integration.conftest import (
    FAST_BACKOFF,
    NATIVE_LOOP_ONLY,
    ClientFactory,
    CommandRecorder,
    FailPointSwitch,
    RetryRecorder,
    overload_fail_point,
    resolve,
)

pytestmark = [
    NATIVE_LOOP_ONLY,
    pytest.mark.timeout(60),
]


def _options(client: Any) -> tuple[int, bool]:
    """Return pymongo's (max_adaptive_retries, enable_overload_retargeting) of ``client``."""
    return client.options.max_adaptive_retries, client.options.enable_overload_retargeting


async def test_policy_object_replaces_pymongo_policy_in_the_right_flavour(
    clients: ClientFactory, standalone_server: EmbeddedServer
) -> None:
    """The client's _retry_policy is ours; should_retry is async only where pymongo awaits it."""
    client = clients.plain(standalone_server.uri)
    original = client._retry_policy
    backpressure.enable(client, DRAFT)
    ours = client._retry_policy
    assert isinstance(ours, native.NativeRetryHook)
    awaited = clients.is_async and seams.ASYNC_SHOULD_RETRY_AWAITED
    assert inspect.iscoroutinefunction(ours.should_retry) is awaited
    assert inspect.iscoroutinefunction(original.should_retry) is awaited
    assert (ours.attempts, ours.backoff_initial, ours.backoff_max) == (5, 0.1, 10.0)


async def test_options_follow_the_policy_and_disable_restores_everything(
    clients: ClientFactory, standalone_server: EmbeddedServer
) -> None:
    """maxAdaptiveRetries/enableOverloadRetargeting follow the policy; disable puts all back.

    (A client given either option explicitly keeps it: see test_client_api.)
    """
    client = clients.plain(standalone_server.uri)
    original_policy = client._retry_policy
    before = dict(vars(client))
    backpressure.enable(client, DRAFT.replace(max_retries=7, retarget=True))
    assert _options(client) == (7, True)
    assert "_retry_internal" in vars(client)
    backpressure.enable(client, "draft")  # replaces: still restorable to the originals
    assert _options(client) == (5, True)
    backpressure.disable(client)
    assert client._retry_policy is original_policy
    assert _options(client) == (2, False)
    assert dict(vars(client)) == before
    assert state_of(client) is None


async def test_one_loop_one_txn_number(
    clients: ClientFactory,
    replicaset_server: EmbeddedServer,
    commands: CommandRecorder,
    retries: RetryRecorder,
) -> None:
    """All 6 attempts of an always-overloaded insert share one txnNumber: no stacked loop."""
    client = clients.plain(replicaset_server.uri, event_listeners=[commands])
    backpressure.enable(client, FAST_BACKOFF, listeners=[retries], random=lambda: 0.0)
    replicaset_server.configure_fail_point(overload_fail_point(["insert"]))
    with pytest.raises(PyMongoError):
        await resolve(client.db.coll.insert_one({"x": 1}))
    inserts = commands.started_commands("insert")
    assert len(inserts) == 6
    assert {doc["txnNumber"] for doc in inserts} == {inserts[0]["txnNumber"]}


async def test_failed_classic_retry_refunds_a_token(
    clients: ClientFactory,
    replicaset_server: EmbeddedServer,
    commands: CommandRecorder,
) -> None:
    """A retry that fails without the overload label (dropped connection) deposits 1 token."""
    drop = {
        "configureFailPoint": "failCommand",
        "mode": {"times": 1},
        "data": {"failCommands": ["insert"], "closeConnection": True},
    }

    # Make the retry of the overloaded insert lose its connection.
    switch = FailPointSwitch(replicaset_server, "insert", "failed", drop)
    client = clients.plain(replicaset_server.uri, event_listeners=[commands, switch])
    backpressure.enable(client, FAST_BACKOFF.replace(budget_capacity=10), random=lambda: 0.0)
    await resolve(client.admin.command("ping"))
    bucket = budget_of(client)
    assert bucket is not None
    assert bucket.try_consume(5)  # leave room below the capacity for deposits
    start = bucket.tokens
    replicaset_server.configure_fail_point(overload_fail_point(["insert"], times=1))
    await resolve(client.db.coll.insert_one({"_id": 1}))
    assert len(commands.started_commands("insert")) == 3
    # -1 for the overload retry, +1 for the retry that failed without the label,
    # +1.1 for succeeding on a retry.
    assert bucket.tokens == pytest.approx(start - 1 + 1 + 1.1)


async def test_fallback_outside_an_operation_applies_the_policy(
    clients: ClientFactory, standalone_server: EmbeddedServer
) -> None:
    """Called outside our wrapper, the policy object asks the cycle with pymongo's attempt
    number, and ``should_retry`` returns exactly what ``backoff`` decided, read from the delay
    pymongo hands back to it (as pymongo's loop does)."""
    client = clients.plain(standalone_server.uri)
    backpressure.enable(client, DRAFT.replace(max_retries=2), random=lambda: 1.0)
    policy = client._retry_policy
    overload = OperationFailure(
        "overloaded", 462, {"ok": 0, "errorLabels": [SYSTEM_OVERLOADED, RETRYABLE]}
    )
    try:
        raise overload
    except OperationFailure:
        delay = policy.backoff(1)
        assert delay == pytest.approx(0.1)
        assert await resolve(policy.should_retry(1, delay)) is True
        delay = policy.backoff(2)
        assert delay == pytest.approx(0.2)
        assert await resolve(policy.should_retry(2, delay)) is True
        delay = policy.backoff(3)
        assert delay == 0.0
        assert await resolve(policy.should_retry(3, delay)) is False
        # A delay that is not one our backoff granted is refused (nothing is stashed).
        assert await resolve(policy.should_retry(1, 0.1)) is False
    # Without a preceding backoff (or outside an error) there is nothing to retry.
    assert await resolve(policy.should_retry(1, 0.0)) is False
    delay = policy.backoff(1)
    assert delay == 0.0
    assert await resolve(policy.should_retry(1, delay)) is False


async def test_enable_twice_replaces_state_not_wrappers(
    clients: ClientFactory, standalone_server: EmbeddedServer
) -> None:
    """Enabling again swaps state and options but keeps a single set of wrappers."""
    client = clients.plain(standalone_server.uri)
    backpressure.enable(client, DRAFT)
    wrapper = vars(client)["_retry_internal"]
    first = state_of(client)
    backpressure.enable(client, "current")
    assert vars(client)["_retry_internal"] is wrapper
    second = state_of(client)
    assert second is not None
    assert second is not first
    assert second.policy.name == "current"
    assert client._retry_policy.attempts == 2


async def test_success_path_creates_no_operation_bookkeeping(
    clients: ClientFactory,
    standalone_server: EmbeddedServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A first-attempt success only deposits: no CycleRecord is built for it."""
    client = clients.plain(standalone_server.uri)
    backpressure.enable(client, DRAFT)
    collection = client["bp"]["lazy"]
    await resolve(collection.insert_one({"_id": 1}))
    built: list[str] = []
    original = ClientState.new_operation

    def counting(self: Any, operation: str) -> Any:
        built.append(operation)
        return original(self, operation)

    monkeypatch.setattr(ClientState, "new_operation", counting)
    state = state_of(client)
    assert state is not None
    budget = state.controller.budget
    assert budget.try_consume(1.0)
    for _ in range(5):
        assert await resolve(collection.find_one({"_id": 1})) == {"_id": 1}
    assert built == []
    assert budget.tokens == 999.5  # five first-attempt deposits of 0.1


def test_wrappers_keep_no_strong_reference_to_the_client(
    standalone_server: EmbeddedServer,
) -> None:
    """The wrappers, bound once at install, reach the client through a weak reference."""
    client: Any = pymongo.MongoClient(standalone_server.uri, connect=False)
    backpressure.enable(client, DRAFT)
    ref = weakref.ref(client)
    client.close()
    gc.disable()
    try:
        del client
        assert ref() is None  # freed by reference counting: no cycle through our wrappers
    finally:
        gc.enable()
