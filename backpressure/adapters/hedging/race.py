"""The attempts of one hedged read: the race's rule (the first success wins; which failure
ends the read, with which error), each attempt, and the attempt the running code belongs to."""

from __future__ import annotations

import contextvars
import threading
from typing import Callable, Optional

from pymongo.errors import PyMongoError

from backpressure.core.events import Address
from backpressure.core.hedging import is_non_fatal

__all__ = ["NO_WINNER", "HedgeCancelled"]

NO_WINNER = object()
"""What the race's executor reports as the winner's result while no attempt has won."""


class HedgeCancelled(PyMongoError):
    """A hedged read was answered by another attempt: this attempt sends nothing more."""


class _Race:
    """The attempts of one hedged read: who won, when to raise, and the members tried.

    The one rule both executors (threads for sync clients, tasks for async ones) follow: the
    first attempt to succeed wins (:meth:`claim`); a failure ends the read when it is the first
    attempt's and fatal (not ``is_non_fatal``), or when no attempt is left running, and the
    error raised is then the first attempt's (:meth:`failed`).
    """

    __slots__ = ("closed", "first_error", "lock", "running", "servers", "winner")

    def __init__(self) -> None:
        """Start a race with no attempt."""
        self.lock = threading.Lock()
        self.closed = False
        self.winner: Optional[_Attempt] = None
        self.servers: list[Address] = []
        self.running = 0
        """Attempts launched whose outcome the executor has not handed to the race yet."""
        self.first_error: Optional[BaseException] = None
        """The first attempt's error, once it failed."""

    def launched(self) -> None:
        """Count an attempt the executor started."""
        self.running += 1

    def failed(self, attempt: _Attempt, error: BaseException) -> Optional[BaseException]:
        """Hand over a failed attempt; return the error to raise now (None: wait for others)."""
        self.running -= 1
        first = attempt.target is None
        if first:
            self.first_error = error
        if self.running == 0 or (first and not is_non_fatal(error)):
            return self.first_error if self.first_error is not None else error
        return None

    def claim(self, attempt: _Attempt) -> bool:
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


class _Attempt:
    """One attempt of a hedged read: the first (``target`` None) or hedge ``number``."""

    __slots__ = ("announce", "number", "race", "target")

    def __init__(
        self,
        race: _Race,
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
