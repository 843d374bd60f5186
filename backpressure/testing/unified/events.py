"""Record a client entity's command, CMAP and SDAM events in the unified format's terms.

Every pymongo event is turned into an :class:`ObservedEvent`: the unified-format name
(``commandStartedEvent``, ``connectionCheckedOutEvent``, ``serverDescriptionChangedEvent``...),
its category (``command``, ``cmap`` or ``sdam``) and the fields the format can assert on.
Only events named in the entity's ``observeEvents`` are kept (``storeEventsAsEntities`` names
are kept too); ``configureFailPoint``, commands in ``ignoreCommandMonitoringEvents`` and, unless
``observeSensitiveCommands``, security-sensitive commands are dropped, as the format says.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from pymongo import monitoring

__all__ = [
    "CMAP_EVENTS",
    "COMMAND_EVENTS",
    "SDAM_EVENTS",
    "EventRecorder",
    "ObservedEvent",
    "SdamEventRecorder",
    "event_category",
    "recorder_for",
]

COMMAND_EVENTS = frozenset({"commandStartedEvent", "commandSucceededEvent", "commandFailedEvent"})
"""Names of command monitoring events."""
CMAP_EVENTS = frozenset(
    {
        "poolCreatedEvent",
        "poolReadyEvent",
        "poolClearedEvent",
        "poolClosedEvent",
        "connectionCreatedEvent",
        "connectionReadyEvent",
        "connectionClosedEvent",
        "connectionCheckOutStartedEvent",
        "connectionCheckOutFailedEvent",
        "connectionCheckedOutEvent",
        "connectionCheckedInEvent",
    }
)
"""Names of connection pool (CMAP) events."""
SDAM_EVENTS = frozenset(
    {
        "serverDescriptionChangedEvent",
        "serverOpeningEvent",
        "serverClosedEvent",
        "topologyDescriptionChangedEvent",
        "topologyOpeningEvent",
        "topologyClosedEvent",
        "serverHeartbeatStartedEvent",
        "serverHeartbeatSucceededEvent",
        "serverHeartbeatFailedEvent",
    }
)
"""Names of SDAM events."""

_SENSITIVE = frozenset(
    {
        "authenticate",
        "saslstart",
        "saslcontinue",
        "getnonce",
        "createuser",
        "updateuser",
        "copydbgetnonce",
        "copydbsaslstart",
        "copydb",
    }
)


def event_category(name: str) -> Optional[str]:
    """The ``eventType`` an event name belongs to, or None for an unknown name."""
    if name in COMMAND_EVENTS:
        return "command"
    if name in CMAP_EVENTS:
        return "cmap"
    if name in SDAM_EVENTS:
        return "sdam"
    return None


@dataclass(frozen=True)
class ObservedEvent:
    """One recorded event, with the fields the unified format matches."""

    name: str
    """Unified-format event name."""
    fields: dict[str, Any]
    """Matchable fields (``commandName``, ``command``, ``reason``, ``newDescription``...)."""
    address: Optional[tuple[str, int]] = None
    """The server the event concerns (for runner extensions and reports)."""
    observed_at: float = field(default_factory=time.time)
    """Wall-clock time of the event (``storeEventsAsEntities``)."""

    @property
    def category(self) -> str:
        """``command``, ``cmap`` or ``sdam``."""
        return event_category(self.name) or "unknown"


def _description(desc: Any) -> dict[str, Any]:
    """A server or topology description as the format shows it (``{"type": ...}``)."""
    type_name = getattr(desc, "server_type_name", None) or getattr(desc, "topology_type_name", "")
    return {"type": type_name}


def _command_fields(event: Any, **extra: Any) -> dict[str, Any]:
    """Fields shared by the three command events."""
    return {
        "commandName": event.command_name,
        "databaseName": getattr(event, "database_name", None),
        "requestId": event.request_id,
        "hasServiceId": event.service_id is not None,
        "hasServerConnectionId": event.server_connection_id is not None,
        **extra,
    }


class EventRecorder(monitoring.CommandListener, monitoring.ConnectionPoolListener):
    """A pymongo event listener recording the events one client entity observes.

    It is no ``ServerListener``: a client with server listeners joins its event thread on
    ``close()`` (about 0.5 s each); :func:`recorder_for` picks :class:`SdamEventRecorder` only
    for entities that observe SDAM events.
    """

    def __init__(
        self,
        observe: Iterable[str],
        *,
        ignore_commands: Iterable[str] = (),
        observe_sensitive: bool = False,
        on_event: Optional[Callable[[ObservedEvent], None]] = None,
    ) -> None:
        """Keep events named in ``observe``; ``on_event`` also sees every kept event."""
        self.observe = frozenset(observe)
        self.ignore_commands = frozenset(ignore_commands) | {"configureFailPoint"}
        self.observe_sensitive = observe_sensitive
        self.on_event = on_event
        self.events: list[ObservedEvent] = []
        self._lock = threading.Lock()
        self._muted = False

    def mute(self) -> None:
        """Stop recording (called before the runner's own clean-up commands)."""
        self._muted = True

    def of_category(self, category: str) -> list[ObservedEvent]:
        """The recorded events of one ``eventType`` in arrival order."""
        with self._lock:
            return [e for e in self.events if e.category == category]

    def named(self, name: str) -> list[ObservedEvent]:
        """The recorded events with this name."""
        with self._lock:
            return [e for e in self.events if e.name == name]

    def _add(self, name: str, fields: dict[str, Any], address: Any = None) -> None:
        """Record one event when it is observed."""
        if self._muted or name not in self.observe:
            return
        event = ObservedEvent(name, fields, tuple(address) if address else None)
        with self._lock:
            self.events.append(event)
        if self.on_event is not None:
            self.on_event(event)

    def _keep_command(self, event: Any, command: Optional[dict[str, Any]] = None) -> bool:
        """Drop ignored and security-sensitive commands."""
        name = event.command_name
        if name in self.ignore_commands:
            return False
        if self.observe_sensitive:
            return True
        if name.lower() in _SENSITIVE:
            return False
        # pymongo redacts a hello carrying speculativeAuthenticate to an empty document.
        return not (name.lower() in ("hello", "ismaster") and command is not None and not command)

    # Command monitoring.
    def started(self, event: monitoring.CommandStartedEvent) -> None:
        """Record ``commandStartedEvent``."""
        if self._keep_command(event, dict(event.command)):
            fields = _command_fields(event, command=event.command)
            self._add("commandStartedEvent", fields, event.connection_id)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        """Record ``commandSucceededEvent``."""
        if self._keep_command(event):
            fields = _command_fields(event, reply=event.reply, duration=event.duration_micros)
            self._add("commandSucceededEvent", fields, event.connection_id)

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        """Record ``commandFailedEvent``."""
        if self._keep_command(event):
            fields = _command_fields(event, failure=event.failure, duration=event.duration_micros)
            self._add("commandFailedEvent", fields, event.connection_id)

    # CMAP.
    def pool_created(self, event: monitoring.PoolCreatedEvent) -> None:
        """Record ``poolCreatedEvent``."""
        self._add("poolCreatedEvent", {}, event.address)

    def pool_ready(self, event: monitoring.PoolReadyEvent) -> None:
        """Record ``poolReadyEvent``."""
        self._add("poolReadyEvent", {}, event.address)

    def pool_cleared(self, event: monitoring.PoolClearedEvent) -> None:
        """Record ``poolClearedEvent``."""
        fields = {
            "hasServiceId": event.service_id is not None,
            "interruptInUseConnections": bool(getattr(event, "interrupt_connections", False)),
        }
        self._add("poolClearedEvent", fields, event.address)

    def pool_closed(self, event: monitoring.PoolClosedEvent) -> None:
        """Record ``poolClosedEvent``."""
        self._add("poolClosedEvent", {}, event.address)

    def connection_created(self, event: monitoring.ConnectionCreatedEvent) -> None:
        """Record ``connectionCreatedEvent``."""
        self._add("connectionCreatedEvent", {}, event.address)

    def connection_ready(self, event: monitoring.ConnectionReadyEvent) -> None:
        """Record ``connectionReadyEvent``."""
        self._add("connectionReadyEvent", {}, event.address)

    def connection_closed(self, event: monitoring.ConnectionClosedEvent) -> None:
        """Record ``connectionClosedEvent``."""
        self._add("connectionClosedEvent", {"reason": event.reason}, event.address)

    def connection_check_out_started(
        self, event: monitoring.ConnectionCheckOutStartedEvent
    ) -> None:
        """Record ``connectionCheckOutStartedEvent``."""
        self._add("connectionCheckOutStartedEvent", {}, event.address)

    def connection_check_out_failed(self, event: monitoring.ConnectionCheckOutFailedEvent) -> None:
        """Record ``connectionCheckOutFailedEvent``."""
        self._add("connectionCheckOutFailedEvent", {"reason": event.reason}, event.address)

    def connection_checked_out(self, event: monitoring.ConnectionCheckedOutEvent) -> None:
        """Record ``connectionCheckedOutEvent``."""
        self._add("connectionCheckedOutEvent", {}, event.address)

    def connection_checked_in(self, event: monitoring.ConnectionCheckedInEvent) -> None:
        """Record ``connectionCheckedInEvent``."""
        self._add("connectionCheckedInEvent", {}, event.address)

    # SDAM (server events; heartbeats need a ServerHeartbeatListener and are not recorded).
    def opened(self, event: monitoring.ServerOpeningEvent) -> None:
        """Record ``serverOpeningEvent``."""
        self._add("serverOpeningEvent", {}, event.server_address)

    def description_changed(self, event: monitoring.ServerDescriptionChangedEvent) -> None:
        """Record ``serverDescriptionChangedEvent``."""
        fields = {
            "previousDescription": _description(event.previous_description),
            "newDescription": _description(event.new_description),
        }
        self._add("serverDescriptionChangedEvent", fields, event.server_address)

    def closed(self, event: monitoring.ServerClosedEvent) -> None:
        """Record ``serverClosedEvent``."""
        self._add("serverClosedEvent", {}, event.server_address)


class SdamEventRecorder(EventRecorder, monitoring.ServerListener):
    """An :class:`EventRecorder` that also receives server (SDAM) events."""


def recorder_for(
    observe: Iterable[str], *, ignore_commands: Iterable[str] = (), observe_sensitive: bool = False
) -> EventRecorder:
    """A recorder for a client entity; a server listener only when SDAM events are observed."""
    names = frozenset(observe)
    cls = SdamEventRecorder if names & SDAM_EVENTS else EventRecorder
    return cls(names, ignore_commands=ignore_commands, observe_sensitive=observe_sensitive)
