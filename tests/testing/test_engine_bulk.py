"""Engine tests for the client-level bulkWrite command (no sockets)."""

from __future__ import annotations

from typing import Any

import pytest

from backpressure.testing.server.engine.dispatch import Engine
from backpressure.testing.server.engine.request import CommandContext
from backpressure.testing.server.errors import CommandError

CTX = CommandContext(connection_id=1, app_name=None, role="primary", max_wire_version=25)


def bulk(engine: Engine, ops: list[dict[str, Any]], **options: Any) -> dict[str, Any]:
    """Run a client bulkWrite over namespaces db.a (0) and db.b (1)."""
    body = {
        "bulkWrite": 1,
        "ops": ops,
        "nsInfo": [{"ns": "db.a"}, {"ns": "db.b"}],
        "$db": "admin",
        **options,
    }
    return engine.execute("admin", body, CTX)


def test_mixed_operations_verbose() -> None:
    """Inserts, updates, upserts, replaces and deletes across namespaces, with per-op results."""
    engine = Engine()
    reply = bulk(
        engine,
        [
            {"insert": 0, "document": {"_id": 1, "x": 1}},
            {"insert": 1, "document": {"_id": 2, "x": 1}},
            {"update": 0, "filter": {"_id": 1}, "updateMods": {"$set": {"x": 2}}},
            {"update": 1, "filter": {"_id": 9}, "updateMods": {"$set": {"x": 9}}, "upsert": True},
            {"update": 0, "filter": {"_id": 1}, "updateMods": {"y": 1}, "multi": False},
            {"delete": 1, "filter": {"_id": 2}, "multi": False},
        ],
        errorsOnly=False,
        ordered=True,
    )
    assert reply["ok"] == 1.0
    assert {
        k: reply[k]
        for k in ("nErrors", "nInserted", "nMatched", "nModified", "nUpserted", "nDeleted")
    } == {
        "nErrors": 0,
        "nInserted": 2,
        "nMatched": 2,
        "nModified": 2,
        "nUpserted": 1,
        "nDeleted": 1,
    }
    results = reply["cursor"]["firstBatch"]
    assert [r["idx"] for r in results] == list(range(6))
    assert results[3]["upserted"] == {"_id": 9}
    assert reply["cursor"]["ns"] == "admin.$cmd.bulkWrite"
    assert reply["cursor"]["id"] == 0
    found = engine.execute("db", {"find": "a", "filter": {}}, CTX)["cursor"]["firstBatch"]
    assert found == [{"_id": 1, "y": 1}]


@pytest.mark.parametrize(("ordered", "inserted"), [(False, 2), (True, 1)])
def test_errors_only_and_ordered_stops_at_first_error(ordered: bool, inserted: int) -> None:
    """errorsOnly lists failures only; an ordered bulk stops at the first failure, an unordered
    one continues after it."""
    engine = Engine()
    reply = bulk(
        engine,
        [
            {"insert": 0, "document": {"_id": 1}},
            {"insert": 0, "document": {"_id": 1}},
            {"insert": 0, "document": {"_id": 2}},
        ],
        errorsOnly=True,
        ordered=ordered,
    )
    assert reply["nErrors"] == 1
    assert reply["nInserted"] == inserted
    (error,) = reply["cursor"]["firstBatch"]
    assert (error["ok"], error["idx"], error["code"]) == (0.0, 1, 11000)


def test_bulk_cursor_batches() -> None:
    """Per-operation results page through getMore on admin.$cmd.bulkWrite."""
    engine = Engine()
    ops = [{"insert": 0, "document": {"_id": i}} for i in range(5)]
    reply = bulk(engine, ops, cursor={"batchSize": 2})
    assert len(reply["cursor"]["firstBatch"]) == 2
    more = engine.execute(
        "admin", {"getMore": reply["cursor"]["id"], "collection": "$cmd.bulkWrite"}, CTX
    )
    assert [r["idx"] for r in more["cursor"]["nextBatch"]] == [2, 3, 4]


def test_bulk_validation() -> None:
    """Bad bulkWrite arguments fail with mongod-like codes."""
    engine = Engine()
    with pytest.raises(CommandError):
        bulk(engine, [{"insert": 0, "document": {}}], nsInfo=[])
    reply = bulk(engine, [{"insert": 5, "document": {}}])
    assert reply["nErrors"] == 1
    assert reply["cursor"]["firstBatch"][0]["code"] == 2
    with pytest.raises(CommandError) as info:
        engine.execute("db", {"bulkWrite": 1, "ops": [], "nsInfo": [{"ns": "db.a"}]}, CTX)
    assert info.value.code == 13


def test_bulk_write_is_a_retryable_write() -> None:
    """A retried bulkWrite with the same lsid/txnNumber is not applied twice."""
    engine = Engine()
    session = {"id": b"0123456789abcdef"}
    ops = [{"update": 0, "filter": {"_id": 1}, "updateMods": {"$inc": {"n": 1}}, "upsert": True}]
    bulk(engine, ops, lsid=session, txnNumber=1)
    bulk(engine, ops, lsid=session, txnNumber=1)
    found = engine.execute("db", {"find": "a", "filter": {}}, CTX)["cursor"]["firstBatch"]
    assert found == [{"_id": 1, "n": 1}]
