"""Backport of client backpressure for pymongo 4.9-4.16, which has no overload retries.

``install(client, state)`` puts the retry loop on one ``MongoClient`` or ``AsyncMongoClient``
(Motor clients are passed as their ``.delegate``); ``uninstall(client)`` takes it off again.
``client_kwargs(is_async=...)`` returns the private constructor arguments that tag the client's
connection pools, so connection-establishment errors are retried and the handshake announces
backpressure.  Class-level hooks are installed once and stay inert for clients that are not
enabled.  On pymongo >= 4.17 (native backpressure) nothing here is used.

Limits: a client enabled after construction (``install`` without ``client_kwargs``) labels
connection errors only on the pools of its current topology object and the pools it creates
later; a topology rebuilt afterwards (SRV resolution, fork) does not label them, and connections
opened before ``install`` keep their handshake.  Network errors during authentication are
labelled like those of the hello that precedes it.
"""

from __future__ import annotations

import threading
from typing import Any

from backpressure.adapters import seams
from backpressure.adapters.backport.shared import NATIVE_BACKPRESSURE, NATIVE_REASON, refresh_motor
from backpressure.adapters.seams import is_async_client
from backpressure.core.client_state import STATE_ATTRIBUTE, ClientState

__all__ = [
    "NATIVE_BACKPRESSURE",
    "NATIVE_REASON",
    "BackportUnavailableError",
    "client_kwargs",
    "install",
    "is_installed",
    "seam_problems",
    "uninstall",
]

_PATCH_LOCK = threading.Lock()
_patched = False


class BackportUnavailableError(RuntimeError):
    """The installed pymongo has native backpressure; the backport must not be stacked on it."""


def _require_backport() -> None:
    """Refuse to run on a pymongo that retries overload errors itself."""
    if NATIVE_BACKPRESSURE:
        raise BackportUnavailableError(NATIVE_REASON)


def _patch_classes() -> None:
    """Install the gated class-level hooks of both flavours once; refresh Motor's attributes."""
    global _patched
    with _PATCH_LOCK:
        if _patched:
            return
        from backpressure.adapters.backport import async_install as _async_backport
        from backpressure.adapters.backport import sync_install as _sync_backport

        _async_backport.patch_classes()
        _sync_backport.patch_classes()
        # Inside the lock: no thread may see the hooks installed before Motor sees them too.
        refresh_motor(_sync_backport.public_wrapped_names())
        _patched = True


def seam_problems(client: Any) -> list[str]:
    """Return the pymongo seams the backport needs that ``client`` does not match (none: fine)."""
    return seams.backport_problems(client)


def install(client: Any, state: ClientState) -> None:
    """Enable overload retries on ``client`` (a MongoClient or AsyncMongoClient) with ``state``.

    Raises:
        BackportUnavailableError: on pymongo >= 4.17.
        TypeError: if ``client`` is not a pymongo client.
    """
    _require_backport()
    from pymongo.synchronous.mongo_client import MongoClient

    is_async = is_async_client(client)
    if not is_async and not isinstance(client, MongoClient):
        raise TypeError(f"expected a MongoClient or AsyncMongoClient, got {type(client).__name__}")
    _patch_classes()
    setattr(client, STATE_ATTRIBUTE, state)
    if is_async:
        from backpressure.adapters.backport import async_install as _async_backport

        _async_backport.install_client(client)
    else:
        from backpressure.adapters.backport import sync_install as _sync_backport

        _sync_backport.install_client(client)


def uninstall(client: Any) -> None:
    """Disable overload retries on ``client``; its class-level hooks become inert (idempotent)."""
    if NATIVE_BACKPRESSURE or not is_installed(client):
        vars(client).pop(STATE_ATTRIBUTE, None)
        return
    if is_async_client(client):
        from backpressure.adapters.backport import async_install as _async_backport

        _async_backport.uninstall_client(client)
    else:
        from backpressure.adapters.backport import sync_install as _sync_backport

        _sync_backport.uninstall_client(client)
    vars(client).pop(STATE_ATTRIBUTE, None)


def is_installed(client: Any) -> bool:
    """Return True if ``install`` put the retry loop on ``client``."""
    return "_retry_internal" in vars(client)


def client_kwargs(*, is_async: bool) -> dict[str, Any]:
    """Return the private constructor arguments of an enabled client (its pool class).

    Raises:
        BackportUnavailableError: on pymongo >= 4.17.
    """
    _require_backport()
    if is_async:
        from backpressure.adapters.backport.async_pool import AsyncBackpressurePool

        return {"_pool_class": AsyncBackpressurePool}
    from backpressure.adapters.backport.sync_pool import BackpressurePool

    return {"_pool_class": BackpressurePool}
