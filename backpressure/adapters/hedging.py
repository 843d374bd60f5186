"""Hedged reads for one client (opt-in): the I/O around :mod:`backpressure.core.hedging`.

Theory of operation.  Installed only when the policy sets ``hedge_delay``, as the outermost
instance wrappers of four client methods, so a client without hedging runs none of this code:

* ``_run_operation`` (a cursor's first ``find``) and ``_retryable_read`` (``count``,
  ``distinct``): a read that may be hedged (see *What is hedged*) runs as a race.  The first
  attempt and every hedge are each the client's own unchanged read path (retry loop, pacing
  and budget accounting included), run in a thread of their own (sync clients and Motor; idle
  threads are reused) or a task (``AsyncMongoClient``).  The caller waits for the first
  success; at ``start + n * hedge_delay`` it asks the core for hedge ``n`` and, when granted,
  starts it pinned to the chosen member.  A fatal error of the first attempt (one every member
  would return) ends the read at once; a non-fatal one waits for the hedges in flight.  When
  every attempt failed, the first attempt's error is raised.
* ``_select_server``: pins a hedge to its member (selection by address), records the member of
  each attempt, and stops a losing attempt before it sends another try (``HedgeCancelled``).
* ``_process_response``: every reply carrying ``SystemOverloadedError`` pauses hedging for
  ``hedge_pushback_pause`` seconds.

Losers send no further attempt (retries included).  An async ``count``/``distinct`` loser is
cancelled (pymongo then discards its connection).  A sync loser cannot be interrupted while it
waits for its reply on the socket: it finishes in its thread and its reply is dropped.  A losing
``find`` (sync or async) is left to finish, because the server cursor it may open is known only
from its reply: that cursor is then killed (through the client's background cursor cleanup).

What is hedged: ``find`` first batches (``find``, ``find_one``) and the ``count`` and
``distinct`` commands (``count_documents``, ``estimated_document_count``, ``distinct``), with no
explicit session (implicit sessions only), outside transactions, neither exhaust nor
load-balanced, and only when the read preference allows at least two members.  The attempts of
a hedged read share the cursor's implicit session (a ``getMore`` must use the session that
opened the cursor), which is then discarded instead of being pooled again.  Everything else is
never hedged: writes, ``getMore``, ``aggregate`` and change streams (their cursors own the
session), ``runCommand``, ``list_*``, explicit sessions (causal consistency and thread safety
of the session), transactions and exhaust cursors.

Shared state.  A hedged ``find`` runs on a copy of the cursor's query (its own cached command).
A ``count``/``distinct`` hedge brings its own implicit session but calls pymongo's closure,
which holds one command document: pymongo updates it in place on each send (``lsid``,
``$clusterTime``), so the hedge is sent only while the first attempt waits for its reply (no
hedge follows an overload reply, and the first attempt's retries are stopped once the read is
answered); a first attempt retrying a network error while a hedge is being encoded is the one
overlap left.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import functools
import inspect
import logging
import os
import queue
import threading
import weakref
from collections.abc import Awaitable, Mapping
from typing import Any, Callable, Optional

from pymongo import _csot
from pymongo.errors import PyMongoError

from backpressure.adapters import seams
from backpressure.core.client_state import ClientState
from backpressure.core.events import Address
from backpressure.core.hedging import Hedge, HedgeNotifier, Hedging, is_non_fatal
from backpressure.core.labels import SYSTEM_OVERLOADED

__all__ = [
    "ASYNC_HEDGING",
    "HEDGED_COMMANDS",
    "HedgeCancelled",
    "install",
    "installed",
    "uninstall",
]

_LOGGER = logging.getLogger("backpressure")
_INSTALLATION_ATTR = "_backpressure_hedging"
_WRAPPED = ("_run_operation", "_retryable_read", "_select_server", "_process_response")
_ABSENT = object()
_LOSERS: set[asyncio.Future[Any]] = set()
"""Async losers left to finish: the event loop keeps only weak references to tasks, and a
loser nothing else holds could be collected before its reply (its cursor never killed)."""


def _async_reads_yield() -> bool:
    """Whether ``AsyncMongoClient`` waits for a reply without blocking the event loop."""
    try:
        from pymongo import network_layer
    except ImportError:  # pragma: no cover - every supported pymongo has the module
        return False
    return hasattr(network_layer, "async_receive_message")


ASYNC_HEDGING: bool = _async_reads_yield()
"""Whether ``AsyncMongoClient`` reads are hedged.  Before pymongo 4.13 (at the latest) its
reads wait for the reply in a blocking call that holds the event loop, so no hedge could start
while the first attempt waits: those clients are left unhedged (Motor and sync clients are not
affected)."""

HEDGED_COMMANDS: frozenset[str] = frozenset({"find", "count", "distinct"})
"""The commands whose reads may be hedged (see the module docstring for the other rules)."""

_NON_CURSOR_COMMANDS = frozenset({"count", "distinct"})


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


def _with_address(args: tuple[Any, ...], kwargs: dict[str, Any], address: Address) -> Any:
    """``_select_server``'s arguments with ``address`` (select that member by address)."""
    if len(args) > 3:
        return (*args[:3], address, *args[4:]), kwargs
    return args, {**kwargs, "address": address}


def _argument(args: tuple[Any, ...], kwargs: Mapping[str, Any], index: int, name: str) -> Any:
    """The argument ``name`` given at position ``index`` or as a keyword (None if absent)."""
    if len(args) > index:
        return args[index]
    return kwargs.get(name)


def _session_allows(session: Any) -> bool:
    """Whether a read with ``session`` may be hedged: none, or implicit and no transaction."""
    if session is None:
        return True
    return bool(getattr(session, "_implicit", False)) and not session.in_transaction


def _discard_when_done(session: Any) -> None:
    """Keep an implicit session's server session out of the pool once it ends.

    A losing attempt may still use it on another member; a pooled copy could be handed to the
    next operation while that attempt runs.
    """
    server_session = getattr(session, "_server_session", None)
    mark_dirty = getattr(server_session, "mark_dirty", None)
    if callable(mark_dirty):
        mark_dirty()


def _candidates(client: Any, read_preference: Any) -> list[Address]:
    """The members ``read_preference`` allows now (mongos routers in a sharded cluster)."""
    from pymongo.server_selectors import Selection

    topology = getattr(client, "_topology", None)
    description = getattr(topology, "description", None)
    if description is None or read_preference is None:
        return []
    kind = description.topology_type_name
    known = [sd for sd in description.known_servers if sd.is_readable]
    if kind == "Sharded":
        return [sd.address for sd in known if sd.server_type_name == "Mongos"]
    if kind not in ("ReplicaSetWithPrimary", "ReplicaSetNoPrimary"):
        return []
    primary = next((sd for sd in known if sd.server_type_name == "RSPrimary"), None)
    selection = Selection(description, known, description.common_wire_version, primary)
    try:
        chosen = read_preference(selection)
    except Exception:  # a selector we do not understand: do not hedge
        return []
    return [sd.address for sd in chosen.server_descriptions]


def _close_server_cursor(client: Any, result: Any) -> None:
    """Kill the server cursor a losing ``find`` opened (none for single-batch results)."""
    docs = getattr(result, "docs", None)
    if not docs or not isinstance(docs[0], Mapping):
        return
    cursor = docs[0].get("cursor")
    if not isinstance(cursor, Mapping):
        return
    cursor_id, namespace = cursor.get("id"), cursor.get("ns")
    if not isinstance(cursor_id, int) or not cursor_id or not isinstance(namespace, str):
        return
    from pymongo.message import _CursorAddress

    try:
        client._close_cursor_soon(int(cursor_id), _CursorAddress(result.address, namespace))
    except Exception:  # the client is closing: its server cursors go with it
        _LOGGER.debug("could not schedule killCursors for a losing hedged find", exc_info=True)


class _Installation:
    """What hedging installed on one client: the decision, the originals and the wrappers."""

    def __init__(self, client: Any, state: ClientState) -> None:
        """Wrap ``client``'s current methods (the retry adapter's wrappers included)."""
        self.client_ref = weakref.ref(client)
        self.state = state
        controller = state.controller
        pacing = controller.pacing
        self.hedging = Hedging(
            state.policy,
            controller.budget,
            pacing=pacing if callable(getattr(pacing, "pushing_back", None)) else None,  # type: ignore[arg-type]
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
        if seams.is_async_client(client):
            self.wrappers = _async_wrappers(self, delegates)
        else:
            self.wrappers = _sync_wrappers(self, delegates)
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
        self, race: _Race, operation: str, number: int, candidates: list[Address], start: float
    ) -> Optional[_Attempt]:
        """Ask the core for hedge ``number``; return the hedge's attempt (None: no hedge).

        The hedge is announced (event and log line) when it is sent; a hedge stopped before it
        was sent (the read was answered meanwhile) gives its budget token back.
        """
        if race.closed:
            return None
        with race.lock:
            tried = list(race.servers)
        decision = self.hedging.decide(
            hedge=number, candidates=candidates, tried=tried, deadline=seams.csot_deadline()
        )
        if not isinstance(decision, Hedge):
            _LOGGER.debug("not hedging %s (hedge %d): %s", operation, number, decision.reason.value)
            return None
        race.tried(decision.target)  # the next hedge goes elsewhere, even if this one is slow
        first = tried[0] if tried else None
        hedging, notifier = self.hedging, self.notifier

        def announce(sent: bool) -> None:
            if sent:
                notifier.hedged(operation, decision, first, hedging.clock() - start)
            else:
                budget = hedging.budget.for_server(decision.target)
                budget.deposit(budget.retry_cost)

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


def _timeout_of(client: Any) -> Optional[float]:
    """The client's timeoutMS (seconds) when no CSOT timeout applies yet, else None."""
    if _csot.get_timeout() is not None:
        return None
    timeout = getattr(client, "_timeout", None)
    return timeout if isinstance(timeout, (int, float)) else None


def _sync_wrappers(
    installation: _Installation, delegates: dict[str, Callable[..., Any]]
) -> dict[str, Callable[..., Any]]:
    """The wrappers of a sync client (Motor's delegate included)."""
    select_server = delegates["_select_server"]
    process_response = delegates["_process_response"]

    def _select_server(*args: Any, **kwargs: Any) -> Any:
        attempt = _CURRENT.get()
        if attempt is None:
            return select_server(*args, **kwargs)
        if attempt.race.closed:
            attempt.announced(False)
            raise HedgeCancelled("the hedged read was answered by another attempt")
        if attempt.target is not None:
            args, kwargs = _with_address(args, kwargs, attempt.target)
        try:
            server = select_server(*args, **kwargs)
        except BaseException:
            attempt.announced(False)
            raise
        attempt.race.tried(seams.server_address(server))
        attempt.announced(True)
        return server

    def _process_response(*args: Any, **kwargs: Any) -> Any:
        installation.note_reply(_argument(args, kwargs, 0, "reply"))
        return process_response(*args, **kwargs)

    def read_wrapper(method: str) -> Callable[..., Any]:
        delegate = delegates[method]

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            plan = installation.read_plan(method, args, kwargs)
            if plan is None:
                return delegate(*args, **kwargs)
            name, candidates, session = plan
            client = installation.client_ref()
            timeout = _timeout_of(client)
            if timeout is None:
                return _race_sync(installation, method, name, candidates, session, args, kwargs)
            with _csot._TimeoutContext(timeout):  # one deadline for every attempt
                return _race_sync(installation, method, name, candidates, session, args, kwargs)

        return wrapper

    return {
        "_run_operation": read_wrapper("_run_operation"),
        "_retryable_read": read_wrapper("_retryable_read"),
        "_select_server": _select_server,
        "_process_response": _process_response,
    }


def _race_sync(
    installation: _Installation,
    method: str,
    name: str,
    candidates: list[Address],
    session: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """Run one hedged read with threads; return the first success or raise."""
    delegate = _delegate_of(installation, method)
    hedging = installation.hedging
    clock = hedging.clock
    start = clock()
    race = _Race()
    outcomes: queue.SimpleQueue[tuple[_Attempt, bool, Any]] = queue.SimpleQueue()

    def launch(attempt: _Attempt, call: Callable[[], Any]) -> None:
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

    launch(_Attempt(race, None, 0), lambda: delegate(*args, **kwargs))
    number = 0
    try:
        while True:
            timeout: Optional[float] = None
            if number < hedging.max_hedges:
                timeout = max(0.0, hedging.hedge_time(start, number + 1) - clock())
            try:
                attempt, ok, value = outcomes.get(timeout=timeout)
            except queue.Empty:
                number += 1
                hedge = installation.choose(race, name, number, candidates, start)
                if hedge is not None:
                    if number == 1 and session is not None:
                        _discard_when_done(session)
                    launch(hedge, installation.hedge_call(method, delegate, args, kwargs))
                continue
            if ok:
                return value
            error = race.failed(attempt, value)
            if error is not None:
                raise error
    finally:
        race.close()


def _delegate_of(installation: _Installation, method: str) -> Callable[..., Any]:
    """The method our wrapper of ``method`` calls (resolved at install time)."""
    delegate: Callable[..., Any] = installation.delegates[method]
    return delegate


def _async_wrappers(
    installation: _Installation, delegates: dict[str, Callable[..., Any]]
) -> dict[str, Callable[..., Any]]:
    """The wrappers of an ``AsyncMongoClient``."""
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

    if response_is_async:

        async def _process_response(*args: Any, **kwargs: Any) -> Any:
            installation.note_reply(_argument(args, kwargs, 0, "reply"))
            return await process_response(*args, **kwargs)

    else:

        def _process_response(*args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
            installation.note_reply(_argument(args, kwargs, 0, "reply"))
            return process_response(*args, **kwargs)

    def read_wrapper(method: str) -> Callable[..., Any]:
        delegate = delegates[method]

        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            plan = installation.read_plan(method, args, kwargs)
            if plan is None:
                return await delegate(*args, **kwargs)
            name, candidates, session = plan
            timeout = _timeout_of(installation.client_ref())
            if timeout is None:
                return await _race_async(
                    installation, method, name, candidates, session, args, kwargs
                )
            with _csot._TimeoutContext(timeout):  # one deadline for every attempt
                return await _race_async(
                    installation, method, name, candidates, session, args, kwargs
                )

        return wrapper

    return {
        "_run_operation": read_wrapper("_run_operation"),
        "_retryable_read": read_wrapper("_retryable_read"),
        "_select_server": _select_server,
        "_process_response": _process_response,
    }


async def _race_async(
    installation: _Installation,
    method: str,
    name: str,
    candidates: list[Address],
    session: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """Run one hedged read with tasks; return the first success or raise (losers cancelled)."""
    delegate = _delegate_of(installation, method)
    hedging = installation.hedging
    clock = hedging.clock
    start = clock()
    race = _Race()
    tasks: dict[asyncio.Future[Any], _Attempt] = {}

    def launch(attempt: _Attempt, call: Callable[[], Awaitable[Any]]) -> None:
        async def body() -> Any:
            _CURRENT.set(attempt)  # the task runs in a copy of the caller's context
            return await call()

        race.launched()
        tasks[asyncio.ensure_future(body())] = attempt

    def settle_loser(task: asyncio.Future[Any], attempt: _Attempt) -> None:
        attempt.announced(False)  # a no-op once the hedge was sent
        if task.cancelled():
            return
        if task.exception() is None:
            installation.loser(method, task.result())

    launch(_Attempt(race, None, 0), lambda: delegate(*args, **kwargs))
    number = 0
    try:
        while True:
            timeout: Optional[float] = None
            if number < hedging.max_hedges:
                timeout = max(0.0, hedging.hedge_time(start, number + 1) - clock())
            done, _ = await asyncio.wait(
                set(tasks), timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if not done:
                number += 1
                hedge = installation.choose(race, name, number, candidates, start)
                if hedge is not None:
                    if number == 1 and session is not None:
                        _discard_when_done(session)
                    launch(hedge, installation.hedge_call(method, delegate, args, kwargs))
                continue
            winner: Any = _ABSENT
            failure: Optional[BaseException] = None
            for task in sorted(done, key=lambda t: tasks[t].number):
                attempt = tasks.pop(task)
                error = task.exception()
                if error is None:
                    if winner is _ABSENT and race.claim(attempt):
                        winner = task.result()
                    else:
                        installation.loser(method, task.result())
                    continue
                failure = race.failed(attempt, error) or failure
            if winner is not _ABSENT:
                return winner  # a success beats a failure that ended at the same time
            if failure is not None:
                raise failure
    finally:
        race.close()
        for task in tasks:
            if method != "_run_operation":
                # A find is left to finish: its reply names the server cursor to kill.
                task.cancel()
            task.add_done_callback(functools.partial(settle_loser, attempt=tasks[task]))
            _LOSERS.add(task)
            task.add_done_callback(_LOSERS.discard)


def install(client: Any, state: ClientState) -> None:
    """Hedge ``client``'s eligible reads as ``state``'s policy says (replaces an earlier one)."""
    uninstall(client)
    if state.policy.hedge_delay is None:
        return
    setattr(client, _INSTALLATION_ATTR, _Installation(client, state))


def uninstall(client: Any) -> None:
    """Remove hedging from ``client`` (no-op when not installed)."""
    installation = vars(client).pop(_INSTALLATION_ATTR, None)
    if isinstance(installation, _Installation):
        installation.restore(client)


def installed(client: Any) -> bool:
    """Whether hedging is installed on ``client`` (a pymongo client)."""
    return isinstance(vars(client).get(_INSTALLATION_ATTR), _Installation)
