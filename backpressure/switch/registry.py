"""Process-wide listeners (``backpressure.register``) and the enabled clients they reach.

Like ``pymongo.monitoring.register``, a registered listener applies to every client enabled
afterwards.  The clients enabled so far are tracked weakly (an unreferenced client is dropped,
a closed one is skipped), so that metrics can also be attached to clients that were enabled
before them.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from backpressure.core.client_state import ClientState
from backpressure.core.events import check_listener

__all__ = [
    "enabled_states",
    "register",
    "registered_listeners",
    "track",
    "unregister",
    "untrack",
]

_LOCK = threading.Lock()
_LISTENERS: tuple[Any, ...] = ()
_CLIENTS: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()


def register(listener: Any) -> None:
    """Add ``listener`` to every client enabled from now on (no-op if already registered).

    ``listener`` implements at least one method of ``RetryListener`` (``retried``,
    ``gave_up``), ``OperationListener`` (``operation_finished``), ``PacingListener``
    (``waited``, ``refused``) or ``HedgeListener`` (``hedged``): the rule of ``enable``'s
    ``listeners`` and of the ``backpressure_listeners`` keyword.  Clients enabled before keep
    their listeners.

    Raises:
        InvalidPolicyError: ``listener`` implements no such method (an ``InvalidListenerError``,
            from ``backpressure.core.events``, which is also a ``TypeError``).
    """
    global _LISTENERS
    check_listener(listener, "backpressure.register()'s argument")
    with _LOCK:
        if not any(existing is listener for existing in _LISTENERS):
            _LISTENERS = (*_LISTENERS, listener)


def unregister(listener: Any) -> None:
    """Stop adding ``listener`` to clients enabled from now on (no-op if not registered)."""
    global _LISTENERS
    with _LOCK:
        _LISTENERS = tuple(existing for existing in _LISTENERS if existing is not listener)


def registered_listeners() -> tuple[Any, ...]:
    """Return the registered listeners, in registration order."""
    return _LISTENERS


def track(client: Any, state: ClientState) -> None:
    """Remember that ``client`` (a pymongo client) is enabled with ``state``."""
    with _LOCK:
        _CLIENTS[id(client)] = client


def untrack(client: Any) -> None:
    """Forget ``client``."""
    with _LOCK:
        if _CLIENTS.get(id(client)) is client:
            del _CLIENTS[id(client)]


def enabled_states() -> list[tuple[Any, ClientState]]:
    """Return ``(client, state)`` for every live, open, enabled client.

    A closed client is left out: pymongo 4 clients cannot be used after ``close()``.
    """
    from backpressure.core.client_state import STATE_ATTRIBUTE

    with _LOCK:
        clients = list(_CLIENTS.values())
    found = []
    for client in clients:
        if getattr(client, "_closed", False) is True:
            continue
        state = getattr(client, STATE_ATTRIBUTE, None)
        if isinstance(state, ClientState):
            found.append((client, state))
    return found
