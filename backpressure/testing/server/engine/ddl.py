"""Catalog commands: collections, indexes, databases, renames and minimal statistics.

Follows mongod 7+: dropping a missing collection succeeds; creating an existing one fails with
48 NamespaceExists. Create options are kept and shown by listCollections, not enforced.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from functools import partial
from typing import Any

import bson

from backpressure.testing.server.engine.cursors import cursor_reply
from backpressure.testing.server.engine.fields import opt_bool, opt_document, opt_int
from backpressure.testing.server.engine.request import Handler, Request, collection_name
from backpressure.testing.server.engine.store import DataStore, guard
from backpressure.testing.server.errors import CommandError

__all__ = ["HANDLERS"]


_CREATE_OPTIONS = frozenset(
    {
        "capped",
        "size",
        "max",
        "validator",
        "validationLevel",
        "validationAction",
        "collation",
        "timeseries",
        "expireAfterSeconds",
        "clusteredIndex",
        "changeStreamPreAndPostImages",
        "storageEngine",
        "indexOptionDefaults",
        "encryptedFields",
    }
)


def _create(req: Request) -> dict[str, Any]:
    name = collection_name(req)
    if "viewOn" in req.body or "pipeline" in req.body:
        raise CommandError(238, "views are not supported by the embedded server")
    options = {k: v for k, v in req.body.items() if k in _CREATE_OPTIONS}
    if req.store.exists(req.db, name):
        raise CommandError(48, f"Collection {req.db}.{name} already exists.")
    if req.txn is not None:
        req.store.touch(req.db, name)
    req.store.create(req.db, name, options)
    return {"ok": 1.0}


def _coll_mod(req: Request) -> dict[str, Any]:
    name = collection_name(req)
    coll = req.store.collection_store(req.db, name)
    if coll is None:
        raise CommandError(26, f"ns does not exist: {req.db}.{name}")
    if "viewOn" in req.body or "pipeline" in req.body:
        raise CommandError(238, "views are not supported by the embedded server")
    changes = {k: v for k, v in req.body.items() if k in _CREATE_OPTIONS}
    index = opt_document(req.body, "index")
    if index is not None:
        by_name = {doc["name"]: doc for doc in _index_docs(req.store, req.db, name)}
        wanted = index.get("name")
        match = by_name.get(wanted) if isinstance(wanted, str) else None
        if match is None:
            key = index.get("keyPattern")
            match = next((d for d in by_name.values() if d["key"] == key), None)
        if match is None:
            raise CommandError(27, "cannot find index for collMod")
    if changes:
        req.store.create(req.db, name, {**req.store.options(req.db, name), **changes})
    return {"ok": 1.0}


def _drop(req: Request) -> dict[str, Any]:
    name = collection_name(req)
    ns = f"{req.db}.{name}"
    n_indexes = len(_index_docs(req.store, req.db, name))
    req.store.drop(req.db, name)
    req.cursors.close_namespace(ns)
    return {"ns": ns, "nIndexesWas": n_indexes, "ok": 1.0}


def _drop_database(req: Request) -> dict[str, Any]:
    for name in req.store.collection_names(req.db):
        req.cursors.close_namespace(f"{req.db}.{name}")
    req.store.drop_database(req.db)
    return {"dropped": req.db, "ok": 1.0}


def _index_docs(store: DataStore, db: str, name: str) -> list[dict[str, Any]]:
    if not store.exists(db, name):
        return []
    coll = store.collection(db, name)
    return [dict(doc) for doc in guard(lambda: list(coll.list_indexes()))]


def _create_indexes(req: Request) -> dict[str, Any]:
    name = collection_name(req)
    specs = req.body.get("indexes")
    if not isinstance(specs, list) or not specs:
        raise CommandError(2, "Must specify at least one index to create")
    ns = f"{req.db}.{name}"
    created = not req.store.exists(req.db, name)
    if created:
        req.store.collection(req.db, name)
        req.store.create(req.db, name)
    before = _index_docs(req.store, req.db, name)
    coll = req.store.collection(req.db, name)
    for spec in specs:
        if not isinstance(spec, Mapping):
            raise CommandError(14, "index specification must be an object")
        key = opt_document(spec, "key")
        index_name = spec.get("name")
        if not key:
            raise CommandError(
                9, "The 'key' field is a required property of an index specification"
            )
        if not isinstance(index_name, str) or not index_name:
            raise CommandError(
                9, "The 'name' field is a required property of an index specification"
            )
        existing = next((doc for doc in before if doc["name"] == index_name), None)
        if existing is not None and existing["key"] != key:
            raise CommandError(
                86, f"An existing index has the same name as the requested index: {index_name}"
            )
        same_key = next((doc for doc in before if doc["key"] == key), None)
        if same_key is not None and same_key["name"] != index_name:
            raise CommandError(
                85, f"Index already exists with a different name: {same_key['name']}"
            )
        if existing is not None or index_name == "_id_":
            continue
        options = {
            k: spec[k]
            for k in ("unique", "sparse", "expireAfterSeconds", "partialFilterExpression")
            if spec.get(k) is not None
        }
        guard(
            partial(coll.create_index, list(key.items()), name=index_name, **options),
            ns,
        )
    after = _index_docs(req.store, req.db, name)
    reply: dict[str, Any] = {
        "numIndexesBefore": len(before),
        "numIndexesAfter": len(after),
        "createdCollectionAutomatically": created,
        "ok": 1.0,
    }
    if len(before) == len(after):
        reply["note"] = "all indexes already exist"
    return reply


def _list_indexes(req: Request) -> dict[str, Any]:
    name = collection_name(req)
    ns = f"{req.db}.{name}"
    if not req.store.exists(req.db, name):
        raise CommandError(26, f"ns does not exist: {ns}")
    batch_size = opt_int(opt_document(req.body, "cursor") or {}, "batchSize")
    docs = _index_docs(req.store, req.db, name)
    cursor_id, batch, extra = req.cursors.open(ns, docs, batch_size)
    return cursor_reply(cursor_id, ns, batch, "firstBatch", extra)


def _drop_indexes(req: Request) -> dict[str, Any]:
    name = collection_name(req)
    ns = f"{req.db}.{name}"
    if not req.store.exists(req.db, name):
        raise CommandError(26, f"ns not found {ns}")
    target = req.body.get("index")
    docs = _index_docs(req.store, req.db, name)
    by_name = {doc["name"]: doc for doc in docs}
    if target == "*":
        names = [n for n in by_name if n != "_id_"]
    elif isinstance(target, str):
        names = [target]
    elif isinstance(target, list) and all(isinstance(n, str) for n in target):
        names = list(target)
    elif isinstance(target, Mapping):
        names = [doc["name"] for doc in docs if doc["key"] == dict(target)]
        if not names:
            raise CommandError(27, f"can't find index with key: {dict(target)}")
    else:
        raise CommandError(14, "dropIndexes 'index' must be a string, an array or an object")
    for index_name in names:
        if index_name == "_id_":
            raise CommandError(72, "cannot drop _id index")
        if index_name not in by_name:
            raise CommandError(27, f"index not found with name [{index_name}]")
    coll = req.store.collection(req.db, name)
    for index_name in names:
        guard(partial(coll.drop_index, index_name), ns)
    return {"nIndexesWas": len(docs), "ok": 1.0}


def _list_collections(req: Request) -> dict[str, Any]:
    filter_doc = opt_document(req.body, "filter") or {}
    name_only = opt_bool(req.body, "nameOnly")
    batch_size = opt_int(opt_document(req.body, "cursor") or {}, "batchSize")
    docs: list[dict[str, Any]] = []
    for name in sorted(req.store.collection_names(req.db)):
        if name_only:
            docs.append({"name": name, "type": "collection"})
        else:
            docs.append(
                {
                    "name": name,
                    "type": "collection",
                    "options": req.store.options(req.db, name),
                    "info": {"readOnly": False, "uuid": _uuid(req.db, name)},
                    "idIndex": {"v": 2, "key": {"_id": 1}, "name": "_id_"},
                }
            )
    docs = _filtered(docs, filter_doc)
    ns = f"{req.db}.$cmd.listCollections"
    cursor_id, batch, extra = req.cursors.open(ns, docs, batch_size)
    return cursor_reply(cursor_id, ns, batch, "firstBatch", extra)


def _uuid(db: str, name: str) -> Any:
    return bson.Binary(uuid.uuid5(uuid.NAMESPACE_URL, f"mongodb:{db}.{name}").bytes, 4)


def _filtered(docs: list[dict[str, Any]], filter_doc: dict[str, Any]) -> list[dict[str, Any]]:
    if not filter_doc or not docs:
        return docs
    scratch = DataStore()
    coll = scratch.collection("scratch", "docs")
    guard(lambda: coll.insert_many([{**doc, "_id": i} for i, doc in enumerate(docs)]))
    matched = guard(lambda: list(coll.find(filter_doc, sort=[("_id", 1)])))
    return [docs[doc["_id"]] for doc in matched]


def _size_of(store: DataStore, db: str, name: str) -> int:
    coll = store.collection_store(db, name)
    if coll is None:
        return 0
    return sum(len(bson.encode(doc)) for doc in coll._documents.values())


def _list_databases(req: Request) -> dict[str, Any]:
    filter_doc = opt_document(req.body, "filter") or {}
    name_only = opt_bool(req.body, "nameOnly")
    docs: list[dict[str, Any]] = []
    total = 0
    for db in sorted(req.store.database_names()):
        size = sum(_size_of(req.store, db, name) for name in req.store.collection_names(db))
        total += size
        docs.append({"name": db, "sizeOnDisk": size, "empty": size == 0})
    docs = _filtered(docs, filter_doc)
    if name_only:
        return {"databases": [{"name": doc["name"]} for doc in docs], "ok": 1.0}
    return {"databases": docs, "totalSize": total, "totalSizeMb": total >> 20, "ok": 1.0}


def _split_ns(value: Any, field: str) -> tuple[str, str]:
    if not isinstance(value, str) or "." not in value:
        raise CommandError(73, f"Invalid namespace specified '{value}' for {field}")
    db, _, name = value.partition(".")
    if not db or not name:
        raise CommandError(73, f"Invalid namespace specified '{value}' for {field}")
    return db, name


def _rename_collection(req: Request) -> dict[str, Any]:
    if req.db != "admin":
        raise CommandError(13, "renameCollection may only be run against the admin database.")
    source = _split_ns(req.body.get("renameCollection"), "renameCollection")
    target = _split_ns(req.body.get("to"), "to")
    if not req.store.exists(*source):
        raise CommandError(26, f"Source collection {'.'.join(source)} does not exist")
    if source == target:
        raise CommandError(20, "Can't rename a collection to itself")
    if req.store.exists(*target):
        if not opt_bool(req.body, "dropTarget"):
            raise CommandError(48, f"target namespace exists: {'.'.join(target)}")
        req.store.drop(*target)
    req.cursors.close_namespace(".".join(source))
    req.store.rename(source, target)
    return {"ok": 1.0}


def _db_stats(req: Request) -> dict[str, Any]:
    names = req.store.collection_names(req.db)
    objects = 0
    size = 0
    indexes = 0
    for name in names:
        coll = req.store.collection_store(req.db, name)
        objects += len(coll._documents) if coll is not None else 0
        size += _size_of(req.store, req.db, name)
        indexes += len(_index_docs(req.store, req.db, name))
    return {
        "db": req.db,
        "collections": len(names),
        "views": 0,
        "objects": objects,
        "avgObjSize": size / objects if objects else 0,
        "dataSize": float(size),
        "storageSize": float(size),
        "indexes": indexes,
        "indexSize": 0.0,
        "ok": 1.0,
    }


def _coll_stats(req: Request) -> dict[str, Any]:
    name = collection_name(req)
    ns = f"{req.db}.{name}"
    coll = req.store.collection_store(req.db, name)
    if coll is None:
        raise CommandError(26, f"Collection [{ns}] not found.")
    count = len(coll._documents)
    size = _size_of(req.store, req.db, name)
    indexes = _index_docs(req.store, req.db, name)
    return {
        "ns": ns,
        "count": count,
        "size": size,
        "avgObjSize": size // count if count else 0,
        "storageSize": size,
        "nindexes": len(indexes),
        "indexSizes": {doc["name"]: 0 for doc in indexes},
        "totalIndexSize": 0,
        "ok": 1.0,
    }


HANDLERS: dict[str, Handler] = {
    "create": _create,
    "drop": _drop,
    "collMod": _coll_mod,
    "dropDatabase": _drop_database,
    "createIndexes": _create_indexes,
    "listIndexes": _list_indexes,
    "dropIndexes": _drop_indexes,
    "deleteIndexes": _drop_indexes,
    "listCollections": _list_collections,
    "listDatabases": _list_databases,
    "renameCollection": _rename_collection,
    "dbStats": _db_stats,
    "collStats": _coll_stats,
}
"""Command name to handler."""
