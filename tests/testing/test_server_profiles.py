"""Server version profiles, the limit_hello switch, exemptions and parameter checks.

Each test names the mongod reference it imitates; the facts and their sources are in
``../shared/notes/mongod-limiter-facts.md`` (snapshots of ``mongodb/mongo``: rate_limiter.cpp,
ingress_request_rate_limiter.cpp/.idl, folly's TokenBucket.h, the ingress rate limiter jstests).
"""

from __future__ import annotations

import asyncio
import math
import struct
from typing import Any, Callable

import pytest

from backpressure.testing import EmbeddedServer
from backpressure.testing.server.cli import _parser
from backpressure.testing.server.control.parameters import ServerParameters
from backpressure.testing.server.control.profiles import profile_for
from backpressure.testing.server.control.ratelimit import AdmissionLimiter, LimiterSettings
from backpressure.testing.server.errors import CommandError
from backpressure.testing.server.wire.framing import (
    OP_MSG,
    OP_QUERY,
    pack_msg,
    parse_header,
    peek_request,
)
from tests.fakes import FakeClock
from tests.testing.conftest import wait_until
from tests.testing.test_server_protocol import op_query

Factory = Callable[..., EmbeddedServer]

OVERLOAD = ["SystemOverloadedError", "RetryableError"]


def _limited_ping(server: EmbeddedServer, raw_connect: Any) -> dict[str, Any]:
    """Spend the only token with one ping; return the reply to the next ping."""
    conn = raw_connect(server.primary_address)
    conn.command({"hello": 1})
    server.set_rate_limit(1, burst_seconds=1)
    assert conn.command({"ping": 1})["ok"] == 1.0
    reply: dict[str, Any] = conn.command({"ping": 1})
    return reply


# -- profiles ------------------------------------------------------------------------------


def test_profiles_by_version() -> None:
    """Versions map to the profile below them: 8.3 behaves as 8.2.6 (NoWritesPerformed came
    in 8.2.6 and 8.3, SERVER-113311), 9.x as 9.0 (SERVER-126027, -130142, -124943)."""
    assert profile_for("4.4.0").name == "8.2.0"
    assert profile_for("8.2.5").name == "8.2.0"
    assert profile_for("8.2.6").name == "8.2.6"
    assert profile_for("8.3.1").name == "8.2.6"
    assert profile_for("9.0").name == "9.0"
    assert profile_for("10.1.0").name == "9.0"


@pytest.mark.parametrize(
    ("version", "labels"),
    [
        ("8.2.0", OVERLOAD),
        ("8.2.6", [*OVERLOAD, "NoWritesPerformed"]),
        ("9.0", [*OVERLOAD, "NoWritesPerformed"]),
    ],
)
def test_rejection_labels_by_profile(
    embedded_server_factory: Factory, raw_connect: Any, version: str, labels: list[str]
) -> None:
    """The 462 reply of each profile: message from rate_limiter.cpp ("Rate limiter
    'ingressRequestRateLimiter' rate exceeded"); NoWritesPerformed from 8.2.6 (SERVER-113311);
    no baseBackoffMS unless 9.0's externalClientBaseBackoffMS is set (SERVER-130142)."""
    server = embedded_server_factory(server_version=version)
    assert _limited_ping(server, raw_connect) == {
        "ok": 0.0,
        "errmsg": "Rate limiter 'ingressRequestRateLimiter' rate exceeded",
        "code": 462,
        "codeName": "IngressRequestRateLimitExceeded",
        "errorLabels": labels,
    }
    assert server.command({"buildInfo": 1})["version"] == version


def test_default_profile_is_8_2_6() -> None:
    """The default is what a MongoDB 8.2.6 user sees."""
    assert EmbeddedServer().server_version == "8.2.6"
    assert _parser().parse_args([]).server_version == "8.2.6"


@pytest.mark.parametrize(
    "name", ["ingressRequestRateLimiterAllowRetries", "externalClientBaseBackoffMS"]
)
def test_9_0_parameters_unknown_before_9_0(standalone_server: EmbeddedServer, name: str) -> None:
    """8.2 has neither ingressRequestRateLimiterAllowRetries (SERVER-126027, 9.0) nor
    externalClientBaseBackoffMS (SERVER-130142, 9.0): setParameter answers InvalidOptions as
    mongod does for an unknown parameter."""
    reply = standalone_server.command({"setParameter": 1, name: 1})
    assert (reply["ok"], reply["code"]) == (0.0, 72)
    assert "unrecognized parameter" in reply["errmsg"]


def test_9_0_start_options_refused_before_9_0() -> None:
    """Queueing and baseBackoffMS asked for at start on an 8.2 profile fail loudly."""
    with pytest.raises(ValueError, match=r"9\.0"):
        EmbeddedServer(queue_depth=2)
    with pytest.raises(ValueError, match=r"9\.0"):
        EmbeddedServer(base_backoff_ms=10, server_version="8.2.6")
    EmbeddedServer(queue_depth=2, base_backoff_ms=10, server_version="9.0")


def test_8_2_rejects_at_once_whatever_the_queue_depth(
    standalone_server: EmbeddedServer, raw_connect: Any
) -> None:
    """mongod 8.2 fixes the request queue depth at 0 (rate_limiter.cpp constructor; queueing
    is SERVER-124943, 9.0): the parameter is accepted but a request without a token is
    rejected at once."""
    conn = raw_connect(standalone_server.primary_address)
    standalone_server.set_rate_limit(1, burst_seconds=1, queue_depth=5)
    assert conn.command({"ping": 1})["ok"] == 1.0
    assert conn.command({"ping": 1})["code"] == 462


def test_9_0_base_backoff_inside_write_concern_error(
    embedded_server_factory: Factory, raw_connect: Any
) -> None:
    """9.0 puts baseBackoffMS inside writeConcernError for an overloaded write concern, and at
    the top level otherwise (SERVER-130142, the Atlas overload-errors page)."""
    server = embedded_server_factory(server_version="9.0", base_backoff_ms=30)
    conn = raw_connect(server.primary_address)
    server.configure_fail_point(
        {
            "mode": {"times": 1},
            "data": {
                "failCommands": ["insert"],
                "writeConcernError": {
                    "code": 462,
                    "codeName": "IngressRequestRateLimitExceeded",
                    "errmsg": "overloaded",
                    "errorLabels": OVERLOAD,
                },
            },
        }
    )
    reply = conn.command({"insert": "c", "documents": [{"_id": 1}]}, db="test")
    assert reply["ok"] == 1.0
    assert reply["writeConcernError"]["baseBackoffMS"] == 30
    assert "baseBackoffMS" not in reply
    assert _limited_ping(server, raw_connect)["baseBackoffMS"] == 30


def test_cli_profiles_and_limit_hello() -> None:
    """The CLI takes --server-version (8.2.0, 8.2.6, 9.0 or another dotted version) and
    --limit-hello."""
    args = _parser().parse_args(["--server-version", "9.0", "--limit-hello"])
    assert (args.server_version, args.limit_hello) == ("9.0", True)
    assert _parser().parse_args([]).limit_hello is False
    with pytest.raises(SystemExit):
        _parser().parse_args(["--server-version", "latest"])


# -- limit_hello ---------------------------------------------------------------------------


def test_hello_exempt_by_default(standalone_server: EmbeddedServer, raw_connect: Any) -> None:
    """limit_hello=False is mongod with auth on: an unauthenticated session is exempt
    (SERVER-105814; jstest ingress_request_rate_limiter: testRateLimiterUnauthenticated), so
    hellos take no token and count as exempted."""
    conn = raw_connect(standalone_server.primary_address)
    standalone_server.set_rate_limit(1, burst_seconds=1)
    for _ in range(5):
        assert conn.command({"hello": 1})["ok"] == 1.0
    status = standalone_server.command({"serverStatus": 1})["network"]["ingressRequestRateLimiter"]
    assert (status["exemptedAdmissions"], status["attemptedAdmissions"]) == (5, 0)
    assert conn.command({"ping": 1})["ok"] == 1.0  # the token is still there


@pytest.mark.parametrize("subprocess", [False, True])
def test_limit_hello_limits_handshakes(
    embedded_server_factory: Factory, raw_connect: Any, subprocess: bool
) -> None:
    """limit_hello=True (CLI --limit-hello) is mongod with auth off: every external request is
    limited, hello included (jstest ingress_request_rate_limiter: runTestAuthDisabled)."""
    server = embedded_server_factory(limit_hello=True, subprocess=subprocess)
    conn = raw_connect(server.primary_address)
    server.set_rate_limit(1, burst_seconds=1)
    assert conn.command({"hello": 1})["ok"] == 1.0
    rejected = conn.command({"isMaster": 1})
    assert (rejected["code"], rejected["errorLabels"][0]) == (462, "SystemOverloadedError")
    status = server.command({"serverStatus": 1})["network"]["ingressRequestRateLimiter"]
    assert (status["attemptedAdmissions"], status["rejectedAdmissions"]) == (2, 1)


# -- exemptions ----------------------------------------------------------------------------


def test_cidr_exemptions(standalone_server: EmbeddedServer, raw_connect: Any) -> None:
    """A client address inside ingressRequestRateLimiterExemptions is exempt and counted in
    exemptedAdmissions (ingress_request_rate_limiter.cpp admitRequest, .idl)."""
    conn = raw_connect(standalone_server.primary_address)
    standalone_server.set_rate_limit(1, burst_seconds=1)
    standalone_server.set_parameter(ingressRequestRateLimiterExemptions={"ranges": ["10.0.0.0/8"]})
    assert conn.command({"ping": 1})["ok"] == 1.0
    assert conn.command({"ping": 1})["code"] == 462  # 127.0.0.1 is not in 10/8
    standalone_server.set_parameter(
        ingressRequestRateLimiterExemptions={"ranges": ["::1/128", "127.0.0.0/8"]}
    )
    for _ in range(3):
        assert conn.command({"ping": 1})["ok"] == 1.0
    status = standalone_server.command({"serverStatus": 1})["network"]["ingressRequestRateLimiter"]
    assert status["exemptedAdmissions"] == 3
    bad = standalone_server.command(
        {"setParameter": 1, "ingressRequestRateLimiterExemptions": {"ranges": ["not-an-ip"]}}
    )
    assert bad["code"] == 2


def test_application_exemptions_on_9_0(embedded_server_factory: Factory, raw_connect: Any) -> None:
    """9.0: an appName or driver name starting with a listed prefix is exempt and counted as
    exempted (ingress_request_rate_limiter.cpp, application exemptions; mongod README
    admission exemptions)."""
    server = embedded_server_factory(server_version="9.0")
    server.set_parameter(ingressRequestRateLimiterApplicationExemptions={"appNames": ["batch"]})
    server.set_rate_limit(1, burst_seconds=1)
    exempt = raw_connect(server.primary_address)
    exempt.command({"hello": 1, "client": {"application": {"name": "batch-loader"}}})
    other = raw_connect(server.primary_address)
    other.command({"hello": 1, "client": {"application": {"name": "web"}}})
    for _ in range(3):
        assert exempt.command({"ping": 1})["ok"] == 1.0
    assert other.command({"ping": 1})["ok"] == 1.0
    assert other.command({"ping": 1})["code"] == 462
    status = server.command({"serverStatus": 1})["network"]["ingressRequestRateLimiter"]
    assert status["exemptedAdmissions"] == 5  # 3 pings + 2 hellos (limit_hello=False)


# -- parameter checks ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "0 is not greater than or equal to 1"),
        (-1, "-1 is not greater than or equal to 1"),
        (2.5, "is not an integer"),
        (2**31, "out of range"),
    ],
)
def test_rate_is_an_integer_at_least_one(value: Any, message: str) -> None:
    """ingressRequestAdmissionRatePerSec is an int32 >= 1 (ingress_request_rate_limiter.idl;
    jstest: rate -1 is BadValue, 1 works)."""
    with pytest.raises(CommandError) as info:
        ServerParameters({"ingressRequestAdmissionRatePerSec": value})
    assert info.value.code == 2
    assert message in info.value.errmsg
    assert (
        ServerParameters({"ingressRequestAdmissionRatePerSec": 2.0}).values[
            "ingressRequestAdmissionRatePerSec"
        ]
        == 2
    )


@pytest.mark.parametrize("value", [0, -1, 0.5])
def test_burst_size_below_one_token(value: float) -> None:
    """ingressRequestAdmissionBurstSize (older builds) is a token count of at least 1
    ("burstSize cannot be less than 1.0"; jstest: burst size 0 and -1 are BadValue)."""
    with pytest.raises(CommandError) as info:
        ServerParameters({"ingressRequestAdmissionBurstSize": value})
    assert (info.value.code, info.value.errmsg) == (2, "burstSize cannot be less than 1.0")


def test_reenabling_keeps_the_tokens() -> None:
    """Reconfiguring, switching Enabled off and on included, keeps the available tokens:
    folly TokenBucket reset() keeps the balance, and enabling does not refill."""
    clock = FakeClock()
    limiter = AdmissionLimiter(LimiterSettings(), clock=clock)
    limiter.apply(LimiterSettings(True, 1, 2))
    assert [limiter.try_admit() for _ in range(3)] == [True, True, False]
    limiter.apply(LimiterSettings(False, 1, 2))
    limiter.apply(LimiterSettings(True, 1, 2))
    assert limiter.try_admit() is False
    clock.now += 1.0
    assert limiter.try_admit() is True


def test_total_available_tokens_is_finite(standalone_server: EmbeddedServer) -> None:
    """totalAvailableTokens is capped (at INT64_MAX) instead of reporting an infinite bucket,
    and the section has mongod's fields only (rate_limiter.cpp appendStats)."""
    status = standalone_server.command({"serverStatus": 1})["network"]["ingressRequestRateLimiter"]
    assert math.isfinite(status["totalAvailableTokens"])
    assert set(status) == {
        "attemptedAdmissions",
        "successfulAdmissions",
        "rejectedAdmissions",
        "exemptedAdmissions",
        "totalAvailableTokens",
    }


# -- codes 463 and 473 ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "name", "labels"),
    [
        (463, "IngressOperationRateLimitExceeded", [*OVERLOAD, "NoWritesPerformed"]),
        (473, "InterruptedDueToOverload", ["SystemOverloadedError"]),
    ],
)
def test_overload_codes_from_fail_points(
    standalone_server: EmbeddedServer, raw_connect: Any, code: int, name: str, labels: list[str]
) -> None:
    """failCommand with errorCode 463 or 473 and no errorLabels gets the labels the Atlas
    overload-errors page lists: 463 retryable, 473 SystemOverloadedError only."""
    conn = raw_connect(standalone_server.primary_address)
    standalone_server.configure_fail_point(
        {"mode": {"times": 1}, "data": {"failCommands": ["find"], "errorCode": code}}
    )
    reply = conn.command({"find": "c"}, db="test")
    assert (reply["code"], reply["codeName"], reply["errorLabels"]) == (code, name, labels)


def test_operation_rate_limiter_rejects_with_463(
    embedded_server_factory: Factory, raw_connect: Any
) -> None:
    """The operation rate limiter (8.3+; SystemOverloadedError, RetryableError,
    NoWritesPerformed per the Atlas overload-errors page) answers 463 once its tokens are spent;
    hellos and the request limiter are untouched."""
    server = embedded_server_factory(server_version="9.0")
    conn = raw_connect(server.primary_address)
    server.set_operation_rate_limit(1, burst_seconds=1)
    assert conn.command({"ping": 1})["ok"] == 1.0
    assert conn.command({"hello": 1})["ok"] == 1.0
    assert conn.command({"ping": 1}) == {
        "ok": 0.0,
        "errmsg": "Operation rate limiter rate exceeded",
        "code": 463,
        "codeName": "IngressOperationRateLimitExceeded",
        "errorLabels": [*OVERLOAD, "NoWritesPerformed"],
    }
    status = server.command({"serverStatus": 1})
    assert status["backpressure"]["operationRateLimiter"]["rejectedAdmissions"] == 1
    assert status["network"]["ingressRequestRateLimiter"]["attemptedAdmissions"] == 0
    assert server.stats()["commands"]["ping"]["rejected"] == 1


@pytest.mark.parametrize(("version", "exists"), [("8.2.6", False), ("8.3.0", True), ("9.0", True)])
def test_operation_rate_limiter_from_8_3(
    embedded_server_factory: Factory, version: str, exists: bool
) -> None:
    """The operation rate limiter exists from 8.3 (the facts note: 8.3+, off by default)."""
    server = embedded_server_factory(server_version=version)
    reply = server.command({"setParameter": 1, "backpressureOperationRateLimiterEnabled": False})
    assert bool(reply["ok"]) is exists


# -- the decision before parsing -----------------------------------------------------------


def _undecodable_ping(request_id: int, flags: int = 0) -> bytes:
    """An OP_MSG whose body starts with ``ping: 1`` and then holds an element of unknown type."""
    elements = b"\x10ping\x00" + struct.pack("<i", 1) + b"\x55bad\x00" + b"\x00" * 4
    doc = struct.pack("<i", 4 + len(elements) + 1) + elements + b"\x00"
    payload = struct.pack("<I", flags) + b"\x00" + doc
    return struct.pack("<iiii", 16 + len(payload), request_id, 0, 2013) + payload


def test_rejection_before_the_body_is_decoded(
    standalone_server: EmbeddedServer, raw_connect: Any
) -> None:
    """mongod's limiter decides right after the message is read, before parsing (the session
    workflow; mongod admission README): a message the server could not even decode is
    rejected with 462 when no token is left, and only an admitted one closes the connection."""
    conn = raw_connect(standalone_server.primary_address)
    conn.command({"hello": 1})
    standalone_server.set_rate_limit(1, burst_seconds=1)
    assert conn.command({"ping": 1})["ok"] == 1.0
    conn.send_bytes(_undecodable_ping(7))
    response_to, reply = conn.receive()
    assert (response_to, reply["code"]) == (7, 462)
    assert standalone_server.stats()["commands"]["ping"]["rejected"] == 1
    standalone_server.disable_rate_limit()
    conn.send_bytes(_undecodable_ping(8))
    assert conn.is_closed_by_peer()


def test_rejected_fire_and_forget_gets_no_reply(
    standalone_server: EmbeddedServer, raw_connect: Any
) -> None:
    """A rejected moreToCome request is dropped without a reply and counted as rejected
    (session_workflow_test.cpp, fire-and-forget rejection); the connection stays usable."""
    conn = raw_connect(standalone_server.primary_address)
    conn.command({"hello": 1})
    standalone_server.set_rate_limit(1, burst_seconds=1)
    conn.send({"insert": "c", "documents": [{"_id": 1}]}, db="test", flags=2)  # takes the token
    conn.send({"insert": "c", "documents": [{"_id": 2}]}, db="test", flags=2)  # rejected
    request_id = conn.send({"ping": 1})
    response_to, reply = conn.receive()
    assert (response_to, reply["code"]) == (request_id, 462)
    status = standalone_server.command({"serverStatus": 1})["network"]["ingressRequestRateLimiter"]
    assert (status["successfulAdmissions"], status["rejectedAdmissions"]) == (1, 2)


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (pack_msg({"find": "c", "filter": {}}, 1, 0), ("find", OP_MSG, False)),
        (pack_msg({"insert": "c"}, 1, 0, flags=2), ("insert", OP_MSG, True)),
        (op_query(1, "admin.$cmd", {"isMaster": 1}), ("isMaster", OP_QUERY, False)),
        (op_query(1, "admin.$cmd", {"$query": {"ping": 1}}), ("ping", OP_QUERY, False)),
        (_undecodable_ping(1), ("ping", OP_MSG, False)),
    ],
)
def test_peek_reads_the_command_name_without_decoding(
    message: bytes, expected: tuple[str, int, bool]
) -> None:
    """The limiter's view of a message: command name and reply form from fixed offsets."""
    header = parse_header(message[:16])
    peek = peek_request(header, message[16:])
    assert peek is not None
    assert (peek.command_name, peek.op_code, peek.more_to_come) == expected


def test_peek_gives_up_on_odd_layouts() -> None:
    """A compressed or truncated message is left to the full parser."""
    message = pack_msg({"ping": 1}, 1, 0)
    header = parse_header(message[:16])
    assert peek_request(header, message[16:21]) is None
    compressed = parse_header(struct.pack("<iiii", 40, 1, 0, 2012))
    assert peek_request(compressed, b"\x00" * 24) is None


# -- 9.0 queue interruptions ---------------------------------------------------------------


def _queue_status(server: EmbeddedServer) -> dict[str, Any]:
    status = server.command({"serverStatus": 1})
    limiter = status["network"]["ingressRequestRateLimiter"]
    return {**status["backpressure"]["ingressRequestQueue"], **limiter}


async def test_waiter_leaves_on_timeout_or_interrupt() -> None:
    """A queued waiter gives up when its time runs out or its interrupt fires, and leaves the
    queue (SERVER-124943: maxTimeMS or a kill interrupts a waiter)."""
    limiter = AdmissionLimiter(LimiterSettings(True, 1, 1, 5))
    assert limiter.try_admit() is True
    assert limiter.try_admit() is None
    assert await limiter.wait(timeout=0.01) is False
    assert limiter.queued == 0
    interrupt: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    assert limiter.try_admit() is None
    asyncio.get_running_loop().call_soon(interrupt.set_result, None)
    assert await limiter.wait(interrupt=interrupt) is False
    assert (limiter.queued, limiter.successful) == (0, 1)
    limiter.close()


def test_queued_request_interrupted_by_max_time_ms(
    embedded_server_factory: Factory, raw_connect: Any
) -> None:
    """9.0: a queued request whose maxTimeMS runs out is answered MaxTimeMSExpired and leaves
    the queue without a token, so the next request gets the next token (SERVER-124943)."""
    server = embedded_server_factory(server_version="9.0")
    first, second, third = (raw_connect(server.primary_address) for _ in range(3))
    for conn in (first, second, third):
        conn.command({"hello": 1})
    server.set_rate_limit(1, burst_seconds=1, queue_depth=5)
    assert first.command({"ping": 1})["ok"] == 1.0
    reply = second.command({"ping": 1, "maxTimeMS": 20})
    assert (reply["code"], reply["codeName"]) == (50, "MaxTimeMSExpired")
    assert third.command({"ping": 1})["ok"] == 1.0  # queued, then given the next token
    status = _queue_status(server)
    assert status["interruptedByMaxTimeMS"] == 1
    assert status["successfulAdmissions"] == 2


def test_queued_request_interrupted_by_client_disconnect(
    embedded_server_factory: Factory, raw_connect: Any
) -> None:
    """9.0: a client that closes its connection while its request waits in the queue is taken
    out of it, and its request never runs (SERVER-124943: a kill interrupts the waiter and the
    token is returned)."""
    server = embedded_server_factory(server_version="9.0")
    first, leaving = raw_connect(server.primary_address), raw_connect(server.primary_address)
    first.command({"hello": 1})
    leaving.command({"hello": 1})
    server.set_rate_limit(1, burst_seconds=1, queue_depth=5)
    assert first.command({"ping": 1})["ok"] == 1.0
    leaving.send({"ping": 1})
    wait_until(lambda: _queue_status(server)["waiting"] == 1)
    leaving.close()
    wait_until(lambda: _queue_status(server)["interruptedByClientDisconnect"] == 1)
    status = _queue_status(server)
    assert (status["waiting"], status["successfulAdmissions"]) == (0, 1)


# -- connection-establishment limiter ------------------------------------------------------


def _connection_status(server: EmbeddedServer) -> dict[str, Any]:
    connections: dict[str, Any] = server.command({"serverStatus": 1})["connections"]
    return connections


def _limit_connections(server: EmbeddedServer, depth: int, **extra: Any) -> None:
    server.set_parameter(
        ingressConnectionEstablishmentRatePerSec=1,
        ingressConnectionEstablishmentBurstCapacitySecs=1,
        ingressConnectionEstablishmentMaxQueueDepth=depth,
        ingressConnectionEstablishmentRateLimiterEnabled=True,
        **extra,
    )


def test_connection_queue_returns_the_place_of_a_client_that_left(
    standalone_server: EmbeddedServer, raw_connect: Any
) -> None:
    """A connection whose client disconnects while it waits for an establishment token leaves
    the queue without a token, counted in connections.establishmentRateLimit
    .interruptedDueToClientDisconnect (session_workflow_test.cpp; mongod admission README)."""
    _limit_connections(standalone_server, depth=5)
    first = raw_connect(standalone_server.primary_address)
    assert first.command({"hello": 1})["ok"] == 1.0  # took the only token
    leaving = raw_connect(standalone_server.primary_address)
    wait_until(lambda: _connection_status(standalone_server)["queuedForEstablishment"] == 1)
    leaving.close()
    wait_until(
        lambda: (
            _connection_status(standalone_server)["establishmentRateLimit"][
                "interruptedDueToClientDisconnect"
            ]
            == 1
        )
    )
    status = _connection_status(standalone_server)
    assert status["queuedForEstablishment"] == 0
    queues = standalone_server.command({"serverStatus": 1})["queues"]
    assert queues["ingressSessionEstablishment"]["averageTimeQueuedMicros"] > 0


def test_connection_limiter_bypass(standalone_server: EmbeddedServer, raw_connect: Any) -> None:
    """Clients in ingressConnectionEstablishmentRateLimiterBypass (CIDR) connect without a token
    and are counted as exempted (ingress connection-establishment limiter parameters)."""
    _limit_connections(
        standalone_server,
        depth=0,
        ingressConnectionEstablishmentRateLimiterBypass={"ranges": ["127.0.0.1/32"]},
    )
    for _ in range(4):
        assert raw_connect(standalone_server.primary_address).command({"hello": 1})["ok"] == 1.0
    limit = _connection_status(standalone_server)["establishmentRateLimit"]
    assert (limit["exempted"], limit["rejected"]) == (4, 0)


@pytest.mark.parametrize("limit_hello", [False, True])
def test_pymongo_handshakes_and_heartbeats_meet_the_limiter_only_with_limit_hello(
    embedded_server_factory: Factory, make_client: Any, limit_hello: bool
) -> None:
    """A real pymongo client: its monitor and pool hellos are exempted by default (mongod with
    auth on, SERVER-105814) and drawn from the bucket with limit_hello (mongod with auth off:
    "every external request is limited, hello and heartbeats included")."""
    server = embedded_server_factory(limit_hello=limit_hello, rate_limit=10_000)
    client = make_client(server.uri, heartbeatFrequencyMS=500)
    assert client.admin.command("ping")["ok"] == 1.0
    hellos = server.stats()["commands"]
    count = sum(hellos.get(n, {}).get("received", 0) for n in ("hello", "isMaster"))
    assert count >= 2  # the monitor's and the pool connection's handshakes at least
    status = server.command({"serverStatus": 1})["network"]["ingressRequestRateLimiter"]
    if limit_hello:
        assert status["exemptedAdmissions"] == 0
        assert status["attemptedAdmissions"] >= count + 1
    else:
        assert status["exemptedAdmissions"] >= count
        assert status["attemptedAdmissions"] == 1  # the ping


def test_burst_below_one_token_rejects_everything(
    standalone_server: EmbeddedServer, raw_connect: Any
) -> None:
    """rate 1 x burst 0.5 s is half a token: mongod's bucket (folly TokenBucket) never holds a
    whole one, so every limited request is rejected."""
    conn = raw_connect(standalone_server.primary_address)
    conn.command({"hello": 1})
    standalone_server.set_rate_limit(1, burst_seconds=0.5)
    assert [conn.command({"ping": 1})["ok"] for _ in range(3)] == [0.0, 0.0, 0.0]
