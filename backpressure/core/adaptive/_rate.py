"""The rate rules of one server's pacer: close on overload, decrease once per round, hold a
round the server admitted nothing in, increase additively, then climb fast.

The rules are described in :mod:`backpressure.core.adaptive` (1 to 3).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Optional

from backpressure.core.adaptive._replies import ReplyCounts
from backpressure.core.policy import Policy

__all__ = ["RateRules"]

_LATENCY_RISE = 0.5  # weight of a slot-to-reply time above the estimate (follows rises fast)
_LATENCY_FALL = 0.05  # weight of one below it (forgets slowly)
_CLOSE_PUSHBACKS = 2  # an open pacer closes on at least this many pushbacks within a window
_CLOSE_FRACTION = 0.1  # ... that are also at least this share of the window's replies
_CLOSE_SEND_SHARE = 0.5  # an open pacer closes at no less than this share of the send rate
_CLIMB_DOUBLING = 0.25  # the fast climb doubles the rate every this many windows
_MIN_ROUND = 0.1  # a round lasts at least this share of the window ...
_ROUND_LATENCIES = 2.0  # ... and at least this many slot-to-reply times
_HELD_QUIET = 0.25  # after a held round, the climb starts after this share of adaptive_quiet
_YOUNG = 2.0  # a pushback less than this many windows after the close is of a young overload:
_YOUNG_GAPS = 3.0  # ... its quiet is this many mean gaps between its pushback rounds, ...
_YOUNG_ROUNDS = 4  # ... over its last this many pushback rounds, ...
_YOUNG_QUIET = 0.25  # ... and at least this many windows (at most adaptive_quiet)
_JUMP_AGE = 4.0  # a climb that starts within this many windows of the close starts from the
# rate the server admitted before the overload (when the pacer had a window of replies then)
_MAX_DOUBLINGS = 30.0  # the fast climb's exponent stops here (no float overflow)
_MAX_RATE = 1e6  # attempts per second: far above any server's
_HELD_PUSHBACKS = 3  # a round is held (admitted nothing) only after this many pushbacks


class RateRules(ReplyCounts):
    """The AIMD send rate of one server's pacer (a layer of :class:`ServerPacer`).

    Every method runs with the pacer's lock held.
    """

    def __init__(self, policy: Policy) -> None:
        """Create an open pacer's rate state, configured by ``policy``'s adaptive fields."""
        super().__init__(policy)
        self._decrease = float(policy.adaptive_decrease)
        self._increase = float(policy.adaptive_increase)
        self._quiet = float(policy.adaptive_quiet)
        self._doubling = self._window * _CLIMB_DOUBLING
        self._min_rate = float(policy.adaptive_min_rate)
        self.paced = False
        """Read without the lock on the hot path: a bool attribute read is atomic."""
        self._rate = 0.0  # the paced rate at the anchor
        self._peak = 0.0  # the rate a decrease started from (above it, a climb joins the tests)
        self._anchor = 0.0  # when ``_rate`` was set (the last decrease, or hold)
        self._last_pushback = -math.inf
        # When the overload's pushback rounds began (pushbacks at least a round apart), and the
        # quiet that ends a young overload (see _rate_at).
        self._pushback_rounds: deque[float] = deque(maxlen=_YOUNG_ROUNDS)
        self._young_quiet = self._quiet
        self._admitted_before = 0.0  # what the server admitted before the overload (0: unknown)
        self._admitted_since = 0  # replies admitted since the last pushback
        self._round = 0
        self._admitted_in_round = 0
        self._pushed_in_round = 0  # pushbacks of attempts sent in this round
        self._held = False  # the last round admitted nothing: the rate is held, not learned
        self._resumed = math.inf  # when the server first admitted again after a held round
        self._latency = 0.0
        self._closed_at = 0.0  # when the pacer last closed

    def _resume(self, now: float) -> None:
        """Note the first admitted reply after a held round: the fault ended (lock held)."""
        if self._held and now < self._resumed:
            self._resumed = now

    def _pushback_round(self, now: float) -> None:
        """Note a pushback of a paced server; in a young overload, learn its quiet (lock held).

        Pushbacks a round apart or more begin a new pushback round.  While the overload is
        young (the pacer closed less than ``_YOUNG`` windows ago) the rate is still coming
        down to what the server admits, so the pushback rounds come often, and
        ``_YOUNG_GAPS`` times their mean gap without one says that the overload ended (a
        tight limit of a second or two, say).  A converged pacer's pushbacks are far apart (a
        median of about a third of a window in a fleet): its quiet stays ``adaptive_quiet``.
        """
        rounds = self._pushback_rounds
        if rounds and now - rounds[-1] < self._round_length():
            return
        rounds.append(now)
        if len(rounds) > 1:
            gap = (rounds[-1] - rounds[0]) / (len(rounds) - 1)
            floor = _YOUNG_QUIET * self._window
            self._young_quiet = min(self._quiet, max(floor, _YOUNG_GAPS * gap))

    def _round_length(self) -> float:
        """The shortest round: twice the slot-to-reply time, and a tenth of the window."""
        return max(_ROUND_LATENCIES * self._latency, _MIN_ROUND * self._window)

    def _learn_latency(self, sample: float) -> None:
        """Fold one slot-to-reply time into the estimate (lock held)."""
        weight = _LATENCY_RISE if sample > self._latency else _LATENCY_FALL
        self._latency += weight * (sample - self._latency)

    def _rate_at(self, now: float) -> float:
        """The paced rate at ``now``: additive increase from the anchor, then the fast climb.

        ``rate + increase * t`` (the same absolute increase for every client), and once the
        server has not pushed back for ``adaptive_quiet`` seconds, doubling every
        ``_CLIMB_DOUBLING`` windows from there until the next pushback, with no ceiling: the
        quiet may be the overload's end, and a client paced at a fraction of its demand must be
        back at its demand within a second or two.  (A climb during the overload finds the
        capacity again at its first pushback; it joins the neighbour tests' cuts, so it does not
        spoil its peers' verdicts: :meth:`_judge`.)  After a held round the climb starts as soon
        as the server has admitted everything for a round, if that comes first: the first
        admitted round says the fault ended.
        """
        start = self._anchor
        # After a round the server admitted nothing in (a fault rejecting everything), the
        # first quiet stretch is enough: the rate was held, not learned.  A young overload's
        # quiet is learned from its pushback rounds (_pushback_round).
        if self._held:
            quiet = self._quiet * _HELD_QUIET
        elif self._last_pushback - self._closed_at < _YOUNG * self._window:
            quiet = self._young_quiet
        else:
            quiet = self._quiet
        climb = self._last_pushback + quiet
        # ... or, sooner, once the server has admitted everything for a round since then: the
        # fault ended.
        climb = min(climb, self._resumed + self._round_length())
        rate = self._rate + self._increase * (now - start)
        if now > climb:
            # A climb soon after the close, from a rate no decrease has changed since the quiet
            # began, starts from what the server admitted before the overload: a short
            # overload's end most likely gives that capacity back.
            jump = start < climb and climb - self._closed_at < _JUMP_AGE * self._window
            climb = max(climb, start)
            base = self._rate + self._increase * (climb - start)
            if jump:
                base = max(base, self._admitted_before)
            doubled = base * math.pow(2.0, min(_MAX_DOUBLINGS, (now - climb) / self._doubling))
            rate = max(rate, doubled)
        return min(max(self._min_rate, rate), _MAX_RATE)

    def _set_rate(self, now: float, rate: float) -> None:
        """Pace at ``rate`` from ``now`` and start a new round (lock held)."""
        self._rate = min(max(rate, self._min_rate), _MAX_RATE)
        self._spaced_rate = self._rate
        self._anchor = now
        self._round += 1
        self._admitted_in_round = 0
        self._pushed_in_round = 0
        self._held = False
        self._resumed = math.inf

    def _close(self, now: float) -> None:
        """Close the open pacer on an overload (a pushback was just counted), not on a blip."""
        replies, pushed, span = self._window_counts(now)
        if pushed < _CLOSE_PUSHBACKS or pushed < _CLOSE_FRACTION * replies:
            return  # a blip, not an overload: nothing changes
        self.paced = True
        self._closed_at = now
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
        # A client that had a window of replies before closing knows what the server
        # admitted before the overload (one closing sooner saw only its first burst).
        known = self._first_sample is not None and now - self._first_sample >= self._window
        self._admitted_before = start if known else 0.0
        self._pushback_rounds.clear()
        self._pushback_rounds.append(now)
        self._young_quiet = self._quiet

    def _slow_down(self, now: float, slot: Optional[float], current: float) -> None:
        """Decrease once per round for a pushback of an attempt sent at ``slot`` (a paced
        pacer's; ``current``: the rate before it), or hold a round the server admitted nothing in.
        """
        if slot is None or slot < self._anchor:
            return  # sent before the last decrease (or unpaced): reacted to already
        self._pushed_in_round += 1
        if now - self._anchor < self._round_length():
            # A round is at least this long: a decrease reaches the server's queue only
            # after the replies queued there before it (the slot-to-reply time).
            return
        if self._admitted_in_round == 0:
            if self._pushed_in_round < _HELD_PUSHBACKS:
                # A client starved by its neighbours sees a reply or two a round: that
                # nothing was admitted says nothing yet.  Wait for more.
                return
            # Nothing admitted for a whole round: the server rejects everything.  Hold the
            # rate (a collapse would take seconds to climb back once the server admits).
            self._set_rate(now, self._rate)
            self._held = True
            return
        rate = current if self._stalled(now) else min(current, self._send_rate(now))
        self._set_rate(now, self._decrease * rate)
        self._peak = rate
        self._respace(now, self._rate)
