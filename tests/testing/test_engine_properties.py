"""Property tests of the engine: batching never loses or repeats documents; arrayFilters rewrite."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backpressure.testing.server.engine.dispatch import Engine
from backpressure.testing.server.engine.request import CommandContext
from backpressure.testing.server.engine.writes import expand_array_filters
from backpressure.testing.server.errors import CommandError

CTX = CommandContext(connection_id=1, app_name=None, role="primary", max_wire_version=25)


@settings(max_examples=60, deadline=None)
@given(
    n_docs=st.integers(min_value=0, max_value=40),
    first=st.one_of(st.none(), st.integers(min_value=0, max_value=12)),
    sizes=st.lists(st.one_of(st.none(), st.integers(min_value=1, max_value=9)), max_size=30),
    skip=st.integers(min_value=0, max_value=5),
    limit=st.integers(min_value=0, max_value=30),
)
def test_find_batches_cover_the_result_exactly_once(
    n_docs: int, first: int | None, sizes: list[int | None], skip: int, limit: int
) -> None:
    """Concatenated find + getMore batches equal the skip/limit slice of the sorted collection."""
    engine = Engine()
    if n_docs:
        engine.execute("db", {"insert": "c", "documents": [{"_id": i} for i in range(n_docs)]}, CTX)
    find: dict[str, Any] = {"find": "c", "filter": {}, "sort": {"_id": 1}, "skip": skip}
    if limit:
        find["limit"] = limit
    if first is not None:
        find["batchSize"] = first
    cursor = engine.execute("db", find, CTX)["cursor"]
    seen = [d["_id"] for d in cursor["firstBatch"]]
    cursor_id = cursor["id"]
    for size in [*sizes, None]:
        if not cursor_id:
            break
        more: dict[str, Any] = {"getMore": cursor_id, "collection": "c"}
        if size is not None:
            more["batchSize"] = size
        cursor = engine.execute("db", more, CTX)["cursor"]
        if size is not None:
            assert len(cursor["nextBatch"]) <= size
        seen.extend(d["_id"] for d in cursor["nextBatch"])
        cursor_id = cursor["id"]
    expected = list(range(n_docs))[skip:]
    if limit:
        expected = expected[:limit]
    assert seen == expected
    assert cursor_id == 0
    assert len(engine.cursors) == 0


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.integers(min_value=-5, max_value=5), max_size=8), bound=st.integers(-5, 5)
)
def test_array_filters_touch_exactly_the_matching_elements(values: list[int], bound: int) -> None:
    """$[x] with {x: {$gt: bound}} rewrites one concrete path per matching element."""
    doc = {"_id": 1, "a": [{"v": v} for v in values]}
    update = expand_array_filters(doc, {"$set": {"a.$[x].hit": True}}, [{"x.v": {"$gt": bound}}])
    expected = {f"a.{i}.hit": True for i, v in enumerate(values) if v > bound}
    assert update == ({"$set": expected} if expected else {"$set": {}})


_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=3),
    st.sampled_from(["c", "$a", "a", "_id", "$$v", "", "*", "db.c", "x.$[y]"]),
)
_KEYS = st.sampled_from(
    [
        "a",
        "_id",
        "b.c",
        "$set",
        "$gt",
        "$in",
        "$type",
        "$match",
        "$out",
        "$group",
        "$rename",
        "$unset",
        "$expr",
        "$and",
        "q",
        "u",
        "filter",
        "document",
        "updateMods",
        "ns",
        "key",
        "name",
    ]
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=3),
    max_leaves=8,
)
_FIELDS = st.sampled_from(
    [
        "filter",
        "query",
        "documents",
        "updates",
        "deletes",
        "pipeline",
        "cursor",
        "batchSize",
        "limit",
        "skip",
        "sort",
        "projection",
        "key",
        "indexes",
        "index",
        "nsInfo",
        "ops",
        "to",
        "update",
        "remove",
        "new",
        "fields",
        "upsert",
        "collection",
        "cursors",
        "let",
        "ordered",
    ]
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(
    name=st.sampled_from(sorted(Engine.HANDLERS)),
    target=st.one_of(st.just("c"), st.just(1), _SCALARS),
    fields=st.dictionaries(_FIELDS, _VALUES, max_size=5),
)
def test_arbitrary_bodies_fail_only_with_command_errors(
    name: str, target: Any, fields: dict[str, Any]
) -> None:
    """Whatever the arguments, a command replies ok or raises CommandError, never another error."""
    engine = Engine()
    engine.execute("db", {"insert": "c", "documents": [{"_id": 1, "a": [1, {"c": 2}]}]}, CTX)
    reply: dict[str, Any]
    try:
        reply = engine.execute("db", {name: target, **fields}, CTX)
    except CommandError as exc:
        reply = exc.to_reply()
    assert reply["ok"] in (0.0, 1.0)
    assert ("errmsg" in reply) == (reply["ok"] == 0.0)
