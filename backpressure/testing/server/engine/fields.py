"""Readers for optional command-body fields, raising mongod's TypeMismatch for a wrong type."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from backpressure.testing.server.errors import CommandError

__all__ = ["opt_bool", "opt_document", "opt_int"]


def opt_document(body: Mapping[str, Any], field: str) -> Optional[dict[str, Any]]:
    """Return an optional sub-document field, or raise TypeMismatch for another type."""
    value = body.get(field)
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise CommandError(
            14, f"BSON field '{field}' is the wrong type '{type(value).__name__}', expected object"
        )
    return dict(value)


def opt_int(body: Mapping[str, Any], field: str, default: Optional[int] = None) -> Optional[int]:
    """Return an optional numeric field as an int, or raise TypeMismatch for another type."""
    value = body.get(field)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CommandError(
            14, f"BSON field '{field}' is the wrong type '{type(value).__name__}', expected number"
        )
    return int(value)


def opt_bool(body: Mapping[str, Any], field: str, default: bool = False) -> bool:
    """Return an optional boolean field (numbers accepted as mongod does)."""
    value = body.get(field)
    if value is None:
        return default
    if isinstance(value, (bool, int, float)):
        return bool(value)
    raise CommandError(
        14, f"BSON field '{field}' is the wrong type '{type(value).__name__}', expected boolean"
    )
