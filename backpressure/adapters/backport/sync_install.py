"""The backport on ``MongoClient`` (pymongo 4.9-4.16): the class-level hooks, installed once,
and what is put on one client (the sync flavour).

The sync twin ``sync_install.py`` is generated from ``async_install.py`` by ``scripts/unasync.py``:
edit the async file, then run ``python scripts/unasync.py``.
"""

from __future__ import annotations

import types
from typing import Any

from pymongo import _csot

from backpressure.adapters import seams
from backpressure.adapters.backport import shared as _shared

# isort: split
# The flavour's own modules (sync_cycle and pymongo.synchronous in the generated twin).
from pymongo.synchronous.pool import Connection as _Connection
from pymongo.synchronous.topology import Topology as _Topology

from backpressure.adapters.backport.sync_loop import _retry_internal
from backpressure.adapters.backport.sync_methods import (
    _BYPASSING_METHODS,
    _method_with_retries,
    _select_server,
    public_wrapped_names,
)
from backpressure.adapters.backport.sync_pool import (
    BackpressurePool,
    _handle_error_with_skip,
    _tag_topology,
    _untag_topology,
)

__all__ = ["install_client", "patch_classes", "public_wrapped_names", "uninstall_client"]


def patch_classes() -> list[tuple[type, str]]:
    """Install the gated class-level hooks once (idempotent); return the public names wrapped."""
    wrapped_public: list[tuple[type, str]] = []
    for owner, kind, method_name, name, run_command in _BYPASSING_METHODS:
        factory = _method_with_retries(kind, name, run_command)
        replaced = _shared.replace_attribute(owner, method_name, factory)
        if replaced and not method_name.startswith("_"):
            wrapped_public.append((owner, method_name))
    _shared.replace_attribute(_Topology, "handle_error", _handle_error_with_skip)
    _shared.replace_attribute(_Connection, "hello_cmd", _shared.hello_cmd_with_flag)
    return wrapped_public


def _process_response(self: Any, reply: Any, session: Any) -> None:
    """Instance override of ``_process_response``: hostile reply fields are made harmless.

    pymongo calls it with each command reply before it builds an error from it (except for the
    batches of bulk writes, which it checks first); see ``seams.sanitize_reply``.
    """
    if type(reply) is not dict or "errorLabels" in reply or "baseBackoffMS" in reply:
        seams.sanitize_reply(reply)
    type(self)._process_response(self, reply, session)


def install_client(client: Any) -> None:
    """Put the backport on one client (state already stored on it)."""
    client._retry_internal = types.MethodType(_csot.apply(_retry_internal), client)
    client._select_server = types.MethodType(_select_server, client)
    client._process_response = types.MethodType(_process_response, client)
    _shared.enable_topology(client)
    if not issubclass(client._topology_settings.pool_class, BackpressurePool):
        _tag_topology(client)


def uninstall_client(client: Any) -> None:
    """Remove the backport's instance attributes from one client."""
    _shared.disable_topology(client)
    vars(client).pop("_retry_internal", None)
    vars(client).pop("_select_server", None)
    vars(client).pop("_process_response", None)
    _untag_topology(client)
