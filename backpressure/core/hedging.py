"""Hedged reads (gRPC A6 hedging, opt-in): when to send a copy of a slow read, and where.

Theory of operation.  A read whose first attempt has no reply after ``hedge_delay`` seconds gets
a hedge: the same read sent to another eligible member.  Up to ``max_hedges`` hedges are sent,
hedge ``n`` at ``start + n * hedge_delay`` (all at once with a delay of 0, as in A6).  The first
successful reply wins; the adapter cancels the others (see :mod:`backpressure.adapters.hedging`).
At each hedge time :meth:`Hedging.decide` answers :class:`Hedge` or :class:`NoHedge`, checking in
this order (the first that fails decides):

1. ``hedge <= max_hedges``                                                  -> LIMIT
2. the operation's deadline has not passed                                  -> DEADLINE
3. no server pushed back recently: no overload reply from any server for
   ``hedge_pushback_pause`` seconds, and no server is paced by the adaptive
   policy (A6: hedges stop under pushback)                                  -> PUSHBACK
4. an eligible member not tried yet by this read exists (chosen at random
   among those the server choice does not avoid, when one remains)         -> NO_CANDIDATE
5. the target's budget grants it (one token from that server's budget, or
   the A6 throttle above half; the client's budget when it is per client)  -> BUDGET_EMPTY

A hedge is never sent to a member the read already went to, so a read with one eligible member
(``primary`` read preference, a standalone) is never hedged.  The target is drawn by the client's
server choice rule (``ClientState.avoid``, as ``seams.steer`` hands it to pymongo): a member it
avoids is left out while another untried one remains.  A hedge decided but not sent (the read was
answered first) gives its token back (:meth:`Hedging.unsent`).  Between hedges the executor waits
:meth:`Hedging.next_wait` seconds, on the client's clock and with its sleep.

Who wins and which failure ends the read is :class:`HedgeRace`, the one rule both executors
follow.  Everything here is pure: time and randomness are injected, nothing sleeps and nothing
does I/O.  The pushback record and each race are guarded by a ``threading.Lock`` held only around
arithmetic, so one :class:`Hedging` serves threads, Motor's executor and the event loop alike.
"""

from __future__ import annotations

import enum
import logging
import math
import random as _random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Callable, Optional, Protocol, Union

from pymongo.errors import ConnectionFailure, OperationFailure

from backpressure.core.budget import Budget
from backpressure.core.decision import PacedServers
from backpressure.core.events import Address, HedgeEvent
from backpressure.core.labels import is_overload
from backpressure.core.log_limit import LogRateLimit
from backpressure.core.policy import Policy

__all__ = [
    "NON_FATAL_CODES",
    "Avoid",
    "Hedge",
    "HedgeDecision",
    "HedgeNotifier",
    "HedgeRace",
    "Hedging",
    "NoHedge",
    "RaceAttempt",
    "SkipReason",
    "is_non_fatal",
]

_LOGGER = logging.getLogger("backpressure")

NON_FATAL_CODES: frozenset[int] = frozenset(
    {6, 7, 89, 91, 134, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436}
)
"""Server error codes another member may not return (the Retryable Reads spec's codes)."""


class SkipReason(enum.Enum):
    """Why no hedge is sent at a hedge time."""

    LIMIT = "max_hedges reached"
    DEADLINE = "the operation's deadline has passed"
    PUSHBACK = "a server is pushing back"
    NO_CANDIDATE = "no other eligible member"
    BUDGET_EMPTY = "the target's budget is empty"


@dataclass(frozen=True)
class Hedge:
    """Send hedge number ``hedge`` (1 for the first) of the read to ``target``."""

    target: Address
    hedge: int


@dataclass(frozen=True)
class NoHedge:
    """Send no hedge now, for ``reason``."""

    reason: SkipReason


HedgeDecision = Union[Hedge, NoHedge]
"""What :meth:`Hedging.decide` returns."""

Avoid = Callable[[list[Address]], list[Address]]
"""The server choice rule of one selection: the members among those given that it deprioritizes
(``ClientState.avoid``)."""


def is_non_fatal(error: BaseException) -> bool:
    """Whether another member could answer a read that failed with ``error`` (A6 "non-fatal").

    Network errors, overload errors and the retryable read codes are; any other error (a bad
    query, an expired ``maxTimeMS``) would fail on every member, so it ends the read at once.
    """
    if isinstance(error, ConnectionFailure) or is_overload(error):
        return True
    return isinstance(error, OperationFailure) and error.code in NON_FATAL_CODES


class Hedging:
    """The hedging decision of one client: schedule, pushback pause, target and budget.

    ``budget`` is the client's retry budget (hedges take tokens from it like retries);
    ``pacing`` the adaptive policy's per-server state (None: only the pushback record here).
    """

    def __init__(
        self,
        policy: Policy,
        budget: Budget,
        *,
        pacing: Optional[PacedServers] = None,
        clock: Callable[[], float] = time.monotonic,
        random: Callable[[], float] = _random.random,
    ) -> None:
        """Configure the decision from ``policy``'s hedging fields.

        Raises:
            ValueError: ``policy`` does not hedge (``hedge_delay`` is None).
        """
        if policy.hedge_delay is None:
            raise ValueError("Hedging needs a policy with hedge_delay set")
        self._delay = float(policy.hedge_delay)
        self._max_hedges = policy.max_hedges
        self._pause = float(policy.hedge_pushback_pause)
        self.budget = budget
        """The budget hedges take their tokens from."""
        self.pacing = pacing
        """The adaptive policy's per-server state (None unless the policy is adaptive)."""
        self._clock = clock
        self._random = random
        self._lock = threading.Lock()
        self._last_pushback = -math.inf

    @property
    def clock(self) -> Callable[[], float]:
        """The injected monotonic clock."""
        return self._clock

    @property
    def delay(self) -> float:
        """Seconds between the start of a read and its first hedge, and between hedges."""
        return self._delay

    @property
    def max_hedges(self) -> int:
        """Hedges per read at most."""
        return self._max_hedges

    def hedge_time(self, start: float, hedge: int) -> float:
        """When hedge number ``hedge`` (1-based) of a read started at ``start`` is due."""
        return start + hedge * self._delay

    def next_wait(self, start: float, asked: int, now: Optional[float] = None) -> Optional[float]:
        """Seconds from ``now`` until the next hedge of a read started at ``start`` that asked
        for ``asked`` hedges so far is due (0: due now); None when no hedge is left to ask for.

        ``start`` and ``now`` are on the injected clock (``now`` defaults to ``clock()``).
        """
        if asked >= self._max_hedges:
            return None
        current = self._clock() if now is None else now
        return max(0.0, self.hedge_time(start, asked + 1) - current)

    def record_pushback(self, now: Optional[float] = None) -> None:
        """Note an overload reply from some server (pauses hedging for ``hedge_pushback_pause``)."""
        current = self._clock() if now is None else now
        with self._lock:
            if current > self._last_pushback:
                self._last_pushback = current

    def pushing_back(self, now: Optional[float] = None) -> bool:
        """Whether a server pushed back within the pause, or the adaptive policy paces one."""
        current = self._clock() if now is None else now
        if current - self._last_pushback < self._pause:
            return True
        pacing = self.pacing
        return pacing is not None and pacing.pushing_back()

    def decide(
        self,
        *,
        hedge: int,
        candidates: Sequence[Address],
        tried: Sequence[Address],
        deadline: Optional[float] = None,
        now: Optional[float] = None,
        avoid: Optional[Avoid] = None,
    ) -> HedgeDecision:
        """Decide hedge number ``hedge`` (1-based) of a read (see the module docstring).

        ``candidates`` are the members the read preference allows, ``tried`` those the read
        already went to; ``deadline`` and ``now`` are on the injected clock; ``avoid`` is the
        server choice rule (None: none), asked only when more than one member is untried.  A
        token is taken from the target's budget only when the answer is :class:`Hedge`.
        """
        if hedge > self._max_hedges:
            return NoHedge(SkipReason.LIMIT)
        current = self._clock() if now is None else now
        if deadline is not None and current >= deadline:
            return NoHedge(SkipReason.DEADLINE)
        if self.pushing_back(current):
            return NoHedge(SkipReason.PUSHBACK)
        untried = [address for address in candidates if address not in tried]
        if not untried:
            return NoHedge(SkipReason.NO_CANDIDATE)
        if avoid is not None and len(untried) > 1:
            avoided = avoid(untried)
            kept = [address for address in untried if address not in avoided]
            if kept:  # as pymongo treats deprioritized servers: never the last one left out
                untried = kept
        target = untried[min(int(self._random() * len(untried)), len(untried) - 1)]
        if not self.budget.for_server(target).try_acquire():
            return NoHedge(SkipReason.BUDGET_EMPTY)
        return Hedge(target, hedge)

    def unsent(self, decision: Hedge) -> None:
        """Give back the token :meth:`decide` took for a hedge that was not sent (the read was
        answered before its server was selected)."""
        budget = self.budget.for_server(decision.target)
        budget.deposit(budget.retry_cost)


class RaceAttempt(Protocol):
    """One attempt of a hedged read as :class:`HedgeRace` sees it."""

    @property
    def target(self) -> Optional[Address]:
        """The hedge's member; None for the read's first attempt."""
        ...


class HedgeRace:
    """The attempts of one hedged read: who won, when to raise, and the members tried.

    The one rule both executors (threads for sync clients, tasks for async ones) follow: the
    first attempt to succeed wins (:meth:`claim`); a failure ends the read when it is the first
    attempt's and fatal (not :func:`is_non_fatal`), or when no attempt is left running, and the
    error raised is then the first attempt's (:meth:`failed`).
    """

    __slots__ = ("closed", "first_error", "lock", "running", "servers", "winner")

    def __init__(self) -> None:
        """Start a race with no attempt."""
        self.lock = threading.Lock()
        self.closed = False
        self.winner: Optional[RaceAttempt] = None
        self.servers: list[Address] = []
        self.running = 0
        """Attempts launched whose outcome the executor has not handed to the race yet."""
        self.first_error: Optional[BaseException] = None
        """The first attempt's error, once it failed."""

    def launched(self) -> None:
        """Count an attempt the executor started."""
        self.running += 1

    def failed(self, attempt: RaceAttempt, error: BaseException) -> Optional[BaseException]:
        """Hand over a failed attempt; return the error to raise now (None: wait for others)."""
        self.running -= 1
        first = attempt.target is None
        if first:
            self.first_error = error
        if self.running == 0 or (first and not is_non_fatal(error)):
            return self.first_error if self.first_error is not None else error
        return None

    def claim(self, attempt: RaceAttempt) -> bool:
        """Make ``attempt`` the winner if the race is still open; return whether it won."""
        with self.lock:
            if self.closed or self.winner is not None:
                return False
            self.winner = attempt
            self.closed = True
            return True

    def close(self) -> None:
        """End the race: attempts still running lose."""
        with self.lock:
            self.closed = True

    def tried(self, address: Optional[Address]) -> None:
        """Record the member an attempt went to."""
        if address is not None:
            with self.lock:
                if address not in self.servers:
                    self.servers.append(address)

    def tried_so_far(self) -> list[Address]:
        """The members the read went to so far, in order."""
        with self.lock:
            return list(self.servers)


class HedgeNotifier:
    """Announces hedges: a rate-limited INFO line and a :class:`HedgeEvent` per hedge.

    ``listeners`` is called on every hedge to get the current listeners (those with a
    ``hedged`` method are notified; exceptions they raise are logged and ignored).
    """

    def __init__(
        self,
        hedging: Hedging,
        listeners: Callable[[], Sequence[object]],
        *,
        logger: logging.Logger = _LOGGER,
        log_interval: float = 5.0,
    ) -> None:
        """Announce the hedges decided by ``hedging``."""
        self._hedging = hedging
        self._listeners = listeners
        self._logger = logger
        self._log = LogRateLimit(log_interval, clock=hedging.clock)

    def hedged(
        self,
        operation: str,
        decision: Hedge,
        first_server: Optional[Address],
        after: float,
    ) -> HedgeEvent:
        """Log and announce one hedge; return its event."""
        target = decision.target
        event = HedgeEvent(
            operation=operation,
            server=target,
            first_server=first_server,
            hedge=decision.hedge,
            after=after,
            budget_tokens=self._hedging.budget.for_server(target).tokens,
        )
        held = self._log.admit()
        if held is not None:
            first = (
                "unknown server" if first_server is None else f"{first_server[0]}:{first_server[1]}"
            )
            self._logger.info(
                "hedging %s to %s:%d after %.3fs without a reply from %s (hedge %d)%s",
                operation,
                target[0],
                target[1],
                after,
                first,
                decision.hedge,
                f"; {held} more hedge(s) since the previous line" if held else "",
            )
        for listener in self._listeners():
            callback = getattr(listener, "hedged", None)
            if callback is None:
                continue
            try:
                callback(event)
            except Exception:
                self._logger.exception("backpressure hedge listener %r failed", listener)
        return event
