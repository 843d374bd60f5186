"""Operations that several entity kinds share: ``aggregate``, ``createChangeStream``, ``close``."""

from __future__ import annotations

from typing import Any

from backpressure.testing.unified.entities import TestContext, maybe_await
from backpressure.testing.unified.operations.arguments import Arguments, to_list

__all__ = ["aggregate", "close", "watch"]

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


async def watch(ctx: TestContext, target: Any, raw: dict[str, Any]) -> Any:
    """``createChangeStream`` on a client, database or collection."""
    args = Arguments(ctx, "createChangeStream", raw)
    pipeline = args.optional("pipeline", [])
    kwargs = {**args.session(), **args.options(_CHANGE_STREAM_OPTIONS)}
    args.done()
    stream = await maybe_await(target.watch(pipeline, **kwargs))
    if type(stream).__module__.startswith("motor") and stream.delegate is None:
        # Motor opens change streams lazily; the format expects the aggregate to run now.
        await stream.__aenter__()
    return stream


async def aggregate(ctx: TestContext, target: Any, raw: dict[str, Any]) -> Any:
    """``aggregate`` on a database or collection."""
    args = Arguments(ctx, "aggregate", raw)
    pipeline = args.required("pipeline")
    kwargs = {**args.session(), **args.options(_AGGREGATE_OPTIONS)}
    args.done()
    return await to_list(await maybe_await(target.aggregate(pipeline, **kwargs)))


async def close(ctx: TestContext, target: Any, raw: dict[str, Any]) -> Any:
    """``close`` a cursor, change stream or client."""
    Arguments(ctx, "close", raw).done()
    await maybe_await(target.close())
    return None
