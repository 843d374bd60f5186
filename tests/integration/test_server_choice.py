"""Server choice against the embedded server: selections with a choice steer around a server
that pushes back, on every preset and era, and nothing changes where there is no choice.

The clients draw with a random source pinned to 0, so an overloaded server is left out of every
selection (no probes) and the assertions are exact; pymongo's own choice among the servers left
stays random.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from pymongo.errors import OperationFailure

import backpressure
import backpressure.metrics
from backpressure import CURRENT_SPEC
from backpressure.core.policy import PRESETS
from backpressure.switch.client import state as state_of
from backpressure.testing.server.embedded import EmbeddedServer
from tests.integration.conftest import (
    ClientFactory,
    CommandRecorder,
    enabled_client,
    overload_fail_point,
    resolve,
    run_on_clock,
    to_list,
    wait_for_members,
    wait_for_mongoses,
    zero_jitter,
)

HOT_READS = 200
"""Reads at most until the hot member has pushed back (pymongo picks it a third of the time)."""


def _choice(client: Any) -> Any:
    state = state_of(client)
    assert state is not None
    return state.choice


async def _read_until_pushed_back(
    client: Any, hot: tuple[str, int], commands: Any, *, may_fail: bool = False
) -> None:
    """Read until a read reached ``hot`` and was pushed back (and retried elsewhere).

    ``may_fail``: a read whose every attempt went to ``hot`` may fail (pymongo's own choice,
    which does not avoid it, picks it a third of the time at each attempt)."""
    for _ in range(HOT_READS):
        try:
            await resolve(client.db.coll.find_one({}))
        except OperationFailure:
            if not may_fail:
                raise
        if hot in commands.addresses("find"):
            return
    raise AssertionError(f"no read reached {hot} in {HOT_READS} reads")


@pytest.mark.parametrize("server", ["replicaset"], indirect=True)
async def test_reads_route_around_a_member_that_pushes_back_and_return_after(
    clients: ClientFactory, server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """The default policy: once a member pushed back, "nearest" reads leave it out; once its
    signal has faded (a second on the client's clock) they go to it again.

    A latency window wider than any round trip keeps every member eligible whatever the load.
    """
    client = enabled_client(
        clients,
        server.uri,
        CURRENT_SPEC,
        event_listeners=[commands],
        readPreference="nearest",
        localThresholdMS=60_000,
    )
    clock_at = [1000.0]

    def advance(seconds: float) -> None:
        clock_at[0] += seconds

    run_on_clock(client, lambda: clock_at[0], advance)
    await resolve(client.db.coll.insert_one({"_id": 1}))
    await wait_for_members(client, 3)
    hot = server.addresses[1]
    server.configure_fail_point(overload_fail_point(["find"]), member=1)
    await _read_until_pushed_back(client, hot, commands)
    choice = _choice(client)
    assert choice.engaged
    commands.reset()
    for _ in range(30):
        await resolve(client.db.coll.find_one({}))
    assert hot not in commands.addresses("find")
    assert choice.signals()[hot].avoided
    assert choice.signals()[hot].routed_around >= 30
    server.disable_fail_points(member=1)
    advance(30.0)  # thirty half-lives: the signal has faded
    commands.reset()
    for _ in range(HOT_READS):
        await resolve(client.db.coll.find_one({}))
        if hot in commands.addresses("find"):
            break
    assert hot in commands.addresses("find")
    assert not choice.signals()[hot].avoided


@pytest.mark.parametrize("server", ["replicaset"], indirect=True)
async def test_route_around_off_keeps_pymongos_choice(
    clients: ClientFactory, server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """``routeAroundOverload=false``: the member that pushes back keeps getting first attempts,
    as with stock pymongo."""
    client = clients.backpressure(
        server.uri,
        event_listeners=[commands],
        readPreference="nearest",
        localThresholdMS=60_000,
        routeAroundOverload=False,
        backpressure=CURRENT_SPEC.replace(max_retries=5, base_backoff=0.001, max_backoff=0.01),
    )
    assert _choice(client) is None
    await resolve(client.db.coll.insert_one({"_id": 1}))
    await wait_for_members(client, 3)
    hot = server.addresses[1]
    server.configure_fail_point(overload_fail_point(["find"]), member=1)
    await _read_until_pushed_back(client, hot, commands, may_fail=True)
    commands.reset()
    await _read_until_pushed_back(client, hot, commands, may_fail=True)


@pytest.mark.parametrize("server", ["sharded"], indirect=True)
async def test_writes_route_around_a_mongos_that_pushes_back(
    clients: ClientFactory, server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """Two mongos: once one pushed back, new inserts go to the other one only; a cursor opened
    on the hot one keeps its getMores there.  A latency window wider than any round trip keeps
    both routers eligible whatever the load."""
    client = enabled_client(
        clients, server.uri, CURRENT_SPEC, event_listeners=[commands], localThresholdMS=60_000
    )
    await resolve(client.db.coll.insert_many([{"_id": i} for i in range(10)]))
    await wait_for_mongoses(client, 2)
    hot = server.addresses[0]
    cursor = None
    for _ in range(HOT_READS):  # a cursor whose first batch came from the hot mongos
        commands.reset()
        candidate = client.db.coll.find({}, batch_size=2)
        first = await resolve(candidate.next())
        assert first is not None
        if commands.addresses("find") == [hot]:
            cursor = candidate
            break
        await resolve(candidate.close())
    assert cursor is not None, "no find reached the hot mongos"
    server.configure_fail_point(overload_fail_point(["insert"]), member=0)
    for i in itertools.count(100):
        await resolve(client.db.coll.insert_one({"_id": i}))
        if hot in commands.addresses("insert"):
            break
        assert i < 100 + HOT_READS, "no insert reached the hot mongos"
    assert _choice(client).engaged
    commands.reset()
    for i in range(1000, 1020):
        await resolve(client.db.coll.insert_one({"_id": i}))
    assert set(commands.addresses("insert")) == {server.addresses[1]}
    rest = await to_list(cursor)
    assert len(rest) >= 9
    assert set(commands.addresses("getMore")) == {hot}


@pytest.mark.parametrize("server", ["replicaset"], indirect=True)
async def test_writes_to_the_primary_are_unchanged(
    clients: ClientFactory, server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """No choice (writes on a replica set): the primary that pushed back gets every write and
    its retries, as with stock pymongo."""
    client = enabled_client(clients, server.uri, CURRENT_SPEC, event_listeners=[commands])
    await resolve(client.db.coll.insert_one({"_id": 0}))
    await wait_for_members(client, 3)
    server.configure_fail_point(overload_fail_point(["insert"], times=2), member=0)
    await resolve(client.db.coll.insert_one({"_id": 1}))
    assert commands.addresses("insert") == [server.primary_address] * 4
    assert _choice(client).engaged
    commands.reset()
    for i in range(2, 12):
        await resolve(client.db.coll.insert_one({"_id": i}))
    assert set(commands.addresses("insert")) == {server.primary_address}


@pytest.mark.parametrize("preset", ["draft", "adaptive"])
@pytest.mark.parametrize("server", ["replicaset"], indirect=True)
async def test_every_preset_routes_around(
    clients: ClientFactory, server: EmbeddedServer, commands: CommandRecorder, preset: str
) -> None:
    """The other presets steer the same way (adaptive: on top of its pacing)."""
    policy = PRESETS[preset].replace(base_backoff=0.001, max_backoff=0.01)
    client = enabled_client(
        clients,
        server.uri,
        policy,
        event_listeners=[commands],
        readPreference="secondaryPreferred",
        localThresholdMS=60_000,
    )
    await resolve(client.db.coll.insert_one({"_id": 1}))
    await wait_for_members(client, 3)
    hot = server.addresses[1]
    server.configure_fail_point(overload_fail_point(["find"]), member=1)
    await _read_until_pushed_back(client, hot, commands)
    commands.reset()
    for _ in range(20):
        await resolve(client.db.coll.find_one({}))
    assert set(commands.addresses("find")) == {server.addresses[2]}


async def test_motor_client_routes_around(
    replicaset_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """Motor: its delegate steers like a sync client."""
    import motor.motor_asyncio

    client = motor.motor_asyncio.AsyncIOMotorClient(
        replicaset_server.uri,
        event_listeners=[commands],
        readPreference="secondary",
        localThresholdMS=60_000,
        serverSelectionTimeoutMS=3000,
    )
    backpressure.enable(client, CURRENT_SPEC, random=zero_jitter)
    try:
        state = state_of(client)
        assert state is not None
        assert state.choice is not None
        await client.db.coll.insert_one({"_id": 1})
        await wait_for_members(client, 3)
        hot = replicaset_server.addresses[1]
        replicaset_server.configure_fail_point(overload_fail_point(["find"]), member=1)
        for _ in range(HOT_READS):
            await client.db.coll.find_one({})
            if hot in commands.addresses("find"):
                break
        assert state.choice.engaged
        commands.reset()
        for _ in range(20):
            await client.db.coll.find_one({})
        assert set(commands.addresses("find")) == {replicaset_server.addresses[2]}
    finally:
        client.close()


@pytest.mark.parametrize("server", ["replicaset"], indirect=True)
async def test_operators_see_the_server_choice(
    clients: ClientFactory,
    server: EmbeddedServer,
    commands: CommandRecorder,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The signal, the avoided flag and the routed-around count reach Prometheus and the
    statistics snapshot, and one INFO line says the member is avoided."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    registry = CollectorRegistry()
    client = enabled_client(
        clients,
        server.uri,
        CURRENT_SPEC,
        event_listeners=[commands],
        readPreference="nearest",
        localThresholdMS=60_000,
    )
    # The choice on a clock that stands still: the signal does not fade however slow the run.
    run_on_clock(client, lambda: 1000.0, lambda _seconds: None)
    backpressure.metrics.enable_prometheus(registry, clients=[client])
    try:
        await resolve(client.db.coll.insert_one({"_id": 1}))
        await wait_for_members(client, 3)
        hot = server.addresses[1]
        server.configure_fail_point(overload_fail_point(["find"]), member=1)
        with caplog.at_level("INFO", logger="backpressure"):
            await _read_until_pushed_back(client, hot, commands)
            for _ in range(10):
                await resolve(client.db.coll.find_one({}))
        avoided_lines = [r for r in caplog.records if "selections with a choice avoid" in r.message]
        assert len(avoided_lines) == 1
        assert f"{hot[0]}:{hot[1]}" in avoided_lines[0].getMessage()
        stats = backpressure.stats(client)
        assert stats.server_choice[hot].avoided
        assert stats.server_choice[hot].routed_around >= 10
        text = generate_latest(registry).decode()
        samples = {
            (sample.name, sample.labels.get("server_port")): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if family.name.startswith("backpressure_server_choice")
        }
        port = str(hot[1])
        assert samples[("backpressure_server_choice_signal_ratio", port)] > 0.0
        assert samples[("backpressure_server_choice_avoided", port)] == 1.0
        routed = samples[("backpressure_server_choice_routed_around_total", port)]
        assert routed >= 10
    finally:
        backpressure.metrics.disable_metrics()
