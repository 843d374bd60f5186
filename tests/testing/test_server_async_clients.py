"""The embedded server with asyncio clients: pymongo's AsyncMongoClient and Motor."""

from __future__ import annotations

from typing import Any

import pytest

from backpressure.testing import EmbeddedServer


async def test_async_mongo_client(replicaset_server: EmbeddedServer) -> None:
    """AsyncMongoClient discovers the replica set, writes, reads and sees injected errors."""
    pymongo_async = pytest.importorskip("pymongo.asynchronous.mongo_client")
    from pymongo.errors import OperationFailure

    client: Any = pymongo_async.AsyncMongoClient(
        replicaset_server.uri, serverSelectionTimeoutMS=3000, heartbeatFrequencyMS=500
    )
    try:
        await client.test.c.insert_one({"_id": 1})
        assert await client.test.c.find_one() == {"_id": 1}
        replicaset_server.configure_fail_point(
            {"mode": {"times": 1}, "data": {"failCommands": ["find"], "errorCode": 2}}
        )
        with pytest.raises(OperationFailure):
            await client.test.c.find_one()
    finally:
        await client.close()


async def test_motor_client(standalone_server: EmbeddedServer) -> None:
    """Motor (pymongo's sync client in an executor) works against the server."""
    motor_asyncio = pytest.importorskip("motor.motor_asyncio")
    client: Any = motor_asyncio.AsyncIOMotorClient(
        standalone_server.uri, serverSelectionTimeoutMS=3000, heartbeatFrequencyMS=500
    )
    try:
        await client.test.c.insert_one({"_id": 1})
        assert await client.test.c.count_documents({}) == 1
    finally:
        client.close()
