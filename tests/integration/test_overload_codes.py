"""Codes 463 and 473 from the embedded server, as real pymongo clients see them over TCP.

463 ``IngressOperationRateLimitExceeded`` (the operation rate limiter, 8.3+) carries
``SystemOverloadedError``, ``RetryableError`` and ``NoWritesPerformed``: a client retries it.
473 ``InterruptedDueToOverload`` (the query sentinel) carries ``SystemOverloadedError`` only: a
client must not retry it. Source: the Atlas "overload errors" documentation page, as summarised in
``../shared/notes/mongod-limiter-facts.md``. Each case runs with the adaptive preset (jitter
pinned to 0; the default preset, current, retries as stock does) and with stock pymongo (native
overload retries, pymongo >= 4.17), sync and async. The fail points give no ``errorLabels``: the
labels are the ones the server computes.

Both codes are pushback for the adaptive pacing: each says the server is overloaded (463: its
operation rate limiter refused the command; 473: its query sentinel interrupted the query to shed
load), so sending it less is right whether or not the failed operation itself may be retried.
An error without ``SystemOverloadedError`` is not.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import pytest
from pymongo.errors import OperationFailure

import backpressure
from backpressure.adapters import seams
from backpressure.switch.client import state as state_of
from backpressure.testing import EmbeddedServer
from tests.integration.conftest import ClientFactory, CommandRecorder, enabled_client, resolve

pytestmark = pytest.mark.timeout(120)

KINDS = [
    pytest.param("adaptive", id="adaptive"),
    pytest.param(
        "stock",
        id="stock",
        marks=pytest.mark.skipif(
            not seams.HAS_NATIVE_BACKPRESSURE,
            reason="stock pymongo < 4.17 has no overload retries",
        ),
    ),
]


def _client(clients: ClientFactory, server: EmbeddedServer, commands: Any, kind: str) -> Any:
    if kind == "stock":
        return clients.plain(server.uri, event_listeners=[commands])
    return enabled_client(clients, server.uri, backpressure.ADAPTIVE, event_listeners=[commands])


async def _error_code(operation: Callable[[], Any]) -> Optional[int]:
    """Run ``operation()``: None when it succeeds, else the code of its OperationFailure."""
    try:
        await resolve(operation())
    except OperationFailure as exc:
        return exc.code
    return None


def _fail(server: EmbeddedServer, code: int, times: int) -> None:
    server.configure_fail_point(
        {"mode": {"times": times}, "data": {"failCommands": ["insert", "find"], "errorCode": code}}
    )


@pytest.mark.parametrize("kind", KINDS)
async def test_463_is_retried(
    clients: ClientFactory, replicaset_server: EmbeddedServer, commands: CommandRecorder, kind: str
) -> None:
    """Two 463 rejections, then success: the write and the read each take three attempts."""
    client = _client(clients, replicaset_server, commands, kind)
    await resolve(client.admin.command("ping"))
    _fail(replicaset_server, 463, times=2)
    await resolve(client.db.coll.insert_one({"_id": 1}))
    assert len(commands.started_commands("insert")) == 3
    _fail(replicaset_server, 463, times=2)
    assert await resolve(client.db.coll.find_one({"_id": 1})) == {"_id": 1}
    assert len(commands.started_commands("find")) == 3


@pytest.mark.parametrize("kind", KINDS)
async def test_473_is_not_retried(
    clients: ClientFactory, replicaset_server: EmbeddedServer, commands: CommandRecorder, kind: str
) -> None:
    """One 473 fails the write and the read at once: one attempt each, the error is 473 with
    SystemOverloadedError and without RetryableError."""
    client = _client(clients, replicaset_server, commands, kind)
    await resolve(client.admin.command("ping"))
    _fail(replicaset_server, 473, times=1)
    with pytest.raises(OperationFailure) as info:
        await resolve(client.db.coll.insert_one({"_id": 1}))
    assert info.value.code == 473
    assert info.value.has_error_label("SystemOverloadedError")
    assert not info.value.has_error_label("RetryableError")
    assert len(commands.started_commands("insert")) == 1
    _fail(replicaset_server, 473, times=1)
    with pytest.raises(OperationFailure) as info:
        await resolve(client.db.coll.find_one({}))
    assert info.value.code == 473
    assert len(commands.started_commands("find")) == 1


@pytest.mark.parametrize(("code", "paced"), [(463, True), (473, True), (2, False)])
async def test_overload_codes_are_pushback_for_the_adaptive_pacing(
    clients: ClientFactory,
    replicaset_server: EmbeddedServer,
    commands: CommandRecorder,
    code: int,
    paced: bool,
) -> None:
    """Two rejections with 463 or 473 close the primary's pacing, whether or not the operation
    is retried; two BadValue errors (2, no overload) do not."""
    client = enabled_client(
        clients, replicaset_server.uri, backpressure.ADAPTIVE, event_listeners=[commands]
    )
    await resolve(client.admin.command("ping"))
    state = state_of(client)
    assert state is not None
    admission = state.controller.pacing
    assert admission is not None
    primary = replicaset_server.addresses[0]
    _fail(replicaset_server, code, times=2)
    outcomes = [
        await _error_code(lambda: client.db.coll.insert_one({"_id": 1})),
        await _error_code(lambda: client.db.coll.insert_one({"_id": 2})),
    ]
    assert set(outcomes) <= {None, code}  # retried to success, or failed with the injected code
    assert replicaset_server.stats()["commands"]["insert"]["failed"] == 2
    assert admission.is_paced(primary) is paced
