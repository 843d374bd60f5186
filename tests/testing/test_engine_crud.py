"""Engine tests for insert, update, delete, findAndModify, count and distinct (no sockets)."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from backpressure.testing.server.engine.dispatch import Engine
from backpressure.testing.server.engine.request import CommandContext
from backpressure.testing.server.errors import CODE_NAMES, CommandError

Run = Callable[..., dict[str, Any]]


@pytest.fixture
def run() -> Run:
    """Return a function running one command on a fresh engine."""
    engine = Engine()
    ctx = CommandContext(connection_id=1, app_name=None, role="primary", max_wire_version=25)

    def _run(body: dict[str, Any], db: str = "db") -> dict[str, Any]:
        return engine.execute(db, {**body, "$db": db}, ctx)

    return _run


def docs(run: Run, coll: str = "c", **find: Any) -> list[dict[str, Any]]:
    """Return every document of a collection, sorted by _id."""
    reply = run({"find": coll, "filter": {}, "sort": {"_id": 1}, **find})
    batch: list[dict[str, Any]] = reply["cursor"]["firstBatch"]
    return batch


def test_insert_reports_count_and_ignores_generic_fields(run: Run) -> None:
    """insert returns n and tolerates lsid, writeConcern, comment and friends."""
    reply = run(
        {
            "insert": "c",
            "documents": [{"_id": 1}, {"_id": 2}],
            "writeConcern": {"w": 1},
            "comment": "x",
            "$readPreference": {"mode": "primary"},
            "apiVersion": "1",
        }
    )
    assert reply == {"n": 2, "ok": 1.0}
    assert [d["_id"] for d in docs(run)] == [1, 2]


def test_ordered_insert_stops_at_duplicate(run: Run) -> None:
    """An ordered insert stops at the first duplicate and reports its index."""
    run({"insert": "c", "documents": [{"_id": 1}]})
    reply = run({"insert": "c", "documents": [{"_id": 2}, {"_id": 1}, {"_id": 3}]})
    assert reply["n"] == 1
    assert [(e["index"], e["code"]) for e in reply["writeErrors"]] == [(1, 11000)]
    assert [d["_id"] for d in docs(run)] == [1, 2]


def test_unordered_insert_continues_after_duplicate(run: Run) -> None:
    """An unordered insert applies every valid document."""
    run({"insert": "c", "documents": [{"_id": 1}]})
    reply = run(
        {"insert": "c", "documents": [{"_id": 1}, {"_id": 2}, {"_id": 1}], "ordered": False}
    )
    assert reply["n"] == 1
    assert [e["index"] for e in reply["writeErrors"]] == [0, 2]
    assert "E11000" in reply["writeErrors"][0]["errmsg"]


def test_update_operators_upsert_and_multi(run: Run) -> None:
    """update reports n, nModified and upserted entries with statement indexes."""
    run({"insert": "c", "documents": [{"_id": i, "x": i % 2} for i in range(4)]})
    reply = run(
        {
            "update": "c",
            "updates": [
                {"q": {"x": 1}, "u": {"$inc": {"y": 1}}, "multi": True},
                {"q": {"_id": 10}, "u": {"$set": {"z": 1}}, "upsert": True},
                {"q": {"_id": 0}, "u": {"x": 5}},
                {"q": {"_id": 99}, "u": {"$set": {"z": 1}}},
            ],
        }
    )
    assert reply["n"] == 4
    assert reply["nModified"] == 3
    assert reply["upserted"] == [{"index": 1, "_id": 10}]
    by_id = {d["_id"]: d for d in docs(run)}
    assert by_id[0] == {"_id": 0, "x": 5}
    assert by_id[1]["y"] == 1
    assert by_id[3]["y"] == 1
    assert by_id[10] == {"_id": 10, "z": 1}


def test_update_pipeline(run: Run) -> None:
    """A pipeline update computes fields from the document."""
    run({"insert": "c", "documents": [{"_id": 1, "a": 2}]})
    run({"update": "c", "updates": [{"q": {"_id": 1}, "u": [{"$set": {"b": "$a"}}]}]})
    assert docs(run) == [{"_id": 1, "a": 2, "b": 2}]


def test_update_array_filters(run: Run) -> None:
    """arrayFilters rewrite $[ident] paths per document; $[] updates every element."""
    run(
        {"insert": "c", "documents": [{"_id": 1, "g": [{"v": 1}, {"v": 5}, {"v": 7}], "n": [1, 2]}]}
    )
    reply = run(
        {
            "update": "c",
            "updates": [
                {
                    "q": {"_id": 1},
                    "u": {"$set": {"g.$[big].hit": True}, "$inc": {"n.$[]": 10}},
                    "arrayFilters": [{"big.v": {"$gt": 4}}],
                }
            ],
        }
    )
    assert reply["nModified"] == 1
    assert docs(run)[0]["g"] == [{"v": 1}, {"v": 5, "hit": True}, {"v": 7, "hit": True}]
    assert docs(run)[0]["n"] == [11, 12]


def test_update_errors_become_write_errors(run: Run) -> None:
    """A bad update statement is a write error with a mongod code, not an exception."""
    run({"insert": "c", "documents": [{"_id": 1}]})
    reply = run({"update": "c", "updates": [{"q": {"_id": 1}, "u": {"$set": {"a": 1}, "b": 2}}]})
    assert reply["writeErrors"][0]["code"] == 9
    reply = run({"update": "c", "updates": [{"q": {"_id": 1}, "u": {"$set": {"_id": 2}}}]})
    assert reply["writeErrors"][0]["index"] == 0


def test_delete_limit_one_and_all(run: Run) -> None:
    """delete honours limit 1 and limit 0."""
    run({"insert": "c", "documents": [{"_id": i, "k": 1} for i in range(3)]})
    assert run({"delete": "c", "deletes": [{"q": {"k": 1}, "limit": 1}]})["n"] == 1
    assert run({"delete": "c", "deletes": [{"q": {"k": 1}, "limit": 0}]})["n"] == 2
    assert docs(run) == []


def test_find_and_modify_update_new_and_fields(run: Run) -> None:
    """findAndModify returns the new document, projected, with lastErrorObject."""
    run({"insert": "c", "documents": [{"_id": 1, "a": 1, "b": 1}, {"_id": 2, "a": 1, "b": 2}]})
    reply = run(
        {
            "findAndModify": "c",
            "query": {"a": 1},
            "sort": {"b": -1},
            "update": {"$set": {"c": 1}},
            "new": True,
            "fields": {"c": 1},
        }
    )
    assert reply["value"] == {"_id": 2, "c": 1}
    assert reply["lastErrorObject"] == {"n": 1, "updatedExisting": True}


def test_find_and_modify_upsert_remove_and_miss(run: Run) -> None:
    """findAndModify upserts, removes, and returns null when nothing matches."""
    reply = run(
        {"findAndModify": "c", "query": {"_id": 5}, "update": {"$set": {"a": 1}}, "upsert": True}
    )
    assert reply["value"] is None
    assert reply["lastErrorObject"] == {"n": 1, "updatedExisting": False, "upserted": 5}
    reply = run({"findAndModify": "c", "query": {"_id": 5}, "remove": True})
    assert reply["value"] == {"_id": 5, "a": 1}
    assert reply["lastErrorObject"] == {"n": 1}
    reply = run({"findAndModify": "c", "query": {"_id": 5}, "update": {"b": 1}})
    assert reply["value"] is None
    assert reply["lastErrorObject"] == {"n": 0, "updatedExisting": False}


def test_find_and_modify_replacement_returns_old(run: Run) -> None:
    """A replacement findAndModify without new returns the old document."""
    run({"insert": "c", "documents": [{"_id": 1, "a": 1}]})
    reply = run({"findAndModify": "c", "query": {"_id": 1}, "update": {"z": 9}})
    assert reply["value"] == {"_id": 1, "a": 1}
    assert docs(run) == [{"_id": 1, "z": 9}]


def test_find_and_modify_requires_update_or_remove(run: Run) -> None:
    """findAndModify without update or remove fails with FailedToParse."""
    with pytest.raises(CommandError) as info:
        run({"findAndModify": "c", "query": {}})
    assert info.value.code == 9


def test_count_and_distinct(run: Run) -> None:
    """count honours query/skip/limit; distinct honours query; missing collections give zero."""
    run({"insert": "c", "documents": [{"_id": i, "k": i % 3} for i in range(10)]})
    assert run({"count": "c"})["n"] == 10
    assert run({"count": "c", "query": {"k": 0}})["n"] == 4
    assert run({"count": "c", "skip": 8})["n"] == 2
    assert run({"count": "c", "limit": 3})["n"] == 3
    assert run({"count": "missing"})["n"] == 0
    assert sorted(run({"distinct": "c", "key": "k"})["values"]) == [0, 1, 2]
    assert run({"distinct": "c", "key": "k", "query": {"_id": {"$lt": 2}}})["values"] == [0, 1]
    assert run({"distinct": "missing", "key": "k"})["values"] == []


def test_bad_arguments_are_command_errors(run: Run) -> None:
    """Bad argument types raise CommandError with TypeMismatch, never a Python exception."""
    for body in (
        {"find": "c", "filter": 5},
        {"insert": "c", "documents": "nope"},
        {"count": "c", "query": []},
        {"distinct": "c", "key": 1},
        {"find": 3},
    ):
        with pytest.raises(CommandError) as info:
            run(body)
        assert info.value.code in (2, 14, 73), body


def test_unknown_operator_is_a_command_error(run: Run) -> None:
    """An unknown query operator fails cleanly with a CommandError."""
    run({"insert": "c", "documents": [{"_id": 1}]})
    with pytest.raises(CommandError):
        run({"find": "c", "filter": {"a": {"$nope": 1}}})


def test_error_reply_shape() -> None:
    """CommandError renders mongod's reply shape, names from CODE_NAMES, labels and extras."""
    exc = CommandError(251, "gone", labels=["TransientTransactionError"], extra={"x": 1})
    assert exc.to_reply() == {
        "ok": 0.0,
        "errmsg": "gone",
        "code": 251,
        "codeName": "NoSuchTransaction",
        "errorLabels": ["TransientTransactionError"],
        "x": 1,
    }
    assert CommandError(59, "no").to_reply() == {
        "ok": 0.0,
        "errmsg": "no",
        "code": 59,
        "codeName": "CommandNotFound",
    }
    assert CODE_NAMES[462] == "IngressRequestRateLimitExceeded"
    assert CODE_NAMES[10107] == "NotWritablePrimary"


def test_unknown_command(run: Run) -> None:
    """An unknown command fails with 59 CommandNotFound."""
    with pytest.raises(CommandError) as info:
        run({"frobnicate": 1})
    assert (info.value.code, info.value.code_name) == (59, "CommandNotFound")
    assert info.value.errmsg == "no such command: 'frobnicate'"


def test_id_lookup_matches_numeric_types_and_respects_misses(run: Run) -> None:
    """The _id fast path matches 1 and 1.0 like mongod and keeps types apart from strings."""
    run({"insert": "c", "documents": [{"_id": 1, "a": 1}, {"_id": "1", "a": 2}]})
    assert docs(run, filter={"_id": 1.0}) == [{"_id": 1, "a": 1}]
    assert run({"find": "c", "filter": {"_id": 2}})["cursor"]["firstBatch"] == []
    assert run({"find": "c", "filter": {"_id": "1"}})["cursor"]["firstBatch"] == [
        {"_id": "1", "a": 2}
    ]
    reply = run({"update": "c", "updates": [{"q": {"_id": 1}, "u": {"$set": {"b": 1}}}]})
    assert (reply["n"], reply["nModified"]) == (1, 1)


def test_duplicate_key_error_names_index_and_key(run: Run) -> None:
    """Duplicate key write errors carry the index name, keyPattern and keyValue like mongod."""
    run({"insert": "c", "documents": [{"_id": 1, "a": {"b": 2}}, {"_id": {"x": 1}, "a": {"b": 3}}]})
    run({"createIndexes": "c", "indexes": [{"key": {"a.b": 1}, "name": "ab", "unique": True}]})
    (error,) = run({"insert": "c", "documents": [{"_id": 1}]})["writeErrors"]
    assert error["errmsg"].endswith("index: _id_ dup key: { _id: 1 }")
    assert (error["keyPattern"], error["keyValue"]) == ({"_id": 1}, {"_id": 1})
    (error,) = run({"insert": "c", "documents": [{"_id": 5, "a": {"b": 2}}]})["writeErrors"]
    assert (error["keyPattern"], error["keyValue"]) == ({"a.b": 1}, {"a.b": 2})
    (error,) = run({"insert": "c", "documents": [{"_id": {"x": 1}, "a": {"b": 9}}]})["writeErrors"]
    assert error["keyPattern"] == {"_id": 1}


def test_where_is_emulated_and_its_sleep_reported() -> None:
    """$where code is not run: it matches all (or nothing for return false); sleeps are reported."""
    engine = Engine()
    ctx = CommandContext(connection_id=1, app_name=None, role="primary", max_wire_version=25)
    engine.execute("test", {"insert": "t", "documents": [{"_id": 1}]}, ctx)
    sleepy = {"find": "t", "filter": {"$where": "function() { sleep(2000); return true; }"}}
    assert engine.execute("test", sleepy, ctx)["cursor"]["firstBatch"] == [{"_id": 1}]
    assert engine.delay_seconds("test", sleepy) == 2.0
    never = {"count": "t", "query": {"$where": "function() { sleep(10); return false; }"}}
    assert engine.execute("test", never, ctx)["n"] == 0
    assert engine.delay_seconds("test", never) == 0.01
    assert engine.delay_seconds("test", {"find": "t", "filter": {}}) == 0.0
    assert engine.delay_seconds("test", {"find": "missing", "filter": sleepy["filter"]}) == 0.0


def test_code_names_follow_mongod() -> None:
    """Known codes use mongod's names; assertion codes are named Location<code>."""
    assert CommandError(11601, "x").code_name == "Interrupted"
    assert CommandError(237, "x").code_name == "CursorKilled"
    assert CommandError(51024, "x").code_name == "Location51024"
    assert CommandError(2, "x", "Custom").code_name == "Custom"


def test_let_variables_replace_with_and_null_type(run: Run) -> None:
    """let variables, $replaceWith and $type null are rewritten into what mongomock runs."""
    run({"insert": "c", "documents": [{"_id": 1, "t": {"u": 1}}, {"_id": None}, {"_id": 3}]})
    found = run({"find": "c", "filter": {"$expr": {"$eq": ["$_id", "$$x"]}}, "let": {"x": 3}})
    assert found["cursor"]["firstBatch"] == [{"_id": 3}]
    assert run({"count": "c", "query": {"_id": {"$type": "null"}}})["n"] == 1
    pipeline = [{"$match": {"_id": {"$type": 10}}}, {"$count": "n"}]
    assert run({"aggregate": "c", "pipeline": pipeline, "cursor": {}})["cursor"]["firstBatch"] == [
        {"n": 1}
    ]
    update = {"q": {"_id": 1}, "u": [{"$replaceWith": "$t"}, {"$set": {"v": "$$v"}}]}
    run({"update": "c", "updates": [update], "let": {"v": "$not-a-path"}})
    assert docs(run, filter={"_id": 1}) == [{"_id": 1, "u": 1, "v": "$not-a-path"}]
    reply = run(
        {
            "delete": "c",
            "deletes": [{"q": {"$expr": {"$eq": ["$_id", "$$x"]}}, "limit": 0}],
            "let": {"x": 3},
        }
    )
    assert reply["n"] == 1


def test_upsert_with_operator_id_filter_and_distinct_order(run: Run) -> None:
    """An upsert filtering _id with an operator generates an _id; distinct values come sorted."""
    reply = run(
        {"update": "c", "updates": [{"q": {"_id": {"$gt": 5}}, "u": {"x": 1}, "upsert": True}]}
    )
    assert len(reply["upserted"]) == 1
    run(
        {
            "insert": "c",
            "documents": [{"_id": 1, "x": 33}, {"_id": 2, "x": 11}, {"_id": 3, "x": "a"}],
        }
    )
    assert run({"distinct": "c", "key": "x"})["values"] == [1, 11, 33, "a"]


def test_null_id_upserts_and_replacement_by_operator_filter(run: Run) -> None:
    """Upserts keep a null _id; a replacement selected by an _id range keeps the document's _id."""
    reply = run(
        {"update": "c", "updates": [{"q": {"_id": None}, "u": {"$set": {"a": 1}}, "upsert": True}]}
    )
    assert reply["upserted"] == [{"index": 0, "_id": None}]
    assert run({"count": "c", "query": {"_id": {"$type": "null"}}})["n"] == 1
    reply = run({"update": "c", "updates": [{"q": {"_id": None}, "u": {"b": 2}, "upsert": True}]})
    assert (reply["n"], reply["nModified"]) == (1, 1)
    assert docs(run, filter={"_id": None}) == [{"_id": None, "b": 2}]
    run({"insert": "c", "documents": [{"_id": 1}, {"_id": 2}]})
    reply = run({"update": "c", "updates": [{"q": {"_id": {"$gt": 1}}, "u": {"x": 111}}]})
    assert reply["nModified"] == 1
    assert docs(run, filter={"_id": 2}) == [{"_id": 2, "x": 111}]
    reply = run({"findAndModify": "c", "query": {"_id": None}, "remove": True, "fields": {"b": 1}})
    assert reply["value"] == {"_id": None, "b": 2}


def test_let_literal_values_and_linearizable_out(run: Run) -> None:
    """let values wrapped in $literal are unwrapped when safe; $out refuses linearizable reads."""
    run({"insert": "c", "documents": [{"_id": 1}]})
    update = {"q": {"_id": 1}, "u": [{"$set": {"y": "$$y"}}]}
    run({"update": "c", "updates": [update], "let": {"y": {"$literal": "bar"}}})
    assert docs(run) == [{"_id": 1, "y": "bar"}]
    body = {
        "aggregate": "c",
        "pipeline": [{"$out": "o"}],
        "cursor": {},
        "readConcern": {"level": "linearizable"},
    }
    with pytest.raises(CommandError) as info:
        run(body)
    assert info.value.code == 72


def test_replacement_upsert_with_null_id_in_the_replacement(run: Run) -> None:
    """A replacement upsert whose replacement has _id null inserts that null _id."""
    reply = run({"update": "c", "updates": [{"q": {}, "u": {"_id": None, "r": 1}, "upsert": True}]})
    assert reply["upserted"] == [{"index": 0, "_id": None}]
    assert docs(run) == [{"_id": None, "r": 1}]
    run({"insert": "c", "documents": [{"_id": 5}]})
    reply = run({"update": "c", "updates": [{"q": {"_id": 5}, "u": {"_id": None}}]})
    assert reply["writeErrors"][0]["code"] == 66


def test_top_level_dollar_fields_are_accepted_but_not_in_id(run: Run) -> None:
    """Like mongod 5.0+, top-level $-prefixed fields insert fine; $-prefixed _id fields fail."""
    assert run({"insert": "c", "documents": [{"_id": 1, "$a": 1, "b": 2}]})["n"] == 1
    assert docs(run) == [{"_id": 1, "$a": 1, "b": 2}]
    (error,) = run({"insert": "c", "documents": [{"_id": {"$x": 1}}]})["writeErrors"]
    assert error["code"] == 2


def test_failing_update_leaves_the_document_unchanged(run: Run) -> None:
    """An update whose second operator fails applies nothing (mongod's atomic single update)."""
    run({"insert": "c", "documents": [{"_id": 1, "a": 1, "s": "text"}]})
    reply = run(
        {"update": "c", "updates": [{"q": {"_id": 1}, "u": {"$set": {"a": 2}, "$inc": {"s": 1}}}]}
    )
    assert len(reply["writeErrors"]) == 1
    assert docs(run) == [{"_id": 1, "a": 1, "s": "text"}]


def test_expr_on_documents_missing_the_field(run: Run) -> None:
    """$expr over a field some documents lack matches the others instead of failing."""
    run({"insert": "c", "documents": [{"_id": 1, "name": "n"}, {"_id": 2}]})
    body = {"filter": {"$expr": {"$eq": ["$name", "$$name"]}}, "let": {"name": "n"}}
    assert run({"find": "c", **body})["cursor"]["firstBatch"] == [{"_id": 1, "name": "n"}]
    reply = run(
        {"delete": "c", "deletes": [{"q": body["filter"], "limit": 0}], "let": {"name": "n"}}
    )
    assert reply["n"] == 1


def test_case_insensitive_collation(run: Run) -> None:
    """strength 1/2 collations compare strings ignoring case; simple ones do not."""
    run(
        {
            "insert": "c",
            "documents": [{"_id": 1, "x": "PING"}, {"_id": 2, "x": "ping"}, {"_id": 3, "x": 1}],
        }
    )
    ci = {"locale": "en_US", "strength": 2}
    assert (
        len(run({"find": "c", "filter": {"x": "Ping"}, "collation": ci})["cursor"]["firstBatch"])
        == 2
    )
    assert (
        run({"find": "c", "filter": {"x": "Ping"}, "collation": {"locale": "simple"}})["cursor"][
            "firstBatch"
        ]
        == []
    )
    assert run({"count": "c", "query": {"x": {"$eq": "PinG"}}, "collation": ci})["n"] == 2
    assert run({"distinct": "c", "key": "x", "collation": ci})["values"] == [1, "PING"]
    reply = run({"delete": "c", "deletes": [{"q": {"x": "pInG"}, "limit": 0, "collation": ci}]})
    assert reply["n"] == 2
