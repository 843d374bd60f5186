"""pymongo 4.17's handshake flag, sent as pymongo >= 4.18 sends it (``backpressure: "2"``).

pymongo 4.17 announces backpressure in every hello with ``cmd["backpressure"] = True``, set in
``Connection._hello`` right *after* it calls ``Connection.hello_cmd()``; pymongo >= 4.18 sends
the string ``"2"`` (the handshake spec: the client backpressure spec revision), and so does the
backport for 4.9-4.16. Adding the field in ``hello_cmd`` (as the backport does) cannot work on
4.17: ``_hello`` overwrites it. So, on a pymongo whose ``_hello`` sets the boolean (detected from
its source, never from the version string), ``hello_cmd`` is wrapped once per connection class
(sync and async): for a connection whose pool belongs to an enabled client
(``pool_ref()._client_id``, the topology id, registered by :func:`enable`), it returns a dict
subclass whose ``__setitem__`` stores ``"2"`` when ``_hello`` then assigns ``True`` to
``backpressure``. The connections of other clients get pymongo's plain dict: their hellos are
unchanged. As on 4.18, every hello of an enabled client's connections carries the flag
(application, monitor and RTT connections), from the first hello after :func:`enable`;
connections that completed their handshake before it keep what they sent.
"""

from __future__ import annotations

import importlib
import inspect
import threading
import weakref
from typing import Any, Callable

__all__ = ["BOOLEAN_HANDSHAKE_FLAG", "HANDSHAKE_VALUE", "disable", "enable"]

HANDSHAKE_FIELD = "backpressure"
HANDSHAKE_VALUE = "2"
"""What pymongo >= 4.18 sends (the handshake spec's value)."""

_WRAPPED_MARK = "__backpressure_wrapped__"
_POOL_MODULES = ("pymongo.synchronous.pool", "pymongo.asynchronous.pool")
_CONNECTION_CLASSES = ("Connection", "AsyncConnection")

_ENABLED: weakref.WeakValueDictionary[Any, Any] = weakref.WeakValueDictionary()
"""Enabled clients by topology id (held weakly)."""
_LOCK = threading.Lock()


def _connection_classes() -> list[type]:
    classes = []
    for module_name in _POOL_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:  # pragma: no cover - every native pymongo has both
            continue
        for class_name in _CONNECTION_CLASSES:
            owner = getattr(module, class_name, None)
            if isinstance(owner, type) and "hello_cmd" in vars(owner):
                classes.append(owner)
    return classes


def _sets_boolean_flag(owner: type) -> bool:
    """Whether ``owner._hello`` assigns ``True`` to the handshake flag (pymongo 4.17)."""
    function = vars(owner).get("_hello")
    if function is None:
        return False
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):  # no source shipped: leave the handshake alone
        return False
    return f'cmd["{HANDSHAKE_FIELD}"] = True' in source


BOOLEAN_HANDSHAKE_FLAG: bool = any(_sets_boolean_flag(c) for c in _connection_classes())
"""True when the installed pymongo sends ``backpressure: true`` itself (4.17)."""


class _FlaggedHello(dict):  # type: ignore[type-arg]
    """A hello command that stores ``"2"`` when pymongo assigns ``True`` to the flag."""

    def __setitem__(self, key: Any, value: Any) -> None:
        if key == HANDSHAKE_FIELD and value is True:
            value = HANDSHAKE_VALUE
        super().__setitem__(key, value)


def _hello_cmd_with_string_flag(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def hello_cmd(self: Any) -> Any:
        cmd = original(self)
        pool = self.pool_ref()
        if pool is not None and getattr(pool, "_client_id", None) in _ENABLED:
            return _FlaggedHello(cmd)
        return cmd

    hello_cmd.__name__ = "hello_cmd"
    hello_cmd.__qualname__ = getattr(original, "__qualname__", "hello_cmd")
    hello_cmd.__doc__ = original.__doc__
    setattr(hello_cmd, _WRAPPED_MARK, original)
    return hello_cmd


def _patch_classes() -> None:
    for owner in _connection_classes():
        current = vars(owner)["hello_cmd"]
        if getattr(current, _WRAPPED_MARK, None) is None and _sets_boolean_flag(owner):
            owner.hello_cmd = _hello_cmd_with_string_flag(current)  # type: ignore[attr-defined]


def enable(client: Any) -> None:
    """Make ``client``'s hellos say ``"2"`` (only where pymongo itself would say ``true``)."""
    if not BOOLEAN_HANDSHAKE_FLAG:
        return
    with _LOCK:
        _patch_classes()
        _ENABLED[client._topology_settings._topology_id] = client


def disable(client: Any) -> None:
    """Give ``client``'s later hellos pymongo's own value again."""
    if not BOOLEAN_HANDSHAKE_FLAG:
        return
    with _LOCK:
        _ENABLED.pop(client._topology_settings._topology_id, None)
