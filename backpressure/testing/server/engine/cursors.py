"""Server-side cursors: the registry of open cursors, batching, and the lazy find query.

A ``ServerCursor`` hands out a result iterator batch by batch (find results are produced lazily
by mongomock, so a large collection is copied only as far as it is read), capped at 16 MiB per
batch. Change-stream cursors never return events but carry a fresh ``postBatchResumeToken`` in
every batch, which is all drivers need to open and close them. At most ``MAX_OPEN_CURSORS`` stay
open; the oldest is dropped first (mongod times idle cursors out after 10 minutes instead).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

import bson
from bson.int64 import Int64
from mongomock import helpers

from backpressure.testing.server.engine.fields import opt_document, opt_int
from backpressure.testing.server.engine.store import DataStore, guard
from backpressure.testing.server.errors import CommandError

_patch_datetimes: Any = helpers.patch_datetime_awareness_in_document

__all__ = [
    "CursorRegistry",
    "ServerCursor",
    "cursor_reply",
    "run_find",
]

DEFAULT_FIRST_BATCH = 101
"""mongod's default size of a first batch."""


MAX_BATCH_BYTES = 16 * 1024 * 1024
"""mongod's cap on the BSON size of one batch."""

MAX_OPEN_CURSORS = 10_000
"""Open cursors kept at most; opening one more forgets the oldest."""


@dataclass
class ServerCursor:
    """An open cursor: its namespace and the documents not yet returned.

    Results come from an iterator that is consumed lazily, batch by batch, so a find over a large
    collection copies only what it returns. One document is read ahead to know whether the cursor
    is exhausted.
    """

    cursor_id: int
    """The id the client uses in getMore / killCursors."""
    ns: str
    """The namespace ``db.collection`` the cursor belongs to."""
    source: Iterator[dict[str, Any]]
    """Documents not yet returned."""
    change_stream: bool = False
    """True for a change stream (never exhausted, carries a resume token)."""
    lsid_key: Any = None
    """The id of the session that opened the cursor, if any."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Additional fields of the ``cursor`` sub-document."""
    _ahead: list[dict[str, Any]] = field(default_factory=list)
    _done: bool = False

    def next_batch(self, size: Optional[int]) -> list[dict[str, Any]]:
        """Remove and return up to ``size`` documents (up to 16 MiB when ``size`` is falsy)."""
        batch: list[dict[str, Any]] = []
        total = 0
        while not size or len(batch) < size:
            doc = self._next()
            if doc is None:
                break
            total += len(bson.encode(doc))
            if batch and total > MAX_BATCH_BYTES:
                self._ahead.append(doc)
                break
            batch.append(doc)
        if not self._ahead and not self._done:
            following = self._next()
            if following is not None:
                self._ahead.append(following)
        return batch

    def _next(self) -> Optional[dict[str, Any]]:
        if self._ahead:
            return self._ahead.pop()
        if self._done:
            return None
        doc: Optional[dict[str, Any]] = guard(lambda: next(self.source, None))
        if doc is None:
            self._done = True
        return doc

    @property
    def exhausted(self) -> bool:
        """True when nothing is left to return."""
        if self.change_stream:
            return False
        return self._done and not self._ahead


class CursorRegistry:
    """The open cursors of one engine."""

    def __init__(self) -> None:
        """Start with no cursors."""
        self._cursors: dict[int, ServerCursor] = {}
        self._ids = itertools.count(1_000_001)
        self._resume = itertools.count(1)

    def __len__(self) -> int:
        """Return the number of open cursors."""
        return len(self._cursors)

    def open(
        self,
        ns: str,
        docs: Iterable[dict[str, Any]],
        first_batch_size: Optional[int],
        *,
        single_batch: bool = False,
        change_stream: bool = False,
        lsid_key: Any = None,
    ) -> tuple[int, list[dict[str, Any]], dict[str, Any]]:
        """Register a result set and return (cursor id or 0, first batch, extra cursor fields)."""
        if first_batch_size is not None and first_batch_size < 0:
            raise CommandError(51024, "BSON field 'batchSize' value must be >= 0")
        cursor = ServerCursor(
            next(self._ids), ns, iter(docs), change_stream=change_stream, lsid_key=lsid_key
        )
        size = DEFAULT_FIRST_BATCH if first_batch_size is None else first_batch_size
        batch = [] if size == 0 and not single_batch else cursor.next_batch(size)
        if change_stream:
            cursor.extra["postBatchResumeToken"] = self.resume_token()
        if single_batch or cursor.exhausted:
            return 0, batch, cursor.extra
        self._cursors[cursor.cursor_id] = cursor
        while len(self._cursors) > MAX_OPEN_CURSORS:
            del self._cursors[next(iter(self._cursors))]
        return cursor.cursor_id, batch, cursor.extra

    def get(self, cursor_id: int) -> Optional[ServerCursor]:
        """Return an open cursor by id."""
        return self._cursors.get(cursor_id)

    def close(self, cursor_id: int) -> bool:
        """Forget a cursor; return True if it was open."""
        return self._cursors.pop(cursor_id, None) is not None

    def close_for_sessions(self, keys: set[Any]) -> None:
        """Close the cursors opened by the given sessions."""
        for cursor_id, cursor in list(self._cursors.items()):
            if cursor.lsid_key is not None and cursor.lsid_key in keys:
                del self._cursors[cursor_id]

    def close_namespace(self, ns: str) -> None:
        """Close the cursors of one namespace (after a drop or rename)."""
        for cursor_id, cursor in list(self._cursors.items()):
            if cursor.ns == ns:
                del self._cursors[cursor_id]

    def clear(self) -> None:
        """Close every cursor."""
        self._cursors.clear()

    def resume_token(self) -> dict[str, Any]:
        """Return a fresh, increasing change-stream resume token."""
        return {"_data": f"82{next(self._resume):030X}"}


def cursor_reply(
    cursor_id: int, ns: str, batch: list[dict[str, Any]], key: str, extra: Mapping[str, Any]
) -> dict[str, Any]:
    """Build ``{cursor: {id, ns, firstBatch|nextBatch, ...}, ok: 1}``."""
    cursor: dict[str, Any] = {key: batch, "id": Int64(cursor_id), "ns": ns}
    cursor.update(extra)
    return {"cursor": cursor, "ok": 1.0}


def _sort_spec(value: Any) -> Optional[list[tuple[str, int]]]:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise CommandError(14, "Expected field sort to be of type object")
    spec: list[tuple[str, int]] = []
    for key, direction in value.items():
        if isinstance(direction, Mapping):  # {$meta: ...}: ignored, mongomock cannot sort on it
            continue
        if direction not in (1, -1):
            raise CommandError(15974, f"Illegal key in $sort specification: {key}: {direction}")
        spec.append((key, int(direction)))
    return spec or None


def run_find(
    store: DataStore, db: str, coll: str, body: Mapping[str, Any], filter_field: str = "filter"
) -> Iterator[dict[str, Any]]:
    """Run a find-shaped query (filter, sort, projection, skip, limit) lazily through mongomock."""
    query = opt_document(body, filter_field) or {}
    projection = opt_document(body, "projection")
    sort = _sort_spec(body.get("sort"))
    skip = opt_int(body, "skip", 0) or 0
    limit = abs(opt_int(body, "limit", 0) or 0)
    if skip < 0:
        raise CommandError(51024, "BSON field 'skip' value must be >= 0, actual value " + str(skip))
    if not store.exists(db, coll):
        return iter(())
    collection = store.collection(db, coll)
    spec = _patch_datetimes(query)
    dataset = collection._get_dataset(spec, sort, projection, dict)
    return itertools.islice(dataset, skip, skip + limit if limit else None)
