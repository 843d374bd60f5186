"""pymongo result objects as the documents the unified format matches."""

from __future__ import annotations

from typing import Any

from pymongo.results import (
    BulkWriteResult,
    DeleteResult,
    InsertManyResult,
    InsertOneResult,
    UpdateResult,
)

__all__ = ["result_document"]


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
