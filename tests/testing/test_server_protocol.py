"""Wire-level robustness: malformed input, unacknowledged writes, legacy hello, compression."""

from __future__ import annotations

import struct
from typing import Any

import bson
import pymongo
import pytest
from pymongo.errors import OperationFailure

from backpressure.testing import EmbeddedServer
from backpressure.testing.server.wire.framing import OP_REPLY, parse_header, parse_reply


def op_query(request_id: int, namespace: str, query: dict[str, Any], flags: int = 0) -> bytes:
    """Pack a legacy OP_QUERY (what pymongo < 4.18 sends for its first hello)."""
    body = (
        struct.pack("<i", flags)
        + namespace.encode()
        + b"\x00"
        + struct.pack("<ii", 0, -1)
        + bson.encode(query)
    )
    return struct.pack("<iiii", 16 + len(body), request_id, 0, 2004) + body


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x00" * 64,  # length 0
        struct.pack("<iiii", 100_000_000, 1, 0, 2013),  # beyond maxMessageSizeBytes
        struct.pack("<iiii", 24, 1, 0, 2002) + b"\x00" * 8,  # unknown opcode (OP_INSERT)
        struct.pack("<iiii", 30, 1, 0, 2013)
        + b"\x00\x00\x00\x00\x00"
        + b"\x09\x00\x00\x00\xff"
        + b"abcd",  # bad BSON
    ],
)
def test_malformed_message_closes_only_that_connection(
    standalone_server: EmbeddedServer, raw_connect: Any, garbage: bytes
) -> None:
    """The offending connection is closed; a connection opened before it keeps working."""
    bystander = raw_connect(standalone_server.primary_address)
    assert bystander.command({"ping": 1})["ok"] == 1.0
    victim = raw_connect(standalone_server.primary_address)
    victim.send_bytes(garbage)
    assert victim.is_closed_by_peer()
    assert bystander.command({"ping": 1})["ok"] == 1.0


def test_more_to_come_gets_no_reply_and_keeps_the_connection(
    standalone_server: EmbeddedServer, raw_connect: Any
) -> None:
    """An unacknowledged insert is executed silently; the next command is answered."""
    conn = raw_connect(standalone_server.primary_address)
    conn.send({"insert": "c", "documents": [{"_id": 1}], "writeConcern": {"w": 0}}, "test", 2)
    request_id = conn.send({"find": "c", "filter": {}}, "test")
    response_to, reply = conn.receive()
    assert response_to == request_id
    assert reply["cursor"]["firstBatch"] == [{"_id": 1}]


def test_w0_writes_with_pymongo(standalone_server: EmbeddedServer, make_client: Any) -> None:
    """pymongo's w=0 inserts (moreToCome) are applied and the pool stays usable."""
    client = make_client(standalone_server.uri, w=0)
    for i in range(5):
        client.test.c.insert_one({"_id": i})
    assert client.test.c.count_documents({}) == 5


def test_legacy_op_query_hello(standalone_server: EmbeddedServer, raw_connect: Any) -> None:
    """The OP_QUERY handshake of pymongo < 4.18 gets an OP_REPLY with ismaster."""
    conn = raw_connect(standalone_server.primary_address)
    conn.send_bytes(op_query(5, "admin.$cmd", {"isMaster": 1, "helloOk": True}))
    header = parse_header(conn._recv(16))
    reply = parse_reply(header, conn._recv(header.length - 16))
    assert (header.op_code, header.response_to) == (OP_REPLY, 5)
    assert reply["ismaster"] is True
    assert reply["helloOk"] is True
    assert "topologyVersion" not in reply  # pymongo polls instead of streaming


def test_zlib_compression_with_pymongo(standalone_server: EmbeddedServer, make_client: Any) -> None:
    """A client configured with zlib negotiates it and works through OP_COMPRESSED."""
    client = make_client(standalone_server.uri, compressors="zlib", appname="zipped")
    client.test.c.insert_many([{"v": "x" * 1000} for _ in range(20)])
    assert client.test.c.count_documents({}) == 20
    conns = [c for c in standalone_server.stats()["connections"] if c["appName"] == "zipped"]
    assert any(c["handshake"].get("compression") == ["zlib"] for c in conns)


def test_unknown_command_is_59(standalone_server: EmbeddedServer, make_client: Any) -> None:
    """An unknown command fails with CommandNotFound."""
    client = make_client(standalone_server.uri)
    with pytest.raises(OperationFailure) as info:
        client.admin.command("noSuchCommandAnywhere")
    assert info.value.code == 59


def test_handler_exception_becomes_internal_error(
    standalone_server: EmbeddedServer, make_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exception inside the engine is answered with code 1, and the server keeps serving."""
    deployment = standalone_server.deployment
    assert deployment is not None

    def explode(db: str, body: dict[str, Any], ctx: Any) -> dict[str, Any]:
        raise RuntimeError("boom")

    monkeypatch.setattr(deployment.engine, "execute", explode)
    client = make_client(standalone_server.uri)
    with pytest.raises(OperationFailure) as info:
        client.test.command("count", "c")
    assert info.value.code == 1
    assert "boom" in str(info.value)
    monkeypatch.undo()
    assert client.test.command("count", "c")["n"] == 0


def test_admin_only_commands(standalone_server: EmbeddedServer, make_client: Any) -> None:
    """configureFailPoint outside admin is refused like mongod (Unauthorized)."""
    client = make_client(standalone_server.uri)
    with pytest.raises(OperationFailure) as info:
        client.test.command("configureFailPoint", "failCommand", mode="off")
    assert info.value.code == 13


def test_handshake_is_recorded(standalone_server: EmbeddedServer, make_client: Any) -> None:
    """backpressureStats shows each connection's handshake, appName and backpressure flag."""
    client = make_client(standalone_server.uri, appname="recorded")
    client.admin.command("ping")
    conns = [c for c in standalone_server.stats()["connections"] if c["appName"] == "recorded"]
    assert conns
    expected = {(4, 17): True, (4, 18): "2"}
    flag = None
    for version, value in expected.items():
        if pymongo.version_tuple[:2] >= version:
            flag = value
    for conn in conns:
        assert conn["handshake"]["client"]["application"]["name"] == "recorded"
        assert conn["handshake"].get("backpressure") == flag
        assert conn["open"] is True


def test_op_msg_bson_sizes_in_hello(standalone_server: EmbeddedServer, raw_connect: Any) -> None:
    """hello advertises mongod's size limits, sessions and a connection id."""
    reply = raw_connect(standalone_server.primary_address).command({"hello": 1})
    assert reply["maxBsonObjectSize"] == 16 * 1024 * 1024
    assert reply["maxMessageSizeBytes"] == 48_000_000
    assert reply["maxWriteBatchSize"] == 100_000
    assert reply["logicalSessionTimeoutMinutes"] == 30
    assert reply["isWritablePrimary"] is True
    assert isinstance(reply["connectionId"], int)
    assert bson.encode(reply)
