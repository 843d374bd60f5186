"""The engine's data: mongomock stores, a fast ``_id`` lookup, and copy-on-touch workspaces.

mongomock scans every document for every query (about 1.6 µs per document). Most traffic in
benchmarks filters on ``{_id: <scalar>}``, so collections here answer such filters with a
dictionary lookup. Transactions run against a ``DataStore`` workspace whose collections are copied
from the shared store the first time the transaction touches them.
"""

from __future__ import annotations

import copy
import warnings
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from typing import Any, Callable, Optional

import mongomock
from bson import json_util
from bson.errors import BSONError
from bson.int64 import Int64
from bson.objectid import ObjectId
from mongomock import filtering, store
from pymongo.errors import InvalidName, PyMongoError

from backpressure.testing.server.engine.where import analyse_where
from backpressure.testing.server.errors import CommandError

__all__ = ["DataStore", "dotted_value", "guard", "strip_where", "where_sleep_seconds"]

_MISSING = object()
_MAX_COMMIT_LOG = 100_000  # bound on remembered (namespace, key) commit positions
_MATCH_NOTHING: dict[str, Any] = {"_id": {"$in": []}}

_SCALAR_IDS = (str, int, float, ObjectId, Int64)
_OPTIONS = "_backpressure_options"  # attribute holding a collection's create options


_MongomockCollection: Any = mongomock.Collection
_filter_applies: Any = filtering.filter_applies
_ServerStore: Any = store.ServerStore
_CollectionStore: Any = store.CollectionStore


class _DuplicateKey(mongomock.DuplicateKeyError):
    """mongomock's duplicate-key error, with the index, key pattern and value mongod reports."""

    def __init__(self, index_name: str, pattern: dict[str, Any], values: dict[str, Any]) -> None:
        super().__init__("E11000 Duplicate Key Error", 11000)
        self.index_name = index_name
        self.pattern = pattern
        self.values = values


def dotted_value(doc: Any, path: str) -> Any:
    """The value at a dotted path (array positions allowed), or None when missing."""
    for part in path.split("."):
        if isinstance(doc, Mapping):
            doc = doc.get(part)
        elif isinstance(doc, list) and part.isdigit() and int(part) < len(doc):
            doc = doc[int(part)]
        else:
            return None
    return doc


def _colliding_index(store: Any, doc: Any) -> _DuplicateKey:
    """Name the unique index a stored (updated) document now shares a key with."""
    for name, spec in store.indexes.items():
        if not spec.get("unique"):
            continue
        values = {key: dotted_value(doc, key) for key, _ in spec["key"]}
        if sum(1 for other in store._documents.values() if _filter_applies(values, other)) > 1:
            return _DuplicateKey(name, dict(spec["key"]), values)
    return _DuplicateKey("_id_", {"_id": 1}, {"_id": doc.get("_id")})


class _FastCollection(_MongomockCollection):  # type: ignore[misc]
    """A mongomock collection that answers ``{_id: <scalar>}`` filters by lookup, and reports
    which unique index an update collides with."""

    def _ensure_uniques(self, new_data: Any) -> None:
        try:
            super()._ensure_uniques(new_data)
        except mongomock.DuplicateKeyError as exc:
            raise _colliding_index(self._store, new_data) from exc

    def _iter_documents(self, filter: Any) -> Iterator[Any]:
        filter = strip_where(filter)
        store = self._store
        if type(filter) is dict and len(filter) == 1 and "_id" in filter and not store._ttl_indexes:
            value = filter["_id"]
            if isinstance(value, _SCALAR_IDS) and not isinstance(value, bool):
                doc = store._documents.get(value)
                if doc is not None and _filter_applies(filter, doc):
                    return iter((doc,))
                return iter(())
        if type(filter) is dict and "$expr" in filter:
            # mongomock's $expr raises KeyError for a field path missing from a document, where
            # mongod evaluates it as missing; such a document simply does not match here.
            if store.is_empty:
                _expr_applies(filter, {})
            return (doc for doc in list(store.documents) if _expr_applies(filter, doc))
        result: Iterator[Any] = super()._iter_documents(filter)
        return result

    def _apply_update_document(
        self, existing_document: Any, spec: Any, document: Any, was_insert: Any
    ) -> None:
        # mongomock edits the stored document in place operator by operator; a failing operator
        # would leave the earlier ones applied. mongod applies an update entirely or not at all.
        before = copy.deepcopy(existing_document)
        try:
            super()._apply_update_document(existing_document, spec, document, was_insert)
        except BaseException:
            existing_document.clear()
            existing_document.update(before)
            raise

    def _apply_update_pipeline(self, existing_document: Any, pipeline: Any, session: Any) -> None:
        # mongod keeps the _id when a pipeline's output drops it ($replaceRoot, $project).
        doc_id = existing_document.get("_id", _MISSING)
        super()._apply_update_pipeline(existing_document, pipeline, session)
        if doc_id is not _MISSING and "_id" not in existing_document:
            rest = dict(existing_document)
            existing_document.clear()
            existing_document["_id"] = doc_id
            existing_document.update(rest)


def _expr_applies(filter: Any, doc: Any) -> bool:
    try:
        return bool(_filter_applies(filter, doc))
    except KeyError:
        return False


def strip_where(filter: Any) -> Any:
    """Replace a top-level ``$where`` (JavaScript, which mongomock cannot run) by its result.

    The code is analysed by ``where.analyse_where``: it matches every document or none, and its
    ``sleep(ms)`` calls are reported by ``where_sleep_seconds`` so that the transport can delay
    the reply without blocking the engine. Code outside the understood subset raises
    ``CommandError`` (238).
    """
    if type(filter) is not dict or "$where" not in filter:
        return filter
    analysed = analyse_where(filter["$where"])
    if analysed is None:
        raise CommandError(2, "$where got bad type: a JavaScript string or code is expected")
    rest = {key: value for key, value in filter.items() if key != "$where"}
    if not analysed.matches:
        return {"$and": [rest, _MATCH_NOTHING]} if rest else _MATCH_NOTHING
    return rest


def where_sleep_seconds(filter: Any) -> float:
    """Return the ``sleep(ms)`` per document of a filter's top-level ``$where``, in seconds."""
    if not isinstance(filter, dict) or "$where" not in filter:
        return 0.0
    analysed = analyse_where(filter["$where"])
    return 0.0 if analysed is None else analysed.sleep_ms / 1000.0


class DataStore:
    """A set of databases held by mongomock (the shared store, or a transaction's workspace)."""

    def __init__(self, parent: Optional[DataStore] = None) -> None:
        """Create an empty store; with ``parent``, collections are copied from it on first touch."""
        self.server: Any = _ServerStore()
        self.client: Any = mongomock.MongoClient(_store=self.server)
        self.parent = parent
        self.touched: set[tuple[str, str]] = set()
        self._snapshots: dict[tuple[str, str], Any] = {}
        self._snapshot_seq: dict[tuple[str, str], int] = {}
        self.commit_seq = 0
        """Number of transaction commits applied to this (shared) store."""
        self.committed_at: dict[tuple[str, str, Any], int] = {}
        """(db, collection, document key) -> ``commit_seq`` of the last commit that wrote it."""

    def database(self, db: str) -> Any:
        """Return the mongomock database ``db``."""
        return self.client[db]

    def collection(self, db: str, name: str) -> Any:
        """Return the mongomock collection ``db.name`` (copied from the parent on first touch)."""
        if self.parent is not None:
            self.touch(db, name)
        database = self.client[db]
        return _FastCollection(database, name, _db_store=database._store)

    def touch(self, db: str, name: str) -> None:
        """Copy ``db.name`` from the parent store unless this workspace already has it."""
        if self.parent is None or (db, name) in self.touched:
            return
        self.touched.add((db, name))
        snapshot = _clone(self.parent.server[db]._collections.get(name), name)
        self._snapshots[(db, name)] = snapshot
        self._snapshot_seq[(db, name)] = self.parent.commit_seq
        self.server[db]._collections[name] = _clone(snapshot, name)

    def exists(self, db: str, name: str) -> bool:
        """Return True if the collection exists (has documents, indexes, or was created)."""
        if self.parent is not None and (db, name) not in self.touched:
            return self.parent.exists(db, name)
        coll = self.server[db]._collections.get(name)
        return bool(coll is not None and coll.is_created)

    def collection_store(self, db: str, name: str) -> Any:
        """Return mongomock's raw store of ``db.name`` if the collection exists."""
        if self.parent is not None:
            self.touch(db, name)
        coll = self.server[db]._collections.get(name)
        return coll if coll is not None and coll.is_created else None

    def collection_names(self, db: str) -> list[str]:
        """Return the names of the existing collections of ``db``."""
        if db not in self.server._databases:
            return []
        return [name for name, coll in self.server[db]._collections.items() if coll.is_created]

    def database_names(self) -> list[str]:
        """Return the names of databases holding at least one collection."""
        return [name for name in list(self.server._databases) if self.collection_names(name)]

    def create(self, db: str, name: str, options: Optional[dict[str, Any]] = None) -> None:
        """Create a collection (existing data is kept) and record its options when given."""
        coll = self.server[db].create_collection(name)
        if options:
            setattr(coll, _OPTIONS, dict(options))

    def options(self, db: str, name: str) -> dict[str, Any]:
        """Return the options the collection was created with."""
        coll = self.collection_store(db, name)
        return dict(getattr(coll, _OPTIONS, {})) if coll is not None else {}

    def drop(self, db: str, name: str) -> None:
        """Drop a collection and its indexes."""
        self.server[db]._collections.pop(name, None)

    def drop_database(self, db: str) -> None:
        """Drop every collection of ``db``."""
        if db in self.server._databases:
            self.server[db]._collections.clear()

    def rename(self, source: tuple[str, str], target: tuple[str, str]) -> None:
        """Move a collection (documents and indexes) to another namespace."""
        coll = self.server[source[0]]._collections.pop(source[1])
        coll.name = target[1]
        self.server[target[0]]._collections[target[1]] = coll

    def written_keys(self, db: str, name: str) -> set[Any]:
        """Keys of the documents this workspace inserted, changed or deleted in ``db.name``."""
        before = self._snapshots.get((db, name))
        mine = self.server[db]._collections.get(name)
        if before is None or mine is None:
            return set()
        old, new = before._documents, mine._documents
        return {key for key in old.keys() | new.keys() if old.get(key) != new.get(key)}

    def committed_since_snapshot(self, db: str, name: str, keys: set[Any]) -> bool:
        """True if another transaction committed a write to one of ``keys`` after our snapshot."""
        if self.parent is None:
            return False
        since = self._snapshot_seq.get((db, name), 0)
        log = self.parent.committed_at
        return any(log.get((db, name, key), 0) > since for key in keys)

    def commit_into(self, target: DataStore) -> None:
        """Apply this workspace's changes to ``target``, document by document.

        Only documents the transaction inserted, changed or deleted (compared with the snapshot
        taken on first touch) are written, so writes other sessions made meanwhile to other
        documents survive. Index changes and collection creation are carried over too.
        """
        for db, name in sorted(self.touched):
            mine = self.server[db]._collections.get(name)
            before = self._snapshots[(db, name)]
            if mine is None or not (mine.is_created or before.is_created):
                continue
            if not target.exists(db, name):
                if not mine.is_created:
                    continue
                target.create(db, name, getattr(mine, _OPTIONS, None))
            theirs = target.server[db]._collections[name]
            target.commit_seq += 1
            for key in list(before._documents) + list(mine._documents):
                old, new = before._documents.get(key), mine._documents.get(key)
                if old == new:
                    continue
                if len(target.committed_at) < _MAX_COMMIT_LOG:
                    target.committed_at[(db, name, key)] = target.commit_seq
                if new is None:
                    theirs._documents.pop(key, None)
                else:
                    theirs._documents[key] = new
            if mine.indexes != before.indexes:
                theirs.indexes = mine.indexes
                theirs._ttl_indexes = mine._ttl_indexes

    def aggregate(self, db: str, name: str, pipeline: list[Any]) -> list[dict[str, Any]]:
        """Run ``pipeline`` through mongomock on ``db.name`` and return the results."""
        coll = self.collection(db, name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return list(coll.aggregate(pipeline))


def _clone(source: Any, name: str) -> Any:
    """Deep-copy a mongomock collection store (documents, indexes, created flag)."""
    clone = _CollectionStore(name)
    if source is None:
        return clone
    clone._documents = OrderedDict(
        (key, copy.deepcopy(doc)) for key, doc in source._documents.items()
    )
    clone.indexes = copy.deepcopy(source.indexes)
    clone._ttl_indexes = copy.deepcopy(source._ttl_indexes)
    clone._is_force_created = source._is_force_created
    if hasattr(source, _OPTIONS):
        setattr(clone, _OPTIONS, copy.deepcopy(getattr(source, _OPTIONS)))
    return clone


def guard(call: Callable[[], Any], ns: str = "") -> Any:
    """Run a mongomock call, turning its exceptions into ``CommandError`` with mongod's codes."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return call()
    except CommandError:
        raise
    except _DuplicateKey as exc:
        shown = ", ".join(f"{key}: {json_util.dumps(value)}" for key, value in exc.values.items())
        raise CommandError(
            11000,
            f"E11000 duplicate key error collection: {ns} index: {exc.index_name} "
            f"dup key: {{ {shown} }}",
            extra={"keyPattern": exc.pattern, "keyValue": exc.values},
        ) from exc
    except mongomock.DuplicateKeyError as exc:
        raise CommandError(11000, f"E11000 duplicate key error collection: {ns}") from exc
    except mongomock.OperationFailure as exc:
        code = exc.code if isinstance(exc.code, int) and exc.code else 2
        raise CommandError(code, str(exc)) from exc
    except NotImplementedError as exc:
        raise CommandError(238, f"not supported by the embedded server: {exc}") from exc
    except BSONError as exc:
        raise CommandError(2, f"{type(exc).__name__}: {exc}") from exc
    except PyMongoError as exc:  # e.g. InvalidName raised by mongomock for bad collection names
        raise CommandError(73 if isinstance(exc, InvalidName) else 2, str(exc)) from exc
    except AssertionError as exc:  # mongomock validates some expressions with assert
        raise CommandError(2, f"invalid expression: {exc}") from exc
    except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
        raise CommandError(2, f"{type(exc).__name__}: {exc}") from exc
