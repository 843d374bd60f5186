"""The order of the attempt cycle's calls: its phases, its events and the one transition table.

Theory of operation (h11's ``_state.py`` is the model).  An
:class:`~backpressure.core.cycle.AttemptCycle` is in one :class:`Phase`; every call to it is an
:class:`Event` (and the answers of ``admit``, ``waited`` and ``failed`` one more), and
:data:`TRANSITIONS` is the one table of what may follow what.  The orders the executors use::

    IDLE --admit--> ASKED --started--> SENT --succeeded--> DONE          first-attempt success
    IDLE --started--> SENT                                               nothing paced: no admit
    ASKED --(Wait)--> WAITING --waited--> ASKED (--(Wait)--> WAITING ...)  paced: wait, recheck
    ASKED --admit--> ASKED                          the pool was reset in the wait: select again
    ASKED --(Stop)--> DONE                                              refused by the pacing
    SENT --started--> SENT                 pymongo's classic retry, the failure never reported
    SENT --transaction_began--> SENT              a reply to the statement opening a transaction
    SENT --settle--> SETTLED --failed--> ...         the backport: the outcome to the pacing first
    SETTLED --admit/started--> ASKED/SENT            the backport's classic retry after settle
    SENT/SETTLED --failed--> FAILED --(Backoff)--> IDLE  or  --(Stop)--> STOPPED
    IDLE/ASKED/SETTLED --unsent--> FAILED --> ...   no attempt could be sent (no server, deadline)
    SENT --decided_inside--> DONE         the backport's methods: an inner loop decided the error
    any phase but DONE --ended--> DONE             the error raised without (another) decision

The executors wait and recheck through :meth:`~backpressure.core.cycle.AttemptCycle.wait_out`,
which asks ``waited`` once each wait is over.  A call out of order raises
:class:`CycleOrderError` while the cycle's switch ``backpressure.core.cycle.STRICT`` is on (it
lives beside the cycle, which reads it when a cycle is created); off, a cycle does not track
its phase at all.  This module holds only the table and its names: pure data, no state.
"""

from __future__ import annotations

import enum
from typing import Optional

__all__ = ["TRANSITIONS", "CycleOrderError", "Event", "Phase", "order_error"]


class CycleOrderError(AssertionError):
    """An executor called the attempt cycle out of order (raised only while ``STRICT``)."""


class Phase(enum.Enum):
    """Where one operation's attempt cycle is."""

    IDLE = "idle"
    """Before an attempt: none yet, or a retry granted (its backoff is the executor's)."""
    ASKED = "asked"
    """``admit`` (or ``waited``) answered ``SEND``: the attempt may be sent."""
    WAITING = "waiting"
    """``admit`` or ``waited`` answered ``Wait``: the executor waits, then asks ``waited``."""
    SENT = "sent"
    """``started``: an attempt is open, its outcome not known yet."""
    SETTLED = "settled"
    """``settle``: the open attempt's outcome went to the pacing; the retry rules not asked."""
    FAILED = "failed"
    """Within ``failed``: the retry rules are deciding (left before ``failed`` returns)."""
    STOPPED = "stopped"
    """``failed`` answered ``Stop``: the executor raises (``ended`` may still follow)."""
    DONE = "done"
    """The operation is over: it succeeded, ended, or the pacing refused it."""


class Event(enum.Enum):
    """A call to the cycle, or the answer it gave (``WAIT``, ``REFUSE``, ``RETRY``, ``STOP``)."""

    ADMIT = "admit"
    WAITED = "waited"
    WAIT = "answer Wait"
    REFUSE = "answer Stop (refused)"
    START = "started"
    TRANSACTION_BEGAN = "transaction_began"
    SETTLE = "settle"
    SUCCEED = "succeeded"
    FAIL = "failed"
    UNSENT = "unsent"
    DECIDED_INSIDE = "decided_inside"
    RETRY = "answer Backoff"
    STOP = "answer Stop"
    END = "ended"


_P = Phase
_E = Event
TRANSITIONS: dict[tuple[Phase, Event], Phase] = {
    # Before an attempt.
    (_P.IDLE, _E.ADMIT): _P.ASKED,
    (_P.IDLE, _E.START): _P.SENT,  # nothing paced: sent without asking
    (_P.IDLE, _E.END): _P.DONE,  # e.g. no server for the retry
    (_P.IDLE, _E.UNSENT): _P.FAILED,  # the backport: no server, or the deadline passed
    # Admitted, waiting.
    (_P.ASKED, _E.WAIT): _P.WAITING,
    (_P.ASKED, _E.REFUSE): _P.DONE,
    (_P.ASKED, _E.ADMIT): _P.ASKED,  # the pool was reset during the wait: admitted again
    (_P.ASKED, _E.START): _P.SENT,
    (_P.ASKED, _E.END): _P.DONE,  # e.g. the selection again after the wait found no server
    (_P.ASKED, _E.UNSENT): _P.FAILED,  # the backport: that selection again found no server
    (_P.WAITING, _E.WAITED): _P.ASKED,
    (_P.WAITING, _E.END): _P.DONE,
    # An attempt open.
    (_P.SENT, _E.START): _P.SENT,  # pymongo's classic retry: the failure never reported
    (_P.SENT, _E.TRANSACTION_BEGAN): _P.SENT,
    (_P.SENT, _E.SETTLE): _P.SETTLED,
    (_P.SENT, _E.SUCCEED): _P.DONE,
    (_P.SENT, _E.FAIL): _P.FAILED,
    (_P.SENT, _E.END): _P.DONE,  # the backport raises the earlier error from within an attempt
    (_P.SENT, _E.DECIDED_INSIDE): _P.DONE,  # the backport's methods: raised as it is
    # Its outcome handed to the pacing (the backport), the retry rules not asked yet.
    (_P.SETTLED, _E.FAIL): _P.FAILED,
    (_P.SETTLED, _E.ADMIT): _P.ASKED,  # pymongo's classic retry (the backport's loop)
    (_P.SETTLED, _E.START): _P.SENT,
    (_P.SETTLED, _E.END): _P.DONE,
    (_P.SETTLED, _E.UNSENT): _P.FAILED,  # the backport: no server for pymongo's classic retry
    # The retry rules' answer.
    (_P.FAILED, _E.RETRY): _P.IDLE,
    (_P.FAILED, _E.STOP): _P.STOPPED,
    (_P.STOPPED, _E.END): _P.DONE,
}
"""The one transition table: ``(phase, event) -> next phase``; any other pair is a call out of
order.  Every call of the cycle that changes the operation goes through it."""


def order_error(operation: str, phase: Optional[Phase], event: Event) -> CycleOrderError:
    """The error for ``event`` out of order in ``phase`` of ``operation``'s cycle: it names the
    call, the phase and the calls legal there."""
    legal = sorted(e.value for (p, e) in TRANSITIONS if p is phase)
    return CycleOrderError(
        f"attempt cycle of {operation!r}: {event.value} in phase"
        f" {phase.name if phase is not None else None}; legal there: {', '.join(legal)}"
    )
