"""The cursor commands: find, getMore, killCursors (cursor state lives in ``cursors``)."""

from __future__ import annotations

from typing import Any

from backpressure.testing.server.engine.cursors import cursor_reply, run_find
from backpressure.testing.server.engine.fields import opt_bool, opt_int
from backpressure.testing.server.engine.request import (
    Handler,
    Request,
    collection_name,
    session_key_of,
)
from backpressure.testing.server.errors import CommandError

__all__ = ["HANDLERS"]


def _find(req: Request) -> dict[str, Any]:
    coll = collection_name(req)
    batch_size = opt_int(req.body, "batchSize")
    if batch_size is not None and batch_size < 0:
        raise CommandError(51024, "BSON field 'batchSize' value must be >= 0")
    limit = opt_int(req.body, "limit", 0) or 0
    single = opt_bool(req.body, "singleBatch") or limit < 0
    docs = run_find(req.store, req.db, coll, req.body)
    ns = f"{req.db}.{coll}"
    if limit and batch_size:
        batch_size = min(batch_size, abs(limit))
    cursor_id, batch, extra = req.cursors.open(
        ns, docs, batch_size, single_batch=single, lsid_key=session_key_of(req)
    )
    return cursor_reply(cursor_id, ns, batch, "firstBatch", extra)


def _get_more(req: Request) -> dict[str, Any]:
    cursor_id = req.body.get("getMore")
    if isinstance(cursor_id, bool) or not isinstance(cursor_id, int):
        raise CommandError(14, "Field 'getMore' must be of type long in: getMore")
    coll = collection_name(req, "collection", virtual=True)
    batch_size = opt_int(req.body, "batchSize")
    if batch_size is not None and batch_size < 0:
        raise CommandError(51024, "BSON field 'batchSize' value must be >= 0")
    cursor = req.cursors.get(int(cursor_id))
    if cursor is None:
        raise CommandError(43, f"cursor id {cursor_id} not found")
    ns = f"{req.db}.{coll}"
    if cursor.ns != ns:
        raise CommandError(
            13,
            f"Requested getMore on namespace '{ns}', but cursor belongs to a different "
            f"namespace {cursor.ns}",
        )
    batch = cursor.next_batch(batch_size)
    if cursor.change_stream:
        cursor.extra["postBatchResumeToken"] = req.cursors.resume_token()
    returned_id = cursor.cursor_id
    if cursor.exhausted:
        req.cursors.close(cursor.cursor_id)
        returned_id = 0
    return cursor_reply(returned_id, ns, batch, "nextBatch", cursor.extra)


def _kill_cursors(req: Request) -> dict[str, Any]:
    collection_name(req, virtual=True)
    ids = req.body.get("cursors")
    if not isinstance(ids, list):
        raise CommandError(14, "Field 'cursors' must be of type array in: killCursors")
    killed: list[Any] = []
    not_found: list[Any] = []
    for cursor_id in ids:
        if isinstance(cursor_id, bool) or not isinstance(cursor_id, int):
            raise CommandError(14, "Field 'cursors' must be an array of cursor ids (longs)")
        (killed if req.cursors.close(int(cursor_id)) else not_found).append(cursor_id)
    return {
        "cursorsKilled": killed,
        "cursorsNotFound": not_found,
        "cursorsAlive": [],
        "cursorsUnknown": [],
        "ok": 1.0,
    }


HANDLERS: dict[str, Handler] = {
    "find": _find,
    "getMore": _get_more,
    "killCursors": _kill_cursors,
}
"""Command name to handler."""
