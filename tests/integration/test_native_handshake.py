"""pymongo 4.17's handshake flag: an enabled client sends ``"2"``, as pymongo >= 4.18 does.

pymongo 4.17 sends ``backpressure: true`` in every hello; the handshake spec (and pymongo
>= 4.18, and the backport for 4.9-4.16) send the string ``"2"``. The embedded server records
each connection's handshake document, so the value it received is checked directly.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from pymongo.errors import AutoReconnect

import backpressure
from backpressure.adapters.native import handshake as native_handshake
from backpressure.testing import EmbeddedServer
from tests.integration.conftest import ClientFactory, resolve

pytestmark = [
    pytest.mark.skipif(
        not native_handshake.BOOLEAN_HANDSHAKE_FLAG,
        reason="only pymongo 4.17 sends backpressure: true itself",
    ),
    pytest.mark.timeout(60),
]


def _handshakes(server: EmbeddedServer, app_name: str) -> list[dict[str, Any]]:
    """Handshake documents of the connections ``app_name`` opened (monitors included)."""
    return [
        c["handshake"]
        for c in server.stats()["connections"]
        if c.get("appName") == app_name and c.get("handshake")
    ]


async def test_enabled_client_sends_the_string_plain_client_keeps_true(
    clients: ClientFactory, standalone_server: EmbeddedServer
) -> None:
    """Every connection of an enabled client announces "2"; a plain client's announce true."""
    enabled_name = f"on-{uuid.uuid4().hex[:8]}"
    plain_name = f"off-{uuid.uuid4().hex[:8]}"
    enabled = clients.backpressure(standalone_server.uri, appName=enabled_name)
    plain = clients.plain(standalone_server.uri, appName=plain_name)
    await resolve(enabled.admin.command("ping"))
    await resolve(plain.admin.command("ping"))
    flagged = _handshakes(standalone_server, enabled_name)
    assert flagged
    assert all(h.get("backpressure") == "2" for h in flagged)
    plain_handshakes = _handshakes(standalone_server, plain_name)
    assert plain_handshakes
    assert all(h.get("backpressure") is True for h in plain_handshakes)


async def test_disable_gives_back_pymongos_value(
    clients: ClientFactory, standalone_server: EmbeddedServer
) -> None:
    """After ``disable`` new connections send pymongo 4.17's own ``true`` again."""
    app_name = f"toggle-{uuid.uuid4().hex[:8]}"
    client = clients.plain(standalone_server.uri, appName=app_name)
    backpressure.enable(client, backpressure.DRAFT)
    await resolve(client.admin.command("ping"))
    assert _handshakes(standalone_server, app_name)[-1].get("backpressure") == "2"
    backpressure.disable(client)
    # Drop the pooled connection: the next command opens a new one, with a new handshake.
    standalone_server.configure_fail_point(
        {
            "mode": {"times": 1},
            "data": {"failCommands": ["ping"], "closeConnection": True, "appName": app_name},
        }
    )
    with pytest.raises(AutoReconnect):
        await resolve(client.admin.command("ping"))
    await resolve(client.admin.command("ping"))
    assert _handshakes(standalone_server, app_name)[-1].get("backpressure") is True
