"""Statistics, global listeners, per-operation overrides and test mode, on real clients over TCP."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import pytest
from pymongo.errors import PyMongoError

import backpressure
from backpressure import ADAPTIVE, DRAFT
from backpressure.core.decision import StopReason
from backpressure.core.events import OperationFinishedEvent, retry_summary
from backpressure.core.policy import InvalidPolicyError
from backpressure.testing import set_testing
from backpressure.testing.server.embedded import EmbeddedServer
from tests.integration.conftest import (
    ClientFactory,
    RetryRecorder,
    enabled_client,
    overload_fail_point,
    resolve,
    wait_for,
)

pytestmark = pytest.mark.timeout(60)

FAST = DRAFT.replace(max_retries=3, base_backoff=0.001)


class FinishedRecorder(RetryRecorder):
    """Records retry events and finished-operation events."""

    def __init__(self) -> None:
        """Start empty."""
        super().__init__()
        self.finished: list[OperationFinishedEvent] = []

    def operation_finished(self, event: OperationFinishedEvent) -> None:
        """Record a finished operation."""
        with self._lock:
            self.finished.append(event)


async def test_stats_count_operations_retries_give_ups_and_servers(
    clients: ClientFactory, standalone_server: EmbeddedServer
) -> None:
    """stats(client): two retried-then-successful inserts, one give-up, one plain success."""
    client = enabled_client(clients, standalone_server.uri, FAST, backpressure_class=False)
    address = tuple(standalone_server.addresses[0])
    await resolve(client.db.coll.find_one({}))
    standalone_server.configure_fail_point(overload_fail_point(["insert"], times=2))
    await resolve(client.db.coll.insert_one({"x": 1}))
    standalone_server.configure_fail_point(overload_fail_point(["insert"]))
    with pytest.raises(PyMongoError):
        await resolve(client.db.coll.insert_one({"x": 2}))
    stats = backpressure.stats(client)
    assert stats.operations == 3
    assert (stats.succeeded, stats.failed) == (2, 1)
    assert stats.attempts == 1 + 3 + 4
    assert stats.retries == 2 + 3
    assert dict(stats.gave_up) == {StopReason.ATTEMPTS_EXHAUSTED: 1}
    assert stats.gave_up_total == 1
    assert stats.backoff_seconds == 0.0  # the test clients pin the jitter at 0
    assert stats.attempts_per_operation == pytest.approx(8 / 3)
    server = stats.servers[address]
    assert (server.operations, server.attempts, server.retries) == (3, 8, 5)
    assert dict(server.gave_up) == {StopReason.ATTEMPTS_EXHAUSTED: 1}


async def test_stats_snapshot_is_frozen(
    clients: ClientFactory, standalone_server: EmbeddedServer
) -> None:
    """A snapshot does not change when later operations run, and cannot be modified."""
    client = enabled_client(clients, standalone_server.uri, FAST, backpressure_class=False)
    before = backpressure.stats(client)
    await resolve(client.db.coll.insert_one({"x": 1}))
    after = backpressure.stats(client)
    assert (before.operations, after.operations) == (0, 1)
    with pytest.raises(AttributeError):
        before.operations = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        after.servers[("x", 1)] = after.servers[next(iter(after.servers))]  # type: ignore[index]


async def test_stats_of_a_client_that_is_not_enabled_is_an_error(
    clients: ClientFactory, standalone_server: EmbeddedServer
) -> None:
    """A stock client has no statistics: ValueError says so."""
    client = clients.plain(standalone_server.uri)
    with pytest.raises(ValueError, match="not enabled"):
        backpressure.stats(client)


async def test_registered_listener_reaches_clients_enabled_later(
    clients: ClientFactory, standalone_server: EmbeddedServer
) -> None:
    """register() applies to clients enabled afterwards, not to those enabled before."""
    before = enabled_client(clients, standalone_server.uri, FAST, backpressure_class=False)
    recorder = FinishedRecorder()
    backpressure.register(recorder)
    try:
        after = enabled_client(clients, standalone_server.uri, FAST, backpressure_class=False)
    finally:
        backpressure.unregister(recorder)
    standalone_server.configure_fail_point(overload_fail_point(["insert"], times=1))
    await resolve(before.db.coll.insert_one({"x": 1}))
    assert recorder.retries == []
    standalone_server.configure_fail_point(overload_fail_point(["insert"], times=1))
    await resolve(after.db.coll.insert_one({"x": 2}))
    assert [e.attempt for e in recorder.retries] == [1]
    (finished,) = recorder.finished
    assert (finished.operation, finished.attempts, finished.succeeded) == ("insert", 2, True)


def test_register_rejects_an_object_that_is_no_listener() -> None:
    """register() names the protocols an object must implement."""
    with pytest.raises(TypeError, match="RetryListener"):
        backpressure.register(object())


async def test_overrides_turn_retries_off_for_a_block_only(
    clients: ClientFactory, standalone_server: EmbeddedServer
) -> None:
    """overrides(max_retries=0) gives up at once inside the block; outside, retries resume."""
    client = enabled_client(clients, standalone_server.uri, FAST, backpressure_class=False)
    with backpressure.overrides(max_retries=0):
        standalone_server.configure_fail_point(overload_fail_point(["insert"], times=1))
        with pytest.raises(PyMongoError) as raised:
            await resolve(client.db.coll.insert_one({"x": 1}))
    summary = retry_summary(raised.value)
    assert summary is not None
    assert (summary.attempts, summary.stop_reason) == (1, StopReason.ATTEMPTS_EXHAUSTED)
    standalone_server.configure_fail_point(overload_fail_point(["insert"], times=1))
    await resolve(client.db.coll.insert_one({"x": 2}))
    assert backpressure.stats(client).retries == 1


async def test_overrides_are_task_local(standalone_server: EmbeddedServer) -> None:
    """An override in one asyncio task does not change another task's operations."""
    client = backpressure.AsyncMongoClient(
        standalone_server.uri, backpressure=FAST, serverSelectionTimeoutMS=3000
    )
    try:
        standalone_server.configure_fail_point(overload_fail_point(["insert"], times=2))
        inside_entered = asyncio.Event()
        release = asyncio.Event()

        async def inside() -> BaseException:
            with backpressure.overrides(enabled=False):
                inside_entered.set()
                await release.wait()
                try:
                    await client.db.coll.insert_one({"who": "inside"})
                except PyMongoError as exc:
                    return exc
            raise AssertionError("the overridden insert should have failed")

        async def outside() -> None:
            await inside_entered.wait()
            release.set()

        task = asyncio.ensure_future(inside())
        await outside()
        error = await task
        assert retry_summary(error).attempts == 1  # type: ignore[union-attr]
        # The remaining injected failure is retried outside the block.
        await client.db.coll.insert_one({"who": "outside"})
        assert backpressure.stats(client).retries == 1
    finally:
        await client.close()


def test_overrides_are_thread_local(standalone_server: EmbeddedServer) -> None:
    """An override in the main thread does not reach an operation run in another thread."""
    with backpressure.MongoClient(
        standalone_server.uri, backpressure=FAST, serverSelectionTimeoutMS=3000
    ) as client:
        errors: list[BaseException] = []

        def other_thread() -> None:
            try:
                client.db.coll.insert_one({"thread": "other"})
            except BaseException as exc:  # pragma: no cover - reported by the assert below
                errors.append(exc)

        with backpressure.overrides(max_retries=0):
            standalone_server.configure_fail_point(overload_fail_point(["insert"], times=1))
            thread = threading.Thread(target=other_thread)
            thread.start()
            thread.join(timeout=30)
        assert not thread.is_alive()
        assert errors == []
        assert backpressure.stats(client).retries == 1


def test_overrides_reject_bad_values() -> None:
    """Unknown fields, invalid values and criticalities raise InvalidPolicyError naming them."""
    with (
        pytest.raises(InvalidPolicyError, match="max_retries"),
        backpressure.overrides(max_retries=-1),
    ):
        pass  # pragma: no cover
    with (
        pytest.raises(InvalidPolicyError, match="retries_max"),
        backpressure.overrides(retries_max=1),
    ):
        pass  # pragma: no cover
    with (
        pytest.raises(InvalidPolicyError, match="sheddable"),
        backpressure.overrides(criticality="low"),
    ):
        pass  # pragma: no cover


def test_overrides_nest_and_carry_the_criticality() -> None:
    """Inner blocks override fields and inherit the rest, including the criticality."""
    with backpressure.overrides(max_retries=1, criticality="sheddable") as outer:
        assert outer.criticality is backpressure.Criticality.SHEDDABLE
        with backpressure.overrides(max_backoff=1.0) as inner:
            assert dict(inner.policy_changes) == {"max_retries": 1, "max_backoff": 1.0}
            assert inner.criticality is backpressure.Criticality.SHEDDABLE


async def test_test_mode_retries_without_sleeping_with_seeded_jitter(
    clients: ClientFactory, standalone_server: EmbeddedServer
) -> None:
    """set_testing(True): same attempts, no sleep, delays repeat for the same seed."""
    slow = DRAFT.replace(max_retries=3, base_backoff=50.0, max_backoff=100.0)
    runs = []
    for _ in range(2):
        recorder = RetryRecorder()
        client = clients.plain(standalone_server.uri)
        backpressure.enable(client, slow, listeners=[recorder])  # real random jitter
        with set_testing(True, seed=42):
            standalone_server.configure_fail_point(overload_fail_point(["insert"]))
            with pytest.raises(PyMongoError) as raised:
                await resolve(client.db.coll.insert_one({"x": 1}))
        summary = retry_summary(raised.value)
        assert summary is not None
        assert summary.attempts == 4  # attempt counts unchanged
        # Seed 42 draws delays of about 32, 1 and 27 s: sleeping them would hit the 60 s timeout.
        assert summary.total_backoff > 30.0
        runs.append(recorder.delays)
    assert runs[0] == runs[1]
    assert not backpressure.testing.testmode.is_testing()


def test_set_testing_can_cap_retries_and_validates() -> None:
    """max_retries caps every operation; bad arguments raise naming them."""
    with pytest.raises(TypeError, match="testing"):
        set_testing("yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="seed"):
        set_testing(True, seed=1.5)  # type: ignore[arg-type]
    with pytest.raises(InvalidPolicyError, match="max_retries"):
        set_testing(True, max_retries=-1)
    assert not backpressure.testing.testmode.is_testing()


def test_test_mode_cap_applies(standalone_server: EmbeddedServer) -> None:
    """set_testing(True, max_retries=1) caps a 3-retry policy at 1 retry."""
    with (
        backpressure.MongoClient(
            standalone_server.uri, backpressure=FAST, serverSelectionTimeoutMS=3000
        ) as client,
        set_testing(True, max_retries=1),
    ):
        standalone_server.configure_fail_point(overload_fail_point(["insert"]))
        with pytest.raises(PyMongoError) as raised:
            client.db.coll.insert_one({"x": 1})
    summary: Any = retry_summary(raised.value)
    assert summary.attempts == 2


FLAPPING = ADAPTIVE.replace(adaptive_window=0.2, adaptive_min_rate=20.0)
"""Paced at 20/s or more once closed; reopens after a 0.2 s window without pushback or wait."""


def _lines(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    """The INFO messages of the ``backpressure`` logger containing ``text``."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "backpressure" and r.levelno == logging.INFO and text in r.getMessage()
    ]


async def test_stats_and_log_show_a_server_paced_then_reopened(
    clients: ClientFactory, standalone_server: EmbeddedServer, caplog: pytest.LogCaptureFixture
) -> None:
    """stats(client).pacing follows the server's pacing; one INFO line at each change."""
    caplog.set_level(logging.INFO, logger="backpressure")
    client = enabled_client(clients, standalone_server.uri, FLAPPING)
    host, port = standalone_server.addresses[0]
    await resolve(client.db.coll.find_one({}))
    (opened,) = backpressure.stats(client).pacing.values()
    assert (opened.paced, opened.rate, opened.pushbacks, opened.waiting) == (False, None, 0, 0)
    draft = enabled_client(clients, standalone_server.uri, FAST)
    await resolve(draft.db.coll.find_one({}))
    assert backpressure.stats(draft).pacing == {}
    standalone_server.configure_fail_point(overload_fail_point(["insert"], times=2))
    await resolve(client.db.coll.insert_one({"closing": True}))
    paced = backpressure.stats(client).pacing[(host, port)]
    assert paced.paced
    assert paced.pushbacks == 2
    assert paced.rate is not None
    assert paced.rate >= 20.0
    assert not paced.competing
    (line,) = _lines(caplog, f"pacing attempts to {host}:{port} at ")
    assert "pushed back" in line
    assert "of the replies of the last 0.2s window" in line
    reopened = f"no longer pacing attempts to {host}:{port}"
    assert _lines(caplog, reopened) == []
    # Idle for a window: reading the statistics opens the pacer (nobody waits, no pushback).
    await wait_for(lambda: not backpressure.stats(client).pacing[(host, port)].paced, "reopened")
    assert len(_lines(caplog, reopened)) == 1
    assert len(_lines(caplog, f"pacing attempts to {host}:{port} at ")) == 1
    after = backpressure.stats(client).pacing[(host, port)]
    assert (after.paced, after.rate, after.waiting, after.backlog) == (False, None, 0, 0.0)
    assert after.pushbacks == 2
