"""Write primitives shared by the write commands: one insert, one update statement.

``insert_document`` turns mongomock's bare duplicate-key failure into mongod's message with the
index name, ``keyPattern`` and ``keyValue``. ``apply_update`` runs an operator, replacement or
pipeline update; ``arrayFilters`` (missing from mongomock) are applied by rewriting ``$[ident]`` /
``$[]`` paths into concrete array indexes per matched document before handing the update over.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any, Optional

from bson import json_util
from bson.objectid import ObjectId
from mongomock import filtering, helpers

from backpressure.testing.server.engine.store import dotted_value, guard
from backpressure.testing.server.errors import CommandError

__all__ = [
    "UpdateOutcome",
    "apply_update",
    "expand_array_filters",
    "insert_document",
    "sort_pairs",
]

_filter_applies: Any = filtering.filter_applies
_hashdict: Any = helpers.hashdict


def insert_document(coll: Any, ns: str, doc: dict[str, Any]) -> None:
    """Insert one document; a duplicate key error names the index, key pattern and value.

    Top-level ``$``-prefixed field names are allowed (mongod 5.0+), although mongomock refuses
    them: the document is inserted without them and they are added to the stored copy after.
    """
    doc_id = doc.get("_id")
    if isinstance(doc_id, Mapping) and any(str(key).startswith("$") for key in doc_id):
        raise CommandError(2, "_id fields may not contain '$'-prefixed fields")
    dollars = {k: v for k, v in doc.items() if isinstance(k, str) and k.startswith("$")}
    plain = {k: v for k, v in doc.items() if k not in dollars} if dollars else doc
    try:
        guard(partial(coll.insert_one, plain), ns)
    except CommandError as exc:
        if exc.code != 11000:
            raise
        raise _duplicate_key_error(coll, ns, plain) from exc
    if dollars:
        key = plain["_id"]
        stored = coll._store._documents[_hashdict(key) if isinstance(key, dict) else key]
        ordered = {k: dollars[k] if k in dollars else stored[k] for k in doc}
        ordered.update({k: v for k, v in stored.items() if k not in ordered})
        stored.clear()
        stored.update(ordered)


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
            values = {key: dotted_value(doc, key) for key, _ in spec["key"]}
            if any(_filter_applies(values, other) for other in store._documents.values()):
                pattern, index_name = dict(spec["key"]), name
                break
    values = {key: dotted_value(doc, key) for key in pattern}
    shown = ", ".join(f"{key}: {json_util.dumps(value)}" for key, value in values.items())
    return CommandError(
        11000,
        f"E11000 duplicate key error collection: {ns} index: {index_name} dup key: {{ {shown} }}",
        extra={"keyPattern": pattern, "keyValue": values},
    )


class UpdateOutcome:
    """Counts of one update statement."""

    __slots__ = ("matched", "modified", "upserted", "upserted_id")

    def __init__(
        self, matched: int = 0, modified: int = 0, upserted: bool = False, upserted_id: Any = None
    ) -> None:
        """Record the statement's counts (``upserted_id`` may legitimately be None)."""
        self.matched = matched
        self.modified = modified
        self.upserted = upserted
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
            _check_paths(key, value)
    elif any(key.startswith("$") for key in update):
        raise CommandError(9, "Replacement document cannot contain $-prefixed top-level fields")


def _check_paths(op: str, fields: Mapping[str, Any]) -> None:
    """Refuse updates mongod refuses before touching the document (mongomock would half-apply)."""
    paths = list(fields)
    if op == "$rename":
        for target in fields.values():
            if not isinstance(target, str) or not target:
                raise CommandError(2, f"The 'to' field for $rename must be a string: {target!r}")
            paths.append(target)
    for path in paths:
        if not isinstance(path, str) or not path:
            raise CommandError(56, "An empty update path is not valid.")
        if op not in ("$set", "$setOnInsert") and (path == "_id" or path.startswith("_id.")):
            raise CommandError(
                66,
                f"Performing an update on the path '{path}' would modify the immutable field '_id'",
            )


def sort_pairs(spec: Optional[Mapping[str, Any]]) -> Optional[list[tuple[str, int]]]:
    """Turn a sort document into ``apply_update``'s (field, 1 | -1) pairs; None when empty."""
    if not spec:
        return None
    return [(key, -1 if direction == -1 else 1) for key, direction in spec.items()]


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
    seed_id = query.get("_id")
    if upsert and isinstance(seed_id, Mapping) and any(str(k).startswith("$") for k in seed_id):
        # mongomock would copy the {_id: {$op: ...}} condition into the upserted document.
        query = {"$and": [query]}
    if replacement and multi:
        raise CommandError(9, "multi update is not supported for replacement-style update")
    if upsert and "_id" in query and query["_id"] is None:
        return _upsert_null_id(coll, ns, query, update)
    if replacement and "_id" in update and update["_id"] is None:
        first = guard(lambda: next(iter(coll.find(query, limit=1)), None))
        if first is not None:
            return _replace_null_id(coll, ns, first, update)
        if not upsert:
            return UpdateOutcome()
        insert_document(coll, ns, dict(update))
        return UpdateOutcome(1, 0, True, None)
    if replacement and sort is None and not _by_scalar_id(query):
        # mongomock copies the query's _id condition into the replacement: select by _id first.
        first = guard(lambda: next(iter(coll.find(query, limit=1)), None))
        if first is not None:
            if first["_id"] is None:
                return _replace_null_id(coll, ns, first, update)
            query = {"_id": first["_id"]}
    if array_filters is None and sort is None:
        if replacement:
            result = guard(lambda: coll.replace_one(query, dict(update), upsert=upsert), ns)
        elif multi:
            result = guard(lambda: coll.update_many(query, update, upsert=upsert), ns)
        else:
            result = guard(lambda: coll.update_one(query, update, upsert=upsert), ns)
        raw = result.raw_result
        upserted_id = raw.get("upserted")
        return UpdateOutcome(raw["n"], raw["nModified"] or 0, upserted_id is not None, upserted_id)
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


def _by_scalar_id(query: Mapping[str, Any]) -> bool:
    value = query.get("_id")
    return len(query) == 1 and value is not None and not isinstance(value, (Mapping, list))


def _upsert_null_id(coll: Any, ns: str, query: dict[str, Any], update: Any) -> UpdateOutcome:
    """Upsert for ``{_id: null}``: mongomock would generate an ObjectId instead of using null."""
    existing = guard(lambda: coll.find_one(query))
    if existing is not None:
        if isinstance(update, Mapping) and not _is_operator_update(update):
            return _replace_null_id(coll, ns, existing, update)
        return apply_update(coll, ns, query, update)
    placeholder = ObjectId()
    apply_update(coll, ns, {**query, "_id": placeholder}, update, upsert=True)
    doc = guard(lambda: coll.find_one({"_id": placeholder}))
    if doc is None:
        raise CommandError(66, "the upserted document's _id was modified by the update")
    guard(lambda: coll.delete_one({"_id": placeholder}), ns)
    doc = {"_id": None, **{k: v for k, v in doc.items() if k != "_id"}}
    insert_document(coll, ns, doc)
    return UpdateOutcome(1, 0, True, None)


def _replace_null_id(
    coll: Any, ns: str, existing: dict[str, Any], replacement: Mapping[str, Any]
) -> UpdateOutcome:
    """Replace the document whose _id is null (mongomock's replacement cannot)."""
    doc = {"_id": None, **{k: v for k, v in replacement.items() if k != "_id"}}
    if existing["_id"] is not None or replacement.get("_id") is not None:
        raise CommandError(
            66,
            "After applying the update, the (immutable) field '_id' was found to have been altered",
        )
    if doc == existing:
        return UpdateOutcome(1, 0)
    guard(lambda: coll.delete_one({"_id": None}), ns)
    insert_document(coll, ns, doc)
    return UpdateOutcome(1, 1)


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
