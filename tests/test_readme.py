"""Every Python example of the README runs as written (against the embedded server), and the
README's shell examples and install claims hold."""

from __future__ import annotations

import asyncio
import contextlib
import io
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymongo
import pytest
import stamina
from prometheus_client.parser import text_string_to_metric_families

import backpressure
import backpressure.metrics
from backpressure.testing.server.embedded import EmbeddedServer
from backpressure.testing.testmode import is_testing

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

# One marker per README Python block, each run by the test named beside it.
BLOCK_TESTS = {
    "backpressure.enable(other": "test_quick_start_runs_against_a_server",
    "mclient = backpressure.AsyncIOMotorClient(uri)": "test_options_example",
    "stats = backpressure.stats(client)": "test_statistics_example",
    "hedge_delay=0.02": "test_hedging_example",
    "backpressure.metrics.enable_prometheus(registry)": "test_metrics_example",
    "with backpressure.overrides(max_retries=0):": "test_overrides_example",
    "set_testing(True)": "test_test_mode_example",
    "def save_with_tenacity(doc):": "test_outer_loop_recipes",
    "server.set_rate_limit(100": "test_embedded_server_example_prints_the_retries",
}


def _blocks(language: str) -> list[str]:
    """Every ```language block of the README, in order."""
    text = README.read_text(encoding="utf-8")
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def _block_containing(text: str) -> str:
    """The one README Python block that contains ``text``."""
    (block,) = [b for b in _blocks("python") if text in b]
    return block


def _run(code: str, namespace: dict[str, Any]) -> str:
    """Execute ``code`` in ``namespace``; return what it printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(README), "exec"), namespace)
    return out.getvalue()


def test_every_python_block_has_its_test() -> None:
    """Each README Python block contains exactly one marker, so a new block needs a new test."""
    for block in _blocks("python"):
        markers = [marker for marker in BLOCK_TESTS if marker in block]
        assert len(markers) == 1, f"README block without exactly one test marker:\n{block}"
    assert len(_blocks("python")) == len(BLOCK_TESTS)
    for test in BLOCK_TESTS.values():
        assert callable(globals()[test])


@pytest.fixture
def enabled_client(standalone_server: EmbeddedServer) -> Iterator[Any]:
    """An enabled client on the standalone embedded server, for blocks that use ``client``."""
    with backpressure.MongoClient(standalone_server.uri, serverSelectionTimeoutMS=5000) as client:
        yield client


def test_quick_start_runs_against_a_server(replicaset_server: EmbeddedServer) -> None:
    """The first example works when localhost:27017 is the embedded replica set."""
    block = _block_containing("backpressure.enable(other")
    assert block == _blocks("python")[0]
    code = block.replace("mongodb://localhost:27017", replicaset_server.uri)
    namespace: dict[str, Any] = {}
    _run(code, namespace)
    client, other = namespace["client"], namespace["other"]
    assert isinstance(client, pymongo.MongoClient)
    assert isinstance(other, pymongo.MongoClient)
    try:
        assert client.shop.orders.count_documents({"sku": 1}) == 1
        assert not backpressure.is_enabled(other)
    finally:
        client.close()
        other.close()


def test_options_example(replicaset_server: EmbeddedServer) -> None:
    """The Options block: every client class and enable/disable on an existing client."""
    existing = pymongo.MongoClient(replicaset_server.uri)
    namespace: dict[str, Any] = {"uri": replicaset_server.uri, "existing_client": existing}
    # Motor and AsyncMongoClient may look up the current event loop: give them one we close.
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    _run("import backpressure\n" + _block_containing("mclient = "), namespace)
    client, aclient, mclient = namespace["client"], namespace["aclient"], namespace["mclient"]
    try:
        policy = backpressure.state(client).policy  # type: ignore[union-attr]
        assert (policy.name, policy.max_retries) == ("current", 3)
        assert backpressure.is_enabled(aclient)
        assert backpressure.is_enabled(mclient)
        assert not backpressure.is_enabled(existing)
        assert client.admin.command("ping")["ok"] == 1
    finally:
        client.close()
        mclient.close()
        existing.close()
        loop.run_until_complete(aclient.close())
        asyncio.set_event_loop(None)
        loop.close()


def test_hedging_example(replicaset_server: EmbeddedServer) -> None:
    """The Hedged reads block: the URI option and the policy field both turn hedging on."""
    from backpressure.adapters import hedging

    class HedgeListener:
        def hedged(self, event: Any) -> None:
            """Ignore hedges."""

    seed: Any = pymongo.MongoClient(replicaset_server.uri)
    seed.db.orders.insert_one({"_id": 1})
    seed.close()
    namespace: dict[str, Any] = {"uri": replicaset_server.uri, "hedge_listener": HedgeListener()}
    block = _block_containing("hedge_delay=0.02")
    first, rest = block.split("\n", 1)
    _run("import backpressure\n" + first, namespace)
    client = namespace["client"]
    try:
        assert backpressure.state(client).policy.hedge_delay == 0.02  # type: ignore[union-attr]
        out = _run(rest, namespace)
        assert out == "{'_id': 1}\n"
        state = backpressure.state(client)
        assert state is not None
        assert (state.policy.name, state.policy.hedge_delay) == ("adaptive", 0.02)
        assert hedging.installed(client)
    finally:
        client.close()


def test_statistics_example() -> None:
    """The Observability block prints the statistics it says."""
    out = _run(_block_containing("stats = backpressure.stats(client)"), {})
    assert out.splitlines() == ["1 2 1", "2"]


def test_metrics_example() -> None:
    """The Metrics block prints a scrape with the six metrics and the two retries."""
    out = _run(_block_containing("backpressure.metrics.enable_prometheus(registry)"), {})
    families = {f.name: f for f in text_string_to_metric_families(out)}
    assert {
        "backpressure_retries",
        "backpressure_giveups",
        "backpressure_attempts_per_operation",
        "backpressure_backoff_seconds",
        "backpressure_budget_tokens",
        "backpressure_amplification_ratio",
    } <= set(families)
    retries = [s for s in families["backpressure_retries"].samples if s.name.endswith("_total")]
    assert sum(s.value for s in retries) == 2


def test_overrides_example(enabled_client: Any, standalone_server: EmbeddedServer) -> None:
    """The overrides block runs; with an overload injected, its first insert is not retried."""
    standalone_server.configure_fail_point(
        {
            "configureFailPoint": "failCommand",
            "mode": {"times": 1},
            "data": {
                "failCommands": ["insert"],
                "errorCode": 462,
                "errorLabels": ["SystemOverloadedError", "RetryableError"],
            },
        }
    )
    code = _block_containing("with backpressure.overrides(max_retries=0):")
    with pytest.raises(pymongo.errors.OperationFailure):
        _run(code, {"backpressure": backpressure, "client": enabled_client})
    _run(code, {"backpressure": backpressure, "client": enabled_client})
    assert enabled_client.db.coll.count_documents({}) == 1
    assert enabled_client.db.report.count_documents({}) == 1
    assert backpressure.stats(enabled_client).retries == 0


def test_test_mode_example(enabled_client: Any) -> None:
    """The test-mode block runs and leaves test mode off."""
    _run(_block_containing("set_testing(True)"), {"client": enabled_client})
    assert enabled_client.db.coll.count_documents({}) == 1
    assert not is_testing()


def test_outer_loop_recipes(enabled_client: Any) -> None:
    """The tenacity and stamina recipes decorate functions that work."""
    namespace: dict[str, Any] = {"client": enabled_client}
    _run(_block_containing("def save_with_tenacity(doc):"), namespace)
    namespace["save_with_tenacity"]({"by": "tenacity"})
    with stamina.set_testing(True):
        namespace["save_with_stamina"]({"by": "stamina"})
    assert enabled_client.db.orders.count_documents({}) == 2


def test_embedded_server_example_prints_the_retries() -> None:
    """The testing-tools example: two injected overloads, then success on the third attempt."""
    out = _run(_block_containing("server.set_rate_limit(100"), {})
    assert out.strip() == "{'received': 3, 'failed': 2, 'rejected': 0}"


def test_server_command_prints_ready_with_ephemeral_ports() -> None:
    """The README's test-server command prints READY and a 3-member URI, as shown."""
    (block,) = [b for b in _blocks("bash") if "python -m backpressure.testing.server" in b]
    command = block.split("\n# ")[0].replace("\\\n", " ")
    argv = shlex.split(command)
    assert argv[:3] == ["python", "-m", "backpressure.testing.server"]
    process = subprocess.Popen(
        [sys.executable, *argv[1:]], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
    finally:
        process.terminate()
        process.wait(timeout=30)
        if process.stdout is not None:
            process.stdout.close()
    assert re.fullmatch(
        r"READY mongodb://127\.0\.0\.1:\d+,127\.0\.0\.1:\d+,127\.0\.0\.1:\d+/\?replicaSet=rs0", line
    ), line
    shown = re.search(r"e\.g\.\s+(READY \S+)", block)
    assert shown is not None
    assert re.fullmatch(r"READY mongodb://(127\.0\.0\.1:\d+,?){3}/\?replicaSet=rs0", shown[1])


def test_install_extras_exist() -> None:
    """Every extra the Install section names is an extra of the package."""
    tomllib = pytest.importorskip("tomllib")
    extras = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
            "optional-dependencies"
        ]
    )
    (install,) = [b for b in _blocks("bash") if "[prometheus]" in b]
    named = set(re.findall(r"pymongo-backpressure\[(\w+)\]", install))
    assert named == {"prometheus", "otel", "server", "motor"}
    assert named <= extras
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Install") : text.index("## What gets retried")]
    table = set(re.findall(r"^\| `([\w, `]+)` \|", section, flags=re.M))
    assert table == {"prometheus", "otel", "server", "motor", "demo", "test`, `dev"}
    assert {"prometheus", "otel", "server", "motor", "demo", "test", "dev"} <= extras


def _unified_commands() -> list[list[str]]:
    """The README's unified-runner command lines, split into arguments."""
    (block,) = [b for b in _blocks("bash") if "python -m backpressure.testing.unified" in b]
    return [shlex.split(line) for line in block.strip().splitlines()]


@pytest.mark.slow
def test_unified_runner_command_on_the_shared_suite() -> None:
    """The first runner command, run as written from the checkout, passes every test."""
    argv = _unified_commands()[0]
    suite = ROOT / argv[-1]
    if not suite.is_dir():
        pytest.skip(f"{argv[-1]} is not beside the checkout")
    result = subprocess.run(
        [sys.executable, *argv[1:]], cwd=ROOT, capture_output=True, text=True, timeout=110
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert re.search(r"^\d+ passed, 0 failed", result.stdout, flags=re.M)


def test_unified_runner_command_against_a_uri(replicaset_server: EmbeddedServer) -> None:
    """The second runner command works with its URI pointing at a replica set."""
    argv = _unified_commands()[1]
    assert "mongodb://my-mongod/" in argv
    argv = [replicaset_server.uri if a == "mongodb://my-mongod/" else a for a in argv]
    result = subprocess.run(
        [sys.executable, *argv[1:]], cwd=ROOT, capture_output=True, text=True, timeout=110
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert re.search(r"^\d+ passed, 0 failed", result.stdout, flags=re.M)
