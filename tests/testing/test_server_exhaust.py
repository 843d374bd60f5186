"""Exhaust cursors: a getMore sent with ``exhaustAllowed`` is answered by a stream of replies.

mongod (the wire protocol reference's OP_MSG section, flags ``exhaustAllowed`` and
``moreToCome``; the exhaust-cursor section of the find/getMore command spec): once a getMore with
``exhaustAllowed`` succeeds and leaves its cursor open, the server sends the following batches
unasked, each with ``moreToCome`` set and ``responseTo`` naming the previous reply, until the
cursor is exhausted.  pymongo's ``CursorType.EXHAUST`` reads them with ``moreToCome`` pending on
its pinned connection (PYTHON-6262 tests an overload on such a receive-only getMore).
"""

from __future__ import annotations

import struct
from typing import Any, Callable

import pymongo
from pymongo import CursorType

from backpressure.testing import EmbeddedServer
from backpressure.testing.server.wire.framing import (
    EXHAUST_ALLOWED,
    HEADER_SIZE,
    MORE_TO_COME,
    parse_header,
    parse_reply,
)
from tests.testing.conftest import RawConnection


def _receive_with_flags(conn: RawConnection) -> tuple[int, int, int, dict[str, Any]]:
    """Read one reply: (its request id, its responseTo, its OP_MSG flags, its document)."""
    header = parse_header(conn._recv(HEADER_SIZE))
    payload = conn._recv(header.length - HEADER_SIZE)
    (flags,) = struct.unpack_from("<I", payload)
    return header.request_id, header.response_to, flags, parse_reply(header, payload)


def test_exhaust_get_more_streams_every_batch_with_more_to_come(
    standalone_server: EmbeddedServer,
    raw_connect: Callable[[tuple[str, int]], RawConnection],
    make_client: Callable[..., Any],
) -> None:
    """7 documents, batches of 2: find returns 2, one exhaust getMore brings 3 replies."""
    make_client(standalone_server.uri).db.coll.insert_many([{"_id": i} for i in range(7)])
    conn = raw_connect(standalone_server.primary_address)
    assert conn.command({"hello": 1})["ok"] == 1.0
    found = conn.command({"find": "coll", "batchSize": 2}, db="db")
    cursor_id = found["cursor"]["id"]
    assert cursor_id != 0
    get_more = {"getMore": cursor_id, "collection": "coll", "batchSize": 2}
    asked = conn.send(get_more, db="db", flags=EXHAUST_ALLOWED)
    answered, replies = asked, []
    while True:
        request_id, response_to, flags, reply = _receive_with_flags(conn)
        assert response_to == answered  # each reply answers the one before it
        replies.append((flags & MORE_TO_COME, reply["cursor"]["nextBatch"], reply["cursor"]["id"]))
        answered = request_id
        if not flags & MORE_TO_COME:
            break
    assert replies == [
        (MORE_TO_COME, [{"_id": 2}, {"_id": 3}], cursor_id),
        (MORE_TO_COME, [{"_id": 4}, {"_id": 5}], cursor_id),
        (0, [{"_id": 6}], 0),
    ]
    assert conn.command({"ping": 1})["ok"] == 1.0  # the connection serves requests again


def test_a_plain_get_more_is_answered_once(
    standalone_server: EmbeddedServer,
    raw_connect: Callable[[tuple[str, int]], RawConnection],
    make_client: Callable[..., Any],
) -> None:
    """Without ``exhaustAllowed`` a getMore gets one reply, without ``moreToCome``."""
    make_client(standalone_server.uri).db.coll.insert_many([{"_id": i} for i in range(7)])
    conn = raw_connect(standalone_server.primary_address)
    conn.command({"hello": 1})
    cursor_id = conn.command({"find": "coll", "batchSize": 2}, db="db")["cursor"]["id"]
    conn.send({"getMore": cursor_id, "collection": "coll", "batchSize": 2}, db="db")
    _, _, flags, reply = _receive_with_flags(conn)
    assert flags & MORE_TO_COME == 0
    assert reply["cursor"]["nextBatch"] == [{"_id": 2}, {"_id": 3}]
    assert conn.command({"ping": 1})["ok"] == 1.0


def test_pymongo_exhaust_cursor_reads_the_stream(
    replicaset_server: EmbeddedServer, make_client: Callable[..., Any]
) -> None:
    """pymongo's exhaust cursor gets every document from one getMore request, and a cursor
    closed mid-stream leaves the server serving other connections."""
    client: pymongo.MongoClient[dict[str, Any]] = make_client(replicaset_server.uri)
    coll = client.db.coll
    coll.insert_many([{"_id": i} for i in range(25)])
    before = replicaset_server.stats()["commands"].get("getMore", {}).get("received", 0)
    assert [d["_id"] for d in coll.find(batch_size=3, cursor_type=CursorType.EXHAUST)] == list(
        range(25)
    )
    assert replicaset_server.stats()["commands"]["getMore"]["received"] - before == 1
    cursor = coll.find(batch_size=3, cursor_type=CursorType.EXHAUST)
    for _ in range(4):
        next(cursor)
    assert cursor._sock_mgr is not None
    assert cursor._sock_mgr.more_to_come
    cursor.close()
    assert coll.count_documents({}) == 25
