"""The embedded server's event loop creates its tasks itself, whatever a test runner swaps."""

from __future__ import annotations

import asyncio
import socket
from typing import Any
from unittest import mock

from backpressure.testing import EmbeddedServer
from backpressure.testing.server.transport.deployment import Deployment


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


async def test_stopping_closes_a_connection_whose_handler_task_never_ran() -> None:
    """A connection accepted just as the server's loop shuts down can have its handler task
    cancelled before the task's first step, so the handler never closes it: stopping the
    deployment closes it all the same (the client reads the end of the stream), and nothing is
    left for the garbage collector to report as an unclosed transport."""
    deployment = Deployment()
    await deployment.start()
    loop = asyncio.get_running_loop()
    handlers: list[asyncio.Task[Any]] = []

    def cancel_handlers(loop: asyncio.AbstractEventLoop, coro: Any, **options: Any) -> Any:
        task = asyncio.Task(coro, loop=loop, **options)
        if getattr(coro, "__qualname__", "").endswith(".accept"):
            task.cancel()  # before its first step, as the loop's shutdown does
            handlers.append(task)
        return task

    assert deployment.topology is not None
    member = deployment.topology.members[0]
    with socket.socket() as sock:
        sock.setblocking(False)
        loop.set_task_factory(cancel_handlers)
        try:
            await loop.sock_connect(sock, (member.host, member.port))
            while not (handlers and handlers[0].done()):
                await asyncio.sleep(0)
        finally:
            loop.set_task_factory(None)
        assert handlers[0].cancelled()
        await deployment.stop()
        assert await asyncio.wait_for(loop.sock_recv(sock, 1), timeout=10) == b""
