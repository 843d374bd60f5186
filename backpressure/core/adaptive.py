"""Adaptive admission: a per-server AIMD send-rate pacer that composes across a fleet.

Theory of operation.  One :class:`ServerPacer` per server address, all kept by one
:class:`AdmissionControl` per client.  A pacer starts *open*: :meth:`AdmissionControl.admit`
answers 0 without taking a lock and nothing waits (the inert state; its only cost is counting
replies in coarse time buckets so the send rate is known when it is needed).  The rules are
additive increase, multiplicative decrease (Chiu and Jain, 1989; TCP): every client of a server
decreases by the same factor and increases by the same absolute amount, so their shares
converge to fair ones whatever they started at (a rate copied from a measurement keeps
whatever share it saw).

1. **Close on overload, not on a blip.**  An open pacer closes when the server pushed back at
   least ``_CLOSE_PUSHBACKS`` (2) times within ``adaptive_window`` and those pushbacks are at
   least ``_CLOSE_FRACTION`` (a tenth) of the window's replies: one to three rejections among
   many admitted replies change nothing, so a transient costs only the attempts it rejected.
   It closes at ``adaptive_decrease`` times what the server admitted over the window, and at
   no less than ``adaptive_decrease`` times half the send rate (when the server admits
   nothing, the rate must not collapse).
2. **Multiplicative decrease, once per round.**  A pushback of an attempt sent at or after the
   last rate change lowers the rate to ``adaptive_decrease`` times the lower of the current
   rate and the send rate of the last 0.3 window, at most once per round: a round lasts at
   least twice the learned slot-to-reply time (a decrease reaches the server's queue only
   after what was queued there before it) and a tenth of the window.  A round in which the
   server admitted nothing holds the rate instead (a fault rejecting everything): the pacer
   goes on probing at a steady pace, so it finds the server admitting again at once.
3. **Additive increase, then a fast climb.**  Between decreases the rate grows by
   ``adaptive_increase`` attempts/s every second, the same for every client.  Once the server
   has not pushed back for ``adaptive_quiet`` seconds (a quarter of it after a held round),
   the rate doubles every ``_CLIMB_DOUBLING`` windows: back up to the rate the last decrease
   started from, then additively again; without that ceiling after ``_FREE_CLIMB`` windows
   without pushback (the capacity rose) or after a held round (a fault ended).
4. **Pacing.**  Every attempt to a paced server, the first attempt of an operation included,
   reserves the next free send slot: ``slot = max(now, next_slot)``, ``next_slot = slot +
   1/rate``, first come, first served; the retry of an attempt the server pushed back goes
   ahead of the waiting first attempts (it takes the slot of the first one, which moves to the
   slot behind it, and so on: no slot is sent twice).  A waiting caller holds a
   :class:`SlotTicket` and asks again (:meth:`AdmissionControl.recheck`) when its wait is over,
   at most every ``_NAP`` windows: a decrease, or a rise of a tenth, re-spaces the waiting
   slots at the new rate at once (without that, slots reserved at the old rate would be sent
   for as long as the queue is, and the late feedback makes every client overshoot; after an
   overload the queue would drain at the overload's pace).  A slot is usable only if the reply
   can still arrive in time: the deadline bound is shortened by twice a smoothed slot-to-reply
   time, at most half the time left.
5. **Critical first.**  Every waiting slot has a class: critical retries, critical first
   attempts, sheddable retries, sheddable first attempts (``overrides(criticality=
   "sheddable")``), in that order.  An attempt goes ahead of the waiting attempts of every
   later class, as a retry does (it takes the first such slot it can wait for, and those
   behind it move one slot back; the first one moved past its bound is refused), so critical
   callers are served first come, first served and sheddable ones get only the slots no
   critical caller needs.  A sheddable attempt moved past its bound is held until that bound,
   then refused (as at admission).  When no attempt is sheddable the order is the one of 4.
6. **Hold, never spin.**  A caller whose wait would pass its deadline (or ``max_local_wait``)
   reserves nothing and is held until that bound, then refused on its recheck (the adapters'
   wait-and-recheck loop): refused at once, a closed loop would start its next operation at
   once and spin on refusals.  A caller whose deadline has already passed is refused at once.
7. **Reopening.**  The pacer opens again (the inert state) when the server has not pushed back
   for a window and no caller had to wait, nor was held, during that window: the pacing limits
   nothing.  A pacer that still limits callers keeps climbing instead (reopened, it would
   close again at a rate measured while it was paced).

Retries to a paced server spend no budget (a paced retry takes the slot of another attempt);
before the pacer closes, they draw on the per-server budget (see :mod:`backpressure.core.budget`).

All state changes happen under one ``threading.Lock`` per pacer held only around arithmetic
(never across a sleep, an await or I/O), so one :class:`AdmissionControl` serves threads, Motor's
executor and the event loop alike.  Time comes from the injected clock; nothing here sleeps.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Callable, Optional, Protocol, Union

from pymongo.errors import PyMongoError

from backpressure.core.decision import StopReason
from backpressure.core.labels import SYSTEM_OVERLOADED, is_overload
from backpressure.core.log_limit import LogRateLimit
from backpressure.core.policy import Policy

__all__ = [
    "Admission",
    "AdmissionControl",
    "AdmissionGate",
    "AdmissionListener",
    "LocalOverloadError",
    "LocalRefusalEvent",
    "LocalWaitEvent",
    "LogRateLimit",
    "Refusal",
    "ServerPacer",
    "ServerPacerSnapshot",
    "SlotTicket",
    "admission_for",
]

_LOGGER = logging.getLogger("backpressure")

Address = tuple[str, int]


_BUCKETS = 10  # time buckets per measurement window
_SEND_BUCKETS = 3  # the send rate a decrease starts from is measured over this many buckets
_LATENCY_RISE = 0.5  # weight of a slot-to-reply time above the estimate (follows rises fast)
_LATENCY_FALL = 0.05  # weight of one below it (forgets slowly)
_LATENCY_MARGIN = 2.0  # the deadline bound keeps this multiple of the estimate for the reply
_CLOSE_PUSHBACKS = 2  # an open pacer closes on at least this many pushbacks within a window
_CLOSE_FRACTION = 0.1  # ... that are also at least this share of the window's replies
_CLOSE_SEND_SHARE = 0.5  # an open pacer closes at no less than this share of the send rate
_CLIMB_DOUBLING = 0.25  # the fast climb doubles the rate every this many windows
_MIN_ROUND = 0.1  # a round lasts at least this share of the window ...
_ROUND_LATENCIES = 2.0  # ... and at least this many slot-to-reply times
_RESPACE_RISE = 1.1  # the waiting slots move earlier once the rate grew by this factor
_NAP = 0.1  # a waiting caller rechecks at least every this many windows (its slot may move)
_FREE_CLIMB = 2.0  # windows without pushback after which the fast climb has no ceiling
_HELD_QUIET = 0.25  # after a held round, the climb starts after this share of adaptive_quiet
_MAX_DOUBLINGS = 30.0  # the fast climb's exponent stops here (no float overflow)
_MAX_RATE = 1e6  # attempts per second: far above any server's
_EARLY = 1e-3  # a recheck this close to the slot sends (timers may fire a little early)


class SlotTicket:
    """The send slot of one waiting attempt; the pacer may move it later, or cancel it."""

    __slots__ = ("latest", "rank", "reason", "refused", "retry", "slot", "until")

    def __init__(
        self,
        slot: float,
        latest: float,
        reason: StopReason,
        retry: bool,
        sheddable: bool = False,
        until: Optional[float] = None,
    ) -> None:
        """Reserve ``slot``; the attempt may be sent no later than ``latest``.

        ``sheddable``: the operation may be shed first; such an attempt refused after a move is
        held until ``until`` (its hold bound; default ``latest``) before it learns it.
        """
        self.slot = slot
        """The reserved send time on the pacer's clock."""
        self.latest = latest
        """The latest send time the attempt's bound allows (its deadline less the reply margin,
        or ``max_local_wait``)."""
        self.reason = reason
        """Which bound ``latest`` is, for a refusal."""
        self.retry = retry
        """Whether the attempt retries one the server pushed back."""
        self.rank = _rank(retry, sheddable)
        """The attempt's class: it goes ahead of every waiting attempt of a higher rank."""
        self.until = latest if until is None else until
        """The hold bound: a sheddable attempt refused after a move is held until then."""
        self.refused = False
        """Set when a retry going ahead moved this slot past ``latest``: do not send."""

    def __repr__(self) -> str:
        """Show the slot and the bound."""
        state = ", refused" if self.refused else ""
        return f"SlotTicket(slot={self.slot!r}, latest={self.latest!r}{state})"


def _rank(retry: bool, sheddable: bool) -> int:
    """The class of a waiting attempt: critical retries (0) first, sheddable first attempts (3)
    last."""
    return (2 if sheddable else 0) + (0 if retry else 1)


@dataclass(frozen=True)
class Admission:
    """Send the attempt after waiting ``wait`` seconds locally (0: send now).

    ``round`` is the pacer's round the slot was reserved in (None: sent unpaced) and ``slot``
    the reserved send time on the pacer's clock (None: sent unpaced); hand the admission back to
    :meth:`AdmissionControl.record` with the attempt's outcome.
    """

    wait: float
    round: Optional[int] = None
    slot: Optional[float] = field(default=None, compare=False)
    ticket: Optional[SlotTicket] = field(default=None, compare=False)
    """The reservation of a waiting attempt (None: sent now); the pacer may move its slot."""

    @property
    def send_slot(self) -> Optional[float]:
        """The slot the attempt was finally sent in (the ticket's, if the pacer moved it)."""
        ticket = self.ticket
        return self.slot if ticket is None else ticket.slot


@dataclass(frozen=True)
class Refusal:
    """Do not send the attempt: the local wait it needs (``wait``) is not allowed."""

    reason: StopReason
    wait: float


AdmissionDecision = Union[Admission, Refusal]
"""What :meth:`AdmissionControl.admit` returns."""

_SEND_NOW = Admission(0.0)


@dataclass(frozen=True)
class ServerPacerSnapshot:
    """The state of one pacer at one instant (for tests, events and reports)."""

    paced: bool
    """Whether attempts to this server are paced (False: the inert, open state)."""
    rate: Optional[float]
    """The paced rate in attempts per second (None while open)."""
    peak: Optional[float]
    """The rate the last decrease started from: the fast climb's ceiling (None while open)."""
    backlog: float
    """Seconds of reserved slots ahead of a new caller (0 while open)."""
    pushbacks: int
    """Overload failures recorded since the pacer was created."""


class ServerPacer:
    """Pacing state of one server (see the module docstring for the rules)."""

    def __init__(self, policy: Policy) -> None:
        """Create an open pacer configured by ``policy``'s adaptive fields."""
        self._decrease = float(policy.adaptive_decrease)
        self._window = float(policy.adaptive_window)
        self._increase = float(policy.adaptive_increase)
        self._quiet = float(policy.adaptive_quiet)
        self._doubling = self._window * _CLIMB_DOUBLING
        self._nap = self._window * _NAP
        self._min_rate = float(policy.adaptive_min_rate)
        self._width = self._window / _BUCKETS
        self._lock = threading.Lock()
        self.paced = False
        """Read without the lock on the hot path: a bool attribute read is atomic."""
        self._rate = 0.0  # the paced rate at the anchor
        self._peak = 0.0  # the rate a decrease started from (the fast climb's ceiling)
        self._spaced_rate = 0.0  # the rate the waiting slots are spaced at
        self._anchor = 0.0  # when ``_rate`` was set (the last decrease, or hold)
        self._next_slot = 0.0
        self._waiting: deque[SlotTicket] = deque()  # reserved slots not yet due, in order
        self._last_pushback = -math.inf
        self._round = 0
        self._admitted_in_round = 0
        self._held = False  # the last round admitted nothing: the rate is held, not learned
        self._last_wait = -math.inf
        self._pushbacks = 0
        self._first_sample: Optional[float] = None
        self._bucket_ids = [-1] * _BUCKETS
        self._replies = [0] * _BUCKETS  # replies (admitted or pushed back) per time bucket
        self._pushed = [0] * _BUCKETS  # pushbacks per time bucket
        self._latency = 0.0

    # -- measurement ---------------------------------------------------------------------------

    def record_admitted(self, now: float, slot: Optional[float] = None) -> None:
        """Count one attempt the server admitted (a reply that is not an overload error).

        ``slot`` is the attempt's reserved send time (None: sent unpaced); ``now - slot`` updates
        the slot-to-reply time estimate.  While the pacer is open this runs without the lock (a
        lost increment under a race only makes the measured rate a little low).
        """
        if self.paced or slot is not None:
            with self._lock:
                self._count(now)
                self._admitted_in_round += 1
                if slot is not None:
                    self._learn_latency(max(0.0, now - slot))
        else:
            self._count(now)

    def add_admitted(self, now: float, count: int) -> None:
        """Count ``count`` admitted attempts at once (the adapters' lean success path batches)."""
        if self.paced:
            with self._lock:
                self._count(now, count)
                self._admitted_in_round += count
        else:
            self._count(now, count)

    def _learn_latency(self, sample: float) -> None:
        """Fold one slot-to-reply time into the estimate (lock held)."""
        weight = _LATENCY_RISE if sample > self._latency else _LATENCY_FALL
        self._latency += weight * (sample - self._latency)

    def _count(self, now: float, count: int = 1, pushed: int = 0) -> None:
        """Add ``count`` replies (``pushed`` of them pushbacks) to the time bucket of ``now``."""
        bucket = int(now / self._width)
        index = bucket % _BUCKETS
        if self._bucket_ids[index] != bucket:
            self._bucket_ids[index] = bucket
            self._replies[index] = 0
            self._pushed[index] = 0
        self._replies[index] += count
        self._pushed[index] += pushed
        if self._first_sample is None:
            self._first_sample = now

    def _window_counts(self, now: float) -> tuple[int, int, float]:
        """Replies, pushbacks and the span (s) they cover over the last window (lock held)."""
        current = int(now / self._width)
        replies = pushed = 0
        for bucket, count, push in zip(self._bucket_ids, self._replies, self._pushed):
            if current - _BUCKETS < bucket <= current:
                replies += count
                pushed += push
        # The window: the complete buckets plus the elapsed part of the current one, never
        # longer than the time since the first sample (at least one bucket width).
        span = (_BUCKETS - 1) * self._width + (now - current * self._width)
        first = now if self._first_sample is None else self._first_sample
        span = min(span, max(now - first, self._width))
        return replies, pushed, span

    def _send_rate(self, now: float) -> float:
        """Replies (admitted or pushed back) per second over the last ``_SEND_BUCKETS`` buckets.

        A short stretch: after a fast climb the rate the pushback answers is the recent one.
        """
        current = int(now / self._width)
        replies = 0
        for bucket, count in zip(self._bucket_ids, self._replies):
            if current - _SEND_BUCKETS < bucket <= current:
                replies += count
        span = (_SEND_BUCKETS - 1) * self._width + (now - current * self._width)
        first = now if self._first_sample is None else self._first_sample
        return replies / min(span, max(now - first, self._width))

    # -- the rate --------------------------------------------------------------------------------

    def _rate_at(self, now: float) -> float:
        """The paced rate at ``now``: additive increase from the anchor, then the fast climb.

        ``rate + increase * t`` (the same absolute increase for every client), and once the
        server has not pushed back for ``adaptive_quiet`` seconds, doubling every
        ``_CLIMB_DOUBLING`` windows from there, back up to the rate of the last decrease (where
        the server pushed back; from there the additive increase goes on), and without that
        ceiling once the server has been quiet for ``_FREE_CLIMB`` windows (its capacity rose)
        or after a held round (a fault ended).
        """
        start = self._anchor
        # After a round the server admitted nothing in (a fault rejecting everything), the
        # first quiet stretch is enough: the rate was held, not learned.
        quiet = self._quiet * _HELD_QUIET if self._held else self._quiet
        climb = self._last_pushback + quiet
        if now <= climb:
            rate = self._rate + self._increase * (now - start)
        else:
            climb = max(climb, start)
            base = self._rate + self._increase * (climb - start)
            rate = base * math.pow(2.0, min(_MAX_DOUBLINGS, (now - climb) / self._doubling))
            if not self._held and now - self._last_pushback < _FREE_CLIMB * self._window:
                linear = self._rate + self._increase * (now - start)
                rate = min(rate, max(self._peak, linear))
        return min(max(self._min_rate, rate), _MAX_RATE)

    def record_pushback(self, now: float, slot: Optional[float] = None) -> None:
        """Account for an overload error from the server: close the pacer or lower its rate.

        ``slot`` is the pushed-back attempt's send slot (None: sent unpaced).  Only an attempt
        sent at or after the last change of the rate says the rate is still too high: one
        sent before it was already reacted to (the decrease is once per round).
        """
        with self._lock:
            current = self._rate_at(now) if self.paced else 0.0  # before this pushback
            self._pushbacks += 1
            self._last_pushback = now
            self._count(now, 1, 1)
            if not self.paced:
                replies, pushed, span = self._window_counts(now)
                if pushed < _CLOSE_PUSHBACKS or pushed < _CLOSE_FRACTION * replies:
                    return  # a blip, not an overload: nothing changes
                self.paced = True
                self._next_slot = now
                self._waiting.clear()
                self._last_wait = -math.inf
                # What the server admitted is the better start (the sends include the
                # rejections), but when it admits nothing the rate must not collapse:
                # at least half the send rate.
                admitted = (replies - pushed) / span
                start = max(admitted, _CLOSE_SEND_SHARE * replies / span)
                self._set_rate(now, self._decrease * start)
                self._peak = start
                return
            if slot is None or slot < self._anchor:
                return  # sent before the last decrease (or unpaced): reacted to already
            least = max(_ROUND_LATENCIES * self._latency, _MIN_ROUND * self._window)
            if now - self._anchor < least:
                # A round is at least this long: a decrease reaches the server's queue only
                # after the replies queued there before it (the slot-to-reply time).
                return
            if self._admitted_in_round == 0:
                # Nothing admitted for a whole round: the server rejects everything.  Hold the
                # rate (a collapse would take seconds to climb back once the server admits).
                self._set_rate(now, self._rate)
                self._held = True
                return
            rate = min(current, self._send_rate(now))
            self._set_rate(now, self._decrease * rate)
            self._peak = rate
            self._respace(now, self._rate)

    def _set_rate(self, now: float, rate: float) -> None:
        """Pace at ``rate`` from ``now`` and start a new round (lock held)."""
        self._rate = min(max(rate, self._min_rate), _MAX_RATE)
        self._spaced_rate = self._rate
        self._anchor = now
        self._round += 1
        self._admitted_in_round = 0
        self._held = False

    def _respace(self, now: float, rate: float) -> None:
        """Space the waiting slots at ``rate`` from the first one, so a rate change acts at once.

        Without this, slots reserved at the old rate would go on being sent for as long as
        the queue is (in a closed loop, most of a deadline): after a decrease the late feedback
        makes every client overshoot, and after an overload ends the queue would drain at the
        overload's pace (a slot moves earlier too: waiting callers recheck every
        ``_NAP`` windows at most).  A slot moved past its bound is refused on its recheck.
        """
        self._spaced_rate = rate
        waiting = self._waiting
        while waiting and waiting[0].slot <= now:
            waiting.popleft()
        if not waiting:
            return
        interval = 1.0 / rate
        slot = max(now, waiting[0].slot)
        kept: deque[SlotTicket] = deque()
        for ticket in waiting:
            if slot > ticket.latest:
                ticket.slot = slot
                ticket.refused = True  # its caller learns it on recheck
                continue
            ticket.slot = slot
            kept.append(ticket)
            slot += interval
        self._waiting = kept
        self._next_slot = slot

    # -- admission -------------------------------------------------------------------------------

    def admit(
        self,
        now: float,
        limit: float,
        deadline_bound: bool,
        retry: bool = False,
        sheddable: bool = False,
    ) -> AdmissionDecision:
        """Reserve a send slot if its wait is at most ``limit`` seconds.

        ``deadline_bound`` tells which bound ``limit`` is (for the refusal's reason); ``retry``
        that the attempt retries one a server pushed back (it goes ahead of the waiting first
        attempts); ``sheddable`` that the operation may be shed first (critical attempts go
        ahead of it).  A waiting attempt's admission carries its :class:`SlotTicket`: ask
        :meth:`recheck` when the wait is over.
        """
        if not self.paced:
            return _SEND_NOW
        with self._lock:
            if not self.paced:
                return _SEND_NOW
            if self._reopens(now):
                self.paced = False
                return _SEND_NOW
            hold = limit  # a caller that cannot be served is held this long, then refused
            if deadline_bound:
                # The reply must arrive before the deadline too, not only the send.  The margin
                # is at most half the time left: an estimate inflated by a stall must not refuse
                # every caller (nothing would be sent, and nothing would correct it).
                limit -= min(_LATENCY_MARGIN * self._latency, limit / 2.0)
            reason = (
                StopReason.LOCAL_WAIT_DEADLINE if deadline_bound else StopReason.LOCAL_WAIT_LIMIT
            )
            waiting = self._waiting
            while waiting and waiting[0].slot <= now:
                waiting.popleft()  # due: those callers are sending
            rate = self._rate_at(now)
            if rate > _RESPACE_RISE * self._spaced_rate:
                self._respace(now, rate)  # the queue drains at the new pace
            interval = 1.0 / rate
            rank = _rank(retry, sheddable)
            if rank < 3 and waiting and waiting[-1].rank > rank:
                # Go ahead of the waiting attempts of later classes (the queue is in class
                # order): take the first such slot, and move those behind it back one slot.
                index = next(i for i, t in enumerate(waiting) if t.rank > rank)
                if waiting[index].slot - now <= limit:
                    slot = waiting[index].slot
                    self._move_back(index, interval)
                    ticket = SlotTicket(slot, now + limit, reason, retry, sheddable, now + hold)
                    waiting.insert(index, ticket)
                    self._last_wait = now
                    return Admission(min(slot - now, self._nap), self._round, slot, ticket)
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
                return Admission(hold, self._round, None, ticket)
            self._next_slot = slot + interval
            if wait <= 0.0:
                return Admission(0.0, self._round, slot)
            ticket = SlotTicket(slot, now + limit, reason, retry, sheddable, now + hold)
            waiting.append(ticket)
            self._last_wait = now
            return Admission(min(wait, self._nap), self._round, slot, ticket)

    def _move_back(self, index: int, interval: float) -> None:
        """Give every waiting attempt from ``index`` on the slot of the one behind it (lock held).

        The last one takes ``next_slot``, which moves one interval later.  An attempt whose new
        slot passes its bound is refused instead (its caller learns it on recheck) and the move
        stops there: the slot it leaves is taken by the one before it.
        """
        waiting = self._waiting
        slots = [ticket.slot for ticket in itertools.islice(waiting, index, None)]
        slots.append(self._next_slot)
        for position in range(index, len(waiting)):
            ticket = waiting[position]
            moved = slots[position - index + 1]
            if moved > ticket.latest:
                ticket.slot = moved
                ticket.refused = True
                del waiting[position]
                return
            ticket.slot = moved
        self._next_slot += interval

    def recheck(self, now: float, ticket: SlotTicket) -> Union[float, Refusal]:
        """Return how much longer the attempt holding ``ticket`` waits (0: send now), or refuse."""
        with self._lock:
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
                self.paced = False
            return self.paced

    def snapshot(self, now: float) -> ServerPacerSnapshot:
        """Return the pacer's state at ``now``."""
        with self._lock:
            if not self.paced:
                return ServerPacerSnapshot(False, None, None, 0.0, self._pushbacks)
            return ServerPacerSnapshot(
                True,
                self._rate_at(now),
                self._peak,
                max(0.0, self._next_slot - now),
                self._pushbacks,
            )


def admission_for(
    policy: Policy, *, clock: Callable[[], float] = time.monotonic
) -> Optional[AdmissionControl]:
    """Return a fresh AdmissionControl for an adaptive ``policy``, else None (no pacing)."""
    return AdmissionControl(policy, clock=clock) if policy.adaptive else None


class AdmissionControl:
    """The pacers of one client's servers, and the questions the adapters ask them.

    ``admit(server, deadline)`` before every attempt, then ``record(server, overloaded)`` after
    it.  Pacers are created on first use of an address; the map is read without a lock.
    """

    def __init__(self, policy: Policy, *, clock: Callable[[], float] = time.monotonic) -> None:
        """Create an empty map of pacers configured by ``policy``, timed by ``clock``."""
        self._policy = policy
        self._clock = clock
        self._max_wait = float(policy.max_local_wait)
        self._pacers: dict[Address, ServerPacer] = {}
        self._lock = threading.Lock()
        self.engaged = False
        """Whether some server may be paced: set by pushback, cleared once every pacer has
        opened again.  While it is False the adapters skip the pacing (nothing would wait)."""

    @property
    def clock(self) -> Callable[[], float]:
        """The injected monotonic clock."""
        return self._clock

    @property
    def policy(self) -> Policy:
        """The policy whose adaptive fields configure the pacers."""
        return self._policy

    def pacer(self, server: Address) -> ServerPacer:
        """Return the pacer of ``server``, creating it on first use."""
        pacer = self._pacers.get(server)
        if pacer is None:
            with self._lock:
                pacer = self._pacers.get(server)
                if pacer is None:
                    pacer = self._pacers[server] = ServerPacer(self._policy)
        return pacer

    def admit(
        self,
        server: Optional[Address],
        deadline: Optional[float] = None,
        *,
        retry: bool = False,
        sheddable: bool = False,
    ) -> AdmissionDecision:
        """Decide whether an attempt to ``server`` is sent now, after a wait, or refused.

        ``deadline`` is the operation's deadline on the injected clock (None: no deadline).  The
        wait allowed is ``max_local_wait``, or the time left before the deadline if shorter.
        ``retry``: the attempt retries one a server pushed back (it goes ahead of the queue).
        ``sheddable``: the operation may be shed first (critical attempts go ahead of it).
        """
        if server is None:
            return _SEND_NOW
        pacer = self._pacers.get(server)
        if pacer is None or not pacer.paced:
            return _SEND_NOW
        now = self._clock()
        limit = self._max_wait
        deadline_bound = False
        if deadline is not None and deadline - now < limit:
            limit = max(0.0, deadline - now)
            deadline_bound = True
        decision = pacer.admit(now, limit, deadline_bound, retry, sheddable)
        if not pacer.paced:
            self._refresh_engaged()
        return decision

    def record(
        self,
        server: Optional[Address],
        *,
        overloaded: bool,
        admission: Optional[Admission] = None,
    ) -> None:
        """Account for the reply to an attempt on ``server`` (``overloaded``: pushed back).

        ``admission`` is what :meth:`admit` answered for that attempt (None when unknown).
        """
        if server is None:
            return
        if overloaded:
            slot = None if admission is None else admission.send_slot
            self.pacer(server).record_pushback(self._clock(), slot)
            self.engaged = True
        else:
            slot = None if admission is None else admission.send_slot
            self.pacer(server).record_admitted(self._clock(), slot)

    def batch_counter(self, server: Address, count: int) -> Callable[[], None]:
        """Return a callable that counts ``count`` admitted replies from ``server`` now."""
        pacer = self.pacer(server)
        clock = self._clock

        def count_batch() -> None:
            pacer.add_admitted(clock(), count)

        return count_batch

    def recheck(self, server: Optional[Address], admission: Admission) -> Union[float, Refusal]:
        """Return how much longer an admitted attempt waits (0: send now), or its refusal.

        Ask when the wait ``admit`` answered is over: a retry going ahead may have moved the
        slot later, or past the attempt's bound.
        """
        ticket = admission.ticket
        if server is None or ticket is None:
            return 0.0
        return self.pacer(server).recheck(self._clock(), ticket)

    def is_paced(self, server: Address) -> bool:
        """Whether attempts to ``server`` are paced now (opening its pacer if it is due)."""
        pacer = self._pacers.get(server)
        if pacer is None or not pacer.paced:
            return False
        if pacer.still_paced(self._clock()):
            return True
        self._refresh_engaged()
        return False

    def _refresh_engaged(self) -> None:
        """Recompute ``engaged`` after a pacer opened again."""
        self.engaged = any(p.paced for p in list(self._pacers.values()))

    def pushing_back(self) -> bool:
        """Whether any server of this client is paced (used to hold hedges and probes)."""
        return any(pacer.paced for pacer in list(self._pacers.values()))

    def snapshot(self) -> dict[Address, ServerPacerSnapshot]:
        """Return the state of every known server's pacer."""
        now = self._clock()
        return {server: pacer.snapshot(now) for server, pacer in list(self._pacers.items())}


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


class AdmissionListener(Protocol):
    """Receives local waits and refusals (a RetryListener may implement these too).

    Either method may be left out; exceptions raised are logged and ignored.
    """

    def waited(self, event: LocalWaitEvent) -> None:
        """Called before an attempt waits locally."""

    def refused(self, event: LocalRefusalEvent) -> None:
        """Called when an attempt is refused locally."""


class AdmissionGate:
    """What the adapters call around each attempt: admit (events, logs, refusal) and record.

    ``admit`` returns the :class:`Admission` whose ``wait`` the adapter sleeps (``time.sleep``
    or ``asyncio.sleep``) before sending, or raises :class:`LocalOverloadError`; ``record``
    hands the attempt's outcome back to the pacer.
    """

    def __init__(
        self,
        control: AdmissionControl,
        *,
        listeners: Sequence[object] = (),
        logger: logging.Logger = _LOGGER,
        log_interval: float = 5.0,
    ) -> None:
        """Serve ``control``; notify ``listeners``; log waits and refusals rate-limited."""
        self.control = control
        """The pacers this gate asks."""
        self.listeners: Sequence[object] = tuple(listeners)
        """Objects notified of waits and refusals (those with ``waited``/``refused``)."""
        self._logger = logger
        self._wait_log = LogRateLimit(log_interval, clock=control.clock)
        self._refusal_log = LogRateLimit(log_interval, clock=control.clock)

    def admit(
        self,
        operation: str,
        server: Optional[Address],
        deadline: Optional[float],
        *,
        retry: bool = False,
        hold: bool = True,
        sheddable: bool = False,
    ) -> Admission:
        """Return the admission of one attempt to ``server``, or raise LocalOverloadError.

        ``retry``: the attempt retries one a server pushed back (see :meth:`ServerPacer.admit`);
        ``sheddable``: the operation may be shed first (``overrides(criticality="sheddable")``).
        ``hold=False`` (test mode, where nothing waits): the attempt is sent now whatever the
        pacing says; nothing is reserved, waited for or refused, and its outcome is still
        recorded (pushback still closes the pacer).
        """
        if not hold:
            return _SEND_NOW
        decision = self.control.admit(server, deadline, retry=retry, sheddable=sheddable)
        if isinstance(decision, Admission):
            ticket = decision.ticket
            held = ticket is not None and ticket.refused  # held, then refused: announced then
            if decision.wait > 0.0 and server is not None and not held:
                self._waited(operation, server, decision.wait)
            return decision
        raise self._refusal_error(operation, server, decision)

    def recheck(self, operation: str, server: Optional[Address], admission: Admission) -> float:
        """Return how much longer an admitted attempt waits (0: send it now).

        Call it when the wait of :meth:`admit` (or of the previous recheck) is over: a retry
        going ahead of the queue may have moved the attempt's slot.

        Raises:
            LocalOverloadError: the slot moved past the attempt's bound; it is not sent.
        """
        decision = self.control.recheck(server, admission)
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
        admission: Optional[Admission],
        error: Optional[BaseException] = None,
    ) -> bool:
        """Record the outcome of an attempt: ``error`` None for a reply that is no overload.

        Returns whether the server pushed the attempt back (its retry goes ahead of the queue).
        """
        overloaded = error is not None and is_overload(error)
        if error is not None and not overloaded:
            return False  # network errors and the like say nothing about what the server admits
        self.control.record(server, overloaded=overloaded, admission=admission)
        return overloaded

    def _waited(self, operation: str, server: Address, wait: float) -> None:
        """Announce and log a local wait."""
        snapshot = self.control.pacer(server).snapshot(self.control.clock())
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
                self._logger.exception("backpressure admission listener %r failed", listener)
