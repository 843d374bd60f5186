"""The queue of one server's waiting callers: reserved send slots, in class and slot order.

A caller the pacing makes wait holds a :class:`SlotTicket` in the queue; the queue moves the
slots when the rate changes (a decrease, a rise, a neighbour test's cut), lets a retry or a
critical attempt go ahead of later classes, and gives a refused critical attempt its last
chance.  The rules are described in :mod:`backpressure.core.adaptive`; the rate the slots are
spaced at comes from :mod:`backpressure.core.adaptive._rate`.
"""

from __future__ import annotations

import itertools
import math
import operator
from collections import deque
from typing import Optional

from backpressure.core.adaptive.slots import SlotTicket
from backpressure.core.policy import Policy

__all__ = ["SlotQueue"]

_NAP = 0.1  # a waiting caller rechecks at least every this many windows (its slot may move)
_MARKING = 5.0  # a client marks work sheddable for this many windows after a sheddable attempt
_LAST_CHANCE_LEAD = 0.2  # a last chance is sent this many windows before its bound (a retry fits)

_SLOT_OF = operator.attrgetter("slot")


class SlotQueue:
    """The waiting callers of one server's pacer (the lowest layer of :class:`ServerPacer`).

    Every method runs with the pacer's lock held.
    """

    def __init__(self, policy: Policy) -> None:
        """Create an empty queue for ``policy``'s window."""
        self._window = float(policy.adaptive_window)
        self._nap = self._window * _NAP
        self._spaced_rate = 0.0  # the rate the waiting slots are spaced at
        self._next_slot = 0.0
        self._waiting: deque[SlotTicket] = deque()  # reserved slots not yet due, in order
        self._last_wait = -math.inf
        self._last_sheddable = -math.inf  # when a sheddable attempt last asked for a slot

    def _still_waiting(self, now: float) -> int:
        """The waiting attempts whose slot is after ``now`` (lock held).

        The queue is in slot order, so the due ones (their callers are sending) are at its
        head: dropped here (for :meth:`admit` and the re-spacings too), the rest is its length.
        """
        waiting = self._waiting
        while waiting and waiting[0].slot <= now:
            waiting.popleft()
        return len(waiting)

    def _stretch(self, now: float, rate: float) -> None:
        """Space the waiting slots at a test's ``rate`` at once, none past its bound (lock held).

        The callers queued before the cut hold slots at the old rate, often for most of the
        test (a closed loop's queue is a third of a window long and more): sent as reserved,
        they would answer the old rate, not the cut.  Unlike a decrease's re-spacing, a slot
        that would pass its bound stays at the bound (the test must refuse nobody), and no
        slot moves earlier.
        """
        self._spaced_rate = rate
        self._still_waiting(now)
        interval = 1.0 / rate
        previous: Optional[float] = None
        for ticket in self._waiting:
            if previous is not None:
                ticket.slot = max(ticket.slot, min(previous + interval, ticket.latest))
            previous = ticket.slot
        if previous is not None:
            self._next_slot = max(self._next_slot, previous + interval)

    def _respace(self, now: float, rate: float) -> None:
        """Space the waiting slots at ``rate`` from the first one, so a rate change acts at once.

        Without this, slots reserved at the old rate would go on being sent for as long as
        the queue is (in a closed loop, most of a deadline): after a decrease the late feedback
        makes every client overshoot, and after an overload ends the queue would drain at the
        overload's pace (a slot moves earlier too: waiting callers recheck every
        ``_NAP`` windows at most).  A slot moved past its bound is refused on its recheck.
        """
        self._spaced_rate = rate
        if not self._still_waiting(now):
            return
        waiting = self._waiting
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

    @staticmethod
    def _class_end(waiting: deque[SlotTicket], rank: int) -> int:
        """The index of the first waiting attempt of a rank above ``rank`` (there is one).

        The queue is in class order (an attempt joins it at the end of its class, and nothing
        reorders it), so a binary search finds it in a few probes whatever the queue's length.
        """
        low, high = 0, len(waiting)
        while low < high:
            middle = (low + high) // 2
            if waiting[middle].rank > rank:
                high = middle
            else:
                low = middle + 1
        return low

    def _move_back(self, index: int, interval: float) -> None:
        """Give every waiting attempt from ``index`` on the slot of the one behind it (lock held).

        The last one takes ``next_slot``, which moves one interval later.  An attempt whose new
        slot passes its bound is refused instead (its caller learns it on recheck) and the move
        stops there: the slot it leaves is taken by the one before it.  The walk copies nothing
        and ends at the refusal: under a long queue the first attempt moved is usually the one
        refused (the oldest of its class, nearest its bound), and those behind it cost nothing.
        """
        waiting = self._waiting
        # Each new slot is read just before the ticket behind it moves (no copy of the queue).
        slots = itertools.chain(
            map(_SLOT_OF, itertools.islice(waiting, index + 1, None)), (self._next_slot,)
        )
        moved = itertools.islice(waiting, index, None)
        for position, ticket, slot in zip(itertools.count(index), moved, slots):
            ticket.slot = slot
            if slot > ticket.latest:
                ticket.refused = True
                del waiting[position]
                return
        self._next_slot += interval

    def _last_chance(self, now: float, ticket: SlotTicket) -> bool:
        """Give a refused critical attempt its last chance, if the client marks work (lock
        held).

        When a client marks some work sheddable, its unmarked work is critical: such an
        attempt (a first attempt or a retry) refused a slot is sent once just before its bound
        (its deadline less the reply margin, or ``max_local_wait``), ``_LAST_CHANCE_LEAD``
        windows before it so that a retry still fits (at once when less is left), instead of
        failing unsent (``ticket.latest`` becomes that send time).
        Each client orders only its own queue, so one client refuses critical work while its
        neighbours' sheddable work takes the server's tokens; the last chance takes a token the
        server has to spare then (most are admitted), or is pushed back as the refusal would
        have failed.  Its reply is kept out of the pacing.  A client that marks nothing keeps
        refusing: there, a token taken beyond the paced rate is a peer's critical one.
        """
        if ticket.rank > 1 or not self._marks(now):
            return False
        ticket.last_chance = True
        ticket.latest = max(now, ticket.latest - _LAST_CHANCE_LEAD * self._window)
        return True

    def _marks(self, now: float) -> bool:
        """Whether the client marks work sheddable: one asked within ``_MARKING`` windows."""
        return now - self._last_sheddable < _MARKING * self._window
