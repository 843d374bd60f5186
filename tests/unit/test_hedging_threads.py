"""The thread executor of hedged reads waits for a hedge with the client's sleep hook."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any, Callable

from pymongo.errors import AutoReconnect

from backpressure.adapters.hedging.race import NO_WINNER, _Attempt
from backpressure.adapters.hedging.threads import ThreadAttempts
from backpressure.core.hedging import HedgeRace

A = ("a", 1)


def until(condition: Callable[[], bool]) -> None:
    """Wait until ``condition()`` holds (a worker thread makes it true), at most ten seconds."""
    limit = time.monotonic() + 10.0
    while not condition():
        assert time.monotonic() < limit, "the condition never held"
        time.sleep(0.001)


def test_the_wait_is_the_clients_sleep_and_a_wait_an_outcome_ended_is_ignored() -> None:
    """With a sleep hook, ``settled(timeout)`` sleeps ``timeout`` through the hook in a worker:
    its end ends the wait; an attempt's outcome that comes first ends it instead, and the end of
    that sleep, when it comes, is not taken for the end of a later wait."""
    slept: list[float] = []
    release = threading.Event()

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 1:
            until(release.is_set)  # the first wait outlives the first attempt

    installation: Any = SimpleNamespace(
        state=SimpleNamespace(sleep=sleep), loser=lambda _method, _result: None
    )
    race = HedgeRace()
    attempts = ThreadAttempts(installation, "_retryable_read", race)
    attempts.launch(_Attempt(race, None, 0), lambda: "first")
    assert attempts.settled(0.25) == ("first", None)  # the outcome before the sleep's end
    until(lambda: slept == [0.25])
    release.set()
    until(lambda: attempts._outcomes.qsize() == 1)  # the first sleep's end, now stale

    def failing() -> Any:
        raise AutoReconnect("the hedge's connection closed")

    attempts.launch(_Attempt(race, A, 1), failing)
    assert attempts.settled(None) == (NO_WINNER, None)  # the stale end was skipped
    assert attempts.settled(0.5) is None  # the hook's sleep ended this wait
    assert slept == [0.25, 0.5]
