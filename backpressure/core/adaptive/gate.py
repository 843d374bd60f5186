"""The gate the adapters call around each attempt: pacing with its events, logs and
refusals (:class:`LocalOverloadError`), and the outcome handed back to the pacing."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional, Protocol

from pymongo.errors import PyMongoError

from backpressure.core.adaptive.pacer import Address, ServerPacerSnapshot
from backpressure.core.adaptive.pacers import ClientPacers
from backpressure.core.adaptive.slots import SEND_NOW, Refusal, SlotGrant
from backpressure.core.decision import StopReason
from backpressure.core.labels import SYSTEM_OVERLOADED, is_overload
from backpressure.core.log_limit import LogRateLimit

__all__ = [
    "LocalOverloadError",
    "LocalRefusalEvent",
    "LocalWaitEvent",
    "PacingGate",
    "PacingListener",
]

_LOGGER = logging.getLogger("backpressure")


class LocalOverloadError(PyMongoError):
    """An attempt was not sent: the local wait it needed exceeded the deadline or the bound.

    Carries the ``SystemOverloadedError`` label (applications handle it like a server's load
    shedding) but not ``RetryableError``: nothing retries it, the operation fails fast.
    """

    def __init__(self, message: str, *, reason: StopReason, server: Address, wait: float) -> None:
        """Describe the refusal; ``reason`` also becomes the retry summary's stop reason."""
        super().__init__(message, error_labels=[SYSTEM_OVERLOADED])
        self.reason = reason
        """Why the attempt was refused (a ``LOCAL_WAIT_*`` StopReason)."""
        self.server = server
        """The server the attempt was for."""
        self.wait = wait
        """The local wait, in seconds, the attempt would have needed."""


@dataclass(frozen=True)
class LocalWaitEvent:
    """An attempt waits ``wait`` seconds locally before it is sent to a paced server."""

    operation: str
    server: Address
    wait: float
    rate: Optional[float]


@dataclass(frozen=True)
class LocalRefusalEvent:
    """An attempt was refused locally (not sent): its wait was not allowed."""

    operation: str
    server: Address
    wait: float
    reason: StopReason


class PacingListener(Protocol):
    """Receives local waits and refusals (a RetryListener may implement these too).

    Either method may be left out; exceptions raised are logged and ignored.
    """

    def waited(self, event: LocalWaitEvent) -> None:
        """Called before an attempt waits locally."""

    def refused(self, event: LocalRefusalEvent) -> None:
        """Called when an attempt is refused locally."""


class PacingGate:
    """What the adapters call around each attempt: admit (events, logs, refusal) and record.

    ``admit`` returns the :class:`SlotGrant` whose ``wait`` the adapter sleeps (``time.sleep``
    or ``asyncio.sleep``) before sending, or raises :class:`LocalOverloadError`; ``record``
    hands the attempt's outcome back to the pacer.
    """

    def __init__(
        self,
        pacers: ClientPacers,
        *,
        listeners: Sequence[object] = (),
        logger: logging.Logger = _LOGGER,
        log_interval: float = 5.0,
    ) -> None:
        """Serve ``pacers``; notify ``listeners``; log waits and refusals rate-limited."""
        self.pacers = pacers
        """The pacers this gate asks (the adapters ask the gate, never these directly)."""
        self.listeners: Sequence[object] = tuple(listeners)
        """Objects notified of waits and refusals (those with ``waited``/``refused``)."""
        self._logger = logger
        self._wait_log = LogRateLimit(log_interval, clock=pacers.clock)
        self._refusal_log = LogRateLimit(log_interval, clock=pacers.clock)
        self._log_interval = log_interval
        self._transition_logs: dict[tuple[Address, bool], LogRateLimit] = {}
        pacers.on_transition = self._transition

    @property
    def engaged(self) -> bool:
        """Whether some server may be paced (False: skip the pacing, nothing would wait)."""
        return self.pacers.engaged

    def is_paced(self, server: Address) -> bool:
        """Whether attempts to ``server`` are paced now (selections avoid such servers)."""
        return self.pacers.is_paced(server)

    def admit(
        self,
        operation: str,
        server: Optional[Address],
        deadline: Optional[float],
        *,
        retry: bool = False,
        hold: bool = True,
        sheddable: bool = False,
    ) -> SlotGrant:
        """Return the grant of one attempt to ``server``, or raise LocalOverloadError.

        ``retry``: the attempt retries one a server pushed back (see :meth:`ServerPacer.admit`);
        ``sheddable``: the operation may be shed first (``overrides(criticality="sheddable")``).
        ``hold=False`` (test mode, where nothing waits): the attempt is sent now whatever the
        pacing says; nothing is reserved, waited for or refused, and its outcome is still
        recorded (pushback still closes the pacer).
        """
        if not hold:
            return SEND_NOW
        decision = self.pacers.admit(server, deadline, retry=retry, sheddable=sheddable)
        if isinstance(decision, SlotGrant):
            ticket = decision.ticket
            # Held, then refused: announced then (a last chance waits, then is sent).
            held = ticket is not None and ticket.refused and not ticket.last_chance
            if decision.wait > 0.0 and server is not None and not held:
                self._waited(operation, server, decision.wait)
            return decision
        raise self._refusal_error(operation, server, decision)

    def recheck(self, operation: str, server: Optional[Address], grant: SlotGrant) -> float:
        """Return how much longer an admitted attempt waits (0: send it now).

        Call it when the wait of :meth:`admit` (or of the previous recheck) is over: a retry
        going ahead of the queue may have moved the attempt's slot.

        Raises:
            LocalOverloadError: the slot moved past the attempt's bound; it is not sent.
        """
        decision = self.pacers.recheck(server, grant)
        if isinstance(decision, Refusal):
            raise self._refusal_error(operation, server, decision)
        return decision

    def _refusal_error(
        self, operation: str, server: Optional[Address], refusal: Refusal
    ) -> LocalOverloadError:
        """Announce and log ``refusal``; return the error the adapter raises for it."""
        assert server is not None  # an unknown server is never refused
        self._refused(operation, server, refusal)
        return LocalOverloadError(
            f"{operation} not sent to {server[0]}:{server[1]}: {refusal.reason.value} "
            f"(a {refusal.wait:.3f}s wait was needed)",
            reason=refusal.reason,
            server=server,
            wait=refusal.wait,
        )

    def record(
        self,
        server: Optional[Address],
        grant: Optional[SlotGrant],
        error: Optional[BaseException] = None,
        overload: Optional[bool] = None,
    ) -> bool:
        """Record the outcome of an attempt: ``error`` None for a reply that is no overload.

        ``overload``: whether ``error`` carries ``SystemOverloadedError``, when the caller has
        read its labels (None: read here).  Returns whether the server pushed the attempt back
        (its retry goes ahead of the queue).
        """
        if overload is None:
            overload = error is not None and is_overload(error)
        overloaded = error is not None and overload
        if error is not None and not overloaded:
            return False  # network errors and the like say nothing about what the server admits
        self.pacers.record(server, overloaded=overloaded, grant=grant)
        return overloaded

    def _transition(self, server: Address, snapshot: ServerPacerSnapshot) -> None:
        """Log (INFO) that ``server`` became paced or reopened, rate-limited per server and state.

        At most one line per server and state per ``log_interval`` seconds; the next one counts
        the transitions held back.  The window is the policy's ``adaptive_window``.
        """
        key = (server, snapshot.paced)
        limit = self._transition_logs.get(key)
        if limit is None:
            limit = self._transition_logs.setdefault(
                key, LogRateLimit(self._log_interval, clock=self.pacers.clock)
            )
        held = limit.admit()
        if held is None:
            return
        window = float(self.pacers.policy.adaptive_window)
        more = f"; {held} more such change(s) since the previous line" if held else ""
        if snapshot.paced:
            self._logger.info(
                "pacing attempts to %s:%d at %.1f/s: it pushed back %.0f%% of the replies of "
                "the last %.1fs window (%.1f replies/s)%s",
                server[0],
                server[1],
                snapshot.rate or 0.0,
                100.0 * snapshot.pushback_share,
                window,
                snapshot.reply_rate,
                more,
            )
        else:
            self._logger.info(
                "no longer pacing attempts to %s:%d: no pushback and no local wait for a "
                "%.1fs window (pushed back %.0f%% of %.1f replies/s)%s",
                server[0],
                server[1],
                window,
                100.0 * snapshot.pushback_share,
                snapshot.reply_rate,
                more,
            )

    def _waited(self, operation: str, server: Address, wait: float) -> None:
        """Announce and log a local wait."""
        snapshot = self.pacers.pacer(server).snapshot(self.pacers.clock())
        held = self._wait_log.admit()
        if held is not None:
            self._logger.info(
                "holding %s for %.3fs before sending to %s:%d (paced at %.1f/s)%s",
                operation,
                wait,
                server[0],
                server[1],
                snapshot.rate or 0.0,
                f"; {held} more local wait(s) since the previous line" if held else "",
            )
        self._notify("waited", LocalWaitEvent(operation, server, wait, snapshot.rate))

    def _refused(self, operation: str, server: Address, refusal: Refusal) -> None:
        """Announce and log a local refusal."""
        held = self._refusal_log.admit()
        if held is not None:
            self._logger.warning(
                "not sending %s to %s:%d: %s (%.3fs wait needed)%s",
                operation,
                server[0],
                server[1],
                refusal.reason.value,
                refusal.wait,
                f"; {held} more local refusal(s) since the previous line" if held else "",
            )
        self._notify("refused", LocalRefusalEvent(operation, server, refusal.wait, refusal.reason))

    def _notify(self, method: str, event: object) -> None:
        """Call ``method`` on every listener that has it."""
        for listener in self.listeners:
            callback = getattr(listener, method, None)
            if callback is None:
                continue
            try:
                callback(event)
            except Exception:
                self._logger.exception("backpressure pacing listener %r failed", listener)
