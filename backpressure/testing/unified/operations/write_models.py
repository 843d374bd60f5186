"""``bulkWrite`` and ``clientBulkWrite`` requests as pymongo write models."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pymongo.operations import (
    DeleteMany,
    DeleteOne,
    InsertOne,
    ReplaceOne,
    UpdateMany,
    UpdateOne,
)

from backpressure.testing.unified.entities import Unsupported

__all__ = ["write_model"]


def write_model(name: str, raw: Mapping[str, Any], *, namespace: str | None = None) -> Any:
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
