"""A load-balanced cursor's getMore retried on overload, through the native adapter's wrappers.

pymongo 4.20.1 (PYTHON-6262) passes a pinned cursor's connection manager (``conn_mgr``) to
``_retry_internal`` so that an overloaded getMore is retried on the same connection.  The
embedded sharded cluster's mongos answers a ``loadBalanced`` handshake with a ``serviceId``, so a
client in load-balanced mode pins its cursors as it would behind a real load balancer.
"""

from __future__ import annotations

from typing import Any

import pytest

import backpressure
from backpressure.adapters import seams
from backpressure.testing.server.embedded import EmbeddedServer
from tests.integration.conftest import (
    FAST_BACKOFF,
    NATIVE_LOOP_ONLY,
    ClientFactory,
    CommandRecorder,
    overload_fail_point,
    resolve,
    to_list,
)


def _takes_conn_mgr() -> bool:
    """Whether the installed pymongo passes a pinned cursor's connection to its retry loop."""
    import pymongo

    return "conn_mgr" in (seams._parameters(pymongo.MongoClient, "_retry_internal") or [])


pytestmark = [
    NATIVE_LOOP_ONLY,
    pytest.mark.skipif(not _takes_conn_mgr(), reason="pymongo < 4.20.1 retries no pinned getMore"),
    pytest.mark.timeout(60),
]


def _load_balanced_uri(server: EmbeddedServer) -> str:
    """A load-balanced connection string to the cluster's first mongos."""
    host, port = server.addresses[0]
    return f"mongodb://{host}:{port}/?loadBalanced=true"


@pytest.mark.parametrize("policy", ["default", "current", "draft", None])
async def test_overloaded_get_more_is_retried_on_the_pinned_connection(
    clients: ClientFactory,
    sharded_server: EmbeddedServer,
    commands: CommandRecorder,
    policy: Any,
) -> None:
    """One overloaded getMore is sent again, and the cursor returns every document once.

    ``None``: a stock client, for the side-by-side comparison.
    """
    client = clients.plain(_load_balanced_uri(sharded_server), event_listeners=[commands])
    if policy is not None:
        backpressure.enable(client, FAST_BACKOFF if policy == "draft" else policy)
        assert seams.native_signature(client) == "4.20.1"  # the positional wrappers
    await resolve(client.db.coll.insert_many([{"i": i} for i in range(10)]))
    cursor = client.db.coll.find({}, batch_size=2)
    first = [await resolve(cursor.next()), await resolve(cursor.next())]
    sharded_server.configure_fail_point(overload_fail_point(["getMore"], times=1))
    rest = await to_list(cursor)
    assert sorted(doc["i"] for doc in first + rest) == list(range(10))
    assert client.topology_description.topology_type_name == "LoadBalanced"
    get_mores = commands.started_events("getMore")
    assert commands.failed_names() == ["getMore"]
    assert len(get_mores) == 5  # 4 batches of 2, one of them sent twice
    # every getMore of the cursor went over the one pinned connection
    assert len({event.server_connection_id for event in get_mores}) == 1
    assert len({event.command["getMore"] for event in get_mores}) == 1
