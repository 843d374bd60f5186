"""The pacing state of one server: an AIMD send rate and the queue of reserved send slots.

The rules are described in :mod:`backpressure.core.adaptive`.  :class:`ServerPacer` is built
in layers, one concept each, every layer using only those below it: the queue of waiting
callers (:mod:`~backpressure.core.adaptive._waiting`), the reply counts
(:mod:`~backpressure.core.adaptive._replies`), the rate rules
(:mod:`~backpressure.core.adaptive._rate`) and the neighbour tests
(:mod:`~backpressure.core.adaptive._neighbours`).  This module holds the pacer's lock and its
entry points: a reply, a pushback, a caller asking for a slot or asking again, a snapshot.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Optional, Union

from backpressure.core.adaptive._neighbours import NeighbourTests
from backpressure.core.adaptive.slots import (
    SEND_NOW,
    Refusal,
    SlotDecision,
    SlotGrant,
    SlotTicket,
    rank_of,
)
from backpressure.core.decision import StopReason
from backpressure.core.policy import Policy

__all__ = ["ServerPacer", "ServerPacerSnapshot"]

Address = tuple[str, int]
"""A server's (host, port)."""

_LATENCY_MARGIN = 2.0  # the deadline bound keeps this multiple of the estimate for the reply
_RESPACE_RISE = 1.1  # the waiting slots move earlier once the rate grew by this factor
_EARLY = 1e-3  # a recheck this close to the slot sends (timers may fire a little early)


@dataclass(frozen=True)
class ServerPacerSnapshot:
    """The state of one pacer at one instant (for tests, events and reports)."""

    paced: bool
    """Whether attempts to this server are paced (False: the inert, open state)."""
    rate: Optional[float]
    """The paced rate in attempts per second (None while open); during a neighbour test, the
    rate the test returns to (the cut's own for a climbing pacer's cut, which stands)."""
    peak: Optional[float]
    """The rate the last decrease started from (None while open): a pacer climbing above it cuts
    with its neighbours' tests."""
    backlog: float
    """Seconds of reserved slots ahead of a new caller (0 while open)."""
    pushbacks: int
    """Overload failures recorded since the pacer was created."""
    competing: bool = False
    """Whether the pacer competes: its cuts did not move the pushback (neighbours that do not
    cut, such as stock clients), so it sends as the spec's retry loop alone does."""
    waiting: int = 0
    """Callers waiting for a reserved slot that is not due yet (0 while open)."""
    pushback_share: float = 0.0
    """Pushbacks over the replies of the last ``adaptive_window`` (0.0 without replies)."""
    reply_rate: float = 0.0
    """Replies (admitted or pushed back) per second over the last ``adaptive_window``."""
    competed_s: float = 0.0
    """Seconds the pacer has competed since it was created (the current spell included)."""
    competing_spells: int = 0
    """How many times the pacer started to compete since it was created."""
    last_chance_sends: int = 0
    """Critical attempts (first attempts or retries) sent at their last chance, and answered,
    since the pacer was created: refused a slot, they were sent once just before their bound
    (only while the client marks work sheddable)."""


class ServerPacer(NeighbourTests):
    """Pacing state of one server (the rules: :mod:`backpressure.core.adaptive`)."""

    def __init__(self, policy: Policy) -> None:
        """Create an open pacer configured by ``policy``'s adaptive fields."""
        super().__init__(policy)
        self._lock = threading.Lock()
        self._pushbacks = 0
        self._last_chances = 0  # replies to critical attempts sent at their last chance

    # -- replies -------------------------------------------------------------------------------

    def record_admitted(
        self, now: float, slot: Optional[float] = None, last_chance: bool = False
    ) -> None:
        """Count one attempt the server admitted (a reply that is not an overload error).

        ``slot`` is the attempt's reserved send time (None: sent unpaced); ``now - slot`` updates
        the slot-to-reply time estimate.  While the pacer is open this runs without the lock (a
        lost increment under a race only makes the measured rate a little low).  The reply to a
        ``last_chance`` send is not counted: it was sent beyond the paced rate.
        """
        if last_chance:
            with self._lock:
                self._last_chances += 1
            return
        if self.paced or slot is not None:
            with self._lock:
                self._count(now)
                self._admitted_in_round += 1
                self._admitted_since += 1
                self._resume(now)
                if slot is not None:
                    self._learn_latency(max(0.0, now - slot))
                if self.paced:
                    self._judge(now)
        else:
            self._count(now)

    def add_admitted(self, now: float, count: int) -> None:
        """Count ``count`` admitted attempts at once (the adapters' lean success path batches)."""
        if self.paced:
            with self._lock:
                self._count(now, count)
                self._admitted_in_round += count
                self._admitted_since += count
                self._resume(now)
        else:
            self._count(now, count)

    def record_pushback(
        self, now: float, slot: Optional[float] = None, last_chance: bool = False
    ) -> None:
        """Account for an overload error from the server: close the pacer or lower its rate.

        ``slot`` is the pushed-back attempt's send slot (None: sent unpaced).  Only an attempt
        sent at or after the last change of the rate says the rate is still too high: one
        sent before it was already reacted to (the decrease is once per round).  A
        ``last_chance`` send, beyond the paced rate, says nothing about the rate: only counted.
        """
        with self._lock:
            if last_chance:
                self._pushbacks += 1
                self._last_chances += 1
                return
            current = self._rate_at(now) if self.paced else 0.0  # before this pushback
            self._pushbacks += 1
            if self.paced:
                self._pushback_round(now)
            self._last_pushback = now
            self._admitted_since = 0
            self._resumed = math.inf  # the fault goes on
            self._count(now, 1, 1)
            if self.paced:
                self._judge(now)
            if not self.paced:
                self._close(now)
                return
            self._slow_down(now, slot, current)

    # -- send slots ----------------------------------------------------------------------------

    def admit(
        self,
        now: float,
        limit: float,
        deadline_bound: bool,
        retry: bool = False,
        sheddable: bool = False,
    ) -> SlotDecision:
        """Reserve a send slot if its wait is at most ``limit`` seconds.

        ``deadline_bound`` tells which bound ``limit`` is (for the refusal's reason); ``retry``
        that the attempt retries one a server pushed back (it goes ahead of the waiting first
        attempts); ``sheddable`` that the operation may be shed first (critical attempts go
        ahead of it).  A waiting attempt's grant carries its :class:`SlotTicket`: ask
        :meth:`recheck` when the wait is over.
        """
        if not self.paced:
            return SEND_NOW
        with self._lock:
            if not self.paced:
                return SEND_NOW
            if self._reopens(now):
                self._open(now)
                return SEND_NOW
            self._heard(now)
            self._judge(now)
            if self.competing and not self._testing:
                return SEND_NOW  # as the spec's loop alone sends
            hold = limit  # a caller that cannot be served is held this long, then refused
            if deadline_bound:
                # The reply must arrive before the deadline too, not only the send.  The margin
                # is at most half the time left: an estimate inflated by a stall must not refuse
                # every caller (nothing would be sent, and nothing would correct it).
                limit -= min(_LATENCY_MARGIN * self._latency, limit / 2.0)
            reason = (
                StopReason.LOCAL_WAIT_DEADLINE if deadline_bound else StopReason.LOCAL_WAIT_LIMIT
            )
            if sheddable:
                self._last_sheddable = now
            self._still_waiting(now)  # drops the due ones: those callers are sending
            rate = self._rate_at(now)
            if rate > _RESPACE_RISE * self._spaced_rate:
                self._respace(now, rate)  # the queue drains at the new pace
            waiting = self._waiting  # after the re-spacing, which builds a new queue
            interval = 1.0 / rate
            rank = rank_of(retry, sheddable)
            if rank < 3 and waiting and waiting[-1].rank > rank:
                # Go ahead of the waiting attempts of later classes (the queue is in class
                # order): take the first such slot, and move those behind it back one slot.
                index = self._class_end(waiting, rank)
                if waiting[index].slot - now <= limit:
                    slot = waiting[index].slot
                    self._move_back(index, interval)
                    ticket = SlotTicket(slot, now + limit, reason, retry, sheddable, now + hold)
                    waiting.insert(index, ticket)
                    self._last_wait = now
                    return SlotGrant(min(slot - now, self._nap), self._round, slot, ticket)
            slot = max(now, self._next_slot)
            wait = slot - now
            if wait > limit:
                # The pacing limits callers: it must not reopen.  The caller is held until its
                # bound, then refused (on recheck): refused at once, a closed loop would start
                # its next operation at once and spin.  Nothing is reserved.
                self._last_wait = now
                if hold <= _EARLY:
                    return Refusal(reason, wait)
                ticket = SlotTicket(slot, now + limit, reason, retry, sheddable, now + hold)
                ticket.refused = True
                if limit > _EARLY and self._last_chance(now, ticket):
                    return SlotGrant(ticket.latest - now, self._round, None, ticket)
                return SlotGrant(hold, self._round, None, ticket)
            self._next_slot = slot + interval
            if wait <= 0.0:
                return SlotGrant(0.0, self._round, slot)
            ticket = SlotTicket(slot, now + limit, reason, retry, sheddable, now + hold)
            waiting.append(ticket)
            self._last_wait = now
            return SlotGrant(min(wait, self._nap), self._round, slot, ticket)

    def recheck(self, now: float, ticket: SlotTicket) -> Union[float, Refusal]:
        """Return how much longer the attempt holding ``ticket`` waits (0: send now), or refuse."""
        with self._lock:
            self._heard(now)
            self._judge(now)
            if ticket.refused and not ticket.last_chance:
                self._last_chance(now, ticket)  # moved past its bound by a re-spacing
            if ticket.last_chance:
                if ticket.reason is StopReason.LOCAL_WAIT_DEADLINE and now > ticket.until:
                    # Past the deadline (a late wake-up): the reply could not be used.
                    return Refusal(ticket.reason, max(0.0, ticket.slot - now))
                wait = ticket.latest - now
                if self.competing and not self._testing:
                    wait = 0.0
                return wait if wait > _EARLY else 0.0
            if self.competing and not self._testing and not ticket.refused:
                return 0.0  # the pacer competes: nobody waits
            if ticket.refused:
                self._last_wait = now
                if ticket.rank >= 2 and ticket.until - now > _EARLY:
                    return ticket.until - now  # sheddable: held until its bound, never spinning
                return Refusal(ticket.reason, max(0.0, ticket.slot - now))
            if self._waiting and self._rate_at(now) > _RESPACE_RISE * self._spaced_rate:
                self._respace(now, self._rate_at(now))
                if ticket.refused:
                    self._last_wait = now
                    if ticket.rank >= 2 and ticket.until - now > _EARLY:
                        return ticket.until - now
                    return Refusal(ticket.reason, max(0.0, ticket.slot - now))
            wait = ticket.slot - now
        return min(wait, self._nap) if wait > _EARLY else 0.0

    def _open(self, now: float) -> None:
        """Open the pacer (the inert state), polite again (lock held)."""
        self.paced = False
        self._stop_competing(now)
        self._testing = False
        self._evidence = 0.0

    def _reopens(self, now: float) -> bool:
        """Whether the pacer should open again at ``now`` (lock held)."""
        if now - self._last_pushback < self._window:
            return False
        # Nobody had to wait for a whole window: the pacing limits nothing.  (A pacer that
        # still limits callers keeps climbing instead: reopened, it would close again at a
        # rate measured while it was paced.)
        return now - self._last_wait >= self._window

    def still_paced(self, now: float) -> bool:
        """Whether attempts are paced at ``now``; a pacer due to open again opens here.

        Without this, a server no attempt is sent to (reads avoid paced members) would never
        be asked to admit one, so it would never open again.
        """
        if not self.paced:
            return False
        with self._lock:
            if self.paced and self._reopens(now):
                self._open(now)
            return self.paced

    def snapshot(self, now: float) -> ServerPacerSnapshot:
        """Return the pacer's state at ``now``."""
        with self._lock:
            replies, pushed, span = self._window_counts(now)
            share = pushed / replies if replies else 0.0
            reply_rate = replies / span if span > 0.0 else 0.0
            competed = self._competed
            if self.competing:
                competed += max(0.0, now - self._competing_since)
            if not self.paced:
                return ServerPacerSnapshot(
                    False,
                    None,
                    None,
                    0.0,
                    self._pushbacks,
                    pushback_share=share,
                    reply_rate=reply_rate,
                    competed_s=competed,
                    competing_spells=self._spells,
                    last_chance_sends=self._last_chances,
                )
            return ServerPacerSnapshot(
                True,
                self._learned_rate(now),
                self._peak,
                max(0.0, self._next_slot - now),
                self._pushbacks,
                self.competing,
                self._still_waiting(now),
                share,
                reply_rate,
                competed,
                self._spells,
                self._last_chances,
            )
