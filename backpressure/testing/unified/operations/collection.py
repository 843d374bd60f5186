"""Operations on collection entities (reads, writes, bulk writes, indexes)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pymongo import ReturnDocument
from pymongo.operations import IndexModel

from backpressure.testing.unified.entities import TestContext, Unsupported, maybe_await
from backpressure.testing.unified.operations.arguments import (
    Arguments,
    Method,
    Operation,
    to_list,
)
from backpressure.testing.unified.operations.results import bulk_write_document
from backpressure.testing.unified.operations.shared import aggregate, watch
from backpressure.testing.unified.operations.write_models import write_model

__all__ = ["COLLECTION_OPERATIONS"]

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
    # find_one_and_* pass extra keywords into the command as they are: use the command's names.
    "maxTimeMS": "maxTimeMS",
    "bypassDocumentValidation": "bypassDocumentValidation",
}


async def _coll_count_documents(ctx: TestContext, coll: Any, raw: dict[str, Any]) -> Any:
    """``countDocuments``."""
    args = Arguments(ctx, "countDocuments", raw)
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
    args = Arguments(ctx, "estimatedDocumentCount", raw)
    kwargs = args.options({"maxTimeMS": "maxTimeMS", "comment": "comment"})
    args.done()
    return await maybe_await(coll.estimated_document_count(**kwargs))


async def _coll_distinct(ctx: TestContext, coll: Any, raw: dict[str, Any]) -> Any:
    """``distinct``."""
    args = Arguments(ctx, "distinct", raw)
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
    args = Arguments(ctx, "find", raw)
    flt = args.optional("filter", {})
    kwargs = {**args.session(), **args.options(_FIND_OPTIONS)}
    args.done()
    return await to_list(coll.find(flt, **kwargs))


async def _coll_create_find_cursor(ctx: TestContext, coll: Any, raw: dict[str, Any]) -> Any:
    """``createFindCursor``: an open cursor (save it as an entity)."""
    args = Arguments(ctx, "createFindCursor", raw)
    flt = args.optional("filter", {})
    kwargs = {**args.session(), **args.options(_FIND_OPTIONS)}
    args.done()
    return coll.find(flt, **kwargs)


async def _coll_find_one(ctx: TestContext, coll: Any, raw: dict[str, Any]) -> Any:
    """``findOne``."""
    args = Arguments(ctx, "findOne", raw)
    flt = args.optional("filter", {})
    kwargs = {**args.session(), **args.options(_FIND_OPTIONS)}
    args.done()
    return await maybe_await(coll.find_one(flt, **kwargs))


async def _coll_list_indexes(ctx: TestContext, coll: Any, raw: dict[str, Any]) -> Any:
    """``listIndexes``."""
    args = Arguments(ctx, "listIndexes", raw)
    kwargs = {**args.session(), **args.options({"comment": "comment"})}
    if (batch := args.optional("batchSize")) is not None:
        raise Unsupported(f"listIndexes: pymongo's list_indexes takes no batchSize ({batch})")
    args.done()
    return await to_list(await maybe_await(coll.list_indexes(**kwargs)))


async def _coll_list_index_names(ctx: TestContext, coll: Any, raw: dict[str, Any]) -> Any:
    """``listIndexNames``: pymongo has no helper, so the names of a ``listIndexes`` run."""
    args = Arguments(ctx, "listIndexNames", raw)
    kwargs = {**args.session(), **args.options({"comment": "comment"})}
    args.done()
    indexes = await to_list(await maybe_await(coll.list_indexes(**kwargs)))
    return [index["name"] for index in indexes]


async def _coll_count(ctx: TestContext, coll: Any, raw: dict[str, Any]) -> Any:
    """``count`` (deprecated; pymongo has no helper): the ``count`` command.

    Without a session it goes through ``estimated_document_count``, which passes extra keywords
    into the ``count`` command and retries it as a read. That helper refuses sessions, so with
    one the command is run as given (in a transaction, where reads are not retried).
    """
    args = Arguments(ctx, "count", raw)
    options = {"query": args.optional("filter", {})}
    options.update(
        args.options(
            {
                "skip": "skip",
                "limit": "limit",
                "hint": "hint",
                "collation": "collation",
                "comment": "comment",
                "maxTimeMS": "maxTimeMS",
            }
        )
    )
    session = args.session()
    args.done()
    if not session:
        return await maybe_await(coll.estimated_document_count(**options))
    reply = await maybe_await(
        coll.database.command(
            {"count": coll.name, **options},
            read_preference=coll.read_preference,
            **session,
        )
    )
    return reply["n"]


async def _coll_insert_one(ctx: TestContext, coll: Any, raw: dict[str, Any]) -> Any:
    """``insertOne``."""
    args = Arguments(ctx, "insertOne", raw)
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
    args = Arguments(ctx, "insertMany", raw)
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


def _delete(name: str, method: Method) -> Operation:
    """``deleteOne``/``deleteMany``."""

    async def run(ctx: TestContext, coll: Any, raw: dict[str, Any]) -> Any:
        """Run the delete."""
        args = Arguments(ctx, name, raw)
        flt = args.required("filter")
        kwargs = {**args.session(), **args.options(_WRITE_OPTIONS)}
        args.done()
        return await maybe_await(method(coll)(flt, **kwargs))

    run.__doc__ = f"``{name}``."
    return run


def _update(name: str, method: Method, document_key: str) -> Operation:
    """``updateOne``/``updateMany``/``replaceOne``."""

    async def run(ctx: TestContext, coll: Any, raw: dict[str, Any]) -> Any:
        """Run the update."""
        args = Arguments(ctx, name, raw)
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
    args = Arguments(ctx, "findOneAndDelete", raw)
    flt = args.required("filter")
    kwargs = {**args.session(), **args.options(_FIND_AND_MODIFY_OPTIONS)}
    args.done()
    return await maybe_await(coll.find_one_and_delete(flt, **kwargs))


def _find_one_and_modify(name: str, method: Method, document_key: str) -> Operation:
    """``findOneAndReplace``/``findOneAndUpdate``."""

    async def run(ctx: TestContext, coll: Any, raw: dict[str, Any]) -> Any:
        """Run the findAndModify."""
        args = Arguments(ctx, name, raw)
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
    args = Arguments(ctx, "bulkWrite", raw)
    requests = []
    inserted: dict[int, Mapping[str, Any]] = {}
    for index, request in enumerate(args.required("requests")):
        ((name, spec),) = request.items()
        requests.append(write_model(name, spec))
        if name == "insertOne":
            inserted[index] = spec["document"]  # pymongo sets its _id in place
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
    result = await maybe_await(coll.bulk_write(requests, **kwargs))
    return bulk_write_document(result, inserted)


async def _coll_create_index(ctx: TestContext, coll: Any, raw: dict[str, Any]) -> Any:
    """``createIndex``."""
    args = Arguments(ctx, "createIndex", raw)
    keys = list(args.required("keys").items())
    kwargs = args.session()
    options = {k: args.required(k) for k in list(raw) if k not in ("keys", "session")}
    args.done()
    return await maybe_await(coll.create_indexes([IndexModel(keys, **options)], **kwargs))


async def _coll_drop_index(ctx: TestContext, coll: Any, raw: dict[str, Any]) -> Any:
    """``dropIndex``."""
    args = Arguments(ctx, "dropIndex", raw)
    name = args.required("name")
    kwargs = {**args.session(), **args.options({"comment": "comment"})}
    args.done()
    await maybe_await(coll.drop_index(name, **kwargs))
    return None


async def _coll_drop_indexes(ctx: TestContext, coll: Any, raw: dict[str, Any]) -> Any:
    """``dropIndexes``."""
    args = Arguments(ctx, "dropIndexes", raw)
    kwargs = {**args.session(), **args.options({"comment": "comment"})}
    args.done()
    await maybe_await(coll.drop_indexes(**kwargs))
    return None


async def _coll_drop(ctx: TestContext, coll: Any, raw: dict[str, Any]) -> Any:
    """``drop`` (the collection entity's own collection)."""
    args = Arguments(ctx, "drop", raw)
    kwargs = args.session()
    args.done()
    await maybe_await(coll.drop(**kwargs))
    return None


async def _coll_map_reduce(ctx: TestContext, coll: Any, raw: dict[str, Any]) -> Any:
    """``mapReduce``: pymongo 4 removed its helper, and the embedded server runs no JavaScript."""
    raise Unsupported("mapReduce: pymongo 4 has no map_reduce helper (removed in 4.0)")


COLLECTION_OPERATIONS: dict[str, Operation] = {
    "aggregate": aggregate,
    "countDocuments": _coll_count_documents,
    "estimatedDocumentCount": _coll_estimated_document_count,
    "distinct": _coll_distinct,
    "find": _coll_find,
    "createFindCursor": _coll_create_find_cursor,
    "findOne": _coll_find_one,
    "listIndexes": _coll_list_indexes,
    "listIndexNames": _coll_list_index_names,
    "count": _coll_count,
    "mapReduce": _coll_map_reduce,
    "createChangeStream": watch,
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
