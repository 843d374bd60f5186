"""Overload retries end to end through ``backpressure.enable`` against the embedded server.

These tests describe behaviour, not mechanics: they run on every pymongo era (the native adapter
on pymongo >= 4.17, the backport below), sync and async.  Jitter is pinned through the
controller's injected random source, so no test sleeps unless the delay is what it measures.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any, Callable

import pymongo
import pytest
from pymongo.errors import OperationFailure, PyMongoError

import backpressure
from backpressure import CURRENT_SPEC, DRAFT, Policy
from backpressure.adapters import seams
from backpressure.core.decision import StopReason
from backpressure.core.events import retry_summary
from backpressure.core.labels import RETRYABLE, SYSTEM_OVERLOADED, is_retryable_overload
from backpressure.switch.client import budget as budget_of
from backpressure.testing.server.embedded import EmbeddedServer
from tests.integration import conftest
from tests.integration.conftest import (
    FAST_BACKOFF,
    OVERLOAD_CODE,
    ClientFactory,
    CommandRecorder,
    FailPointSwitch,
    RetryRecorder,
    in_transaction,
    overload_fail_point,
    resolve,
    to_list,
    wait_for_members,
)

"""Draft semantics with millisecond backoff, for tests where the delay is not what is tested."""


SETUPS = [
    pytest.param("standalone", False, id="standalone-enable"),
    pytest.param("replicaset", True, id="replicaset-class"),
]
"""(topology, backpressure_class) pairs for tests run on a plain client enabled on a standalone
and on a ``backpressure`` client class (the backport's pool on pymongo < 4.17) on a replica set."""


def enabled_client(
    clients: ClientFactory,
    server: EmbeddedServer,
    commands: CommandRecorder,
    retries: RetryRecorder,
    policy: Any = DRAFT,
    jitter: float = 0.0,
    *,
    backpressure_class: bool = False,
    **kwargs: Any,
) -> Any:
    """``conftest.enabled_client`` on ``server`` recording into ``commands`` and ``retries``.

    A plain pymongo client unless ``backpressure_class``; ``jitter`` is the pinned random value.
    """
    return conftest.enabled_client(
        clients,
        server.uri,
        policy,
        listeners=[retries],
        random=lambda: jitter,
        backpressure_class=backpressure_class,
        event_listeners=[commands],
        **kwargs,
    )


@pytest.mark.parametrize(("server", "backpressure_class"), SETUPS, indirect=["server"])
@pytest.mark.parametrize(
    ("policy", "attempts"),
    [
        pytest.param(DRAFT, 6, id="draft"),
        pytest.param(CURRENT_SPEC, 3, id="current"),
        pytest.param(CURRENT_SPEC.replace(max_retries=1), 2, id="maxAdaptiveRetries=1"),
    ],
)
async def test_always_overloaded_insert_attempts(
    clients: ClientFactory,
    server: EmbeddedServer,
    commands: CommandRecorder,
    retries: RetryRecorder,
    backpressure_class: bool,
    policy: Policy,
    attempts: int,
) -> None:
    """Prose tests: an always-overloaded insert is sent 6 times (draft), 3 times (current spec),
    twice (maxAdaptiveRetries=1), then the overload error surfaces."""
    client = enabled_client(
        clients, server, commands, retries, policy, backpressure_class=backpressure_class
    )
    server.configure_fail_point(overload_fail_point(["insert"]))
    with pytest.raises(OperationFailure) as info:
        await resolve(client.db.coll.insert_one({"x": 1}))
    assert info.value.code == OVERLOAD_CODE
    assert info.value.has_error_label(SYSTEM_OVERLOADED)
    assert info.value.has_error_label(RETRYABLE)
    assert len(commands.started_commands("insert")) == attempts
    summary = retry_summary(info.value)
    assert summary is not None
    assert summary.attempts == attempts
    assert summary.stop_reason is StopReason.ATTEMPTS_EXHAUSTED
    assert len(retries.retries) == attempts - 1


async def test_retry_budget_of_two_tokens_allows_two_retries(
    clients: ClientFactory,
    standalone_server: EmbeddedServer,
    commands: CommandRecorder,
    retries: RetryRecorder,
) -> None:
    """Draft prose test: with a 2-token bucket only 2 retries happen (3 inserts started)."""
    policy = DRAFT.replace(budget_capacity=2)
    client = enabled_client(clients, standalone_server, commands, retries, policy)
    standalone_server.configure_fail_point(overload_fail_point(["insert"]))
    with pytest.raises(PyMongoError) as info:
        await resolve(client.db.coll.insert_one({"x": 1}))
    assert is_retryable_overload(info.value)
    assert len(commands.started_commands("insert")) == 3
    summary = retry_summary(info.value)
    assert summary is not None
    assert summary.stop_reason is StopReason.BUDGET_EMPTY
    bucket = budget_of(client)
    assert bucket is not None
    assert bucket.tokens == 0
    assert bucket.refused == 1


@pytest.mark.parametrize(("jitter", "expected"), [(0.0, [0.0] * 5), (1.0, None)])
async def test_backoff_follows_jitter_and_draft_exponents(
    clients: ClientFactory,
    standalone_server: EmbeddedServer,
    commands: CommandRecorder,
    retries: RetryRecorder,
    jitter: float,
    expected: Any,
) -> None:
    """Draft prose test: delays are jitter * base * 2**(n-1), read from the retry events."""
    client = enabled_client(clients, standalone_server, commands, retries, FAST_BACKOFF, jitter)
    standalone_server.configure_fail_point(overload_fail_point(["insert"]))
    with pytest.raises(PyMongoError):
        await resolve(client.db.coll.insert_one({"x": 1}))
    want = expected if expected is not None else [0.001, 0.002, 0.004, 0.008, 0.016]
    assert retries.delays == pytest.approx(want)


async def test_server_base_backoff_sets_the_delays(
    clients: ClientFactory,
    embedded_server_factory: Callable[..., EmbeddedServer],
    commands: CommandRecorder,
    retries: RetryRecorder,
) -> None:
    """The server's baseBackoffMS replaces the policy base (0.1 s) in the reported delays
    (baseBackoffMS exists from MongoDB 9.0 on: the server runs the 9.0 profile)."""
    standalone_server = embedded_server_factory(server_version="9.0")
    policy = DRAFT.replace(max_retries=2)
    client = enabled_client(clients, standalone_server, commands, retries, policy, 1.0)
    standalone_server.set_parameter(externalClientBaseBackoffMS=2)
    standalone_server.configure_fail_point(overload_fail_point(["insert"]))
    with pytest.raises(OperationFailure) as info:
        await resolve(client.db.coll.insert_one({"x": 1}))
    assert info.value.details is not None
    assert info.value.details.get("baseBackoffMS") == 2
    assert retries.delays == pytest.approx([0.002, 0.004])


@pytest.mark.parametrize("backpressure_class", [False, True])
async def test_insert_succeeds_after_two_overloads(
    clients: ClientFactory,
    replicaset_server: EmbeddedServer,
    commands: CommandRecorder,
    retries: RetryRecorder,
    backpressure_class: bool,
) -> None:
    """Two overloads then success: 3 inserts, all with txnNumber 1, one document written once."""
    client = enabled_client(
        clients, replicaset_server, commands, retries, backpressure_class=backpressure_class
    )
    replicaset_server.configure_fail_point(overload_fail_point(["insert"], times=2))
    await resolve(client.db.coll.insert_one({"_id": 1}))
    inserts = commands.started_commands("insert")
    assert [cmd["txnNumber"] for cmd in inserts] == [1, 1, 1]
    assert commands.failed_names() == ["insert", "insert"]
    transactions = replicaset_server.stats()["transactions"]
    assert [(t["txnNumber"], t["applied"]) for t in transactions] == [(1, True)]
    bucket = budget_of(client)
    assert bucket is not None
    assert bucket.tokens == pytest.approx(1000 - 2 + 1.1)  # two retries, then success on a retry
    assert await resolve(client.db.coll.count_documents({})) == 1


@pytest.mark.parametrize(("server", "backpressure_class"), SETUPS, indirect=["server"])
async def test_get_more_is_retried(
    clients: ClientFactory,
    server: EmbeddedServer,
    commands: CommandRecorder,
    retries: RetryRecorder,
    backpressure_class: bool,
) -> None:
    """An overloaded getMore is retried on the same server and cursor; iteration completes."""
    client = enabled_client(
        clients, server, commands, retries, backpressure_class=backpressure_class
    )
    await resolve(client.db.coll.insert_many([{"_id": i} for i in range(5)]))
    server.configure_fail_point(overload_fail_point(["getMore"], times=2))
    docs = await to_list(client.db.coll.find({}, batch_size=2))
    assert [d["_id"] for d in docs] == list(range(5))
    assert commands.failed_names() == ["getMore", "getMore"]
    assert [e.operation for e in retries.retries] == ["getMore", "getMore"]
    get_mores = commands.addresses("getMore")
    assert len(get_mores) == 4  # 2 failed + 2 needed
    assert len(set(get_mores)) == 1


@pytest.mark.parametrize(("server", "backpressure_class"), SETUPS, indirect=["server"])
async def test_update_many_is_retried(
    clients: ClientFactory,
    server: EmbeddedServer,
    commands: CommandRecorder,
    retries: RetryRecorder,
    backpressure_class: bool,
) -> None:
    """update_many (no retryable write: no txnNumber sent) is retried and applied once."""
    client = enabled_client(
        clients, server, commands, retries, backpressure_class=backpressure_class
    )
    await resolve(client.db.coll.insert_many([{"_id": i, "n": 0} for i in range(2)]))
    server.configure_fail_point(overload_fail_point(["update"], times=2))
    result = await resolve(client.db.coll.update_many({}, {"$inc": {"n": 1}}))
    assert result.modified_count == 2
    updates = commands.started_commands("update")
    assert len(updates) == 3
    assert all("txnNumber" not in cmd for cmd in updates)
    docs = await to_list(client.db.coll.find({}))
    assert [d["n"] for d in docs] == [1, 1]


async def test_run_command_ping_is_retried(
    clients: ClientFactory,
    standalone_server: EmbeddedServer,
    commands: CommandRecorder,
    retries: RetryRecorder,
) -> None:
    """Database.command("ping") is retried on overload."""
    client = enabled_client(clients, standalone_server, commands, retries)
    standalone_server.configure_fail_point(overload_fail_point(["ping"], times=2))
    reply = await resolve(client.admin.command("ping"))
    assert reply["ok"] == 1
    assert len(commands.started_commands("ping")) == 3


async def test_retry_goes_to_the_other_mongos(
    clients: ClientFactory,
    sharded_server: EmbeddedServer,
    commands: CommandRecorder,
    retries: RetryRecorder,
) -> None:
    """On a sharded cluster the retry is sent to the mongos that did not fail."""
    policy = FAST_BACKOFF.replace(max_retries=1)
    client = enabled_client(clients, sharded_server, commands, retries, policy)
    await resolve(client.admin.command("ping"))  # an AsyncMongoClient connects on first use
    # Discovering the second router takes a monitor round; under load it can come after the
    # first operation, and then both attempts would go to the one router known.
    await conftest.wait_for_mongoses(client)
    sharded_server.configure_fail_point(overload_fail_point(["insert"]))
    with pytest.raises(PyMongoError) as info:
        await resolve(client.db.coll.insert_one({"x": 1}))
    addresses = commands.addresses("insert")
    assert len(addresses) == 2
    assert addresses[0] != addresses[1]
    summary = retry_summary(info.value)
    assert summary is not None
    assert len(summary.servers) == 2


async def test_csot_deadline_stops_retries_with_the_overload_error(
    clients: ClientFactory,
    standalone_server: EmbeddedServer,
    commands: CommandRecorder,
    retries: RetryRecorder,
) -> None:
    """With pymongo.timeout(3.0) and delays of 1 s then 2 s, the second retry is refused.

    The timeout is exactly the sum of the two delays, so the second retry would end after the
    deadline however fast the attempts are; the first is granted unless its attempt alone took
    2 s (a margin that holds on a loaded machine).
    """
    policy = DRAFT.replace(base_backoff=1.0)
    client = enabled_client(clients, standalone_server, commands, retries, policy, 1.0)
    await resolve(client.admin.command("ping"))
    standalone_server.configure_fail_point(overload_fail_point(["insert"]))
    bucket = budget_of(client)
    assert bucket is not None
    with pytest.raises(OperationFailure) as info, pymongo.timeout(3.0):
        await resolve(client.db.coll.insert_one({"x": 1}))
    assert info.value.code == 462
    summary = retry_summary(info.value)
    assert summary is not None
    assert summary.stop_reason is StopReason.DEADLINE
    assert summary.attempts == 2  # 1 s then 2 s would end after the deadline
    assert bucket.tokens == 999  # no token taken for the refused retry


@pytest.mark.parametrize("backpressure_class", [False, True])
async def test_transaction_first_command_retried_with_start_transaction(
    clients: ClientFactory,
    replicaset_server: EmbeddedServer,
    commands: CommandRecorder,
    retries: RetryRecorder,
    backpressure_class: bool,
) -> None:
    """An overloaded first command of a transaction is re-sent with startTransaction."""
    client = enabled_client(
        clients,
        replicaset_server,
        commands,
        retries,
        FAST_BACKOFF,
        backpressure_class=backpressure_class,
    )
    await resolve(client.db.coll.insert_one({"_id": 0}))
    commands.reset()
    replicaset_server.configure_fail_point(overload_fail_point(["insert"], times=1))
    await in_transaction(
        client,
        lambda session: client.db.coll.insert_one({"_id": 1}, session=session),
        lambda session: client.db.coll.insert_one({"_id": 2}, session=session),
    )
    inserts = commands.started_commands("insert")
    assert [cmd.get("startTransaction", False) for cmd in inserts] == [True, True, False]
    assert len({cmd["txnNumber"] for cmd in inserts}) == 1
    assert await resolve(client.db.coll.count_documents({})) == 3


@pytest.mark.parametrize(("backpressure_class", "overloads"), [(False, 1), (True, 2)])
async def test_overloaded_commit_is_retried(
    clients: ClientFactory,
    replicaset_server: EmbeddedServer,
    commands: CommandRecorder,
    retries: RetryRecorder,
    backpressure_class: bool,
    overloads: int,
) -> None:
    """An overloaded commitTransaction is retried and the transaction commits once."""
    client = enabled_client(
        clients,
        replicaset_server,
        commands,
        retries,
        FAST_BACKOFF,
        backpressure_class=backpressure_class,
    )
    await resolve(client.db.create_collection("coll"))
    replicaset_server.configure_fail_point(
        overload_fail_point(["commitTransaction"], times=overloads)
    )
    await in_transaction(
        client, lambda session: client.db.coll.insert_one({"_id": 1}, session=session)
    )
    assert len(commands.started_commands("commitTransaction")) == overloads + 1
    assert [e.operation for e in retries.retries] == ["commitTransaction"] * overloads
    assert all(type(e.operation) is str for e in retries.retries)
    assert await resolve(client.db.coll.count_documents({})) == 1


async def test_no_duplicate_write_when_overload_and_network_errors_mix(
    clients: ClientFactory,
    replicaset_server: EmbeddedServer,
    commands: CommandRecorder,
    retries: RetryRecorder,
) -> None:
    """Applied-then-overloaded, then a dropped connection: one txnNumber, one write applied."""
    overloaded_wce = {
        "code": 462,
        "errmsg": "overloaded after the write",
        "errorLabels": [SYSTEM_OVERLOADED, RETRYABLE],
    }
    replicaset_server.configure_fail_point(
        {
            "configureFailPoint": "failCommand",
            "mode": {"times": 1},
            "data": {"failCommands": ["insert"], "writeConcernError": overloaded_wce},
        }
    )
    drop = {
        "configureFailPoint": "failCommand",
        "mode": {"times": 1},
        "data": {"failCommands": ["insert"], "closeConnection": True},
    }

    def overloaded_after_the_write(event: Any) -> None:
        assert "writeConcernError" in event.reply

    # After the write-concern-overloaded insert, make the next insert lose its connection.
    switcher = FailPointSwitch(
        replicaset_server, "insert", "succeeded", drop, check=overloaded_after_the_write
    )
    client2 = clients.plain(replicaset_server.uri, event_listeners=[commands, switcher])
    backpressure.enable(client2, FAST_BACKOFF, listeners=[retries], random=lambda: 0.0)
    await resolve(client2.db.coll.insert_one({"_id": 7}))
    inserts = commands.started_commands("insert")
    assert len(inserts) == 3
    assert len({doc["txnNumber"] for doc in inserts}) == 1
    assert await resolve(client2.db.coll.count_documents({})) == 1
    records = [t for t in replicaset_server.stats()["transactions"] if t["applied"]]
    assert len(records) == 1
    assert switcher.switched


async def test_plain_client_in_the_same_process_is_untouched(
    clients: ClientFactory,
    standalone_server: EmbeddedServer,
    commands: CommandRecorder,
    retries: RetryRecorder,
) -> None:
    """Enabling one client leaves another one alone: it keeps pymongo's own behaviour."""
    enabled_client(clients, standalone_server, CommandRecorder(), retries)
    plain = clients.plain(standalone_server.uri, event_listeners=[commands])
    standalone_server.configure_fail_point(overload_fail_point(["insert"]))
    with pytest.raises(PyMongoError) as info:
        await resolve(plain.db.coll.insert_one({"x": 1}))
    # pymongo >= 4.17 retries overload itself (maxAdaptiveRetries=2); older pymongo does not.
    expected = 3 if seams.HAS_NATIVE_BACKPRESSURE else 1
    assert len(commands.started_commands("insert")) == expected
    assert retry_summary(info.value) is None
    assert retries.retries == []


async def test_no_writes_performed_raises_the_earlier_error(
    clients: ClientFactory,
    replicaset_server: EmbeddedServer,
    commands: CommandRecorder,
    retries: RetryRecorder,
) -> None:
    """When the last attempt wrote nothing (NoWritesPerformed), the earlier error is raised."""
    second = {
        "configureFailPoint": "failCommand",
        "mode": "alwaysOn",
        "data": {
            "failCommands": ["insert"],
            "errorCode": 462,
            "errmsg": "second attempt, nothing written",
            "errorLabels": [SYSTEM_OVERLOADED, RETRYABLE, "NoWritesPerformed"],
        },
    }

    # After the first overloaded insert, fail the next ones with NoWritesPerformed.
    switch = FailPointSwitch(replicaset_server, "insert", "failed", second)
    policy = FAST_BACKOFF.replace(max_retries=1)
    client = clients.plain(replicaset_server.uri, event_listeners=[commands, switch])
    backpressure.enable(client, policy, listeners=[retries], random=lambda: 0.0)
    await resolve(client.admin.command("ping"))
    first = overload_fail_point(["insert"], times=1)
    first["data"]["errmsg"] = "first attempt"
    replicaset_server.configure_fail_point(first)
    with pytest.raises(OperationFailure) as info:
        await resolve(client.db.coll.insert_one({"x": 1}))
    assert len(commands.started_commands("insert")) == 2
    assert "first attempt" in str(info.value)
    summary = retry_summary(info.value)
    assert summary is not None
    assert (summary.attempts, summary.stop_reason) == (2, StopReason.ATTEMPTS_EXHAUSTED)


@pytest.mark.parametrize(("server", "backpressure_class"), SETUPS, indirect=["server"])
@pytest.mark.parametrize(
    ("options", "operation", "retried"),
    [
        ({"retryWrites": False}, "insert", False),
        ({"retryWrites": False}, "find", True),
        ({"retryReads": False}, "find", False),
        ({"retryReads": False}, "insert", True),
    ],
)
async def test_retry_options_gate_overload_retries(
    clients: ClientFactory,
    server: EmbeddedServer,
    commands: CommandRecorder,
    retries: RetryRecorder,
    backpressure_class: bool,
    options: dict[str, Any],
    operation: str,
    retried: bool,
) -> None:
    """retryWrites=false stops write retries, retryReads=false read retries, nothing else; a
    refused retry's summary and give-up event say why."""
    client = enabled_client(
        clients, server, commands, retries, backpressure_class=backpressure_class, **options
    )
    server.configure_fail_point(overload_fail_point([operation], times=1))
    coll = client.db.coll
    run = (
        (lambda: coll.insert_one({"_id": 1}))
        if operation == "insert"
        else (lambda: coll.find_one({}))
    )
    if retried:
        await resolve(run())
        assert len(commands.started_commands(operation)) == 2
    else:
        with pytest.raises(OperationFailure) as caught:
            await resolve(run())
        summary = retry_summary(caught.value)
        assert summary is not None
        assert summary.stop_reason is StopReason.RETRIES_DISABLED
        assert len(commands.started_commands(operation)) == 1
        assert [e.reason for e in retries.give_ups] == [StopReason.RETRIES_DISABLED]


@pytest.mark.parametrize("retarget", [True, False])
async def test_read_retry_retargets_only_when_the_policy_says_so(
    clients: ClientFactory,
    replicaset_server: EmbeddedServer,
    commands: CommandRecorder,
    retries: RetryRecorder,
    retarget: bool,
) -> None:
    """With retarget on, a secondary read is retried on the other secondary."""
    policy = FAST_BACKOFF.replace(max_retries=1, retarget=retarget)
    client = enabled_client(
        clients,
        replicaset_server,
        commands,
        retries,
        policy,
        readPreference="secondary",
        localThresholdMS=1000,
    )
    await resolve(client.admin.command("ping"))
    await wait_for_members(client, 3)  # both secondaries known: a retry can go to the other
    replicaset_server.configure_fail_point(overload_fail_point(["find"]))
    addresses: set[tuple[str, int]] = set()
    for _ in range(4):
        commands.reset()
        with pytest.raises(OperationFailure):
            await resolve(client.db.coll.find_one({}))
        tried = commands.addresses("find")
        assert len(tried) == 2
        if retarget:
            assert tried[0] != tried[1]
        addresses.update(tried)
    assert replicaset_server.primary_address not in addresses


async def test_concurrent_operations_keep_separate_bookkeeping(
    clients: ClientFactory,
    standalone_server: EmbeddedServer,
    commands: CommandRecorder,
    retries: RetryRecorder,
) -> None:
    """Concurrent operations (threads or tasks) on one client each count their own attempts."""
    policy = FAST_BACKOFF.replace(max_retries=2)
    client = enabled_client(clients, standalone_server, commands, retries, policy, 1.0)
    await resolve(client.admin.command("ping"))
    standalone_server.configure_fail_point(overload_fail_point(["insert"]))

    async def one(i: int) -> BaseException:
        try:
            await resolve(client.db.coll.insert_one({"_id": i}))
        except PyMongoError as exc:
            return exc
        raise AssertionError("the insert should have failed")

    if clients.is_async:
        errors = list(await asyncio.gather(*(one(i) for i in range(6))))
    else:
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            errors = list(pool.map(lambda i: asyncio.run(one(i)), range(6)))
    summaries = [retry_summary(e) for e in errors]
    assert all(s is not None and s.attempts == 3 for s in summaries)
    assert len(commands.started_commands("insert")) == 18
    assert len(retries.retries) == 12
    assert len(retries.give_ups) == 6
