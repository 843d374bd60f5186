"""Measure what hostile wire input costs the embedded server: memory growth and stalls.

Run: ``python scripts/measure_wire_fuzz.py [--examples N]`` (Linux: reads /proc). It takes the
hostile messages from the fuzz tests' ``tests/testing/wire_hostile_messages.py``.

The server runs as a subprocess (``python -m backpressure.testing.server``). For each named worst
case, and for random messages from the fuzzer's strategy, one connection sends the message while
another sends ``ping`` back to back. Reported per case:

* peak memory growth: the server's peak RSS (``VmHWM``, reset through ``/proc/PID/clear_refs``
  before the case) minus its RSS just before; the goal is at most 2x the 48 MB message limit;
* stall: the longest ``ping`` round trip of another client (its own process) that overlapped the
  case, next to the ping round trip's 99th percentile at rest; the goal is under 50 ms.

Timing figures depend on the machine's load; they are reported, not asserted.
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing
import os
import socket
import statistics
import struct
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event as EventType
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "testing"))

from hypothesis import HealthCheck, given, settings
from wire_hostile_messages import (
    MAX_MESSAGE,
    NAMED_CASES,
    body_section,
    hostile_messages,
    op_msg,
)

from backpressure.cli import positive_int

MB = 1_000_000
print = functools.partial(print, flush=True)


def start_server() -> tuple[subprocess.Popen[str], int]:
    """Start the CLI server; return the process and its port."""
    process = subprocess.Popen(
        [sys.executable, "-m", "backpressure.testing.server", "--log-level", "ERROR"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("READY "):
        process.kill()
        raise RuntimeError(f"server did not start: {line!r}")
    port = int(line.split(":")[-1].strip().rstrip("/"))
    return process, port


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def rss_bytes(pid: int) -> int:
    """Current resident set size."""
    return _status_kb(pid, "VmRSS") * 1024


def peak_bytes(pid: int) -> int:
    """Peak resident set size since the last reset."""
    return _status_kb(pid, "VmHWM") * 1024


def reset_peak(pid: int) -> None:
    """Reset VmHWM to the current RSS (Linux ``clear_refs`` value 5)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def _ping_loop(port: int, pipe: Connection, stop: EventType) -> None:
    """Child process: ping back to back, send (end, round trip) batches up the pipe."""
    sock = socket.create_connection(("127.0.0.1", port))
    ping = op_msg(body_section({"ping": 1, "$db": "admin"}))

    def recv(size: int) -> bytes:
        data = bytearray()
        while len(data) < size:
            chunk = sock.recv(size - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return bytes(data)

    batch: list[tuple[float, float]] = []
    flushed = time.monotonic()
    while not stop.is_set():
        started = time.monotonic()
        sock.sendall(ping)
        (length,) = struct.unpack("<i", recv(4))
        recv(length - 4)
        ended = time.monotonic()
        batch.append((ended, ended - started))
        if ended - flushed > 0.02:
            pipe.send(batch)
            batch, flushed = [], ended
    pipe.send(batch)
    sock.close()


class Pinger:
    """Another client, in its own process (no GIL shared with the sender), pinging back to back."""

    def __init__(self, port: int) -> None:
        self.samples: list[tuple[float, float]] = []
        self._receiver, sender = multiprocessing.Pipe(duplex=False)
        self._stop = multiprocessing.Event()
        self._process = multiprocessing.Process(
            target=_ping_loop, args=(port, sender, self._stop), daemon=True
        )

    def start(self) -> None:
        self._process.start()

    def drain(self) -> list[tuple[float, float]]:
        """Collect the round trips reported so far."""
        while self._receiver.poll():
            self.samples.extend(self._receiver.recv())
        return self.samples

    def worst_between(self, start: float, end: float) -> float:
        """The longest round trip that overlapped [start, end]."""
        deadline = time.monotonic() + 30
        samples = self.drain()  # wait for a ping that began after the case: none is left out
        while not any(done - rtt > end for done, rtt in samples) and time.monotonic() < deadline:
            time.sleep(0.01)
            samples = self.drain()
        return max(
            (rtt for done, rtt in samples if done >= start and done - rtt <= end), default=0.0
        )

    def stop(self) -> None:
        self._stop.set()
        self._process.join(5)


def send_hostile(port: int, message: bytes, timeout: float = 60.0) -> str:
    """Send one message on a fresh connection; return how the server answered."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.settimeout(timeout)
    try:
        try:
            sock.sendall(message)
        except (BrokenPipeError, ConnectionResetError):
            return "closed while sending"
        try:
            head = sock.recv(4)
        except ConnectionResetError:
            return "closed"
        except socket.timeout:
            return "waits for the rest"  # a length that promises more bytes than were sent
        if not head:
            return "closed"
        return "answered"
    finally:
        sock.close()


def measure(
    pid: int, port: int, pinger: Pinger, message: bytes, timeout: float = 60.0
) -> tuple[int, float, str]:
    """Peak memory growth (bytes), worst ping stall (s) and outcome of one hostile message."""
    time.sleep(0.05)
    reset_peak(pid)
    before = rss_bytes(pid)
    start = time.monotonic()
    outcome = send_hostile(port, message, timeout)
    end = time.monotonic()
    return peak_bytes(pid) - before, pinger.worst_between(start, end), outcome


def main(argv: Optional[list[str]] = None) -> int:
    """Run every named case and ``--examples`` random ones; print a table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", type=positive_int, default=200, help="random fuzz messages")
    args = parser.parse_args(argv)
    process, port = start_server()
    pinger = Pinger(port)
    try:
        pinger.start()
        time.sleep(1.0)
        rest = sorted(rtt for _, rtt in pinger.drain())
        p99 = rest[int(len(rest) * 0.99)] if rest else 0.0
        print(f"server pid {process.pid}, RSS at rest {rss_bytes(process.pid) / MB:.1f} MB")
        print(
            f"ping round trip at rest: median {statistics.median(rest) * 1e3:.2f} ms, "
            f"p99 {p99 * 1e3:.2f} ms ({len(rest)} pings)"
        )
        limit = MAX_MESSAGE / MB
        print(f"limit: {limit:.0f} MB per message; memory goal <= {2 * limit:.0f} MB")
        print()
        print(f"{'case':55} {'bytes sent':>12} {'peak growth':>12} {'stall':>9}  outcome")
        for name, build in NAMED_CASES.items():
            message = build()
            growth, stall, outcome = measure(process.pid, port, pinger, message)
            print(
                f"{name:55} {len(message):>12,} {growth / MB:>9.1f} MB {stall * 1e3:>6.1f} ms  "
                f"{outcome}"
            )
            del message
        worst: dict[str, float] = {"growth": 0.0, "stall": 0.0}
        stalls: list[float] = []
        outcomes: dict[str, int] = {}

        @settings(
            max_examples=args.examples,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(hostile_messages())
        def fuzz(message: bytes) -> None:
            growth, stall, outcome = measure(process.pid, port, pinger, message, timeout=1.0)
            worst["growth"] = max(worst["growth"], growth)
            worst["stall"] = max(worst["stall"], stall)
            stalls.append(stall)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1

        fuzz()
        print(
            f"{f'{args.examples} random hostile messages (worst of all)':55} {'':>12} "
            f"{worst['growth'] / MB:>9.1f} MB {worst['stall'] * 1e3:>6.1f} ms  {outcomes}"
        )
        stalls.sort()
        print(
            f"{'  their stalls: median / p95 / max':55} {'':>12} {'':>12} "
            f"{stalls[len(stalls) // 2] * 1e3:.1f} / {stalls[int(len(stalls) * 0.95)] * 1e3:.1f}"
            f" / {stalls[-1] * 1e3:.1f} ms"
        )
        alive = process.poll() is None
        print(f"\nserver still running: {alive}; pings answered: {len(pinger.drain())}")
    finally:
        pinger.stop()
        process.terminate()
        process.wait(10)
    return 0


if __name__ == "__main__":
    if not os.path.exists("/proc/self/clear_refs"):
        sys.exit("needs Linux /proc (VmHWM and clear_refs)")
    sys.exit(main())
