"""The physical-limit oracle: the fewest app errors any client could achieve.

Theory of operation.  A server's ingress limiter is a token bucket: it refills at ``rate`` tokens
per second up to ``max(1, rate * burst_seconds)`` tokens, and every admitted request takes one
token.  An operation arriving at ``a`` with an allowed wait ``w`` succeeds if it is admitted at
some instant in ``[a, a + w]``; otherwise it is an app error.  A client can do no better
than an offline scheduler that knows every arrival and never sends a request the limiter would
reject (rejections cost a client attempts and time, never tokens it could have used).

The oracle runs the greedy earliest-deadline-first schedule: whenever a token is available and an
operation is waiting, admit the waiting operation with the earliest deadline; drop operations
whose deadline has passed.  When deadlines are in arrival order (every operation is allowed the
same wait, the common case of one CSOT timeout) this schedule is optimal: a token given now to the
waiting operation with the earliest deadline can only be worth as much if kept for a later
arrival, whose deadline is no earlier, and keeping it risks losing it to a full bucket.  So the
result is exact.

With mixed waits, keeping a token for an urgent later arrival can beat using it now, and the
exact optimum is a hard scheduling problem.  The oracle then brackets it: ``achievable_errors``
is what the greedy schedule reaches (some client can do that well), and ``min_errors`` is the
greedy schedule's result on a relaxed log in which every deadline is raised to the latest
deadline of any earlier arrival (more freedom, deadlines in arrival order, so exact), a floor no
client can go below.  ``exact`` tells whether the two coincide.

With several servers any operation may use any of them (interchangeable mongos routers, or reads
any member may serve); the schedule takes each token from the fullest bucket.  Operations bound to
one server (writes to a primary) are evaluated against that server alone.

Service time is not modelled: ``allowed_waits`` should be the time an operation may wait before it
is admitted (its deadline minus the round trip it still needs), and arrival times must be on the
same clock as the capacity's rate changes (seconds from the start of the run).

Closed loops.  The arrival log of a closed-loop run (the instant each worker issued each
operation) can be fed to :func:`physical_min_errors` as it is: the answer is the minimum for
those arrival instants.  Because a closed loop's arrival instants depend on the client that ran,
:func:`closed_loop_min_error_fraction` also gives a bound that holds for every client in steady
state: ``max(0, 1 - rate * allowed_wait / workers)``.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Union

__all__ = [
    "Capacity",
    "PhysicalLimit",
    "closed_loop_min_error_fraction",
    "physical_limit",
    "physical_min_errors",
]


def _number(name: str, value: object, *, minimum: float = 0.0, finite: bool = True) -> float:
    """Validate one numeric argument and return it as a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number (int or float), got {value!r}")
    number = float(value)
    if math.isnan(number) or (finite and not math.isfinite(number)) or number < minimum:
        bound = f"a finite number >= {minimum:g}" if finite else f"a number >= {minimum:g}"
        raise ValueError(f"{name} must be {bound}, got {value!r}")
    return number


@dataclass(frozen=True)
class Capacity:
    """One server's ingress limiter over time: a token bucket whose rate may change.

    The bucket holds ``max(1, rate * burst_seconds)`` tokens at the rate in force, as the embedded
    server's limiter does; it starts with ``initial_tokens`` (default: full).  ``changes`` lists
    ``(time_s, rate_per_s)`` pairs, in increasing time, at which the rate (and so the bucket's
    size) changes; tokens already earned are kept, clipped to the new size.  A rate of 0 models
    an outage.
    """

    rate_per_s: float
    """Tokens per second from time 0 until the first change."""
    burst_seconds: float = 1.0
    """Bucket size in seconds of the rate in force (the server's burst capacity)."""
    changes: tuple[tuple[float, float], ...] = ()
    """``(time_s, rate_per_s)`` pairs in increasing time."""
    initial_tokens: Union[float, None] = None
    """Tokens at time 0 (None: a full bucket)."""

    def __post_init__(self) -> None:
        """Validate every field; raise ValueError or TypeError naming the bad one."""
        _number("Capacity.rate_per_s", self.rate_per_s)
        _number("Capacity.burst_seconds", self.burst_seconds, finite=False)
        if self.burst_seconds <= 0:
            raise ValueError(f"Capacity.burst_seconds must be > 0, got {self.burst_seconds!r}")
        if self.initial_tokens is not None:
            _number("Capacity.initial_tokens", self.initial_tokens)
        previous = -math.inf
        for index, change in enumerate(self.changes):
            if not isinstance(change, tuple) or len(change) != 2:
                raise TypeError(
                    f"Capacity.changes[{index}] must be a (time_s, rate_per_s) pair, got {change!r}"
                )
            at = _number(f"Capacity.changes[{index}] time_s", change[0], minimum=-math.inf)
            _number(f"Capacity.changes[{index}] rate_per_s", change[1])
            if at <= previous:
                raise ValueError(
                    f"Capacity.changes must be in increasing time; {at!r} follows {previous!r}"
                )
            previous = at

    @classmethod
    def constant(cls, rate_per_s: float, burst_seconds: float = 1.0) -> Capacity:
        """A limiter whose rate never changes."""
        return cls(rate_per_s, burst_seconds)

    def size_at_rate(self, rate: float) -> float:
        """The bucket size while ``rate`` is in force (at least one token)."""
        return max(1.0, rate * self.burst_seconds)

    def rate_at(self, time_s: float) -> float:
        """The rate in force at ``time_s``."""
        rate = float(self.rate_per_s)
        for at, new_rate in self.changes:
            if at > time_s:
                break
            rate = float(new_rate)
        return rate


class _Bucket:
    """A token bucket following one Capacity in time (the oracle's private simulator)."""

    __slots__ = ("_burst", "_changes", "_next_change", "now", "rate", "size", "tokens")

    def __init__(self, capacity: Capacity) -> None:
        """Start at time 0 with the capacity's initial tokens."""
        self._burst = float(capacity.burst_seconds)
        self._changes = [(float(t), float(r)) for t, r in capacity.changes]
        self._next_change = 0
        self.now = 0.0
        self.rate = float(capacity.rate_per_s)
        # Changes at or before time 0 apply from the start.
        while self._next_change < len(self._changes) and self._changes[self._next_change][0] <= 0:
            self.rate = self._changes[self._next_change][1]
            self._next_change += 1
        self.size = max(1.0, self.rate * self._burst)
        initial = self.size if capacity.initial_tokens is None else capacity.initial_tokens
        self.tokens = min(float(initial), self.size)

    def advance(self, time_s: float) -> None:
        """Refill up to ``time_s`` (never backwards), applying rate changes on the way."""
        while time_s > self.now:
            if self._next_change < len(self._changes):
                change_at, new_rate = self._changes[self._next_change]
            else:
                change_at, new_rate = math.inf, self.rate
            step_end = min(time_s, change_at)
            if step_end > self.now:
                self.tokens = min(self.size, self.tokens + (step_end - self.now) * self.rate)
                self.now = step_end
            if change_at <= time_s:
                self.rate = new_rate
                self.size = max(1.0, new_rate * self._burst)
                self.tokens = min(self.tokens, self.size)
                self._next_change += 1
            else:
                break

    def next_token_time(self) -> float:
        """The earliest instant >= now at which one whole token is available (inf if never)."""
        if self.tokens >= 1.0:
            return self.now
        tokens, now, rate, index = self.tokens, self.now, self.rate, self._next_change
        while True:
            change_at = self._changes[index][0] if index < len(self._changes) else math.inf
            if rate > 0:
                reach = now + (1.0 - tokens) / rate
                if reach <= change_at:
                    return reach
            if change_at == math.inf:
                return math.inf
            tokens = min(max(1.0, rate * self._burst), tokens + (change_at - now) * rate)
            now = change_at
            rate = self._changes[index][1]
            tokens = min(tokens, max(1.0, rate * self._burst))
            index += 1
            if tokens >= 1.0:
                return now


@dataclass(frozen=True)
class PhysicalLimit:
    """What the offline optimal schedule achieves on one arrival log."""

    ops: int
    """Operations in the log."""
    min_errors: int
    """No client can fail fewer operations than this (the physical limit)."""
    achievable_errors: int
    """The greedy earliest-deadline-first schedule fails this many (equal when ``exact``)."""
    last_admission_s: float
    """When the greedy schedule admits its last operation (0 when it admits none)."""

    @property
    def exact(self) -> bool:
        """Whether ``min_errors`` is the exact optimum (always when all waits are equal)."""
        return self.min_errors == self.achievable_errors

    @property
    def admitted(self) -> int:
        """Operations the best schedule admits (``ops - min_errors``)."""
        return self.ops - self.min_errors

    @property
    def min_error_fraction(self) -> float:
        """``min_errors / ops`` (0 for an empty log)."""
        return self.min_errors / self.ops if self.ops else 0.0


_EPSILON = 1e-9  # admission at the deadline counts; absorbs float noise in refill arithmetic


def physical_limit(
    arrivals: Sequence[float],
    allowed_waits: Union[Sequence[float], float],
    capacity: Union[Capacity, Sequence[Capacity]],
) -> PhysicalLimit:
    """Run the offline earliest-deadline-first schedule and return what it achieves.

    Args:
        arrivals: arrival time of each operation, in seconds on the capacity's clock (any order).
        allowed_waits: per operation, how long it may wait for admission, in seconds (>= 0; inf
            allowed); or one number for all.
        capacity: the limiter of the one server, or of several interchangeable servers.

    Returns:
        A :class:`PhysicalLimit`: ``min_errors`` is the floor to compare a client's app errors
        against (exact when every operation is allowed the same wait).

    Raises:
        ValueError: lengths differ, a time or wait is negative or NaN, or no capacity is given.
        TypeError: a value is not a number.
    """
    count = len(arrivals)
    if isinstance(allowed_waits, (int, float)) and not isinstance(allowed_waits, bool):
        wait = _number("allowed_waits", allowed_waits, finite=False)
        waits: Sequence[float] = [wait] * count
    else:
        waits = allowed_waits  # type: ignore[assignment]
        if len(waits) != count:
            raise ValueError(
                f"allowed_waits must have one entry per arrival ({count}), got {len(waits)}"
            )
    capacities = [capacity] if isinstance(capacity, Capacity) else list(capacity)
    if not capacities:
        raise ValueError("capacity must name at least one Capacity, got an empty sequence")
    for index, item in enumerate(capacities):
        if not isinstance(item, Capacity):
            raise TypeError(f"capacity[{index}] must be a Capacity, got {item!r}")
    jobs: list[tuple[float, float]] = []
    for index in range(count):
        arrival = arrivals[index]
        wait = waits[index]
        if not isinstance(arrival, (int, float)) or isinstance(arrival, bool):
            raise TypeError(f"arrivals[{index}] must be a number, got {arrival!r}")
        if not isinstance(wait, (int, float)) or isinstance(wait, bool):
            raise TypeError(f"allowed_waits[{index}] must be a number, got {wait!r}")
        if not math.isfinite(arrival) or arrival < 0:
            raise ValueError(f"arrivals[{index}] must be a finite number >= 0, got {arrival!r}")
        if math.isnan(wait) or wait < 0:
            raise ValueError(f"allowed_waits[{index}] must be a number >= 0, got {wait!r}")
        jobs.append((float(arrival), float(arrival) + float(wait)))
    jobs.sort()
    achieved, last = _schedule(jobs, [_Bucket(item) for item in capacities])
    relaxed: list[tuple[float, float]] = []
    latest = -math.inf
    agreeable = True
    for arrival, deadline in jobs:
        if deadline < latest:
            agreeable = False
        latest = max(latest, deadline)
        relaxed.append((arrival, latest))
    bound = achieved
    if not agreeable:
        bound, _ = _schedule(relaxed, [_Bucket(item) for item in capacities])
    return PhysicalLimit(
        ops=count,
        min_errors=count - bound,
        achievable_errors=count - achieved,
        last_admission_s=last,
    )


def _schedule(jobs: list[tuple[float, float]], buckets: list[_Bucket]) -> tuple[int, float]:
    """Greedy EDF over the buckets' tokens; return (admitted, last admission time)."""
    pending: list[float] = []  # deadlines of waiting operations (a min-heap)
    admitted = 0
    last = 0.0
    index = 0
    total = len(jobs)
    now = 0.0
    while index < total or pending:
        if not pending:
            now = max(now, jobs[index][0])
        # Take every arrival up to now.
        while index < total and jobs[index][0] <= now:
            heapq.heappush(pending, jobs[index][1])
            index += 1
        while pending and pending[0] < now - _EPSILON:
            heapq.heappop(pending)
        if not pending:
            continue
        for bucket in buckets:
            bucket.advance(now)
        # Use the fullest bucket first: it is the one closest to overflowing.
        best = max(buckets, key=lambda b: b.tokens)
        if best.tokens >= 1.0 - _EPSILON:
            best.tokens = max(0.0, best.tokens - 1.0)
            heapq.heappop(pending)
            admitted += 1
            last = now
            continue
        next_token = min(bucket.next_token_time() for bucket in buckets)
        next_arrival = jobs[index][0] if index < total else math.inf
        if next_token == math.inf and next_arrival == math.inf:
            break  # no token will ever come: everything still waiting fails
        now = min(next_token, next_arrival)
    return admitted, last


def physical_min_errors(
    arrivals: Sequence[float],
    allowed_waits: Union[Sequence[float], float],
    capacity: Union[Capacity, Sequence[Capacity]],
) -> int:
    """Return the minimum number of app errors any client could achieve.

    ``physical_min_errors(arrivals, allowed_waits, capacity) -> int`` where ``arrivals`` are the
    operations' arrival times in seconds (on the capacity's clock, from 0), ``allowed_waits`` the
    time each may wait for admission (a sequence of the same length, or one number), and
    ``capacity`` a :class:`Capacity` (or a sequence of interchangeable servers' capacities).
    See :func:`physical_limit` for the full result and the errors raised.
    """
    return physical_limit(arrivals, allowed_waits, capacity).min_errors


def closed_loop_min_error_fraction(workers: int, allowed_wait_s: float, rate_per_s: float) -> float:
    """Return the steady-state minimum error fraction of a closed loop, for any client.

    ``workers`` run operations back to back; each may wait ``allowed_wait_s``; the server admits
    ``rate_per_s``.  Every operation ends within its allowed wait, so the workers finish at least
    ``workers / allowed_wait_s`` operations per second, of which at most ``rate_per_s`` succeed:
    the error fraction is at least ``max(0, 1 - rate_per_s * allowed_wait_s / workers)``, and a
    scheduler that admits each operation just before its deadline reaches it.
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an int >= 1, got {workers!r}")
    wait = _number("allowed_wait_s", allowed_wait_s, finite=False)
    rate = _number("rate_per_s", rate_per_s, finite=False)
    if wait == math.inf or rate == math.inf:
        return 0.0
    return max(0.0, 1.0 - rate * wait / workers)
