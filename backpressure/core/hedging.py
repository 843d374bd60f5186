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
4. an eligible member not tried yet by this read exists (chosen at random)  -> NO_CANDIDATE
5. the target's budget grants it (one token from that server's budget, or
   the A6 throttle above half; the client's budget when it is per client)  -> BUDGET_EMPTY

A hedge is never sent to a member the read already went to, so a read with one eligible member
(``primary`` read preference, a standalone) is never hedged.  Everything here is pure: time and
randomness are injected, nothing sleeps and nothing does I/O.  The pushback record is guarded by
a ``threading.Lock`` held only around arithmetic, so one :class:`Hedging` serves threads, Motor's
executor and the event loop alike.
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
from backpressure.core.events import Address, HedgeEvent
from backpressure.core.labels import is_overload
from backpressure.core.log_limit import LogRateLimit
from backpressure.core.policy import Policy

__all__ = [
    "NON_FATAL_CODES",
    "Hedge",
    "HedgeDecision",
    "HedgeNotifier",
    "Hedging",
    "NoHedge",
    "PushbackSource",
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


class PushbackSource(Protocol):
    """Per-server overload state kept elsewhere (the adaptive policy's pacing)."""

    def pushing_back(self) -> bool:
        """Whether some server pushes back now."""
        ...


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
        pacing: Optional[PushbackSource] = None,
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
    ) -> HedgeDecision:
        """Decide hedge number ``hedge`` (1-based) of a read (see the module docstring).

        ``candidates`` are the members the read preference allows, ``tried`` those the read
        already went to; ``deadline`` and ``now`` are on the injected clock.  A token is taken
        from the target's budget only when the answer is :class:`Hedge`.
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
        target = untried[min(int(self._random() * len(untried)), len(untried) - 1)]
        if not self.budget.for_server(target).try_acquire():
            return NoHedge(SkipReason.BUDGET_EMPTY)
        return Hedge(target, hedge)


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
