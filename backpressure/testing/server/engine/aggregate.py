"""The aggregate command: collection pipelines (mongomock), $out, $merge, change streams, and
database-level pipelines ($listLocalSessions, $currentOp, $documents).

mongomock lacks ``$merge`` and database-level aggregation; both are implemented here on top of
its collection pipelines. A ``$changeStream`` opens a cursor that never returns events but carries
a fresh ``postBatchResumeToken`` in every batch.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from functools import partial
from typing import Any

from bson import json_util
from bson.objectid import ObjectId

from backpressure.testing.server.engine.cursors import cursor_reply
from backpressure.testing.server.engine.fields import opt_bool, opt_document, opt_int
from backpressure.testing.server.engine.request import (
    Handler,
    Request,
    collection_name,
    session_key_of,
)
from backpressure.testing.server.engine.store import DataStore, guard
from backpressure.testing.server.engine.writes import insert_document
from backpressure.testing.server.errors import CommandError

__all__ = ["HANDLERS"]


def _aggregate(req: Request) -> dict[str, Any]:
    pipeline = req.body.get("pipeline")
    if not isinstance(pipeline, list) or not all(isinstance(s, Mapping) for s in pipeline):
        raise CommandError(14, "'pipeline' option must be specified as an array")
    cursor_opts = opt_document(req.body, "cursor")
    if cursor_opts is None and not opt_bool(req.body, "explain"):
        raise CommandError(9, "The 'cursor' option is required, except for aggregate with explain")
    batch_size = opt_int(cursor_opts or {}, "batchSize")
    target = req.body.get("aggregate")
    first = next(iter(pipeline[0]), "") if pipeline else ""
    if first == "$changeStream":
        coll = "$cmd.aggregate" if target == 1 else collection_name(req)
        ns = f"{req.db}.{coll}"
        cursor_id, batch, extra = req.cursors.open(
            ns, [], batch_size, change_stream=True, lsid_key=session_key_of(req)
        )
        return cursor_reply(cursor_id, ns, batch, "firstBatch", extra)
    last = next(iter(pipeline[-1]), "") if pipeline else ""
    writes = last in ("$out", "$merge")
    if writes and req.txn is not None:
        raise CommandError(263, f"{last} cannot be used in a transaction")
    read_concern = opt_document(req.body, "readConcern") or {}
    if writes and read_concern.get("level") == "linearizable":
        raise CommandError(72, f"{last} cannot be used with a 'linearizable' read concern level")
    stages = pipeline[:-1] if writes else pipeline
    if target == 1:
        docs = _database_aggregate(req, stages)
        ns = f"{req.db}.$cmd.aggregate"
    else:
        coll = collection_name(req)
        ns = f"{req.db}.{coll}"
        docs = _run_pipeline(req, coll, stages)
    if last == "$out":
        _out(req, pipeline[-1]["$out"], docs)
        docs = []
    elif last == "$merge":
        _merge(req, pipeline[-1]["$merge"], docs)
        docs = []
    cursor_id, batch, extra = req.cursors.open(ns, docs, batch_size, lsid_key=session_key_of(req))
    return cursor_reply(cursor_id, ns, batch, "firstBatch", extra)


def _foreign_collections(pipeline: list[Any]) -> list[str]:
    """Return the collections a pipeline reads besides its own ($lookup, $unionWith, ...)."""
    names: list[str] = []
    for stage in pipeline:
        for op, spec in stage.items():
            if op in ("$lookup", "$graphLookup") and isinstance(spec, Mapping):
                target = spec.get("from")
                names.extend([target] if isinstance(target, str) else [])
                names.extend(_foreign_collections(spec.get("pipeline") or []))
            elif op == "$unionWith":
                target = spec.get("coll") if isinstance(spec, Mapping) else spec
                names.extend([target] if isinstance(target, str) else [])
            elif op == "$facet" and isinstance(spec, Mapping):
                for sub in spec.values():
                    names.extend(_foreign_collections(sub if isinstance(sub, list) else []))
    return names


def _run_pipeline(req: Request, coll: str, pipeline: list[Any]) -> list[dict[str, Any]]:
    if req.txn is not None:
        for name in _foreign_collections(pipeline):
            req.store.touch(req.db, name)
    if not req.store.exists(req.db, coll):
        return []
    return list(guard(lambda: req.store.aggregate(req.db, coll, pipeline)))


def _target(req: Request, spec: Any, stage: str) -> tuple[str, str]:
    """Resolve ``into`` / ``$out`` targets: a name, or ``{db, coll}``."""
    if isinstance(spec, str) and spec:
        return req.db, spec
    if isinstance(spec, Mapping):
        db, coll = spec.get("db", req.db), spec.get("coll")
        if isinstance(db, str) and isinstance(coll, str) and db and coll:
            return db, coll
    raise CommandError(14, f"{stage} target must be a collection name or {{db, coll}}")


def _out(req: Request, spec: Any, results: list[dict[str, Any]]) -> None:
    """Replace the target's documents with ``results`` (keeping its indexes), like $out."""
    db, name = _target(req, spec, "$out")
    ns = f"{db}.{name}"
    target = req.store.collection(db, name)
    if req.store.exists(db, name):
        guard(lambda: target.delete_many({}), ns)
    else:
        req.store.create(db, name)
    for doc in results:
        insert_document(target, ns, doc)


def _merge(req: Request, spec: Any, results: list[dict[str, Any]]) -> None:
    """Merge ``results`` into the target collection, like $merge."""
    options = spec if isinstance(spec, Mapping) else {"into": spec}
    db, name = _target(req, options.get("into"), "$merge")
    ns = f"{db}.{name}"
    on = options.get("on", "_id")
    fields = [on] if isinstance(on, str) else on
    if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields) or not fields:
        raise CommandError(51178, "$merge 'on' must be a field name or an array of field names")
    matched = options.get("whenMatched", "merge")
    not_matched = options.get("whenNotMatched", "insert")
    if matched not in ("replace", "keepExisting", "merge", "fail"):
        raise CommandError(238, f"$merge whenMatched {matched!r} is not supported")
    if not_matched not in ("insert", "discard", "fail"):
        raise CommandError(51191, f"invalid $merge whenNotMatched: {not_matched!r}")
    target = req.store.collection(db, name)
    for doc in results:
        if fields == ["_id"] and "_id" not in doc:
            doc["_id"] = ObjectId()
        selector = {field: doc.get(field) for field in fields}
        existing = guard(partial(target.find_one, selector), ns)
        if existing is None:
            if not_matched == "fail":
                raise CommandError(
                    13113, "$merge could not find a matching document in the target collection"
                )
            if not_matched == "insert":
                insert_document(target, ns, doc)
            continue
        if matched == "fail":
            shown = ", ".join(f"{key}: {json_util.dumps(value)}" for key, value in selector.items())
            raise CommandError(
                11000,
                f"E11000 duplicate key error collection: {ns} dup key: {{ {shown} }}",
                extra={"keyPattern": dict.fromkeys(fields, 1), "keyValue": selector},
            )
        if matched == "keepExisting":
            continue
        body = {k: v for k, v in doc.items() if k != "_id"}
        if matched == "replace":
            guard(partial(target.replace_one, {"_id": existing["_id"]}, body), ns)
        elif body:
            guard(partial(target.update_one, {"_id": existing["_id"]}, {"$set": body}), ns)


def _database_aggregate(req: Request, pipeline: list[Any]) -> list[dict[str, Any]]:
    first = next(iter(pipeline[0]), "") if pipeline else ""
    now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    if first == "$listLocalSessions":
        docs = [{"_id": dict(lsid), "lastUse": now} for lsid in req.sessions.known_lsids()]
    elif first == "$currentOp":
        docs = [
            {
                "type": "op",
                "active": True,
                "op": "command",
                "ns": f"{req.db}.$cmd.aggregate",
                "command": {k: v for k, v in req.body.items() if k != "lsid"},
                "connectionId": req.ctx.connection_id,
                "appName": req.ctx.app_name or "",
                "currentOpTime": now.isoformat(),
            }
        ]
    elif first == "$documents":
        docs = list(pipeline[0]["$documents"])
    else:
        raise CommandError(
            238, f"database-level aggregate stage {first or '(none)'} is not supported"
        )
    rest = pipeline[1:]
    if not rest or not docs:
        return docs
    # Stored wrapped so that documents without _id do not get one; unwrapped by the first stage.
    scratch = DataStore()
    scratch.collection("scratch", "docs").insert_many(
        [{"_id": i, "d": d} for i, d in enumerate(docs)]
    )
    stages = [{"$replaceRoot": {"newRoot": "$d"}}, *rest]
    result: list[dict[str, Any]] = guard(lambda: scratch.aggregate("scratch", "docs", stages))
    return result


def _explain(req: Request) -> dict[str, Any]:
    """A minimal query plan: every query is a collection scan here."""
    inner = opt_document(req.body, "explain")
    if not inner:
        raise CommandError(9, "explain command requires a nested object")
    name = next(iter(inner))
    target = inner.get(name)
    ns = f"{req.db}.{target}" if isinstance(target, str) else f"{req.db}.$cmd.aggregate"
    query = inner.get("filter", inner.get("query", {}))
    return {
        "queryPlanner": {
            "plannerVersion": 1,
            "namespace": ns,
            "parsedQuery": query if isinstance(query, Mapping) else {},
            "winningPlan": {"stage": "COLLSCAN"},
            "rejectedPlans": [],
        },
        "command": dict(inner),
        "ok": 1.0,
    }


HANDLERS: dict[str, Handler] = {"aggregate": _aggregate, "explain": _explain}
"""Command name to handler."""
