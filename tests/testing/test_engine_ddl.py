"""Engine tests for collection, index and database commands (no sockets)."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from backpressure.testing.server.engine.dispatch import Engine
from backpressure.testing.server.engine.request import CommandContext
from backpressure.testing.server.errors import CommandError

Run = Callable[..., dict[str, Any]]


@pytest.fixture
def run() -> Run:
    """Return a function running one command on a fresh engine."""
    engine = Engine()
    ctx = CommandContext(connection_id=1, app_name=None, role="standalone", max_wire_version=25)

    def _run(body: dict[str, Any], db: str = "db") -> dict[str, Any]:
        return engine.execute(db, {**body, "$db": db}, ctx)

    return _run


def names(run: Run, db: str = "db", **extra: Any) -> list[str]:
    """Return the collection names listed by listCollections."""
    batch = run({"listCollections": 1, **extra}, db)["cursor"]["firstBatch"]
    return [doc["name"] for doc in batch]


def test_create_and_drop(run: Run) -> None:
    """create makes a collection, a second create fails with 48; drop of a missing one is ok."""
    assert run({"create": "c"}) == {"ok": 1.0}
    with pytest.raises(CommandError) as info:
        run({"create": "c"})
    assert (info.value.code, info.value.code_name) == (48, "NamespaceExists")
    assert run({"drop": "c"})["ns"] == "db.c"
    assert run({"drop": "c"})["ok"] == 1.0
    assert names(run) == []


def test_list_collections_shapes_and_filter(run: Run) -> None:
    """listCollections returns type/options/info and honours filter and nameOnly."""
    run({"create": "b"})
    run({"insert": "a", "documents": [{}]})
    full = run({"listCollections": 1})["cursor"]["firstBatch"]
    assert [d["name"] for d in full] == ["a", "b"]
    assert full[0]["type"] == "collection"
    assert full[0]["options"] == {}
    assert "uuid" in full[0]["info"]
    assert names(run, filter={"name": "b"}) == ["b"]
    assert run({"listCollections": 1, "nameOnly": True})["cursor"]["firstBatch"][0] == {
        "name": "a",
        "type": "collection",
    }


def test_indexes_lifecycle(run: Run) -> None:
    """createIndexes counts, enforces unique, listIndexes lists, dropIndexes drops by name/key/*."""
    reply = run(
        {"createIndexes": "c", "indexes": [{"key": {"a": 1}, "name": "a_1", "unique": True}]}
    )
    assert reply["numIndexesBefore"] == 1
    assert reply["numIndexesAfter"] == 2
    assert reply["createdCollectionAutomatically"] is True
    again = run(
        {"createIndexes": "c", "indexes": [{"key": {"a": 1}, "name": "a_1", "unique": True}]}
    )
    assert again["numIndexesAfter"] == 2
    assert again["note"] == "all indexes already exist"
    run({"insert": "c", "documents": [{"_id": 1, "a": 1}]})
    dup = run({"insert": "c", "documents": [{"_id": 2, "a": 1}]})
    assert dup["writeErrors"][0]["code"] == 11000
    run(
        {
            "createIndexes": "c",
            "indexes": [{"key": {"b": -1}, "name": "b_-1"}, {"key": {"d": 1}, "name": "d"}],
        }
    )
    listed = run({"listIndexes": "c", "cursor": {}})["cursor"]["firstBatch"]
    assert [d["name"] for d in listed] == ["_id_", "a_1", "b_-1", "d"]
    assert listed[1]["unique"] is True
    assert listed[2]["key"] == {"b": -1}
    assert run({"dropIndexes": "c", "index": {"b": -1}})["nIndexesWas"] == 4
    run({"dropIndexes": "c", "index": ["d"]})
    with pytest.raises(CommandError) as info:
        run({"dropIndexes": "c", "index": "nope"})
    assert (info.value.code, info.value.code_name) == (27, "IndexNotFound")
    run({"dropIndexes": "c", "index": "*"})
    listed = run({"listIndexes": "c", "cursor": {}})["cursor"]["firstBatch"]
    assert [d["name"] for d in listed] == ["_id_"]


def test_index_conflicts_and_missing_namespace(run: Run) -> None:
    """Conflicting index names/keys fail; listIndexes/dropIndexes on missing collections give 26."""
    run({"createIndexes": "c", "indexes": [{"key": {"a": 1}, "name": "x"}]})
    with pytest.raises(CommandError) as info:
        run({"createIndexes": "c", "indexes": [{"key": {"b": 1}, "name": "x"}]})
    assert info.value.code == 86
    with pytest.raises(CommandError) as info:
        run({"createIndexes": "c", "indexes": [{"key": {"a": 1}, "name": "y"}]})
    assert info.value.code == 85
    for body in ({"listIndexes": "zz"}, {"dropIndexes": "zz", "index": "*"}):
        with pytest.raises(CommandError) as info:
            run(body)
        assert info.value.code == 26


def test_unique_index_on_duplicates_fails(run: Run) -> None:
    """Creating a unique index over duplicate values fails with DuplicateKey."""
    run({"insert": "c", "documents": [{"a": 1}, {"a": 1}]})
    with pytest.raises(CommandError) as info:
        run({"createIndexes": "c", "indexes": [{"key": {"a": 1}, "name": "a_1", "unique": True}]})
    assert info.value.code == 11000


def test_list_databases_and_drop_database(run: Run) -> None:
    """listDatabases reports sizes, honours nameOnly/filter; dropDatabase removes a database."""
    run({"insert": "c", "documents": [{"x": "y" * 100}]})
    run({"insert": "c", "documents": [{}]}, "other")
    reply = run({"listDatabases": 1}, "admin")
    assert [d["name"] for d in reply["databases"]] == ["db", "other"]
    assert reply["databases"][0]["sizeOnDisk"] > 100
    assert reply["totalSize"] > 100
    only = run({"listDatabases": 1, "nameOnly": True, "filter": {"name": "other"}}, "admin")
    assert only["databases"] == [{"name": "other"}]
    assert run({"dropDatabase": 1}, "other") == {"dropped": "other", "ok": 1.0}
    assert [d["name"] for d in run({"listDatabases": 1}, "admin")["databases"]] == ["db"]


def test_rename_collection(run: Run) -> None:
    """renameCollection moves data and indexes; an existing target needs dropTarget."""
    run({"insert": "a", "documents": [{"_id": 1}]})
    run({"createIndexes": "a", "indexes": [{"key": {"x": 1}, "name": "x_1"}]})
    run({"insert": "b", "documents": [{"_id": 2}]})
    with pytest.raises(CommandError) as info:
        run({"renameCollection": "db.a", "to": "db.b"}, "admin")
    assert info.value.code == 48
    with pytest.raises(CommandError) as info:
        run({"renameCollection": "db.a", "to": "db.b"}, "db")
    assert info.value.code == 13
    run({"renameCollection": "db.a", "to": "db.b", "dropTarget": True}, "admin")
    assert names(run) == ["b"]
    assert run({"find": "b", "filter": {}})["cursor"]["firstBatch"] == [{"_id": 1}]
    assert len(run({"listIndexes": "b", "cursor": {}})["cursor"]["firstBatch"]) == 2
    run({"renameCollection": "db.b", "to": "db2.z"}, "admin")
    assert names(run, "db2") == ["z"]
    with pytest.raises(CommandError) as info:
        run({"renameCollection": "db.missing", "to": "db.q"}, "admin")
    assert info.value.code == 26


def test_stats_commands(run: Run) -> None:
    """dbStats and collStats report counts; collStats on a missing collection fails with 26."""
    run({"insert": "c", "documents": [{"_id": i} for i in range(3)]})
    assert run({"dbStats": 1})["objects"] == 3
    stats = run({"collStats": "c"})
    assert stats["count"] == 3
    assert stats["nindexes"] == 1
    with pytest.raises(CommandError) as info:
        run({"collStats": "zz"})
    assert info.value.code == 26


def test_drop_closes_cursors(run: Run) -> None:
    """Dropping a collection kills its open cursors."""
    run({"insert": "c", "documents": [{"_id": i} for i in range(5)]})
    cursor_id = run({"find": "c", "filter": {}, "batchSize": 1})["cursor"]["id"]
    run({"drop": "c"})
    with pytest.raises(CommandError) as info:
        run({"getMore": cursor_id, "collection": "c"})
    assert info.value.code == 43


def test_coll_mod_updates_options_and_checks_index(run: Run) -> None:
    """collMod merges options, validates the named index, and fails for missing collections."""
    run({"create": "c", "validationLevel": "off"})
    run({"insert": "c", "documents": [{"_id": 1}]})
    run({"collMod": "c", "validationLevel": "moderate", "index": {"name": "_id_"}})
    (info,) = run({"listCollections": 1})["cursor"]["firstBatch"]
    assert info["options"] == {"validationLevel": "moderate"}
    assert run({"count": "c"})["n"] == 1
    with pytest.raises(CommandError) as exc:
        run({"collMod": "c", "index": {"name": "nope"}})
    assert exc.value.code == 27
    with pytest.raises(CommandError) as exc:
        run({"collMod": "zz"})
    assert exc.value.code == 26
