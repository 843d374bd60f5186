"""What an operator sees: log lines, typed listener events, retry summaries, command events."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from pymongo.errors import PyMongoError, ServerSelectionTimeoutError

import backpressure
from backpressure import GiveUpEvent, Policy, RetryEvent
from backpressure.core.decision import StopReason
from backpressure.core.events import retry_summary
from backpressure.core.labels import RETRYABLE, SYSTEM_OVERLOADED
from backpressure.testing.server.embedded import EmbeddedServer
from tests.integration.conftest import (
    OVERLOAD_CODE,
    ClientFactory,
    CommandRecorder,
    RetryRecorder,
    enabled_client,
    overload_fail_point,
    resolve,
)

pytestmark = pytest.mark.timeout(60)

POLICY = Policy(max_retries=3, base_backoff=0.001)


def _client(clients: ClientFactory, server: EmbeddedServer, *listeners: Any, **kw: Any) -> Any:
    """A plain client of the test's flavour, enabled with POLICY and pinned jitter."""
    return enabled_client(
        clients, server.uri, POLICY, listeners=listeners, backpressure_class=False, **kw
    )


async def test_one_log_line_per_retry_and_per_give_up(
    clients: ClientFactory, standalone_server: EmbeddedServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The backpressure logger says INFO once per retry and once when giving up."""
    client = _client(clients, standalone_server)
    standalone_server.configure_fail_point(overload_fail_point(["insert"]))
    with caplog.at_level(logging.INFO, logger="backpressure"), pytest.raises(PyMongoError):
        await resolve(client.db.coll.insert_one({"x": 1}))
    lines = [r.getMessage() for r in caplog.records if r.name == "backpressure"]
    assert len([m for m in lines if m.startswith("retrying insert")]) == 3
    give_ups = [m for m in lines if m.startswith("giving up insert")]
    assert len(give_ups) == 1
    assert "after 4 attempt(s)" in give_ups[0]
    assert "attempts exhausted" in give_ups[0]


async def test_listeners_receive_typed_events(
    clients: ClientFactory, standalone_server: EmbeddedServer, retries: RetryRecorder
) -> None:
    """A listener gets a RetryEvent per retry and one GiveUpEvent with the details."""
    client = _client(clients, standalone_server, retries)
    address = tuple(standalone_server.addresses[0])
    standalone_server.configure_fail_point(overload_fail_point(["insert"]))
    with pytest.raises(PyMongoError):
        await resolve(client.db.coll.insert_one({"x": 1}))
    assert all(isinstance(e, RetryEvent) for e in retries.retries)
    assert [e.attempt for e in retries.retries] == [1, 2, 3]
    first = retries.retries[0]
    assert first.operation == "insert"
    assert first.server == address
    assert first.error_code == OVERLOAD_CODE
    assert set(first.error_labels) >= {SYSTEM_OVERLOADED, RETRYABLE}
    assert [e.budget_tokens for e in retries.retries] == [999, 998, 997]
    (give_up,) = retries.give_ups
    assert isinstance(give_up, GiveUpEvent)
    assert (give_up.attempts, give_up.reason) == (4, StopReason.ATTEMPTS_EXHAUSTED)
    assert give_up.servers == (address,)
    assert give_up.error_code == OVERLOAD_CODE


async def test_retry_summary_on_the_raised_error(
    clients: ClientFactory, standalone_server: EmbeddedServer
) -> None:
    """retry_summary(exc) gives attempts, total backoff, servers tried and the stop reason."""
    client = clients.plain(standalone_server.uri)
    backpressure.enable(client, POLICY, random=lambda: 1.0)
    standalone_server.configure_fail_point(overload_fail_point(["insert"]))
    with pytest.raises(PyMongoError) as info:
        await resolve(client.db.coll.insert_one({"x": 1}))
    summary = retry_summary(info.value)
    assert summary is not None
    assert summary.attempts == 4
    assert summary.total_backoff == pytest.approx(0.001 + 0.002 + 0.004)
    assert summary.servers == (tuple(standalone_server.addresses[0]),)
    assert summary.stop_reason is StopReason.ATTEMPTS_EXHAUSTED


async def test_non_overload_error_is_not_a_backpressure_event(
    clients: ClientFactory, standalone_server: EmbeddedServer, retries: RetryRecorder
) -> None:
    """An ordinary error is not retried by us and produces no listener event."""
    client = _client(clients, standalone_server, retries)
    standalone_server.configure_fail_point(
        overload_fail_point(["insert"], times=1, code=2, labels=())
    )
    with pytest.raises(PyMongoError) as info:
        await resolve(client.db.coll.insert_one({"x": 1}))
    assert retries.retries == []
    assert retries.give_ups == []
    summary = retry_summary(info.value)
    assert summary is not None
    assert (summary.attempts, summary.stop_reason) == (1, StopReason.NOT_RETRYABLE)


async def test_command_events_fire_once_per_attempt(
    clients: ClientFactory, standalone_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """pymongo publishes one started and one failed/succeeded event per attempt."""
    client = _client(clients, standalone_server, event_listeners=[commands])
    standalone_server.configure_fail_point(overload_fail_point(["insert"], times=2))
    await resolve(client.db.coll.insert_one({"x": 1}))
    assert commands.started_names().count("insert") == 3
    assert commands.failed_names().count("insert") == 2
    assert [e.command_name for e in commands.succeeded_log].count("insert") == 1


async def test_listeners_are_per_client_and_failures_are_contained(
    clients: ClientFactory, standalone_server: EmbeddedServer, retries: RetryRecorder
) -> None:
    """Each client notifies its own listeners; a listener that raises breaks nothing."""

    class Broken:
        """A listener whose callbacks raise."""

        def retried(self, event: RetryEvent) -> None:
            """Raise."""
            raise RuntimeError("listener bug")

        def gave_up(self, event: GiveUpEvent) -> None:
            """Raise."""
            raise RuntimeError("listener bug")

    first = _client(clients, standalone_server, Broken())
    second = _client(clients, standalone_server, retries)
    standalone_server.configure_fail_point(overload_fail_point(["insert"], times=1))
    await resolve(first.db.coll.insert_one({"_id": 1}))
    assert retries.retries == []
    standalone_server.configure_fail_point(overload_fail_point(["insert"], times=1))
    await resolve(second.db.coll.insert_one({"_id": 2}))
    assert len(retries.retries) == 1


async def test_server_selection_timeout_is_left_alone(
    clients: ClientFactory, retries: RetryRecorder
) -> None:
    """No server ever selected: pymongo's own error, no attempt recorded, no events."""
    client = clients.plain("mongodb://127.0.0.1:1/", serverSelectionTimeoutMS=100)
    backpressure.enable(client, POLICY, listeners=[retries])
    with pytest.raises(ServerSelectionTimeoutError) as info:
        await resolve(client.db.coll.insert_one({"x": 1}))
    summary = retry_summary(info.value)
    assert summary is None or summary.attempts == 0
    assert (retries.retries, retries.give_ups) == ([], [])
