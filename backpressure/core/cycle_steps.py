"""What the attempt cycle answers, as values, and the one loop that waits out its waits.

An :class:`~backpressure.core.cycle.AttemptCycle` answers each question of its executor with a
step: :data:`SEND` (send the attempt now), :class:`Wait` (wait locally, then ask again),
:class:`Backoff` (sleep, then run the next attempt) or :class:`Stop` (raise its error).
:class:`WaitOut` is the wait-and-recheck loop every executor runs on a :class:`Wait`: it yields
each wait's seconds and asks the cycle again once the executor has slept them, so an executor
only sleeps, its own way (``time.sleep``, ``await asyncio.sleep``, SimPy's ``env.timeout``).
Pure values and one iterator: no clock, no sleep.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Callable, Optional, Union

from backpressure.core.decision import Decision, Retry, StopReason

__all__ = ["SEND", "Backoff", "Send", "Step", "Stop", "Wait", "WaitOut", "step_of"]


@dataclass(frozen=True)
class Send:
    """Send the attempt now."""


SEND = Send()
"""The one :class:`Send` value."""


@dataclass(frozen=True)
class Wait:
    """Wait ``seconds`` locally before sending, then ask the cycle's ``waited`` (the executors
    do both through :class:`WaitOut`)."""

    seconds: float


@dataclass(frozen=True)
class Backoff:
    """Sleep ``seconds``, then run the next attempt (``retarget``: avoid the failed server)."""

    seconds: float
    retarget: bool
    decision: Optional[Retry] = None
    """The retry rules' decision (its delay is reported even when test mode sleeps 0); None
    for a hand-written loop the simulator compares (``retry-storm``)."""


@dataclass(frozen=True)
class Stop:
    """Raise ``error`` (it carries the operation's retry summary); ``reason`` says why."""

    error: BaseException
    reason: Optional[StopReason]


Step = Union[Send, Wait, Backoff, Stop]
"""What the cycle answers."""


def step_of(error: BaseException, decision: Decision) -> Union[Backoff, Stop]:
    """The answer to a failure with ``error`` once the retry rules decided ``decision``."""
    if isinstance(decision, Retry):
        return Backoff(decision.sleep_seconds, decision.retarget, decision)
    return Stop(error, decision.reason)


class WaitOut:
    """The local waits before one attempt: iterating yields each :class:`Wait`'s seconds and,
    once the executor asks for the next item (that wait is over), asks ``waited`` again;
    afterwards ``answer`` is :data:`SEND` or :class:`Stop`.

    Made by ``AttemptCycle.wait_out``; the one wait-and-recheck loop of every executor.
    """

    __slots__ = ("answer", "waited")

    def __init__(self, waited: Callable[[], Step], step: Step) -> None:
        """Wait out ``step`` (an answer of the cycle's ``admit``), asking ``waited`` after each
        wait (the cycle's ``waited``)."""
        self.waited = waited
        self.answer = step
        """The cycle's last answer: a :class:`Wait` until the iteration ends, then
        :data:`SEND` or :class:`Stop` (refused: nothing was sent); a ``step`` that is not a
        :class:`Wait` is the answer at once."""

    def __iter__(self) -> Iterator[float]:
        """The seconds of each wait; the next item is asked for once that wait is over."""
        step = self.answer
        while type(step) is Wait:
            yield step.seconds
            step = self.answer = self.waited()
