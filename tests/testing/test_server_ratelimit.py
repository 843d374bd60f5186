"""Token buckets and the admission limiter as timelines (fake clock), plus the limiters live."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any, Callable

import pytest
from pymongo.errors import OperationFailure

from backpressure.testing import EmbeddedServer
from backpressure.testing.server.control.ratelimit import (
    AdmissionLimiter,
    LimiterSettings,
    TokenBucket,
)
from tests.fakes import FakeClock


def test_bucket_starts_full_and_refills_at_rate() -> None:
    """capacity = rate x burst; tokens come back at `rate` per second, never above capacity."""
    clock = FakeClock()
    bucket = TokenBucket(10, 0.5, clock=clock)
    assert bucket.capacity == 5
    assert [bucket.try_acquire() for _ in range(6)] == [True] * 5 + [False]
    assert bucket.seconds_until_token() == pytest.approx(0.1)
    clock.now += 0.25
    assert bucket.tokens == pytest.approx(2.5)
    clock.now += 100
    assert bucket.tokens == 5


def test_bucket_below_one_token_admits_nothing() -> None:
    """A capacity below one token admits nothing, ever (folly TokenBucket under mongod's
    rate_limiter.cpp: capacity = rate x burst seconds, and a request needs a whole token)."""
    clock = FakeClock()
    bucket = TokenBucket(1, 0.5, clock=clock)
    assert bucket.capacity == 0.5
    assert bucket.try_acquire() is False
    clock.now += 1000
    assert bucket.try_acquire() is False
    assert bucket.seconds_until_token() == float("inf")


def test_bucket_reconfigure_clips_tokens() -> None:
    """Shrinking the capacity drops the excess tokens."""
    bucket = TokenBucket(100, 1, clock=FakeClock())
    bucket.reconfigure(2, 1)
    assert bucket.tokens == 2


def test_limiter_counts_admissions_rejections_and_exemptions() -> None:
    """With queue depth 0, requests beyond the tokens are rejected at once."""
    clock = FakeClock()
    limiter = AdmissionLimiter(LimiterSettings(True, 2, 1, 0), clock=clock)
    assert [limiter.try_admit() for _ in range(3)] == [True, True, False]
    limiter.record_exempt()
    clock.now += 0.5
    assert limiter.try_admit() is True
    status = limiter.status()
    assert status["attemptedAdmissions"] == 4
    assert status["successfulAdmissions"] == 3
    assert status["rejectedAdmissions"] == 1
    assert status["exemptedAdmissions"] == 1


def test_disabled_limiter_admits_without_counting() -> None:
    """The default (disabled) limiter is a pass-through."""
    limiter = AdmissionLimiter(LimiterSettings())
    assert all(limiter.try_admit() for _ in range(1000))
    assert limiter.status()["attemptedAdmissions"] == 0


async def test_queue_is_fifo_and_bounded() -> None:
    """Queued requests get tokens in arrival order; beyond the queue depth they are rejected."""
    limiter = AdmissionLimiter(LimiterSettings(True, 50, 0.02, 2))
    order: list[int] = []

    async def request(i: int) -> None:
        if await limiter.admit():
            order.append(i)

    await asyncio.gather(*(request(i) for i in range(4)))
    assert order == [0, 1, 2]
    assert limiter.rejected == 1
    limiter.close()


async def test_disabling_releases_waiters() -> None:
    """Switching the limiter off lets queued requests through at once."""
    limiter = AdmissionLimiter(LimiterSettings(True, 1, 1, 5))
    assert limiter.try_admit() is True
    waiter = asyncio.ensure_future(limiter.admit())
    for _ in range(100):  # the task runs up to its queueing within a few loop iterations
        if limiter.queued:
            break
        await asyncio.sleep(0)
    assert limiter.queued == 1
    limiter.apply(LimiterSettings(False))
    assert await asyncio.wait_for(waiter, 1) is True
    limiter.close()


def test_rejection_reply_is_exact(standalone_server: EmbeddedServer, raw_connect: Any) -> None:
    """Beyond the tokens, a command gets mongod 8.2.6's 462 reply: both overload labels and
    NoWritesPerformed (the default profile; SERVER-113311, rate_limiter.cpp)."""
    conn: Any = raw_connect(standalone_server.primary_address)
    conn.command({"hello": 1})
    standalone_server.set_rate_limit(1, burst_seconds=1)
    assert conn.command({"ping": 1})["ok"] == 1.0
    assert conn.command({"ping": 1}) == {
        "ok": 0.0,
        "errmsg": "Rate limiter 'ingressRequestRateLimiter' rate exceeded",
        "code": 462,
        "codeName": "IngressRequestRateLimitExceeded",
        "errorLabels": ["SystemOverloadedError", "RetryableError", "NoWritesPerformed"],
    }
    assert conn.command({"hello": 1})["ok"] == 1.0  # exempt
    status = conn.command({"serverStatus": 1})["network"]["ingressRequestRateLimiter"]
    assert status["attemptedAdmissions"] == 2
    assert status["rejectedAdmissions"] == 1
    assert status["exemptedAdmissions"] == 2
    stats = standalone_server.stats()
    assert stats["commands"]["ping"] == {"received": 2, "failed": 1, "rejected": 1}


def test_allow_retries_false_drops_retryable_label(
    embedded_server_factory: Callable[..., EmbeddedServer], raw_connect: Any
) -> None:
    """9.0: ingressRequestRateLimiterAllowRetries=false drops RetryableError (SERVER-126027,
    ingress_request_rate_limiter.idl)."""
    server = embedded_server_factory(server_version="9.0")
    conn: Any = raw_connect(server.primary_address)
    server.set_parameter(ingressRequestRateLimiterAllowRetries=False)
    server.set_rate_limit(1)
    conn.command({"ping": 1})
    assert conn.command({"ping": 1})["errorLabels"] == [
        "SystemOverloadedError",
        "NoWritesPerformed",
    ]


def test_base_backoff_attached_to_overload_errors(
    embedded_server_factory: Callable[..., EmbeddedServer], raw_connect: Any
) -> None:
    """9.0: externalClientBaseBackoffMS adds baseBackoffMS to limiter and injected overload
    errors (SERVER-130142)."""
    standalone_server = embedded_server_factory(server_version="9.0")
    conn: Any = raw_connect(standalone_server.primary_address)
    standalone_server.set_parameter(externalClientBaseBackoffMS=50)
    standalone_server.configure_fail_point(
        {
            "mode": {"times": 2},
            "data": {
                "failCommands": ["ping", "count"],
                "errorCode": 462,
                "errorLabels": ["SystemOverloadedError", "RetryableError"],
            },
        }
    )
    assert conn.command({"ping": 1})["baseBackoffMS"] == 50
    standalone_server.set_rate_limit(1)
    conn.command({"count": "c"})  # injected, takes the only token
    limited = conn.command({"count": "c"})
    assert (limited["code"], limited["baseBackoffMS"]) == (462, 50)
    standalone_server.disable_rate_limit()
    standalone_server.configure_fail_point(
        {"mode": "alwaysOn", "data": {"failCommands": ["ping"], "errorCode": 2}}
    )
    assert "baseBackoffMS" not in conn.command({"ping": 1})


def _pings_received(server: EmbeddedServer) -> int:
    """How many pings the server has received from clients (control connections not counted)."""
    return int(server.stats()["commands"].get("ping", {}).get("received", 0))


def test_queue_depth_delays_instead_of_rejecting(
    embedded_server_factory: Callable[..., EmbeddedServer], raw_connect: Any
) -> None:
    """9.0: with a queue, the second request waits for a token and the third is rejected
    (SERVER-124943)."""
    standalone_server = embedded_server_factory(server_version="9.0")
    conns: list[Any] = [raw_connect(standalone_server.primary_address) for _ in range(3)]
    for conn in conns:
        conn.command({"hello": 1})
    # One token, the next one 0.5 s later: the queued request holds its slot that long.
    standalone_server.set_rate_limit(2, burst_seconds=0.5, queue_depth=1)
    received = _pings_received(standalone_server)
    for conn in conns:
        conn.send({"ping": 1})
        received += 1
        # The server counts a request just before its admission: wait for that decision, so
        # the next request surely arrives while this one holds the token or its queue slot.
        deadline = time.monotonic() + 10
        while _pings_received(standalone_server) < received:
            assert time.monotonic() < deadline, "the server never received the ping"
            time.sleep(0.001)
    replies = [conn.receive()[1] for conn in conns]
    assert [r["ok"] for r in replies] == [1.0, 1.0, 0.0]
    assert replies[2]["code"] == 462


def test_pymongo_sees_462_after_its_retries(
    embedded_server_factory: Callable[..., EmbeddedServer], make_client: Any
) -> None:
    """A server started with a tiny rate makes a real client fail with code 462."""
    server = embedded_server_factory(rate_limit=1, burst_seconds=1)
    client = make_client(server.uri, retryReads=False, retryWrites=False)
    failures = []
    for _ in range(3):
        try:
            client.test.c.find_one()
        except OperationFailure as exc:
            failures.append(exc)
    assert failures
    assert failures[0].code == 462
    assert failures[0].has_error_label("SystemOverloadedError")


def _connect_and_hello(raw_connect: Any, address: tuple[str, int]) -> bool:
    """Open a raw connection; True if the server answers a hello, False if it hangs up."""
    conn = raw_connect(address)
    try:
        return bool(conn.command({"hello": 1})["ok"] == 1.0)
    except (ConnectionError, socket.timeout):
        return False
    finally:
        conn.close()


def test_connection_limiter_closes_before_handshake(
    standalone_server: EmbeddedServer, raw_connect: Any
) -> None:
    """Beyond the connection tokens, new connections are closed without any reply."""
    # the session-wide server may still hold connections of earlier tests: count only ours
    earlier = {c["connectionId"] for c in standalone_server.stats()["connections"]}
    standalone_server.set_parameter(
        ingressConnectionEstablishmentRatePerSec=1,
        ingressConnectionEstablishmentBurstCapacitySecs=2,
        ingressConnectionEstablishmentRateLimiterEnabled=True,
    )
    outcomes = [
        _connect_and_hello(raw_connect, standalone_server.primary_address) for _ in range(6)
    ]
    assert outcomes[:2] == [True, True]
    assert outcomes.count(False) >= 3
    stats = standalone_server.stats()
    assert stats["connectionsRejected"] == outcomes.count(False)
    ours = [c for c in stats["connections"] if c["connectionId"] not in earlier]
    assert len(ours) == outcomes.count(True)


def test_connection_limiter_queue_admits_later(
    embedded_server_factory: Callable[..., EmbeddedServer], make_client: Any
) -> None:
    """A queued connection is admitted when a token arrives, and pymongo works through it."""
    server = embedded_server_factory(connection_rate_limit=20, connection_burst_seconds=0.05)
    server.set_parameter(ingressConnectionEstablishmentMaxQueueDepth=5)
    client = make_client(server.uri)
    for _ in range(3):
        assert client.admin.command("ping")["ok"] == 1.0
    status = server.command({"serverStatus": 1})["network"]
    assert status["ingressConnectionEstablishmentRateLimiter"]["successfulAdmissions"] >= 2
