"""The attempts of one hedged read: each attempt, and the attempt the running code belongs to.

The race's rule (the first success wins; which failure ends the read, with which error) is the
core's :class:`~backpressure.core.hedging.HedgeRace`, which both executors follow.
"""

from __future__ import annotations

import contextvars
from typing import Callable, Optional

from pymongo.errors import PyMongoError

from backpressure.core.events import Address
from backpressure.core.hedging import HedgeRace

__all__ = ["NO_WINNER", "HedgeCancelled"]

NO_WINNER = object()
"""What the race's executor reports as the winner's result while no attempt has won."""


class HedgeCancelled(PyMongoError):
    """A hedged read was answered by another attempt: this attempt sends nothing more."""


class _Attempt:
    """One attempt of a hedged read: the first (``target`` None) or hedge ``number``."""

    __slots__ = ("announce", "number", "race", "target")

    def __init__(
        self,
        race: HedgeRace,
        target: Optional[Address],
        number: int,
        announce: Optional[Callable[[bool], None]] = None,
    ) -> None:
        """Describe the attempt; a hedge calls ``announce(sent)`` once, when it is sent or not."""
        self.race = race
        self.target = target
        self.number = number
        self.announce = announce

    def announced(self, sent: bool) -> None:
        """Report once whether the hedge was sent (its server selected) or stopped before."""
        announce, self.announce = self.announce, None
        if announce is not None:
            announce(sent)


_CURRENT: contextvars.ContextVar[Optional[_Attempt]] = contextvars.ContextVar(
    "backpressure_hedge_attempt", default=None
)
