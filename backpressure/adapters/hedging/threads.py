"""The sync executor of hedged reads: each attempt runs in a thread of its own (sync clients
and Motor's delegate), idle threads are reused."""

from __future__ import annotations

import contextvars
import functools
import logging
import os
import queue
import threading
from typing import Any, Callable, Optional

from backpressure.adapters.hedging.installation import HedgingInstallation
from backpressure.adapters.hedging.race import _CURRENT, NO_WINNER, _Attempt
from backpressure.adapters.sync_cycle import pause
from backpressure.core.hedging import HedgeRace

__all__ = ["ThreadAttempts"]

_LOGGER = logging.getLogger("backpressure")


class _Workers:
    """Daemon threads that run the attempts of hedged sync reads, kept idle for reuse.

    Starting a thread per attempt would cost every hedged read a thread start; an idle worker
    takes the next attempt instead, and exits after ``idle_timeout`` seconds without one.
    """

    def __init__(self, idle_timeout: float = 30.0) -> None:
        """Start with no worker."""
        self._idle_timeout = idle_timeout
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[Callable[[], None]]] = []

    def run(self, task: Callable[[], None]) -> None:
        """Run ``task`` in an idle worker, or in a new one."""
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
        if inbox is None:
            inbox = queue.SimpleQueue()
            thread = threading.Thread(
                target=self._work, args=(inbox,), name="backpressure-hedging", daemon=True
            )
            thread.start()
        inbox.put(task)

    def _work(self, inbox: queue.SimpleQueue[Callable[[], None]]) -> None:
        """Run tasks from ``inbox``; exit once idle for ``idle_timeout``."""
        while True:
            try:
                task = inbox.get(timeout=self._idle_timeout)
            except queue.Empty:
                with self._lock:
                    if inbox in self._idle:
                        self._idle.remove(inbox)
                        return
                continue  # taken off the idle list by ``run``: its task is on the way
            try:
                task()
            except BaseException:  # pragma: no cover - tasks report their own errors
                _LOGGER.exception("a hedged read attempt failed outside its own handling")
            with self._lock:
                self._idle.append(inbox)

    def forget(self) -> None:
        """Drop every idle worker (in a forked child, where those threads do not exist)."""
        self._idle = []
        self._lock = threading.Lock()


_WORKERS = _Workers()
if hasattr(os, "register_at_fork"):  # pragma: no branch - every supported platform but Windows
    os.register_at_fork(after_in_child=_WORKERS.forget)


class ThreadAttempts:
    """The attempts of one hedged read, each in a worker thread; outcomes come back in a queue.

    A successful attempt claims the race in its own thread; a loser's result is cleaned up there
    (a sync loser cannot be interrupted while it waits for its reply: it finishes, its reply
    dropped).
    """

    def __init__(self, installation: HedgingInstallation, method: str, race: HedgeRace) -> None:
        """Run the attempts of ``race`` (a read through the wrapper of ``method``)."""
        self._installation = installation
        self._method = method
        self._race = race
        self._outcomes: queue.SimpleQueue[tuple[Optional[_Attempt], bool, Any]] = (
            queue.SimpleQueue()
        )
        self._timer: Optional[object] = None
        """The wait running in a worker (see :meth:`settled`); None: none."""

    def launch(self, attempt: _Attempt, call: Callable[[], Any]) -> None:
        """Run ``call`` as ``attempt`` in a worker, in a copy of the caller's context."""
        installation, method, race = self._installation, self._method, self._race
        outcomes = self._outcomes
        context = contextvars.copy_context()

        def body() -> None:
            _CURRENT.set(attempt)
            try:
                result = call()
            except BaseException as exc:
                outcomes.put((attempt, False, exc))
                return
            finally:
                attempt.announced(False)  # a no-op once the hedge was sent
            if race.claim(attempt):
                outcomes.put((attempt, True, result))
            else:
                installation.loser(method, result)

        race.launched()
        _WORKERS.run(functools.partial(context.run, body))

    def settled(self, timeout: Optional[float]) -> Optional[tuple[Any, Optional[BaseException]]]:
        """Wait up to ``timeout`` seconds (None: no limit) for the next outcome.

        None when none came; else the winner's result (``NO_WINNER``: none) and the error that
        ends the read (None: wait for the others).  The wait must end at the first outcome, and a
        sleep cannot be interrupted, so without the client's sleep hook it is the outcome
        queue's own timed wait (``timeout`` comes from the core's arithmetic on the client's
        clock, ``Hedging.next_wait``); with the hook (tests), the hook sleeps ``timeout`` in a
        worker (``sync_cycle.pause``) whose end is put in the queue like an outcome.
        """
        if timeout is not None and self._installation.state.sleep is not None:
            self._start_timer(timeout)
            timeout = None
        while True:
            try:
                attempt, ok, value = self._outcomes.get(timeout=timeout)
            except queue.Empty:
                return None
            if attempt is not None:
                break
            if value is self._timer:  # else a wait an earlier outcome ended: ignored
                self._timer = None
                return None
        self._timer = None  # an outcome ended the wait: its end, when it comes, is ignored
        if ok:
            return value, None
        return NO_WINNER, self._race.failed(attempt, value)

    def _start_timer(self, seconds: float) -> None:
        """Sleep ``seconds`` with the client's sleep in a worker, then report it in the queue."""
        state, outcomes = self._installation.state, self._outcomes
        timer = self._timer = object()

        def body() -> None:
            try:
                pause(state, seconds)
            finally:
                outcomes.put((None, False, timer))

        _WORKERS.run(body)

    def leave(self) -> None:
        """Leave the attempts still running: each finishes in its thread, its reply dropped."""
