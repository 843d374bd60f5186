"""The known signatures of the methods the native adapter wraps (pymongo >= 4.17): with one of
them it installs its positional wrappers (the fastest), else wrappers that forward ``*args`` and
``**kwargs``; :func:`signature_report` says which, for people.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Optional

from backpressure.adapters.seams.versions import _version_text

_EMPTY = inspect.Parameter.empty

_RETRY_INTERNAL_4_17: tuple[tuple[str, Any], ...] = (
    ("self", _EMPTY),
    ("func", _EMPTY),
    ("session", _EMPTY),
    ("bulk", _EMPTY),
    ("operation", _EMPTY),
    ("is_read", False),
    ("address", None),
    ("read_pref", None),
    ("retryable", False),
    ("operation_id", None),
    ("is_run_command", False),
    ("is_aggregate_write", False),
)

NATIVE_RETRY_INTERNAL_SIGNATURES: Mapping[str, tuple[tuple[str, Any], ...]] = {
    "4.17-4.20.0": _RETRY_INTERNAL_4_17,
    "4.20.1": (*_RETRY_INTERNAL_4_17, ("conn_mgr", None)),
}
"""``MongoClient._retry_internal``'s known signatures (names and defaults), by the pymongo
releases that have them: with one of these the native adapter's wrapper takes the parameters by
name and forwards them positionally, without ``*args`` and ``**kwargs`` (the success path's
biggest cost); see :func:`native_signature`.  4.20.1 added ``conn_mgr`` (a load-balanced
cursor's pinned connection, so that its getMore can be retried on overload)."""

NATIVE_SELECT_SERVER_SIGNATURE: tuple[tuple[str, Any], ...] = (
    ("self", _EMPTY),
    ("server_selector", _EMPTY),
    ("session", _EMPTY),
    ("operation", _EMPTY),
    ("address", None),
    ("deprioritized_servers", None),
    ("operation_id", None),
)
"""``MongoClient._select_server`` of pymongo 4.17-4.20.1 (names and defaults), as above."""


def _signature(owner: Any, name: str) -> Optional[tuple[tuple[str, Any], ...]]:
    """Return ``owner.name``'s parameters as (name, default) pairs, or None.

    None when it is missing, has no signature, or takes anything but plain positional-or-keyword
    parameters (``*args``, keyword-only...).
    """
    function = getattr(owner, name, None)
    if not callable(function):
        return None
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return None
    if not all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in parameters):
        return None
    return tuple((p.name, p.default) for p in parameters)


def _same_signature(
    found: Optional[tuple[tuple[str, Any], ...]], expected: tuple[tuple[str, Any], ...]
) -> bool:
    """Whether ``found`` has exactly ``expected``'s names and defaults, in order."""
    return (
        found is not None
        and len(found) == len(expected)
        and all(
            f_name == e_name and (f_default is e_default or f_default == e_default)
            for (f_name, f_default), (e_name, e_default) in zip(found, expected)
        )
    )


def native_signature(client: Any) -> Optional[str]:
    """Name the known ``_retry_internal`` signature ``client`` has (None: not a known one).

    The key of :data:`NATIVE_RETRY_INTERNAL_SIGNATURES` (e.g. ``"4.20.1"``) when
    ``_retry_internal`` has one of them and ``_select_server`` is
    :data:`NATIVE_SELECT_SERVER_SIGNATURE`: the native adapter then installs its positional
    wrappers (the fastest).  Any other signature that :func:`native_problems` accepts gets
    wrappers that forward ``*args, **kwargs``; :func:`signature_report` says why.
    """
    cls = type(client)
    if _FORWARDING_ONLY or not _same_signature(
        _signature(cls, "_select_server"), NATIVE_SELECT_SERVER_SIGNATURE
    ):
        return None
    found = _signature(cls, "_retry_internal")
    for releases, expected in NATIVE_RETRY_INTERNAL_SIGNATURES.items():
        if _same_signature(found, expected):
            return releases
    return None


_FORWARDING_ONLY: list[bool] = []


@contextmanager
def forwarding_only() -> Iterator[None]:
    """While inside, :func:`native_signature` knows no signature: clients enabled get the
    forwarding wrappers (the overhead benchmark measures their cost against the positional ones).
    """
    _FORWARDING_ONLY.append(True)
    try:
        yield
    finally:
        _FORWARDING_ONLY.pop()


def native_exact_signatures(client: Any) -> bool:
    """Whether ``client`` gets the positional wrappers (a known signature, see above)."""
    return native_signature(client) is not None


def retry_internal_arity(client: Any) -> int:
    """How many arguments (``self`` left out) ``client``'s ``_retry_internal`` takes.

    Only meaningful for a client with a known signature (:func:`native_signature`).
    """
    found = _signature(type(client), "_retry_internal")
    return len(found) - 1 if found is not None else 0


def signature_report(cls: Any) -> str:
    """Say, for people, whether a client class's wrapped methods have a known signature.

    For example ``"pymongo 4.21.0: MongoClient._retry_internal has parameters (...) not in the
    known signatures (4.17-4.20.0: (...); 4.20.1: (...))"``, or ``"... known signature 4.20.1"``.
    """
    head = f"pymongo {_version_text()}: {cls.__name__}"
    problems = []
    found = _signature(cls, "_retry_internal")
    known = [r for r, e in NATIVE_RETRY_INTERNAL_SIGNATURES.items() if _same_signature(found, e)]
    if not known:
        shown = _shown(found, cls, "_retry_internal")
        expected = "; ".join(
            f"{releases}: {tuple(n for n, _ in sig[1:])}"
            for releases, sig in NATIVE_RETRY_INTERNAL_SIGNATURES.items()
        )
        problems.append(
            f"{head}._retry_internal has parameters {shown} not in the known signatures"
            f" ({expected})"
        )
    select = _signature(cls, "_select_server")
    if not _same_signature(select, NATIVE_SELECT_SERVER_SIGNATURE):
        problems.append(
            f"{head}._select_server has parameters {_shown(select, cls, '_select_server')}, not"
            f" the known {tuple(n for n, _ in NATIVE_SELECT_SERVER_SIGNATURE[1:])}"
        )
    if problems:
        return "; ".join(problems) + " (the adapter falls back to its forwarding wrappers)"
    return f"{head} has the known _retry_internal signature {known[0]}"


def _shown(found: Optional[tuple[tuple[str, Any], ...]], cls: Any, name: str) -> str:
    """Show a method's parameter names (``self`` left out), for :func:`signature_report`."""
    if found is not None:
        return str(tuple(n for n, _ in found[1:]))
    try:
        return str(inspect.signature(getattr(cls, name)))
    except (TypeError, ValueError, AttributeError):
        return "(missing)"
