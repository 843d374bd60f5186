"""Match actual values against the expectations of the unified test format.

Rules (unified-test-format "Evaluating Matches"): a root-level document may hold extra keys,
an embedded one may not (unless matched with ``$$matchAsRoot``); arrays must have the same
length and match element-wise; numbers compare by value whatever their BSON type (a bool is
not a number); a document with a single ``$$``-key is a special operator applied to the actual
value. Special operators: ``$$exists``, ``$$type``, ``$$unsetOrMatches``, ``$$matchesEntity``,
``$$matchesHexBytes``, ``$$sessionLsid``, ``$$lte``, ``$$matchAsDocument``, ``$$matchAsRoot``.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any, Callable

from bson import json_util
from bson.binary import Binary
from bson.code import Code
from bson.dbref import DBRef
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.regex import Regex
from bson.timestamp import Timestamp

__all__ = ["MISSING", "MatchError", "Matcher", "is_special_operator"]


class _Missing:
    """Marker for a key absent from the actual document."""

    def __repr__(self) -> str:
        """Show the marker as ``<missing>``."""
        return "<missing>"


MISSING: Any = _Missing()
"""The actual value of an absent key."""


class MatchError(AssertionError):
    """An actual value does not match its expectation; the message names the path."""


def is_special_operator(value: object) -> bool:
    """Whether ``value`` is a document with a single ``$$``-prefixed key."""
    return (
        isinstance(value, Mapping)
        and len(value) == 1
        and isinstance(next(iter(value)), str)
        and next(iter(value)).startswith("$$")
    )


def _is_number(value: object) -> bool:
    """Numbers compare by value; bools are not numbers."""
    return isinstance(value, (int, float, Decimal128)) and not isinstance(value, bool)


def _as_number(value: Any) -> Any:
    """Bring a numeric value to a Python type that compares with the others."""
    if isinstance(value, Decimal128):
        return value.to_decimal()
    if isinstance(value, float):
        return Decimal(repr(value)) if value == value and abs(value) != float("inf") else value
    return value


def _is_int32(value: object) -> bool:
    """A Python int (not Int64, not bool) in the int32 range."""
    return (
        isinstance(value, int)
        and not isinstance(value, (bool, Int64))
        and -(2**31) <= value < 2**31
    )


_TYPE_CHECKS: dict[str, Callable[[Any], bool]] = {
    "double": lambda v: isinstance(v, float),
    "string": lambda v: isinstance(v, str),
    "object": lambda v: isinstance(v, Mapping),
    "array": lambda v: isinstance(v, (list, tuple)),
    "binData": lambda v: isinstance(v, (bytes, Binary)),
    "objectId": lambda v: isinstance(v, ObjectId),
    "bool": lambda v: isinstance(v, bool),
    "date": lambda v: isinstance(v, datetime.datetime),
    "null": lambda v: v is None,
    "regex": lambda v: isinstance(v, (Regex, re.Pattern)),
    "dbPointer": lambda v: isinstance(v, DBRef),
    "javascript": lambda v: isinstance(v, Code) and v.scope is None,
    "javascriptWithScope": lambda v: isinstance(v, Code) and v.scope is not None,
    "int": _is_int32,
    "timestamp": lambda v: isinstance(v, Timestamp),
    "long": lambda v: isinstance(v, Int64) or (isinstance(v, int) and not isinstance(v, bool)),
    "decimal": lambda v: isinstance(v, Decimal128),
    "minKey": lambda v: isinstance(v, MinKey),
    "maxKey": lambda v: isinstance(v, MaxKey),
    "number": _is_number,
}


class Matcher:
    """Evaluate expectations; entity-aware operators look entities up through ``lookup``."""

    def __init__(
        self,
        lookup: Callable[[str], Any],
        session_lsid: Callable[[str], Mapping[str, Any]],
    ) -> None:
        """Create a matcher resolving ``$$matchesEntity`` and ``$$sessionLsid`` ids."""
        self._lookup = lookup
        self._session_lsid = session_lsid
        self._operators: dict[str, Callable[[Any, Any, bool, str], None]] = {
            "$$exists": self._op_exists,
            "$$type": self._op_type,
            "$$unsetOrMatches": self._op_unset_or_matches,
            "$$matchesEntity": self._op_matches_entity,
            "$$matchesHexBytes": self._op_matches_hex_bytes,
            "$$sessionLsid": self._op_session_lsid,
            "$$lte": self._op_lte,
            "$$matchAsDocument": self._op_match_as_document,
            "$$matchAsRoot": self._op_match_as_root,
        }

    def match(self, expected: Any, actual: Any, *, root: bool = True, path: str = "") -> None:
        """Raise :class:`MatchError` unless ``actual`` matches ``expected``."""
        where = path or "<root>"
        if is_special_operator(expected):
            name, argument = next(iter(expected.items()))
            operator = self._operators.get(name)
            if operator is None:
                raise MatchError(f"{where}: unsupported special operator {name}")
            operator(argument, actual, root, where)
            return
        if actual is MISSING:
            raise MatchError(f"{where}: expected {expected!r}, the key is missing")
        if isinstance(expected, Mapping):
            self._match_document(expected, actual, root, path)
        elif isinstance(expected, (list, tuple)):
            self._match_array(expected, actual, root, path)
        elif _is_number(expected):
            if not _is_number(actual) or _as_number(expected) != _as_number(actual):
                raise MatchError(f"{where}: expected number {expected!r}, got {actual!r}")
        elif isinstance(expected, bool) or isinstance(actual, bool):
            if expected is not actual:
                raise MatchError(f"{where}: expected {expected!r}, got {actual!r}")
        elif expected != actual:
            raise MatchError(f"{where}: expected {expected!r}, got {actual!r}")

    def _match_document(
        self, expected: Mapping[str, Any], actual: Any, root: bool, path: str
    ) -> None:
        """Match every expected key; embedded documents may not have extra keys."""
        if not isinstance(actual, Mapping):
            raise MatchError(f"{path or '<root>'}: expected a document, got {actual!r}")
        for key, value in expected.items():
            sub = f"{path}.{key}" if path else key
            self.match(value, actual.get(key, MISSING), root=False, path=sub)
        if not root:
            extra = [key for key in actual if key not in expected]
            if extra:
                raise MatchError(f"{path or '<root>'}: unexpected keys {extra} in {actual!r}")

    def _match_array(self, expected: Sequence[Any], actual: Any, root: bool, path: str) -> None:
        """Arrays match element-wise and must have the same length."""
        if not isinstance(actual, (list, tuple)):
            raise MatchError(f"{path or '<root>'}: expected an array, got {actual!r}")
        if len(expected) != len(actual):
            raise MatchError(
                f"{path or '<root>'}: expected {len(expected)} elements, got {len(actual)}: "
                f"{actual!r}"
            )
        for i, (e, a) in enumerate(zip(expected, actual)):
            self.match(e, a, root=root and isinstance(e, Mapping), path=f"{path}[{i}]")

    def _op_exists(self, argument: Any, actual: Any, root: bool, where: str) -> None:
        """``$$exists: bool``: the key is present (or absent)."""
        if bool(argument) != (actual is not MISSING):
            state = "present" if actual is not MISSING else "missing"
            raise MatchError(f"{where}: $$exists {argument!r}, but the key is {state}")

    def _op_type(self, argument: Any, actual: Any, root: bool, where: str) -> None:
        """``$$type: name | [names]``: the actual value has one of these BSON types."""
        names = argument if isinstance(argument, list) else [argument]
        for name in names:
            check = _TYPE_CHECKS.get(name)
            if check is None:
                raise MatchError(f"{where}: unknown $$type alias {name!r}")
            if actual is not MISSING and check(actual):
                return
        raise MatchError(f"{where}: expected type {argument!r}, got {actual!r}")

    def _op_unset_or_matches(self, argument: Any, actual: Any, root: bool, where: str) -> None:
        """``$$unsetOrMatches: x``: the key is absent or matches ``x``."""
        if actual is not MISSING:
            self.match(argument, actual, root=root, path=where)

    def _op_matches_entity(self, argument: Any, actual: Any, root: bool, where: str) -> None:
        """``$$matchesEntity: id``: the actual value matches a saved entity."""
        self.match(self._lookup(str(argument)), actual, root=root, path=where)

    def _op_matches_hex_bytes(self, argument: Any, actual: Any, root: bool, where: str) -> None:
        """``$$matchesHexBytes: hex``: the actual bytes equal the hex string."""
        if not isinstance(actual, bytes) or bytes(actual) != bytes.fromhex(str(argument)):
            raise MatchError(f"{where}: expected bytes {argument}, got {actual!r}")

    def _op_session_lsid(self, argument: Any, actual: Any, root: bool, where: str) -> None:
        """``$$sessionLsid: id``: the actual value is the lsid of a session entity."""
        expected = self._session_lsid(str(argument))
        if actual is MISSING or dict(actual) != dict(expected):
            raise MatchError(f"{where}: expected the lsid of session {argument}, got {actual!r}")

    def _op_lte(self, argument: Any, actual: Any, root: bool, where: str) -> None:
        """``$$lte: n``: the actual number is at most ``n``."""
        if not _is_number(actual) or _as_number(actual) > _as_number(argument):
            raise MatchError(f"{where}: expected a number <= {argument!r}, got {actual!r}")

    def _op_match_as_document(self, argument: Any, actual: Any, root: bool, where: str) -> None:
        """``$$matchAsDocument: doc``: the actual JSON string, decoded, matches ``doc``."""
        if not isinstance(actual, str):
            raise MatchError(f"{where}: expected a JSON string, got {actual!r}")
        self.match(argument, json_util.loads(actual), root=True, path=where)

    def _op_match_as_root(self, argument: Any, actual: Any, root: bool, where: str) -> None:
        """``$$matchAsRoot: doc``: match an embedded document with root rules (extra keys)."""
        self.match(argument, actual, root=True, path=where)
