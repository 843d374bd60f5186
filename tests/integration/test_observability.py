"""What an operator sees: log lines, typed listener events, retry summaries, command events."""

from __future__ import annotations

import logging
import threading
from typing import Any
from unittest.mock import patch

import pytest
from pymongo.errors import PyMongoError, ServerSelectionTimeoutError

import backpressure
from backpressure import ADAPTIVE, DRAFT, GiveUpEvent, LocalOverloadError, RetryEvent
from backpressure.core.decision import StopReason
from backpressure.core.events import LISTENER_METHODS, InvalidListenerError, retry_summary
from backpressure.core.labels import RETRYABLE, SYSTEM_OVERLOADED
from backpressure.switch.client import state as state_of
from backpressure.testing.server.embedded import EmbeddedServer
from tests.integration.conftest import (
    OVERLOAD_CODE,
    ClientFactory,
    CommandRecorder,
    RetryRecorder,
    enabled_client,
    overload_fail_point,
    resolve,
    wait_for,
    wait_for_members,
)

pytestmark = pytest.mark.timeout(60)

POLICY = DRAFT.replace(max_retries=3, base_backoff=0.001)


def _client(clients: ClientFactory, server: EmbeddedServer, *listeners: Any, **kw: Any) -> Any:
    """A plain client of the test's flavour, enabled with POLICY and pinned jitter."""
    return enabled_client(
        clients, server.uri, POLICY, listeners=listeners, backpressure_class=False, **kw
    )


async def test_one_log_line_per_retry_and_per_give_up(
    clients: ClientFactory, standalone_server: EmbeddedServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The backpressure logger says INFO once per retry and once when giving up."""
    client = _client(clients, standalone_server)
    standalone_server.configure_fail_point(overload_fail_point(["insert"]))
    with caplog.at_level(logging.INFO, logger="backpressure"), pytest.raises(PyMongoError):
        await resolve(client.db.coll.insert_one({"x": 1}))
    lines = [r.getMessage() for r in caplog.records if r.name == "backpressure"]
    assert len([m for m in lines if m.startswith("retrying insert")]) == 3
    give_ups = [m for m in lines if m.startswith("giving up insert")]
    assert len(give_ups) == 1
    assert "after 4 attempt(s)" in give_ups[0]
    assert "attempts exhausted" in give_ups[0]


async def test_listeners_receive_typed_events(
    clients: ClientFactory, standalone_server: EmbeddedServer, retries: RetryRecorder
) -> None:
    """A listener gets a RetryEvent per retry and one GiveUpEvent with the details."""
    client = _client(clients, standalone_server, retries)
    address = tuple(standalone_server.addresses[0])
    standalone_server.configure_fail_point(overload_fail_point(["insert"]))
    with pytest.raises(PyMongoError):
        await resolve(client.db.coll.insert_one({"x": 1}))
    assert all(isinstance(e, RetryEvent) for e in retries.retries)
    assert [e.attempt for e in retries.retries] == [1, 2, 3]
    first = retries.retries[0]
    assert first.operation == "insert"
    assert first.server == address
    assert first.error_code == OVERLOAD_CODE
    assert set(first.error_labels) >= {SYSTEM_OVERLOADED, RETRYABLE}
    assert [e.budget_tokens for e in retries.retries] == [999, 998, 997]
    (give_up,) = retries.give_ups
    assert isinstance(give_up, GiveUpEvent)
    assert (give_up.attempts, give_up.reason) == (4, StopReason.ATTEMPTS_EXHAUSTED)
    assert give_up.servers == (address,)
    assert give_up.error_code == OVERLOAD_CODE


async def test_retry_summary_on_the_raised_error(
    clients: ClientFactory, standalone_server: EmbeddedServer
) -> None:
    """retry_summary(exc) gives attempts, total backoff, servers tried and the stop reason."""
    client = clients.plain(standalone_server.uri)
    backpressure.enable(client, POLICY, random=lambda: 1.0)
    standalone_server.configure_fail_point(overload_fail_point(["insert"]))
    with pytest.raises(PyMongoError) as info:
        await resolve(client.db.coll.insert_one({"x": 1}))
    summary = retry_summary(info.value)
    assert summary is not None
    assert summary.attempts == 4
    assert summary.total_backoff == pytest.approx(0.001 + 0.002 + 0.004)
    assert summary.servers == (tuple(standalone_server.addresses[0]),)
    assert summary.stop_reason is StopReason.ATTEMPTS_EXHAUSTED


async def test_non_overload_error_is_not_a_backpressure_event(
    clients: ClientFactory, standalone_server: EmbeddedServer, retries: RetryRecorder
) -> None:
    """An ordinary error is not retried by us and produces no listener event."""
    client = _client(clients, standalone_server, retries)
    standalone_server.configure_fail_point(
        overload_fail_point(["insert"], times=1, code=2, labels=())
    )
    with pytest.raises(PyMongoError) as info:
        await resolve(client.db.coll.insert_one({"x": 1}))
    assert retries.retries == []
    assert retries.give_ups == []
    summary = retry_summary(info.value)
    assert summary is not None
    assert (summary.attempts, summary.stop_reason) == (1, StopReason.NOT_RETRYABLE)


async def test_command_events_fire_once_per_attempt(
    clients: ClientFactory, standalone_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """pymongo publishes one started and one failed/succeeded event per attempt."""
    client = _client(clients, standalone_server, event_listeners=[commands])
    standalone_server.configure_fail_point(overload_fail_point(["insert"], times=2))
    await resolve(client.db.coll.insert_one({"x": 1}))
    assert commands.started_names().count("insert") == 3
    assert commands.failed_names().count("insert") == 2
    assert [e.command_name for e in commands.succeeded_log].count("insert") == 1


async def test_listeners_are_per_client_and_failures_are_contained(
    clients: ClientFactory, standalone_server: EmbeddedServer, retries: RetryRecorder
) -> None:
    """Each client notifies its own listeners; a listener that raises breaks nothing."""

    class Broken:
        """A listener whose callbacks raise."""

        def retried(self, event: RetryEvent) -> None:
            """Raise."""
            raise RuntimeError("listener bug")

        def gave_up(self, event: GiveUpEvent) -> None:
            """Raise."""
            raise RuntimeError("listener bug")

    first = _client(clients, standalone_server, Broken())
    second = _client(clients, standalone_server, retries)
    standalone_server.configure_fail_point(overload_fail_point(["insert"], times=1))
    await resolve(first.db.coll.insert_one({"_id": 1}))
    assert retries.retries == []
    standalone_server.configure_fail_point(overload_fail_point(["insert"], times=1))
    await resolve(second.db.coll.insert_one({"_id": 2}))
    assert len(retries.retries) == 1


async def test_server_selection_timeout_is_left_alone(
    clients: ClientFactory, retries: RetryRecorder
) -> None:
    """No server ever selected: pymongo's own error, no attempt recorded, no events."""
    client = clients.plain("mongodb://127.0.0.1:1/", serverSelectionTimeoutMS=100)
    backpressure.enable(client, POLICY, listeners=[retries])
    with pytest.raises(ServerSelectionTimeoutError) as info:
        await resolve(client.db.coll.insert_one({"x": 1}))
    summary = retry_summary(info.value)
    assert summary is None or summary.attempts == 0
    assert (retries.retries, retries.give_ups) == ([], [])


# -- one listener rule: register() and the backpressure_listeners keyword ----------------------


class Only:
    """A listener implementing only the methods it is built with; it keeps what they get."""

    def __init__(self, *methods: str) -> None:
        """Implement ``methods`` (each records its events under its name)."""
        self._lock = threading.Lock()
        self.events: dict[str, list[Any]] = {method: [] for method in methods}
        for method in methods:
            setattr(self, method, self._recorder(method))

    def _recorder(self, method: str) -> Any:
        def record(event: Any) -> None:
            with self._lock:
                self.events[method].append(event)

        return record

    def got(self, method: str) -> list[Any]:
        """The events ``method`` received so far."""
        with self._lock:
            return list(self.events[method])


@pytest.fixture
def registered() -> Any:
    """Register listeners for one test; every one is unregistered at teardown."""
    done: list[Any] = []

    def register(listener: Any) -> Any:
        backpressure.register(listener)
        done.append(listener)
        return listener

    yield register
    for listener in done:
        backpressure.unregister(listener)


LISTENER_METHOD_NAMES = sorted(m for methods in LISTENER_METHODS.values() for m in methods)


@pytest.mark.parametrize("method", LISTENER_METHOD_NAMES)
async def test_every_listener_protocol_is_accepted_on_both_paths(
    clients: ClientFactory, standalone_server: EmbeddedServer, registered: Any, method: str
) -> None:
    """One method of any protocol (retry, operation, admission, hedge) makes a listener for
    register(), the backpressure_listeners keyword and enable(listeners=...) alike."""
    by_register = registered(Only(method))
    by_keyword = Only(method)
    client = clients.backpressure(standalone_server.uri, backpressure_listeners=[by_keyword])
    state = state_of(client)
    assert state is not None
    assert state.listeners == (by_register, by_keyword)
    by_enable = Only(method)
    backpressure.enable(client, listeners=[by_enable])
    assert backpressure.policy(client) is backpressure.CURRENT_SPEC
    state = state_of(client)
    assert state is not None
    assert state.listeners == (by_register, by_enable)


@pytest.mark.parametrize("bad", [object(), "hedged", Only()])
async def test_anything_else_is_refused_alike_by_register_and_the_keyword(
    clients: ClientFactory, standalone_server: EmbeddedServer, bad: Any
) -> None:
    """The same error type and the same list of accepted methods on both paths."""
    with pytest.raises(InvalidListenerError) as by_register:
        backpressure.register(bad)
    cls = backpressure.AsyncMongoClient if clients.is_async else backpressure.MongoClient
    with pytest.raises(InvalidListenerError) as by_keyword:
        cls(standalone_server.uri, backpressure_listeners=[bad])
    for raised in (by_register.value, by_keyword.value):
        assert isinstance(raised, backpressure.InvalidPolicyError)
        assert isinstance(raised, TypeError)
    register_message, keyword_message = str(by_register.value), str(by_keyword.value)
    assert keyword_message.startswith("backpressure_listeners[0] must be a listener, ")
    assert register_message.split(" must be ", 1)[1] == keyword_message.split(" must be ", 1)[1]
    for method in LISTENER_METHOD_NAMES:
        assert f"{method}()" in keyword_message


async def test_half_a_retry_listener_gets_its_events_on_both_paths(
    clients: ClientFactory, standalone_server: EmbeddedServer, registered: Any
) -> None:
    """A listener with only ``retried`` or only ``gave_up`` receives those events."""
    retried = [registered(Only("retried")), Only("retried")]
    gave_up = [registered(Only("gave_up")), Only("gave_up")]
    client = clients.backpressure(
        standalone_server.uri,
        backpressure=POLICY,
        backpressure_listeners=[retried[1], gave_up[1]],
    )
    standalone_server.configure_fail_point(overload_fail_point(["insert"]))
    with pytest.raises(PyMongoError):
        await resolve(client.db.coll.insert_one({"x": 1}))
    for listener in retried:
        assert [e.attempt for e in listener.got("retried")] == [1, 2, 3]
    for listener in gave_up:
        (event,) = listener.got("gave_up")
        assert (event.attempts, event.reason) == (4, StopReason.ATTEMPTS_EXHAUSTED)


@pytest.mark.parametrize("event", ["waited", "refused"])
async def test_admission_listeners_get_waits_and_refusals_on_both_paths(
    clients: ClientFactory,
    standalone_server: EmbeddedServer,
    commands: CommandRecorder,
    registered: Any,
    event: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An PacingListener (here with one method) registered or given as a keyword receives
    the adaptive pacing's local wait, or its refusal past ``max_local_wait``.

    The pacing runs on a clock the test steps (a local wait moves it on), so that the find
    meets the closed pacing however slowly the machine runs the test.
    """
    from tests.integration.conftest import NEVER_WAIT_TWICE
    from tests.integration.test_adaptive import SteppedClock, close_pacing, step_on

    by_register = registered(Only(event))
    by_keyword = Only(event)
    if event == "waited":  # the next slot comes within half a second
        policy, kwargs = ADAPTIVE.replace(adaptive_min_rate=2.0, max_local_wait=30.0), {}
    else:  # the next slot is about 1000 s away: held for max_local_wait, then refused
        policy, kwargs = NEVER_WAIT_TWICE.replace(max_local_wait=0.05), {}
    client = clients.backpressure(
        standalone_server.uri,
        backpressure=policy,
        backpressure_listeners=[by_keyword],
        event_listeners=[commands],
        **kwargs,
    )
    clock = SteppedClock()
    step_on(client, clock)
    with patch("random.random", return_value=0.0):  # no backoff: the pushbacks come together
        await close_pacing(client, standalone_server, commands)
    if event == "waited":
        assert await resolve(client.db.coll.find_one({"closing": True})) is not None
    else:
        with pytest.raises(LocalOverloadError):
            await resolve(client.db.coll.find_one({}))
    for listener in (by_register, by_keyword):
        (got,) = listener.got(event)
        assert got.operation == "find"
        assert got.server == standalone_server.addresses[0]


async def test_hedge_listeners_get_hedges_on_both_paths(
    clients: ClientFactory,
    replicaset_server: EmbeddedServer,
    commands: CommandRecorder,
    registered: Any,
) -> None:
    """A HedgeListener registered or given as a keyword receives the hedge of a read stuck on a
    slow member."""
    from tests.integration.test_hedging import (
        HEDGED,
        SLOW,
        finished_at,
        require_hedging,
        slow_fail_point,
    )

    require_hedging(clients)
    by_register = registered(Only("hedged"))
    by_keyword = Only("hedged")
    client = clients.backpressure(
        replicaset_server.uri,
        backpressure=HEDGED,
        backpressure_listeners=[by_keyword],
        event_listeners=[commands],
        readPreference="nearest",
        localThresholdMS=60_000,
    )
    await resolve(client.db.coll.insert_one({"_id": 1}))
    await wait_for_members(client)
    slow = replicaset_server.addresses[SLOW]
    replicaset_server.configure_fail_point(slow_fail_point("find", 500), member=SLOW)

    def from_slow(listener: Only) -> list[Any]:
        return [e for e in listener.got("hedged") if e.first_server == slow]

    for _ in range(200):
        assert await resolve(client.db.coll.find_one({"_id": 1})) == {"_id": 1}
        if from_slow(by_keyword):
            break
    assert from_slow(by_keyword), "no read went to the slow member first"
    assert from_slow(by_register) == from_slow(by_keyword)
    (hedge,) = from_slow(by_register)
    assert (hedge.operation, hedge.hedge) == ("find", 1)
    assert hedge.server != slow
    # The loser finishes on its own: wait so that no attempt outlives the test.
    await wait_for(lambda: finished_at(commands, "find", slow), "the slow member's reply")
