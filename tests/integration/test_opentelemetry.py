"""OpenTelemetry on real clients against the embedded server: the namespace of each operation
on the instruments (``db.namespace``, ``db.collection.name``), the meter's schema URL, and how
each attempt and each retry appears in a trace (pymongo's instrumentation and the SDK's
in-memory span exporter; ``docs/examples/otel_traces.py`` runs as the docs show it)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.instrumentation.pymongo import PymongoInstrumentor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from pymongo.errors import PyMongoError

import backpressure
import backpressure.metrics
from backpressure import LocalOverloadError
from backpressure.core.events import OperationFinishedEvent
from backpressure.metrics.opentelemetry import SCHEMA_URL, NamespaceListener
from backpressure.testing.server.embedded import EmbeddedServer
from tests.integration.conftest import (
    FAST_BACKOFF,
    ClientFactory,
    RetryRecorder,
    enabled_client,
    overload_fail_point,
    resolve,
)
from tests.integration.test_metrics import REFUSING, _close_pacing

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def otel_reader() -> Iterator[InMemoryMetricReader]:
    """The package's instruments on an SDK meter provider read in memory (closed after)."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    backpressure.metrics.enable_opentelemetry(provider)
    yield reader
    backpressure.metrics.disable_metrics()
    provider.shutdown()


def _points(reader: InMemoryMetricReader, name: str) -> list[Any]:
    """The data points of the package's instrument ``name``; checks the scope's schema URL."""
    data = reader.get_metrics_data()
    assert data is not None
    found: list[Any] = []
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            if scope.scope.name != "backpressure":
                continue
            assert scope.scope.schema_url == SCHEMA_URL
            for metric in scope.metrics:
                if metric.name == name:
                    found.extend(metric.data.data_points)
    return found


async def test_instruments_carry_each_operations_namespace(
    clients: ClientFactory, standalone_server: EmbeddedServer, otel_reader: InMemoryMetricReader
) -> None:
    """Each operation's duration has its database and collection, a retried one's histograms
    and retries too (with its server), whatever ran before it on the same client."""
    client = enabled_client(clients, standalone_server.uri, FAST_BACKOFF)
    host, port = standalone_server.addresses[0]
    await resolve(client.shop.items.insert_one({"_id": 1}))
    standalone_server.configure_fail_point(overload_fail_point(["insert"], times=1))
    await resolve(client.shop.orders.insert_one({"item": "tea"}))
    assert await resolve(client.stock.items.find_one({"_id": 1})) is None
    durations = {
        (
            p.attributes["db.operation.name"],
            p.attributes["db.namespace"],
            p.attributes["db.collection.name"],
        ): p.count
        for p in _points(otel_reader, "db.client.operation.duration")
    }
    assert durations == {
        ("insert", "shop", "items"): 1,
        ("insert", "shop", "orders"): 1,
        ("find", "stock", "items"): 1,
    }
    server = {"server.address": host, "server.port": port}
    retried = {
        "db.system.name": "mongodb",
        "db.operation.name": "insert",
        "db.namespace": "shop",
        "db.collection.name": "orders",
        **server,
    }
    for name in ("backpressure.client.operation.retries", "backpressure.retries"):
        (point,) = _points(otel_reader, name)
        assert {k: v for k, v in point.attributes.items() if k in retried} == retried, name


async def test_an_operation_that_sent_nothing_has_no_namespace(
    clients: ClientFactory, standalone_server: EmbeddedServer, otel_reader: InMemoryMetricReader
) -> None:
    """An insert the adaptive pacing refused before sending it does not take the namespace of
    the insert before it on the same thread or task."""
    client = enabled_client(clients, standalone_server.uri, REFUSING)
    await _close_pacing(client, standalone_server)  # an insert into db.coll, retried
    with pytest.raises(LocalOverloadError):
        await resolve(client.shop.orders.insert_one({"refused": True}))
    found = {
        p.attributes.get("error.type"): dict(p.attributes)
        for p in _points(otel_reader, "db.client.operation.duration")
    }
    assert found[None]["db.namespace"] == "db"
    assert found[None]["db.collection.name"] == "coll"
    refused = found["LocalOverloadError"]
    assert "db.namespace" not in refused
    assert "db.collection.name" not in refused


def test_namespace_listener_notes_nothing_without_a_reporter() -> None:
    """The listener pymongo keeps once registered is idle while no reporter is open."""
    listener = NamespaceListener()
    event: Any = None  # never read: started returns before looking at the event
    listener.started(event)
    listener.hold()
    listener.release()
    listener.started(event)


@pytest.fixture(scope="module")
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    """pymongo's instrumentation on an SDK tracer provider whose spans are kept in memory.

    Instrumented once for the module: the instrumentation keeps the first provider it is given
    (its command listener cannot be unregistered from pymongo, ``uninstrument`` mutes it).
    """
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = PymongoInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    yield provider, exporter
    instrumentor.uninstrument()
    provider.shutdown()


def _children(spans: InMemorySpanExporter, parent: ReadableSpan, name: str) -> list[ReadableSpan]:
    """The spans named ``name`` under ``parent``, in the order they started."""
    found = [
        span
        for span in spans.get_finished_spans()
        if span.name == name
        and span.parent is not None
        and span.parent.span_id == parent.context.span_id
    ]
    return sorted(found, key=lambda span: span.start_time or 0)


def _span(spans: InMemorySpanExporter, name: str) -> ReadableSpan:
    (found,) = [span for span in spans.get_finished_spans() if span.name == name]
    return found


async def test_each_attempt_of_a_retried_command_is_a_span(
    clients: ClientFactory,
    standalone_server: EmbeddedServer,
    spans: tuple[TracerProvider, InMemorySpanExporter],
    retries: RetryRecorder,
) -> None:
    """Two overloads then a success: three command spans under the application's span, one
    after the other, the first two failed with the server's error; a read alone is one."""
    provider, exporter = spans
    exporter.clear()
    tracer = provider.get_tracer("test")
    client = enabled_client(clients, standalone_server.uri, FAST_BACKOFF, listeners=[retries])
    standalone_server.configure_fail_point(overload_fail_point(["insert"], times=2))
    with tracer.start_as_current_span("place order"):
        await resolve(client.shop.orders.insert_one({"item": "tea"}))
    with tracer.start_as_current_span("read order"):
        await resolve(client.shop.orders.find_one({"item": "tea"}))
    order = _span(exporter, "place order")
    attempts = _children(exporter, order, "shop.insert")
    assert len(attempts) == 3 == len(retries.retries) + 1
    assert [span.status.status_code for span in attempts] == [
        StatusCode.ERROR,
        StatusCode.ERROR,
        StatusCode.UNSET,
    ]
    for first, second in zip(attempts, attempts[1:]):
        assert first.end_time is not None
        assert second.start_time is not None
        assert first.end_time <= second.start_time
    assert {span.context.trace_id for span in attempts} == {order.context.trace_id}
    assert len(_children(exporter, _span(exporter, "read order"), "shop.find")) == 1


class _Finished:
    """Keeps every finished operation (an OperationListener)."""

    def __init__(self) -> None:
        self.events: list[OperationFinishedEvent] = []

    def operation_finished(self, event: OperationFinishedEvent) -> None:
        self.events.append(event)


async def test_under_the_rate_limiter_spans_are_the_attempts(
    clients: ClientFactory,
    standalone_server: EmbeddedServer,
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    """With the server's ingress limiter admitting 2 requests/s, each insert has as many spans
    as the attempts the package counted, a retry event on its span for each retry."""
    provider, exporter = spans
    exporter.clear()
    tracer = provider.get_tracer("test")
    finished = _Finished()

    class RetryEvents:
        def retried(self, event: Any) -> None:
            trace.get_current_span().add_event("retry", {"number": event.attempt})

    client = enabled_client(
        clients, standalone_server.uri, FAST_BACKOFF, listeners=[finished, RetryEvents()]
    )
    await resolve(client.shop.command("ping"))
    standalone_server.set_rate_limit(2, burst_seconds=0.5)
    inserts = 6
    for number in range(inserts):
        span = tracer.start_as_current_span(f"insert {number}")
        with span, contextlib.suppress(PyMongoError):
            await resolve(client.shop.orders.insert_one({"n": number}))
    standalone_server.disable_rate_limit()
    operations = [event for event in finished.events if event.operation == "insert"]
    assert len(operations) == inserts
    assert any(event.attempts > 1 for event in operations)  # the limiter did push back
    for number, event in enumerate(operations):
        span = _span(exporter, f"insert {number}")
        assert len(_children(exporter, span, "shop.insert")) == event.attempts
        assert [e.attributes["number"] for e in span.events] == list(range(1, event.retries + 1))


def test_docs_example_prints_each_attempt(tmp_path: Path) -> None:
    """docs/examples/otel_traces.py prints the three attempts and two retries (in a process of
    its own: the instrumentation keeps the first tracer provider of a process)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-W", "error", str(ROOT / "docs" / "examples" / "otel_traces.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=100,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "attempt 1: shop.insert ERROR",
        "attempt 2: shop.insert ERROR",
        "attempt 3: shop.insert UNSET",
        "backpressure.retry 1: 462",
        "backpressure.retry 2: 462",
        "True",
    ]
