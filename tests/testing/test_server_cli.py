"""The command-line server: one READY line, clean exit on SIGTERM/SIGINT."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from backpressure.testing.server import cli as server_cli
from backpressure.testing.server.cli import SCRIPT, main


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
    """A bad rate is a usage error naming the flag (not the mongod parameter), exit code 2,
    without a READY line or a traceback."""
    process = _start("--rate-limit", "-5")
    out, err = process.communicate(timeout=20)
    assert process.returncode == 2
    assert out == ""
    assert err.startswith("usage: python -m backpressure.testing.server")
    assert "error: argument --rate-limit: must be > 0, got -5" in err
    assert "ingressRequestAdmissionRatePerSec" not in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--rate-limit", "0.5"), "argument --rate-limit: expected an integer, got '0.5'"),
        (("--rate-limit", "3e9"), "argument --rate-limit: must be <= 2147483647, got 3e9"),
        (("--burst-seconds", "0"), "argument --burst-seconds: must be > 0, got 0"),
        (("--queue-depth", "-1"), "argument --queue-depth: must be >= 0, got -1"),
        (("--base-backoff-ms", "-1"), "argument --base-backoff-ms: must be >= 0, got -1"),
        (("--connection-rate-limit", "0"), "argument --connection-rate-limit: must be > 0, got 0"),
        (
            ("--connection-burst-seconds", "inf"),
            "argument --connection-burst-seconds: expected a finite number, got 'inf'",
        ),
        (
            ("--connection-queue-depth", "x"),
            "argument --connection-queue-depth: expected an integer, got 'x'",
        ),
        (("--max-wire-version", "-1"), "argument --max-wire-version: must be >= 0, got -1"),
        (("--shard-rate-limit", "0"), "argument --shard-rate-limit: must be > 0, got 0"),
        (("--shard-burst-seconds", "-2"), "argument --shard-burst-seconds: must be > 0, got -2"),
        (
            ("--shard-base-backoff-ms", "-5"),
            "argument --shard-base-backoff-ms: must be >= 0, got -5",
        ),
        (("--shard-max-retries", "-1"), "argument --shard-max-retries: must be >= 0, got -1"),
        (
            ("--shard-retry-jitter", "1.5"),
            "argument --shard-retry-jitter: must be in [0, 1], got 1.5",
        ),
        (
            ("--queue-depth", "4"),
            "argument --queue-depth: request queueing needs --server-version 9.0 or later "
            "(not 8.2.6)",
        ),
        (
            ("--base-backoff-ms", "100", "--server-version", "8.2.0"),
            "argument --base-backoff-ms: needs --server-version 9.0 or later (not 8.2.0)",
        ),
        (
            ("--topology", "sharded", "--shard-base-backoff-ms", "100"),
            "argument --shard-base-backoff-ms: needs --server-version 9.0 or later (not 8.2.6)",
        ),
        (
            ("--shard-max-retries", "1"),
            "argument --shard-max-retries: needs --topology sharded",
        ),
        (
            ("--members", "2"),
            "argument --members: a standalone topology has exactly one member",
        ),
    ],
)
def test_flag_errors_name_the_flag(
    args: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each numeric flag's bad value, and each option its profile or topology lacks, is a usage
    error naming the flag (exit 2), never a mongod parameter name."""
    with pytest.raises(SystemExit) as raised:
        main(list(args))
    assert raised.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m backpressure.testing.server")
    assert f"error: {message}" in err
    assert "ingress" not in err
    assert "externalClient" not in err
    assert "backpressureShard" not in err


def test_a_parameter_error_at_start_up_names_the_flag(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mongod parameter error from the start-up options is reported under the flag that set
    the parameter."""

    def reject(**_: Any) -> dict[str, Any]:
        raise ValueError(
            "Invalid value for parameter ingressConnectionEstablishmentRatePerSec: 7 is odd"
        )

    monkeypatch.setattr(server_cli, "start_parameters", reject)
    with pytest.raises(SystemExit) as raised:
        main(["--connection-rate-limit", "7"])
    assert raised.value.code == 2
    assert "error: argument --connection-rate-limit: 7 is odd" in capsys.readouterr().err


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback on this machine")
def test_ipv6_ready_uri_has_brackets(make_client: Any) -> None:
    """--host ::1 prints mongodb://[::1]:PORT/, which pymongo parses and connects to."""
    process = _start("--host", "::1", "--topology", "replicaset")
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        uri = line.split(" ", 1)[1].strip()
        assert uri.startswith("mongodb://[::1]:")
        client = make_client(uri)
        assert client.admin.command("ping")["ok"] == 1.0
        assert all(host == "::1" for host, _ in client.nodes)
        client.close()
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--port", "-1"), "argument --port: expected an integer in 0..65535, got -1"),
        (("--port", "70000"), "argument --port: expected an integer in 0..65535, got 70000"),
        (("--port", "http"), "argument --port: expected an integer in 0..65535, got 'http'"),
        (("--port", "65535", "--topology", "replicaset"), "beyond 65535"),
        (("--members", "0"), "argument --members: must be >= 1, got 0"),
    ],
)
def test_bad_ports_are_argument_errors(args: tuple[str, ...], message: str) -> None:
    """Out-of-range ports end with a usage error naming the option, never a traceback."""
    process = _start(*args)
    out, err = process.communicate(timeout=20)
    assert process.returncode == 2
    assert out == ""
    assert message in err
    assert "Traceback" not in err


def test_non_loopback_bind_warns_on_stderr() -> None:
    """--host 0.0.0.0 still serves, but warns on stderr (the log line and a plain warning)."""
    process = _start("--host", "0.0.0.0")
    try:
        assert process.stdout is not None
        assert process.stdout.readline().startswith("READY mongodb://0.0.0.0:")
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert "WARNING: the embedded server listens on 0.0.0.0" in err
    assert "WARNING backpressure.testing.server: listening on 0.0.0.0" in err


def test_loopback_bind_does_not_warn() -> None:
    """The default loopback bind prints no warning."""
    process = _start()
    try:
        assert process.stdout is not None
        assert process.stdout.readline().startswith("READY ")
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert "WARNING" not in err


def test_help_describes_every_option_with_its_default() -> None:
    """--help has a text for every option, and each names its default."""
    process = _start("--help")
    out, _ = process.communicate(timeout=20)
    assert process.returncode == 0
    options = [
        "--topology",
        "--members",
        "--host",
        "--port",
        "--rate-limit",
        "--burst-seconds",
        "--queue-depth",
        "--base-backoff-ms",
        "--connection-rate-limit",
        "--connection-burst-seconds",
        "--connection-queue-depth",
        "--max-wire-version",
        "--server-version",
        "--shard-rate-limit",
        "--shard-burst-seconds",
        "--shard-base-backoff-ms",
        "--shard-max-retries",
        "--shard-retry-jitter",
        "--log-level",
    ]
    text = " ".join(out.split())
    for option, following in zip(options, [*options[1:], None]):
        start = text.index(f" {option} ", text.index("options:"))
        end = text.index(f" {following} ", start) if following else len(text)
        assert "default:" in text[start:end], option
    assert "(default: 127.0.0.1)" in text
    assert "(default: 8.2.6)" in text


def test_installed_script_has_the_same_command_line() -> None:
    """The ``backpressure-test-server`` script runs the same main: its usage line names the
    script, a bad value exits 2 naming the flag."""
    script = Path(sys.executable).with_name(SCRIPT)
    if not script.exists():
        pytest.skip(f"{SCRIPT} is not installed next to {sys.executable}")
    done = subprocess.run(
        [str(script), "--rate-limit", "-5"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.startswith(f"usage: {SCRIPT} ")
    assert f"{SCRIPT}: error: argument --rate-limit: must be > 0, got -5" in done.stderr
