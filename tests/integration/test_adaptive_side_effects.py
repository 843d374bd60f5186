"""The adaptive preset's pacing stays local: pymongo's shared topology and test mode.

Every test runs with a sync ``MongoClient``, an ``AsyncMongoClient`` and Motor against the
embedded server, on the native adapter (pymongo >= 4.17) or the backport below it.

* Pacing a server, and steering reads away from it, must leave pymongo's shared topology state
  alone: pymongo >= 4.16 keeps the candidate list filtered by ``deprioritized_servers`` on the
  topology's description, where ``client.primary`` then found no primary (``IndexError``) until
  the next heartbeat replaced the description.
* Test mode (``backpressure.testing.set_testing``) promises that nothing sleeps: the pacing's
  admission gate must not hold, or refuse, an attempt either.  Waits are observed through the
  pacing's wait events and the adapters' sleep function (replaced by a recorder), never through
  the wall clock.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import pymongo
import pytest
from pymongo.errors import OperationFailure

import backpressure
from backpressure import ADAPTIVE, LocalOverloadError
from backpressure.adapters import seams
from backpressure.core.adaptive import LocalRefusalEvent, LocalWaitEvent
from backpressure.switch.client import _pymongo_client, set_timing
from backpressure.switch.client import state as state_of
from backpressure.testing import set_testing
from backpressure.testing.server.embedded import EmbeddedServer
from tests.integration.conftest import (
    NEVER_WAIT_TWICE,
    OVERLOAD_CODE,
    CommandRecorder,
    overload_fail_point,
    resolve,
    wait_for_members,
)

FLAVOURS = ("sync", "async", "motor")
"""Every client flavour: pymongo's two clients and Motor (its sync delegate)."""

PACED_FOR_THE_TEST = ADAPTIVE.replace(adaptive_min_rate=1000.0, adaptive_window=60.0)
"""The adaptive preset, except that a pushback paces its server at 1000 attempts/s (slots 1 ms
apart: nothing waits noticeably) for at least a minute (the window): the server stays paced for
the whole test however slow the machine."""

TEST_MODE_POLICY = ADAPTIVE.replace(
    adaptive_window=60.0, adaptive_min_rate=0.1, adaptive_increase=0.001, adaptive_quiet=60.0
)
"""The adaptive preset with a window long enough that the pacer cannot open again before the
test looks at it, however slow the machine; a freshly paced server then gets a slot every few
seconds, and keeps it for minutes: the rate climbs by 0.001 attempts/s per second and the fast
climb waits a minute (the test checks the rate against ``DEADLINE``; at the preset's increase
of 10/s it passed ``1 / DEADLINE`` 40 ms after the pushback on a loaded machine)."""

DEADLINE = 2.0
"""The operations' ``pymongo.timeout`` in the test-mode tests: shorter than the slot interval the
pacing gives the freshly paced server, so a held attempt would be refused at once, and long
enough for a few round trips on a heavily loaded machine (0.5 s failed once at load 9-15)."""


class Clients:
    """Builds ``backpressure`` clients of one flavour and closes them all at teardown."""

    def __init__(self, flavour: str) -> None:
        """Create a factory for ``flavour`` (one of FLAVOURS)."""
        self.flavour = flavour
        self._clients: list[Any] = []

    def make(self, uri: str, policy: Any, **kwargs: Any) -> Any:
        """A client of this flavour with ``policy``; ``kwargs`` go to the constructor."""
        kwargs.setdefault("serverSelectionTimeoutMS", 3000)
        if self.flavour == "motor":
            client = backpressure.AsyncIOMotorClient(uri, backpressure=policy, **kwargs)
        elif self.flavour == "async":
            client = backpressure.AsyncMongoClient(uri, backpressure=policy, **kwargs)
        else:
            client = backpressure.MongoClient(uri, backpressure=policy, **kwargs)
        self._clients.append(client)
        return client

    async def close_all(self) -> None:
        """Close every client built (Motor's ``close`` is synchronous)."""
        while self._clients:
            await resolve(self._clients.pop().close())


@pytest.fixture(params=FLAVOURS)
async def clients(request: pytest.FixtureRequest) -> AsyncIterator[Clients]:
    """A Clients factory for each flavour; its clients are closed after the test."""
    factory = Clients(str(request.param))
    yield factory
    await factory.close_all()


class PacingRecorder:
    """Keeps the pacing's local waits and refusals (thread-safe)."""

    def __init__(self) -> None:
        """Start empty."""
        self._lock = threading.Lock()
        self.waits: list[LocalWaitEvent] = []
        self.refusals: list[LocalRefusalEvent] = []

    def waited(self, event: LocalWaitEvent) -> None:
        """Record a local wait."""
        with self._lock:
            self.waits.append(event)

    def refused(self, event: LocalRefusalEvent) -> None:
        """Record a local refusal."""
        with self._lock:
            self.refusals.append(event)


def record_sleeps(client: Any) -> list[float]:
    """Make the client sleep through a recorder (its private timing hook); return the list of
    the seconds it was asked to sleep (it still sleeps them)."""
    calls: list[float] = []
    if seams.is_async_client(_pymongo_client(client)):

        async def sleep_async(seconds: float) -> None:
            calls.append(seconds)
            await asyncio.sleep(seconds)

        set_timing(client, sleep=sleep_async)
    else:

        def sleep(seconds: float) -> None:
            calls.append(seconds)
            time.sleep(seconds)

        set_timing(client, sleep=sleep)
    return calls


def pacing_of(client: Any) -> Any:
    """The client's ClientPacers (the adaptive pacing)."""
    state = state_of(client)
    assert state is not None
    admission = state.controller.pacing
    assert admission is not None
    return admission


@pytest.mark.parametrize("read_preference", ["primary", "nearest"])
async def test_a_paced_primary_leaves_the_topology_as_stock(
    clients: Clients, replicaset_server: EmbeddedServer, read_preference: str
) -> None:
    """One overload-retried insert paces the primary; writes, reads, ``client.primary``,
    ``address``, ``is_primary`` and ``secondaries`` then answer as stock pymongo's.

    With "primary" nothing is deprioritized (the primary is the only eligible server); with
    "nearest" the reads avoid the paced primary, and the topology is left as it was.
    """
    client = clients.make(replicaset_server.uri, PACED_FOR_THE_TEST, readPreference=read_preference)
    await resolve(client.db.coll.insert_one({"_id": 0}))  # starts an async client's monitors
    await wait_for_members(client, 3)
    primary, *secondaries = replicaset_server.addresses
    # Two pushbacks close the pacing (one is a blip).
    replicaset_server.configure_fail_point(overload_fail_point(["insert"], times=2), member=0)
    await resolve(client.db.coll.insert_one({"_id": 1}))
    for _ in range(3):
        assert await resolve(client.db.coll.find_one({"_id": 1})) == {"_id": 1}
    assert pacing_of(client).is_paced(primary)

    assert await resolve(client.primary) == primary
    assert await resolve(client.secondaries) == set(secondaries)
    assert await resolve(client.is_primary) is True
    assert await resolve(client.address) == primary
    await resolve(client.db.coll.insert_one({"_id": 2}))
    assert await resolve(client.db.coll.find_one({"_id": 2})) == {"_id": 2}
    assert await resolve(client.primary) == primary
    assert pacing_of(client).is_paced(primary)


@pytest.mark.parametrize("overloads", [2, 3])
async def test_test_mode_never_holds_an_attempt_for_the_pacing(
    clients: Clients,
    standalone_server: EmbeddedServer,
    monkeypatch: pytest.MonkeyPatch,
    overloads: int,
) -> None:
    """Test mode, a fresh adaptive client, ``overloads`` injected: the pushback paces the
    server, yet no attempt waits locally or is refused; the insert is retried as the policy
    says (2 overloads: success; 3: the server's overload error) and the next read is sent at
    once, all within a deadline shorter than the slot the pacing would hold them for."""
    commands = CommandRecorder()
    recorder = PacingRecorder()
    client = clients.make(standalone_server.uri, TEST_MODE_POLICY, event_listeners=[commands])
    sleeps = record_sleeps(client)
    state = state_of(client)
    assert state is not None
    state.add_listener(recorder)
    address = standalone_server.addresses[0]
    standalone_server.configure_fail_point(overload_fail_point(["insert"], times=overloads))
    with set_testing(True):
        with pymongo.timeout(DEADLINE):
            if overloads <= TEST_MODE_POLICY.max_retries:
                await resolve(client.db.coll.insert_one({"_id": 1}))
            else:
                with pytest.raises(OperationFailure) as info:
                    await resolve(client.db.coll.insert_one({"_id": 1}))
                assert not isinstance(info.value, LocalOverloadError)
                assert info.value.code == OVERLOAD_CODE
        assert pacing_of(client).is_paced(address)  # outside test mode, attempts would wait
        rate = pacing_of(client).snapshot()[address].rate
        assert rate is not None
        assert 1.0 / rate > DEADLINE  # ... and be refused
        with pymongo.timeout(DEADLINE):
            await resolve(client.db.coll.find_one({}))
    assert (
        len(commands.started_commands("insert")) == min(overloads, TEST_MODE_POLICY.max_retries) + 1
    )
    assert len(commands.started_commands("find")) == 1
    assert recorder.waits == []
    assert recorder.refusals == []
    assert [seconds for seconds in sleeps if seconds > 0] == []


async def test_outside_test_mode_the_pacing_refuses_what_test_mode_let_through(
    clients: Clients, standalone_server: EmbeddedServer
) -> None:
    """The control: a pushback retried in test mode paces the server, and once test mode is
    off the reads are held to its slots: the first takes the slot due now, the second is
    refused (slots 100 s apart, past the longest local wait), so the test above is not
    vacuous."""
    recorder = PacingRecorder()
    # Closing at a near-zero rate (through adaptive_decrease: an all-reject window no longer
    # collapses the rate), held at most 0.5 s before the refusal; slots stay 100 s apart
    # however slowly the machine runs the test (see NEVER_WAIT_TWICE).
    policy = NEVER_WAIT_TWICE.replace(adaptive_min_rate=0.01, max_local_wait=0.5)
    client = clients.make(standalone_server.uri, policy)
    state = state_of(client)
    assert state is not None
    state.add_listener(recorder)
    standalone_server.configure_fail_point(overload_fail_point(["insert"], times=2))
    with set_testing(True):
        await resolve(client.db.coll.insert_one({"_id": 1}))
    assert recorder.refusals == []
    assert await resolve(client.db.coll.find_one({})) == {"_id": 1}
    with pytest.raises(LocalOverloadError):
        await resolve(client.db.coll.find_one({}))
    assert [event.operation for event in recorder.refusals] == ["find"]
