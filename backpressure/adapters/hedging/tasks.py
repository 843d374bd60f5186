"""The async executor of hedged reads: each attempt runs in a task (``AsyncMongoClient``)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable
from typing import Any, Callable, Optional

from backpressure.adapters.async_cycle import pause
from backpressure.adapters.hedging.installation import HedgingInstallation
from backpressure.adapters.hedging.race import _CURRENT, NO_WINNER, _Attempt
from backpressure.core.hedging import HedgeRace

__all__ = ["TaskAttempts"]

_LOSERS: set[asyncio.Future[Any]] = set()
"""Async losers left to finish: the event loop keeps only weak references to tasks, and a
loser nothing else holds could be collected before its reply (its cursor never killed)."""


class TaskAttempts:
    """The attempts of one hedged read, each in a task; losers are cancelled when they left.

    A ``count``/``distinct`` loser is cancelled (pymongo then discards its connection); a losing
    ``find`` is left to finish, because its reply names the server cursor to kill.
    """

    def __init__(self, installation: HedgingInstallation, method: str, race: HedgeRace) -> None:
        """Run the attempts of ``race`` (a read through the wrapper of ``method``)."""
        self._installation = installation
        self._method = method
        self._race = race
        self._tasks: dict[asyncio.Future[Any], _Attempt] = {}

    def launch(self, attempt: _Attempt, call: Callable[[], Awaitable[Any]]) -> None:
        """Run ``call`` as ``attempt`` in a task."""

        async def body() -> Any:
            _CURRENT.set(attempt)  # the task runs in a copy of the caller's context
            return await call()

        self._race.launched()
        self._tasks[asyncio.ensure_future(body())] = attempt

    async def settled(
        self, timeout: Optional[float]
    ) -> Optional[tuple[Any, Optional[BaseException]]]:
        """Wait up to ``timeout`` seconds (None: no limit) for attempts to end.

        None when none did; else the winner's result (``NO_WINNER``: none) and the error that
        ends the read (None: wait for the others).  Of attempts that ended together, the
        earliest wins, and a success beats a failure.  The ``timeout`` is slept in a task of its
        own with the client's sleep (``async_cycle.pause``), which the first attempt to end
        cancels.
        """
        tasks, race = self._tasks, self._race
        waiting: set[asyncio.Future[Any]] = set(tasks)
        timer: Optional[asyncio.Future[None]] = None
        if timeout is not None:
            timer = asyncio.ensure_future(pause(self._installation.state, timeout))
            waiting.add(timer)
        try:
            done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if timer is not None and not timer.done():
                timer.cancel()
        if timer is not None and timer in done:
            done.discard(timer)
            timer.result()  # the sleep's own error, if any, ends the read
        if not done:
            return None
        winner: Any = NO_WINNER
        failure: Optional[BaseException] = None
        for task in sorted(done, key=lambda t: tasks[t].number):
            attempt = tasks.pop(task)
            error = task.exception()
            if error is None:
                if winner is NO_WINNER and race.claim(attempt):
                    winner = task.result()
                else:
                    self._installation.loser(self._method, task.result())
                continue
            failure = race.failed(attempt, error) or failure
        return winner, failure

    def leave(self) -> None:
        """Cancel the attempts still running (a ``find`` is left to finish), and clean up after
        each when it ends."""
        tasks = self._tasks
        for task in tasks:
            if self._method != "_run_operation":
                # A find is left to finish: its reply names the server cursor to kill.
                task.cancel()
            task.add_done_callback(functools.partial(self._settle_loser, attempt=tasks[task]))
            _LOSERS.add(task)
            task.add_done_callback(_LOSERS.discard)

    def _settle_loser(self, task: asyncio.Future[Any], attempt: _Attempt) -> None:
        """Clean up after a losing task once it ended."""
        attempt.announced(False)  # a no-op once the hedge was sent
        if task.cancelled():
            return
        if task.exception() is None:
            self._installation.loser(self._method, task.result())
