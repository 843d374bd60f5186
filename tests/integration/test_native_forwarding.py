"""The native adapter on a pymongo whose ``_retry_internal`` / ``_select_server`` take more.

A pymongo release after 4.20.1 may add a parameter to either method, and pass it from its own
callers (4.20.1 itself added ``conn_mgr`` to ``_retry_internal``).  The adapter then installs
wrappers that forward ``*args, **kwargs`` instead of refusing the client.  These tests build
such a client: a subclass with one more keyword parameter on both methods, and, in front of
our wrappers, the callers' side (every call passes that parameter).  They check that the
policy still holds: retries, the attempt cap, one txnNumber, the transaction's first-statement
rule, the budget's deposits.
"""

from __future__ import annotations

import functools
from typing import Any, Optional

import pymongo
import pytest
from pymongo.errors import OperationFailure

import backpressure
from backpressure import DRAFT, Policy
from backpressure.adapters import seams
from backpressure.core.decision import StopReason
from backpressure.core.events import retry_summary
from backpressure.switch.client import budget as budget_of
from backpressure.testing.server.embedded import EmbeddedServer
from tests.integration.conftest import (
    FAST_BACKOFF,
    NATIVE_LOOP_ONLY,
    ClientFactory,
    CommandRecorder,
    RetryRecorder,
    in_transaction,
    overload_fail_point,
    resolve,
)

pytestmark = [
    NATIVE_LOOP_ONLY,
    pytest.mark.timeout(60),
]


LATER = "passed"
"""The value every call passes for the extra parameter."""


class LaterClient(pymongo.MongoClient):  # type: ignore[type-arg]
    """A MongoClient whose two wrapped methods take one parameter more than pymongo's.

    Beyond the four leading parameters the seams probe, whatever pymongo's callers pass
    (positionally or by name, today's parameters or a later release's) is passed on unchanged.
    """

    later_calls = 0

    def _retry_internal(  # type: ignore[override]
        self,
        func: Any,
        session: Any,
        bulk: Any,
        operation: Any,
        *args: Any,
        later: Optional[str] = None,
        **kwargs: Any,
    ) -> Any:
        type(self).later_calls += later == LATER
        return super()._retry_internal(func, session, bulk, operation, *args, **kwargs)

    def _select_server(  # type: ignore[override]
        self, *args: Any, later: Optional[str] = None, **kwargs: Any
    ) -> Any:
        return super()._select_server(*args, **kwargs)


class AsyncLaterClient(pymongo.AsyncMongoClient):  # type: ignore[type-arg]
    """The async twin of :class:`LaterClient`."""

    later_calls = 0

    async def _retry_internal(  # type: ignore[override]
        self,
        func: Any,
        session: Any,
        bulk: Any,
        operation: Any,
        *args: Any,
        later: Optional[str] = None,
        **kwargs: Any,
    ) -> Any:
        type(self).later_calls += later == LATER
        return await super()._retry_internal(func, session, bulk, operation, *args, **kwargs)

    async def _select_server(  # type: ignore[override]
        self, *args: Any, later: Optional[str] = None, **kwargs: Any
    ) -> Any:
        return await super()._select_server(*args, **kwargs)


def later_client(
    clients: ClientFactory,
    server: EmbeddedServer,
    commands: CommandRecorder,
    retries: RetryRecorder,
    policy: Policy = DRAFT,
) -> Any:
    """A LaterClient of the test's flavour, enabled with ``policy`` (zero jitter)."""
    cls = AsyncLaterClient if clients.is_async else LaterClient
    client = clients.track(
        cls(server.uri, serverSelectionTimeoutMS=3000, event_listeners=[commands])
    )
    assert not seams.native_exact_signatures(client)
    backpressure.enable(client, policy, listeners=[retries], random=lambda: 0.0)
    for name in ("_retry_internal", "_select_server"):
        # pymongo's callers would pass the new parameter: so does everything calling our wrapper.
        setattr(client, name, functools.partial(getattr(client, name), later=LATER))
    return client


async def test_stock_clients_have_the_exact_signatures(
    clients: ClientFactory, standalone_server: EmbeddedServer
) -> None:
    """The premise: pymongo's own clients get the positional wrappers."""
    client = clients.plain(standalone_server.uri)
    assert seams.native_exact_signatures(client), seams.signature_report(type(client))


async def test_always_overloaded_insert_stops_at_the_attempt_cap(
    clients: ClientFactory,
    standalone_server: EmbeddedServer,
    commands: CommandRecorder,
    retries: RetryRecorder,
) -> None:
    """Draft: 6 inserts, then the overload error with its summary, as on a stock client."""
    client = later_client(clients, standalone_server, commands, retries)
    standalone_server.configure_fail_point(overload_fail_point(["insert"]))
    with pytest.raises(OperationFailure) as info:
        await resolve(client.db.coll.insert_one({"x": 1}))
    assert len(commands.started_commands("insert")) == 6
    summary = retry_summary(info.value)
    assert summary is not None
    assert summary.attempts == 6
    assert summary.stop_reason is StopReason.ATTEMPTS_EXHAUSTED
    assert len(retries.retries) == 5
    assert type(client).later_calls >= 1  # the subclass's method ran under our wrapper


async def test_insert_after_two_overloads_is_written_once(
    clients: ClientFactory,
    replicaset_server: EmbeddedServer,
    commands: CommandRecorder,
    retries: RetryRecorder,
) -> None:
    """Two overloads then success: one txnNumber, one write, the budget's deposits as usual."""
    client = later_client(clients, replicaset_server, commands, retries)
    replicaset_server.configure_fail_point(overload_fail_point(["insert"], times=2))
    await resolve(client.db.coll.insert_one({"_id": 1}))
    inserts = commands.started_commands("insert")
    assert [cmd["txnNumber"] for cmd in inserts] == [1, 1, 1]
    transactions = replicaset_server.stats()["transactions"]
    assert [(t["txnNumber"], t["applied"]) for t in transactions] == [(1, True)]
    bucket = budget_of(client)
    assert bucket is not None
    assert bucket.tokens == pytest.approx(1000 - 2 + 1.1)
    await resolve(client.db.coll.insert_one({"_id": 2}))  # a first-attempt success
    assert bucket.tokens == pytest.approx(1000 - 2 + 1.2)


async def test_transaction_first_statement_is_resent_with_start_transaction(
    clients: ClientFactory,
    replicaset_server: EmbeddedServer,
    commands: CommandRecorder,
    retries: RetryRecorder,
) -> None:
    """An overloaded first statement of a transaction is re-sent with startTransaction."""
    client = later_client(clients, replicaset_server, commands, retries, FAST_BACKOFF)
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
