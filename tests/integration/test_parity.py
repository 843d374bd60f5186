"""Never worse than stock pymongo: the cases where an enabled client used to lose to the driver.

Each test runs on every pymongo era (the native adapter on pymongo >= 4.17, the backport below),
with a sync, an async and a Motor client; where stock pymongo is the reference, the same
scenario runs on a stock client side by side.  Jitter is pinned to 0 and backoff is in
milliseconds: no test waits for time to pass.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol

import pytest
from pymongo.errors import OperationFailure
from pymongo.operations import InsertOne, UpdateOne

import backpressure
from backpressure import CURRENT_SPEC, DRAFT, Policy
from backpressure.core.decision import StopReason
from backpressure.core.events import retry_summary
from backpressure.core.labels import RETRYABLE_WRITE, SYSTEM_OVERLOADED
from backpressure.testing import EmbeddedServer
from tests.integration.conftest import (
    OVERLOAD_CODE,
    ClientFactory,
    CommandRecorder,
    FailPointSwitch,
    RetryRecorder,
    in_transaction,
    overload_fail_point,
    resolve,
    wait_for_mongoses,
)

pytestmark = pytest.mark.timeout(120)

FAST_DRAFT = DRAFT.replace(base_backoff=0.001, max_backoff=0.05)
"""The draft preset with millisecond backoff."""

FAST_CURRENT = CURRENT_SPEC.replace(base_backoff=0.001, max_backoff=0.05)
"""The current-spec preset with millisecond backoff."""

NETWORK_TIMEOUT = 89
"""A classic retryable error code (NetworkTimeout) that does not change the server's state."""


def classic_fail_point(commands: list[str], times: int) -> dict[str, Any]:
    """A fail point failing ``commands`` with a classic retryable write error (no overload)."""
    return overload_fail_point(commands, times, labels=[RETRYABLE_WRITE], code=NETWORK_TIMEOUT)


class Maker(Protocol):
    """Builds a client of the era under test: enabled with ``policy``, or stock when None."""

    def __call__(
        self,
        policy: Optional[Policy],
        listeners: list[Any],
        retries: Optional[RetryRecorder] = None,
        *,
        server: Optional[EmbeddedServer] = None,
        **kwargs: Any,
    ) -> Any:
        """Return a client (of ``server``, by default the replica set) whose calls the test
        resolves (sync results or awaitables)."""


@pytest.fixture(params=["sync", "async", "motor"])
async def make(request: pytest.FixtureRequest, replicaset_server: EmbeddedServer) -> Any:
    """A client maker for pymongo's sync and async clients and for Motor (its sync delegate)."""
    flavour = str(request.param)
    factory = ClientFactory("async" if flavour == "async" else "sync")
    motor_clients: list[Any] = []

    def build(
        policy: Optional[Policy],
        listeners: list[Any],
        retries: Optional[RetryRecorder] = None,
        *,
        server: Optional[EmbeddedServer] = None,
        **kwargs: Any,
    ) -> Any:
        uri = (server or replicaset_server).uri
        if flavour == "motor":
            from motor.motor_asyncio import AsyncIOMotorClient

            client: Any = AsyncIOMotorClient(
                uri,
                event_listeners=listeners,
                serverSelectionTimeoutMS=3000,
                **kwargs,
            )
            motor_clients.append(client)
        else:
            client = factory.plain(uri, event_listeners=listeners, **kwargs)
        if policy is not None:
            backpressure.enable(
                client, policy, listeners=[retries] if retries else [], random=lambda: 0.0
            )
        return client

    yield build
    await factory.close_all()
    for client in motor_clients:
        client.close()


@pytest.mark.parametrize(
    ("policy", "attempts"),
    [pytest.param(FAST_DRAFT, 6, id="draft"), pytest.param(FAST_CURRENT, 3, id="current")],
)
async def test_attempt_cap_holds_when_classic_and_overload_errors_mix(
    make: Maker,
    replicaset_server: EmbeddedServer,
    commands: CommandRecorder,
    retries: RetryRecorder,
    policy: Policy,
    attempts: int,
) -> None:
    """Defect 1: a classic retryable error, then overloads: all attempts together stay within
    ``max_retries + 1`` (draft 6, current 3), as stock pymongo 4.20 does with
    maxAdaptiveRetries."""
    overloads = overload_fail_point(["insert"])
    switch = FailPointSwitch(replicaset_server, "insert", "failed", overloads)
    client = make(policy, [commands, switch], retries)
    await resolve(client.admin.command("ping"))
    replicaset_server.configure_fail_point(classic_fail_point(["insert"], times=1))
    with pytest.raises(OperationFailure) as info:
        await resolve(client.db.coll.insert_one({"x": 1}))
    assert switch.switched
    assert info.value.code == OVERLOAD_CODE
    assert len(commands.started_commands("insert")) == attempts
    summary = retry_summary(info.value)
    assert summary is not None
    assert summary.attempts == attempts
    assert summary.stop_reason is StopReason.ATTEMPTS_EXHAUSTED
    # One classic retry (pymongo's), the rest granted by the overload policy.
    assert len(retries.retries) == attempts - 2
    assert [event.attempt for event in retries.retries] == list(range(2, attempts))


@pytest.mark.parametrize(
    "policy", [None, FAST_DRAFT, FAST_CURRENT], ids=["stock", "draft", "current"]
)
async def test_overload_with_only_the_retryable_write_label_is_retried(
    make: Maker,
    replicaset_server: EmbeddedServer,
    commands: CommandRecorder,
    policy: Optional[Policy],
) -> None:
    """Defect 2: ``SystemOverloadedError`` + ``RetryableWriteError`` (no ``RetryableError``) is
    retried by pymongo's classic rules; an enabled client retries it exactly like stock."""
    client = make(policy, [commands])
    await resolve(client.admin.command("ping"))
    replicaset_server.configure_fail_point(
        overload_fail_point(["insert"], times=1, labels=[SYSTEM_OVERLOADED, RETRYABLE_WRITE])
    )
    await resolve(client.db.coll.insert_one({"_id": 1}))
    inserts = commands.started_commands("insert")
    assert len(inserts) == 2
    assert len({cmd["txnNumber"] for cmd in inserts}) == 1
    assert await resolve(client.db.coll.count_documents({})) == 1


async def test_retryable_write_labelled_overload_is_capped_like_the_others(
    make: Maker,
    replicaset_server: EmbeddedServer,
    commands: CommandRecorder,
) -> None:
    """Defect 2, other side: overload errors that only pymongo's classic rules retry still count
    toward the policy's cap (current spec: 3 attempts), and are never refused for budget."""
    policy = FAST_CURRENT.replace(budget_enabled=True, budget_capacity=0.5)
    client = make(policy, [commands])
    await resolve(client.admin.command("ping"))
    replicaset_server.configure_fail_point(
        overload_fail_point(["insert"], labels=[SYSTEM_OVERLOADED, RETRYABLE_WRITE])
    )
    with pytest.raises(OperationFailure) as info:
        await resolve(client.db.coll.insert_one({"_id": 1}))
    assert len(commands.started_commands("insert")) == 3
    summary = retry_summary(info.value)
    assert summary is not None
    assert summary.attempts == 3


@pytest.mark.parametrize("policy", [None, FAST_DRAFT], ids=["stock", "enabled"])
async def test_transaction_bulk_later_batch_overload_keeps_the_transaction(
    make: Maker,
    replicaset_server: EmbeddedServer,
    commands: CommandRecorder,
    policy: Optional[Policy],
) -> None:
    """Defect 3: the first statement of a transaction is a two-batch bulk_write whose second
    batch is overloaded.  The retry must not send ``startTransaction`` again (the server began
    the transaction with the first batch).  Stock pymongo >= 4.17 gets this wrong; stock pymongo
    < 4.17 does not retry the batch at all."""
    client = make(policy, [commands])
    await resolve(client.db.coll.insert_one({"_id": 0}))
    commands.reset()
    replicaset_server.configure_fail_point(overload_fail_point(["update"], times=1))

    async def run() -> None:
        await in_transaction(
            client,
            lambda session: client.db.coll.bulk_write(
                [InsertOne({"_id": 1}), UpdateOne({"_id": 1}, {"$set": {"a": 1}})],
                session=session,
            ),
        )

    if policy is None:
        # The reference: stock pymongo fails this transaction on every era.
        with pytest.raises(OperationFailure):
            await run()
        return
    await run()
    sent = [
        (name, cmd.get("startTransaction", False))
        for name in ("insert", "update")
        for cmd in commands.started_commands(name)
    ]
    assert sent == [("insert", True), ("update", False), ("update", False)]
    assert len({cmd["txnNumber"] for cmd in commands.started_commands()}) == 1
    assert await resolve(client.db.coll.find_one({"_id": 1})) == {"_id": 1, "a": 1}


async def test_transaction_first_insert_overloaded_restarts_the_transaction(
    make: Maker,
    replicaset_server: EmbeddedServer,
    commands: CommandRecorder,
) -> None:
    """Defect 3, other side: when the first command never reached the transaction (overloaded),
    its retry carries ``startTransaction`` again."""
    client = make(FAST_DRAFT, [commands])
    await resolve(client.db.coll.insert_one({"_id": 0}))
    commands.reset()
    replicaset_server.configure_fail_point(overload_fail_point(["insert"], times=2))
    await in_transaction(
        client,
        lambda session: client.db.coll.bulk_write(
            [InsertOne({"_id": 1}), UpdateOne({"_id": 1}, {"$set": {"a": 1}})], session=session
        ),
    )
    sent = [
        (name, cmd.get("startTransaction", False))
        for name in ("insert", "update")
        for cmd in commands.started_commands(name)
    ]
    assert sent == [("insert", True), ("insert", True), ("insert", True), ("update", False)]


def _commit_write_concerns(commands: CommandRecorder) -> list[Optional[dict[str, Any]]]:
    """The writeConcern of every commitTransaction sent, in order."""
    return [
        dict(cmd["writeConcern"]) if "writeConcern" in cmd else None
        for cmd in commands.started_commands("commitTransaction")
    ]


async def test_commit_retried_after_overloads_keeps_its_write_concern(
    make: Maker,
    replicaset_server: EmbeddedServer,
    commands: CommandRecorder,
) -> None:
    """Defect 4: commitTransaction failing with overload errors only is retried with the same
    write concern (transactions spec, "Interaction with Client Backpressure")."""
    client = make(FAST_DRAFT, [commands], w=1)
    await resolve(client.db.create_collection("coll"))
    replicaset_server.configure_fail_point(overload_fail_point(["commitTransaction"], times=2))
    await in_transaction(
        client, lambda session: client.db.coll.insert_one({"_id": 1}, session=session)
    )
    concerns = _commit_write_concerns(commands)
    assert len(concerns) == 3
    assert concerns == [concerns[0]] * 3
    assert concerns[0] == {"w": 1}
    assert await resolve(client.db.coll.count_documents({})) == 1


async def test_commit_retried_after_a_classic_error_upgrades_its_write_concern(
    make: Maker,
    replicaset_server: EmbeddedServer,
    commands: CommandRecorder,
) -> None:
    """Defect 4, other side: once a commit attempt failed with an error that is no overload,
    later retries use w: majority with wtimeout 10000, overload retries included."""
    overloads = overload_fail_point(["commitTransaction"], times=1)
    switch = FailPointSwitch(replicaset_server, "commitTransaction", "failed", overloads)
    client = make(FAST_DRAFT, [commands, switch], w=1)
    await resolve(client.db.create_collection("coll"))
    replicaset_server.configure_fail_point(classic_fail_point(["commitTransaction"], times=1))
    await in_transaction(
        client, lambda session: client.db.coll.insert_one({"_id": 1}, session=session)
    )
    assert switch.switched
    majority = {"w": "majority", "wtimeout": 10000}
    assert _commit_write_concerns(commands) == [{"w": 1}, majority, majority]


async def sharded_client(make: Maker, server: EmbeddedServer, listeners: list[Any]) -> Any:
    """An enabled (draft: retargeting) client of the sharded cluster that knows both mongos.

    localThresholdMS=1000 puts both routers in the latency window whatever the load: before
    4.16 pymongo drops deprioritized servers only after choosing that window.
    """
    client = make(FAST_DRAFT, listeners, server=server, localThresholdMS=1000)
    await resolve(client.admin.command("ping"))
    await wait_for_mongoses(client)
    await resolve(client.db.create_collection("coll"))
    return client


async def test_overloaded_statement_of_a_pinned_transaction_stays_on_its_mongos(
    make: Maker, sharded_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """Defect 7: an overload error inside a transaction pinned to a mongos is retried on that
    mongos, never retargeted (another mongos does not know the transaction)."""
    overload_each_once = overload_fail_point(["insert"], times=1)
    switch = FailPointSwitch(sharded_server, "insert", "succeeded", overload_each_once)
    client = await sharded_client(make, sharded_server, [commands, switch])
    await in_transaction(
        client,
        lambda session: client.db.coll.insert_one({"_id": 1}, session=session),
        lambda session: client.db.coll.insert_one({"_id": 2}, session=session),
    )
    assert switch.switched
    addresses = commands.addresses("insert") + commands.addresses("commitTransaction")
    assert len(addresses) == 4  # first statement, overloaded second, its retry, commit
    assert len(set(addresses)) == 1
    assert await resolve(client.db.coll.count_documents({})) == 2


async def test_overloaded_commit_of_a_pinned_transaction_stays_on_its_mongos(
    make: Maker, sharded_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """Defect 7: an overloaded commitTransaction is retried on the transaction's mongos (on
    another one it could only be recovered, and a commit the server never received aborts)."""
    client = await sharded_client(make, sharded_server, [commands])
    sharded_server.configure_fail_point(overload_fail_point(["commitTransaction"], times=1))
    await in_transaction(
        client, lambda session: client.db.coll.insert_one({"_id": 1}, session=session)
    )
    commits = commands.addresses("commitTransaction")
    assert len(commits) == 2
    assert commits[0] == commits[1] == commands.addresses("insert")[0]
    assert await resolve(client.db.coll.count_documents({})) == 1


async def test_commit_retried_on_another_mongos_carries_the_recovery_token(
    make: Maker, sharded_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """Defect 7: a commit retried after an error that is no overload (pymongo's classic rule:
    unpin and avoid the failed mongos) lands on the other mongos with the ``recoveryToken``;
    that mongos recovers the shard's decision (none: the transaction is aborted)."""
    client = await sharded_client(make, sharded_server, [commands])
    session = await resolve(client.start_session())
    try:
        await resolve(session.start_transaction())
        await resolve(client.db.coll.insert_one({"_id": 1}, session=session))
        pinned = commands.addresses("insert")[0]
        sharded_server.configure_fail_point(
            classic_fail_point(["commitTransaction"], times=1), member=pinned
        )
        with pytest.raises(OperationFailure) as info:
            await resolve(session.commit_transaction())
    finally:
        await resolve(session.end_session())
    commits = commands.started_commands("commitTransaction")
    addresses = commands.addresses("commitTransaction")
    assert len(commits) == 2
    assert addresses[0] == pinned != addresses[1]
    assert commits[1]["recoveryToken"] == {"recoveryShardId": "shard0"}
    assert info.value.code == 251  # NoSuchTransaction: recovered, no decision, aborted
    assert await resolve(client.db.coll.count_documents({})) == 0
