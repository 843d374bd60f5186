"""Write and simple read commands: insert, update, delete, findAndModify, count, distinct.

Per-statement failures of insert/update/delete become ``writeErrors`` entries (``index``,
``code``, ``errmsg``); ordered batches stop at the first one. ``arrayFilters`` (missing from
mongomock) are applied by rewriting ``$[ident]`` / ``$[]`` paths into concrete array indexes per
matched document before handing the update to mongomock.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any, Optional

from bson import json_util
from mongomock import filtering, helpers

from backpressure.testing.engine_base import (
    CommandError,
    Handler,
    Request,
    collection_name,
    opt_bool,
    opt_document,
    opt_int,
)
from backpressure.testing.engine_store import guard

__all__ = [
    "HANDLERS",
    "UpdateOutcome",
    "apply_update",
    "expand_array_filters",
    "insert_document",
    "write_error",
]

_filter_applies: Any = filtering.filter_applies
_hashdict: Any = helpers.hashdict


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


def _insert(req: Request) -> dict[str, Any]:
    coll_name = collection_name(req)
    docs = _documents(req.body, "documents")
    ordered = opt_bool(req.body, "ordered", True)
    ns = f"{req.db}.{coll_name}"
    coll = req.store.collection(req.db, coll_name)
    n = 0
    errors: list[dict[str, Any]] = []
    for index, doc in enumerate(docs):
        try:
            if not isinstance(doc, dict):
                raise CommandError(14, "document to insert must be an object")
            insert_document(coll, ns, doc)
            n += 1
        except CommandError as exc:
            errors.append(write_error(index, exc))
            if ordered:
                break
    reply: dict[str, Any] = {"n": n, "ok": 1.0}
    if errors:
        reply["writeErrors"] = errors
    return reply


def insert_document(coll: Any, ns: str, doc: dict[str, Any]) -> None:
    """Insert one document; a duplicate key error names the index, key pattern and value."""
    try:
        guard(partial(coll.insert_one, doc), ns)
    except CommandError as exc:
        if exc.code != 11000:
            raise
        raise _duplicate_key_error(coll, ns, doc) from exc


def _duplicate_key_error(coll: Any, ns: str, doc: dict[str, Any]) -> CommandError:
    """Work out which unique index ``doc`` collides with (after mongomock rolled it back)."""
    store = coll._store
    pattern: dict[str, Any] = {"_id": 1}
    index_name = "_id_"
    doc_id = doc.get("_id")
    if isinstance(doc_id, dict):  # mongomock keys documents with a document _id by a hashdict
        doc_id = _hashdict(doc_id)
    try:
        taken = doc_id in store._documents
    except TypeError:
        taken = False
    if not taken:
        for name, spec in store.indexes.items():
            if not spec.get("unique"):
                continue
            values = {key: _dotted(doc, key) for key, _ in spec["key"]}
            if any(_filter_applies(values, other) for other in store._documents.values()):
                pattern, index_name = dict(spec["key"]), name
                break
    values = {key: _dotted(doc, key) for key in pattern}
    shown = ", ".join(f"{key}: {json_util.dumps(value)}" for key, value in values.items())
    return CommandError(
        11000,
        f"E11000 duplicate key error collection: {ns} index: {index_name} dup key: {{ {shown} }}",
        extra={"keyPattern": pattern, "keyValue": values},
    )


def _dotted(doc: Any, path: str) -> Any:
    for part in path.split("."):
        if isinstance(doc, Mapping):
            doc = doc.get(part)
        elif isinstance(doc, list) and part.isdigit() and int(part) < len(doc):
            doc = doc[int(part)]
        else:
            return None
    return doc


class UpdateOutcome:
    """Counts of one update statement."""

    __slots__ = ("matched", "modified", "upserted_id")

    def __init__(self, matched: int = 0, modified: int = 0, upserted_id: Any = None) -> None:
        """Record the statement's counts."""
        self.matched = matched
        self.modified = modified
        self.upserted_id = upserted_id


def _is_operator_update(update: Any) -> bool:
    return isinstance(update, Mapping) and bool(update) and next(iter(update)).startswith("$")


def _check_update(update: Any) -> None:
    if isinstance(update, list):
        if not all(isinstance(stage, Mapping) for stage in update):
            raise CommandError(14, "Each element of the 'pipeline' array must be an object")
        return
    if not isinstance(update, Mapping):
        raise CommandError(14, "Update argument must be either an object or an array")
    if _is_operator_update(update):
        for key, value in update.items():
            if not key.startswith("$"):
                raise CommandError(9, f"Unknown modifier: {key}. Expected a valid update modifier")
            if not isinstance(value, Mapping):
                raise CommandError(
                    9, f"Modifiers operate on fields but we found type {type(value).__name__}"
                )
    elif any(key.startswith("$") for key in update):
        raise CommandError(9, "Replacement document cannot contain $-prefixed top-level fields")


def apply_update(
    coll: Any,
    ns: str,
    query: dict[str, Any],
    update: Any,
    *,
    upsert: bool = False,
    multi: bool = False,
    array_filters: Optional[list[Any]] = None,
    sort: Optional[list[tuple[str, int]]] = None,
) -> UpdateOutcome:
    """Apply one update statement (operators, replacement or pipeline) to a mongomock collection."""
    _check_update(update)
    replacement = isinstance(update, Mapping) and not _is_operator_update(update)
    if replacement and multi:
        raise CommandError(9, "multi update is not supported for replacement-style update")
    if array_filters is None and sort is None:
        if replacement:
            result = guard(lambda: coll.replace_one(query, dict(update), upsert=upsert), ns)
        elif multi:
            result = guard(lambda: coll.update_many(query, update, upsert=upsert), ns)
        else:
            result = guard(lambda: coll.update_one(query, update, upsert=upsert), ns)
        raw = result.raw_result
        return UpdateOutcome(raw["n"], raw["nModified"] or 0, raw.get("upserted"))
    # Slow path: pick the documents ourselves (sort, arrayFilters), then update each by _id.
    targets = guard(lambda: list(coll.find(query, projection=None, sort=sort)))
    if not multi:
        targets = targets[:1]
    if not targets:
        if upsert:
            if array_filters:
                raise CommandError(238, "upsert with arrayFilters is not supported")
            return apply_update(coll, ns, query, update, upsert=True)
        return UpdateOutcome()
    outcome = UpdateOutcome()
    for doc in targets:
        concrete = update
        if array_filters is not None and isinstance(update, Mapping) and not replacement:
            concrete = expand_array_filters(doc, update, array_filters)
        selector = {**query, "_id": doc["_id"]}
        one = apply_update(coll, ns, selector, concrete)
        outcome.matched += one.matched
        outcome.modified += one.modified
    return outcome


def expand_array_filters(
    doc: Mapping[str, Any], update: Mapping[str, Any], array_filters: list[Any]
) -> dict[str, Any]:
    """Rewrite ``$[ident]`` and ``$[]`` paths of an operator update into concrete indexes."""
    filters: dict[str, dict[str, Any]] = {}
    for spec in array_filters:
        if not isinstance(spec, Mapping) or not spec:
            raise CommandError(2, "Cannot use an expression without a top-level field name")
        ident = next(iter(spec)).split(".", 1)[0]
        filters.setdefault(ident, {}).update(spec)
    used: set[str] = set()
    out: dict[str, Any] = {}
    for op, fields in update.items():
        expanded: dict[str, Any] = {}
        for path, value in fields.items():
            if "$[" not in path:
                expanded[path] = value
                continue
            for parts in _expand_path(doc, path.split("."), filters, used):
                expanded[".".join(parts)] = value
        if expanded:
            out[op] = expanded
    unused = set(filters) - used
    if unused:
        raise CommandError(9, f"The array filter for identifier '{sorted(unused)[0]}' was not used")
    return out or {"$set": {}}


def _expand_path(
    node: Any, parts: list[str], filters: dict[str, dict[str, Any]], used: set[str]
) -> list[list[str]]:
    if not any(part.startswith("$[") for part in parts):
        return [parts]
    head, rest = parts[0], parts[1:]
    if head.startswith("$[") and head.endswith("]"):
        ident = head[2:-1]
        if ident:
            if ident not in filters:
                raise CommandError(
                    2, f"No array filter found for identifier '{ident}' in path '{'.'.join(parts)}'"
                )
            used.add(ident)
        if not isinstance(node, list):
            return []
        paths: list[list[str]] = []
        for index, element in enumerate(node):
            if ident and not _filter_applies(filters[ident], {ident: element}):
                continue
            paths.extend([str(index), *tail] for tail in _expand_path(element, rest, filters, used))
        return paths
    if isinstance(node, Mapping):
        child = node.get(head)
    elif isinstance(node, list) and head.isdigit() and int(head) < len(node):
        child = node[int(head)]
    else:
        child = None
    return [[head, *tail] for tail in _expand_path(child, rest, filters, used)]


def _update(req: Request) -> dict[str, Any]:
    coll_name = collection_name(req)
    statements = _documents(req.body, "updates")
    ordered = opt_bool(req.body, "ordered", True)
    ns = f"{req.db}.{coll_name}"
    coll = req.store.collection(req.db, coll_name)
    n = modified = 0
    upserted: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    for index, stmt in enumerate(statements):
        try:
            if not isinstance(stmt, Mapping):
                raise CommandError(14, "update statement must be an object")
            query = opt_document(stmt, "q")
            if query is None:
                raise CommandError(40414, "BSON field 'update.updates.q' is missing")
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
        except CommandError as exc:
            errors.append(write_error(index, exc))
            if ordered:
                break
            continue
        n += outcome.matched
        modified += outcome.modified
        if outcome.upserted_id is not None:
            upserted.append({"index": index, "_id": outcome.upserted_id})
    reply: dict[str, Any] = {"n": n, "nModified": modified, "ok": 1.0}
    if upserted:
        reply["upserted"] = upserted
    if errors:
        reply["writeErrors"] = errors
    return reply


def _sort(value: Any) -> Optional[list[tuple[str, int]]]:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise CommandError(14, "sort must be an object")
    return [(key, -1 if direction == -1 else 1) for key, direction in value.items()] or None


def _delete(req: Request) -> dict[str, Any]:
    coll_name = collection_name(req)
    statements = _documents(req.body, "deletes")
    ordered = opt_bool(req.body, "ordered", True)
    ns = f"{req.db}.{coll_name}"
    coll = req.store.collection(req.db, coll_name)
    n = 0
    errors: list[dict[str, Any]] = []
    for index, stmt in enumerate(statements):
        try:
            if not isinstance(stmt, Mapping):
                raise CommandError(14, "delete statement must be an object")
            query = opt_document(stmt, "q")
            if query is None:
                raise CommandError(40414, "BSON field 'delete.deletes.q' is missing")
            limit = opt_int(stmt, "limit", 0)
            if limit not in (0, 1):
                raise CommandError(
                    9, f"The limit field in delete objects must be 0 or 1. Got {limit}"
                )
            if limit:
                result = guard(partial(coll.delete_one, query), ns)
            else:
                result = guard(partial(coll.delete_many, query), ns)
            n += result.deleted_count
        except CommandError as exc:
            errors.append(write_error(index, exc))
            if ordered:
                break
    reply: dict[str, Any] = {"n": n, "ok": 1.0}
    if errors:
        reply["writeErrors"] = errors
    return reply


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
        if outcome.upserted_id is not None:
            last_error["upserted"] = outcome.upserted_id
        value = old
        if new and doc_id is not None:
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
    values = guard(lambda: coll.distinct(key, query))
    return {"values": list(values), "ok": 1.0}


HANDLERS: dict[str, Handler] = {
    "insert": _insert,
    "update": _update,
    "delete": _delete,
    "findAndModify": _find_and_modify,
    "count": _count,
    "distinct": _distinct,
}
"""Command name to handler."""
