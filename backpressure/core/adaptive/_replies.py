"""What one server answered: replies and pushbacks per time bucket, and the client's stalls.

The counts give the reply rate, the pushback share of the last window and the send rate a
decrease starts from; a silence in which replies would have come is a stall (the callers were
held outside the pacing).  The rules are described in :mod:`backpressure.core.adaptive`.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

from backpressure.core.adaptive._waiting import SlotQueue
from backpressure.core.policy import Policy

__all__ = ["ReplyCounts"]

_BUCKETS = 10  # time buckets per measurement window
_BUCKET_EDGE = 1e-6  # an instant this close below a bucket's start counts as that start
_SEND_BUCKETS = 3  # the send rate a decrease starts from is measured over this many buckets
_STALL_REPLIES = 10  # a silence (no reply, no caller asking) in which the lower of the reply
# rate before it and the paced rate gives this many replies is a stall (the callers were held
# outside the pacing): no test and no send-rate cut during it or within the send buckets after


class ReplyCounts(SlotQueue):
    """The reply counts of one server's pacer (a layer of :class:`ServerPacer`).

    Every method runs with the pacer's lock held, except :meth:`_count` while the pacer is open.
    """

    paced: bool
    """Whether attempts to the server are paced (set by the rate rules)."""
    _rate_at: Callable[[float], float]
    """The paced rate at a time (the rate rules' method, a layer above: ``RateRules``)."""

    def __init__(self, policy: Policy) -> None:
        """Create empty counts, in buckets of a tenth of ``policy``'s window."""
        super().__init__(policy)
        self._width = self._window / _BUCKETS
        self._first_sample: Optional[float] = None
        self._last_heard = -math.inf  # the last reply counted, or caller asking for a slot
        self._heard_pushback = False  # whether that was a pushback (its retry backs off)
        self._stall_end = -math.inf  # when the last stall ended (see _heard)
        self._bucket_ids = [-1] * _BUCKETS
        self._replies = [0] * _BUCKETS  # replies (admitted or pushed back) per time bucket
        self._pushed = [0] * _BUCKETS  # pushbacks per time bucket

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
