"""The namespace of each operation, read from pymongo's command monitoring for OpenTelemetry.

The retry events do not carry the database and collection an operation works on, and the
MongoDB conventions want them on its instruments (``db.namespace``, ``db.collection.name``).
``NamespaceListener``, a pymongo command listener registered once per process, notes each
command's name, database and collection in a context variable as it starts, in the thread or
task that sends it; :func:`namespace_attributes` reads them back while the operation's events are
recorded there (see ``backpressure.metrics.opentelemetry``).
"""

from __future__ import annotations

import contextvars
import threading
from typing import Optional

from pymongo import monitoring

from backpressure.metrics._attributes import AttributeValue

__all__ = [
    "NamespaceListener",
    "forget_command",
    "namespace_attributes",
    "namespace_listener",
    "register_listener",
]

_Namespace = tuple[str, str, Optional[str]]
"""(command name, database, collection or None)."""

_LAST_COMMAND: contextvars.ContextVar[Optional[_Namespace]] = contextvars.ContextVar(
    "backpressure_last_command", default=None
)
"""The last command started in this thread or task, as :class:`NamespaceListener` saw it."""


def _collection(event: monitoring.CommandStartedEvent) -> Optional[str]:
    """The collection a command names: the value of its first key when that is a string (find,
    insert, update, delete, aggregate, count, distinct, findAndModify ...), the ``collection``
    field of a getMore; None for a command on the database (an aggregate with ``1``, ping)."""
    command = event.command
    if event.command_name == "getMore":
        named = command.get("collection")
    else:
        named = command.get(event.command_name)
    return named if isinstance(named, str) and named else None


class NamespaceListener(monitoring.CommandListener):
    """Notes the database and collection of each command as it starts (see the module's
    docstring).

    It only sets a context variable, and does nothing while no reporter is open.
    """

    def __init__(self) -> None:
        """A listener that notes nothing until a reporter is open (:meth:`hold`)."""
        self._lock = threading.Lock()
        self._holders = 0

    def hold(self) -> None:
        """One more reporter reads the namespaces."""
        with self._lock:
            self._holders += 1

    def release(self) -> None:
        """One reporter fewer reads them."""
        with self._lock:
            self._holders = max(self._holders - 1, 0)

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        """Note the command's name, database and collection in the current context."""
        if self._holders:
            _LAST_COMMAND.set((event.command_name, event.database_name, _collection(event)))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        """Nothing to note."""

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        """Nothing to note."""


_LISTENER = NamespaceListener()
_REGISTERED = False
_REGISTER_LOCK = threading.Lock()


def namespace_listener() -> NamespaceListener:
    """The command listener the reporters read namespaces from, for ``event_listeners`` of a
    client created before the first reporter (later clients have it already)."""
    return _LISTENER


def register_listener() -> None:
    """Register the namespace listener with pymongo, once per process."""
    global _REGISTERED
    with _REGISTER_LOCK:
        if not _REGISTERED:
            monitoring.register(_LISTENER)
            _REGISTERED = True


def namespace_attributes(operation: object) -> dict[str, AttributeValue]:
    """``db.namespace`` and ``db.collection.name`` of ``operation``'s last command in this
    context (none when the last command noted here is another command)."""
    last = _LAST_COMMAND.get()
    if last is None or last[0] != operation:
        return {}
    _command, database, collection = last
    attributes: dict[str, AttributeValue] = {"db.namespace": database}
    if collection is not None:
        attributes["db.collection.name"] = collection
    return attributes


def forget_command() -> None:
    """Forget the last command noted in this context (an operation that sends none then gets no
    namespace rather than the previous one's)."""
    _LAST_COMMAND.set(None)
