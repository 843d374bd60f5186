"""Feature detection of the installed pymongo: which retry machinery and calling conventions exist,
and the version guard that probes each seam before an adapter touches a client.

Everything here is detected from pymongo's code (attributes, signatures), never from version
strings, so an unknown future release is classified by what it actually offers.  Per-client
checks (:func:`client_has_native_backpressure`, :func:`should_retry_is_awaited`) look at the
client object itself and are what the adapters use; the module-level flags describe the
installed pymongo and are what tests gate on.  The seams' shapes are probed in
:mod:`~backpressure.adapters.seams.probes`, the known signatures of the native adapter's
positional wrappers in :mod:`~backpressure.adapters.seams.signatures`.
"""

from __future__ import annotations

import importlib
import inspect
import warnings
from collections.abc import Mapping
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


# -- the version guard: refuse a client whose seams do not match (probes.py), warn if untested -

TESTED_RANGE: tuple[tuple[int, int], tuple[int, int]] = ((4, 9), (4, 20))
"""The oldest and newest pymongo minor releases the adapters are tested with."""


class UnsupportedPymongoError(TypeError):
    """The installed pymongo lacks a private seam an adapter needs (the client is untouched)."""


def _version_text() -> str:
    """The installed pymongo version, for messages."""
    return str(getattr(pymongo, "__version__", ".".join(map(str, PYMONGO_VERSION))))


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
