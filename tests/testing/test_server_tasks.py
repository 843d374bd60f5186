"""The embedded server's event loop creates its tasks itself, whatever a test runner swaps."""

from __future__ import annotations

import asyncio
from typing import Any
from unittest import mock

from backpressure.testing import EmbeddedServer


def test_a_swapped_task_class_is_not_used_by_the_server(
    standalone_server: EmbeddedServer, make_client: Any
) -> None:
    """While ``asyncio.tasks.Task`` is swapped in the test's thread (the asyncio.Runner backport
    pytest-asyncio uses on Python < 3.11 does so while it creates a test's task), a new
    connection and its commands are served, and the swapped class is never called: the server's
    loop creates its tasks with ``asyncio.Task`` itself, so none of them shares the test's
    context."""
    calls: list[tuple[Any, ...]] = []

    def swapped(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        raise AssertionError("the server created a task with the swapped class")

    with mock.patch.object(asyncio.tasks, "Task", swapped):
        client = make_client(standalone_server.uri)
        assert client.admin.command("ping")["ok"] == 1.0
        client.test.c.insert_one({"_id": 1})
        assert client.test.c.find_one({"_id": 1}) == {"_id": 1}
    assert calls == []
