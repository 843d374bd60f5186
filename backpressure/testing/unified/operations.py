"""Entity operations of the unified test format, dispatched through explicit typed tables.

Each operation is an ``async def (ctx, target, args) -> result`` listed in the table of its
entity kind (:data:`OPERATIONS`); none is looked up by building a method name. Operations are
written once for both flavours: :func:`maybe_await` awaits the coroutines an ``AsyncMongoClient``
returns and passes a sync client's values through. Unknown arguments are never ignored: they
make the test skip with the argument's name (:class:`Unsupported`). Results are converted to
the documents the format matches (``insertedId``, ``matchedCount``, ...).
"""

from __future__ import annotations

import asyncio
import importlib
import time
from collections.abc import Awaitable, Mapping
from typing import Any, Callable

from pymongo import ReturnDocument
from pymongo.operations import (
    DeleteMany,
    DeleteOne,
    IndexModel,
    InsertOne,
    ReplaceOne,
    UpdateMany,
    UpdateOne,
)
from pymongo.results import (
    BulkWriteResult,
    DeleteResult,
    InsertManyResult,
    InsertOneResult,
    UpdateResult,
)

from backpressure.testing.unified.entities import (
    TestContext,
    Unsupported,
    create_entities,
    maybe_await,
    read_concern,
    read_preference,
    write_concern,
)
from backpressure.testing.unified.events import ObservedEvent
from backpressure.testing.unified.matching import MatchError

__all__ = ["OPERATIONS", "Operation", "result_document", "wait_for_events"]

Operation = Callable[[TestContext, Any, dict[str, Any]], Awaitable[Any]]
"""``(context, target entity, arguments) -> result``."""

_Method = Callable[[Any], Callable[..., Any]]
"""Picks the bound pymongo method an operation calls, e.g. ``lambda coll: coll.delete_one``."""

_FIND_OPTIONS = {
    "batchSize": "batch_size",
    "sort": "sort",
    "limit": "limit",
    "skip": "skip",
    "projection": "projection",
    "hint": "hint",
    "collation": "collation",
    "comment": "comment",
    "maxTimeMS": "max_time_ms",
    "allowDiskUse": "allow_disk_use",
    "let": "let",
    "min": "min",
    "max": "max",
    "returnKey": "return_key",
    "showRecordId": "show_record_id",
    "noCursorTimeout": "no_cursor_timeout",
    "allowPartialResults": "allow_partial_results",
}
_AGGREGATE_OPTIONS = {
    "batchSize": "batchSize",
    "allowDiskUse": "allowDiskUse",
    "maxTimeMS": "maxTimeMS",
    "collation": "collation",
    "comment": "comment",
    "let": "let",
    "hint": "hint",
    "bypassDocumentValidation": "bypassDocumentValidation",
}
_CHANGE_STREAM_OPTIONS = {
    "batchSize": "batch_size",
    "fullDocument": "full_document",
    "fullDocumentBeforeChange": "full_document_before_change",
    "resumeAfter": "resume_after",
    "startAfter": "start_after",
    "startAtOperationTime": "start_at_operation_time",
    "maxAwaitTimeMS": "max_await_time_ms",
    "collation": "collation",
    "comment": "comment",
    "showExpandedEvents": "show_expanded_events",
}
_WRITE_OPTIONS = {"comment": "comment", "let": "let", "hint": "hint", "collation": "collation"}
_UPDATE_OPTIONS = {
    **_WRITE_OPTIONS,
    "upsert": "upsert",
    "arrayFilters": "array_filters",
    "bypassDocumentValidation": "bypass_document_validation",
    "sort": "sort",
}
_FIND_AND_MODIFY_OPTIONS = {
    **_WRITE_OPTIONS,
    "projection": "projection",
    "sort": "sort",
    "upsert": "upsert",
    "arrayFilters": "array_filters",
    "maxTimeMS": "max_time_ms",
    "bypassDocumentValidation": "bypass_document_validation",
}


class _Args:
    """The arguments of one operation; leftovers make the test skip, never pass silently."""

    def __init__(self, ctx: TestContext, operation: str, args: Mapping[str, Any]) -> None:
        """Wrap an operation's arguments."""
        self._ctx = ctx
        self._operation = operation
        self._args = dict(args)

    def required(self, key: str) -> Any:
        """A required argument."""
        if key not in self._args:
            raise ValueError(f"{self._operation}: missing argument {key!r}")
        return self._args.pop(key)

    def optional(self, key: str, default: Any = None) -> Any:
        """An optional argument."""
        return self._args.pop(key, default)

    def options(self, names: Mapping[str, str]) -> dict[str, Any]:
        """Pop the listed options, renamed to pymongo's keyword names."""
        return {names[k]: self._args.pop(k) for k in list(self._args) if k in names}

    def session(self) -> dict[str, Any]:
        """``{"session": <entity>}`` when a session is given, else ``{}``."""
        if "session" not in self._args:
            return {}
        return {"session": self._ctx.entities.get(self._args.pop("session"))}

    def done(self) -> None:
        """Raise :class:`Unsupported` for any argument nobody consumed."""
        if self._args:
            raise Unsupported(
                f"{self._operation}: arguments {sorted(self._args)} are not supported"
            )


async def _to_list(cursor: Any) -> list[Any]:
    """Drain a cursor (sync or async) and close it, also on error."""
    try:
        return list(await maybe_await(cursor.to_list()))
    finally:
        await maybe_await(cursor.close())


def result_document(value: Any) -> Any:
    """Convert pymongo result objects to the documents the format matches."""
    if isinstance(value, InsertOneResult):
        return {"insertedId": value.inserted_id}
    if isinstance(value, InsertManyResult):
        return {"insertedIds": {str(i): v for i, v in enumerate(value.inserted_ids)}}
    if isinstance(value, UpdateResult):
        doc = {
            "matchedCount": value.matched_count,
            "modifiedCount": value.modified_count,
            "upsertedCount": 0 if value.upserted_id is None else 1,
        }
        if value.upserted_id is not None:
            doc["upsertedId"] = value.upserted_id
        return doc
    if isinstance(value, DeleteResult):
        return {"deletedCount": value.deleted_count}
    if isinstance(value, BulkWriteResult):
        return {
            "deletedCount": value.deleted_count,
            "insertedCount": value.inserted_count,
            "matchedCount": value.matched_count,
            "modifiedCount": value.modified_count,
            "upsertedCount": value.upserted_count,
            "insertedIds": {},
            "upsertedIds": {str(k): v for k, v in (value.upserted_ids or {}).items()},
        }
    if type(value).__name__ == "ClientBulkWriteResult":
        return _client_bulk_result(value)
    return value


def _client_bulk_result(value: Any) -> dict[str, Any]:
    """A ``ClientBulkWriteResult`` as a document (verbose parts only when verbose)."""
    doc: dict[str, Any] = {
        "insertedCount": value.inserted_count,
        "upsertedCount": value.upserted_count,
        "matchedCount": value.matched_count,
        "modifiedCount": value.modified_count,
        "deletedCount": value.deleted_count,
    }
    if value.has_verbose_results:
        doc["insertResults"] = {
            str(i): {"insertedId": r.inserted_id} for i, r in value.insert_results.items()
        }
        doc["updateResults"] = {str(i): result_document(r) for i, r in value.update_results.items()}
        doc["deleteResults"] = {
            str(i): {"deletedCount": r.deleted_count} for i, r in value.delete_results.items()
        }
    return doc


# ---------------------------------------------------------------------------------------------
# Client operations.


async def _client_list_databases(ctx: TestContext, client: Any, raw: dict[str, Any]) -> Any:
    """``listDatabases``."""
    args = _Args(ctx, "listDatabases", raw)
    kwargs = {**args.session(), **args.options({"nameOnly": "nameOnly", "comment": "comment"})}
    if (flt := args.optional("filter")) is not None:
        kwargs["filter"] = flt
    if (authorized := args.optional("authorizedDatabases")) is not None:
        kwargs["authorizedDatabases"] = authorized
    args.done()
    return await _to_list(await maybe_await(client.list_databases(**kwargs)))


async def _client_list_database_names(ctx: TestContext, client: Any, raw: dict[str, Any]) -> Any:
    """``listDatabaseNames``."""
    args = _Args(ctx, "listDatabaseNames", raw)
    kwargs = {**args.session(), **args.options({"comment": "comment"})}
    if args.optional("filter"):
        raise Unsupported("listDatabaseNames: pymongo's list_database_names takes no filter")
    args.done()
    return await maybe_await(client.list_database_names(**kwargs))


async def _watch(ctx: TestContext, target: Any, raw: dict[str, Any]) -> Any:
    """``createChangeStream`` on a client, database or collection."""
    args = _Args(ctx, "createChangeStream", raw)
    pipeline = args.optional("pipeline", [])
    kwargs = {**args.session(), **args.options(_CHANGE_STREAM_OPTIONS)}
    args.done()
    stream = await maybe_await(target.watch(pipeline, **kwargs))
    if type(stream).__module__.startswith("motor") and stream.delegate is None:
        # Motor opens change streams lazily; the format expects the aggregate to run now.
        await stream.__aenter__()
    return stream


def _client_bulk_model(model: Mapping[str, Any]) -> Any:
    """One ``clientBulkWrite`` model as a pymongo operation with a namespace."""
    ((name, spec),) = model.items()
    spec = dict(spec)
    namespace = spec.pop("namespace")
    return _write_model(name, spec, namespace=namespace)


def _write_model(name: str, raw: Mapping[str, Any], *, namespace: str | None = None) -> Any:
    """A ``bulkWrite``/``clientBulkWrite`` request as a pymongo write model."""
    spec = dict(raw)
    ns: dict[str, Any] = {} if namespace is None else {"namespace": namespace}
    renames = {"arrayFilters": "array_filters", "collation": "collation", "hint": "hint"}
    options = {renames[k]: spec.pop(k) for k in list(spec) if k in renames}
    if "upsert" in spec:
        options["upsert"] = spec.pop("upsert")
    if "sort" in spec:
        options["sort"] = spec.pop("sort")
    if name == "insertOne":
        model: Any = InsertOne(spec.pop("document"), **ns)
    elif name == "updateOne":
        model = UpdateOne(spec.pop("filter"), spec.pop("update"), **options, **ns)
    elif name == "updateMany":
        model = UpdateMany(spec.pop("filter"), spec.pop("update"), **options, **ns)
    elif name == "replaceOne":
        model = ReplaceOne(spec.pop("filter"), spec.pop("replacement"), **options, **ns)
    elif name == "deleteOne":
        model = DeleteOne(spec.pop("filter"), **options, **ns)
    elif name == "deleteMany":
        model = DeleteMany(spec.pop("filter"), **options, **ns)
    else:
        raise Unsupported(f"bulk write model {name!r} is not supported")
    if spec:
        raise Unsupported(f"bulk write model {name}: fields {sorted(spec)} are not supported")
    return model


async def _client_bulk_write(ctx: TestContext, client: Any, raw: dict[str, Any]) -> Any:
    """``clientBulkWrite``."""
    if not hasattr(client, "bulk_write"):
        raise Unsupported("clientBulkWrite needs pymongo >= 4.9")
    args = _Args(ctx, "clientBulkWrite", raw)
    models = [_client_bulk_model(m) for m in args.required("models")]
    kwargs = {
        **args.session(),
        **args.options(
            {
                "ordered": "ordered",
                "verboseResults": "verbose_results",
                "bypassDocumentValidation": "bypass_document_validation",
                "comment": "comment",
                "let": "let",
            }
        ),
    }
    if "writeConcern" in raw:
        kwargs["write_concern"] = write_concern(args.required("writeConcern"))
    args.done()
    return await maybe_await(client.bulk_write(models, **kwargs))


# ---------------------------------------------------------------------------------------------
# Database operations.


async def _aggregate(ctx: TestContext, target: Any, raw: dict[str, Any]) -> Any:
    """``aggregate`` on a database or collection."""
    args = _Args(ctx, "aggregate", raw)
    pipeline = args.required("pipeline")
    kwargs = {**args.session(), **args.options(_AGGREGATE_OPTIONS)}
    args.done()
    return await _to_list(await maybe_await(target.aggregate(pipeline, **kwargs)))


async def _db_list_collections(ctx: TestContext, db: Any, raw: dict[str, Any]) -> Any:
    """``listCollections``."""
    args = _Args(ctx, "listCollections", raw)
    kwargs = {**args.session(), **args.options({"batchSize": "batchSize", "comment": "comment"})}
    kwargs["filter"] = args.optional("filter")
    if (name_only := args.optional("nameOnly")) is not None:
        kwargs["nameOnly"] = name_only
    args.done()
    return await _to_list(await maybe_await(db.list_collections(**kwargs)))


async def _db_list_collection_names(ctx: TestContext, db: Any, raw: dict[str, Any]) -> Any:
    """``listCollectionNames``."""
    args = _Args(ctx, "listCollectionNames", raw)
    kwargs = {**args.session(), **args.options({"comment": "comment"})}
    kwargs["filter"] = args.optional("filter")
    args.done()
    return await maybe_await(db.list_collection_names(**kwargs))


async def _db_run_command(ctx: TestContext, db: Any, raw: dict[str, Any]) -> Any:
    """``runCommand``."""
    args = _Args(ctx, "runCommand", raw)
    command = args.required("command")
    args.optional("commandName")
    kwargs = args.session()
    if (pref := args.optional("readPreference")) is not None:
        kwargs["read_preference"] = read_preference(pref)
    args.done()
    return await maybe_await(db.command(command, **kwargs))


async def _db_create_collection(ctx: TestContext, db: Any, raw: dict[str, Any]) -> Any:
    """``createCollection`` (other options are passed to the command as given)."""
    args = _Args(ctx, "createCollection", raw)
    name = args.required("collection")
    kwargs = args.session()
    extra = {k: args.required(k) for k in list(raw) if k not in ("collection", "session")}
    args.done()
    await maybe_await(db.create_collection(name, **kwargs, **extra))
    return None


async def _db_drop_collection(ctx: TestContext, db: Any, raw: dict[str, Any]) -> Any:
    """``dropCollection``."""
    args = _Args(ctx, "dropCollection", raw)
    name = args.required("collection")
    kwargs = args.session()
    args.done()
    await maybe_await(db.drop_collection(name, **kwargs))
    return None


# ---------------------------------------------------------------------------------------------
# Collection operations.


async def _coll_count_documents(ctx: TestContext, coll: Any, raw: dict[str, Any]) -> Any:
    """``countDocuments``."""
    args = _Args(ctx, "countDocuments", raw)
    flt = args.required("filter")
    kwargs = {
        **args.session(),
        **args.options(
            {
                "limit": "limit",
                "skip": "skip",
                "hint": "hint",
                "collation": "collation",
                "comment": "comment",
                "maxTimeMS": "maxTimeMS",
            }
        ),
    }
    args.done()
    return await maybe_await(coll.count_documents(flt, **kwargs))


async def _coll_estimated_document_count(ctx: TestContext, coll: Any, raw: dict[str, Any]) -> Any:
    """``estimatedDocumentCount``."""
    args = _Args(ctx, "estimatedDocumentCount", raw)
    kwargs = args.options({"maxTimeMS": "maxTimeMS", "comment": "comment"})
    args.done()
    return await maybe_await(coll.estimated_document_count(**kwargs))


async def _coll_distinct(ctx: TestContext, coll: Any, raw: dict[str, Any]) -> Any:
    """``distinct``."""
    args = _Args(ctx, "distinct", raw)
    key = args.required("fieldName")
    flt = args.optional("filter")
    kwargs = {
        **args.session(),
        **args.options({"collation": "collation", "comment": "comment", "hint": "hint"}),
    }
    args.done()
    return await maybe_await(coll.distinct(key, flt, **kwargs))


async def _coll_find(ctx: TestContext, coll: Any, raw: dict[str, Any]) -> Any:
    """``find``: all documents (the cursor is drained and closed)."""
    args = _Args(ctx, "find", raw)
    flt = args.optional("filter", {})
    kwargs = {**args.session(), **args.options(_FIND_OPTIONS)}
    args.done()
    return await _to_list(coll.find(flt, **kwargs))


async def _coll_create_find_cursor(ctx: TestContext, coll: Any, raw: dict[str, Any]) -> Any:
    """``createFindCursor``: an open cursor (save it as an entity)."""
    args = _Args(ctx, "createFindCursor", raw)
    flt = args.optional("filter", {})
    kwargs = {**args.session(), **args.options(_FIND_OPTIONS)}
    args.done()
    return coll.find(flt, **kwargs)


async def _coll_find_one(ctx: TestContext, coll: Any, raw: dict[str, Any]) -> Any:
    """``findOne``."""
    args = _Args(ctx, "findOne", raw)
    flt = args.optional("filter", {})
    kwargs = {**args.session(), **args.options(_FIND_OPTIONS)}
    args.done()
    return await maybe_await(coll.find_one(flt, **kwargs))


async def _coll_list_indexes(ctx: TestContext, coll: Any, raw: dict[str, Any]) -> Any:
    """``listIndexes``."""
    args = _Args(ctx, "listIndexes", raw)
    kwargs = {**args.session(), **args.options({"comment": "comment"})}
    if (batch := args.optional("batchSize")) is not None:
        raise Unsupported(f"listIndexes: pymongo's list_indexes takes no batchSize ({batch})")
    args.done()
    return await _to_list(await maybe_await(coll.list_indexes(**kwargs)))


async def _coll_list_index_names(ctx: TestContext, coll: Any, raw: dict[str, Any]) -> Any:
    """``listIndexNames``: pymongo has no such helper."""
    raise Unsupported("listIndexNames: pymongo has no list_index_names helper")


async def _coll_insert_one(ctx: TestContext, coll: Any, raw: dict[str, Any]) -> Any:
    """``insertOne``."""
    args = _Args(ctx, "insertOne", raw)
    document = args.required("document")
    kwargs = {
        **args.session(),
        **args.options(
            {"comment": "comment", "bypassDocumentValidation": "bypass_document_validation"}
        ),
    }
    args.done()
    return await maybe_await(coll.insert_one(document, **kwargs))


async def _coll_insert_many(ctx: TestContext, coll: Any, raw: dict[str, Any]) -> Any:
    """``insertMany``."""
    args = _Args(ctx, "insertMany", raw)
    documents = args.required("documents")
    kwargs = {
        **args.session(),
        **args.options(
            {
                "ordered": "ordered",
                "comment": "comment",
                "bypassDocumentValidation": "bypass_document_validation",
            }
        ),
    }
    args.done()
    return await maybe_await(coll.insert_many(documents, **kwargs))


def _delete(name: str, method: _Method) -> Operation:
    """``deleteOne``/``deleteMany``."""

    async def run(ctx: TestContext, coll: Any, raw: dict[str, Any]) -> Any:
        """Run the delete."""
        args = _Args(ctx, name, raw)
        flt = args.required("filter")
        kwargs = {**args.session(), **args.options(_WRITE_OPTIONS)}
        args.done()
        return await maybe_await(method(coll)(flt, **kwargs))

    run.__doc__ = f"``{name}``."
    return run


def _update(name: str, method: _Method, document_key: str) -> Operation:
    """``updateOne``/``updateMany``/``replaceOne``."""

    async def run(ctx: TestContext, coll: Any, raw: dict[str, Any]) -> Any:
        """Run the update."""
        args = _Args(ctx, name, raw)
        flt = args.required("filter")
        document = args.required(document_key)
        kwargs = {**args.session(), **args.options(_UPDATE_OPTIONS)}
        args.done()
        return await maybe_await(method(coll)(flt, document, **kwargs))

    run.__doc__ = f"``{name}``."
    return run


def _return_document(value: Any) -> Any:
    """``returnDocument: "Before" | "After"``."""
    return ReturnDocument.AFTER if str(value).lower() == "after" else ReturnDocument.BEFORE


async def _coll_find_one_and_delete(ctx: TestContext, coll: Any, raw: dict[str, Any]) -> Any:
    """``findOneAndDelete``."""
    args = _Args(ctx, "findOneAndDelete", raw)
    flt = args.required("filter")
    kwargs = {**args.session(), **args.options(_FIND_AND_MODIFY_OPTIONS)}
    args.done()
    return await maybe_await(coll.find_one_and_delete(flt, **kwargs))


def _find_one_and_modify(name: str, method: _Method, document_key: str) -> Operation:
    """``findOneAndReplace``/``findOneAndUpdate``."""

    async def run(ctx: TestContext, coll: Any, raw: dict[str, Any]) -> Any:
        """Run the findAndModify."""
        args = _Args(ctx, name, raw)
        flt = args.required("filter")
        document = args.required(document_key)
        kwargs = {**args.session(), **args.options(_FIND_AND_MODIFY_OPTIONS)}
        if "returnDocument" in raw:
            kwargs["return_document"] = _return_document(args.required("returnDocument"))
        args.done()
        return await maybe_await(method(coll)(flt, document, **kwargs))

    run.__doc__ = f"``{name}``."
    return run


async def _coll_bulk_write(ctx: TestContext, coll: Any, raw: dict[str, Any]) -> Any:
    """``bulkWrite``."""
    args = _Args(ctx, "bulkWrite", raw)
    requests = []
    for request in args.required("requests"):
        ((name, spec),) = request.items()
        requests.append(_write_model(name, spec))
    kwargs = {
        **args.session(),
        **args.options(
            {
                "ordered": "ordered",
                "comment": "comment",
                "let": "let",
                "bypassDocumentValidation": "bypass_document_validation",
            }
        ),
    }
    args.done()
    return await maybe_await(coll.bulk_write(requests, **kwargs))


async def _coll_create_index(ctx: TestContext, coll: Any, raw: dict[str, Any]) -> Any:
    """``createIndex``."""
    args = _Args(ctx, "createIndex", raw)
    keys = list(args.required("keys").items())
    kwargs = args.session()
    options = {k: args.required(k) for k in list(raw) if k not in ("keys", "session")}
    args.done()
    return await maybe_await(coll.create_indexes([IndexModel(keys, **options)], **kwargs))


async def _coll_drop_index(ctx: TestContext, coll: Any, raw: dict[str, Any]) -> Any:
    """``dropIndex``."""
    args = _Args(ctx, "dropIndex", raw)
    name = args.required("name")
    kwargs = {**args.session(), **args.options({"comment": "comment"})}
    args.done()
    await maybe_await(coll.drop_index(name, **kwargs))
    return None


async def _coll_drop_indexes(ctx: TestContext, coll: Any, raw: dict[str, Any]) -> Any:
    """``dropIndexes``."""
    args = _Args(ctx, "dropIndexes", raw)
    kwargs = {**args.session(), **args.options({"comment": "comment"})}
    args.done()
    await maybe_await(coll.drop_indexes(**kwargs))
    return None


async def _coll_drop(ctx: TestContext, coll: Any, raw: dict[str, Any]) -> Any:
    """``drop`` (the collection entity's own collection)."""
    args = _Args(ctx, "drop", raw)
    kwargs = args.session()
    args.done()
    await maybe_await(coll.drop(**kwargs))
    return None


# ---------------------------------------------------------------------------------------------
# Session operations.


async def _session_start_transaction(ctx: TestContext, session: Any, raw: dict[str, Any]) -> Any:
    """``startTransaction``."""
    args = _Args(ctx, "startTransaction", raw)
    kwargs: dict[str, Any] = {}
    if "readConcern" in raw:
        kwargs["read_concern"] = read_concern(args.required("readConcern"))
    if "writeConcern" in raw:
        kwargs["write_concern"] = write_concern(args.required("writeConcern"))
    if "readPreference" in raw:
        kwargs["read_preference"] = read_preference(args.required("readPreference"))
    if "maxCommitTimeMS" in raw:
        kwargs["max_commit_time_ms"] = args.required("maxCommitTimeMS")
    args.done()
    await maybe_await(session.start_transaction(**kwargs))
    return None


def _session_call(name: str, method: _Method) -> Operation:
    """A session operation without arguments."""

    async def run(ctx: TestContext, session: Any, raw: dict[str, Any]) -> Any:
        """Call the session method."""
        _Args(ctx, name, raw).done()
        await maybe_await(method(session)())
        return None

    run.__doc__ = f"``{name}``."
    return run


# ---------------------------------------------------------------------------------------------
# Cursor and change stream operations.


async def _iterate_until_document_or_error(
    ctx: TestContext, cursor: Any, raw: dict[str, Any]
) -> Any:
    """``iterateUntilDocumentOrError``."""
    _Args(ctx, "iterateUntilDocumentOrError", raw).done()
    return await maybe_await(cursor.next())


async def _iterate_once(ctx: TestContext, cursor: Any, raw: dict[str, Any]) -> Any:
    """``iterateOnce``."""
    _Args(ctx, "iterateOnce", raw).done()
    return await maybe_await(cursor.try_next())


async def _close(ctx: TestContext, target: Any, raw: dict[str, Any]) -> Any:
    """``close`` a cursor, change stream or client."""
    _Args(ctx, "close", raw).done()
    await maybe_await(target.close())
    return None


# ---------------------------------------------------------------------------------------------
# Test runner operations.


async def _runner_fail_point(ctx: TestContext, _: Any, raw: dict[str, Any]) -> Any:
    """``failPoint``: configure it through the named client (on the primary) and remember it."""
    args = _Args(ctx, "failPoint", raw)
    client = ctx.entities.client(args.required("client")).client
    fail_point = args.required("failPoint")
    args.done()
    await maybe_await(client.admin.command(fail_point))
    ctx.fail_points.append((client, fail_point["configureFailPoint"]))
    return None


async def _runner_targeted_fail_point(ctx: TestContext, _: Any, raw: dict[str, Any]) -> Any:
    """``targetedFailPoint``: without mongos pinning the session's server is the primary."""
    if ctx.topology in ("sharded", "load-balanced"):
        raise Unsupported("targetedFailPoint on a sharded deployment (mongos pinning)")
    args = _Args(ctx, "targetedFailPoint", raw)
    session = ctx.entities.get(args.required("session"))
    fail_point = args.required("failPoint")
    args.done()
    client = session.client
    await maybe_await(client.admin.command(fail_point))
    ctx.fail_points.append((client, fail_point["configureFailPoint"]))
    return None


async def _runner_create_entities(ctx: TestContext, _: Any, raw: dict[str, Any]) -> Any:
    """``createEntities``."""
    args = _Args(ctx, "createEntities", raw)
    docs = args.required("entities")
    args.done()
    await create_entities(ctx, docs)
    return None


def _matching_events(ctx: TestContext, client_id: str, event: Mapping[str, Any]) -> int:
    """How many recorded events of a client match ``{eventName: {fields}}``."""
    ((name, fields),) = event.items()
    recorder = ctx.entities.client(client_id).recorder
    if name not in recorder.observe:
        raise Unsupported(f"event {name!r} is not observed by client {client_id!r}")
    count = 0
    for observed in recorder.named(name):
        try:
            match_event_fields(ctx, fields, observed)
        except MatchError:
            continue
        count += 1
    return count


def match_event_fields(ctx: TestContext, fields: Mapping[str, Any], event: ObservedEvent) -> None:
    """Match an expected event's fields; ``command`` and ``reply`` are root-level documents."""
    matcher = ctx.get_matcher()
    for key, value in fields.items():
        actual = event.fields.get(key)
        if key not in event.fields:
            raise Unsupported(f"{event.name}.{key} is not supported by the runner")
        matcher.match(value, actual, root=key in ("command", "reply"), path=f"{event.name}.{key}")


async def wait_for_events(
    ctx: TestContext, client_id: str, event: Mapping[str, Any], count: int, timeout: float = 10.0
) -> None:
    """Wait until ``count`` matching events were recorded (raise on timeout)."""
    deadline = time.monotonic() + timeout
    while _matching_events(ctx, client_id, event) < count:
        if time.monotonic() > deadline:
            found = _matching_events(ctx, client_id, event)
            raise AssertionError(f"waitForEvent: {found} of {count} events {event!r} in {timeout}s")
        await asyncio.sleep(0.01)


async def _runner_wait_for_event(ctx: TestContext, _: Any, raw: dict[str, Any]) -> Any:
    """``waitForEvent``."""
    args = _Args(ctx, "waitForEvent", raw)
    client_id = args.required("client")
    event = args.required("event")
    count = args.required("count")
    args.done()
    await wait_for_events(ctx, client_id, event, count)
    return None


async def _runner_assert_event_count(ctx: TestContext, _: Any, raw: dict[str, Any]) -> Any:
    """``assertEventCount``."""
    args = _Args(ctx, "assertEventCount", raw)
    client_id = args.required("client")
    event = args.required("event")
    count = args.required("count")
    args.done()
    found = _matching_events(ctx, client_id, event)
    if found != count:
        raise AssertionError(f"assertEventCount: expected {count} events {event!r}, got {found}")
    return None


async def _runner_assert_session_transaction_state(
    ctx: TestContext, _: Any, raw: dict[str, Any]
) -> Any:
    """``assertSessionTransactionState``."""
    args = _Args(ctx, "assertSessionTransactionState", raw)
    session = ctx.entities.get(args.required("session"))
    state = args.required("state")
    args.done()
    names = {
        "none": "NONE",
        "starting": "STARTING",
        "in_progress": "IN_PROGRESS",
        "committed": "COMMITTED",
        "aborted": "ABORTED",
    }
    # The format asserts on the driver's transaction state, which pymongo keeps private.
    txn_state = importlib.import_module("pymongo.synchronous.client_session")._TxnState
    inner = session.delegate if type(session).__module__.startswith("motor") else session
    actual = inner._transaction.state
    if actual != getattr(txn_state, names[state]):
        raise AssertionError(f"session transaction state: expected {state}, got {actual}")
    return None


def _last_two_lsids(ctx: TestContext, client_id: str) -> tuple[Any, Any]:
    """The lsids of the last two commandStartedEvents of a client."""
    started = ctx.entities.client(client_id).recorder.named("commandStartedEvent")
    if len(started) < 2:
        raise AssertionError(f"client {client_id!r} has fewer than two commandStartedEvents")
    return started[-2].fields["command"].get("lsid"), started[-1].fields["command"].get("lsid")


async def _runner_assert_same_lsid(ctx: TestContext, _: Any, raw: dict[str, Any]) -> Any:
    """``assertSameLsidOnLastTwoCommands``."""
    args = _Args(ctx, "assertSameLsidOnLastTwoCommands", raw)
    first, second = _last_two_lsids(ctx, args.required("client"))
    args.done()
    if first != second:
        raise AssertionError(f"lsids differ: {first} != {second}")
    return None


async def _runner_assert_different_lsid(ctx: TestContext, _: Any, raw: dict[str, Any]) -> Any:
    """``assertDifferentLsidOnLastTwoCommands``."""
    args = _Args(ctx, "assertDifferentLsidOnLastTwoCommands", raw)
    first, second = _last_two_lsids(ctx, args.required("client"))
    args.done()
    if first == second:
        raise AssertionError(f"lsids are the same: {first}")
    return None


async def _runner_wait(ctx: TestContext, _: Any, raw: dict[str, Any]) -> Any:
    """``wait``: sleep ``ms`` milliseconds."""
    args = _Args(ctx, "wait", raw)
    ms = args.required("ms")
    args.done()
    await asyncio.sleep(ms / 1000.0)
    return None


CLIENT_OPERATIONS: dict[str, Operation] = {
    "listDatabases": _client_list_databases,
    "listDatabaseNames": _client_list_database_names,
    "createChangeStream": _watch,
    "clientBulkWrite": _client_bulk_write,
    "close": _close,
}
"""Operations on client entities."""

DATABASE_OPERATIONS: dict[str, Operation] = {
    "aggregate": _aggregate,
    "listCollections": _db_list_collections,
    "listCollectionNames": _db_list_collection_names,
    "runCommand": _db_run_command,
    "createChangeStream": _watch,
    "createCollection": _db_create_collection,
    "dropCollection": _db_drop_collection,
}
"""Operations on database entities."""

COLLECTION_OPERATIONS: dict[str, Operation] = {
    "aggregate": _aggregate,
    "countDocuments": _coll_count_documents,
    "estimatedDocumentCount": _coll_estimated_document_count,
    "distinct": _coll_distinct,
    "find": _coll_find,
    "createFindCursor": _coll_create_find_cursor,
    "findOne": _coll_find_one,
    "listIndexes": _coll_list_indexes,
    "listIndexNames": _coll_list_index_names,
    "createChangeStream": _watch,
    "insertOne": _coll_insert_one,
    "insertMany": _coll_insert_many,
    "deleteOne": _delete("deleteOne", lambda coll: coll.delete_one),
    "deleteMany": _delete("deleteMany", lambda coll: coll.delete_many),
    "replaceOne": _update("replaceOne", lambda coll: coll.replace_one, "replacement"),
    "updateOne": _update("updateOne", lambda coll: coll.update_one, "update"),
    "updateMany": _update("updateMany", lambda coll: coll.update_many, "update"),
    "findOneAndDelete": _coll_find_one_and_delete,
    "findOneAndReplace": _find_one_and_modify(
        "findOneAndReplace", lambda coll: coll.find_one_and_replace, "replacement"
    ),
    "findOneAndUpdate": _find_one_and_modify(
        "findOneAndUpdate", lambda coll: coll.find_one_and_update, "update"
    ),
    "bulkWrite": _coll_bulk_write,
    "createIndex": _coll_create_index,
    "dropIndex": _coll_drop_index,
    "dropIndexes": _coll_drop_indexes,
    "drop": _coll_drop,
}
"""Operations on collection entities."""

SESSION_OPERATIONS: dict[str, Operation] = {
    "startTransaction": _session_start_transaction,
    "commitTransaction": _session_call("commitTransaction", lambda s: s.commit_transaction),
    "abortTransaction": _session_call("abortTransaction", lambda s: s.abort_transaction),
    "endSession": _session_call("endSession", lambda s: s.end_session),
}
"""Operations on session entities."""

CURSOR_OPERATIONS: dict[str, Operation] = {
    "iterateUntilDocumentOrError": _iterate_until_document_or_error,
    "iterateOnce": _iterate_once,
    "close": _close,
}
"""Operations on cursor and change stream entities."""

TEST_RUNNER_OPERATIONS: dict[str, Operation] = {
    "failPoint": _runner_fail_point,
    "targetedFailPoint": _runner_targeted_fail_point,
    "createEntities": _runner_create_entities,
    "waitForEvent": _runner_wait_for_event,
    "assertEventCount": _runner_assert_event_count,
    "assertSessionTransactionState": _runner_assert_session_transaction_state,
    "assertSameLsidOnLastTwoCommands": _runner_assert_same_lsid,
    "assertDifferentLsidOnLastTwoCommands": _runner_assert_different_lsid,
    "wait": _runner_wait,
}
"""Operations with ``object: testRunner``."""

OPERATIONS: dict[str, dict[str, Operation]] = {
    "client": CLIENT_OPERATIONS,
    "database": DATABASE_OPERATIONS,
    "collection": COLLECTION_OPERATIONS,
    "session": SESSION_OPERATIONS,
    "cursor": CURSOR_OPERATIONS,
    "testRunner": TEST_RUNNER_OPERATIONS,
}
"""Operation tables by entity kind (saved change streams and cursors are ``cursor``)."""
