"""The pacing state of one server: an AIMD send rate and the queue of reserved send slots.

The rules are described in :mod:`backpressure.core.adaptive`.
"""

from __future__ import annotations

import itertools
import math
import operator
import threading
from collections import deque
from dataclasses import dataclass
from typing import Optional, Union

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

_BUCKETS = 10  # time buckets per measurement window
_BUCKET_EDGE = 1e-6  # an instant this close below a bucket's start counts as that start
_SEND_BUCKETS = 3  # the send rate a decrease starts from is measured over this many buckets
_STALL_REPLIES = 10  # a silence (no reply, no caller asking) in which the lower of the reply
# rate before it and the paced rate gives this many replies is a stall (the callers were held
# outside the pacing): no test and no send-rate cut during it or within the send buckets after
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
_HELD_QUIET = 0.25  # after a held round, the climb starts after this share of adaptive_quiet
_YOUNG = 2.0  # a pushback less than this many windows after the close is of a young overload:
_YOUNG_GAPS = 3.0  # ... its quiet is this many mean gaps between its pushback rounds, ...
_YOUNG_ROUNDS = 4  # ... over its last this many pushback rounds, ...
_YOUNG_QUIET = 0.25  # ... and at least this many windows (at most adaptive_quiet)
_CLIMB_CUT_QUIET = 2.0  # a climbing pacer cuts with its neighbours' tests only this many
# windows after its last pushback (later it is past any overload: its climb sends its demand)
_JUMP_AGE = 4.0  # a climb that starts within this many windows of the close starts from the
# rate the server admitted before the overload (when the pacer had a window of replies then)
_MAX_DOUBLINGS = 30.0  # the fast climb's exponent stops here (no float overflow)
_MAX_RATE = 1e6  # attempts per second: far above any server's
_EARLY = 1e-3  # a recheck this close to the slot sends (timers may fire a little early)
_TEST_GRID = 1.0  # the neighbour tests start at instants this many windows apart (the same
# instants for every client of the clock): a pacer paced for at least ...
_SETTLE = 1.0  # ... this many windows (its closing cut has settled) cuts at every instant ...
_ONSET_TESTS = 4.0  # ... until this many windows after it closed, then ...
_TEST_EVERY = 3  # ... at one instant in this many (a test costs its peers a little each time)
_TEST_SCALE = 0.8  # a polite pacer cuts to this share of its send rate ...
_TEST_LENGTH = 0.5  # ... for this many windows, every pacer alike: a peer back at its rate
# while another still cuts pushes that one back, which reads as neighbours that do not cut (and
# a shorter cut looks drained even next to them: their retry loops answer it within a backoff)
_COMPETING_SCALE = 0.75  # a competing pacer cuts to this share of what the server admitted it
_COMPETING_TESTS = 16  # ... at one instant in this many
_CUT_SHARE = 0.02  # a pacer cuts only when at least this share of the last window's replies
# pushed back (a client alone at its capacity loses nothing to the tests), and ...
_TEST_SHARE = 0.15  # a pacer judges its cut when at least this share of its replies of the
_JUDGE_REPLIES = 5  # last window (of at least this many) pushed back, one within ...
_TEST_RECENT = 0.2  # ... this many windows or among the last ...
_RECENT_REPLIES = 5  # ... this many replies (an overload that ended needs no test)
_MIN_UNMOVED = 0.15  # a cut's pushback share next to neighbours that do not cut: the share
_MAX_UNMOVED = 0.6  # of the window before it, within these bounds ...
_DRAINED = 0.2  # ... and among peers who cut too, this share of it
_EVIDENCE = 3.0  # the log-likelihood ratio at which the pacer competes (and its bound)
_POLITE_STEP = 0.5  # one test lowers a polite pacer's evidence by at most this much
_HELD_PUSHBACKS = 3  # a round is held (admitted nothing) only after this many pushbacks
_MARKING = 5.0  # a client marks work sheddable for this many windows after a sheddable attempt
_LAST_CHANCE_LEAD = 0.2  # a last chance is sent this many windows before its bound (a retry fits)

_SLOT_OF = operator.attrgetter("slot")


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
        self._peak = 0.0  # the rate a decrease started from (above it, a climb joins the tests)
        self._spaced_rate = 0.0  # the rate the waiting slots are spaced at
        self._anchor = 0.0  # when ``_rate`` was set (the last decrease, or hold)
        self._next_slot = 0.0
        self._waiting: deque[SlotTicket] = deque()  # reserved slots not yet due, in order
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
        self._last_wait = -math.inf
        self._pushbacks = 0
        self._first_sample: Optional[float] = None
        self._last_heard = -math.inf  # the last reply counted, or caller asking for a slot
        self._heard_pushback = False  # whether that was a pushback (its retry backs off)
        self._stall_end = -math.inf  # when the last stall ended (see _heard)
        self._bucket_ids = [-1] * _BUCKETS
        self._replies = [0] * _BUCKETS  # replies (admitted or pushed back) per time bucket
        self._pushed = [0] * _BUCKETS  # pushbacks per time bucket
        self._latency = 0.0
        self.competing = False
        """Whether the pacer competes: sends as the spec's loop alone does (no local waits)
        because its neighbours do not cut when it cuts (read without the lock)."""
        self._competed = 0.0  # seconds of the finished competing spells
        self._competing_since = 0.0  # when the current competing spell began
        self._spells = 0  # competing spells begun
        self._test = -1  # the test period whose test has run (or runs)
        self._testing = False
        self._test_start = 0.0  # when the running (or last) test's cut began
        self._judging = False  # whether the running test's replies count as evidence
        self._climb_cut = False  # whether the running test cuts only because the pacer climbs
        # The rate, its anchor, held flag and peak before the test.
        self._restore: tuple[float, float, bool, float] = (0.0, 0.0, False, 0.0)
        self._closed_at = 0.0  # when the pacer last closed
        self._before = 0.0  # the pushback share of the window before the running test
        self._evidence = 0.0  # log-likelihood ratio: neighbours that do not cut vs peers
        self._last_sheddable = -math.inf  # when a sheddable attempt last asked for a slot
        self._last_chances = 0  # replies to critical attempts sent at their last chance

    # -- measurement ---------------------------------------------------------------------------

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

    def _count(self, now: float, count: int = 1, pushed: int = 0) -> None:
        """Add ``count`` replies (``pushed`` of them pushbacks) to the time bucket of ``now``."""
        self._heard(now, pushed > 0)
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

    def _heard(self, now: float, pushback: bool = False) -> None:
        """A reply came (``pushback``: pushed back), or a caller asked for a slot: note a stall
        that ends (lock held)."""
        if self._stall_gap(now):
            self._stall_end = now
        self._last_heard = now
        self._heard_pushback = pushback

    def _stall_gap(self, now: float) -> bool:
        """Whether the client has been silent since it was last heard from: no reply, and no
        caller asking for a slot (a waiting one asks every ``_NAP`` windows), for a stretch in
        which ``_STALL_REPLIES`` replies would have come (lock held).

        Its callers are held outside the pacing: a pool reopening its connections after a
        reset, or the server being found again.  The pacing's own spacing is no stall (its
        waiting callers ask again while they wait), nor a silence after a pushback (the spec's
        backoff before its retry).
        """
        gap = now - self._last_heard
        if gap < self._width or self._heard_pushback or not self.paced:
            return False
        replies, _, span = self._window_counts(self._last_heard)
        return min(replies / span, self._rate_at(self._last_heard)) * gap >= _STALL_REPLIES

    def _stalled(self, now: float) -> bool:
        """Whether the client is silent, or was within the send rate's buckets (lock held):
        what it sent then says nothing about its demand or about the server."""
        return now - self._stall_end < _SEND_BUCKETS * self._width or self._stall_gap(now)

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

    def _recent(self, now: float, buckets: int) -> tuple[int, int]:
        """Replies and pushbacks over the last ``buckets`` time buckets (lock held)."""
        current = int(now / self._width)
        return self._between(current - buckets + 1, current)

    def _between(self, first: int, last: int) -> tuple[int, int]:
        """Replies and pushbacks in the time buckets ``first`` to ``last`` (lock held)."""
        replies = pushed = 0
        for bucket, count, push in zip(self._bucket_ids, self._replies, self._pushed):
            if first <= bucket <= last:
                replies += count
                pushed += push
        return replies, pushed

    # -- competition -----------------------------------------------------------------------------

    def _judge(self, now: float) -> None:
        """Test, at fixed instants, whether this client's cuts move the pushback (lock held).

        A polite (AIMD) pacer loses to neighbours that do not cut (stock retry loops): its cuts only
        hand its share over, and the pushback stays as high. Among polite peers a cut that everyone
        makes drains the pushback at once. The pushback *level* cannot tell the two apart (it is as
        high among peers converging after a capacity step as next to stock clients); a joint cut
        can. At instants ``_TEST_GRID`` windows apart, the same for every client of the clock, a
        pacer paced for at least ``_SETTLE`` windows cuts for ``_TEST_LENGTH`` windows (every one
        for as long: a cut that ended early, with no pushback of its own, would send the pushback of
        its return into its peers' running cuts): at every instant until ``_ONSET_TESTS`` windows
        after it closed (peers close together when an overload begins, so they test together and
        decide fast), then at one in ``_TEST_EVERY``. A polite pacer cuts to ``_TEST_SCALE`` of its
        send rate (the waiting slots too: :meth:`_stretch`); a competing one, at one instant in
        ``_COMPETING_TESTS``, to ``_COMPETING_SCALE`` of what the server admitted it over the last
        window. Every paced pacer pushed back in the last window, or climbing above the rate of its
        last decrease within ``_CLIMB_CUT_QUIET`` windows of its last pushback, cuts, so among peers
        the cut is joint; one whose replies of the last window were pushed back in at least
        ``_TEST_SHARE`` of them also *judges*: each of the cut's replies (without its first bucket,
        sent before it) adds to a log-likelihood ratio, pushed back as often as in the window before
        the cut (within ``_MIN_UNMOVED`` and ``_MAX_UNMOVED``) against ``_DRAINED`` of that. One
        test has a few replies (a dense fleet's client sees a dozen a second), so the evidence adds
        up over tests, bounded to +-``_EVIDENCE``. At ``+_EVIDENCE`` the pacer competes: it sends as
        the spec's retry loop alone does (no local waits). Back at -``_EVIDENCE`` it is polite
        again, at its test's rate. A window in which the server admitted nothing (a fault) is no
        evidence and gets no test. The server's burst allowance keeps the tokens a cut leaves
        unused.
        """
        period = self._window * _TEST_GRID
        index = int(now / period)
        since = now - index * period
        length = _TEST_LENGTH * self._window
        if self._testing:
            # The test's replies: from the bucket after the one its cut began in (that one
            # holds replies to attempts sent before the cut) to the last bucket that ended
            # before the test did (a reply counted after it answers the rate it returned to).
            if since < length and index == self._test:
                return  # still running
            end = min(now, self._test * period + length)
            replies, pushed = self._between(
                int(self._test_start / self._width) + 1,
                int(end / self._width + _BUCKET_EDGE) - 1,
            )
            self._testing = False
            if self._judging and replies:
                # Next to neighbours that do not cut, the cut's replies are pushed back as
                # often as the window's before it; among peers, a fifth as often at most.
                unmoved = min(max(self._before, _MIN_UNMOVED), _MAX_UNMOVED)
                drained = _DRAINED * unmoved
                step = pushed * math.log(unmoved / drained) + (replies - pushed) * math.log(
                    (1.0 - unmoved) / (1.0 - drained)
                )
                # One test lowers the evidence only so far.  A polite pacer starved by its
                # neighbours judges a cut on a reply or two: a few admitted ones must not
                # outweigh the tests before.  A competing one goes at most half way back: it
                # takes two drained cuts, however many replies one has (a joint cut of
                # competing peers next to a stock sender drains for a moment too).
                floor = _EVIDENCE if self.competing else _POLITE_STEP
                step = max(step, -floor)
                evidence = self._evidence + step
                self._evidence = min(max(evidence, -_EVIDENCE), _EVIDENCE)
                if not self.competing and self._evidence >= _EVIDENCE:
                    self.competing = True
                    self._competing_since = now
                    self._spells += 1
                    self._waiting.clear()  # their callers are sent on their next recheck
                    self._next_slot = now
                elif self.competing and self._evidence <= -_EVIDENCE:
                    # The neighbours cut too: polite again, from the test's rate.
                    self._stop_competing(now)
                    self._peak = self._rate
                    return
            if self._climb_cut:
                # It cut only because it climbed: it climbs on from the cut (the rate before
                # it was never learned, and a decrease during the cut stands).
                return
            # The rate goes on as if there had been no test (a climb after a fault included).
            self._rate, self._anchor, self._held, self._peak = self._restore
            self._spaced_rate = min(self._spaced_rate, self._rate)
            return
        if index == self._test or since >= length:
            return
        if now - self._closed_at < _SETTLE * self._window:
            return
        self._test = index
        self._test_start = now
        if self.competing:
            every = _COMPETING_TESTS  # a test costs a share the neighbours take: test seldom
        elif now - self._closed_at < _ONSET_TESTS * self._window:
            every = 1  # the overload began: peers that closed with this one test together
        else:
            every = _TEST_EVERY
        if index % every:
            return
        replies, pushed = self._recent(now, _BUCKETS)
        # A pacer climbing above the rate of its last decrease cuts with the others even with
        # no pushback of its own: its climb would otherwise fill what its peers' joint cut
        # leaves, and they would take each other for neighbours that do not cut.  (Not after a
        # held round: the server admitted nothing, so its capacity is not what the climb
        # passes.)
        quiet = pushed < _CUT_SHARE * replies
        # Not once it has been quiet for a while: its climb doubled past its demand with no
        # pushback, so its neighbours' overload (if any) is not where it sends, and a cut would
        # only keep its callers waiting, so that it never reopens.
        climbing = (
            not self._held
            and now - self._last_pushback <= _CLIMB_CUT_QUIET * self._window
            and self._rate_at(now) > self._peak
        )
        if replies < _JUDGE_REPLIES or pushed == replies or (quiet and not climbing):
            # Too little to tell, or too little overload to cut for (and no climb); or the
            # server admits nothing (a fault rejecting everything, whoever the neighbours
            # are): no test.
            return
        if self._stalled(now):
            # Its callers are held elsewhere, or were a moment ago: a cut from what it sent
            # meanwhile would measure nothing and keep them waiting once they are back.
            return
        self._judging = (
            pushed >= _TEST_SHARE * replies
            and (
                now - self._last_pushback <= _TEST_RECENT * self._window
                or self._admitted_since < _RECENT_REPLIES
            )
            and not self._held
            # A marking client's last chances are sent beyond its paced rate, so a fleet of
            # them is no set of polite peers: its joint cut need not drain the pushback.  It
            # cuts with its neighbours, but takes no verdict from it (a competing one still
            # judges, to be polite again).
            and (self.competing or not self._marks(now))
        )
        self._testing = True
        self._climb_cut = quiet
        self._before = pushed / replies
        self._restore = (self._rate, self._anchor, self._held, self._peak)
        if self.competing:
            admitted = (replies - pushed) / self._window
            self._set_rate(now, _COMPETING_SCALE * admitted)
        else:
            self._set_rate(now, _TEST_SCALE * min(self._rate_at(now), self._send_rate(now)))
        self._next_slot = max(self._next_slot, now)
        self._stretch(now, self._rate)

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

    def _learned_rate(self, now: float) -> float:
        """The paced rate at ``now`` without a running test's cut (lock held)."""
        if not self._testing or self._climb_cut:
            return self._rate_at(now)  # a climb's cut stands after its test
        during = (self._rate, self._anchor, self._held, self._peak)
        self._rate, self._anchor, self._held, self._peak = self._restore
        try:
            return self._rate_at(now)
        finally:
            self._rate, self._anchor, self._held, self._peak = during

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
                return
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

    def _stop_competing(self, now: float) -> None:
        """End a competing spell, adding its length to the total (lock held)."""
        if self.competing:
            self._competed += max(0.0, now - self._competing_since)
        self.competing = False

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

    def _still_waiting(self, now: float) -> int:
        """The waiting attempts whose slot is after ``now`` (lock held).

        The queue is in slot order, so the due ones (their callers are sending) are at its
        head: dropped here (for :meth:`admit` and the re-spacings too), the rest is its length.
        """
        waiting = self._waiting
        while waiting and waiting[0].slot <= now:
            waiting.popleft()
        return len(waiting)

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
