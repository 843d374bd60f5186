"""DuplicateKey errors name the index and carry keyPattern and keyValue, as mongod's do."""

from __future__ import annotations

from typing import Any

import pytest
from pymongo.errors import DuplicateKeyError, OperationFailure

from backpressure.testing import EmbeddedServer
from backpressure.testing.server.engine.dispatch import Engine
from backpressure.testing.server.engine.request import CommandContext


@pytest.fixture
def engine() -> Engine:
    engine = Engine()
    ctx = _ctx()
    engine.execute(
        "db",
        {"createIndexes": "c", "indexes": [{"key": {"a": 1}, "name": "a_1", "unique": True}]},
        ctx,
    )
    engine.execute(
        "db", {"insert": "c", "documents": [{"_id": 1, "a": 1}, {"_id": 2, "a": 2}]}, ctx
    )
    return engine


def _ctx() -> CommandContext:
    return CommandContext(connection_id=1, app_name=None, role="primary", max_wire_version=25)


@pytest.mark.parametrize(
    "statement",
    [
        {"q": {"_id": 2}, "u": {"$set": {"a": 1}}},
        {"q": {"_id": 2}, "u": {"a": 1}},
        {"q": {"_id": 3}, "u": {"$set": {"a": 1}}, "upsert": True},
        {"q": {}, "u": {"$set": {"a": 1}}, "multi": True},
    ],
)
def test_update_collisions_name_the_index(engine: Engine, statement: dict[str, Any]) -> None:
    """Operator, replacement, upsert and multi updates all report keyPattern and keyValue."""
    reply = engine.execute("db", {"update": "c", "updates": [statement]}, _ctx())
    (error,) = reply["writeErrors"]
    assert error["code"] == 11000
    assert error["keyPattern"] == {"a": 1}
    assert error["keyValue"] == {"a": 1}
    assert "index: a_1 dup key: { a: 1 }" in error["errmsg"]


def test_find_and_modify_collision(engine: Engine) -> None:
    """findAndModify fails with the same details at the top level of the reply."""
    from backpressure.testing.server.errors import CommandError

    with pytest.raises(CommandError) as info:
        engine.execute(
            "db", {"findAndModify": "c", "query": {"_id": 2}, "update": {"$set": {"a": 1}}}, _ctx()
        )
    assert info.value.code == 11000
    assert info.value.extra == {"keyPattern": {"a": 1}, "keyValue": {"a": 1}}


def test_merge_when_matched_fail(engine: Engine) -> None:
    """$merge whenMatched: fail reports the `on` fields as key pattern and value."""
    from backpressure.testing.server.errors import CommandError

    pipeline = [{"$match": {"_id": 1}}, {"$merge": {"into": "c", "whenMatched": "fail"}}]
    with pytest.raises(CommandError) as info:
        engine.execute("db", {"aggregate": "c", "pipeline": pipeline, "cursor": {}}, _ctx())
    assert info.value.code == 11000
    assert info.value.extra == {"keyPattern": {"_id": 1}, "keyValue": {"_id": 1}}


def test_pymongo_sees_key_pattern_and_value(
    standalone_server: EmbeddedServer, make_client: Any
) -> None:
    """pymongo's DuplicateKeyError details carry both fields for an update collision."""
    client = make_client(standalone_server.uri)
    collection = client.test.dup_keys
    collection.drop()
    collection.create_index("email", unique=True)
    collection.insert_many([{"_id": 1, "email": "a"}, {"_id": 2, "email": "b"}])
    with pytest.raises(DuplicateKeyError) as info:
        collection.update_one({"_id": 2}, {"$set": {"email": "a"}})
    assert info.value.details is not None
    assert info.value.details["keyPattern"] == {"email": 1}
    assert info.value.details["keyValue"] == {"email": "a"}
    with pytest.raises(OperationFailure):
        collection.insert_one({"_id": 3, "email": "b"})
