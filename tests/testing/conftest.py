"""Helpers for the embedded-server tests: pymongo clients closed at teardown, raw wire sockets."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any, Callable

import pytest
from pymongo import MongoClient

from backpressure.testing.server.wire.framing import (
    HEADER_SIZE,
    pack_msg,
    parse_header,
    parse_reply,
)


@pytest.fixture
def make_client() -> Iterator[Callable[..., MongoClient[dict[str, Any]]]]:
    """Create pymongo clients with short timeouts; close them all at teardown."""
    clients: list[MongoClient[dict[str, Any]]] = []

    def factory(uri: str, **kwargs: Any) -> MongoClient[dict[str, Any]]:
        options: dict[str, Any] = {"serverSelectionTimeoutMS": 3000, "heartbeatFrequencyMS": 500}
        options.update(kwargs)
        client: MongoClient[dict[str, Any]] = MongoClient(uri, **options)
        clients.append(client)
        return client

    yield factory
    for client in clients:
        client.close()


def wait_until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    """Return once ``condition()`` holds; fail the test if it does not within ``timeout`` s."""
    pause = threading.Event()
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"condition not met within {timeout} s"
        pause.wait(0.01)


class RawConnection:
    """A bare TCP connection speaking OP_MSG, for exact replies and malformed input."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.sock = socket.create_connection(address, timeout=5)
        self.request_id = 100

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, doc: dict[str, Any], db: str = "admin", flags: int = 0) -> int:
        self.request_id += 1
        self.sock.sendall(pack_msg({**doc, "$db": db}, self.request_id, 0, flags=flags))
        return self.request_id

    def receive(self) -> tuple[int, dict[str, Any]]:
        header = parse_header(self._recv(HEADER_SIZE))
        return header.response_to, parse_reply(header, self._recv(header.length - HEADER_SIZE))

    def command(self, doc: dict[str, Any], db: str = "admin") -> dict[str, Any]:
        self.send(doc, db)
        return self.receive()[1]

    def is_closed_by_peer(self) -> bool:
        """True when the server closed the connection (EOF or reset)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def _recv(self, size: int) -> bytes:
        data = bytearray()
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                raise ConnectionError("closed by the server")
            data += chunk
        return bytes(data)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def raw_connect() -> Iterator[Callable[[tuple[str, int]], RawConnection]]:
    """Open raw wire connections; close them at teardown."""
    opened: list[RawConnection] = []

    def connect(address: tuple[str, int]) -> RawConnection:
        conn = RawConnection(address)
        opened.append(conn)
        return conn

    yield connect
    for conn in opened:
        conn.close()
