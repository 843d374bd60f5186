"""The neighbour tests of one server's pacer: joint cuts at fixed instants, judged to tell
polite peers from neighbours that do not cut, and the competing state they decide.

The rules are described in :mod:`backpressure.core.adaptive` (8).
"""

from __future__ import annotations

import math

from backpressure.core.adaptive._rate import RateRules
from backpressure.core.adaptive._replies import _BUCKET_EDGE, _BUCKETS
from backpressure.core.policy import Policy

__all__ = ["NeighbourTests"]

_CLIMB_CUT_QUIET = 2.0  # a climbing pacer cuts with its neighbours' tests only this many
# windows after its last pushback (later it is past any overload: its climb sends its demand)
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


class NeighbourTests(RateRules):
    """The neighbour tests and the competing state of one server's pacer (a layer of
    :class:`ServerPacer`).

    Every method runs with the pacer's lock held.
    """

    def __init__(self, policy: Policy) -> None:
        """Create a polite pacer's test state (no test has run)."""
        super().__init__(policy)
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
        self._before = 0.0  # the pushback share of the window before the running test
        self._evidence = 0.0  # log-likelihood ratio: neighbours that do not cut vs peers

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
            if since < length and index == self._test:
                return  # still running
            self._end_test(now, period, length)
            return
        if index == self._test or since >= length:
            return
        if now - self._closed_at < _SETTLE * self._window:
            return
        self._begin_test(now, index)

    def _end_test(self, now: float, period: float, length: float) -> None:
        """End the running test: weigh its replies if it judges, then go back to the rate
        before the cut, unless the verdict or a climb's cut says otherwise (lock held)."""
        # The test's replies: from the bucket after the one its cut began in (that one
        # holds replies to attempts sent before the cut) to the last bucket that ended
        # before the test did (a reply counted after it answers the rate it returned to).
        end = min(now, self._test * period + length)
        replies, pushed = self._between(
            int(self._test_start / self._width) + 1,
            int(end / self._width + _BUCKET_EDGE) - 1,
        )
        self._testing = False
        if self._judging and replies and self._weigh(now, replies, pushed):
            return
        if self._climb_cut:
            # It cut only because it climbed: it climbs on from the cut (the rate before
            # it was never learned, and a decrease during the cut stands).
            return
        # The rate goes on as if there had been no test (a climb after a fault included).
        self._rate, self._anchor, self._held, self._peak = self._restore
        self._spaced_rate = min(self._spaced_rate, self._rate)

    def _weigh(self, now: float, replies: int, pushed: int) -> bool:
        """Add a judged test's ``replies`` (``pushed`` of them pushed back) to the evidence, and
        compete or be polite again at its bounds; True when polite again, from the test's rate
        (lock held)."""
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
            return True
        return False

    def _begin_test(self, now: float, index: int) -> None:
        """At the test instant ``index`` (the first moment of it this pacer sees), cut if this
        pacer tests at it and has reason to, and decide whether the cut judges (lock held)."""
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

    def _stop_competing(self, now: float) -> None:
        """End a competing spell, adding its length to the total (lock held)."""
        if self.competing:
            self._competed += max(0.0, now - self._competing_since)
        self.competing = False
