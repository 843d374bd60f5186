"""A bounded wire fuzzer: hostile messages never take the server down or cost it the memory a
zlib bomb used to. (The timing figures are measured by ``scripts/measure_wire_fuzz.py``, not
asserted.)"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from backpressure.testing import EmbeddedServer

sys.path.insert(0, str(Path(__file__).parent))
from wire_hostile_messages import (
    MAX_MESSAGE,
    MIB,
    body_section,
    hostile_messages,
    many_tiny_documents,
    op_msg,
    zlib_bomb,
    zlib_zeros,
)


def _send(address: tuple[str, int], message: bytes, wait: float = 2.0) -> str:
    """Send one message on a fresh connection: 'answered', 'closed' or 'waiting'."""
    with socket.create_connection(address, timeout=wait) as sock:
        try:
            sock.sendall(message)
            head = sock.recv(4)
        except (BrokenPipeError, ConnectionResetError):
            return "closed"
        except socket.timeout:
            return "waiting"  # a length promising more bytes than were sent, as mongod waits
        return "answered" if head else "closed"


@pytest.fixture(scope="module")
def fuzz_target() -> Iterator[EmbeddedServer]:
    """A server of its own: hostile input must not disturb the shared fixtures."""
    with EmbeddedServer("standalone") as server:
        yield server


@pytest.mark.slow
@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(message=hostile_messages())
def test_hostile_messages_never_take_the_server_down(
    fuzz_target: EmbeddedServer, message: bytes
) -> None:
    """Each hostile message is answered, refused by closing, or waited on; pings still work."""
    outcome = _send(fuzz_target.primary_address, message, wait=0.5)
    assert outcome in ("answered", "closed", "waiting")
    assert _send(fuzz_target.primary_address, op_msg(body_section({"ping": 1, "$db": "a"}))) == (
        "answered"
    )
    assert fuzz_target.command({"ping": 1})["ok"] == 1.0


def test_too_many_documents_in_a_sequence_are_refused(fuzz_target: EmbeddedServer) -> None:
    """A sequence beyond maxWriteBatchSize (100,000) is refused before any document is decoded."""
    assert _send(fuzz_target.primary_address, many_tiny_documents(1_000_000)) == "closed"


@pytest.mark.parametrize("size", [0, 1, 65521, MIB - 1, MIB, 3 * MIB + 65522])
def test_the_zlib_stream_of_zeros_inflates_to_exactly_its_size(size: int) -> None:
    """The bombs' stream (one MiB's blocks repeated) is a whole zlib stream of ``size`` zeros,
    its Adler-32 included (``zlib.decompress`` checks it)."""
    assert zlib.decompress(zlib_zeros(size)) == bytes(size)


def _status_bytes(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


@pytest.mark.slow
@pytest.mark.skipif(
    not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc (VmHWM, clear_refs)"
)
@pytest.mark.parametrize(
    ("inflated", "declared"),
    [(256 * MIB, 100), (256 * MIB, MAX_MESSAGE - 16)],
    ids=["declared-100-bytes", "declared-the-limit"],
)
def test_zlib_bomb_costs_at_most_twice_the_message_limit(inflated: int, declared: int) -> None:
    """The issue's bomb (256 MiB of zeros in 254 KB) raised the server's memory by 511 MB; now
    the peak growth stays within 2x the 48 MB limit, and the server answers afterwards."""
    process = subprocess.Popen(
        [sys.executable, "-m", "backpressure.testing.server", "--log-level", "ERROR"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        port = int(line.strip().rstrip("/").rsplit(":", 1)[1])
        bomb = zlib_bomb(inflated, declared)
        ping = op_msg(body_section({"ping": 1, "$db": "admin"}))
        assert _send(("127.0.0.1", port), ping) == "answered"
        Path(f"/proc/{process.pid}/clear_refs").write_text("5")
        before = _status_bytes(process.pid, "VmRSS")
        assert _send(("127.0.0.1", port), bomb, wait=60) == "closed"
        deadline = time.monotonic() + 30
        while _send(("127.0.0.1", port), ping) != "answered":
            assert time.monotonic() < deadline
        growth = _status_bytes(process.pid, "VmHWM") - before
        assert growth <= 2 * MAX_MESSAGE, f"peak growth {growth / 1e6:.1f} MB"
    finally:
        process.terminate()
        process.communicate(timeout=10)
