"""The adaptive preset end to end: local waits and refusals, inertness, retargeting, every era.

Every test runs sync and async (and one with Motor) against the embedded server, on the native
adapter (pymongo >= 4.17) or the backport below it.  A server's pacing is closed by an injected
overload (a ``failCommand`` fail point); the paced rate is then the policy's
``adaptive_min_rate`` (nothing was admitted before), which the tests choose so that a wait is
either certain or impossible whatever the load on the machine.
"""

from __future__ import annotations

import threading
from typing import Any, Optional

import pytest
from pymongo.errors import AutoReconnect, OperationFailure, PyMongoError

import backpressure
from backpressure import ADAPTIVE, LocalOverloadError
from backpressure.core.adaptive import LocalRefusalEvent, LocalWaitEvent
from backpressure.core.budget import ServerBudgets
from backpressure.core.decision import StopReason
from backpressure.core.events import retry_summary
from backpressure.core.labels import RETRYABLE, SYSTEM_OVERLOADED
from backpressure.switch.client import budget as budget_of
from backpressure.switch.client import set_timing
from backpressure.switch.client import state as state_of
from backpressure.testing.server.embedded import EmbeddedServer
from tests.integration import conftest
from tests.integration.conftest import (
    NEVER_WAIT_TWICE,
    ClientFactory,
    CommandRecorder,
    RetryRecorder,
    overload_fail_point,
    resolve,
    to_list,
    wait_for,
    wait_for_members,
)


class PacingRecorder(RetryRecorder):
    """Keeps retry events and the local waits and refusals (thread-safe)."""

    def __init__(self) -> None:
        """Start empty."""
        super().__init__()
        self._admission_lock = threading.Lock()
        self.waits: list[LocalWaitEvent] = []
        self.refusals: list[LocalRefusalEvent] = []

    def waited(self, event: LocalWaitEvent) -> None:
        """Record a local wait."""
        with self._admission_lock:
            self.waits.append(event)

    def refused(self, event: LocalRefusalEvent) -> None:
        """Record a local refusal."""
        with self._admission_lock:
            self.refusals.append(event)


def adaptive_client(
    clients: ClientFactory,
    server: EmbeddedServer,
    commands: CommandRecorder,
    recorder: PacingRecorder,
    policy: Any = ADAPTIVE,
    **kwargs: Any,
) -> Any:
    """A ``backpressure`` client of the test's flavour with ``policy`` and the recorders."""
    return conftest.enabled_client(
        clients, server.uri, policy, listeners=[recorder], event_listeners=[commands], **kwargs
    )


@pytest.fixture
def recorder() -> PacingRecorder:
    """A fresh PacingRecorder."""
    return PacingRecorder()


async def close_pacing(client: Any, server: EmbeddedServer, commands: CommandRecorder) -> None:
    """Make the server push back twice on an insert (one pushback is a blip: it closes
    nothing); the second retry is sent and succeeds."""
    server.configure_fail_point(overload_fail_point(["insert"], times=2))
    await resolve(client.db.coll.insert_one({"closing": True}))
    assert len(commands.started_commands("insert")) == 3
    state = state_of(client)
    assert state is not None
    assert state.controller.pacing is not None
    assert state.controller.pacing.pushing_back()
    commands.reset()


async def test_adaptive_keyword_and_uri_select_the_preset(
    clients: ClientFactory, standalone_server: EmbeddedServer
) -> None:
    """backpressure="adaptive" and ?backpressure=adaptive both give the ADAPTIVE policy."""
    by_keyword = clients.backpressure(standalone_server.uri, backpressure="adaptive")
    separator = "&" if "?" in standalone_server.uri else "?"
    by_uri = clients.backpressure(f"{standalone_server.uri}{separator}backpressure=adaptive")
    for client in (by_keyword, by_uri):
        state = state_of(client)
        assert state is not None
        assert state.policy is ADAPTIVE
        assert state.gate is not None


async def test_without_overload_nothing_waits_and_nothing_is_paced(
    clients: ClientFactory,
    standalone_server: EmbeddedServer,
    commands: CommandRecorder,
    recorder: PacingRecorder,
) -> None:
    """Inert: 50 operations, one command each, no wait, no pacer closed."""
    client = adaptive_client(clients, standalone_server, commands, recorder)
    for i in range(25):
        await resolve(client.db.coll.insert_one({"_id": i}))
        assert await resolve(client.db.coll.find_one({"_id": i})) == {"_id": i}
    assert len(commands.started_commands("insert")) == 25
    assert len(commands.started_commands("find")) == 25
    assert recorder.waits == []
    assert recorder.refusals == []
    state = state_of(client)
    assert state is not None
    assert state.controller.pacing is not None
    assert not state.controller.pacing.pushing_back()


async def test_a_paced_server_makes_the_next_operation_wait_locally(
    clients: ClientFactory,
    standalone_server: EmbeddedServer,
    commands: CommandRecorder,
    recorder: PacingRecorder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After pushback the next operation waits for its slot, then is sent once and succeeds.

    The pacing runs on a clock the test steps (a local wait moves it on): on the machine's
    clock, a test slow to send the find (a loaded machine) would find its slot already due.
    """
    policy = ADAPTIVE.replace(adaptive_min_rate=2.0, max_local_wait=30.0)
    client = adaptive_client(clients, standalone_server, commands, recorder, policy)
    clock = SteppedClock()
    step_on(client, clock)
    await close_pacing(client, standalone_server, commands)
    assert await resolve(client.db.coll.find_one({"closing": True})) is not None
    assert len(commands.started_commands("find")) == 1
    assert len(recorder.waits) == 1
    event = recorder.waits[0]
    assert event.operation == "find"
    assert 0.0 < event.wait <= 0.5
    assert event.server == standalone_server.addresses[0]
    assert recorder.refusals == []


_PACED_OPERATIONS: dict[str, tuple[str, Any]] = {
    "find": ("find", lambda c: c.db.coll.find_one({"closing": True})),
    "runCommand": ("ping", lambda c: c.db.command("ping")),
}
"""A read through pymongo's retry loop, and a runCommand (which bypasses it before 4.17)."""


@pytest.mark.parametrize("operation", sorted(_PACED_OPERATIONS))
@pytest.mark.parametrize("refused", [False, True], ids=["waits", "refused"])
async def test_a_run_command_is_admitted_by_the_pacing_as_a_find_is(
    clients: ClientFactory,
    standalone_server: EmbeddedServer,
    commands: CommandRecorder,
    recorder: PacingRecorder,
    operation: str,
    refused: bool,
) -> None:
    """After pushback ``db.command`` waits for its slot, then is sent once, or is refused with
    ``LocalOverloadError`` and sends nothing, exactly as a find does.

    The pacing runs on a clock the test steps (a local wait moves it on); slots are 0.5 s apart
    (at most 0.5 s to wait), or about 1000 s apart with a 0.5 s bound (refused)."""
    if refused:
        policy = NEVER_WAIT_TWICE.replace(max_local_wait=0.5)
    else:
        policy = ADAPTIVE.replace(adaptive_min_rate=2.0, max_local_wait=30.0)
    client = adaptive_client(clients, standalone_server, commands, recorder, policy)
    waits: list[float] = []
    step_on(client, SteppedClock(), waits)
    await close_pacing(client, standalone_server, commands)
    waits.clear()
    name, run = _PACED_OPERATIONS[operation]
    if refused:
        with pytest.raises(LocalOverloadError) as info:
            await resolve(run(client))
        assert commands.started_names() == []
        summary = retry_summary(info.value)
        assert summary is not None
        assert summary.stop_reason is StopReason.LOCAL_WAIT_LIMIT
        assert [(e.operation, e.reason) for e in recorder.refusals] == [
            (name, StopReason.LOCAL_WAIT_LIMIT)
        ]
        assert recorder.waits == []
        return
    await resolve(run(client))
    assert commands.started_names() == [name]
    assert [event.operation for event in recorder.waits] == [name]
    assert 0.0 < recorder.waits[0].wait <= 0.5
    assert recorder.waits[0].server == standalone_server.addresses[0]
    assert waits[0] == recorder.waits[0].wait  # slept through the client's sleep, on the clock
    assert recorder.refusals == []


async def test_a_wait_past_max_local_wait_fails_fast_without_sending(
    clients: ClientFactory,
    standalone_server: EmbeddedServer,
    commands: CommandRecorder,
    recorder: PacingRecorder,
) -> None:
    """The refused operation raises a PyMongoError labelled overload; no command is sent."""
    policy = NEVER_WAIT_TWICE.replace(max_local_wait=0.5)
    client = adaptive_client(clients, standalone_server, commands, recorder, policy)
    await close_pacing(client, standalone_server, commands)
    with pytest.raises(LocalOverloadError) as info:
        await resolve(client.db.coll.insert_one({"refused": True}))
    error = info.value
    assert isinstance(error, PyMongoError)
    assert error.has_error_label(SYSTEM_OVERLOADED)
    assert not error.has_error_label(RETRYABLE)
    assert commands.started_names() == []
    summary = retry_summary(error)
    assert summary is not None
    assert summary.stop_reason is StopReason.LOCAL_WAIT_LIMIT
    assert [e.reason for e in recorder.refusals] == [StopReason.LOCAL_WAIT_LIMIT]
    assert recorder.refusals[0].operation == "insert"


async def test_a_wait_past_the_csot_deadline_fails_fast_with_the_deadline_reason(
    clients: ClientFactory,
    standalone_server: EmbeddedServer,
    commands: CommandRecorder,
    recorder: PacingRecorder,
) -> None:
    """With timeoutMS shorter than the wait, the read is refused for the deadline."""
    client = adaptive_client(
        clients, standalone_server, commands, recorder, NEVER_WAIT_TWICE, timeoutMS=5000
    )
    await close_pacing(client, standalone_server, commands)
    with pytest.raises(LocalOverloadError) as info:
        await resolve(client.db.coll.find_one({}))
    assert commands.started_names() == []
    summary = retry_summary(info.value)
    assert summary is not None
    assert summary.stop_reason is StopReason.LOCAL_WAIT_DEADLINE


async def test_paced_retries_spend_no_budget(
    clients: ClientFactory,
    standalone_server: EmbeddedServer,
    commands: CommandRecorder,
    recorder: PacingRecorder,
) -> None:
    """With a 1-token per-server budget (opted into: ``adaptive`` keeps the spec's retries, no
    budget) and 3 retries, three overloads in a row are all retried: the first retry on the
    budget's one token (one pushback does not close the pacing), the others for free once the
    second pushback closed it."""
    policy = ADAPTIVE.replace(
        budget_enabled=True,
        budget_scope="server",
        budget_mode="ratio",
        budget_capacity=1.0,
        max_retries=3,
        adaptive_min_rate=50.0,
        base_backoff=0.001,
    )
    client = adaptive_client(clients, standalone_server, commands, recorder, policy)
    standalone_server.configure_fail_point(overload_fail_point(["insert"], times=3))
    await resolve(client.db.coll.insert_one({"x": 1}))
    assert len(commands.started_commands("insert")) == 4
    budget = budget_of(client)
    assert isinstance(budget, ServerBudgets)
    assert budget.granted == 1  # before the pacing closed (one pushback is a blip)
    assert budget.tokens == pytest.approx(0.1)  # the operation's success earned a tenth


@pytest.mark.parametrize("server", ["replicaset"], indirect=True)
async def test_reads_avoid_a_paced_member_when_the_read_preference_allows(
    clients: ClientFactory,
    server: EmbeddedServer,
    commands: CommandRecorder,
    recorder: PacingRecorder,
) -> None:
    """One hot member: once it is paced, new "nearest" reads go to the other members.

    A latency window wider than any round trip keeps every member eligible whatever the load:
    with the default 15 ms, a busy machine can leave the hot member out on its measured round
    trip alone (it is then never paced, or avoided for the wrong reason).  Server choice is
    off: it would leave the hot member out after its first pushback, before the pacing closes
    (``tests/integration/test_server_choice.py`` tests it); the pacing alone steers here."""
    client = adaptive_client(
        clients,
        server,
        commands,
        recorder,
        NEVER_WAIT_TWICE.replace(route_around=False),
        readPreference="nearest",
        localThresholdMS=60_000,
    )
    await resolve(client.db.coll.insert_one({"_id": 1}))
    await wait_for_members(client, 3)
    hot = server.addresses[1]
    server.configure_fail_point(overload_fail_point(["find"]), member=1)
    state = state_of(client)
    assert state is not None
    admission = state.controller.pacing
    assert admission is not None
    for _ in range(50):  # until reads land on the hot member and its pacing closes
        await resolve(client.db.coll.find_one({}))
        if admission.is_paced(hot):
            break
    assert admission.is_paced(hot)
    server.disable_fail_points(member=1)
    commands.reset()
    for _ in range(20):
        await resolve(client.db.coll.find_one({}))
    assert hot not in commands.addresses("find")
    assert recorder.refusals == []
    assert recorder.waits == []


async def test_motor_client_waits_and_refuses_locally(
    standalone_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """Motor: the adaptive preset paces and refuses through its delegate."""
    recorder = PacingRecorder()
    client = backpressure.AsyncIOMotorClient(
        standalone_server.uri,
        backpressure=NEVER_WAIT_TWICE.replace(max_local_wait=0.5),
        event_listeners=[commands],
        serverSelectionTimeoutMS=3000,
    )
    try:
        state = state_of(client)
        assert state is not None
        state.add_listener(recorder)
        # Two pushbacks close the pacing (one is a blip).
        standalone_server.configure_fail_point(overload_fail_point(["insert"], times=2))
        await client.db.coll.insert_one({"_id": 1})
        commands.reset()
        with pytest.raises(LocalOverloadError):
            await to_list(client.db.coll.find({}))
        assert commands.started_names() == []
        assert [e.reason for e in recorder.refusals] == [StopReason.LOCAL_WAIT_LIMIT]
    finally:
        client.close()


class SteppedClock:
    """A monotonic clock only the test moves: the pacing's time, decoupled from the machine's."""

    def __init__(self, now: float = 1000.0) -> None:
        """Start at ``now``."""
        self.now = now

    def __call__(self) -> float:
        """The current time."""
        return self.now


def pace_on(client: Any, clock: SteppedClock) -> None:
    """Run the client's pacing on ``clock`` (the client still sleeps the waits it answers)."""
    set_timing(client, clock=clock)


def step_on(client: Any, clock: SteppedClock, waits: Optional[list[float]] = None) -> None:
    """Run the client's pacing on ``clock``; its local waits and backoffs move the clock on
    (appended to ``waits``) instead of sleeping (the client's private timing hook)."""

    def advance(seconds: float) -> None:
        clock.now += seconds

    conftest.run_on_clock(client, clock, advance, waits)


class Background:
    """One operation of the test's client running concurrently: a thread (sync) or a task."""

    def __init__(self, clients: ClientFactory, operation: Any) -> None:
        """Start ``operation()`` (a callable returning the result or an awaitable)."""
        import asyncio

        self.error: Optional[BaseException] = None
        if clients.is_async:
            self._task: Optional[asyncio.Future[Any]] = asyncio.ensure_future(operation())
            self._thread: Optional[threading.Thread] = None
        else:
            self._task = None
            self._thread = threading.Thread(target=self._run, args=(operation,), daemon=True)
            self._thread.start()

    def _run(self, operation: Any) -> None:
        try:
            operation()
        except BaseException as exc:  # reported by join
            self.error = exc

    @property
    def done(self) -> bool:
        """Whether the operation has finished."""
        if self._task is not None:
            return self._task.done()
        assert self._thread is not None
        return not self._thread.is_alive()

    async def join(self) -> None:
        """Wait for the operation (at most 60 s) and raise what it raised."""
        await wait_for(lambda: self.done, "the operation to finish")
        if self._task is not None:
            self._task.result()
        if self.error is not None:
            raise self.error


async def test_a_retry_goes_ahead_and_the_first_attempt_it_displaced_waits_on(
    clients: ClientFactory,
    standalone_server: EmbeddedServer,
    commands: CommandRecorder,
    recorder: PacingRecorder,
) -> None:
    """A pushed-back insert's retry takes the slot of the first attempt waiting behind it; that
    read learns on recheck that its slot moved one interval later and is sent only then.

    The pacing runs on a clock the test moves (slots 50 ms apart on it), so which attempt may
    be sent when does not depend on the machine's speed: every send below is caused by a step.
    """
    policy = ADAPTIVE.replace(adaptive_min_rate=20.0, max_local_wait=30.0)
    client = adaptive_client(clients, standalone_server, commands, recorder, policy)
    clock = SteppedClock()
    pace_on(client, clock)
    await close_pacing(client, standalone_server, commands)  # paced at 20/s; next slot +50 ms
    start = clock.now
    coll = client.db.coll
    first = Background(clients, lambda: coll.find_one({"closing": True}))
    await wait_for(lambda: len(recorder.waits) == 1, "the first read to wait")
    standalone_server.configure_fail_point(overload_fail_point(["insert"], times=1))
    pushed_back = Background(clients, lambda: coll.insert_one({"pushed back": True}))
    await wait_for(lambda: len(recorder.waits) == 2, "the insert to wait")
    displaced = Background(clients, lambda: coll.find_one({"displaced": True}))
    await wait_for(lambda: len(recorder.waits) == 3, "the second read to wait")
    assert commands.started_names() == []

    clock.now = start + 0.10  # the first read's and the insert's slots are due
    await first.join()
    # The insert is pushed back; its retry takes the second read's slot (+150 ms).
    await wait_for(lambda: len(recorder.waits) == 4, "the insert's retry to wait")
    assert len(commands.started_commands("insert")) == 1

    clock.now = start + 0.15  # the retry's slot: the second read's slot moved to +200 ms
    await pushed_back.join()
    assert len(commands.started_commands("insert")) == 2
    assert not displaced.done
    assert len(commands.started_commands("find")) == 1

    clock.now = start + 0.20
    await displaced.join()
    assert commands.started_names()[-1] == "find"
    assert len(commands.started_commands("find")) == 2
    assert recorder.refusals == []


@pytest.mark.parametrize("rejections", [1, 3])
async def test_a_transient_costs_only_the_attempts_it_rejected(
    clients: ClientFactory,
    replicaset_server: EmbeddedServer,
    commands: CommandRecorder,
    recorder: PacingRecorder,
    rejections: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The transient yardstick on a clock the test steps: 100 finds/s, then 1 or 3 rejected
    (each retried once), a second later four times the demand for a second.  Nothing is
    refused, every operation succeeds, and the local waits after the rise add up to under 2 %
    of it.  (Three rejections in a row exhaust the spec's two retries of one operation, which
    fails as stock pymongo's does; nothing else fails.)"""
    client = adaptive_client(clients, replicaset_server, commands, recorder)
    await _transient(client, replicaset_server, commands, recorder, rejections, monkeypatch)


@pytest.mark.parametrize("rejections", [1, 3])
async def test_a_transient_costs_a_motor_client_only_the_attempts_it_rejected(
    replicaset_server: EmbeddedServer,
    commands: CommandRecorder,
    recorder: PacingRecorder,
    rejections: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same transient with a Motor client (its local waits happen in Motor's threads)."""
    client = backpressure.AsyncIOMotorClient(
        replicaset_server.uri,
        backpressure=ADAPTIVE,
        backpressure_listeners=[recorder],
        event_listeners=[commands],
        serverSelectionTimeoutMS=3000,
    )
    try:
        await _transient(client, replicaset_server, commands, recorder, rejections, monkeypatch)
    finally:
        client.close()


async def _transient(
    client: Any,
    replicaset_server: EmbeddedServer,
    commands: CommandRecorder,
    recorder: PacingRecorder,
    rejections: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Run the transient yardstick with ``client`` (an enabled adaptive client of any flavour)."""
    await resolve(client.db.coll.insert_one({"_id": 1}))
    clock = SteppedClock()
    waits: list[float] = []
    step_on(client, clock, waits)
    for _ in range(100):  # a second of steady demand at 100/s
        clock.now += 0.01
        assert await resolve(client.db.coll.find_one({"_id": 1})) == {"_id": 1}
    commands.reset()
    replicaset_server.configure_fail_point(overload_fail_point(["find"], times=rejections))
    failed = 0
    for _ in range(rejections):
        clock.now += 0.01
        try:
            assert await resolve(client.db.coll.find_one({"_id": 1})) == {"_id": 1}
        except OperationFailure:
            failed += 1  # every attempt of one operation was rejected, as stock's would be
    retries = ADAPTIVE.max_retries
    assert failed == (1 if rejections > retries else 0)
    assert len(commands.started_commands("find")) == rejections + min(rejections, retries)
    for _ in range(100):  # the steady demand goes on for a second
        clock.now += 0.01
        assert await resolve(client.db.coll.find_one({"_id": 1})) == {"_id": 1}
    commands.reset()
    waits.clear()
    start = clock.now
    for _ in range(400):  # four times the demand for the next second
        clock.now += 0.0025
        assert await resolve(client.db.coll.find_one({"_id": 1})) == {"_id": 1}
    assert len(commands.started_commands("find")) == 400  # not one attempt more
    assert recorder.refusals == []
    assert sum(waits) < 0.02 * (clock.now - start)


async def test_an_attempt_whose_pool_was_reset_while_it_waited_selects_again(
    clients: ClientFactory,
    standalone_server: EmbeddedServer,
    commands: CommandRecorder,
    recorder: PacingRecorder,
) -> None:
    """A network error on another connection resets the server's pool and marks the server
    unknown while a paced attempt waits its turn: the attempt selects again once its wait is
    over, waiting (as one that never waited would) for the server to be found again, and is
    sent.  Sent on the stale selection, it failed at once on the paused pool, and an
    ``update_many`` is not retried."""
    from backpressure.adapters import seams
    from backpressure.switch.client import _pymongo_client

    policy = ADAPTIVE.replace(adaptive_min_rate=2.0, max_local_wait=30.0)
    client = adaptive_client(clients, standalone_server, commands, recorder, policy)
    await resolve(client.db.coll.insert_one({"n": 0}))
    commands.reset()
    clock = SteppedClock()
    topology = _pymongo_client(client)._topology
    address = standalone_server.addresses[0]
    armed: list[bool] = []  # the update's wait resets the pool, not the backoffs before it
    paused: list[bool] = []

    def network_error() -> Any:
        """What pymongo's SDAM handling is told when a command's connection breaks."""
        server = topology._servers[address]
        return _error_context(AutoReconnect("connection closed"), server.pool.gen.get_overall())

    def pool_paused() -> bool:
        return seams.pool_paused(topology._servers[address])

    if clients.is_async:

        async def sleep_async(seconds: float) -> None:
            clock.now += seconds
            if armed and not paused:
                await topology.handle_error(address, network_error())
                paused.append(pool_paused())

        set_timing(client, clock=clock, sleep=sleep_async)
    else:

        def sleep(seconds: float) -> None:
            clock.now += seconds
            if armed and not paused:
                topology.handle_error(address, network_error())
                paused.append(pool_paused())

        set_timing(client, clock=clock, sleep=sleep)
    await close_pacing(client, standalone_server, commands)
    armed.append(True)
    result = await resolve(client.db.coll.update_many({}, {"$inc": {"n": 1}}))
    assert paused == [True]  # the pool was paused while the update waited
    assert [event.operation for event in recorder.waits] == ["update"]
    assert result.matched_count == 2
    assert commands.started_names() == ["update"]
    assert not pool_paused()


def _error_context(error: BaseException, generation: int) -> Any:
    """pymongo's ``_ErrorContext`` for ``error`` on a connection of pool ``generation`` that
    completed its handshake (its module moved between pymongo releases)."""
    import importlib

    for module in ("pymongo.topology_shared", "pymongo.synchronous.topology", "pymongo.topology"):
        try:
            context = getattr(importlib.import_module(module), "_ErrorContext", None)
        except ImportError:
            continue
        if context is not None:
            return context(error, 0, generation, True, None)
    raise AssertionError("pymongo has no _ErrorContext")
