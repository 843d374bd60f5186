"""Server-level commands: parameters, diagnostics, statistics and reset."""

from __future__ import annotations

from typing import Any

import pytest
from pymongo.errors import OperationFailure

from backpressure.testing import EmbeddedServer
from backpressure.testing.server.control.parameters import ServerParameters


def test_get_parameter_star_enables_test_commands(
    standalone_server: EmbeddedServer, make_client: Any
) -> None:
    """getParameter: "*" includes enableTestCommands and the limiter parameters."""
    client = make_client(standalone_server.uri)
    params = client.admin.command("getParameter", "*")
    assert params["enableTestCommands"] == 1
    assert params["ingressRequestRateLimiterEnabled"] is False
    assert (
        params["ingressRequestAdmissionBurstSize"]
        == params["ingressRequestAdmissionBurstCapacitySecs"]
    )
    named = client.admin.command("getParameter", 1, ingressRequestAdmissionMaxQueueDepth=1)
    assert named["ingressRequestAdmissionMaxQueueDepth"] == 0
    assert "externalClientBaseBackoffMS" not in params  # 9.0 only; the default profile is 8.2.6


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ingressRequestAdmissionRatePerSec", -1),
        ("ingressRequestAdmissionRatePerSec", "fast"),
        ("ingressRequestAdmissionBurstCapacitySecs", 0),
        ("ingressRequestAdmissionMaxQueueDepth", 1.5),
        ("ingressRequestRateLimiterEnabled", "yes"),
        ("ingressConnectionEstablishmentRatePerSec", 0),
    ],
)
def test_set_parameter_bad_values(
    standalone_server: EmbeddedServer, make_client: Any, name: str, value: Any
) -> None:
    """A bad value is BadValue (2) naming the parameter, and changes nothing."""
    client = make_client(standalone_server.uri)
    with pytest.raises(OperationFailure) as info:
        client.admin.command("setParameter", 1, **{name: value})
    assert info.value.code == 2
    assert name in str(info.value)


def test_set_parameter_unknown_name(standalone_server: EmbeddedServer, make_client: Any) -> None:
    """An unknown parameter is refused."""
    client = make_client(standalone_server.uri)
    with pytest.raises(OperationFailure, match="unrecognized parameter"):
        client.admin.command("setParameter", 1, noSuchParameter=1)


def test_set_parameter_applies_to_one_member_only(
    replicaset_server: EmbeddedServer, make_client: Any
) -> None:
    """Like mongod, setParameter on one member leaves the others alone."""
    replicaset_server.set_parameter(1, ingressRequestAdmissionRatePerSec=25)
    values = [
        replicaset_server.command({"getParameter": 1, "ingressRequestAdmissionRatePerSec": 1}, i)[
            "ingressRequestAdmissionRatePerSec"
        ]
        for i in range(3)
    ]
    assert values == [2**31 - 1, 25, 2**31 - 1]


def test_burst_size_is_a_token_count() -> None:
    """The older ingressRequestAdmissionBurstSize sets the capacity in tokens, whatever the rate.

    mongod: ingress_request_rate_limiter.idl (burstSize, "burstSize cannot be less than 1.0").
    """
    params = ServerParameters(
        {"ingressRequestAdmissionRatePerSec": 2, "ingressRequestAdmissionBurstSize": 3}
    )
    settings = params.request_limiter()
    assert settings.rate * settings.burst_seconds == 3
    assert params.get("ingressRequestAdmissionBurstSize") == 3
    params.update({"ingressRequestAdmissionBurstCapacitySecs": 4})  # seconds again: 2 x 4
    settings = params.request_limiter()
    assert settings.rate * settings.burst_seconds == 8


def test_diagnostic_commands(replicaset_server: EmbeddedServer, make_client: Any) -> None:
    """buildInfo, serverStatus, getCmdLineOpts, hostInfo, whatsmyuri, connectionStatus answer."""
    client = make_client(replicaset_server.uri)
    admin = client.admin
    assert admin.command("buildInfo")["versionArray"] == [8, 2, 6, 0]
    status = admin.command("serverStatus")
    assert set(status["network"]["ingressRequestRateLimiter"]) >= {
        "attemptedAdmissions",
        "successfulAdmissions",
        "rejectedAdmissions",
        "exemptedAdmissions",
        "totalAvailableTokens",
    }
    assert status["repl"]["setName"] == "rs0"
    assert admin.command("getCmdLineOpts")["parsed"]["replication"]["replSet"] == "rs0"
    assert admin.command("hostInfo")["system"]["numCores"] >= 1
    assert ":" in admin.command("whatsmyuri")["you"]
    assert admin.command("connectionStatus")["authInfo"]["authenticatedUsers"] == []
    assert len(admin.command("replSetGetStatus")["members"]) == 3


def test_backpressure_stats_counts_and_reset(
    standalone_server: EmbeddedServer, make_client: Any
) -> None:
    """Per-command received/failed counts, over the wire and in Python; reset zeroes them."""
    client = make_client(standalone_server.uri)
    for _ in range(3):
        client.admin.command("ping")
    standalone_server.configure_fail_point(
        {"mode": {"times": 1}, "data": {"failCommands": ["ping"], "errorCode": 2}}
    )
    with pytest.raises(OperationFailure):
        client.admin.command("ping")
    over_wire = client.admin.command("backpressureStats")
    assert over_wire["commands"]["ping"] == {"received": 4, "failed": 1, "rejected": 0}
    assert standalone_server.stats(reset=True)["commands"]["ping"]["received"] == 4
    assert "ping" not in standalone_server.stats()["commands"]
    client.admin.command("backpressureStats", reset=True)
    assert standalone_server.stats()["commands"].get("backpressureStats") is None


def test_transaction_attempts_are_reported(
    replicaset_server: EmbeddedServer, make_client: Any
) -> None:
    """Per (lsid, txnNumber) attempts and applied come from the engine."""
    client = make_client(replicaset_server.uri)
    client.test.c.insert_one({"_id": 1})
    with client.start_session() as session, session.start_transaction():
        client.test.c.insert_one({"_id": 2}, session=session)
    transactions = replicaset_server.stats()["transactions"]
    assert transactions
    assert {"lsid", "txnNumber", "attempts", "applied"} <= set(transactions[0])


def test_reset_restores_everything(
    embedded_server_factory: Any, make_client: Any, raw_connect: Any
) -> None:
    """reset() drops data, fail points, changed parameters and counters, keeps start settings."""
    server = embedded_server_factory(rate_limit=1000, base_backoff_ms=10, server_version="9.0")
    client = make_client(server.uri)
    client.test.c.insert_one({"x": 1})
    server.configure_fail_point(
        {"mode": "alwaysOn", "data": {"failCommands": ["find"], "errorCode": 2}}
    )
    server.set_parameter(externalClientBaseBackoffMS=99)
    server.reset()
    assert client.test.c.find_one() is None
    params = server.command({"getParameter": "*"})
    assert params["externalClientBaseBackoffMS"] == 10
    assert params["ingressRequestRateLimiterEnabled"] is True
    assert server.stats()["commands"].get("insert") is None


def test_subprocess_mode(embedded_server_factory: Any, make_client: Any) -> None:
    """subprocess=True runs the CLI and is controlled the same way."""
    server = embedded_server_factory(topology="replicaset", subprocess=True)
    assert server.deployment is None
    client = make_client(server.uri)
    client.test.c.insert_one({"_id": 1})
    server.configure_fail_point(
        {"mode": {"times": 1}, "data": {"failCommands": ["find"], "errorCode": 2}},
        member=server.primary_address,
    )
    with pytest.raises(OperationFailure):
        client.test.c.find_one()
    assert client.test.c.find_one() == {"_id": 1}
    assert server.stats()["commands"]["find"]["failed"] == 1
