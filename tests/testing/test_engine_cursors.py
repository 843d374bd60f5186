"""Engine tests for find, getMore, killCursors and aggregate (no sockets)."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from backpressure.testing.server.engine.dispatch import Engine
from backpressure.testing.server.engine.request import CommandContext
from backpressure.testing.server.errors import CommandError

Run = Callable[..., dict[str, Any]]


@pytest.fixture
def run() -> Run:
    """Return a function running one command on an engine holding db.c with _id 0..9."""
    engine = Engine()
    ctx = CommandContext(connection_id=7, app_name="app", role="primary", max_wire_version=25)

    def _run(body: dict[str, Any], db: str = "db") -> dict[str, Any]:
        return engine.execute(db, {**body, "$db": db}, ctx)

    _run({"insert": "c", "documents": [{"_id": i, "k": i % 3} for i in range(10)]})
    return _run


def test_find_batches_and_get_more(run: Run) -> None:
    """find honours batchSize; getMore continues, and the last batch closes the cursor."""
    first = run({"find": "c", "filter": {}, "sort": {"_id": 1}, "batchSize": 4})["cursor"]
    assert [d["_id"] for d in first["firstBatch"]] == [0, 1, 2, 3]
    assert first["id"] != 0
    assert first["ns"] == "db.c"
    second = run({"getMore": first["id"], "collection": "c", "batchSize": 4})["cursor"]
    assert [d["_id"] for d in second["nextBatch"]] == [4, 5, 6, 7]
    assert second["id"] == first["id"]
    third = run({"getMore": first["id"], "collection": "c"})["cursor"]
    assert [d["_id"] for d in third["nextBatch"]] == [8, 9]
    assert third["id"] == 0
    with pytest.raises(CommandError) as info:
        run({"getMore": first["id"], "collection": "c"})
    assert (info.value.code, info.value.code_name) == (43, "CursorNotFound")


def test_find_filter_projection_skip_limit(run: Run) -> None:
    """find applies filter, projection, sort, skip and limit; limit closes the cursor."""
    reply = run(
        {
            "find": "c",
            "filter": {"k": 0},
            "projection": {"_id": 1},
            "sort": {"_id": -1},
            "skip": 1,
            "limit": 2,
            "hint": {"_id": 1},
            "allowDiskUse": True,
        }
    )
    assert reply["cursor"]["firstBatch"] == [{"_id": 6}, {"_id": 3}]
    assert reply["cursor"]["id"] == 0


def test_find_single_batch_and_negative_limit(run: Run) -> None:
    """singleBatch and a negative limit return one batch and no cursor."""
    reply = run({"find": "c", "filter": {}, "batchSize": 3, "singleBatch": True})
    assert len(reply["cursor"]["firstBatch"]) == 3
    assert reply["cursor"]["id"] == 0
    reply = run({"find": "c", "filter": {}, "limit": -2})
    assert len(reply["cursor"]["firstBatch"]) == 2
    assert reply["cursor"]["id"] == 0


def test_find_batch_size_zero_keeps_cursor_open(run: Run) -> None:
    """batchSize 0 returns an empty first batch with an open cursor."""
    cursor = run({"find": "c", "filter": {}, "batchSize": 0})["cursor"]
    assert cursor["firstBatch"] == []
    assert cursor["id"] != 0
    assert len(run({"getMore": cursor["id"], "collection": "c"})["cursor"]["nextBatch"]) == 10


def test_find_missing_collection_is_empty(run: Run) -> None:
    """find on a missing collection returns an empty, closed cursor."""
    assert run({"find": "nope", "filter": {}})["cursor"] == {
        "firstBatch": [],
        "id": 0,
        "ns": "db.nope",
    }


def test_get_more_on_other_namespace_is_refused(run: Run) -> None:
    """getMore with another collection name fails with Unauthorized."""
    cursor_id = run({"find": "c", "filter": {}, "batchSize": 1})["cursor"]["id"]
    with pytest.raises(CommandError) as info:
        run({"getMore": cursor_id, "collection": "other"})
    assert info.value.code == 13


def test_kill_cursors(run: Run) -> None:
    """killCursors reports killed and unknown ids; killed cursors are gone."""
    cursor_id = run({"find": "c", "filter": {}, "batchSize": 1})["cursor"]["id"]
    reply = run({"killCursors": "c", "cursors": [cursor_id, 12345]})
    assert reply["cursorsKilled"] == [cursor_id]
    assert reply["cursorsNotFound"] == [12345]
    assert reply["cursorsAlive"] == []
    assert reply["cursorsUnknown"] == []
    with pytest.raises(CommandError):
        run({"getMore": cursor_id, "collection": "c"})


def test_aggregate_with_batch_size(run: Run) -> None:
    """aggregate runs mongomock stages and honours cursor.batchSize."""
    reply = run(
        {
            "aggregate": "c",
            "pipeline": [{"$group": {"_id": "$k", "n": {"$sum": 1}}}, {"$sort": {"_id": 1}}],
            "cursor": {"batchSize": 2},
        }
    )
    cursor = reply["cursor"]
    assert cursor["firstBatch"] == [{"_id": 0, "n": 4}, {"_id": 1, "n": 3}]
    rest = run({"getMore": cursor["id"], "collection": "c"})["cursor"]
    assert rest["nextBatch"] == [{"_id": 2, "n": 3}]
    assert rest["id"] == 0


def test_aggregate_requires_cursor_and_pipeline(run: Run) -> None:
    """aggregate without cursor or with a non-array pipeline fails with a mongod code."""
    with pytest.raises(CommandError) as info:
        run({"aggregate": "c", "pipeline": []})
    assert info.value.code == 9
    with pytest.raises(CommandError) as info:
        run({"aggregate": "c", "pipeline": {}, "cursor": {}})
    assert info.value.code == 14


def test_aggregate_out_writes_collection(run: Run) -> None:
    """$out replaces the target collection and returns an empty batch."""
    reply = run(
        {"aggregate": "c", "pipeline": [{"$match": {"k": 1}}, {"$out": "out"}], "cursor": {}}
    )
    assert reply["cursor"]["firstBatch"] == []
    assert reply["cursor"]["id"] == 0
    assert run({"count": "out"})["n"] == 3
    assert Engine.is_write("aggregate", {"pipeline": [{"$out": "x"}]})
    assert not Engine.is_write("aggregate", {"pipeline": [{"$match": {}}]})
    assert Engine.is_write("insert", {})
    assert not Engine.is_write("find", {})


def test_change_stream_cursor_has_resume_tokens(run: Run) -> None:
    """$changeStream opens a cursor with no events and a fresh postBatchResumeToken per batch."""
    first = run({"aggregate": "c", "pipeline": [{"$changeStream": {}}], "cursor": {}})["cursor"]
    assert first["firstBatch"] == []
    assert first["id"] != 0
    token = first["postBatchResumeToken"]
    more = run({"getMore": first["id"], "collection": "c", "maxTimeMS": 10})["cursor"]
    assert more["nextBatch"] == []
    assert more["id"] == first["id"]
    assert more["postBatchResumeToken"]["_data"] > token["_data"]
    client = run(
        {
            "aggregate": 1,
            "pipeline": [{"$changeStream": {"allChangesForCluster": True}}],
            "cursor": {},
        },
        "admin",
    )["cursor"]
    assert client["ns"] == "admin.$cmd.aggregate"
    assert "postBatchResumeToken" in client
    assert run({"killCursors": "$cmd.aggregate", "cursors": [client["id"]]}, "admin")[
        "cursorsKilled"
    ] == [client["id"]]


def test_database_aggregate_current_op_and_unsupported(run: Run) -> None:
    """$currentOp returns the running operation; other database stages fail with 238."""
    reply = run(
        {"aggregate": 1, "pipeline": [{"$currentOp": {}}, {"$limit": 1}], "cursor": {}}, "admin"
    )
    assert reply["cursor"]["firstBatch"][0]["connectionId"] == 7
    with pytest.raises(CommandError) as info:
        run({"aggregate": 1, "pipeline": [{"$bogus": {}}], "cursor": {}}, "admin")
    assert info.value.code == 238


def test_list_local_sessions_with_limit(run: Run) -> None:
    """$listLocalSessions lists sessions seen so far; later stages apply."""
    for n in range(3):
        run({"find": "c", "filter": {}, "lsid": {"id": n}})
    reply = run(
        {"aggregate": 1, "pipeline": [{"$listLocalSessions": {}}, {"$limit": 1}], "cursor": {}},
        "admin",
    )
    assert len(reply["cursor"]["firstBatch"]) == 1


def test_large_batches_are_capped_at_16_mib(run: Run) -> None:
    """Batches stop before 16 MiB of documents, the first batch included."""
    big = "x" * (3 * 1024 * 1024)
    run({"insert": "big", "documents": [{"_id": i, "s": big} for i in range(8)]})
    first = run({"find": "big", "filter": {}})["cursor"]
    assert len(first["firstBatch"]) == 5
    more = run({"getMore": first["id"], "collection": "big"})["cursor"]
    assert len(more["nextBatch"]) == 3
    assert more["id"] == 0


def test_find_sort_and_projection_hold_across_batches(run: Run) -> None:
    """Sort order and projection hold across lazily produced batches."""
    first = run(
        {"find": "c", "filter": {}, "sort": {"_id": -1}, "projection": {"k": 0}, "batchSize": 2}
    )
    assert first["cursor"]["firstBatch"] == [{"_id": 9}, {"_id": 8}]
    more = run({"getMore": first["cursor"]["id"], "collection": "c", "batchSize": 3})["cursor"]
    assert more["nextBatch"] == [{"_id": 7}, {"_id": 6}, {"_id": 5}]


def test_aggregate_out_to_another_database_keeps_target_indexes(run: Run) -> None:
    """$out {db, coll} replaces the target's documents and keeps its indexes."""
    run({"insert": "t", "documents": [{"_id": "old"}]}, "other")
    run({"createIndexes": "t", "indexes": [{"key": {"k": 1}, "name": "k_1"}]}, "other")
    run(
        {
            "aggregate": "c",
            "pipeline": [{"$match": {"k": 2}}, {"$out": {"db": "other", "coll": "t"}}],
            "cursor": {},
        }
    )
    found = run({"find": "t", "filter": {}, "sort": {"_id": 1}}, "other")["cursor"]["firstBatch"]
    assert [d["_id"] for d in found] == [2, 5, 8]
    assert len(run({"listIndexes": "t", "cursor": {}}, "other")["cursor"]["firstBatch"]) == 2


def test_aggregate_merge_modes(run: Run) -> None:
    """$merge merges, replaces, keeps or inserts according to whenMatched/whenNotMatched."""
    run({"insert": "m", "documents": [{"_id": 0, "keep": 1}, {"_id": 1, "keep": 1}]})
    stage = {"$merge": {"into": "m", "whenMatched": "merge", "whenNotMatched": "insert"}}
    reply = run(
        {"aggregate": "c", "pipeline": [{"$match": {"_id": {"$lt": 3}}}, stage], "cursor": {}}
    )
    assert reply["cursor"]["firstBatch"] == []
    found = run({"find": "m", "filter": {}, "sort": {"_id": 1}})["cursor"]["firstBatch"]
    assert found == [
        {"_id": 0, "keep": 1, "k": 0},
        {"_id": 1, "keep": 1, "k": 1},
        {"_id": 2, "k": 2},
    ]
    stage = {"$merge": {"into": "m", "whenMatched": "replace", "whenNotMatched": "discard"}}
    run({"aggregate": "c", "pipeline": [{"$match": {"_id": {"$in": [0, 9]}}}, stage], "cursor": {}})
    found = run({"find": "m", "filter": {}, "sort": {"_id": 1}})["cursor"]["firstBatch"]
    assert found[0] == {"_id": 0, "k": 0}
    assert len(found) == 3
    stage = {"$merge": {"into": "m", "whenMatched": "fail"}}
    with pytest.raises(CommandError) as info:
        run({"aggregate": "c", "pipeline": [stage], "cursor": {}})
    assert info.value.code == 11000
    stage = {"$merge": {"into": "m", "whenMatched": "keepExisting", "whenNotMatched": "fail"}}
    with pytest.raises(CommandError) as info:
        run({"aggregate": "c", "pipeline": [stage], "cursor": {}})
    assert info.value.code == 13113
    assert Engine.is_write("aggregate", {"pipeline": [stage]})


def test_change_stream_get_more_await_time() -> None:
    """await_seconds reports maxTimeMS (default 1 s) for change-stream getMores only."""
    engine = Engine()
    ctx = CommandContext(connection_id=1, app_name=None, role="primary", max_wire_version=25)
    stream = engine.execute(
        "db", {"aggregate": "c", "pipeline": [{"$changeStream": {}}], "cursor": {}}, ctx
    )["cursor"]["id"]
    engine.execute("db", {"insert": "c", "documents": [{}, {}]}, ctx)
    plain = engine.execute("db", {"find": "c", "batchSize": 1}, ctx)["cursor"]["id"]
    assert engine.await_seconds({"getMore": stream, "collection": "c", "maxTimeMS": 250}) == 0.25
    assert engine.await_seconds({"getMore": stream, "collection": "c"}) == 1.0
    assert engine.await_seconds({"getMore": plain, "collection": "c", "maxTimeMS": 250}) == 0.0
    assert engine.await_seconds({"find": "c"}) == 0.0


def test_database_aggregate_documents_out_and_merge(run: Run) -> None:
    """Database-level pipelines run later stages, keep _id-less documents, and can $out/$merge."""
    docs = [{"a": 2}, {"a": 1}]
    reply = run(
        {"aggregate": 1, "pipeline": [{"$documents": docs}, {"$sort": {"a": 1}}], "cursor": {}}
    )
    assert reply["cursor"]["firstBatch"] == [{"a": 1}, {"a": 2}]
    pipeline = [{"$documents": [{"_id": 7}]}, {"$out": "from_db"}]
    assert run({"aggregate": 1, "pipeline": pipeline, "cursor": {}})["cursor"]["firstBatch"] == []
    assert run({"find": "from_db", "filter": {}})["cursor"]["firstBatch"] == [{"_id": 7}]
    pipeline = [{"$documents": [{"_id": 7, "m": 1}]}, {"$merge": {"into": "from_db"}}]
    run({"aggregate": 1, "pipeline": pipeline, "cursor": {}})
    assert run({"find": "from_db", "filter": {}})["cursor"]["firstBatch"] == [{"_id": 7, "m": 1}]


def test_explain_reports_a_collection_scan(run: Run) -> None:
    """explain answers with a minimal queryPlanner document."""
    reply = run({"explain": {"find": "c", "filter": {"k": 1}}, "verbosity": "queryPlanner"})
    assert reply["queryPlanner"]["namespace"] == "db.c"
    assert reply["queryPlanner"]["winningPlan"] == {"stage": "COLLSCAN"}
    with pytest.raises(CommandError):
        run({"explain": 1})


def test_end_sessions_closes_only_that_sessions_cursors(run: Run) -> None:
    """endSessions kills the ended session's cursors and leaves other cursors open."""
    mine = run({"find": "c", "filter": {}, "batchSize": 1, "lsid": {"id": "a"}})["cursor"]["id"]
    other = run({"find": "c", "filter": {}, "batchSize": 1, "lsid": {"id": "b"}})["cursor"]["id"]
    anonymous = run({"find": "c", "filter": {}, "batchSize": 1})["cursor"]["id"]
    run({"endSessions": [{"id": "a"}]}, "admin")
    with pytest.raises(CommandError):
        run({"getMore": mine, "collection": "c"})
    assert run({"getMore": other, "collection": "c", "batchSize": 1})["cursor"]["id"] == other
    assert (
        run({"getMore": anonymous, "collection": "c", "batchSize": 1})["cursor"]["id"] == anonymous
    )


def test_open_cursors_are_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    """Beyond MAX_OPEN_CURSORS, opening a cursor forgets the oldest one."""
    from backpressure.testing.server.engine import cursors

    monkeypatch.setattr(cursors, "MAX_OPEN_CURSORS", 3)
    engine = Engine()
    ctx = CommandContext(connection_id=1, app_name=None, role="primary", max_wire_version=25)
    engine.execute("db", {"insert": "c", "documents": [{}, {}]}, ctx)
    ids = [
        engine.execute("db", {"find": "c", "batchSize": 1}, ctx)["cursor"]["id"] for _ in range(4)
    ]
    assert len(engine.cursors) == 3
    assert engine.cursors.get(ids[0]) is None
    assert engine.cursors.get(ids[3]) is not None
