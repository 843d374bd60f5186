"""The adaptive preset's pacing stays local: pymongo's shared topology.

Every test runs with a sync ``MongoClient``, an ``AsyncMongoClient`` and Motor against the
embedded server, on the native adapter (pymongo >= 4.17) or the backport below it.

Pacing a server, and steering reads away from it, must leave pymongo's shared topology state
alone: pymongo >= 4.16 keeps the candidate list filtered by ``deprioritized_servers`` on the
topology's description, where ``client.primary`` then found no primary (``IndexError``) until
the next heartbeat replaced the description.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

import backpressure
from backpressure import ADAPTIVE
from backpressure.testing.server.embedded import EmbeddedServer
from tests.integration.conftest import (
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


def pacing_of(client: Any) -> Any:
    """The client's AdmissionControl (the adaptive pacing)."""
    state = backpressure.state(client)
    assert state is not None
    admission = state.controller.admission
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
    replicaset_server.configure_fail_point(overload_fail_point(["insert"], times=1), member=0)
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
