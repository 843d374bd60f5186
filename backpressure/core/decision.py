"""The retry decision: given an error, a retry number and a deadline, retry after a delay or stop.

Theory of operation (checks in this order, the first that fails decides):

1. the error must carry ``SystemOverloadedError`` and either ``RetryableError`` or be
   retryable under pymongo's own (classic) rules, as the adapter says     -> NOT_RETRYABLE
2. the caller must allow retries (retryReads/retryWrites)                 -> RETRIES_DISABLED
3. ``retry_number <= policy.max_retries``                                 -> ATTEMPTS_EXHAUSTED
4. the jittered delay must end before the deadline (no token is taken first) -> DEADLINE;
   except that a critical retry to a server the adaptive pacing holds waits only
   ``_PACED_SHARE`` of the time left when its delay would not end in time: the pacer spaces
   that retry (it takes another attempt's send slot, adding no load), so a delay past the
   deadline would turn a retry the pacer can still fit into an error
5. the budget must grant one retry (only for errors labelled
   ``RetryableError``: a retry pymongo itself makes is never refused for budget; of the
   failed server when per server; not asked when the adaptive pacing holds that server's
   attempts locally)                                                       -> BUDGET_EMPTY

``retry_number`` counts every failed attempt of the operation, classic ones included (see
:class:`~backpressure.core.ledger.AttemptLedger`), so the cap holds when errors mix.  Otherwise
the answer is ``Retry(retry_number, delay, retarget)``.  The controller never sleeps; the driver
does.
"""

from __future__ import annotations

import enum
import random as _random
import time
from dataclasses import dataclass
from typing import Callable, Optional, Protocol, Union

from backpressure.core.backoff import backoff_delay
from backpressure.core.budget import Budget, budget_for
from backpressure.core.labels import OverloadLabels, overload_labels, server_base_backoff
from backpressure.core.policy import Policy

_PACED_SHARE = 0.3
"""A paced critical retry whose delay would pass the deadline waits this share of the time left."""


class PacedServers(Protocol):
    """What the retry rules and hedging ask the per-server pacing of one client (its
    ``ClientPacers``, ``backpressure.core.adaptive``): the one type the core names it by."""

    def is_paced(self, server: tuple[str, int]) -> bool:
        """Whether attempts to ``server`` are paced now."""
        ...

    def pushing_back(self) -> bool:
        """Whether some server pushes back now."""
        ...


__all__ = ["Decision", "GiveUp", "PacedServers", "Retry", "RetryController", "StopReason"]


class StopReason(enum.Enum):
    """Why an overload error is not retried."""

    NOT_RETRYABLE = "not retryable"
    RETRIES_DISABLED = "retries disabled"
    ATTEMPTS_EXHAUSTED = "attempts exhausted"
    BUDGET_EMPTY = "retry budget empty"
    DEADLINE = "deadline would be exceeded"
    LOCAL_WAIT_DEADLINE = "local wait for the server would exceed the deadline"
    LOCAL_WAIT_LIMIT = "local wait for the server would exceed max_local_wait"


@dataclass(frozen=True)
class Retry:
    """Retry after ``delay`` seconds; ``retarget`` asks to avoid the server that failed.

    ``sleep`` is what the driver sleeps: ``delay`` itself, or 0 in test mode (the delay is still
    reported and counted).
    """

    retry_number: int
    delay: float
    retarget: bool
    sleep: Optional[float] = None
    from_budget: bool = True
    """Whether a budget token was taken for this retry."""

    @property
    def sleep_seconds(self) -> float:
        """Seconds the driver sleeps before the retry."""
        return self.delay if self.sleep is None else self.sleep


@dataclass(frozen=True)
class GiveUp:
    """Stop retrying and raise the last error."""

    reason: StopReason


Decision = Union[Retry, GiveUp]
"""What ``RetryController.decide`` returns."""


class RetryController:
    """Decides overload retries and keeps the budget accounting for one client."""

    def __init__(
        self,
        policy: Policy,
        *,
        budget: Optional[Budget] = None,
        random: Callable[[], float] = _random.random,
        clock: Callable[[], float] = time.monotonic,
        sleeps: bool = True,
        pacing: Optional[PacedServers] = None,
    ) -> None:
        """Create a controller; ``budget`` defaults to ``budget_for(policy)``.

        With ``sleeps`` False (test mode) every ``Retry`` asks the driver not to sleep.
        ``pacing`` is the per-server pacing of an adaptive policy (None: no pacing; see
        :func:`backpressure.core.adaptive.pacers_for`).
        """
        self.policy: Policy = policy
        """The policy in force."""
        self.budget: Budget = budget_for(policy) if budget is None else budget
        """The shared retry budget."""
        self._random = random
        self._clock = clock
        self._sleeps = sleeps
        self.pacing: Optional[PacedServers] = pacing
        """The per-server pacing (None unless the policy is adaptive)."""

    @property
    def clock(self) -> Callable[[], float]:
        """The injected monotonic clock."""
        return self._clock

    @property
    def random(self) -> Callable[[], float]:
        """The injected jitter source in [0, 1)."""
        return self._random

    @property
    def sleeps(self) -> bool:
        """Whether drivers sleep the granted delays (False in test mode)."""
        return self._sleeps

    def decide(
        self,
        *,
        retry_number: int,
        error: BaseException,
        deadline: Optional[float] = None,
        retries_allowed: bool = True,
        now: Optional[float] = None,
        classic_retryable: bool = False,
        server: Optional[tuple[str, int]] = None,
        sheddable: bool = False,
        labels: Optional[OverloadLabels] = None,
    ) -> Decision:
        """Return ``Retry`` or ``GiveUp`` for retry ``retry_number`` (1 for the first retry).

        ``sheddable``: the operation may be shed first (``overrides(criticality=...)``); its
        retry takes a token only if one retry's worth is left for critical operations after it.

        ``deadline`` and ``now`` are on the controller's clock; ``now`` defaults to ``clock()``.
        ``classic_retryable``: pymongo's retryable read/write rules retry this error (for an
        overload error without ``RetryableError`` this keeps the retry the driver makes, with
        backoff).  A token is taken only when the answer is ``Retry`` for an error labelled
        ``RetryableError``.
        A token is taken only when the answer is ``Retry``, from the budget of ``server`` (the
        server that failed) when the budget is per server.  ``labels``: ``error``'s overload
        labels when the caller has read them already (None: read here).
        """
        policy = self.policy
        if labels is None:
            labels = overload_labels(error)
        if not labels.overload:
            return GiveUp(StopReason.NOT_RETRYABLE)
        always_retryable = labels.retryable
        if not always_retryable and not classic_retryable:
            return GiveUp(StopReason.NOT_RETRYABLE)
        if not retries_allowed:
            return GiveUp(StopReason.RETRIES_DISABLED)
        if retry_number > policy.max_retries:
            return GiveUp(StopReason.ATTEMPTS_EXHAUSTED)
        hint = server_base_backoff(error) if policy.honour_server_backoff else None
        delay = backoff_delay(policy, retry_number, self._random(), hint)
        held = self._held(server)
        if deadline is not None:
            current = self._clock() if now is None else now
            if current + delay > deadline:
                if not held or sheddable or current >= deadline:
                    return GiveUp(StopReason.DEADLINE)
                delay = _PACED_SHARE * (deadline - current)
        if always_retryable and not held:
            budget = self.budget.for_server(server)
            if sheddable and budget.tokens < 2.0 * budget.retry_cost:
                return GiveUp(StopReason.BUDGET_EMPTY)  # the last token is kept for critical work
            if not budget.try_acquire():
                return GiveUp(StopReason.BUDGET_EMPTY)
        return Retry(
            retry_number=retry_number,
            delay=delay,
            retarget=policy.retarget,
            sleep=None if self._sleeps else 0.0,
            from_budget=always_retryable,
        )

    def _held(self, server: Optional[tuple[str, int]]) -> bool:
        """Whether retries to ``server`` are paced locally (then they spend no budget).

        A paced retry waits for a send slot of the rate the server admits: it takes the place
        of another attempt instead of adding load, so it needs no token.
        """
        pacing = self.pacing
        return pacing is not None and server is not None and pacing.is_paced(server)

    def record_success(self, *, retried: bool, server: Optional[tuple[str, int]] = None) -> None:
        """Account for a successful operation (``retried``: it succeeded on a retry)."""
        self.budget.for_server(server).record_success(retried=retried)

    def record_failure(
        self,
        error: BaseException,
        *,
        retried: bool,
        server: Optional[tuple[str, int]] = None,
        labels: Optional[OverloadLabels] = None,
    ) -> None:
        """Account for a failed attempt on ``server``.

        A failed retry without the overload label refunds; an overload failure counts against
        the server in the A6 mode.  ``labels``: ``error``'s overload labels, if read already.
        """
        budget = self.budget.for_server(server)
        if (overload_labels(error) if labels is None else labels).overload:
            budget.record_overload_failure()
        elif retried:
            budget.record_non_overload_failure()
