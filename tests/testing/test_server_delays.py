"""Time mongod spends in a command, slept by the transport: $where sleeps, change streams."""

from __future__ import annotations

import threading
import time
from typing import Any

from backpressure.testing import EmbeddedServer


def _wait_for_received(server: EmbeddedServer, command: str, count: int) -> None:
    deadline = time.monotonic() + 5
    while server.stats()["commands"].get(command, {}).get("received", 0) < count:
        assert time.monotonic() < deadline, f"{command} never reached the server"
        time.sleep(0.005)


def test_where_sleep_delays_only_its_own_connection(
    standalone_server: EmbeddedServer, make_client: Any
) -> None:
    """A find whose $where sleeps 300 ms answers late; a ping on another client meanwhile does not
    wait for it."""
    slow = make_client(standalone_server.uri)
    fast = make_client(standalone_server.uri)
    slow.test.c.insert_one({"_id": 1})
    fast.admin.command("ping")
    finished: list[str] = []
    found: list[Any] = []

    def run_slow() -> None:
        found.append(slow.test.c.find_one({"$where": "sleep(300) || true"}))
        finished.append("find")

    started = time.monotonic()
    thread = threading.Thread(target=run_slow)
    thread.start()
    _wait_for_received(standalone_server, "find", 1)
    fast.admin.command("ping")
    finished.append("ping")
    thread.join(5)
    assert finished == ["ping", "find"]
    assert found == [{"_id": 1}]
    assert time.monotonic() - started >= 0.25


def test_where_sleep_scales_with_scanned_documents(
    standalone_server: EmbeddedServer, make_client: Any
) -> None:
    """mongod runs $where once per document: two documents, two sleeps."""
    client = make_client(standalone_server.uri)
    client.test.c.insert_many([{"_id": 1}, {"_id": 2}])
    started = time.monotonic()
    assert len(list(client.test.c.find({"$where": "sleep(100) || true"}))) == 2
    assert time.monotonic() - started >= 0.18


def test_change_stream_get_more_waits_for_max_await_time(
    replicaset_server: EmbeddedServer, make_client: Any
) -> None:
    """An empty change-stream getMore is held for the client's maxAwaitTimeMS, so polling
    try_next() does not spin."""
    client = make_client(replicaset_server.uri)
    with client.test.c.watch(max_await_time_ms=100) as stream:
        started = time.monotonic()
        assert stream.try_next() is None
        assert stream.try_next() is None
        elapsed = time.monotonic() - started
    assert elapsed >= 0.18
    assert replicaset_server.stats(0)["commands"]["getMore"]["received"] == 2


def test_plain_get_more_does_not_wait(standalone_server: EmbeddedServer, make_client: Any) -> None:
    """Ordinary cursors are not held: 30 getMores of one document each come back quickly."""
    client = make_client(standalone_server.uri)
    client.test.c.insert_many([{"_id": i} for i in range(30)])
    started = time.monotonic()
    assert len(list(client.test.c.find(batch_size=1))) == 30
    assert time.monotonic() - started < 2.0
