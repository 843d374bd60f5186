"""Backport: connection-establishment overload (labels, SDAM skip) and the handshake flag."""

from __future__ import annotations

import gc
import importlib
import inspect
import socket
import threading
import time
import uuid
from typing import Any

import pymongo
import pytest
from pymongo import monitoring
from pymongo.errors import AutoReconnect

import backpressure
from backpressure import DRAFT
from backpressure.adapters.backport.shared import topology_enabled
from backpressure.testing import EmbeddedServer
from tests.integration.conftest import (
    BACKPORT_ONLY,
    ClientFactory,
    enabled_client,
    resolve,
    wait_for,
    zero_jitter,
)

pytestmark = [
    BACKPORT_ONLY,
    pytest.mark.timeout(60),
]

HANDSHAKES = ["isMaster", "ismaster", "hello"]
MAX_IDLE_TIME_MS = 20
"""The pools' maxIdleTimeMS: a pooled connection idle longer is replaced by a new one."""


class PoolRecorder(monitoring.ConnectionPoolListener):
    """Records pool clears and connections created (CMAP events are published synchronously)."""

    def __init__(self) -> None:
        """Start empty."""
        self._lock = threading.Lock()
        self.cleared = 0
        self.created = 0

    def pool_cleared(self, event: Any) -> None:
        """Count a pool clear."""
        with self._lock:
            self.cleared += 1

    def connection_created(self, event: Any) -> None:
        """Count an application connection."""
        with self._lock:
            self.created += 1

    def pool_created(self, event: Any) -> None:
        """Ignored."""

    def pool_ready(self, event: Any) -> None:
        """Ignored."""

    def pool_closed(self, event: Any) -> None:
        """Ignored."""

    def connection_ready(self, event: Any) -> None:
        """Ignored."""

    def connection_closed(self, event: Any) -> None:
        """Ignored."""

    def connection_check_out_started(self, event: Any) -> None:
        """Ignored."""

    def connection_check_out_failed(self, event: Any) -> None:
        """Ignored."""

    def connection_checked_out(self, event: Any) -> None:
        """Ignored."""

    def connection_checked_in(self, event: Any) -> None:
        """Ignored."""


def _connection_kwargs(app_name: str, recorder: PoolRecorder) -> dict[str, Any]:
    """Options making new application connections predictable: polling monitor, short idle."""
    return {
        "appName": app_name,
        "event_listeners": [recorder],
        "serverMonitoringMode": "poll",
        "heartbeatFrequencyMS": 30000,
        "maxIdleTimeMS": MAX_IDLE_TIME_MS,
    }


def _hangup_fail_point(app_name: str, times: int) -> dict[str, Any]:
    """Close the connection on the handshake of ``app_name``'s next ``times`` connections."""
    return {
        "configureFailPoint": "failCommand",
        "mode": {"times": times},
        "data": {"failCommands": HANDSHAKES, "closeConnection": True, "appName": app_name},
    }


async def _idle_past_max_idle_time() -> None:
    """Wait until a connection checked in now has been idle longer than ``maxIdleTimeMS``: the
    condition is elapsed time itself, so the wait polls the monotonic clock for it."""
    idle_from = time.monotonic()
    await wait_for(
        lambda: time.monotonic() - idle_from > 2 * MAX_IDLE_TIME_MS / 1000,
        "the pooled connection to pass maxIdleTimeMS",
    )


async def _warm_up(client: Any) -> None:
    """Discover the server and let the pooled connection go idle past maxIdleTimeMS."""
    await resolve(client.admin.command("ping"))
    await _idle_past_max_idle_time()


def _handshakes(server: EmbeddedServer, app_name: str) -> list[dict[str, Any]]:
    """Handshake documents of the connections ``app_name`` opened."""
    return [
        c["handshake"]
        for c in server.stats()["connections"]
        if c.get("appName") == app_name and c.get("handshake")
    ]


def _server_types(client: Any) -> list[str]:
    """Current server types in the client's topology description."""
    return [d.server_type_name for d in client.topology_description.server_descriptions().values()]


async def test_connection_hangups_retried_without_sdam_changes(
    clients: ClientFactory, standalone_server: EmbeddedServer
) -> None:
    """Two hang-ups on new connections: the insert succeeds, no pool clear, server stays known."""
    app_name = f"bp-{uuid.uuid4().hex[:8]}"
    recorder = PoolRecorder()
    client = enabled_client(
        clients, standalone_server.uri, **_connection_kwargs(app_name, recorder)
    )
    await _warm_up(client)
    created_before = recorder.created
    standalone_server.configure_fail_point(_hangup_fail_point(app_name, 2))
    await resolve(client.db.coll.insert_one({"_id": 1}))
    assert recorder.cleared == 0
    assert _server_types(client) == ["Standalone"]
    assert recorder.created - created_before == 3


async def test_plain_client_clears_pool_on_hangups(
    clients: ClientFactory, standalone_server: EmbeddedServer
) -> None:
    """Control: the same hang-ups make a stock client clear its pool and fail."""
    app_name = f"plain-{uuid.uuid4().hex[:8]}"
    recorder = PoolRecorder()
    client = clients.plain(standalone_server.uri, **_connection_kwargs(app_name, recorder))
    await _warm_up(client)
    standalone_server.configure_fail_point(_hangup_fail_point(app_name, 2))
    with pytest.raises(AutoReconnect):
        await resolve(client.db.coll.insert_one({"_id": 1}))
    assert recorder.cleared >= 1  # _handle_error marks the server Unknown and clears its pool


async def test_enabled_after_construction_retries_hangups(
    clients: ClientFactory, standalone_server: EmbeddedServer
) -> None:
    """A stock client enabled later also retries hang-ups on connections opened afterwards."""
    app_name = f"late-{uuid.uuid4().hex[:8]}"
    recorder = PoolRecorder()
    client = clients.plain(standalone_server.uri, **_connection_kwargs(app_name, recorder))
    await _warm_up(client)
    backpressure.enable(client, DRAFT, random=zero_jitter)
    standalone_server.configure_fail_point(_hangup_fail_point(app_name, 2))
    await resolve(client.db.coll.find_one({}))
    assert recorder.cleared == 0
    assert _server_types(client) == ["Standalone"]
    assert _handshakes(standalone_server, app_name)[-1].get("backpressure") == "2"


def _answer(value: Any, is_async: bool) -> Any:
    """A resolver method returning ``value`` (a coroutine function when ``is_async``)."""
    if is_async:

        async def answer_async(self: Any) -> Any:
            return value

        return answer_async
    return lambda self: value


@pytest.fixture
def srv_uri(monkeypatch: pytest.MonkeyPatch, standalone_server: EmbeddedServer) -> str:
    """A ``mongodb+srv`` URI whose SRV record (answered without DNS) names the standalone server."""
    host, port = standalone_server.addresses[0]
    answers = {
        "get_hosts": [(host, port)],
        "get_hosts_and_min_ttl": ([(host, port)], 60),
        "get_options": None,  # no TXT record
    }
    for module_name in ("srv_resolver", "synchronous.srv_resolver", "asynchronous.srv_resolver"):
        try:
            module = importlib.import_module(f"pymongo.{module_name}")
        except ImportError:
            continue  # pymongo 4.9 has one resolver module, later releases one per flavour
        resolver = module._SrvResolver
        for name, value in answers.items():
            original = getattr(resolver, name)
            monkeypatch.setattr(
                resolver, name, _answer(value, inspect.iscoroutinefunction(original))
            )
    return "mongodb+srv://bp-srv.example.com/?tls=false"


@pytest.mark.parametrize("ours", [False, True], ids=["enable", "client-class"])
async def test_mongodb_srv_client_enabled_before_it_resolves(
    clients: ClientFactory, standalone_server: EmbeddedServer, srv_uri: str, ours: bool
) -> None:
    """A mongodb+srv client enabled before its first use (pymongo 4.11+ resolves the SRV record
    and builds the topology only then): its connections announce backpressure, hang-ups are
    retried without SDAM changes, and disable() works before and after the first use."""
    app_name = f"srv-{uuid.uuid4().hex[:8]}"
    recorder = PoolRecorder()
    client = enabled_client(
        clients,
        srv_uri,
        backpressure_class=ours,
        connect=False,
        **_connection_kwargs(app_name, recorder),
    )
    await _warm_up(client)
    assert _handshakes(standalone_server, app_name)[-1].get("backpressure") == "2"
    standalone_server.configure_fail_point(_hangup_fail_point(app_name, 2))
    await resolve(client.db.coll.find_one({}))
    assert recorder.cleared == 0
    assert _server_types(client) == ["Standalone"]
    backpressure.disable(client)

    never_used = clients.plain(srv_uri, connect=False, appName=f"{app_name}-off")
    backpressure.enable(never_used, DRAFT)
    backpressure.disable(never_used)
    await resolve(never_used.admin.command("ping"))
    assert "backpressure" not in _handshakes(standalone_server, f"{app_name}-off")[-1]


async def test_handshake_flag_only_for_enabled_client(
    clients: ClientFactory, standalone_server: EmbeddedServer
) -> None:
    """Application connections of an enabled client announce backpressure; a plain one's don't."""
    enabled_name = f"on-{uuid.uuid4().hex[:8]}"
    plain_name = f"off-{uuid.uuid4().hex[:8]}"
    enabled_recorder = PoolRecorder()
    enabled = clients.backpressure(
        standalone_server.uri, appName=enabled_name, event_listeners=[enabled_recorder]
    )
    plain = clients.plain(standalone_server.uri, appName=plain_name)
    await resolve(enabled.admin.command("ping"))
    await resolve(plain.admin.command("ping"))
    flagged = [h for h in _handshakes(standalone_server, enabled_name) if h.get("backpressure")]
    assert len(flagged) == enabled_recorder.created >= 1
    # The handshake spec: the string "2" (the backpressure spec revision), never True or 2.
    assert all(h["backpressure"] == "2" for h in flagged)
    plain_handshakes = _handshakes(standalone_server, plain_name)
    assert plain_handshakes
    assert not any("backpressure" in h for h in plain_handshakes)


def _drain_connection_tokens(server: EmbeddedServer) -> list[socket.socket]:
    """Open raw connections until the server's connection limiter rejects one (bucket empty)."""
    opened: list[socket.socket] = []
    for _ in range(20):
        sock = socket.create_connection(server.addresses[0], timeout=2)
        opened.append(sock)
        sock.settimeout(0.02)
        try:
            if sock.recv(1) == b"":  # closed at once: rejected, no token left
                return opened
        except socket.timeout:
            continue  # admitted: it took a token
    raise AssertionError("the connection limiter never rejected a connection")


async def test_connection_rate_limiter_rejections_retried(
    clients: ClientFactory, standalone_server: EmbeddedServer
) -> None:
    """Connections refused by the server's connection limiter are retried after a backoff."""
    app_name = f"limited-{uuid.uuid4().hex[:8]}"
    recorder = PoolRecorder()
    client = enabled_client(
        clients,
        standalone_server.uri,
        random=lambda: 0.999,
        **_connection_kwargs(app_name, recorder),
    )
    await _warm_up(client)
    standalone_server.set_parameter(
        ingressConnectionEstablishmentRateLimiterEnabled=True,
        ingressConnectionEstablishmentRatePerSec=4,
        ingressConnectionEstablishmentBurstCapacitySecs=0.25,  # one token, one more per 250 ms
    )
    held = _drain_connection_tokens(standalone_server)
    try:
        await resolve(client.db.coll.insert_one({"_id": 1}))
    finally:
        for sock in held:
            sock.close()
    assert standalone_server.stats()["connectionsRejected"] >= 2  # ours and the drain's
    assert recorder.cleared == 0
    assert _server_types(client) == ["Standalone"]


async def test_disabled_client_back_to_stock_connection_handling(
    clients: ClientFactory, standalone_server: EmbeddedServer
) -> None:
    """After disable: no handshake flag on new connections and hang-ups clear the pool again."""
    app_name = f"undone-{uuid.uuid4().hex[:8]}"
    recorder = PoolRecorder()
    client = clients.backpressure(standalone_server.uri, **_connection_kwargs(app_name, recorder))
    await _warm_up(client)
    assert _handshakes(standalone_server, app_name)[-1].get("backpressure") == "2"
    backpressure.disable(client)
    await _warm_up(client)  # a new connection, opened while disabled
    assert "backpressure" not in _handshakes(standalone_server, app_name)[-1]
    await _idle_past_max_idle_time()
    standalone_server.configure_fail_point(_hangup_fail_point(app_name, 2))
    with pytest.raises(AutoReconnect):
        await resolve(client.db.coll.insert_one({"_id": 1}))
    assert recorder.cleared >= 1


def test_registry_forgets_dropped_clients(standalone_server: EmbeddedServer) -> None:
    """An enabled client closed and dropped without disable leaves no registry entry behind."""
    client: Any = pymongo.MongoClient(standalone_server.uri, connect=False)
    backpressure.enable(client, DRAFT)
    topology_id = client._topology_settings._topology_id
    assert topology_enabled(topology_id)
    client.close()
    del client
    gc.collect()
    assert not topology_enabled(topology_id)
