"""pymongo result objects as the documents the unified format matches.

Unacknowledged (``w: 0``) results become ``{acknowledged: false}``: their counts are unknown and
pymongo raises when they are read. ``bulkWrite`` results carry ``insertedIds`` only when the
runner knows them (:func:`bulk_write_document`, from the requests it sent): pymongo's
``BulkWriteResult`` does not report them, and the format allows them to be absent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pymongo.results import (
    BulkWriteResult,
    DeleteResult,
    InsertManyResult,
    InsertOneResult,
    UpdateResult,
)

__all__ = [
    "UNACKNOWLEDGED",
    "bulk_write_document",
    "partial_bulk_write_document",
    "result_document",
]

UNACKNOWLEDGED: Mapping[str, Any] = {"acknowledged": False}
"""The result document of an unacknowledged write."""


def result_document(value: Any) -> Any:
    """Convert pymongo result objects to the documents the format matches."""
    single = (InsertOneResult, InsertManyResult, UpdateResult, DeleteResult)
    if isinstance(value, single) and not value.acknowledged:
        return dict(UNACKNOWLEDGED)
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
        return bulk_write_document(value, None)
    if type(value).__name__ == "ClientBulkWriteResult":
        return _client_bulk_result(value)
    return value


def bulk_write_document(
    result: BulkWriteResult, inserted: Mapping[int, Mapping[str, Any]] | None
) -> dict[str, Any]:
    """A ``BulkWriteResult`` as a document; ``insertedIds`` when the inserted documents are known.

    ``inserted`` maps the index of each ``insertOne`` request to its document: after a
    successful bulk write each was inserted with the ``_id`` pymongo set on it before sending.
    """
    if not result.acknowledged:
        return dict(UNACKNOWLEDGED)
    doc: dict[str, Any] = {
        "deletedCount": result.deleted_count,
        "insertedCount": result.inserted_count,
        "matchedCount": result.matched_count,
        "modifiedCount": result.modified_count,
        "upsertedCount": result.upserted_count,
        "upsertedIds": {str(k): v for k, v in (result.upserted_ids or {}).items()},
    }
    if inserted is not None:
        doc["insertedIds"] = {str(i): document["_id"] for i, document in inserted.items()}
    return doc


def partial_bulk_write_document(details: Mapping[str, Any]) -> dict[str, Any]:
    """What a ``BulkWriteError`` reports as written (its ``details``), as a result document.

    ``insertedIds`` is left out: the error does not say which inserts were written before it.
    """
    upserted = details.get("upserted") or []
    return {
        "deletedCount": details.get("nRemoved", 0),
        "insertedCount": details.get("nInserted", 0),
        "matchedCount": details.get("nMatched", 0),
        "modifiedCount": details.get("nModified", 0),
        "upsertedCount": details.get("nUpserted", 0),
        "upsertedIds": {str(u["index"]): u["_id"] for u in upserted},
    }


def _client_bulk_result(value: Any) -> dict[str, Any]:
    """A ``ClientBulkWriteResult`` as a document (verbose parts only when verbose)."""
    if not value.acknowledged:
        return dict(UNACKNOWLEDGED)
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
        doc["updateResults"] = {
            str(i): _client_update_result(r) for i, r in value.update_results.items()
        }
        doc["deleteResults"] = {
            str(i): {"deletedCount": r.deleted_count} for i, r in value.delete_results.items()
        }
    return doc


def _client_update_result(value: UpdateResult) -> dict[str, Any]:
    """One verbose ``clientBulkWrite`` update result: the format has no ``upsertedCount`` here."""
    doc: dict[str, Any] = {
        "matchedCount": value.matched_count,
        "modifiedCount": value.modified_count,
    }
    if value.upserted_id is not None:
        doc["upsertedId"] = value.upserted_id
    return doc
