"""Feature detection of the installed pymongo: which retry machinery and calling conventions exist,
and the version guard that probes each seam before an adapter touches a client.

Everything here is detected from pymongo's code (attributes, signatures), never from version
strings, so an unknown future release is classified by what it actually offers.  Per-client
checks (:func:`client_has_native_backpressure`, :func:`should_retry_is_awaited`) look at the
client object itself and are what the adapters use; the module-level flags describe the
installed pymongo and are what tests gate on.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Optional

import pymongo
import pymongo.common


def _version_tuple() -> tuple[int, ...]:
    """Return the numeric leading part of ``pymongo.version_tuple`` (e.g. ``(4, 20, 0)``)."""
    numbers: list[int] = []
    for part in pymongo.version_tuple:
        if not isinstance(part, int):
            break
        numbers.append(part)
    return tuple(numbers)


PYMONGO_VERSION: tuple[int, ...] = _version_tuple()
"""The installed pymongo version as a tuple of ints (for messages and reports, not for gating)."""


def _import(name: str) -> Optional[Any]:
    """Import a module by name, or return None when it does not exist."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _native_retry_policy_classes() -> tuple[Optional[type], Optional[type]]:
    """Return pymongo's (sync, async) ``_RetryPolicy`` classes, or None where absent."""
    shared = _import("pymongo.helpers_shared")
    shared_cls = getattr(shared, "_RetryPolicy", None) if shared is not None else None
    sync_helpers = _import("pymongo.synchronous.helpers")
    async_helpers = _import("pymongo.asynchronous.helpers")
    sync_cls = getattr(sync_helpers, "_RetryPolicy", None) if sync_helpers is not None else None
    async_cls = getattr(async_helpers, "_RetryPolicy", None) if async_helpers else None
    sync_cls = sync_cls or shared_cls
    async_cls = async_cls or shared_cls
    return (
        sync_cls if isinstance(sync_cls, type) else None,
        async_cls if isinstance(async_cls, type) else None,
    )


_SYNC_POLICY, _ASYNC_POLICY = _native_retry_policy_classes()

OPTION_ATTRIBUTES: tuple[str, str] = (
    "_ClientOptions__max_adaptive_retries",
    "_ClientOptions__enable_overload_retargeting",
)
"""Private attributes behind the two ``ClientOptions`` overload-retry properties."""


def _options_support_adaptive_retries() -> bool:
    """Return True if pymongo knows maxAdaptiveRetries and enableOverloadRetargeting."""
    from pymongo.client_options import ClientOptions

    validators = getattr(pymongo.common, "URI_OPTIONS_VALIDATOR_MAP", {})
    return (
        "maxadaptiveretries" in validators
        and "enableoverloadretargeting" in validators
        and isinstance(getattr(ClientOptions, "max_adaptive_retries", None), property)
        and isinstance(getattr(ClientOptions, "enable_overload_retargeting", None), property)
    )


HAS_NATIVE_BACKPRESSURE: bool = _SYNC_POLICY is not None and _options_support_adaptive_retries()
"""pymongo has its own overload retry loop (``client._retry_policy``, ``maxAdaptiveRetries``)."""

BACKOFF_TAKES_BASE: bool = _SYNC_POLICY is not None and "base_backoff" in (
    inspect.signature(getattr(_SYNC_POLICY, "backoff")).parameters  # noqa: B009
)
"""The native loop calls ``backoff(attempt, base_backoff)`` (server baseBackoffMS handed over)."""

ASYNC_SHOULD_RETRY_AWAITED: bool = _ASYNC_POLICY is not None and (
    inspect.iscoroutinefunction(getattr(_ASYNC_POLICY, "should_retry", None))
)
"""The async native loop awaits ``should_retry`` (so our replacement must be ``async def``)."""

_ASYNC_CLIENT_MODULE = _import("pymongo.asynchronous.mongo_client")
_ASYNC_CLIENT_CLASS: Optional[type] = getattr(_ASYNC_CLIENT_MODULE, "AsyncMongoClient", None)

HAS_ASYNC_CLIENT: bool = _ASYNC_CLIENT_MODULE is not None
"""pymongo ships ``AsyncMongoClient``."""


def is_async_client(client: object) -> bool:
    """Return True for a pymongo ``AsyncMongoClient`` (not for Motor, whose delegate is sync)."""
    cls = _ASYNC_CLIENT_CLASS
    return isinstance(cls, type) and isinstance(client, cls)


def client_has_native_backpressure(client: object) -> bool:
    """Return True if this client object runs pymongo's native overload retry loop."""
    options = getattr(client, "options", None)
    return (
        HAS_NATIVE_BACKPRESSURE
        and hasattr(client, "_retry_policy")
        and hasattr(options, "max_adaptive_retries")
        and all(hasattr(options, attr) for attr in OPTION_ATTRIBUTES)
    )


_EXPLICIT_OPTION_KEYS: Mapping[str, tuple[str, str]] = {
    "maxAdaptiveRetries": ("maxadaptiveretries", "max_adaptive_retries"),
    "enableOverloadRetargeting": ("enableoverloadretargeting", "enable_overload_retargeting"),
}


def explicit_overload_options(client: object) -> dict[str, Any]:
    """Return the overload-retry options the application gave ``client`` (URI or keyword).

    Keys ``maxAdaptiveRetries`` / ``enableOverloadRetargeting``, only for those it gave: a value
    pymongo chose by default is left out.  Empty before pymongo 4.17 (no such options).
    """
    given = getattr(getattr(client, "options", None), "_options", None)
    if not isinstance(given, Mapping):
        return {}
    found: dict[str, Any] = {}
    for name, keys in _EXPLICIT_OPTION_KEYS.items():
        for key in keys:
            if key in given:
                found[name] = given[key]
                break
    return found


def should_retry_is_awaited(native_policy: object) -> bool:
    """Return True if the loop owning ``native_policy`` awaits its ``should_retry``.

    The convention is taken from the policy object pymongo built for that client: the loop and
    its own policy always agree.
    """
    method = getattr(native_policy, "should_retry", None)
    return method is not None and inspect.iscoroutinefunction(method)


# -- the version guard: probe each seam's shape before an adapter touches a client ---------------

TESTED_RANGE: tuple[tuple[int, int], tuple[int, int]] = ((4, 9), (4, 20))
"""The oldest and newest pymongo minor releases the adapters are tested with."""


class UnsupportedPymongoError(TypeError):
    """The installed pymongo lacks a private seam an adapter needs (the client is untouched)."""


def _version_text() -> str:
    """The installed pymongo version, for messages."""
    return str(getattr(pymongo, "__version__", ".".join(map(str, PYMONGO_VERSION))))


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


def guard(client: Any, problems: list[str]) -> None:
    """Refuse a client whose seams do not match; warn once on a newer, untested pymongo.

    Raises:
        UnsupportedPymongoError: naming the pymongo version and every seam that does not match.
    """
    if problems:
        raise UnsupportedPymongoError(
            f"backpressure cannot enable {type(client).__name__} on pymongo {_version_text()}: "
            + "; ".join(problems)
            + f" (tested with pymongo {_range_text()}); the client was left untouched"
        )
    if PYMONGO_VERSION[:2] > TESTED_RANGE[1]:
        _warn_untested()


def _range_text() -> str:
    """The tested range, for messages."""
    (low_major, low_minor), (high_major, high_minor) = TESTED_RANGE
    return f"{low_major}.{low_minor}-{high_major}.{high_minor}"


_WARNED: list[bool] = []


def _warn_untested() -> None:
    """Warn once per process that pymongo is newer than the tested range."""
    if _WARNED:
        return
    _WARNED.append(True)
    warnings.warn(
        f"backpressure is tested with pymongo {_range_text()}; pymongo {_version_text()} is "
        "newer, but every seam it uses matched, so it is enabled",
        UntestedPymongoWarning,
        stacklevel=4,
    )


class UntestedPymongoWarning(UserWarning):
    """pymongo is newer than the tested range (all seams matched, so backpressure is enabled)."""


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
