"""The command-line server: one READY line, clean exit on SIGTERM/SIGINT."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from typing import Any

import pytest


def _start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "backpressure.testing.server", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize(
    ("args", "prefix", "suffix", "hosts"),
    [
        ((), "mongodb://127.0.0.1:", "/", 1),
        (("--topology", "replicaset"), "mongodb://127.0.0.1:", "/?replicaSet=rs0", 3),
        (("--topology", "sharded", "--members", "2"), "mongodb://127.0.0.1:", "/", 2),
    ],
)
def test_ready_line_and_sigterm(
    make_client: Any, args: tuple[str, ...], prefix: str, suffix: str, hosts: int
) -> None:
    """Exactly one READY line with the connection string; SIGTERM exits with code 0."""
    process = _start("--port", "0", *args)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("READY ")
        uri = line.split(" ", 1)[1].strip()
        assert uri.startswith(prefix)
        assert uri.endswith(suffix)
        assert len(uri[len("mongodb://") :].split("/")[0].split(",")) == hosts
        client = make_client(uri)
        assert client.admin.command("ping")["ok"] == 1.0
        client.close()
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0
    assert out == ""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_sigint_and_fixed_ports() -> None:
    """A fixed first port gives consecutive ports; SIGINT also exits cleanly."""
    for _ in range(10):  # the port after a free one may be taken: try another range
        port = _free_port()
        process = _start("--topology", "replicaset", "--port", str(port))
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            if line:
                expected = ",".join(f"127.0.0.1:{port + i}" for i in range(3))
                assert line.strip() == f"READY mongodb://{expected}/?replicaSet=rs0"
                process.send_signal(signal.SIGINT)
            process.communicate(timeout=10)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
        if line:
            assert process.returncode == 0
            return
        assert process.returncode == 1  # address in use is reported, not a traceback
    pytest.fail("no free range of 3 consecutive ports found")


def test_bad_option_exits_nonzero() -> None:
    """A bad rate is reported on stderr with exit code 2, without a READY line."""
    process = _start("--rate-limit", "-5")
    out, err = process.communicate(timeout=20)
    assert process.returncode == 2
    assert out == ""
    assert "ingressRequestAdmissionRatePerSec" in err
