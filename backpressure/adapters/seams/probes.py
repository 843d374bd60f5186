"""The version guard's probes: the shape of each private seam an adapter needs, checked on a
client before the adapter touches it (:func:`native_problems`, :func:`backport_problems`), and
the report of whether the adapters know the installed pymongo (:func:`print_report`).

Everything is detected from pymongo's code (attributes, signatures), never from version strings.
"""

from __future__ import annotations

import inspect
import sys
from typing import Any, Optional

from backpressure.adapters.seams.signatures import native_signature, signature_report
from backpressure.adapters.seams.versions import (
    HAS_NATIVE_BACKPRESSURE,
    OPTION_ATTRIBUTES,
    _import,
    _version_text,
    is_async_client,
)


def _parameters(owner: Any, name: str) -> Optional[list[str]]:
    """Return the parameter names of ``owner.name`` (a function), or None when it is absent."""
    function = getattr(owner, name, None)
    if not callable(function):
        return None
    try:
        return list(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return None


def _expect_parameters(
    problems: list[str], owner: Any, label: str, name: str, expected: list[str], *, exact: bool
) -> None:
    """Append a problem unless ``owner.name`` takes ``expected`` (first, in order; or exactly)."""
    found = _parameters(owner, name)
    if found is None:
        problems.append(f"{label}.{name} is missing")
        return
    head = found[: len(expected)]
    if head != expected or (exact and found != expected):
        problems.append(f"{label}.{name}{tuple(found)} does not take {tuple(expected)}")


_RETRY_INTERNAL_PARAMETERS = [
    "self",
    "func",
    "session",
    "bulk",
    "operation",
    "is_read",
    "address",
    "read_pref",
    "retryable",
    "operation_id",
]


def _session_problems(client: Any) -> list[str]:
    """Problems with the transaction internals both adapters use."""
    problems: list[str] = []
    flavour = "asynchronous" if is_async_client(client) else "synchronous"
    module = _import(f"pymongo.{flavour}.client_session")
    states = getattr(module, "_TxnState", None)
    if not all(hasattr(states, name) for name in ("STARTING", "IN_PROGRESS")):
        problems.append(f"pymongo.{flavour}.client_session._TxnState is missing")
    transaction = getattr(module, "_Transaction", None)
    if not callable(getattr(transaction, "starting", None)):
        problems.append(f"pymongo.{flavour}.client_session._Transaction.starting is missing")
    return problems


def native_problems(client: Any) -> list[str]:
    """Return the seams of the native adapter (pymongo >= 4.17) that ``client`` does not match."""
    cls = type(client)
    label = cls.__name__
    problems: list[str] = []
    _expect_parameters(
        problems, cls, label, "_retry_internal", _RETRY_INTERNAL_PARAMETERS[:5], exact=False
    )
    if not callable(getattr(cls, "_select_server", None)):
        problems.append(f"{label}._select_server is missing")
    _expect_parameters(
        problems, cls, label, "_process_response", ["self", "reply", "session"], exact=True
    )
    policy = getattr(client, "_retry_policy", None)
    _expect_parameters(
        problems, policy, f"{label}._retry_policy", "backoff", ["attempt"], exact=False
    )
    _expect_parameters(
        problems, policy, f"{label}._retry_policy", "should_retry", ["attempt", "delay"], exact=True
    )
    options = getattr(client, "options", None)
    for attr in OPTION_ATTRIBUTES:
        if not hasattr(options, attr):
            problems.append(f"ClientOptions.{attr} is missing")
    return problems + _session_problems(client)


def backport_problems(client: Any) -> list[str]:
    """Return the seams of the backport (pymongo 4.9-4.16) that ``client`` does not match."""
    cls = type(client)
    label = cls.__name__
    problems: list[str] = []
    _expect_parameters(
        problems, cls, label, "_retry_internal", _RETRY_INTERNAL_PARAMETERS, exact=True
    )
    _expect_parameters(
        problems,
        cls,
        label,
        "_select_server",
        [
            "self",
            "server_selector",
            "session",
            "operation",
            "address",
            "deprioritized_servers",
            "operation_id",
        ],
        exact=False,
    )
    for name in ("_checkout", "_conn_from_server"):
        if not callable(getattr(cls, name, None)):
            problems.append(f"{label}.{name} is missing")
    module = sys.modules.get(cls.__module__)
    for candidate in cls.__mro__:
        if hasattr(sys.modules.get(candidate.__module__), "_add_retryable_write_error"):
            module = sys.modules.get(candidate.__module__)
            break
    _expect_parameters(
        problems,
        module,
        "mongo_client",
        "_add_retryable_write_error",
        ["exc", "max_wire_version", "is_mongos"],
        exact=True,
    )
    return problems + _session_problems(client)


def print_report() -> int:
    """Print, for people, whether the adapters know the installed pymongo; 0 if they do, else 1.

    ``scripts/lookahead.sh`` runs it against the newest pymongo release before its tests, so that
    a release with new seams fails with a line naming the release, the method and its parameters.
    """
    if not HAS_NATIVE_BACKPRESSURE:
        print(f"pymongo {_version_text()}: no native overload loop; the backport serves it")
        return 0
    from pymongo import AsyncMongoClient, MongoClient

    known = True
    classes: tuple[type[Any], ...] = (MongoClient, AsyncMongoClient)
    for cls in classes:
        client: Any = cls(connect=False)
        try:
            known = known and native_signature(client) is not None
            print(signature_report(cls))
            for problem in native_problems(client):
                known = False
                print(f"pymongo {_version_text()}: {problem} (the adapter refuses the client)")
        finally:
            if cls is MongoClient:
                client.close()
    return 0 if known else 1
