"""Entity operations of the unified test format, dispatched through explicit typed tables.

Each operation is an ``async def (ctx, target, args) -> result`` listed in the table of its entity
kind (:data:`OPERATIONS`), one module per kind: ``client``, ``database``, ``collection``,
``session``, ``bucket`` (GridFS), ``cursor`` (saved cursors and change streams) and ``special`` (the
format's special test operations, on ``object: testRunner``); none is looked up by building a method
name. Operations are written once for both flavours: ``maybe_await`` awaits the coroutines an
``AsyncMongoClient`` returns and passes a sync client's values through. Unknown arguments are never
ignored: they make the test skip with the argument's name (``Unsupported``). Results are converted
to the documents the format matches (:func:`result_document`).
"""

from __future__ import annotations

from backpressure.testing.unified.operations.arguments import Operation
from backpressure.testing.unified.operations.bucket import BUCKET_OPERATIONS
from backpressure.testing.unified.operations.client import CLIENT_OPERATIONS
from backpressure.testing.unified.operations.collection import COLLECTION_OPERATIONS
from backpressure.testing.unified.operations.cursor import CURSOR_OPERATIONS
from backpressure.testing.unified.operations.database import DATABASE_OPERATIONS
from backpressure.testing.unified.operations.results import (
    partial_bulk_write_document,
    result_document,
)
from backpressure.testing.unified.operations.session import SESSION_OPERATIONS
from backpressure.testing.unified.operations.special import (
    TEST_RUNNER_OPERATIONS,
    match_event_fields,
    wait_for_events,
)

__all__ = [
    "OPERATIONS",
    "Operation",
    "match_event_fields",
    "partial_bulk_write_document",
    "result_document",
    "wait_for_events",
]

OPERATIONS: dict[str, dict[str, Operation]] = {
    "client": CLIENT_OPERATIONS,
    "database": DATABASE_OPERATIONS,
    "collection": COLLECTION_OPERATIONS,
    "session": SESSION_OPERATIONS,
    "bucket": BUCKET_OPERATIONS,
    "cursor": CURSOR_OPERATIONS,
    "testRunner": TEST_RUNNER_OPERATIONS,
}
"""Operation tables by entity kind (saved change streams and cursors are ``cursor``)."""
