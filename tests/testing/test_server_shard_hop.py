"""The mongos shard hop: the shard's limiter behind the routers, and the mongos's own retries.

mongod reference for every test here: ``../shared/notes/mongod-limiter-facts.md``, "Sharded
clusters": mongos retries a shard's SystemOverloadedError itself, with a default retry
strategy and backoff, before answering the client; it honours the shard's ``baseBackoffMS``
(SERVER-130142); the mongos-to-shard hop is rate limited (SERVER-137353). The retry count (2)
and the backoff formula (the driver specification's) are this server's documented choices.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

import pytest
from pymongo import monitoring
from pymongo.errors import OperationFailure

from backpressure.adapters.backport.shared import NATIVE_BACKPRESSURE
from backpressure.testing import EmbeddedServer
from backpressure.testing.server.cluster.shard import mongos_backoff_seconds
from tests.testing.conftest import wait_until


class _Commands(monitoring.CommandListener):
    """Record the names of the client's started and failed commands."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.failures: list[str] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.names.append(event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        self.failures.append(event.command_name)


def _hop(server: EmbeddedServer) -> dict[str, Any]:
    hop: dict[str, Any] = server.stats()["shardHop"]
    return hop


def test_backoff_is_the_specifications_formula() -> None:
    """jitter * min(10 s, base * 2**retry), base 100 ms or the shard's baseBackoffMS (the
    driver specification's backoff, which mongos applies to a shard's overload errors)."""
    assert mongos_backoff_seconds(1, None, 1.0) == pytest.approx(0.2)
    assert mongos_backoff_seconds(2, None, 1.0) == pytest.approx(0.4)
    assert mongos_backoff_seconds(2, None, 0.5) == pytest.approx(0.2)
    assert mongos_backoff_seconds(1, 50, 1.0) == pytest.approx(0.1)
    assert mongos_backoff_seconds(1, 0, 1.0) == pytest.approx(0.2)
    assert mongos_backoff_seconds(20, None, 1.0) == pytest.approx(10.0)
    assert mongos_backoff_seconds(3, None, 0.0) == 0.0


def test_off_by_default_every_command_is_admitted(
    embedded_server_factory: Callable[..., EmbeddedServer], make_client: Any
) -> None:
    """Without a shard rate limit the hop admits everything and only counts it."""
    server = embedded_server_factory(topology="sharded", members=2)
    client = make_client(server.uri)
    client.test.c.insert_one({"_id": 1})
    assert client.test.c.find_one() == {"_id": 1}
    client.admin.command("ping")  # answered by the mongos itself: no hop
    hop = _hop(server)
    assert hop["mongos"]["forwarded"] == 2
    assert hop["mongos"]["retries"] == 0
    assert hop["shard"]["attempted"] == hop["shard"]["admitted"] == 2
    assert hop["shard"]["rejected"] == 0
    assert hop["shard"]["rateLimiterEnabled"] is False


def test_mongos_retries_hide_a_recovering_shard(
    embedded_server_factory: Callable[..., EmbeddedServer], make_client: Any
) -> None:
    """A shard that rejects, then admits within the mongos's retries: the mongos retries, the
    client sees success on its first attempt and never retries itself."""
    # One token, back every 0.1 s; the mongos's first retry waits 0.2 s (jitter fixed at 1).
    server = embedded_server_factory(
        topology="sharded",
        members=1,
        shard_rate_limit=10,
        shard_burst_seconds=0.1,
        shard_retry_jitter=1.0,
    )
    listener = _Commands()
    client = make_client(server.uri, event_listeners=[listener])
    # Back-to-back inserts find the bucket empty (unless the machine stalls for 0.1 s between
    # two of them): insert until the mongos has retried once, within a bound.
    inserted = 0
    while inserted < 20 and (inserted < 2 or _hop(server)["mongos"]["retries"] == 0):
        client.test.c.insert_one({"_id": inserted})
        inserted += 1
    assert listener.names.count("insert") == inserted
    assert listener.failures == []
    assert client.test.c.count_documents({}) == inserted
    hop = _hop(server)
    assert hop["mongos"]["retries"] >= 1
    assert hop["mongos"]["retriesExhausted"] == 0
    assert hop["mongos"]["shardRejections"] == hop["mongos"]["retries"]
    assert hop["shard"]["rejected"] == hop["mongos"]["shardRejections"]
    assert hop["shard"]["admitted"] == hop["mongos"]["forwarded"]
    assert hop["mongos"]["backoffSeconds"] == pytest.approx(0.2 * hop["mongos"]["retries"])


def test_a_shard_that_keeps_rejecting_reaches_the_client(
    embedded_server_factory: Callable[..., EmbeddedServer], make_client: Any
) -> None:
    """When the mongos's retries run out the client gets the shard's overload error (code 462
    with the profile's labels) and retries it itself, per its own policy."""
    # Capacity 0.5 token: the shard admits nothing; jitter 0: no waiting at the mongos.
    server = embedded_server_factory(
        topology="sharded",
        members=1,
        shard_rate_limit=1,
        shard_burst_seconds=0.5,
        shard_retry_jitter=0.0,
    )
    listener = _Commands()
    client = make_client(server.uri, event_listeners=[listener])
    with pytest.raises(OperationFailure) as info:
        client.test.c.insert_one({"_id": 1})
    error = info.value
    assert error.code == 462
    assert error.details is not None
    assert error.details["codeName"] == "IngressRequestRateLimitExceeded"
    assert set(error.details["errorLabels"]) == {
        "SystemOverloadedError",
        "RetryableError",
        "NoWritesPerformed",
    }
    # pymongo >= 4.17 retries an overload error twice (three attempts reach the mongos); older
    # pymongo does not retry it.
    attempts = listener.names.count("insert")
    assert attempts == (3 if NATIVE_BACKPRESSURE else 1)
    assert listener.failures.count("insert") == attempts
    hop = _hop(server)
    assert hop["mongos"]["forwarded"] == attempts
    assert hop["mongos"]["retries"] == 2 * attempts
    assert hop["mongos"]["retriesExhausted"] == attempts
    assert hop["shard"]["attempted"] == hop["shard"]["rejected"] == 3 * attempts
    assert hop["shard"]["admitted"] == 0
    commands = server.stats()["commands"]["insert"]
    assert commands == {"received": attempts, "failed": attempts, "rejected": 0}


def test_max_retries_zero_answers_at_once(
    embedded_server_factory: Callable[..., EmbeddedServer], make_client: Any
) -> None:
    """``shard_max_retries=0``: the mongos passes the shard's first rejection on."""
    server = embedded_server_factory(
        topology="sharded", members=1, shard_rate_limit=1, shard_burst_seconds=0.5,
        shard_max_retries=0,
    )  # fmt: skip
    client = make_client(server.uri, retryWrites=False)
    with pytest.raises(OperationFailure) as info:
        client.test.c.insert_one({"_id": 1})
    assert info.value.code == 462
    hop = _hop(server)
    assert hop["mongos"]["retries"] == 0
    assert hop["shard"]["rejected"] == 1


def test_shard_base_backoff_sets_the_mongos_backoff_without_blocking(
    embedded_server_factory: Callable[..., EmbeddedServer], make_client: Any
) -> None:
    """9.0: the shard's ``baseBackoffMS`` is the mongos's backoff base; the client does not see
    the shard's hint; other connections are served while the mongos backs off."""
    server = embedded_server_factory(
        topology="sharded",
        members=1,
        server_version="9.0.0",
        max_wire_version=29,
        shard_rate_limit=1,
        shard_burst_seconds=0.5,
        shard_base_backoff_ms=400,
        shard_max_retries=1,
        shard_retry_jitter=1.0,
    )
    client = make_client(server.uri, retryWrites=False)
    other = make_client(server.uri)
    other.admin.command("ping")
    outcome: list[BaseException] = []

    def insert() -> None:
        try:
            client.test.c.insert_one({"_id": 1})
        except BaseException as exc:
            outcome.append(exc)

    started = time.monotonic()
    worker = threading.Thread(target=insert)
    worker.start()
    try:
        # The mongos is now asleep in its 0.8 s backoff (400 ms * 2**1, jitter 1).
        wait_until(lambda: _hop(server)["mongos"]["retries"] == 1)
        ping_started = time.monotonic()
        other.admin.command("ping")
        ping_seconds = time.monotonic() - ping_started
        still_waiting = worker.is_alive()
    finally:
        worker.join(timeout=30)
    elapsed = time.monotonic() - started
    assert still_waiting, "the insert ended before the ping: the backoff was too short to test"
    assert ping_seconds < 0.5
    assert elapsed >= 0.8
    assert len(outcome) == 1
    assert isinstance(outcome[0], OperationFailure)
    assert outcome[0].code == 462
    assert outcome[0].details is not None
    assert "baseBackoffMS" not in outcome[0].details
    hop = _hop(server)
    assert hop["mongos"]["backoffSeconds"] == pytest.approx(0.8)


def test_set_parameter_configures_the_shared_shard(
    embedded_server_factory: Callable[..., EmbeddedServer], make_client: Any
) -> None:
    """The shard's parameters are set through any mongos and hold for all of them;
    ``reset`` brings back the start-up settings."""
    server = embedded_server_factory(topology="sharded", members=2)
    server.set_shard_rate_limit(1, burst_seconds=0.5)  # admits nothing
    reply = server.command({"getParameter": 1, "backpressureShardRateLimiterEnabled": 1}, 1)
    assert reply["backpressureShardRateLimiterEnabled"] is True
    assert server.command({"getParameter": "*"}, 1)["backpressureShardMaxRetries"] == 2
    server.set_parameter(1, backpressureShardMaxRetries=0)
    host, port = server.addresses[1]
    client = make_client(host, port=port, directConnection=True, retryWrites=False)
    with pytest.raises(OperationFailure) as info:
        client.test.c.insert_one({"_id": 1})
    assert info.value.code == 462
    server.disable_shard_rate_limit()
    client.test.c.insert_one({"_id": 1})
    with pytest.raises(Exception, match="unrecognized parameter"):
        server.set_parameter(0, backpressureShardBaseBackoffMS=10)  # 9.0 only
    with pytest.raises(Exception, match="not 'random' or in"):
        server.set_parameter(0, backpressureShardRetryJitter=2)
    server.set_shard_rate_limit(5)
    server.reset()
    reply = server.command({"getParameter": 1, "backpressureShardRateLimiterEnabled": 1})
    assert reply["backpressureShardRateLimiterEnabled"] is False
    assert _hop(server)["shard"]["attempted"] == 0


def test_shard_options_need_the_sharded_topology(
    embedded_server_factory: Callable[..., EmbeddedServer],
) -> None:
    """Other topologies have no shard: the options are refused, the parameters unknown."""
    with pytest.raises(ValueError, match="sharded topology"):
        EmbeddedServer("replicaset", shard_rate_limit=5)
    with pytest.raises(ValueError, match=r"9\.0"):
        EmbeddedServer("sharded", shard_base_backoff_ms=5)
    server = embedded_server_factory()
    with pytest.raises(Exception, match="unrecognized parameter"):
        server.set_parameter(0, backpressureShardRateLimiterEnabled=True)
    assert "shardHop" not in server.stats()


def test_command_line_shard_options(make_client: Any) -> None:
    """``--shard-rate-limit`` and friends reach the shard of a subprocess server."""
    with EmbeddedServer(
        "sharded", 1, shard_rate_limit=7, shard_max_retries=1, shard_retry_jitter=0.5,
        subprocess=True,
    ) as server:  # fmt: skip
        reply = server.command(
            {
                "getParameter": 1,
                "backpressureShardAdmissionRatePerSec": 1,
                "backpressureShardMaxRetries": 1,
                "backpressureShardRetryJitter": 1,
            }
        )
        assert reply["backpressureShardAdmissionRatePerSec"] == 7
        assert reply["backpressureShardMaxRetries"] == 1
        assert reply["backpressureShardRetryJitter"] == 0.5
