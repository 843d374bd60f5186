"""Method-level retries of the operations that bypass pymongo's retry loop before 4.17."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable

import pytest
from pymongo.errors import OperationFailure, PyMongoError

import backpressure
from backpressure import DRAFT
from backpressure.adapters.backport import client_kwargs
from backpressure.core.decision import StopReason
from backpressure.core.events import retry_summary
from backpressure.testing import EmbeddedServer
from tests.integration.conftest import (
    BACKPORT_ONLY,
    OVERLOAD_CODE,
    ClientFactory,
    CommandRecorder,
    RetryRecorder,
    enabled_client,
    overload_fail_point,
    resolve,
    to_list,
    wait_for_mongoses,
    zero_jitter,
)

pytestmark = [
    BACKPORT_ONLY,
    pytest.mark.timeout(60),
]

ROOT = Path(__file__).resolve().parents[2]


async def _prepare_collection(client: Any) -> None:
    """Create ``db.coll`` with one document and one index."""
    await resolve(client.db.coll.insert_one({"_id": 1, "a": 1}))
    await resolve(client.db.coll.create_index("a"))


_OPERATIONS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "ping": ("ping", lambda c: c.db.command("ping")),
    "admin.command": ("ping", lambda c: c.admin.command({"ping": 1})),
    "create_index": ("createIndexes", lambda c: c.db.coll.create_index("b")),
    "drop_index": ("dropIndexes", lambda c: c.db.coll.drop_index("a_1")),
    "drop_collection": ("drop", lambda c: c.db.drop_collection("coll")),
    "create_collection": ("create", lambda c: c.db.create_collection("other")),
    "rename": ("renameCollection", lambda c: c.db.coll.rename("renamed")),
    "drop_database": ("dropDatabase", lambda c: c.drop_database("db")),
}
"""runCommand and DDL helpers: they succeed once the overloads are over."""

_SEARCH_INDEX_OPERATIONS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "create_search_index": (
        "createSearchIndexes",
        lambda c: c.db.coll.create_search_index({"definition": {}, "name": "s"}),
    ),
    "drop_search_index": ("dropSearchIndex", lambda c: c.db.coll.drop_search_index("s")),
    "update_search_index": (
        "updateSearchIndex",
        lambda c: c.db.coll.update_search_index("s", {}),
    ),
}
"""Search-index helpers: retried on overload, then rejected by the test server (no search)."""


@pytest.mark.parametrize("operation", sorted(_OPERATIONS) + sorted(_SEARCH_INDEX_OPERATIONS))
async def test_bypassing_operation_retried(
    clients: ClientFactory,
    replicaset_server: EmbeddedServer,
    commands: CommandRecorder,
    operation: str,
) -> None:
    """Two overloads, three commands sent: runCommand and DDL helpers then succeed, search-index
    helpers fail with the test server's own (non-overload) error."""
    client = enabled_client(clients, replicaset_server.uri, event_listeners=[commands])
    await _prepare_collection(client)
    rejected = operation in _SEARCH_INDEX_OPERATIONS
    command_name, run = (_SEARCH_INDEX_OPERATIONS if rejected else _OPERATIONS)[operation]
    replicaset_server.configure_fail_point(overload_fail_point([command_name], times=2))
    commands.reset()
    if rejected:
        with pytest.raises(OperationFailure) as caught:
            await resolve(run(client))
        assert caught.value.code != OVERLOAD_CODE  # the third attempt reached the server
    else:
        await resolve(run(client))
    assert commands.started_names().count(command_name) == 3
    assert commands.failed_names() == [command_name] * (3 if rejected else 2)


async def test_cursor_command_retried(
    clients: ClientFactory, replicaset_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """cursor_command's initial command is retried on overload."""
    client = enabled_client(clients, replicaset_server.uri, event_listeners=[commands])
    await _prepare_collection(client)
    replicaset_server.configure_fail_point(overload_fail_point(["find"], times=1))
    cursor = await resolve(client.db.cursor_command({"find": "coll"}))
    assert [d["_id"] for d in await to_list(cursor)] == [1]
    assert len(commands.started_commands("find")) == 2


@pytest.mark.parametrize("option", ["retryReads", "retryWrites"])
async def test_run_command_needs_both_retry_options(
    clients: ClientFactory,
    replicaset_server: EmbeddedServer,
    commands: CommandRecorder,
    option: str,
) -> None:
    """runCommand is retried only when retryReads and retryWrites are both on."""
    client = enabled_client(
        clients, replicaset_server.uri, event_listeners=[commands], **{option: False}
    )
    replicaset_server.configure_fail_point(overload_fail_point(["ping"], times=1))
    with pytest.raises(OperationFailure) as caught:
        await resolve(client.db.command("ping"))
    summary = retry_summary(caught.value)
    assert summary is not None
    assert summary.stop_reason is StopReason.RETRIES_DISABLED
    assert commands.started_names().count("ping") == 1


async def test_nested_loop_is_not_retried_twice(
    clients: ClientFactory, replicaset_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """create_collection's inner listCollections gives up once: no outer retry multiplies it."""
    client = enabled_client(clients, replicaset_server.uri, event_listeners=[commands])
    replicaset_server.configure_fail_point(overload_fail_point(["listCollections"]))
    with pytest.raises(OperationFailure) as caught:
        await resolve(client.db.create_collection("other", check_exists=True))
    assert caught.value.code == OVERLOAD_CODE
    assert commands.started_names().count("listCollections") == DRAFT.max_retries + 1
    assert "create" not in commands.started_names()


async def test_plain_client_untouched(
    clients: ClientFactory, replicaset_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """With an enabled client in the process, a plain client's ping and insert are not retried."""
    enabled = enabled_client(clients, replicaset_server.uri)
    await resolve(enabled.db.command("ping"))  # class-level hooks are installed by now
    plain = clients.plain(replicaset_server.uri, event_listeners=[commands])
    replicaset_server.configure_fail_point(overload_fail_point(["ping", "insert"], times=2))
    with pytest.raises(OperationFailure):
        await resolve(plain.db.command("ping"))
    with pytest.raises(OperationFailure):
        await resolve(plain.db.coll.insert_one({"_id": 1}))
    assert commands.started_names() == ["ping", "insert"]


async def test_disabled_client_not_retried(
    clients: ClientFactory, replicaset_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """After backpressure.disable the client behaves like a stock client again."""
    client = enabled_client(clients, replicaset_server.uri, event_listeners=[commands])
    await resolve(client.db.command("ping"))
    backpressure.disable(client)
    assert "_retry_internal" not in vars(client)
    replicaset_server.configure_fail_point(overload_fail_point(["ping", "insert"], times=2))
    commands.reset()
    with pytest.raises(OperationFailure):
        await resolve(client.db.command("ping"))
    with pytest.raises(OperationFailure):
        await resolve(client.db.coll.insert_one({"_id": 1}))
    assert commands.started_names() == ["ping", "insert"]


async def test_motor_retries(replicaset_server: EmbeddedServer) -> None:
    """Motor: overloaded ping and insert succeed through the delegate's hooks."""
    from motor.motor_asyncio import AsyncIOMotorClient

    recorder = CommandRecorder()
    retries = RetryRecorder()
    client = AsyncIOMotorClient(
        replicaset_server.uri,
        serverSelectionTimeoutMS=3000,
        event_listeners=[recorder],
        **client_kwargs(is_async=False),
    )
    try:
        backpressure.enable(client, DRAFT, random=zero_jitter, listeners=[retries])
        replicaset_server.configure_fail_point(overload_fail_point(["ping"], times=2))
        await client.db.command("ping")
        replicaset_server.configure_fail_point(overload_fail_point(["insert"], times=2))
        await client.db.coll.insert_one({"_id": 1})
        assert await client.db.coll.count_documents({}) == 1
    finally:
        client.close()
    assert recorder.started_names().count("ping") == 3
    assert recorder.started_names().count("insert") == 3
    assert [e.operation for e in retries.retries] == ["ping", "ping", "insert", "insert"]


_MOTOR_FIRST = textwrap.dedent(
    """
    import asyncio, sys
    import motor.motor_asyncio  # Motor builds its classes before any backpressure patch
    import backpressure
    from backpressure.adapters.backport import client_kwargs
    from tests.integration.conftest import CommandRecorder

    async def main():
        recorder = CommandRecorder()
        client = motor.motor_asyncio.AsyncIOMotorClient(
            sys.argv[1], serverSelectionTimeoutMS=3000, event_listeners=[recorder],
            **client_kwargs(is_async=False))
        backpressure.enable(client, "draft", random=lambda: 0.0)
        try:
            await client.db.command("ping")
        finally:
            client.close()
        print(recorder.started_names().count("ping"))

    asyncio.run(main())
    """
)


def test_motor_imported_before_backpressure(replicaset_server: EmbeddedServer) -> None:
    """Motor imported first (attributes copied early): db.command is still retried."""
    replicaset_server.configure_fail_point(overload_fail_point(["ping"], times=2))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", _MOTOR_FIRST, replicaset_server.uri],
        capture_output=True,
        text=True,
        timeout=50,
        env=env,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "3"


async def test_run_command_retargets_to_other_mongos(
    clients: ClientFactory, sharded_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """A method-level retry of runCommand avoids the mongos that was overloaded."""
    client = enabled_client(
        clients, sharded_server.uri, event_listeners=[commands], localThresholdMS=1000
    )
    await resolve(client.db.command("ping"))
    await wait_for_mongoses(client)
    sharded_server.configure_fail_point(overload_fail_point(["ping"]), member=0)
    retried: list[tuple[str, int]] = []
    for _ in range(20):  # selection is random: stop once a ping first hit the bad mongos
        commands.reset()
        await resolve(client.db.command("ping"))
        addresses = commands.addresses("ping")
        if len(addresses) > 1:
            retried = addresses
            break
    assert retried, "no ping was sent to the overloaded mongos"
    assert retried == [sharded_server.addresses[0], sharded_server.addresses[1]]


async def test_run_command_retries_bounded_by_timeout(
    clients: ClientFactory, replicaset_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """timeoutMS bounds the method-level retries of runCommand as it bounds the loop's."""
    client = enabled_client(
        clients,
        replicaset_server.uri,
        DRAFT.replace(max_retries=50, base_backoff=0.4, max_backoff=0.4),
        random=lambda: 0.999,
        event_listeners=[commands],
        timeoutMS=2000,
    )
    # Server known and a connection open: the deadline is spent on attempts and backoffs only.
    await resolve(client.admin.command("hello"))
    replicaset_server.configure_fail_point(overload_fail_point(["ping"]))
    with pytest.raises(PyMongoError) as caught:
        await resolve(client.db.command("ping"))
    if not caught.value.timeout:  # else the last attempt itself ran into the deadline
        summary = retry_summary(caught.value)
        assert summary is not None
        assert summary.stop_reason is StopReason.DEADLINE
    assert 2 <= commands.started_names().count("ping") <= 6  # 2 s / 0.4 s backoffs
