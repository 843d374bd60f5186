"""The backported retry loop (pymongo 4.9-4.16) against the embedded server, sync and async."""

from __future__ import annotations

import pytest
from pymongo import _csot, monitoring
from pymongo.asynchronous import pool as asynchronous_pool
from pymongo.errors import OperationFailure, PyMongoError
from pymongo.hello import Hello
from pymongo.operations import InsertOne
from pymongo.synchronous import pool as synchronous_pool

from backpressure import DRAFT
from backpressure.core.decision import StopReason
from backpressure.core.events import retry_summary
from backpressure.testing import EmbeddedServer
from tests.integration.conftest import (
    BACKPORT_ONLY,
    OVERLOAD_CODE,
    ClientFactory,
    CommandRecorder,
    FailPointSwitch,
    enabled_client,
    in_transaction,
    overload_fail_point,
    resolve,
    to_list,
    wait_for_mongoses,
)

pytestmark = [
    BACKPORT_ONLY,
    pytest.mark.timeout(60),
]


async def test_insert_many_retries_only_failed_batch(
    clients: ClientFactory,
    replicaset_server: EmbeddedServer,
    commands: CommandRecorder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """5 documents in 3 batches, the 2nd overloaded once: only that batch is sent again."""
    monkeypatch.setattr(Hello, "max_write_batch_size", property(lambda self: 2))
    arm = FailPointSwitch(
        replicaset_server, "insert", "succeeded", overload_fail_point(["insert"], times=1)
    )
    client = enabled_client(clients, replicaset_server.uri, event_listeners=[commands, arm])
    await resolve(client.db.coll.insert_many([{"_id": i} for i in range(5)]))
    inserts = commands.started_commands("insert")
    assert [([d["_id"] for d in cmd["documents"]], cmd["txnNumber"]) for cmd in inserts] == [
        ([0, 1], 1),
        ([2, 3], 2),
        ([2, 3], 2),
        ([4], 3),
    ]
    assert commands.failed_names() == ["insert"]
    assert await resolve(client.db.coll.count_documents({})) == 5


async def test_plain_find_retried(
    clients: ClientFactory, standalone_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """A find on a standalone is retried on overload (reads need no sessions)."""
    client = enabled_client(clients, standalone_server.uri, event_listeners=[commands])
    standalone_server.configure_fail_point(overload_fail_point(["find"], times=2))
    assert await resolve(client.db.coll.find_one({})) is None
    assert len(commands.started_commands("find")) == 3


async def test_standalone_insert_retried(
    clients: ClientFactory, standalone_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """On a standalone (no retryable writes) an overloaded insert is still retried."""
    client = enabled_client(clients, standalone_server.uri, event_listeners=[commands])
    standalone_server.configure_fail_point(overload_fail_point(["insert"], times=1))
    await resolve(client.db.coll.insert_one({"_id": 1}))
    assert len(commands.started_commands("insert")) == 2


async def test_retry_options_ignored_when_policy_says_so(
    clients: ClientFactory, replicaset_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """With respect_retry_options=False an overloaded insert is retried despite retryWrites."""
    client = enabled_client(
        clients,
        replicaset_server.uri,
        DRAFT.replace(respect_retry_options=False),
        event_listeners=[commands],
        retryWrites=False,
    )
    replicaset_server.configure_fail_point(overload_fail_point(["insert"], times=1))
    await resolve(client.db.coll.insert_one({"_id": 1}))
    assert len(commands.started_commands("insert")) == 2


async def test_csot_bounds_retries(
    clients: ClientFactory, replicaset_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """Under timeoutMS the loop stops before a backoff would pass the deadline."""
    policy = DRAFT.replace(max_retries=50, base_backoff=0.4, max_backoff=0.4)
    client = enabled_client(
        clients,
        replicaset_server.uri,
        policy,
        random=lambda: 0.999,
        event_listeners=[commands],
        timeoutMS=2000,
    )
    # Server known and a connection open: the deadline is spent on attempts and backoffs only.
    await resolve(client.admin.command("hello"))
    replicaset_server.configure_fail_point(overload_fail_point(["insert"]))
    with pytest.raises(PyMongoError) as caught:
        await resolve(client.db.coll.insert_one({"_id": 1}))
    if not caught.value.timeout:  # else the last attempt itself ran into the deadline
        assert isinstance(caught.value, OperationFailure)
        assert caught.value.code == OVERLOAD_CODE
        summary = retry_summary(caught.value)
        assert summary is not None
        assert summary.stop_reason is StopReason.DEADLINE
    attempts = len(commands.started_commands("insert"))
    assert 2 <= attempts <= 6  # 2 s / 0.4 s backoffs, never 51
    assert _csot.get_timeout() is None


async def test_retargets_to_other_mongos(
    clients: ClientFactory, sharded_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """After an overload on one mongos the retry goes to the other one."""
    client = enabled_client(
        clients, sharded_server.uri, event_listeners=[commands], localThresholdMS=1000
    )
    await resolve(client.admin.command("ping"))
    await wait_for_mongoses(client)
    overloaded = sharded_server.addresses[0]
    sharded_server.configure_fail_point(overload_fail_point(["insert"]), member=0)
    retried: list[list[tuple[str, int]]] = []
    for i in range(20):  # selection is random: stop once an insert first hit the bad mongos
        commands.reset()
        await resolve(client.db.coll.insert_one({"_id": i}))
        addresses = commands.addresses("insert")
        if len(addresses) > 1:
            retried.append(addresses)
            break
    assert retried, "no insert was sent to the overloaded mongos"
    assert retried[0][0] == overloaded
    assert retried[0][1:] == [sharded_server.addresses[1]]


async def test_non_overload_error_keeps_classic_behaviour(
    clients: ClientFactory, replicaset_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """A non-retryable error is raised at once; a retryable write error is retried once."""
    client = enabled_client(clients, replicaset_server.uri, event_listeners=[commands])
    replicaset_server.configure_fail_point(
        {
            "configureFailPoint": "failCommand",
            "mode": {"times": 1},
            "data": {"failCommands": ["insert"], "errorCode": 2},
        }
    )
    with pytest.raises(OperationFailure):
        await resolve(client.db.coll.insert_one({"_id": 1}))
    assert len(commands.started_commands("insert")) == 1
    commands.reset()
    replicaset_server.configure_fail_point(
        {
            "configureFailPoint": "failCommand",
            "mode": {"times": 2},
            "data": {
                "failCommands": ["insert"],
                "errorCode": 262,
                "errorLabels": ["RetryableWriteError"],
            },
        }
    )
    with pytest.raises(OperationFailure) as caught:
        await resolve(client.db.coll.insert_one({"_id": 2}))
    assert caught.value.code == 262
    assert len(commands.started_commands("insert")) == 2


async def test_client_bulk_write_retried(
    clients: ClientFactory, replicaset_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """client.bulk_write succeeds after overloads whose code is no classic retryable code."""
    client = enabled_client(clients, replicaset_server.uri, event_listeners=[commands])
    replicaset_server.configure_fail_point(overload_fail_point(["bulkWrite"], times=2, code=2))
    result = await resolve(client.bulk_write([InsertOne(namespace="db.coll", document={"_id": 8})]))
    assert result.inserted_count == 1
    bulk_writes = commands.started_commands("bulkWrite")
    assert len(bulk_writes) == 3
    assert len({cmd["txnNumber"] for cmd in bulk_writes}) == 1


async def test_abort_retried_on_overload(
    clients: ClientFactory, replicaset_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """An overloaded abortTransaction is retried until the server accepts it."""
    client = enabled_client(clients, replicaset_server.uri, event_listeners=[commands])
    replicaset_server.configure_fail_point(overload_fail_point(["abortTransaction"], times=2))
    await in_transaction(
        client,
        lambda session: client.db.coll.insert_one({"_id": 1}, session=session),
        abort=True,
    )
    assert len(commands.started_commands("abortTransaction")) == 3
    assert commands.failed_names() == ["abortTransaction", "abortTransaction"]
    assert await resolve(client.db.coll.count_documents({})) == 0


@pytest.mark.parametrize(("retry_writes", "attempts"), [(True, 2), (False, 1)])
async def test_aggregate_with_out_needs_retry_writes(
    clients: ClientFactory,
    replicaset_server: EmbeddedServer,
    commands: CommandRecorder,
    retry_writes: bool,
    attempts: int,
) -> None:
    """An aggregate writing with $out is retried on overload only when retryWrites is on."""
    client = enabled_client(
        clients, replicaset_server.uri, event_listeners=[commands], retryWrites=retry_writes
    )
    await resolve(client.db.coll.insert_one({"_id": 1}))
    replicaset_server.configure_fail_point(overload_fail_point(["aggregate"], times=1))
    pipeline = [{"$match": {}}, {"$out": "copy"}]
    if retry_writes:
        await to_list(await resolve(client.db.coll.aggregate(pipeline)))
        assert await resolve(client.db.copy.count_documents({})) == 1
    else:
        with pytest.raises(OperationFailure):
            await to_list(await resolve(client.db.coll.aggregate(pipeline)))
    writes = [
        cmd
        for cmd in commands.started_commands("aggregate")
        if any("$out" in stage for stage in cmd["pipeline"])
    ]
    assert len(writes) == attempts


async def test_no_writes_performed_reports_the_earlier_error(
    clients: ClientFactory, replicaset_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """A retry failing with NoWritesPerformed raises the overload error of the attempt before."""
    no_writes = {
        "configureFailPoint": "failCommand",
        "mode": {"times": 1},
        "data": {"failCommands": ["insert"], "errorCode": 2, "errorLabels": ["NoWritesPerformed"]},
    }
    switch = FailPointSwitch(replicaset_server, "insert", "failed", no_writes)
    client = enabled_client(clients, replicaset_server.uri, event_listeners=[commands, switch])
    replicaset_server.configure_fail_point(overload_fail_point(["insert"], times=1))
    with pytest.raises(OperationFailure) as caught:
        await resolve(client.db.coll.insert_one({"_id": 1}))
    assert caught.value.code == OVERLOAD_CODE
    assert isinstance(caught.value.__cause__, OperationFailure)
    assert caught.value.__cause__.code == 2
    assert len(commands.started_commands("insert")) == 2


class _NoSessionsAfterAFailure(monitoring.CommandListener):
    """Once a command failed, every connection says it supports no sessions (see below)."""

    def __init__(self) -> None:
        """No command failed yet."""
        self.failed_once = False

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        """Nothing to do."""

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        """Nothing to do."""

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        """From now on, connections support no sessions."""
        self.failed_once = True


async def test_a_retry_without_sessions_raises_the_error_retried_as_it_is(
    clients: ClientFactory,
    replicaset_server: EmbeddedServer,
    commands: CommandRecorder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """pymongo's classic retry of a write needs sessions: when the retry's connection has none,
    the error retried is raised from within that attempt, with its summary, and the loop does not
    handle it again as that attempt's failure (the attempt cycle's order: ended, then nothing)."""
    switch = _NoSessionsAfterAFailure()

    def supports_sessions(conn: object) -> bool:
        return not switch.failed_once and bool(vars(conn).get("supports_sessions"))

    def set_supports_sessions(conn: object, value: bool) -> None:
        vars(conn)["supports_sessions"] = value  # read again once the test is over

    for module in (synchronous_pool, asynchronous_pool):
        connection_class = getattr(module, "Connection", None) or module.AsyncConnection
        monkeypatch.setattr(
            connection_class,
            "supports_sessions",
            property(supports_sessions, set_supports_sessions),
            raising=False,
        )
    client = enabled_client(clients, replicaset_server.uri, event_listeners=[commands, switch])
    await resolve(client.db.coll.insert_one({"_id": 1}))  # connected, with sessions
    replicaset_server.configure_fail_point(
        {
            "configureFailPoint": "failCommand",
            "mode": {"times": 1},
            "data": {
                "failCommands": ["insert"],
                "errorCode": 262,
                "errorLabels": ["RetryableWriteError"],
            },
        }
    )
    commands.reset()
    with pytest.raises(OperationFailure) as caught:
        await resolve(client.db.coll.insert_one({"_id": 2}))
    assert caught.value.code == 262
    assert len(commands.started_commands("insert")) == 1
    summary = retry_summary(caught.value)
    assert summary is not None
    assert summary.attempts == 2
