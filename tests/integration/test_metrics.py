"""Prometheus and OpenTelemetry metrics, read from their real exposition, on real clients."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.parser import text_string_to_metric_families
from pymongo.errors import DuplicateKeyError, PyMongoError

import backpressure
import backpressure.metrics
import backpressure.switch.registry
from backpressure import ADAPTIVE, DRAFT, LocalOverloadError
from backpressure.adapters import seams
from backpressure.adapters.native import wrapper_flavour
from backpressure.metrics._catalogue import DURATION_BUCKETS, METRICS
from backpressure.switch.client import budget as budget_of
from backpressure.switch.client import state as state_of
from backpressure.testing.server.embedded import EmbeddedServer
from tests.integration.conftest import (
    NATIVE_LOOP_ONLY,
    NEVER_WAIT_TWICE,
    ClientFactory,
    RetryRecorder,
    enabled_client,
    overload_fail_point,
    resolve,
    wait_for,
)

pytestmark = pytest.mark.timeout(60)

FAST = DRAFT.replace(max_retries=3, base_backoff=0.001)
FAMILIES = {metric.prometheus_name for metric in METRICS}
"""Every family the Prometheus exporter serves (counters without their ``_total``)."""
DURATION = "db_client_operation_duration_seconds"
"""The Prometheus family of ``db.client.operation.duration``."""
LOCAL = {
    "backpressure_local_waits",
    "backpressure_local_wait_duration_seconds",
    "backpressure_local_refusals",
}
WAITING = ADAPTIVE.replace(adaptive_min_rate=2.0, adaptive_window=60.0, max_local_wait=30.0)
"""Paced at 2/s once closed (slots 0.5 s apart); the pacing stays closed for the whole test."""
REFUSING = NEVER_WAIT_TWICE.replace(max_local_wait=0.5)
"""Once closed, slots are 1000 s apart for a minute, however slowly the machine runs the test:
the next attempt needs more than max_local_wait."""


def _scrape(registry: CollectorRegistry) -> dict[str, list[Any]]:
    """Parse the registry's text exposition: family name -> samples."""
    text = generate_latest(registry).decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def _scrape_over_http(registry: CollectorRegistry) -> dict[str, list[Any]]:
    """Scrape ``registry`` the way Prometheus does: GET /metrics from prometheus-client's server."""
    httpd, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        port = httpd.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as reply:
            text = reply.read().decode()
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=30)
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def _value(samples: list[Any], name: str, **labels: str) -> float:
    """The value of the one sample called ``name`` whose labels include ``labels``."""
    (match,) = [
        s
        for s in samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    return float(match.value)


async def _retry_twice_then_give_up(client: Any, server: EmbeddedServer) -> None:
    """An insert that succeeds on its third attempt, then one that gives up after 4."""
    server.configure_fail_point(overload_fail_point(["insert"], times=2))
    await resolve(client.db.coll.insert_one({"x": 1}))
    server.configure_fail_point(overload_fail_point(["insert"]))
    with pytest.raises(PyMongoError):
        await resolve(client.db.coll.insert_one({"x": 2}))
    server.configure_fail_point({"configureFailPoint": "failCommand", "mode": "off"})


async def _close_pacing(client: Any, server: EmbeddedServer) -> None:
    """Make the server push back once on an insert (the retry succeeds): the client paces it."""
    server.configure_fail_point(overload_fail_point(["insert"], times=2))  # 2 close the pacing
    await resolve(client.db.coll.insert_one({"closing": True}))
    state = state_of(client)
    assert state is not None
    assert state.controller.pacing is not None
    assert state.controller.pacing.pushing_back()


async def _wait_locally_once(client: Any, server: EmbeddedServer, waits: Any) -> None:
    """Close ``client``'s pacing, then read until one read waited locally (``waits()`` > 0).

    A read that arrives after its slot (a stalled machine) is sent without waiting and reserves
    the next slot, 0.5 s on: the following read waits.  The loop stops at the first wait.
    """
    await _close_pacing(client, server)
    for _ in range(20):
        assert await resolve(client.db.coll.find_one({"closing": True})) is not None
        if waits() > 0:
            return
    raise AssertionError("no read waited locally")


async def _refuse_locally_once(client: Any, server: EmbeddedServer) -> None:
    """Close ``client``'s pacing, then one insert is refused locally (max_local_wait)."""
    await _close_pacing(client, server)
    with pytest.raises(LocalOverloadError):
        await resolve(client.db.coll.insert_one({"refused": True}))


@pytest.fixture
def registry() -> Iterator[CollectorRegistry]:
    """A fresh prometheus-client registry; metrics enabled on it are closed after the test."""
    registry = CollectorRegistry()
    yield registry
    backpressure.metrics.disable_metrics()


async def test_prometheus_every_metric_after_one_call(
    clients: ClientFactory, standalone_server: EmbeddedServer, registry: CollectorRegistry
) -> None:
    """enable_prometheus(registry), then an HTTP scrape shows every family with its values."""
    before = enabled_client(clients, standalone_server.uri, FAST, backpressure_class=False)
    backpressure.metrics.enable_prometheus(registry)
    after = enabled_client(clients, standalone_server.uri, FAST, backpressure_class=False)
    host, port = standalone_server.addresses[0]
    await _retry_twice_then_give_up(before, standalone_server)
    await resolve(after.db.coll.find_one({}))
    families = _scrape_over_http(registry)
    assert set(families) == FAMILIES
    operations = families["backpressure_client_operations"]
    name = "backpressure_client_operations_total"
    assert _value(operations, name, backpressure_outcome="succeeded") == 2
    assert _value(operations, name, backpressure_outcome="failed", db_system_name="mongodb") == 1
    retries = families["backpressure_retries"]
    first = {
        "db_system_name": "mongodb",
        "db_operation_name": "insert",
        "server_address": host,
        "server_port": str(port),
        "db_response_status_code": "462",
    }
    name = "backpressure_retries_total"
    assert _value(retries, name, backpressure_retry_number="1", **first) == 2
    assert _value(retries, name, backpressure_retry_number="3", **first) == 1
    giveups = families["backpressure_giveups"]
    reason = "attempts_exhausted"
    assert _value(giveups, "backpressure_giveups_total", backpressure_reason=reason) == 1
    # Per retried operation (gRPC A96): 2 then 3 retries; the first-attempt find records none.
    per_op = families["backpressure_client_operation_retries"]
    name = "backpressure_client_operation_retries"
    insert = {"db_operation_name": "insert", "db_system_name": "mongodb"}
    assert _value(per_op, f"{name}_count", **insert) == 2
    assert _value(per_op, f"{name}_sum", **insert) == 2 + 3
    assert _value(per_op, f"{name}_bucket", le="2.0", **insert) == 1
    assert _value(per_op, f"{name}_bucket", le="3.0", **insert) == 2
    assert {s.labels["db_operation_name"] for s in per_op} == {"insert"}
    delay = families["backpressure_client_operation_retry_delay_seconds"]
    name = "backpressure_client_operation_retry_delay_seconds"
    assert _value(delay, f"{name}_count", **insert) == 2
    slept = backpressure.stats(before).backoff_seconds
    assert _value(delay, f"{name}_sum", **insert) == pytest.approx(slept)
    tokens = families["backpressure_budget_tokens"]
    expected = sorted(budget_of(c).tokens for c in (before, after))  # type: ignore[union-attr]
    assert sorted(s.value for s in tokens) == expected
    assert expected[0] < 1000.0
    ratio = families["backpressure_amplification_ratio"]
    assert _value(ratio, "backpressure_amplification_ratio") == pytest.approx(8 / 3)


def test_prometheus_names_are_the_opentelemetry_names_mapped() -> None:
    """Each family is its instrument's name under OpenTelemetry's Prometheus mapping."""
    mapped = {metric.name: metric.prometheus_name for metric in METRICS}
    assert mapped["backpressure.client.operation.retry_delay"] == (
        "backpressure_client_operation_retry_delay_seconds"
    )
    assert mapped["backpressure.client.operation.retries"] == (
        "backpressure_client_operation_retries"
    )
    assert mapped["backpressure.amplification"] == "backpressure_amplification_ratio"
    assert mapped["backpressure.budget.tokens"] == "backpressure_budget_tokens"
    for metric in METRICS:
        assert metric.prometheus_labels == tuple(a.replace(".", "_") for a in metric.attributes)


async def test_prometheus_covers_only_the_clients_passed(
    clients: ClientFactory, standalone_server: EmbeddedServer, registry: CollectorRegistry
) -> None:
    """With clients=[a], b's retries are not counted."""
    a = enabled_client(clients, standalone_server.uri, FAST, backpressure_class=False)
    b = enabled_client(clients, standalone_server.uri, FAST, backpressure_class=False)
    metrics = backpressure.metrics.enable_prometheus(registry, clients=[a])
    try:
        await _retry_twice_then_give_up(b, standalone_server)
        assert _scrape(registry)["backpressure_retries"] == []
        assert _scrape(registry)["backpressure_client_operations"] == []
        await _retry_twice_then_give_up(a, standalone_server)
        assert len(_scrape(registry)["backpressure_retries"]) == 3
        assert len(_scrape(registry)["backpressure_budget_tokens"]) == 1
    finally:
        metrics.close()
    with pytest.raises(ValueError, match="enabled"):
        backpressure.metrics.enable_prometheus(registry, clients=[clients.plain("mongodb://x")])


async def test_prometheus_counts_local_waits_and_refusals(
    clients: ClientFactory, standalone_server: EmbeddedServer, registry: CollectorRegistry
) -> None:
    """Adaptive clients, enabled before and after the call: a local wait and a local refusal."""
    waiting = enabled_client(clients, standalone_server.uri, WAITING)
    backpressure.metrics.enable_prometheus(registry)
    refusing = enabled_client(clients, standalone_server.uri, REFUSING)
    assert set(_scrape(registry)) >= LOCAL
    assert _scrape(registry)["backpressure_local_waits"] == []
    host, port = standalone_server.addresses[0]

    def waits() -> float:
        samples = _scrape(registry)["backpressure_local_waits"]
        return sum(s.value for s in samples if s.name == "backpressure_local_waits_total")

    await _wait_locally_once(waiting, standalone_server, waits)
    await _refuse_locally_once(refusing, standalone_server)
    families = _scrape(registry)
    local_waits = families["backpressure_local_waits"]
    where = {"server_address": host, "server_port": str(port)}
    assert _value(local_waits, "backpressure_local_waits_total", **where) == 1
    assert [s.name for s in local_waits] == ["backpressure_local_waits_total"]
    seconds = families["backpressure_local_wait_duration_seconds"]
    name = "backpressure_local_wait_duration_seconds"
    assert _value(seconds, f"{name}_count") == 1
    assert 0.0 < _value(seconds, f"{name}_sum") <= 0.5
    assert _value(seconds, f"{name}_bucket", le="0.5") == 1
    assert _value(seconds, f"{name}_bucket", le="+Inf") == 1
    refusals = families["backpressure_local_refusals"]
    assert [(s.name, s.labels, s.value) for s in refusals] == [
        ("backpressure_local_refusals_total", {"backpressure_reason": "local_wait_limit"}, 1.0)
    ]
    # The refused insert was a first attempt: it gave up too, and the give-ups count it.
    giveups = families["backpressure_giveups"]
    assert [(s.name, s.labels, s.value) for s in giveups] == [
        ("backpressure_giveups_total", {"backpressure_reason": "local_wait_limit"}, 1.0)
    ]
    # The reads lasted at least the local wait they were held for; the refusal's error type.
    durations = families[DURATION]
    reads = _value(durations, f"{DURATION}_sum", db_operation_name="find")
    assert reads >= _value(seconds, f"{name}_sum")
    refused = {"db_operation_name": "insert", "error_type": "LocalOverloadError"}
    assert _value(durations, f"{DURATION}_count", **refused) == 1


def test_prometheus_enable_twice_returns_the_same_exporter(registry: CollectorRegistry) -> None:
    """A second call for the same registry does not register the collector twice."""
    first = backpressure.metrics.enable_prometheus(registry)
    assert backpressure.metrics.enable_prometheus(registry) is first
    backpressure.metrics.disable_metrics()
    assert "backpressure_retries" not in _scrape(registry)


def test_opentelemetry_enable_twice_returns_the_same_reporter(
    otel_reader: tuple[MeterProvider, InMemoryMetricReader],
) -> None:
    """A second call for the same meter provider does not create a second listener."""
    provider, _reader = otel_reader
    first = backpressure.metrics.enable_opentelemetry(provider)
    assert backpressure.metrics.enable_opentelemetry(provider) is first
    registered = [
        listener
        for listener in backpressure.switch.registry.registered_listeners()
        if listener is first.listener
    ]
    assert len(registered) == 1


@pytest.fixture
def otel_reader() -> Iterator[tuple[MeterProvider, InMemoryMetricReader]]:
    """An SDK meter provider with an in-memory reader; metrics are closed after the test."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    yield provider, reader
    backpressure.metrics.disable_metrics()
    provider.shutdown()


def _otel_points(reader: InMemoryMetricReader) -> dict[str, Any]:
    """Instrument name -> (unit, data points) from one collection.

    The SDK's own instruments (scope ``opentelemetry-sdk``, e.g. the reader's collection
    duration, which SDK 1.41, the newest for Python 3.9, records whether asked or not) are left
    out; every other instrument must be the package's own.
    """
    data = reader.get_metrics_data()
    found: dict[str, Any] = {}
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            if scope.scope.name == "opentelemetry-sdk":
                continue
            assert scope.scope.name == "backpressure"
            for metric in scope.metrics:
                found[metric.name] = (metric.unit, list(metric.data.data_points))
    return found


async def test_opentelemetry_instruments_with_units(
    clients: ClientFactory,
    standalone_server: EmbeddedServer,
    otel_reader: tuple[MeterProvider, InMemoryMetricReader],
) -> None:
    """enable_opentelemetry(provider): the in-memory reader sees every instrument, with units."""
    provider, reader = otel_reader
    backpressure.metrics.enable_opentelemetry(provider)
    client = enabled_client(clients, standalone_server.uri, FAST, backpressure_class=False)
    host, port = standalone_server.addresses[0]
    await _retry_twice_then_give_up(client, standalone_server)
    points = _otel_points(reader)
    assert {name: unit for name, (unit, _) in points.items()} == {
        "db.client.operation.duration": "s",
        "backpressure.client.operations": "{operation}",
        "backpressure.client.operation.retries": "{retry}",
        "backpressure.client.operation.retry_delay": "s",
        "backpressure.retries": "{retry}",
        "backpressure.giveups": "{giveup}",
        "backpressure.budget.tokens": "{token}",
        "backpressure.amplification": "1",
        # The server choice saw the pushbacks (a standalone: no selection had a choice).
        "backpressure.server_choice.signal": "1",
        "backpressure.server_choice.avoided": "{server}",
        "backpressure.server_choice.routed_around": "{selection}",
    }
    retries = {
        p.attributes["backpressure.retry.number"]: p.value
        for p in points["backpressure.retries"][1]
    }
    assert retries == {1: 2, 2: 2, 3: 1}
    namespace = {"db.namespace": "db", "db.collection.name": "coll"}
    assert dict(points["backpressure.retries"][1][0].attributes) == {
        "db.system.name": "mongodb",
        "db.operation.name": "insert",
        "server.address": host,
        "server.port": port,
        "db.response.status_code": "462",
        "backpressure.retry.number": 1,
        **namespace,
    }
    (giveup,) = points["backpressure.giveups"][1]
    assert (dict(giveup.attributes), giveup.value) == (
        {"backpressure.reason": "attempts_exhausted"},
        1,
    )
    outcomes = {
        p.attributes["backpressure.outcome"]: (p.attributes["db.system.name"], p.value)
        for p in points["backpressure.client.operations"][1]
    }
    assert outcomes == {"succeeded": ("mongodb", 1), "failed": ("mongodb", 1)}
    (per_op,) = points["backpressure.client.operation.retries"][1]
    assert dict(per_op.attributes) == {
        "db.system.name": "mongodb",
        "db.operation.name": "insert",
        "server.address": host,
        "server.port": port,
        **namespace,
    }
    assert (per_op.count, per_op.sum) == (2, 2 + 3)
    (delay,) = points["backpressure.client.operation.retry_delay"][1]
    assert delay.count == 2
    (tokens,) = points["backpressure.budget.tokens"][1]
    assert tokens.value == budget_of(client).tokens  # type: ignore[union-attr]
    assert tokens.value < 1000.0
    (ratio,) = points["backpressure.amplification"][1]
    assert ratio.value == pytest.approx(7 / 2)


async def test_opentelemetry_counts_local_waits_and_refusals(
    clients: ClientFactory,
    standalone_server: EmbeddedServer,
    otel_reader: tuple[MeterProvider, InMemoryMetricReader],
) -> None:
    """Adaptive clients, enabled before and after the call: a local wait and a local refusal."""
    provider, reader = otel_reader
    refusing = enabled_client(clients, standalone_server.uri, REFUSING)
    backpressure.metrics.enable_opentelemetry(provider)
    waiting = enabled_client(clients, standalone_server.uri, WAITING)
    host, port = standalone_server.addresses[0]

    def waits() -> float:
        points = _otel_points(reader).get("backpressure.local.waits", (None, []))[1]
        return float(sum(p.value for p in points))

    await _refuse_locally_once(refusing, standalone_server)
    await _wait_locally_once(waiting, standalone_server, waits)
    points = _otel_points(reader)
    units = {name: unit for name, (unit, _) in points.items()}
    assert units["backpressure.local.waits"] == "{wait}"
    assert units["backpressure.local.wait.duration"] == "s"
    assert units["backpressure.local.refusals"] == "{refusal}"
    (wait,) = points["backpressure.local.waits"][1]
    assert (dict(wait.attributes), wait.value) == ({"server.address": host, "server.port": port}, 1)
    (duration,) = points["backpressure.local.wait.duration"][1]
    assert duration.count == 1
    assert 0.0 < duration.sum <= 0.5
    (refusal,) = points["backpressure.local.refusals"][1]
    assert (dict(refusal.attributes), refusal.value) == (
        {"backpressure.reason": "local_wait_limit"},
        1,
    )


def test_metrics_import_neither_library_until_enabled() -> None:
    """Importing backpressure and backpressure.metrics loads no Prometheus or OTel module."""
    code = (
        "import sys, backpressure, backpressure.metrics\n"
        "bad = [m for m in sys.modules if m.startswith(('prometheus_client', 'opentelemetry'))]\n"
        "print(bad)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("call", "extra"),
    [("enable_prometheus", "prometheus"), ("enable_opentelemetry", "otel")],
)
def test_a_missing_extra_names_the_extra_to_install(call: str, extra: str) -> None:
    """Without the library, enabling raises MissingExtraError naming the pip extra."""
    blocked = "prometheus_client" if extra == "prometheus" else "opentelemetry"
    code = (
        "import sys\n"
        f"sys.modules[{blocked!r}] = None\n"
        "import backpressure, backpressure.metrics\n"
        "try:\n"
        f"    backpressure.metrics.{call}()\n"
        "except backpressure.MissingExtraError as exc:\n"
        "    print(exc.extra); print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    lines = out.stdout.splitlines()
    assert lines[0] == extra
    assert f"pip install 'pymongo-backpressure[{extra}]'" in lines[1]


def _read_concurrently(clients: ClientFactory, client: Any, count: int) -> list[Any]:
    """Start ``count`` reads at once (tasks, or threads for a sync client); await the result."""
    if clients.is_async:
        return [asyncio.ensure_future(client.db.coll.find_one({})) for _ in range(count)]
    loop = asyncio.get_running_loop()
    return [loop.run_in_executor(None, client.db.coll.find_one, {}) for _ in range(count)]


def _pacing_samples(registry: CollectorRegistry) -> dict[str, list[Any]]:
    """Sample name -> samples of the pacing families, from one scrape."""
    found: dict[str, list[Any]] = {}
    for family, samples in _scrape(registry).items():
        if family.startswith("backpressure_pacing_"):
            for sample in samples:
                found.setdefault(sample.name, []).append(sample)
    return found


async def test_prometheus_shows_each_servers_pacing(
    clients: ClientFactory, standalone_server: EmbeddedServer, registry: CollectorRegistry
) -> None:
    """Paced, rate, waiting callers, backlog, pushbacks, competing, last chances: read at scrape
    time."""
    client = enabled_client(clients, standalone_server.uri, WAITING)
    backpressure.metrics.enable_prometheus(registry, clients=[client])
    host, port = standalone_server.addresses[0]
    where = {"server_address": host, "server_port": str(port)}
    await resolve(client.db.coll.find_one({}))
    open_ = _pacing_samples(registry)
    assert _value(open_["backpressure_pacing_paced"], "backpressure_pacing_paced", **where) == 0
    assert "backpressure_pacing_rate_per_second" not in open_  # no rate while open
    await _close_pacing(client, standalone_server)
    paced = _pacing_samples(registry)
    (sample,) = paced["backpressure_pacing_paced"]
    assert (sample.labels["server_address"], sample.labels["server_port"]) == (host, str(port))
    assert sample.labels["backpressure_client"]
    assert sample.value == 1
    rate = _value(
        paced["backpressure_pacing_rate_per_second"], "backpressure_pacing_rate_per_second"
    )
    assert 2.0 <= rate < 10.0  # WAITING's floor, plus the additive increase since the close
    assert (
        _value(paced["backpressure_pacing_pushbacks_total"], "backpressure_pacing_pushbacks_total")
        == 2
    )
    assert _value(paced["backpressure_pacing_competing"], "backpressure_pacing_competing") == 0
    assert (
        _value(
            paced["backpressure_pacing_last_chance_sends_total"],
            "backpressure_pacing_last_chance_sends_total",
        )
        == 0
    )
    reads = _read_concurrently(clients, client, 4)  # 2/s: three of them wait for their slot

    def waiting() -> float:
        samples = _pacing_samples(registry)["backpressure_pacing_waiting"]
        return _value(samples, "backpressure_pacing_waiting", **where)

    await wait_for(lambda: waiting() >= 2, "two reads waiting for their send slot")
    backlog = _pacing_samples(registry)["backpressure_pacing_backlog_seconds"]
    assert _value(backlog, "backpressure_pacing_backlog_seconds", **where) > 0.0
    await asyncio.gather(*reads)
    await wait_for(lambda: waiting() == 0, "every read sent")


async def test_opentelemetry_observes_each_servers_pacing(
    clients: ClientFactory,
    standalone_server: EmbeddedServer,
    otel_reader: tuple[MeterProvider, InMemoryMetricReader],
) -> None:
    """The pacing gauges and the pushback counter are observed at collection time, with units."""
    provider, reader = otel_reader
    backpressure.metrics.enable_opentelemetry(provider)
    client = enabled_client(clients, standalone_server.uri, WAITING)
    host, port = standalone_server.addresses[0]
    await _close_pacing(client, standalone_server)
    points = _otel_points(reader)
    units = {
        name: unit for name, (unit, _) in points.items() if name.startswith("backpressure.pacing")
    }
    assert units == {
        "backpressure.pacing.paced": "{server}",
        "backpressure.pacing.rate": "{attempt}/s",
        "backpressure.pacing.waiting": "{attempt}",
        "backpressure.pacing.backlog": "s",
        "backpressure.pacing.pushbacks": "{pushback}",
        "backpressure.pacing.competing": "{server}",
        "backpressure.pacing.last_chance_sends": "{attempt}",
    }
    (paced,) = points["backpressure.pacing.paced"][1]
    attributes = dict(paced.attributes)
    assert attributes.pop("backpressure.client")
    assert attributes == {"server.address": host, "server.port": port}
    assert paced.value == 1
    (pushbacks,) = points["backpressure.pacing.pushbacks"][1]
    assert pushbacks.value == 2
    (rate,) = points["backpressure.pacing.rate"][1]
    stats_rate = backpressure.stats(client).pacing[(host, port)].rate
    assert stats_rate is not None
    assert 2.0 <= rate.value <= stats_rate  # the stats are read later: the rate only grew


BACKING_OFF = FAST.replace(base_backoff=0.02)
"""Three retries of backoffs in tens of milliseconds (jitter 1): an operation's duration is
measurably longer than its first attempt."""


def _full_jitter() -> float:
    """A random source pinned to 1 (the full backoff)."""
    return 1.0


async def _four_outcomes(client: Any, server: EmbeddedServer) -> None:
    """A find that succeeds at once, an insert retried twice, one that gives up after 4
    attempts on overload, and one failing at once on a duplicate key."""
    await resolve(client.db.coll.find_one({}))
    server.configure_fail_point(overload_fail_point(["insert"], times=2))
    await resolve(client.db.coll.insert_one({"_id": 1}))
    server.configure_fail_point(overload_fail_point(["insert"]))
    with pytest.raises(PyMongoError):
        await resolve(client.db.coll.insert_one({"_id": 2}))
    server.configure_fail_point({"configureFailPoint": "failCommand", "mode": "off"})
    with pytest.raises(DuplicateKeyError):
        await resolve(client.db.coll.insert_one({"_id": 1}))


async def test_prometheus_operation_duration(
    clients: ClientFactory,
    standalone_server: EmbeddedServer,
    registry: CollectorRegistry,
    retries: RetryRecorder,
) -> None:
    """db.client.operation.duration of a client enabled before the exporter: one series per
    command and outcome, with the server and, for a failure, its error type and code; a retried
    operation lasts at least its backoffs; the semantic conventions' buckets."""
    client = enabled_client(
        clients, standalone_server.uri, BACKING_OFF, backpressure_class=False,
        listeners=[retries], random=_full_jitter,
    )  # fmt: skip
    backpressure.metrics.enable_prometheus(registry)
    state = state_of(client)
    assert state is not None
    assert state.timed
    host, port = standalone_server.addresses[0]
    await _four_outcomes(client, standalone_server)
    samples = _scrape(registry)[DURATION]
    where = {"db_system_name": "mongodb", "server_address": host, "server_port": str(port)}
    counts = {
        tuple(s.labels[k] for k in ("db_operation_name", "error_type", "db_response_status_code")):
        s.value
        for s in samples
        if s.name == f"{DURATION}_count" and all(s.labels[k] == v for k, v in where.items())
    }  # fmt: skip
    assert counts == {
        ("find", "", ""): 1,
        ("insert", "", ""): 1,
        ("insert", "SystemOverloadedError", "462"): 1,
        ("insert", "DuplicateKeyError", "11000"): 1,
    }
    delays = retries.delays
    assert len(delays) == 2 + 3
    assert min(delays) > 0
    retried = _value(samples, f"{DURATION}_sum", db_operation_name="insert", error_type="")
    assert retried >= sum(delays[:2])
    gave_up = _value(samples, f"{DURATION}_sum", error_type="SystemOverloadedError")
    assert gave_up >= sum(delays[2:])
    assert _value(samples, f"{DURATION}_sum", db_operation_name="find") > 0.0
    bounds = {s.labels["le"] for s in samples if s.name == f"{DURATION}_bucket"}
    assert sorted(float(bound) for bound in bounds - {"+Inf"}) == list(DURATION_BUCKETS)
    backpressure.metrics.disable_metrics()
    assert not state.timed  # metrics off: no clock read on the success path again


async def test_opentelemetry_operation_duration(
    clients: ClientFactory,
    standalone_server: EmbeddedServer,
    otel_reader: tuple[MeterProvider, InMemoryMetricReader],
    retries: RetryRecorder,
) -> None:
    """The OpenTelemetry histogram db.client.operation.duration, for a client enabled after
    the reporter: the attributes of the semantic conventions, advised bucket boundaries, and
    durations at least the backoffs slept."""
    provider, reader = otel_reader
    backpressure.metrics.enable_opentelemetry(provider)
    client = enabled_client(
        clients, standalone_server.uri, BACKING_OFF, backpressure_class=False,
        listeners=[retries], random=_full_jitter,
    )  # fmt: skip
    host, port = standalone_server.addresses[0]
    await _four_outcomes(client, standalone_server)
    unit, points = _otel_points(reader)["db.client.operation.duration"]
    assert unit == "s"
    found = {(p.attributes["db.operation.name"], p.attributes.get("error.type")): p for p in points}
    assert set(found) == {
        ("find", None),
        ("insert", None),
        ("insert", "SystemOverloadedError"),
        ("insert", "DuplicateKeyError"),
    }
    server = {
        "db.system.name": "mongodb",
        "server.address": host,
        "server.port": port,
        "db.namespace": "db",
        "db.collection.name": "coll",
    }
    assert dict(found["find", None].attributes) == {"db.operation.name": "find", **server}
    assert dict(found["insert", "SystemOverloadedError"].attributes) == {
        "db.operation.name": "insert",
        "error.type": "SystemOverloadedError",
        "db.response.status_code": "462",
        **server,
    }
    assert all(p.count == 1 for p in points)
    assert all(tuple(p.explicit_bounds) == DURATION_BUCKETS for p in points)
    delays = retries.delays
    assert found["insert", None].sum >= sum(delays[:2])
    assert found["insert", "SystemOverloadedError"].sum >= sum(delays[2:])


async def test_run_command_duration(
    clients: ClientFactory,
    standalone_server: EmbeddedServer,
    registry: CollectorRegistry,
    retries: RetryRecorder,
) -> None:
    """runCommand (which pymongo 4.9-4.16 runs outside its retry loop: the backport retries the
    method itself) is timed too, its retries and backoff included."""
    client = enabled_client(
        clients, standalone_server.uri, BACKING_OFF, listeners=[retries], random=_full_jitter
    )
    backpressure.metrics.enable_prometheus(registry, clients=[client])
    standalone_server.configure_fail_point(overload_fail_point(["ping"], times=2))
    await resolve(client.db.command("ping"))
    samples = _scrape(registry)[DURATION]
    counts = [
        (s.labels["db_operation_name"], s.value) for s in samples if s.name.endswith("_count")
    ]
    assert counts == [("ping", 1)]
    assert _value(samples, f"{DURATION}_sum") >= sum(retries.delays) > 0


async def test_motor_operation_duration(
    standalone_server: EmbeddedServer, registry: CollectorRegistry
) -> None:
    """Motor's operations are timed like the others (its delegate is a sync pymongo client)."""
    backpressure.metrics.enable_prometheus(registry)
    motor = backpressure.AsyncIOMotorClient(standalone_server.uri, serverSelectionTimeoutMS=3000)
    try:
        standalone_server.configure_fail_point(overload_fail_point(["insert"], times=1))
        await motor.db.coll.insert_one({"_id": 1})
        assert await motor.db.coll.find_one({}) == {"_id": 1}
        with pytest.raises(DuplicateKeyError):
            await motor.db.coll.insert_one({"_id": 1})
    finally:
        motor.close()
    samples = _scrape(registry)[DURATION]
    counts = {
        (s.labels["db_operation_name"], s.labels["error_type"]): s.value
        for s in samples
        if s.name.endswith("_count")
    }
    assert counts == {("insert", ""): 1, ("find", ""): 1, ("insert", "DuplicateKeyError"): 1}


@NATIVE_LOOP_ONLY
async def test_forwarding_wrappers_time_operations(
    clients: ClientFactory,
    standalone_server: EmbeddedServer,
    registry: CollectorRegistry,
    retries: RetryRecorder,
) -> None:
    """The native wrappers for an unknown pymongo signature (forwarding ``*args, **kwargs``)
    time every operation as the positional ones do."""
    backpressure.metrics.enable_prometheus(registry)
    with seams.forwarding_only():
        client = enabled_client(
            clients, standalone_server.uri, BACKING_OFF, backpressure_class=False,
            listeners=[retries], random=_full_jitter,
        )  # fmt: skip
    assert wrapper_flavour(client) == "forwarding"
    await _four_outcomes(client, standalone_server)
    samples = _scrape(registry)[DURATION]
    counts = {
        (s.labels["db_operation_name"], s.labels["error_type"]): s.value
        for s in samples
        if s.name == f"{DURATION}_count"
    }
    assert counts == {
        ("find", ""): 1,
        ("insert", ""): 1,
        ("insert", "SystemOverloadedError"): 1,
        ("insert", "DuplicateKeyError"): 1,
    }
    retried = _value(samples, f"{DURATION}_sum", db_operation_name="insert", error_type="")
    assert retried >= sum(retries.delays[:2])
