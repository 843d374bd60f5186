"""--uri: the demo and the fleet benchmark against a deployment the user names (here the embedded
replica set, started apart from the run and given by its URI), never a remote host unless
allowed, and no server parameter changed unless --set-limiter asks (then put back after)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from backpressure import bench, demo
from backpressure.testing.server.embedded import EmbeddedServer
from backpressure.workload.remote import (
    LIMITER_PARAMETERS,
    check_uri,
    non_loopback_hosts,
    redact_uri,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("uri", "remote"),
    [
        ("mongodb://localhost:27017", []),
        ("mongodb://127.0.0.1:27017,127.0.0.2:27018/?replicaSet=rs0", []),
        ("mongodb://[::1]:27017", []),
        ("mongodb://%2Ftmp%2Fmongodb-27017.sock", []),
        ("mongodb://user:secret@localhost/admin", []),
        ("mongodb://db.example.com:27017", ["db.example.com:27017"]),
        ("mongodb://10.0.0.5", ["10.0.0.5:27017"]),
        ("mongodb://localhost:27017,db2.example.com:27017", ["db2.example.com:27017"]),
        ("mongodb+srv://user:pw@cluster0.example.net/?retryWrites=true", ["cluster0.example.net"]),
    ],
)
def test_non_loopback_hosts(uri: str, remote: list[str]) -> None:
    """Every host that is not this machine is named; an SRV name counts as remote."""
    assert non_loopback_hosts(uri) == remote


def test_check_uri_names_the_flag() -> None:
    """A remote host is refused with the option that allows it; allowed, it passes."""
    with pytest.raises(
        ValueError, match=r"db\.example\.com:27017 is not a loopback address.*--allow-remote"
    ):
        check_uri("mongodb://db.example.com:27017", allow_remote=False)
    check_uri("mongodb://db.example.com:27017", allow_remote=True)
    check_uri("mongodb://localhost:27017", allow_remote=False)
    with pytest.raises(ValueError, match="not a MongoDB connection string"):
        check_uri("http://localhost", allow_remote=False)


def test_redact_uri() -> None:
    assert redact_uri("mongodb://ann:s3cret@db:27017/x") == "mongodb://ann:***@db:27017/x"
    assert redact_uri("mongodb://db:27017") == "mongodb://db:27017"


@pytest.mark.parametrize(
    ("main", "argv"),
    [
        (demo.main, ["--uri", "mongodb://db.example.com:27017"]),
        (bench.main, ["--only", "fleet", "--uri", "mongodb://db.example.com:27017"]),
    ],
    ids=["demo", "bench"],
)
def test_remote_address_is_refused(
    main: Any, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A usage error (exit 2) naming --uri, the host and --allow-remote, before any run."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "error: argument --uri: db.example.com:27017 is not a loopback address" in err
    assert "pass --allow-remote to run against it" in err


@pytest.mark.parametrize(
    ("module", "argv", "error"),
    [
        (demo, ["--set-limiter"], "argument --set-limiter: needs --uri"),
        (demo, ["--allow-remote"], "argument --allow-remote: needs --uri"),
        (bench, ["--uri", "mongodb://localhost"], "argument --uri: only the fleet benchmark"),
    ],
)
def test_deployment_usage_errors(
    module: Any, argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        module.main(argv)
    assert exited.value.code == 2
    assert error in capsys.readouterr().err


def test_allow_remote_passes_the_checks() -> None:
    """--allow-remote lets a remote host through the usage checks (no run here)."""
    parser = demo.build_parser()
    args = parser.parse_args(["--uri", "mongodb://db.example.com", "--allow-remote"])
    demo._check(parser, args)
    assert args.uri == "mongodb://db.example.com"


def _limiter(uri: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The limiter parameters and the limiter's serverStatus section, from the primary."""
    client: MongoClient[dict[str, Any]] = MongoClient(uri, serverSelectionTimeoutMS=5000)
    try:
        query: dict[str, Any] = {"getParameter": 1, **dict.fromkeys(LIMITER_PARAMETERS, 1)}
        reply = client.admin.command(query)
        status = client.admin.command("serverStatus")
    finally:
        client.close()
    parameters = {name: reply[name] for name in LIMITER_PARAMETERS}
    return parameters, status["network"]["ingressRequestRateLimiter"]


def _run(module: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, "--progress", "off", "--arms", "current", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_demo_against_a_uri_changes_no_parameter(
    replicaset_server: EmbeddedServer, tmp_path: Path
) -> None:
    """The demo's fleet runs its processes against the URI and says it left the limiter alone:
    the parameters are as they were and the limiter never admitted (or refused) a request."""
    uri = replicaset_server.uri
    before, _status = _limiter(uri)
    done = _run("backpressure.demo", "--quick", "--uri", uri, "--output", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no server parameter changed (no --set-limiter)" in done.stdout.replace("\n", " ")
    report = json.loads((tmp_path / "demo.json").read_text())
    assert report["deployment"] == uri
    run = report["runs"]["current"]
    assert run["operations"] > 0
    assert run["server_received"] >= run["operations"] - run["app_errors"]
    after, status = _limiter(uri)
    assert after == before
    assert after["ingressRequestRateLimiterEnabled"] is False
    assert status["attemptedAdmissions"] == 0


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_fleet_benchmark_with_set_limiter_sets_and_restores_it(
    replicaset_server: EmbeddedServer, tmp_path: Path
) -> None:
    """--set-limiter applies the capacity steps with setParameter (the server refused requests
    over them) and puts the parameters back afterwards."""
    uri = replicaset_server.uri
    before, _status = _limiter(uri)
    done = _run(
        "backpressure.bench",
        "--only", "fleet", "--fleet-quick", "--uri", uri, "--set-limiter",
        "--output", str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no server parameter changed" not in done.stdout
    report = json.loads((tmp_path / "fleet.json").read_text())
    assert report["config"]["server"] == f"{uri}, limiter set: True"
    assert "transient" not in report  # fail points: the embedded server's only
    assert "against the deployment named above (--uri)" in (tmp_path / "fleet.md").read_text()
    [shape] = report["fleet"]
    [run] = shape["runs"]
    assert run["operations"] > 0
    after, status = _limiter(uri)
    assert after == before
    assert status["rejectedAdmissions"] > 0
