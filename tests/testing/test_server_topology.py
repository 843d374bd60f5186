"""Topology discovery by real pymongo clients: standalone, replica set, sharded."""

from __future__ import annotations

import datetime
import socket
import time
import uuid
from typing import Any, Callable

import pytest
from bson.binary import Binary
from pymongo import MongoClient, ReadPreference
from pymongo.errors import NotPrimaryError

from backpressure.testing import EmbeddedServer
from tests.testing.conftest import wait_until


def test_standalone_is_discovered(standalone_server: EmbeddedServer, make_client: Any) -> None:
    """A standalone URI gives a Single topology with a writable server."""
    client = make_client(standalone_server.uri)
    client.admin.command("ping")
    assert client.topology_description.topology_type_name == "Single"
    assert standalone_server.uri == f"mongodb://127.0.0.1:{standalone_server.addresses[0][1]}/"


def test_replica_set_primary_and_secondaries(
    replicaset_server: EmbeddedServer, make_client: Any
) -> None:
    """rs0 is found with one primary and two secondaries; secondary reads avoid the primary."""
    client = make_client(replicaset_server.uri, serverSelectionTimeoutMS=30000)
    client.test.c.insert_one({"_id": 1})
    assert client.primary == replicaset_server.primary_address
    # The insert needs only the primary; the secondaries' first heartbeats may still be due.
    wait_until(lambda: client.secondaries == set(replicaset_server.addresses[1:]))
    assert client.topology_description.topology_type_name == "ReplicaSetWithPrimary"
    secondary = client.test.get_collection("c", read_preference=ReadPreference.SECONDARY)
    for _ in range(6):
        assert secondary.find_one({"_id": 1}) == {"_id": 1}
    per_member = replicaset_server.stats()["members"]
    finds = [m["commands"].get("find", {}).get("received", 0) for m in per_member]
    assert finds[0] == 0
    assert finds[1] + finds[2] == 6
    assert "$clusterTime" in client.admin.command("ping")


def test_write_on_secondary_is_not_writable_primary(
    replicaset_server: EmbeddedServer, make_client: Any
) -> None:
    """A direct connection to a secondary gets NotWritablePrimary for writes, reads still work."""
    host, port = replicaset_server.addresses[1]
    client = make_client(host, port=port, directConnection=True, retryWrites=False)
    with pytest.raises(NotPrimaryError) as info:
        client.test.c.insert_one({"x": 1})
    assert info.value.details is not None
    assert info.value.details["code"] == 10107
    assert client.test.c.find_one() is None  # direct connection reads are secondary-ok


def test_retryable_write_on_secondary_gets_label(
    replicaset_server: EmbeddedServer, raw_connect: Any
) -> None:
    """NotWritablePrimary for a command with txnNumber carries RetryableWriteError."""
    conn = raw_connect(replicaset_server.addresses[2])
    lsid = {"id": Binary.from_uuid(uuid.uuid4())}
    reply = conn.command(
        {"insert": "c", "documents": [{"a": 1}], "lsid": lsid, "txnNumber": 1}, db="test"
    )
    assert (reply["code"], reply["errorLabels"]) == (10107, ["RetryableWriteError"])
    plain = conn.command({"insert": "c", "documents": [{"a": 1}]}, db="test")
    assert plain["code"] == 10107
    assert "errorLabels" not in plain


def test_read_on_secondary_needs_secondary_ok(
    replicaset_server: EmbeddedServer, raw_connect: Any
) -> None:
    """Without a secondary-ok read preference a secondary refuses reads (13435)."""
    conn = raw_connect(replicaset_server.addresses[1])
    assert conn.command({"find": "c"}, db="test")["code"] == 13435
    ok = conn.command({"find": "c", "$readPreference": {"mode": "secondary"}}, db="test")
    assert ok["ok"] == 1.0


def test_sharded_cluster_has_two_mongos(sharded_server: EmbeddedServer, make_client: Any) -> None:
    """Two routers answering isdbgrid over one shared data set."""
    client = make_client(sharded_server.uri)
    client.test.c.insert_one({"_id": 1})
    assert client.topology_description.topology_type_name == "Sharded"
    # The insert needs one router; discovery of the second may still be under way.
    wait_until(lambda: set(client.nodes) == set(sharded_server.addresses))
    host, port = sharded_server.addresses[1]
    other = make_client(host, port=port, directConnection=True)
    assert other.test.c.find_one() == {"_id": 1}
    assert other.admin.command("hello")["msg"] == "isdbgrid"


@pytest.mark.parametrize(("wire", "version"), [(25, "8.2.0"), (29, "9.0.0")])
def test_wire_and_server_version(
    embedded_server_factory: Callable[..., EmbeddedServer],
    make_client: Any,
    wire: int,
    version: str,
) -> None:
    """maxWireVersion and buildInfo follow the configured server version."""
    server = embedded_server_factory(max_wire_version=wire, server_version=version)
    client = make_client(server.uri)
    info = client.admin.command("buildInfo")
    assert info["version"] == version
    assert info["versionArray"][:2] == [int(x) for x in version.split(".")[:2]]
    assert client.admin.command("hello")["maxWireVersion"] == wire


def test_start_and_stop_a_five_member_set() -> None:
    """A 5-member replica set starts listening on every member and stops them all."""
    with EmbeddedServer("replicaset", 5) as server:
        addresses = list(server.addresses)
        assert len(addresses) == 5
        for host, port in addresses:
            with MongoClient(host, port, directConnection=True) as member:
                assert member.admin.command("ping")["ok"] == 1
    for address in addresses:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(address, timeout=30).close()


def test_monitors_poll_without_a_hello_storm(
    replicaset_server: EmbeddedServer, make_client: Any
) -> None:
    """No topologyVersion: monitors poll once per heartbeat instead of busy-looping."""
    client = make_client(replicaset_server.uri)  # heartbeatFrequencyMS=500
    client.admin.command("ping")
    replicaset_server.stats(reset=True)
    started = time.monotonic()

    def hellos() -> list[int]:
        return [
            sum(member["commands"].get(n, {}).get("received", 0) for n in ("hello", "isMaster"))
            for member in replicaset_server.stats()["members"]
        ]

    wait_until(lambda: min(hellos()) >= 2)
    counts, elapsed = hellos(), time.monotonic() - started
    # Polling sends about one hello per member per 0.5 s (plus the odd extra when a
    # connection is opened); a busy loop would send hundreds in this time.
    assert max(counts) <= 2 * (elapsed / 0.5 + 2), (counts, elapsed)


def test_closed_connections_stay_in_stats(
    standalone_server: EmbeddedServer, make_client: Any
) -> None:
    """A closed client's connections are reported with open: false until the next reset."""
    client = make_client(standalone_server.uri, appname="short-lived")
    client.admin.command("ping")
    client.close()

    def short_lived() -> list[dict[str, Any]]:
        stats = standalone_server.stats()["connections"]
        return [c for c in stats if c["appName"] == "short-lived"]

    wait_until(lambda: bool(short_lived()) and not any(c["open"] for c in short_lived()))
    conns = short_lived()
    assert conns
    assert all(c["closedAt"] is not None for c in conns)


def test_max_staleness_reads_from_a_secondary(
    replicaset_server: EmbeddedServer, make_client: Any
) -> None:
    """Hello carries lastWrite like mongod's, so maxStalenessSeconds can select a secondary."""
    writer = make_client(replicaset_server.uri)
    writer.test.c.insert_one({"_id": 1})
    client = make_client(replicaset_server.uri + "&readPreference=secondary&maxStalenessSeconds=90")
    cursor = client.test.c.find()
    assert list(cursor) == [{"_id": 1}]
    assert cursor.address in replicaset_server.addresses[1:]
    hello = client.admin.command("hello")
    last_write = hello["lastWrite"]
    assert last_write["opTime"]["t"] == 1
    assert isinstance(last_write["lastWriteDate"], datetime.datetime)


def test_out_and_merge_run_on_a_secondary(
    replicaset_server: EmbeddedServer, make_client: Any
) -> None:
    """A server reporting 5.0+ accepts $out/$merge on a secondary; the primary sees the result."""
    client = make_client(replicaset_server.uri)
    client.test.src.drop()
    client.test.src.insert_many([{"_id": 1, "k": 1}, {"_id": 2, "k": 2}])
    on_secondary = client.test.get_collection("src", read_preference=ReadPreference.SECONDARY)
    on_secondary.aggregate([{"$match": {"k": 1}}, {"$out": "out_sec"}])
    on_secondary.aggregate([{"$match": {"k": 2}}, {"$merge": {"into": "out_sec"}}])
    assert sorted(d["_id"] for d in client.test.out_sec.find()) == [1, 2]
    per_member = replicaset_server.stats()["members"]
    assert sum(m["commands"].get("aggregate", {}).get("failed", 0) for m in per_member) == 0
    assert per_member[0]["commands"].get("aggregate", {}).get("received", 0) == 0


def test_out_on_a_secondary_before_5_0_is_not_primary(raw_connect: Any) -> None:
    """A server reporting 4.4 refuses $out on a secondary, as 4.4 did."""
    with EmbeddedServer("replicaset", server_version="4.4.0", max_wire_version=9) as old:
        conn = raw_connect(old.addresses[1])
        reply = conn.command(
            {
                "aggregate": "src",
                "pipeline": [{"$out": "o"}],
                "cursor": {},
                "$readPreference": {"mode": "secondary"},
            },
            db="test",
        )
        assert reply["code"] == 10107
