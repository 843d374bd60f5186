"""End-to-end engine tests: real pymongo clients against the embedded server's fixtures."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pymongo import InsertOne, MongoClient, ReturnDocument, UpdateOne
from pymongo.errors import DuplicateKeyError, OperationFailure

from backpressure.testing.server.embedded import EmbeddedServer

Client = MongoClient[dict[str, Any]]


@pytest.fixture
def rs(replicaset_server: EmbeddedServer) -> Iterator[Client]:
    """A client of the shared replica set, closed at teardown."""
    client: Client = MongoClient(
        replicaset_server.uri, serverSelectionTimeoutMS=3000, heartbeatFrequencyMS=500
    )
    yield client
    client.close()


@pytest.fixture
def single(standalone_server: EmbeddedServer) -> Iterator[Client]:
    """A client of the shared standalone server, closed at teardown."""
    client: Client = MongoClient(standalone_server.uri, serverSelectionTimeoutMS=3000)
    yield client
    client.close()


def test_crud_round_trip(rs: Client) -> None:
    """insert/find/update/replace/delete/findOneAndUpdate/count/distinct through pymongo."""
    coll = rs.db.crud
    coll.insert_one({"_id": 1, "a": 1})
    coll.insert_many([{"_id": i, "a": i % 3} for i in range(2, 8)])
    assert coll.find_one({"_id": 1}) == {"_id": 1, "a": 1}
    assert coll.update_one({"_id": 1}, {"$set": {"b": 2}}).modified_count == 1
    assert coll.update_many({"a": 0}, {"$inc": {"c": 1}}).matched_count == 2
    result = coll.update_one({"_id": 50}, {"$set": {"z": 1}}, upsert=True)
    assert result.upserted_id == 50
    assert coll.replace_one({"_id": 2}, {"r": 1}).modified_count == 1
    doc = coll.find_one_and_update(
        {"_id": 3}, {"$set": {"f": 1}}, return_document=ReturnDocument.AFTER
    )
    assert doc == {"_id": 3, "a": 0, "f": 1, "c": 1}
    assert coll.find_one_and_delete({"_id": 4}) == {"_id": 4, "a": 1}
    assert coll.count_documents({"a": 1}) == 2
    assert coll.estimated_document_count() == 7
    assert sorted(coll.distinct("a")) == [0, 1, 2]
    assert coll.delete_many({"a": {"$exists": True}}).deleted_count == 5
    with pytest.raises(DuplicateKeyError):
        coll.insert_one({"_id": 50})


def test_insert_many_in_several_batches_and_find_with_get_more(rs: Client) -> None:
    """A large insert_many and a find iterated with small batches (getMore) round-trip."""
    coll = rs.db.batches
    docs = [{"_id": i, "pad": "x" * 100} for i in range(2500)]
    assert len(coll.insert_many(docs).inserted_ids) == 2500
    seen = [d["_id"] for d in coll.find({}, {"_id": 1}).sort("_id", 1).batch_size(300)]
    assert seen == list(range(2500))
    assert len(list(coll.find({"_id": {"$lt": 10}}).limit(3))) == 3


def test_aggregate_and_out(rs: Client) -> None:
    """aggregate with a pipeline and with $out."""
    coll = rs.db.agg
    coll.insert_many([{"k": i % 2, "v": i} for i in range(10)])
    groups = list(
        coll.aggregate([{"$group": {"_id": "$k", "s": {"$sum": "$v"}}}, {"$sort": {"_id": 1}}])
    )
    assert groups == [{"_id": 0, "s": 20}, {"_id": 1, "s": 25}]
    coll.aggregate([{"$match": {"k": 1}}, {"$out": "agg_out"}])
    assert rs.db.agg_out.count_documents({}) == 5


def test_transaction_with_transaction_helper(rs: Client) -> None:
    """with_transaction commits; uncommitted writes stay invisible to others; abort discards."""
    coll = rs.db.txn
    coll.insert_one({"_id": 0})

    def body(session: Any) -> None:
        coll.insert_one({"_id": 1}, session=session)
        coll.update_one({"_id": 0}, {"$set": {"t": 1}}, session=session)
        assert coll.find_one({"_id": 1}, session=session) == {"_id": 1}
        assert coll.find_one({"_id": 1}) is None

    with rs.start_session() as session:
        session.with_transaction(body)
    assert sorted(d["_id"] for d in coll.find()) == [0, 1]
    assert coll.find_one({"_id": 0}) == {"_id": 0, "t": 1}
    with rs.start_session() as session:
        session.start_transaction()
        coll.insert_one({"_id": 2}, session=session)
        session.abort_transaction()
    assert coll.find_one({"_id": 2}) is None


def test_client_bulk_write(rs: Client) -> None:
    """client.bulk_write across two namespaces (pymongo >= 4.9, wire 25)."""
    result = rs.bulk_write(
        [
            InsertOne(namespace="db.cb1", document={"_id": 1}),
            InsertOne(namespace="db.cb2", document={"_id": 2}),
            UpdateOne(namespace="db.cb1", filter={"_id": 1}, update={"$set": {"x": 1}}),
            UpdateOne(
                namespace="db.cb2", filter={"_id": 9}, update={"$set": {"x": 1}}, upsert=True
            ),
        ],
        verbose_results=True,
    )
    assert result.inserted_count == 2
    assert result.modified_count == 1
    assert result.upserted_count == 1
    assert rs.db.cb1.find_one() == {"_id": 1, "x": 1}


def test_change_stream_open_and_close(rs: Client) -> None:
    """A change stream opens (resume token present) and closes cleanly."""
    with rs.db.cs.watch(max_await_time_ms=50) as stream:
        assert stream.try_next() is None
        assert stream.resume_token is not None
    with rs.watch(max_await_time_ms=50) as stream:
        assert stream.try_next() is None


def test_indexes_collections_and_rename(rs: Client) -> None:
    """create/list/drop indexes and collections, list databases, rename."""
    db = rs.ddl
    db.create_collection("a")
    with pytest.raises(OperationFailure) as info:
        db.create_collection("a", check_exists=False)
    assert info.value.code == 48
    assert db.a.create_index([("x", 1)], unique=True) == "x_1"
    assert sorted(db.a.index_information()) == ["_id_", "x_1"]
    db.a.insert_one({"x": 1})
    with pytest.raises(DuplicateKeyError):
        db.a.insert_one({"x": 1})
    db.a.drop_index("x_1")
    assert [i["name"] for i in db.a.list_indexes()] == ["_id_"]
    db.a.rename("b")
    assert db.list_collection_names() == ["b"]
    assert "ddl" in rs.list_database_names()
    db.drop_collection("b")
    assert db.list_collection_names() == []


def test_retryable_write_recorded(rs: Client, replicaset_server: EmbeddedServer) -> None:
    """A retryable write reaches the engine with lsid/txnNumber and is recorded as applied once."""
    rs.db.rw.insert_one({"_id": 1})
    records = replicaset_server.stats(0)["transactions"]
    assert len(records) == 1
    assert records[0]["txnNumber"] == 1
    assert records[0]["attempts"] == 1
    assert records[0]["applied"] is True


def test_standalone_round_trip(single: Client) -> None:
    """The standalone topology runs the same engine (no sessions needed)."""
    single.db.s.insert_one({"_id": 1})
    assert single.db.s.find_one() == {"_id": 1}
    assert single.db.command("listCollections")["cursor"]["firstBatch"][0]["name"] == "s"


async def test_async_client_crud_and_transaction(replicaset_server: EmbeddedServer) -> None:
    """AsyncMongoClient: CRUD, a cursor over several batches and a committed transaction."""
    from pymongo import AsyncMongoClient

    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        replicaset_server.uri, serverSelectionTimeoutMS=3000
    )
    try:
        coll = client.db.async_coll
        await coll.insert_many([{"_id": i} for i in range(25)])
        seen = [doc["_id"] async for doc in coll.find({}).sort("_id", 1).batch_size(10)]
        assert seen == list(range(25))
        async with client.start_session() as session, await session.start_transaction():
            await coll.insert_one({"_id": 100}, session=session)
            assert await coll.find_one({"_id": 100}) is None
        assert await coll.find_one({"_id": 100}) == {"_id": 100}
    finally:
        await client.close()


async def test_motor_client_round_trip(replicaset_server: EmbeddedServer) -> None:
    """Motor 3.7 (pymongo's sync client in threads) reads and writes through the engine."""
    motor_asyncio = pytest.importorskip("motor.motor_asyncio")
    client = motor_asyncio.AsyncIOMotorClient(replicaset_server.uri, serverSelectionTimeoutMS=3000)
    try:
        await client.db.motor_coll.insert_one({"_id": 1, "v": "m"})
        assert await client.db.motor_coll.find_one({"_id": 1}) == {"_id": 1, "v": "m"}
        assert await client.db.motor_coll.count_documents({}) == 1
    finally:
        client.close()
