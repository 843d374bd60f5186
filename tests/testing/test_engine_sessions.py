"""Engine tests for retryable-write deduplication, transactions and session commands."""

from __future__ import annotations

import uuid
from typing import Any, Callable

import pytest
from bson import Binary
from bson.int64 import Int64

from backpressure.testing.server.engine.dispatch import Engine
from backpressure.testing.server.engine.request import CommandContext
from backpressure.testing.server.engine.sessions import MAX_RECORDS
from backpressure.testing.server.errors import CommandError

CTX = CommandContext(connection_id=1, app_name="t", role="primary", max_wire_version=25)


def lsid() -> dict[str, Any]:
    """Return a fresh session id document."""
    return {"id": Binary(uuid.uuid4().bytes, 4)}


def run_on(engine: Engine) -> Callable[..., dict[str, Any]]:
    """Return a helper running commands on ``engine`` in database ``db``."""

    def _run(body: dict[str, Any], db: str = "db") -> dict[str, Any]:
        return engine.execute(db, {**body, "$db": db}, CTX)

    return _run


def ids(engine: Engine, coll: str = "c") -> list[Any]:
    """Return the _ids visible outside any transaction."""
    reply = engine.execute("db", {"find": coll, "filter": {}, "sort": {"_id": 1}}, CTX)
    return [d["_id"] for d in reply["cursor"]["firstBatch"]]


def test_retryable_write_applied_once() -> None:
    """A retried insert (same lsid/txnNumber) returns the stored reply without re-applying."""
    engine = Engine()
    run = run_on(engine)
    session = lsid()
    body = {"insert": "c", "documents": [{"_id": 1}], "lsid": session, "txnNumber": Int64(1)}
    first = run(body)
    again = run({**body, "documents": [{"_id": 1}]})
    assert first == again == {"n": 1, "ok": 1.0}
    assert ids(engine) == [1]
    assert engine.txn_stats() == [{"lsid": session, "txnNumber": 1, "attempts": 2, "applied": True}]


def test_retryable_update_and_find_and_modify_replay() -> None:
    """update and findAndModify replays return the first reply, counters unchanged."""
    engine = Engine()
    run = run_on(engine)
    session = lsid()
    run({"insert": "c", "documents": [{"_id": 1, "n": 0}]})
    upd = {"update": "c", "updates": [{"q": {"_id": 1}, "u": {"$inc": {"n": 1}}}]}
    assert run({**upd, "lsid": session, "txnNumber": 1})["nModified"] == 1
    assert run({**upd, "lsid": session, "txnNumber": 1})["nModified"] == 1
    fam = {"findAndModify": "c", "query": {"_id": 1}, "update": {"$inc": {"n": 1}}, "new": True}
    assert run({**fam, "lsid": session, "txnNumber": 2})["value"]["n"] == 2
    assert run({**fam, "lsid": session, "txnNumber": 2})["value"]["n"] == 2
    assert run({"find": "c", "filter": {}})["cursor"]["firstBatch"][0]["n"] == 2
    assert [s["attempts"] for s in engine.txn_stats()] == [2, 2]


def test_failed_write_is_not_recorded_as_applied() -> None:
    """A write that fails with a command error is counted but not applied, so a retry runs it."""
    engine = Engine()
    run = run_on(engine)
    session = lsid()
    with pytest.raises(CommandError):
        run({"insert": "c", "documents": "bad", "lsid": session, "txnNumber": 1})
    run({"insert": "c", "documents": [{"_id": 1}], "lsid": session, "txnNumber": 1})
    assert engine.txn_stats()[0]["attempts"] == 2
    assert engine.txn_stats()[0]["applied"] is True


def test_older_txn_number_is_too_old() -> None:
    """A txnNumber lower than the session's latest fails with 225 TransactionTooOld."""
    run = run_on(Engine())
    session = lsid()
    run({"insert": "c", "documents": [{"_id": 1}], "lsid": session, "txnNumber": 5})
    with pytest.raises(CommandError) as info:
        run({"insert": "c", "documents": [{"_id": 2}], "lsid": session, "txnNumber": 4})
    assert info.value.code_name == "TransactionTooOld"


def test_record_store_is_bounded() -> None:
    """Statistics entries are capped at MAX_RECORDS, oldest dropped first."""
    engine = Engine()
    session = lsid()
    for n in range(MAX_RECORDS + 5):
        engine.sessions.retryable_write({"lsid": session, "txnNumber": n}, lambda: {"ok": 1.0})
    stats = engine.txn_stats()
    assert len(stats) == MAX_RECORDS
    assert stats[0]["txnNumber"] == 5


def txn(session: dict[str, Any], number: int, start: bool = False) -> dict[str, Any]:
    """Return the transaction fields of a command."""
    fields: dict[str, Any] = {"lsid": session, "txnNumber": Int64(number), "autocommit": False}
    if start:
        fields["startTransaction"] = True
        fields["readConcern"] = {"level": "snapshot"}
    return fields


def test_transaction_isolation_and_commit() -> None:
    """Uncommitted writes are invisible to others, visible inside, and published on commit."""
    engine = Engine()
    run = run_on(engine)
    run({"insert": "c", "documents": [{"_id": 0}]})
    session = lsid()
    start = {"insert": "c", "documents": [{"_id": 1}], **txn(session, 1, start=True)}
    assert engine.in_transaction(start)
    run(start)
    run({"insert": "c", "documents": [{"_id": 2}], **txn(session, 1)})
    run({"delete": "c", "deletes": [{"q": {"_id": 0}, "limit": 1}], **txn(session, 1)})
    inside = run({"find": "c", "filter": {}, "sort": {"_id": 1}, **txn(session, 1)})
    assert [d["_id"] for d in inside["cursor"]["firstBatch"]] == [1, 2]
    assert ids(engine) == [0]
    assert engine.in_transaction({"find": "c", **txn(session, 1)})
    assert not engine.in_transaction({"find": "c", "lsid": session})
    run({"commitTransaction": 1, **txn(session, 1)}, db="admin")
    assert ids(engine) == [1, 2]
    # A retried commit succeeds again; the stats show two commit attempts.
    run({"commitTransaction": 1, **txn(session, 1)}, db="admin")
    assert engine.txn_stats() == [{"lsid": session, "txnNumber": 1, "attempts": 2, "applied": True}]


def test_transaction_abort_discards_writes() -> None:
    """abortTransaction discards the workspace; a second abort fails with NoSuchTransaction."""
    engine = Engine()
    run = run_on(engine)
    session = lsid()
    run({"insert": "c", "documents": [{"_id": 1}], **txn(session, 3, start=True)})
    run({"abortTransaction": 1, **txn(session, 3)}, db="admin")
    assert ids(engine) == []
    with pytest.raises(CommandError) as info:
        run({"abortTransaction": 1, **txn(session, 3)}, db="admin")
    assert info.value.code == 251
    with pytest.raises(CommandError) as info:
        run({"insert": "c", "documents": [{"_id": 2}], **txn(session, 3)})
    assert info.value.code == 251
    assert "TransientTransactionError" in info.value.labels


def test_unknown_transaction_is_no_such_transaction() -> None:
    """Commit of an unknown transaction and commands for an unstarted one fail with 251."""
    run = run_on(Engine())
    session = lsid()
    for body, db in (
        ({"commitTransaction": 1, **txn(session, 9)}, "admin"),
        ({"insert": "c", "documents": [{"_id": 1}], **txn(session, 9)}, "db"),
    ):
        with pytest.raises(CommandError) as info:
            run(body, db=db)
        assert info.value.code == 251
        assert info.value.labels == ("TransientTransactionError",)


def test_transaction_restricts_commands_and_aborts_on_errors() -> None:
    """Commands not allowed in transactions fail with 263; a write error aborts the transaction."""
    engine = Engine()
    run = run_on(engine)
    session = lsid()
    run({"insert": "c", "documents": [{"_id": 1}], **txn(session, 1, start=True)})
    with pytest.raises(CommandError) as info:
        run({"count": "c", **txn(session, 1)})
    assert info.value.code == 263
    session2 = lsid()
    run({"insert": "c", "documents": [{"_id": 1}]})
    reply = run({"insert": "c", "documents": [{"_id": 1}], **txn(session2, 1, start=True)})
    assert reply["writeErrors"][0]["code"] == 11000
    with pytest.raises(CommandError) as info:
        run({"commitTransaction": 1, **txn(session2, 1)}, db="admin")
    assert info.value.code == 251


def test_transaction_commit_of_a_committed_txn_then_new_command_fails() -> None:
    """After commit, another command of the same transaction fails with TransactionCommitted."""
    run = run_on(Engine())
    session = lsid()
    run({"insert": "c", "documents": [{"_id": 1}], **txn(session, 1, start=True)})
    run({"commitTransaction": 1, **txn(session, 1)}, db="admin")
    with pytest.raises(CommandError) as info:
        run({"insert": "c", "documents": [{"_id": 2}], **txn(session, 1)})
    assert info.value.code_name == "TransactionCommitted"


def test_create_collection_inside_transaction_is_published_on_commit() -> None:
    """A collection created inside a transaction exists for others only after commit."""
    engine = Engine()
    run = run_on(engine)
    session = lsid()
    run({"create": "fresh", **txn(session, 1, start=True)})
    names = run({"listCollections": 1, "nameOnly": True})["cursor"]["firstBatch"]
    assert names == []
    run({"commitTransaction": 1, **txn(session, 1)}, db="admin")
    names = run({"listCollections": 1, "nameOnly": True})["cursor"]["firstBatch"]
    assert [n["name"] for n in names] == ["fresh"]


def test_new_transaction_aborts_previous_one() -> None:
    """Starting transaction N+1 on a session aborts transaction N."""
    engine = Engine()
    run = run_on(engine)
    session = lsid()
    run({"insert": "c", "documents": [{"_id": 1}], **txn(session, 1, start=True)})
    run({"insert": "c", "documents": [{"_id": 2}], **txn(session, 2, start=True)})
    run({"commitTransaction": 1, **txn(session, 2)}, db="admin")
    assert ids(engine) == [2]


def test_end_sessions_and_kill_all_sessions() -> None:
    """endSessions forgets sessions and aborts their transactions; killAllSessions aborts all."""
    engine = Engine()
    run = run_on(engine)
    one, two = lsid(), lsid()
    run({"insert": "c", "documents": [{"_id": 1}], **txn(one, 1, start=True)})
    run({"insert": "d", "documents": [{"_id": 1}], **txn(two, 1, start=True)})
    listed = run({"aggregate": 1, "pipeline": [{"$listLocalSessions": {}}], "cursor": {}}, "admin")
    assert len(listed["cursor"]["firstBatch"]) == 2
    run({"endSessions": [one]}, db="admin")
    listed = run({"aggregate": 1, "pipeline": [{"$listLocalSessions": {}}], "cursor": {}}, "admin")
    assert [d["_id"]["id"] for d in listed["cursor"]["firstBatch"]] == [two["id"]]
    run({"killAllSessions": []}, db="admin")
    with pytest.raises(CommandError):
        run({"commitTransaction": 1, **txn(two, 1)}, db="admin")
    assert ids(engine, "c") == []
    assert ids(engine, "d") == []


def test_commit_outside_transaction_fails() -> None:
    """commitTransaction without autocommit:false fails cleanly."""
    run = run_on(Engine())
    with pytest.raises(CommandError):
        run({"commitTransaction": 1}, db="admin")


def test_reset_forgets_everything() -> None:
    """reset drops data, cursors and sessions."""
    engine = Engine()
    run = run_on(engine)
    run({"insert": "c", "documents": [{"_id": 1}], "lsid": lsid(), "txnNumber": 1})
    engine.reset()
    assert ids(engine) == []
    assert engine.txn_stats() == []


def test_lookup_inside_transaction_sees_other_collections() -> None:
    """A $lookup inside a transaction reads the foreign collection's committed data."""
    engine = Engine()
    run = run_on(engine)
    run({"insert": "orders", "documents": [{"_id": 1, "item": "a"}]})
    run({"insert": "items", "documents": [{"_id": "a", "price": 3}]})
    session = lsid()
    pipeline = [
        {"$lookup": {"from": "items", "localField": "item", "foreignField": "_id", "as": "i"}}
    ]
    reply = run(
        {"aggregate": "orders", "pipeline": pipeline, "cursor": {}, **txn(session, 1, start=True)}
    )
    assert reply["cursor"]["firstBatch"][0]["i"] == [{"_id": "a", "price": 3}]


def test_create_options_are_listed() -> None:
    """Options given to create appear in listCollections."""
    run = run_on(Engine())
    run({"create": "capped", "capped": True, "size": 4096, "writeConcern": {"w": 1}})
    (info,) = run({"listCollections": 1})["cursor"]["firstBatch"]
    assert info["options"] == {"capped": True, "size": 4096}
    with pytest.raises(CommandError) as exc:
        run({"create": "v", "viewOn": "capped", "pipeline": []})
    assert exc.value.code == 238


def test_commit_keeps_concurrent_writes_to_other_documents() -> None:
    """A commit writes only the transaction's own changes; others' writes meanwhile survive."""
    engine = Engine()
    run = run_on(engine)
    run({"insert": "c", "documents": [{"_id": 1, "v": 0}, {"_id": 2, "v": 0}]})
    session = lsid()
    upd = {"q": {"_id": 1}, "u": {"$set": {"v": "txn"}}}
    run({"update": "c", "updates": [upd], **txn(session, 1, start=True)})
    run({"update": "c", "updates": [{"q": {"_id": 2}, "u": {"$set": {"v": "other"}}}]})
    run({"insert": "c", "documents": [{"_id": 3}]})
    run({"delete": "c", "deletes": [{"q": {"_id": 2}, "limit": 1}], **txn(session, 1)})
    run({"commitTransaction": 1, **txn(session, 1)}, db="admin")
    found = run({"find": "c", "filter": {}, "sort": {"_id": 1}})["cursor"]["firstBatch"]
    assert found == [{"_id": 1, "v": "txn"}, {"_id": 3}]


def test_injected_error_on_first_statement_still_starts_the_transaction() -> None:
    """After a fail point answers the first statement, both retry shapes continue the txn."""
    engine = Engine()
    run = run_on(engine)
    first = {"insert": "c", "documents": [{"_id": 1}], **txn(lsid(), 1, start=True)}
    engine.note_injected_error("db", first)
    assert engine.in_transaction({"insert": "c", **txn(first["lsid"], 1)})
    run(first)  # pymongo >= 4.17 repeats startTransaction on the retry
    run({"commitTransaction": 1, **txn(first["lsid"], 1)}, db="admin")
    assert ids(engine) == [1]
    second = {"insert": "c", "documents": [{"_id": 2}], **txn(lsid(), 1, start=True)}
    engine.note_injected_error("db", second)
    retry = {k: v for k, v in second.items() if k not in ("startTransaction", "readConcern")}
    run(retry)  # older clients drop startTransaction on the retry
    run({"commitTransaction": 1, **txn(second["lsid"], 1)}, db="admin")
    assert ids(engine) == [1, 2]


def test_repeated_start_after_work_is_refused() -> None:
    """startTransaction again after statements ran in the transaction fails (117)."""
    run = run_on(Engine())
    session = lsid()
    body = {"insert": "c", "documents": [{"_id": 1}], **txn(session, 1, start=True)}
    run(body)
    with pytest.raises(CommandError) as info:
        run({**body, "documents": [{"_id": 2}]})
    assert info.value.code_name == "ConflictingOperationInProgress"


def test_injected_error_outside_transactions_only_notes_the_session() -> None:
    """note_injected_error for a plain command records the session and starts nothing."""
    engine = Engine()
    session = lsid()
    engine.note_injected_error("db", {"find": "c", "lsid": session})
    engine.note_injected_error("db", {"insert": "c", "lsid": session, "txnNumber": 1})
    assert engine.txn_stats() == []
    assert engine.sessions.known_lsids() == [session]


def test_write_conflict_between_running_transactions() -> None:
    """The second transaction writing a document another running one wrote gets WriteConflict."""
    engine = Engine()
    run = run_on(engine)
    run({"insert": "c", "documents": [{"_id": 0}]})
    first, second = lsid(), lsid()
    run({"insert": "c", "documents": [{"_id": 1}], **txn(first, 1, start=True)})
    with pytest.raises(CommandError) as info:
        run({"insert": "c", "documents": [{"_id": 1}], **txn(second, 1, start=True)})
    assert info.value.code_name == "WriteConflict"
    assert info.value.labels == ("TransientTransactionError",)
    run({"commitTransaction": 1, **txn(first, 1)}, db="admin")
    with pytest.raises(CommandError) as info:
        run({"commitTransaction": 1, **txn(second, 1)}, db="admin")
    assert info.value.code_name == "NoSuchTransaction"
    assert ids(engine) == [0, 1]


def test_write_conflict_with_a_commit_after_the_snapshot() -> None:
    """Writing a document that another transaction committed after our snapshot conflicts."""
    engine = Engine()
    run = run_on(engine)
    run({"insert": "c", "documents": [{"_id": 1, "v": 0}, {"_id": 2, "v": 0}]})
    early, late = lsid(), lsid()
    bump = {"update": "c", "updates": [{"q": {"_id": 1}, "u": {"$inc": {"v": 1}}}]}
    run({"find": "c", "filter": {}, **txn(late, 1, start=True)})  # snapshot taken here
    run({**bump, **txn(early, 1, start=True)})
    run({"commitTransaction": 1, **txn(early, 1)}, db="admin")
    other = {"update": "c", "updates": [{"q": {"_id": 2}, "u": {"$inc": {"v": 1}}}]}
    run({**other, **txn(late, 1)})  # a different document: fine
    with pytest.raises(CommandError) as info:
        run({**bump, **txn(late, 1)})
    assert info.value.code == 112


def test_deleting_the_last_document_in_a_transaction_commits() -> None:
    """A transaction that empties a collection publishes the deletions on commit."""
    engine = Engine()
    run = run_on(engine)
    run({"insert": "c", "documents": [{"_id": 0}]})
    session = lsid()
    run({"delete": "c", "deletes": [{"q": {"_id": 0}, "limit": 1}], **txn(session, 1, start=True)})
    run({"commitTransaction": 1, **txn(session, 1)}, db="admin")
    assert ids(engine) == []


def test_per_session_tables_are_bounded() -> None:
    """Many short-lived sessions do not grow the session tables beyond MAX_RECORDS."""
    engine = Engine()
    for n in range(MAX_RECORDS + 10):
        body = {"lsid": {"id": n}, "txnNumber": 1}
        engine.sessions.retryable_write(body, lambda: {"ok": 1.0})
    assert len(engine.sessions.known_lsids()) == MAX_RECORDS
    assert len(engine.txn_stats()) == MAX_RECORDS
    # The oldest sessions were forgotten entirely, so their txnNumber 1 runs afresh.
    engine.sessions.retryable_write({"lsid": {"id": 0}, "txnNumber": 1}, lambda: {"ok": 1.0})
    (record,) = [s for s in engine.txn_stats() if s["lsid"] == {"id": 0}]
    assert record["attempts"] == 1
