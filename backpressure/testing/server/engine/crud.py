"""Write and simple read commands: insert, update, delete, findAndModify, count, distinct.

Per-statement failures of insert/update/delete become ``writeErrors`` entries (``index``,
``code``, ``errmsg``); ordered batches stop at the first one. The per-document primitives live in
``writes``.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any, Callable, Optional

from mongomock import filtering

from backpressure.testing.server.engine.fields import opt_bool, opt_document, opt_int
from backpressure.testing.server.engine.request import Handler, Request, collection_name
from backpressure.testing.server.engine.rewrite import case_insensitive
from backpressure.testing.server.engine.store import guard
from backpressure.testing.server.engine.writes import apply_update, insert_document, sort_pairs
from backpressure.testing.server.errors import CommandError

__all__ = ["HANDLERS", "write_error"]

_BsonOrder: Any = filtering.BsonComparable


def write_error(index: int, exc: CommandError) -> dict[str, Any]:
    """Render a per-statement failure as a ``writeErrors`` entry."""
    entry: dict[str, Any] = {"index": index, "code": exc.code, "errmsg": exc.errmsg}
    entry.update(exc.extra)
    return entry


def _documents(body: Mapping[str, Any], field: str) -> list[Any]:
    value = body.get(field)
    if not isinstance(value, list):
        raise CommandError(14, f"BSON field '{field}' is missing or is not an array")
    return value


_Statement = Callable[[Any, str, int, Any], None]
"""Applies one statement: (collection, namespace, index, statement); raises CommandError."""


def _write_batch(
    req: Request, field: str, apply: _Statement, summary: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """Run the statements of ``field`` through ``apply`` (an ordered batch stops at the first
    failure); return ``summary()`` (called after the batch) plus the failures as ``writeErrors``."""
    coll_name = collection_name(req)
    statements = _documents(req.body, field)
    ordered = opt_bool(req.body, "ordered", True)
    ns = f"{req.db}.{coll_name}"
    coll = req.store.collection(req.db, coll_name)
    errors: list[dict[str, Any]] = []
    for index, stmt in enumerate(statements):
        try:
            apply(coll, ns, index, stmt)
        except CommandError as exc:
            errors.append(write_error(index, exc))
            if ordered:
                break
    reply = summary()
    if errors:
        reply["writeErrors"] = errors
    return reply


def _statement_query(stmt: Any, command: str, field: str) -> dict[str, Any]:
    """Check that an update/delete statement is a document with a ``q``; return the ``q``."""
    if not isinstance(stmt, Mapping):
        raise CommandError(14, f"{command} statement must be an object")
    query = opt_document(stmt, "q")
    if query is None:
        raise CommandError(40414, f"BSON field '{command}.{field}.q' is missing")
    return query


def _insert(req: Request) -> dict[str, Any]:
    n = 0

    def insert(coll: Any, ns: str, index: int, doc: Any) -> None:
        nonlocal n
        if not isinstance(doc, dict):
            raise CommandError(14, "document to insert must be an object")
        insert_document(coll, ns, doc)
        n += 1

    return _write_batch(req, "documents", insert, lambda: {"n": n, "ok": 1.0})


def _update(req: Request) -> dict[str, Any]:
    n = modified = 0
    upserted: list[dict[str, Any]] = []

    def update(coll: Any, ns: str, index: int, stmt: Any) -> None:
        nonlocal n, modified
        query = _statement_query(stmt, "update", "updates")
        if "u" not in stmt:
            raise CommandError(40414, "BSON field 'update.updates.u' is missing")
        array_filters = stmt.get("arrayFilters")
        if array_filters is not None and not isinstance(array_filters, list):
            raise CommandError(14, "arrayFilters must be an array")
        outcome = apply_update(
            coll,
            ns,
            query,
            stmt["u"],
            upsert=opt_bool(stmt, "upsert"),
            multi=opt_bool(stmt, "multi"),
            array_filters=array_filters,
            sort=_sort(stmt.get("sort")),
        )
        n += outcome.matched
        modified += outcome.modified
        if outcome.upserted:
            upserted.append({"index": index, "_id": outcome.upserted_id})

    def summary() -> dict[str, Any]:
        reply: dict[str, Any] = {"n": n, "nModified": modified, "ok": 1.0}
        if upserted:
            reply["upserted"] = upserted
        return reply

    return _write_batch(req, "updates", update, summary)


def _sort(value: Any) -> Optional[list[tuple[str, int]]]:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise CommandError(14, "sort must be an object")
    return sort_pairs(value)


def _delete(req: Request) -> dict[str, Any]:
    n = 0

    def delete(coll: Any, ns: str, index: int, stmt: Any) -> None:
        nonlocal n
        query = _statement_query(stmt, "delete", "deletes")
        limit = opt_int(stmt, "limit", 0)
        if limit not in (0, 1):
            raise CommandError(9, f"The limit field in delete objects must be 0 or 1. Got {limit}")
        if limit:
            result = guard(partial(coll.delete_one, query), ns)
        else:
            result = guard(partial(coll.delete_many, query), ns)
        n += result.deleted_count

    return _write_batch(req, "deletes", delete, lambda: {"n": n, "ok": 1.0})


def _find_and_modify(req: Request) -> dict[str, Any]:
    coll_name = collection_name(req)
    ns = f"{req.db}.{coll_name}"
    body = req.body
    query = opt_document(body, "query") or {}
    remove = opt_bool(body, "remove")
    new = opt_bool(body, "new")
    upsert = opt_bool(body, "upsert")
    update = body.get("update")
    fields = opt_document(body, "fields")
    sort = _sort(body.get("sort"))
    array_filters = body.get("arrayFilters")
    if remove == (update is not None):
        raise CommandError(9, "Either an update or remove=true must be specified")
    if remove and (new or upsert):
        raise CommandError(9, "Cannot specify both new=true and remove=true")
    coll = req.store.collection(req.db, coll_name)
    matches = guard(lambda: list(coll.find(query, sort=sort, limit=1)))
    old = matches[0] if matches else None
    last_error: dict[str, Any] = {"n": 0}
    value: Optional[dict[str, Any]] = None
    if remove:
        if old is not None:
            guard(lambda: coll.delete_one({"_id": old["_id"]}), ns)
            last_error["n"] = 1
            value = old
    else:
        selector = {**query, "_id": old["_id"]} if old is not None else query
        outcome = apply_update(
            coll, ns, selector, update, upsert=upsert, array_filters=array_filters
        )
        last_error["n"] = 1 if outcome.matched else 0
        last_error["updatedExisting"] = old is not None
        doc_id = old["_id"] if old is not None else outcome.upserted_id
        if outcome.upserted:
            last_error["upserted"] = outcome.upserted_id
        value = old
        if new and (old is not None or outcome.upserted):
            value = guard(lambda: coll.find_one({"_id": doc_id}))
    if value is not None and fields:
        value = guard(partial(_project, coll, value, fields))
    return {"lastErrorObject": last_error, "value": value, "ok": 1.0}


def _project(coll: Any, doc: dict[str, Any], fields: dict[str, Any]) -> Any:
    return coll._copy_only_fields(doc, fields, dict)


def _count(req: Request) -> dict[str, Any]:
    coll_name = collection_name(req)
    query = opt_document(req.body, "query") or {}
    skip = opt_int(req.body, "skip", 0) or 0
    limit = abs(opt_int(req.body, "limit", 0) or 0)
    if not req.store.exists(req.db, coll_name):
        return {"n": 0, "ok": 1.0}
    coll = req.store.collection(req.db, coll_name)
    kwargs: dict[str, Any] = {"skip": skip}
    if limit:
        kwargs["limit"] = limit
    n = guard(lambda: coll.count_documents(query, **kwargs))
    return {"n": n, "ok": 1.0}


def _distinct(req: Request) -> dict[str, Any]:
    coll_name = collection_name(req)
    key = req.body.get("key")
    if not isinstance(key, str):
        raise CommandError(14, "BSON field 'distinct.key' is missing or is not a string")
    query = opt_document(req.body, "query") or {}
    if not req.store.exists(req.db, coll_name):
        return {"values": [], "ok": 1.0}
    coll = req.store.collection(req.db, coll_name)
    values = sorted(guard(lambda: coll.distinct(key, query)), key=_BsonOrder)
    if case_insensitive(req.body.get("collation")):
        seen: set[str] = set()
        kept: list[Any] = []
        for value in values:
            folded = value.casefold() if isinstance(value, str) else None
            if folded is None or folded not in seen:
                kept.append(value)
                if folded is not None:
                    seen.add(folded)
        values = kept
    return {"values": values, "ok": 1.0}


HANDLERS: dict[str, Handler] = {
    "insert": _insert,
    "update": _update,
    "delete": _delete,
    "findAndModify": _find_and_modify,
    "count": _count,
    "distinct": _distinct,
}
"""Command name to handler."""
