"""What hedging installs on one client: the core's decision, the original methods and the
wrappers, and what both flavours' wrappers ask of it (the read plan, a hedge, a late reply)."""

from __future__ import annotations

import copy
import logging
import weakref
from collections.abc import Mapping
from typing import Any, Callable, Optional

from backpressure.adapters import seams
from backpressure.adapters.hedging.race import _CURRENT, _Attempt
from backpressure.adapters.hedging.reads import (
    _NON_CURSOR_COMMANDS,
    ASYNC_HEDGING,
    _argument,
    _candidates,
    _close_server_cursor,
    _deadline_at,
    _session_allows,
)
from backpressure.core.client_state import ClientState
from backpressure.core.events import Address
from backpressure.core.hedging import Hedge, HedgeNotifier, HedgeRace, Hedging
from backpressure.core.labels import SYSTEM_OVERLOADED

__all__ = ["WrapperFactory"]

_LOGGER = logging.getLogger("backpressure")
_WRAPPED = ("_run_operation", "_retryable_read", "_select_server", "_process_response")
_ABSENT = object()

WrapperFactory = Callable[
    ["HedgingInstallation", dict[str, Callable[..., Any]]], dict[str, Callable[..., Any]]
]
"""Builds one flavour's wrappers from the installation and the methods they call."""


class HedgingInstallation:
    """What hedging installed on one client: the decision, the originals and the wrappers."""

    def __init__(self, client: Any, state: ClientState, make_wrappers: WrapperFactory) -> None:
        """Wrap ``client``'s current methods (the retry adapter's wrappers included) with the
        wrappers ``make_wrappers`` gives (those of the client's flavour).

        The decision runs on the client's clock (``ClientState.clock``: the one its pacing and
        server choice run on, which the tests' timing hook sets), as do the race's waits.
        """
        self.client_ref = weakref.ref(client)
        self.state = state
        controller = state.controller
        pacing = controller.pacing
        self.hedging = Hedging(
            state.policy,
            controller.budget,
            pacing=pacing,
            clock=state.clock,
            random=controller.random,
        )
        self.notifier = HedgeNotifier(
            self.hedging, lambda: self.state.listeners, logger=state.logger
        )
        self.hedges_reads = ASYNC_HEDGING or not seams.is_async_client(client)
        """False for an ``AsyncMongoClient`` whose reads block the event loop (old pymongo)."""
        self.prior = {name: vars(client).get(name, _ABSENT) for name in _WRAPPED}
        delegates = {name: getattr(client, name) for name in _WRAPPED}
        self.delegates = delegates
        """The methods the wrappers call (the retry adapter's wrappers, or pymongo's own)."""
        self.wrappers = make_wrappers(self, delegates)
        for name, wrapper in self.wrappers.items():
            setattr(client, name, wrapper)

    def restore(self, client: Any) -> None:
        """Put back the methods replaced, where our wrapper is still the one installed."""
        for name, wrapper in self.wrappers.items():
            if vars(client).get(name) is not wrapper:
                continue
            prior = self.prior[name]
            if prior is _ABSENT:
                vars(client).pop(name, None)
            else:
                setattr(client, name, prior)

    # -- shared by both flavours -----------------------------------------------------------

    def note_reply(self, reply: Any) -> None:
        """Hold hedges after an overload reply."""
        if isinstance(reply, Mapping):
            labels = reply.get("errorLabels")
            if isinstance(labels, (list, tuple)) and SYSTEM_OVERLOADED in labels:
                self.hedging.record_pushback()

    def choose(
        self, race: HedgeRace, operation: str, number: int, candidates: list[Address], start: float
    ) -> Optional[_Attempt]:
        """Ask the core for hedge ``number``; return the hedge's attempt (None: no hedge).

        The target is drawn with the client's server choice rule (``ClientState.avoid``, the
        rule ``seams.steer`` applies to every selection).  The hedge is announced (event and log
        line) when it is sent; a hedge stopped before it was sent (the read was answered
        meanwhile) gives its budget token back (``Hedging.unsent``).
        """
        if race.closed:
            return None
        tried = race.tried_so_far()
        hedging = self.hedging
        now = hedging.clock()
        decision = hedging.decide(
            hedge=number,
            candidates=candidates,
            tried=tried,
            deadline=_deadline_at(now),
            now=now,
            avoid=self.state.avoid,
        )
        if not isinstance(decision, Hedge):
            _LOGGER.debug("not hedging %s (hedge %d): %s", operation, number, decision.reason.value)
            return None
        race.tried(decision.target)  # the next hedge goes elsewhere, even if this one is slow
        first = tried[0] if tried else None
        notifier = self.notifier

        def announce(sent: bool) -> None:
            if sent:
                notifier.hedged(operation, decision, first, hedging.clock() - start)
            else:
                hedging.unsent(decision)

        return _Attempt(race, decision.target, number, announce)

    def read_plan(
        self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Optional[tuple[str, list[Address], Any]]:
        """For a read that may be hedged: (command name, eligible members, session), else None."""
        if _CURRENT.get() is not None or not self.hedges_reads:
            return None  # an attempt of a race (the inner read path), or reads are not hedged
        client = self.client_ref()
        if client is None:
            return None
        if method == "_run_operation":
            operation = _argument(args, kwargs, 0, "operation")
            if _argument(args, kwargs, 2, "address") is not None:
                return None  # getMore
            if (
                type(operation).__name__ != "_Query"
                or getattr(operation, "name", None) != "find"
                or getattr(operation, "exhaust", False)
                or getattr(operation, "conn_mgr", None) is not None
            ):
                return None
            session = operation.session
            read_preference = operation.read_preference
            name = "find"
        else:
            name = seams.operation_name(_argument(args, kwargs, 3, "operation"))
            if name not in _NON_CURSOR_COMMANDS or _argument(args, kwargs, 4, "address"):
                return None
            session = _argument(args, kwargs, 2, "session")
            read_preference = _argument(args, kwargs, 1, "read_pref")
        if not _session_allows(session):
            return None
        candidates = _candidates(client, read_preference)
        if len(candidates) < 2:
            return None
        return name, candidates, session

    def hedge_call(
        self, method: str, delegate: Callable[..., Any], args: tuple[Any, ...], kwargs: Any
    ) -> Callable[[], Any]:
        """A call of ``delegate`` for one hedge of the read ``args``/``kwargs``."""
        if method == "_run_operation":
            operation = _argument(args, kwargs, 0, "operation")
            clone = copy.copy(operation)  # its own cached command; the same cursor session
            clone.reset()
            if len(args) > 0:
                hedge_args, hedge_kwargs = (clone, *args[1:]), kwargs
            else:
                hedge_args, hedge_kwargs = args, {**kwargs, "operation": clone}
        elif len(args) > 2:  # _retryable_read: the hedge brings its own implicit session
            hedge_args, hedge_kwargs = (*args[:2], None, *args[3:]), kwargs
        else:
            hedge_args, hedge_kwargs = args, {**kwargs, "session": None}
        return lambda: delegate(*hedge_args, **hedge_kwargs)

    def loser(self, method: str, result: Any) -> None:
        """Clean up after an attempt that succeeded too late."""
        client = self.client_ref()
        if client is not None and method == "_run_operation":
            _close_server_cursor(client, result)
