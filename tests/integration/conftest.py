"""Shared helpers for the integration tests: command and retry recorders, client factories.

Tests are written once as ``async def`` and run for both flavours through the ``flavour``
fixture: :func:`resolve` awaits a value only when it is awaitable, so the same body drives a sync
``MongoClient`` (calls return results; the embedded server runs in its own thread) and an
``AsyncMongoClient`` (calls return coroutines).
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Awaitable, Iterator, Sequence
from typing import Any, Callable, Optional, TypeVar, Union

import pytest
from pymongo import monitoring

import backpressure
from backpressure.adapters import seams
from backpressure.adapters.backport import NATIVE_BACKPRESSURE, NATIVE_REASON
from backpressure.core.events import GiveUpEvent, RetryEvent
from backpressure.core.labels import RETRYABLE, SYSTEM_OVERLOADED

T = TypeVar("T")

OVERLOAD_CODE = 462
"""IngressRequestRateLimitExceeded, the server's overload error code."""

FLAVOURS = ("sync", "async")
"""Client flavours every adapter test runs with."""

NATIVE_LOOP_ONLY = pytest.mark.skipif(
    not seams.HAS_NATIVE_BACKPRESSURE,
    reason="pymongo has no native overload retry loop (the backport is tested elsewhere)",
)
"""Marks tests of the native adapter (pymongo >= 4.17)."""

BACKPORT_ONLY = pytest.mark.skipif(NATIVE_BACKPRESSURE, reason=NATIVE_REASON)
"""Marks tests of the backport (pymongo 4.9-4.16)."""

FAST_BACKOFF = backpressure.DRAFT.replace(base_backoff=0.001, max_backoff=0.05)
"""The draft's limits with millisecond backoffs, so retries take no noticeable time."""


async def resolve(value: Union[T, Awaitable[T]]) -> T:
    """Await ``value`` if it is awaitable (async client), else return it (sync client)."""
    if inspect.isawaitable(value):
        return await value  # type: ignore[no-any-return]
    return value


async def to_list(cursor: Any) -> list[Any]:
    """Exhaust a sync or async cursor into a list."""
    if hasattr(cursor, "__aiter__"):
        return [doc async for doc in cursor]
    return list(cursor)


def zero_jitter() -> float:
    """Jitter pinned to 0: no backoff sleeps."""
    return 0.0


async def in_transaction(client: Any, *writes: Callable[[Any], Any], abort: bool = False) -> None:
    """Run ``writes`` (each called with the session) in one transaction, then commit it.

    With ``abort`` the transaction is aborted instead; the session is ended either way.
    """
    session = await resolve(client.start_session())
    try:
        await resolve(session.start_transaction())
        for write in writes:
            await resolve(write(session))
        if abort:
            await resolve(session.abort_transaction())
        else:
            await resolve(session.commit_transaction())
    finally:
        await resolve(session.end_session())


NEVER_WAIT_TWICE = backpressure.ADAPTIVE.replace(
    adaptive_min_rate=0.001,
    adaptive_decrease=0.0001,
    adaptive_increase=0.001,
    adaptive_quiet=60.0,
    adaptive_window=60.0,
    max_local_wait=30.0,
)
"""Once closed by an overload with nothing admitted before, slots are about 1000 s apart, and
stay so for a minute of real time: the rate grows by 0.001/s per second, climbs fast only after
60 s without pushback, and the pacing reopens only after a 60 s window without pushback or
wait.  With the preset's values a slot came within 0.5 s about 0.2 s after the close, and the
pacing reopened after 1 s: a test slow to send its next operation (a loaded machine, or a Motor
client's jittered backoff) saw it admitted instead of refused."""


def run_on_clock(
    client: Any,
    clock: Callable[[], float],
    advance: Callable[[float], None],
    waits: Optional[list[float]] = None,
) -> None:
    """Give an enabled client ``clock`` for its pacing and a sleep that moves it on
    (``advance(seconds)``) instead of sleeping, through the client's private timing hook
    (``backpressure.switch.client.set_timing``); each sleep is appended to ``waits``.

    The sleep still yields (``time.sleep(0)`` or ``asyncio.sleep(0)``), so the event loop or
    the other threads run.  The client starts afresh: call this before the test's operations.
    """
    import time

    from backpressure.adapters import seams
    from backpressure.switch.client import _pymongo_client, set_timing

    taken = [] if waits is None else waits

    def step(seconds: float) -> None:
        taken.append(seconds)
        advance(seconds)

    if seams.is_async_client(_pymongo_client(client)):

        async def sleep_async(seconds: float) -> None:
            step(seconds)
            await asyncio.sleep(0)

        set_timing(client, clock=clock, sleep=sleep_async)
    else:

        def sleep(seconds: float) -> None:
            step(seconds)
            time.sleep(0)

        set_timing(client, clock=clock, sleep=sleep)


async def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Wait until ``condition()`` holds (polling, yielding to tasks and threads), or fail
    naming ``what``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def _discovered(client: Any, server_types: tuple[str, ...]) -> int:
    """How many servers of ``server_types`` the client's monitors know."""
    descriptions = client.topology_description.server_descriptions().values()
    return sum(d.server_type_name in server_types for d in descriptions)


async def wait_for_members(client: Any, count: int = 3) -> None:
    """Wait until the client's monitors know ``count`` data-bearing replica set members.

    An AsyncMongoClient starts its monitors on its first operation: run one before waiting.
    """
    await wait_for(
        lambda: _discovered(client, ("RSPrimary", "RSSecondary")) >= count,
        "the replica set members to be discovered",
    )


async def wait_for_mongoses(client: Any, count: int = 2, timeout: float = 60.0) -> None:
    """Wait until the client's monitors have discovered ``count`` mongos routers.

    An AsyncMongoClient starts its monitors on its first operation: run one before waiting.
    """
    await wait_for(
        lambda: _discovered(client, ("Mongos",)) >= count,
        "the mongos routers to be discovered",
        timeout,
    )


def overload_fail_point(
    commands: Sequence[str],
    times: Optional[int] = None,
    *,
    labels: Sequence[str] = (SYSTEM_OVERLOADED, RETRYABLE),
    code: int = OVERLOAD_CODE,
    extra: Optional[dict[str, Any]] = None,
    app_name: Optional[str] = None,
) -> dict[str, Any]:
    """Build a ``failCommand`` fail point that fails ``commands`` with an overload error.

    ``times=None`` means always on; ``extra`` adds fields to ``data`` (e.g. ``closeConnection``).
    """
    data: dict[str, Any] = {
        "failCommands": list(commands),
        "errorCode": code,
        "errorLabels": list(labels),
    }
    if app_name is not None:
        data["appName"] = app_name
    if extra:
        data.update(extra)
    mode: Any = "alwaysOn" if times is None else {"times": times}
    return {"configureFailPoint": "failCommand", "mode": mode, "data": data}


class CommandRecorder(monitoring.CommandListener):
    """A pymongo CommandListener that keeps every event (thread-safe), hello/auth excluded."""

    IGNORED = frozenset(
        {"hello", "ismaster", "isMaster", "saslStart", "saslContinue", "endSessions"}
    )

    def __init__(self) -> None:
        """Start empty."""
        self._lock = threading.Lock()
        self.started_log: list[monitoring.CommandStartedEvent] = []
        self.succeeded_log: list[monitoring.CommandSucceededEvent] = []
        self.failed_log: list[monitoring.CommandFailedEvent] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        """Record a started event."""
        if event.command_name not in self.IGNORED:
            with self._lock:
                self.started_log.append(event)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        """Record a succeeded event."""
        if event.command_name not in self.IGNORED:
            with self._lock:
                self.succeeded_log.append(event)

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        """Record a failed event."""
        if event.command_name not in self.IGNORED:
            with self._lock:
                self.failed_log.append(event)

    def started_commands(self, name: Optional[str] = None) -> list[dict[str, Any]]:
        """Return the command documents started (only those named ``name`` when given)."""
        with self._lock:
            return [
                dict(e.command) for e in self.started_log if name is None or e.command_name == name
            ]

    def started_events(self, name: str) -> list[monitoring.CommandStartedEvent]:
        """Return the started events of command ``name``."""
        with self._lock:
            return [e for e in self.started_log if e.command_name == name]

    def started_names(self) -> list[str]:
        """Return the names of the commands started, in order."""
        with self._lock:
            return [e.command_name for e in self.started_log]

    def failed_names(self) -> list[str]:
        """Return the names of the commands that failed, in order."""
        with self._lock:
            return [e.command_name for e in self.failed_log]

    def addresses(self, name: str) -> list[tuple[str, int]]:
        """Return the server address of each started ``name`` command."""
        with self._lock:
            return [
                (str(e.connection_id[0]), int(e.connection_id[1]))
                for e in self.started_log
                if e.command_name == name
            ]

    def reset(self) -> None:
        """Forget everything recorded so far."""
        with self._lock:
            self.started_log.clear()
            self.succeeded_log.clear()
            self.failed_log.clear()


class FailPointSwitch(monitoring.CommandListener):
    """Configures ``fail_point`` on ``server`` once, when the first ``command`` has ``ended``.

    ``ended`` is "succeeded" or "failed"; ``check`` (when given) runs on that event first, and
    an assertion failing in it leaves the fail point alone (pymongo swallows listener errors),
    which ``switched`` then shows.
    """

    def __init__(
        self,
        server: Any,
        command: str,
        ended: str,
        fail_point: dict[str, Any],
        *,
        check: Optional[Callable[[Any], None]] = None,
    ) -> None:
        """Arm the switch."""
        if ended not in ("succeeded", "failed"):
            raise ValueError(f"ended must be 'succeeded' or 'failed', not {ended!r}")
        self._server = server
        self._command = command
        self._ended = ended
        self._fail_point = fail_point
        self._check = check
        self.switched = False

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        """Ignore started events."""

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        """Switch on the first matching success (when armed for successes)."""
        if self._ended == "succeeded":
            self._switch(event)

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        """Switch on the first matching failure (when armed for failures)."""
        if self._ended == "failed":
            self._switch(event)

    def _switch(self, event: Any) -> None:
        if event.command_name == self._command and not self.switched:
            if self._check is not None:
                self._check(event)
            self.switched = True
            self._server.configure_fail_point(self._fail_point)


class RetryRecorder:
    """A backpressure RetryListener that keeps every event (thread-safe)."""

    def __init__(self) -> None:
        """Start empty."""
        self._lock = threading.Lock()
        self.retries: list[RetryEvent] = []
        self.give_ups: list[GiveUpEvent] = []

    def retried(self, event: RetryEvent) -> None:
        """Record a retry."""
        with self._lock:
            self.retries.append(event)

    def gave_up(self, event: GiveUpEvent) -> None:
        """Record a give-up."""
        with self._lock:
            self.give_ups.append(event)

    @property
    def delays(self) -> list[float]:
        """The delay of every retry, in order."""
        with self._lock:
            return [e.delay for e in self.retries]


class ClientFactory:
    """Builds clients of one flavour and closes them all at teardown."""

    def __init__(self, flavour: str) -> None:
        """Create a factory for ``flavour`` ("sync" or "async")."""
        self.flavour = flavour
        self._clients: list[Any] = []

    @property
    def is_async(self) -> bool:
        """True for the async flavour."""
        return self.flavour == "async"

    def track(self, client: T) -> T:
        """Close ``client`` at teardown."""
        self._clients.append(client)
        return client

    def plain(self, uri: str, **kwargs: Any) -> Any:
        """A stock pymongo client of this flavour (short timeouts)."""
        import pymongo

        kwargs.setdefault("serverSelectionTimeoutMS", 3000)
        if self.is_async:
            return self.track(pymongo.AsyncMongoClient(uri, **kwargs))
        return self.track(pymongo.MongoClient(uri, **kwargs))

    def backpressure(self, uri: str, **kwargs: Any) -> Any:
        """A ``backpressure.MongoClient`` / ``AsyncMongoClient`` of this flavour."""
        import backpressure

        kwargs.setdefault("serverSelectionTimeoutMS", 3000)
        if self.is_async:
            return self.track(backpressure.AsyncMongoClient(uri, **kwargs))
        return self.track(backpressure.MongoClient(uri, **kwargs))

    async def close_all(self) -> None:
        """Close every tracked client."""
        while self._clients:
            await resolve(self._clients.pop().close())


def enabled_client(
    clients: ClientFactory,
    uri: str,
    policy: Any = backpressure.DRAFT,
    *,
    listeners: Sequence[Any] = (),
    random: Callable[[], float] = zero_jitter,
    backpressure_class: bool = True,
    **kwargs: Any,
) -> Any:
    """A client of the test's flavour with ``enable(policy, listeners, random)`` applied.

    A ``backpressure.MongoClient`` / ``AsyncMongoClient`` (which on pymongo < 4.17 brings the
    backport's pool), or with ``backpressure_class=False`` a stock pymongo client; ``kwargs`` go
    to the constructor.
    """
    make = clients.backpressure if backpressure_class else clients.plain
    client = make(uri, **kwargs)
    backpressure.enable(client, policy, listeners=listeners, random=random)
    return client


@pytest.fixture(params=FLAVOURS)
def flavour(request: pytest.FixtureRequest) -> str:
    """Run the test once with a sync and once with an async client."""
    return str(request.param)


@pytest.fixture
async def clients(flavour: str) -> Any:
    """A ClientFactory for the current flavour; its clients are closed after the test."""
    factory = ClientFactory(flavour)
    yield factory
    await factory.close_all()


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Any:
    """The embedded server of the topology named by an indirect parameter ("standalone", ...)."""
    return request.getfixturevalue(f"{request.param}_server")


@pytest.fixture
def commands() -> CommandRecorder:
    """A fresh CommandRecorder to pass as ``event_listeners=[commands]``."""
    return CommandRecorder()


@pytest.fixture
def retries() -> RetryRecorder:
    """A fresh RetryRecorder to pass as a backpressure listener."""
    return RetryRecorder()


@pytest.fixture
def no_jitter() -> Callable[[], float]:
    """A random source pinned to 0 (no backoff sleeps)."""
    return zero_jitter


def pairs(items: Sequence[T]) -> Iterator[tuple[T, T]]:
    """Yield consecutive pairs of ``items``."""
    return zip(items, items[1:])
