"""The client-level ``bulkWrite`` command (MongoDB 8.0, wire version 25).

``ops`` entries name their namespace by index into ``nsInfo``: ``{insert: i, document}``,
``{update: i, filter, updateMods, multi, upsert, arrayFilters, sort}`` and
``{delete: i, filter, multi}``. The reply holds the totals and a cursor over per-operation results
(only the failures with ``errorsOnly: true``); an ordered bulk stops at the first failure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from backpressure.testing.server.engine.cursors import cursor_reply
from backpressure.testing.server.engine.fields import opt_bool, opt_document, opt_int
from backpressure.testing.server.engine.request import Handler, Request
from backpressure.testing.server.engine.store import guard
from backpressure.testing.server.engine.writes import apply_update, insert_document, sort_pairs
from backpressure.testing.server.errors import CommandError

__all__ = ["HANDLERS"]


def _namespaces(body: Mapping[str, Any]) -> list[tuple[str, str]]:
    info = body.get("nsInfo")
    if not isinstance(info, list) or not info:
        raise CommandError(14, "BSON field 'bulkWrite.nsInfo' is missing or is not an array")
    out: list[tuple[str, str]] = []
    for entry in info:
        ns = entry.get("ns") if isinstance(entry, Mapping) else None
        if not isinstance(ns, str) or "." not in ns:
            raise CommandError(73, f"Invalid namespace specified '{ns}'")
        db, _, coll = ns.partition(".")
        out.append((db, coll))
    return out


def _bulk_write(req: Request) -> dict[str, Any]:
    if req.db != "admin":
        raise CommandError(13, "bulkWrite may only be run against the admin database.")
    ops = req.body.get("ops")
    if not isinstance(ops, list):
        raise CommandError(14, "BSON field 'bulkWrite.ops' is missing or is not an array")
    namespaces = _namespaces(req.body)
    ordered = opt_bool(req.body, "ordered", True)
    errors_only = opt_bool(req.body, "errorsOnly")
    totals = dict.fromkeys(
        ("nErrors", "nInserted", "nMatched", "nModified", "nUpserted", "nDeleted"), 0
    )
    results: list[dict[str, Any]] = []
    for idx, op in enumerate(ops):
        try:
            result = _one(req, idx, op, namespaces, totals)
        except CommandError as exc:
            totals["nErrors"] += 1
            results.append(
                {
                    "ok": 0.0,
                    "idx": idx,
                    "code": exc.code,
                    "codeName": exc.code_name,
                    "errmsg": exc.errmsg,
                    **exc.extra,
                }
            )
            if ordered:
                break
            continue
        if not errors_only:
            results.append(result)
    ns = "admin.$cmd.bulkWrite"
    batch_size = opt_int(opt_document(req.body, "cursor") or {}, "batchSize")
    cursor_id, batch, extra = req.cursors.open(ns, results, batch_size)
    reply = cursor_reply(cursor_id, ns, batch, "firstBatch", extra)
    reply.update(totals)
    return reply


def _one(
    req: Request,
    idx: int,
    op: Any,
    namespaces: list[tuple[str, str]],
    totals: dict[str, int],
) -> dict[str, Any]:
    if not isinstance(op, Mapping) or not op:
        raise CommandError(14, "bulkWrite operation must be an object")
    kind = next(iter(op))
    ns_index = op[kind]
    if kind not in ("insert", "update", "delete"):
        raise CommandError(40415, f"Unrecognized bulkWrite operation '{kind}'")
    if isinstance(ns_index, bool) or not isinstance(ns_index, int):
        raise CommandError(14, f"BSON field '{kind}' must be a namespace index")
    if not 0 <= ns_index < len(namespaces):
        raise CommandError(2, f"namespace index {ns_index} is out of range")
    db, coll_name = namespaces[ns_index]
    ns = f"{db}.{coll_name}"
    coll = req.store.collection(db, coll_name)
    if kind == "insert":
        doc = op.get("document")
        if not isinstance(doc, dict):
            raise CommandError(14, "BSON field 'document' must be an object")
        insert_document(coll, ns, doc)
        totals["nInserted"] += 1
        return {"ok": 1.0, "idx": idx, "n": 1}
    query = opt_document(op, "filter")
    if query is None:
        raise CommandError(40414, f"BSON field 'filter' is missing in {kind} operation")
    multi = opt_bool(op, "multi")
    if kind == "delete":
        if multi:
            n = guard(lambda: coll.delete_many(query), ns).deleted_count
        else:
            n = guard(lambda: coll.delete_one(query), ns).deleted_count
        totals["nDeleted"] += n
        return {"ok": 1.0, "idx": idx, "n": n}
    if "updateMods" not in op:
        raise CommandError(40414, "BSON field 'updateMods' is missing in update operation")
    outcome = apply_update(
        coll,
        ns,
        query,
        op["updateMods"],
        upsert=opt_bool(op, "upsert"),
        multi=multi,
        array_filters=op.get("arrayFilters"),
        sort=sort_pairs(opt_document(op, "sort")),
    )
    upserted = outcome.upserted
    totals["nMatched"] += outcome.matched - (1 if upserted else 0)
    totals["nModified"] += outcome.modified
    result: dict[str, Any] = {
        "ok": 1.0,
        "idx": idx,
        "n": outcome.matched,
        "nModified": outcome.modified,
    }
    if upserted:
        totals["nUpserted"] += 1
        result["upserted"] = {"_id": outcome.upserted_id}
    return result


HANDLERS: dict[str, Handler] = {"bulkWrite": _bulk_write}
"""Command name to handler."""
