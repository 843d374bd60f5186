"""The wrappers of a hedged ``AsyncMongoClient`` (the async flavour), and the race they run.

The sync twin ``sync_wrappers.py`` (sync clients and Motor's delegate) is generated from
``async_wrappers.py`` by ``scripts/unasync.py``: edit the async file, then run ``python
scripts/unasync.py``.  The executors differ by flavour (tasks here, threads in the twin).
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

from pymongo import _csot

from backpressure.adapters import seams
from backpressure.adapters.hedging.installation import HedgingInstallation
from backpressure.adapters.hedging.race import _CURRENT, NO_WINNER, HedgeCancelled, _Attempt
from backpressure.adapters.hedging.reads import (
    _argument,
    _discard_when_done,
    _timeout_of,
    _with_address,
)
from backpressure.core.events import Address
from backpressure.core.hedging import HedgeRace

# isort: split
# The flavour's executor (threads in the generated twin).
from backpressure.adapters.hedging.tasks import TaskAttempts as _Attempts

__all__ = ["wrappers"]


def wrappers(
    installation: HedgingInstallation, delegates: dict[str, Callable[..., Any]]
) -> dict[str, Callable[..., Any]]:
    """The wrappers of one ``AsyncMongoClient`` (the async flavour)."""
    select_server = delegates["_select_server"]
    process_response = delegates["_process_response"]
    response_is_async = inspect.iscoroutinefunction(process_response)

    async def _select_server(*args: Any, **kwargs: Any) -> Any:
        attempt = _CURRENT.get()
        if attempt is None:
            return await select_server(*args, **kwargs)
        if attempt.race.closed:
            attempt.announced(False)
            raise HedgeCancelled("the hedged read was answered by another attempt")
        if attempt.target is not None:
            args, kwargs = _with_address(args, kwargs, attempt.target)
        try:
            server = await select_server(*args, **kwargs)
        except BaseException:
            attempt.announced(False)
            raise
        attempt.race.tried(seams.server_address(server))
        attempt.announced(True)
        return server

    def _process_response(*args: Any, **kwargs: Any) -> Any:
        installation.note_reply(_argument(args, kwargs, 0, "reply"))
        return process_response(*args, **kwargs)

    async def _process_awaited_response(*args: Any, **kwargs: Any) -> Any:
        installation.note_reply(_argument(args, kwargs, 0, "reply"))
        return await process_response(*args, **kwargs)

    def read_wrapper(method: str) -> Callable[..., Any]:
        delegate = delegates[method]

        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            plan = installation.read_plan(method, args, kwargs)
            if plan is None:
                return await delegate(*args, **kwargs)
            name, candidates, session = plan
            timeout = _timeout_of(installation.client_ref())
            if timeout is None:
                return await _race(installation, method, name, candidates, session, args, kwargs)
            with _csot._TimeoutContext(timeout):  # one deadline for every attempt
                return await _race(installation, method, name, candidates, session, args, kwargs)

        return wrapper

    return {
        "_run_operation": read_wrapper("_run_operation"),
        "_retryable_read": read_wrapper("_retryable_read"),
        "_select_server": _select_server,
        # pymongo's own is a coroutine function on the eras whose async reads are hedged.
        "_process_response": _process_awaited_response if response_is_async else _process_response,
    }


async def _race(
    installation: HedgingInstallation,
    method: str,
    name: str,
    candidates: list[Address],
    session: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """Run one hedged read; return the first success or raise (see :class:`HedgeRace`).

    The schedule is the core's (``Hedging.next_wait``, on the client's clock); the executor waits
    that long (or for an attempt's outcome) with the client's sleep.
    """
    delegate = _delegate_of(installation, method)
    hedging = installation.hedging
    start = hedging.clock()
    race = HedgeRace()
    attempts = _Attempts(installation, method, race)
    attempts.launch(_Attempt(race, None, 0), lambda: delegate(*args, **kwargs))
    number = 0
    try:
        while True:
            settled = await attempts.settled(hedging.next_wait(start, number))
            if settled is None:  # the wait for hedge ``number + 1`` is over
                number += 1
                hedge = installation.choose(race, name, number, candidates, start)
                if hedge is not None:
                    if number == 1 and session is not None:
                        _discard_when_done(session)
                    attempts.launch(hedge, installation.hedge_call(method, delegate, args, kwargs))
                continue
            winner, failure = settled
            if winner is not NO_WINNER:
                return winner  # a success beats a failure that ended at the same time
            if failure is not None:
                raise failure
    finally:
        race.close()
        attempts.leave()


def _delegate_of(installation: HedgingInstallation, method: str) -> Callable[..., Any]:
    """The method our wrapper of ``method`` calls (resolved at install time)."""
    delegate: Callable[..., Any] = installation.delegates[method]
    return delegate
