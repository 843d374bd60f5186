"""Unit tests of the unified runner's pure parts: matching, loading, requirements, errors."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from bson.int64 import Int64
from bson.objectid import ObjectId
from pymongo.errors import AutoReconnect, BulkWriteError, OperationFailure
from pymongo.results import (
    BulkWriteResult,
    DeleteResult,
    InsertManyResult,
    InsertOneResult,
    UpdateResult,
)

from backpressure.testing.unified.entities import EntityMap, TestContext, Unsupported
from backpressure.testing.unified.loader import iter_spec_paths, load_spec_file
from backpressure.testing.unified.matching import Matcher, MatchError
from backpressure.testing.unified.operations.results import (
    bulk_write_document,
    partial_bulk_write_document,
    result_document,
)
from backpressure.testing.unified.runner import check_error, choose_topology, unmet_requirements

LSID = {"id": "lsid-0"}


def _matcher() -> Matcher:
    """A matcher with one value entity and one session lsid."""
    entities = {"saved": {"x": 1}}
    return Matcher(entities.__getitem__, {"session0": LSID}.__getitem__)


@pytest.mark.parametrize(
    ("expected", "actual"),
    [
        ({"a": 1}, {"a": 1, "extra": 2}),
        ([{"a": 1}], [{"a": 1, "_id": 5}]),
        ({"n": 1}, {"n": Int64(1)}),
        ({"n": 1.0}, {"n": 1}),
        ({"a": {"$$exists": False}}, {}),
        ({"a": {"$$exists": True}}, {"a": None}),
        ({"a": {"$$unsetOrMatches": 1}}, {}),
        ({"a": {"$$unsetOrMatches": 1}}, {"a": 1}),
        ({"a": {"$$type": ["int", "long"]}}, {"a": Int64(3)}),
        ({"a": {"$$type": "objectId"}}, {"a": ObjectId()}),
        ({"a": {"$$lte": 5}}, {"a": 5}),
        ({"a": {"$$matchAsRoot": {"b": 1}}}, {"a": {"b": 1, "c": 2}}),
        ({"a": {"$$matchAsDocument": {"b": 1}}}, {"a": '{"b": 1, "c": 2}'}),
        ({"a": {"$$matchesHexBytes": "00ff"}}, {"a": b"\x00\xff"}),
        ({"a": {"$$sessionLsid": "session0"}}, {"a": {"id": "lsid-0"}}),
        ({"a": {"$$matchesEntity": "saved"}}, {"a": {"x": 1}}),
    ],
)
def test_matches(expected: Any, actual: Any) -> None:
    """These actual values match their expectations."""
    _matcher().match(expected, actual)


@pytest.mark.parametrize(
    ("expected", "actual"),
    [
        ({"a": {"b": 1}}, {"a": {"b": 1, "extra": 2}}),
        ({"a": 1}, {}),
        ({"a": True}, {"a": 1}),
        ({"a": 1}, {"a": True}),
        ([1, 2], [1, 2, 3]),
        ({"a": {"$$exists": False}}, {"a": 1}),
        ({"a": {"$$unsetOrMatches": 1}}, {"a": 2}),
        ({"a": {"$$type": "string"}}, {"a": 1}),
        ({"a": {"$$lte": 5}}, {"a": 6}),
        ({"a": {"$$sessionLsid": "session0"}}, {"a": {"id": "other"}}),
        ({"a": {"$$unknownOperator": 1}}, {"a": 1}),
    ],
)
def test_mismatches(expected: Any, actual: Any) -> None:
    """These actual values do not match and the error names the path."""
    with pytest.raises(MatchError):
        _matcher().match(expected, actual)


def test_yaml_loader_decodes_extended_json(tmp_path: Path) -> None:
    """YAML files are decoded like JSON, extended JSON included, and split into tests."""
    path = tmp_path / "example.yml"
    path.write_text(
        'schemaVersion: "1.3"\n'
        "tests:\n"
        "  - description: one\n"
        "    operations: [{name: find, object: c, arguments: {filter: {n: {$numberLong: '5'}}}}]\n"
    )
    spec = load_spec_file(path)
    assert spec.display_name == f"{tmp_path.name}/example.yml"
    assert [t.test_id for t in spec.tests] == [f"{tmp_path.name}/example.yml::one"]
    value = spec.tests[0].doc["operations"][0]["arguments"]["filter"]["n"]
    assert isinstance(value, Int64)
    assert value == 5


def _deployment(topology: str, version: tuple[int, ...] = (8, 2, 0)) -> Any:
    """A stand-in deployment for requirement checks."""
    return SimpleNamespace(topology=topology, version=version, auth=False)


def test_requirements() -> None:
    """Any requirement met is enough; the reason lists every unmet one."""
    reqs = [{"minServerVersion": "9.0"}, {"topologies": ["sharded"]}]
    assert unmet_requirements(None, _deployment("replicaset")) is None
    assert unmet_requirements(reqs, _deployment("sharded")) is None
    reason = unmet_requirements(reqs, _deployment("replicaset"))
    assert reason is not None
    assert "minServerVersion 9.0" in reason
    assert "sharded" in reason
    assert unmet_requirements([{"maxServerVersion": "8.0"}], _deployment("single")) is not None
    assert unmet_requirements([{"maxServerVersion": "8.2"}], _deployment("single")) is None
    assert unmet_requirements([{"serverless": "require"}], _deployment("single")) is not None


def test_choose_topology(tmp_path: Path) -> None:
    """Replica set when allowed, else sharded, else standalone."""
    cases = {
        "[replicaset, sharded]": "replicaset",
        "[sharded, load-balanced]": "sharded",
        "[single]": "standalone",
        "[load-balanced]": None,
    }
    for topologies, expected in cases.items():
        path = tmp_path / "t.yml"
        path.write_text(
            f"runOnRequirements: [{{topologies: {topologies}}}]\ntests: [{{description: x}}]\n"
        )
        assert choose_topology(load_spec_file(path)) == expected


def test_check_error_client_or_server() -> None:
    """Server errors are OperationFailure and friends; network errors are client errors."""
    ctx = TestContext(EntityMap(), lambda spec: None, is_async=False, topology="replicaset")  # type: ignore[arg-type,return-value]
    overload = OperationFailure(
        "overloaded", 462, {"code": 462, "errorLabels": ["SystemOverloadedError"]}
    )
    check_error(ctx, {"isClientError": False, "errorCode": 462}, overload)
    check_error(ctx, {"errorLabelsContain": ["SystemOverloadedError"]}, overload)
    check_error(ctx, {"errorLabelsOmit": ["RetryableError"], "errorContains": "OVERLOAD"}, overload)
    check_error(ctx, {"isClientError": True}, AutoReconnect("connection closed"))
    with pytest.raises(AssertionError):
        check_error(ctx, {"isClientError": True}, overload)
    with pytest.raises(AssertionError):
        check_error(ctx, {"errorLabelsContain": ["RetryableError"]}, overload)


def test_folder_yields_one_copy_of_each_test_file(tmp_path: Path) -> None:
    """JSON wins over the YAML copy beside it; lone YAML files and named files still run."""
    for name in ("both.json", "both.yml", "yaml-only.yml", "sub/nested.yaml", "sub/nested.json"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("tests: []\n")
    found = [p.relative_to(tmp_path).as_posix() for p in iter_spec_paths([tmp_path])]
    assert found == ["both.json", "sub/nested.json", "yaml-only.yml"]
    assert list(iter_spec_paths([tmp_path / "both.yml"])) == [tmp_path / "both.yml"]


def test_unacknowledged_results_are_acknowledged_false() -> None:
    """w:0 results become {acknowledged: false} instead of raising on their counts."""
    for result in (
        InsertOneResult(1, acknowledged=False),
        InsertManyResult([1], acknowledged=False),
        UpdateResult({}, acknowledged=False),
        DeleteResult({}, acknowledged=False),
        BulkWriteResult({}, acknowledged=False),
    ):
        assert result_document(result) == {"acknowledged": False}


def test_bulk_write_document_inserted_ids() -> None:
    """insertedIds only when the inserted documents are known, keyed by request index."""
    raw = {"nInserted": 2, "nUpserted": 1, "nMatched": 0, "nModified": 0, "nRemoved": 0}
    raw["upserted"] = [{"index": 1, "_id": 7}]
    result = BulkWriteResult(raw, acknowledged=True)
    assert "insertedIds" not in result_document(result)
    document = bulk_write_document(result, {0: {"_id": 5}, 2: {"_id": 6}})
    assert document["insertedIds"] == {"0": 5, "2": 6}
    assert document["upsertedIds"] == {"1": 7}
    assert document["upsertedCount"] == 1


def test_partial_bulk_write_document() -> None:
    """A BulkWriteError's details as the written part, without insertedIds."""
    details = {"nInserted": 1, "nUpserted": 1, "nMatched": 2, "nModified": 1, "nRemoved": 0}
    details["upserted"] = [{"index": 3, "_id": "u"}]
    assert partial_bulk_write_document(details) == {
        "deletedCount": 0,
        "insertedCount": 1,
        "matchedCount": 2,
        "modifiedCount": 1,
        "upsertedCount": 1,
        "upsertedIds": {"3": "u"},
    }


def test_check_error_response_and_bulk_results() -> None:
    """errorResponse matches the reply; expectResult needs an error that carries a result."""
    ctx = TestContext(EntityMap(), lambda spec: None, is_async=False, topology="replicaset")  # type: ignore[arg-type,return-value]
    failure = OperationFailure("boom", 8, {"ok": 0, "code": 8, "errmsg": "boom"})
    check_error(ctx, {"errorResponse": {"code": 8}}, failure)
    with pytest.raises(MatchError):
        check_error(ctx, {"errorResponse": {"code": 9}}, failure)
    bulk = BulkWriteError({"nInserted": 2, "writeErrors": [{"index": 2, "code": 11000}]})
    check_error(ctx, {"expectResult": {"insertedCount": 2}}, bulk)
    with pytest.raises(MatchError):
        check_error(ctx, {"expectResult": {"insertedCount": 1}}, bulk)
    with pytest.raises(Unsupported, match="AutoReconnect"):
        check_error(ctx, {"expectResult": {"insertedCount": 0}}, AutoReconnect("closed"))
    with pytest.raises(AssertionError, match="client bulk write"):
        check_error(ctx, {"writeErrors": {"0": {"code": 11000}}}, bulk)
