"""Transaction semantics a real cluster has: per-mongos router state, the recovery token, the
labels mongod adds to commit errors, and writeConcernError for a ``w`` nobody can satisfy."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from bson.binary import Binary
from bson.int64 import Int64
from pymongo import WriteConcern
from pymongo.errors import OperationFailure

from backpressure.testing import EmbeddedServer
from backpressure.testing.server.cluster.replies import mongod_labels


def _lsid() -> dict[str, Any]:
    return {"id": Binary(uuid.uuid4().bytes, 4)}


def _txn(lsid: dict[str, Any], number: int, **extra: Any) -> dict[str, Any]:
    return {"lsid": lsid, "txnNumber": Int64(number), "autocommit": False, **extra}


def _start(conn: Any, lsid: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any]:
    return conn.command(
        {"insert": "t", "documents": [doc], **_txn(lsid, 1, startTransaction=True)}, db="test"
    )


def test_mongos_replies_carry_a_recovery_token(
    sharded_server: EmbeddedServer, raw_connect: Any
) -> None:
    """Every statement of a transaction on a mongos returns ``recoveryToken``."""
    conn = raw_connect(sharded_server.addresses[0])
    lsid = _lsid()
    reply = _start(conn, lsid, {"_id": 1})
    assert reply["ok"] == 1.0
    assert reply["recoveryToken"] == {"recoveryShardId": "shard0"}
    reply = conn.command({"find": "t", **_txn(lsid, 1)}, db="test")
    assert reply["recoveryToken"] == {"recoveryShardId": "shard0"}
    assert conn.command({"commitTransaction": 1, **_txn(lsid, 1)})["ok"] == 1.0


def test_replica_set_replies_have_no_recovery_token(
    replicaset_server: EmbeddedServer, raw_connect: Any
) -> None:
    """A replica-set primary never returns a recovery token."""
    conn = raw_connect(replicaset_server.primary_address)
    lsid = _lsid()
    reply = _start(conn, lsid, {"_id": 1})
    assert reply["ok"] == 1.0
    assert "recoveryToken" not in reply
    assert conn.command({"abortTransaction": 1, **_txn(lsid, 1)})["ok"] == 1.0


def test_other_mongos_cannot_continue_or_commit_without_the_token(
    sharded_server: EmbeddedServer, raw_connect: Any
) -> None:
    """Each mongos has its own router state: the second one answers NoSuchTransaction."""
    first = raw_connect(sharded_server.addresses[0])
    second = raw_connect(sharded_server.addresses[1])
    lsid = _lsid()
    assert _start(first, lsid, {"_id": "a"})["ok"] == 1.0
    statement = second.command({"find": "t", **_txn(lsid, 1)}, db="test")
    assert statement["code"] == 251
    assert statement["errorLabels"] == ["TransientTransactionError"]
    commit = second.command({"commitTransaction": 1, **_txn(lsid, 1)})
    assert commit["code"] == 251
    assert commit["codeName"] == "NoSuchTransaction"
    assert commit["errorLabels"] == ["TransientTransactionError"]
    # the first mongos still owns the transaction and commits it
    assert first.command({"commitTransaction": 1, **_txn(lsid, 1)})["ok"] == 1.0
    assert first.command({"find": "t", "filter": {"_id": "a"}}, db="test")["cursor"][
        "firstBatch"
    ] == [{"_id": "a"}]


def test_commit_retried_on_other_mongos_with_token_recovers_the_decision(
    sharded_server: EmbeddedServer, raw_connect: Any
) -> None:
    """After a commit on mongos A, a retry on mongos B with the token is acknowledged."""
    first = raw_connect(sharded_server.addresses[0])
    second = raw_connect(sharded_server.addresses[1])
    lsid = _lsid()
    token = _start(first, lsid, {"_id": "b"})["recoveryToken"]
    assert first.command({"commitTransaction": 1, **_txn(lsid, 1)})["ok"] == 1.0
    retry = second.command({"commitTransaction": 1, "recoveryToken": token, **_txn(lsid, 1)})
    assert retry["ok"] == 1.0
    assert "errorLabels" not in retry


def test_recovery_of_an_uncommitted_transaction_aborts_it(
    sharded_server: EmbeddedServer, raw_connect: Any
) -> None:
    """A token commit that finds no decision aborts: NoSuchTransaction, data never visible."""
    first = raw_connect(sharded_server.addresses[0])
    second = raw_connect(sharded_server.addresses[1])
    lsid = _lsid()
    token = _start(first, lsid, {"_id": "c"})["recoveryToken"]
    retry = second.command({"commitTransaction": 1, "recoveryToken": token, **_txn(lsid, 1)})
    assert retry["code"] == 251
    assert retry["errorLabels"] == ["TransientTransactionError"]
    late = first.command({"commitTransaction": 1, **_txn(lsid, 1)})
    assert late["code"] == 251  # aborted by the recovery
    found = first.command({"find": "t", "filter": {"_id": "c"}}, db="test")
    assert found["cursor"]["firstBatch"] == []
    bad = second.command(
        {"commitTransaction": 1, "recoveryToken": {"recoveryShardId": "x"}, **_txn(lsid, 1)}
    )
    assert bad["codeName"] == "ShardNotFound"


def test_pymongo_commit_on_other_mongos_uses_the_token(
    sharded_server: EmbeddedServer, make_client: Any
) -> None:
    """pymongo stores the token from our replies and sends it with commitTransaction."""
    client = make_client(sharded_server.uri)
    collection = client.test.get_collection("pymongo_token")
    collection.drop()
    with client.start_session() as session:
        session.start_transaction()
        collection.insert_one({"_id": 1}, session=session)
        assert session._transaction.recovery_token == {"recoveryShardId": "shard0"}
        session.commit_transaction()
    assert collection.find_one({"_id": 1}) == {"_id": 1}


@pytest.mark.parametrize("code", [112, 24, 246, 267])
def test_commit_errors_get_the_transient_label(code: int) -> None:
    """WriteConflict, LockTimeout, SnapshotUnavailable, PreparedTransactionInProgress on commit."""
    body = {"commitTransaction": 1, "txnNumber": 1, "autocommit": False}
    assert mongod_labels(code, "commitTransaction", body) == ["TransientTransactionError"]
    assert mongod_labels(91, "commitTransaction", body) == ["RetryableWriteError"]


def test_injected_commit_write_conflict_is_transient(
    replicaset_server: EmbeddedServer, make_client: Any
) -> None:
    """A failCommand WriteConflict on commit reaches pymongo with TransientTransactionError."""
    client = make_client(replicaset_server.uri)
    replicaset_server.configure_fail_point(
        {"mode": {"times": 1}, "data": {"failCommands": ["commitTransaction"], "errorCode": 112}}
    )
    try:
        with client.start_session() as session:
            session.start_transaction()
            client.test.wc.insert_one({"x": 1}, session=session)
            with pytest.raises(OperationFailure) as info:
                session.commit_transaction()
        assert info.value.code == 112
        assert info.value.has_error_label("TransientTransactionError")
    finally:
        replicaset_server.disable_fail_points()


def test_unsatisfiable_write_concern_on_commit(
    replicaset_server: EmbeddedServer, raw_connect: Any
) -> None:
    """``w: 10`` on three members: the commit applies, the reply has a writeConcernError."""
    conn = raw_connect(replicaset_server.primary_address)
    lsid = _lsid()
    assert _start(conn, lsid, {"_id": "w10"})["ok"] == 1.0
    reply = conn.command({"commitTransaction": 1, "writeConcern": {"w": 10}, **_txn(lsid, 1)})
    assert reply["ok"] == 1.0
    assert reply["writeConcernError"]["code"] == 100
    assert reply["writeConcernError"]["codeName"] == "UnsatisfiableWriteConcern"
    assert "errorLabels" not in reply
    found = conn.command({"find": "t", "filter": {"_id": "w10"}}, db="test")
    assert found["cursor"]["firstBatch"] == [{"_id": "w10"}]
    conn.command({"delete": "t", "deletes": [{"q": {}, "limit": 0}]}, db="test")


def test_unsatisfiable_write_concern_on_writes(
    replicaset_server: EmbeddedServer, make_client: Any
) -> None:
    """pymongo sees the writeConcernError of ``w: 4`` and of an unknown tag set; ``w: 3`` is ok."""
    client = make_client(replicaset_server.uri)
    fine = client.test.get_collection("wcw", write_concern=WriteConcern(w=3))
    fine.insert_one({"_id": 1})
    too_many = client.test.get_collection("wcw", write_concern=WriteConcern(w=4))
    with pytest.raises(OperationFailure) as info:
        too_many.insert_one({"_id": 2})
    assert info.value.code == 100
    tagged = client.test.get_collection("wcw", write_concern=WriteConcern(w="dc2"))
    with pytest.raises(OperationFailure) as info:
        tagged.insert_one({"_id": 3})
    assert info.value.code == 79
    assert sorted(d["_id"] for d in client.test.wcw.find()) == [1, 2, 3]
    client.test.wcw.drop()
