"""Each attempt of a retried command is a span (docs/observability.md, OpenTelemetry).

Needs ``pip install 'pymongo-backpressure[server]' opentelemetry-sdk``
``opentelemetry-instrumentation-pymongo``: the SDK, its exporters and pymongo's
instrumentation are the application's choice (the package does not use them).
"""

from opentelemetry import trace
from opentelemetry.instrumentation.pymongo import PymongoInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import backpressure
from backpressure.testing import EmbeddedServer

exporter = InMemorySpanExporter()  # in production: BatchSpanProcessor, an OTLP exporter
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
# A span per command pymongo sends, so per attempt: instrument before creating clients.
PymongoInstrumentor().instrument(tracer_provider=provider)
tracer = provider.get_tracer("shop")


class RetryEvents:
    """Marks each retry the package decides on the application's span."""

    def retried(self, event):
        trace.get_current_span().add_event(
            "backpressure.retry",
            {
                "db.operation.name": event.operation,
                "db.response.status_code": str(event.error_code),
                "backpressure.retry.number": event.attempt,
                "backpressure.retry.delay": event.delay,
            },
        )

    def gave_up(self, event):
        reason = event.reason.name.lower()
        trace.get_current_span().add_event("backpressure.giveup", {"reason": reason})


OVERLOADED_TWICE = {
    "mode": {"times": 2},
    "data": {
        "failCommands": ["insert"],
        "errorCode": 462,
        "errorLabels": ["SystemOverloadedError", "RetryableError"],
    },
}

with EmbeddedServer("standalone") as server:
    server.configure_fail_point(OVERLOADED_TWICE)  # the insert is sent three times
    client = backpressure.MongoClient(server.uri, backpressure_listeners=[RetryEvents()])
    with client, tracer.start_as_current_span("place order"):
        client.shop.orders.insert_one({"item": "tea"})

spans = exporter.get_finished_spans()
(order,) = [span for span in spans if span.name == "place order"]
attempts = [
    span
    for span in spans
    if span.parent is not None and span.parent.span_id == order.context.span_id
]
for number, span in enumerate(attempts, start=1):
    print(f"attempt {number}: {span.name} {span.status.status_code.name}")
for event in order.events:
    number = event.attributes["backpressure.retry.number"]
    print(f"{event.name} {number}: {event.attributes['db.response.status_code']}")
print(all(span.context.trace_id == order.context.trace_id for span in attempts))
PymongoInstrumentor().uninstrument()
provider.shutdown()
