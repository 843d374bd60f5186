"""OpenTelemetry instruments for the retry metrics (needs the ``otel`` extra).

Instruments of the meter ``backpressure``: one per metric of
``backpressure.metrics._catalogue.METRICS``, with its name, unit and attributes
(``db.client.operation.duration``, ``backpressure.client.operations``,
``backpressure.client.operation.retries``, ``backpressure.client.operation.retry_delay``,
``backpressure.retries``, ``backpressure.giveups``, ``backpressure.budget.tokens``,
``backpressure.amplification``, ``backpressure.local.waits``,
``backpressure.local.wait.duration``, ``backpressure.local.refusals``, ``backpressure.hedges``,
and per server of an adaptive client, observed from its pacer at collection time,
``backpressure.pacing.paced``, ``backpressure.pacing.rate``, ``backpressure.pacing.waiting``,
``backpressure.pacing.backlog``, ``backpressure.pacing.competing`` (gauges) and
``backpressure.pacing.pushbacks`` and ``backpressure.pacing.last_chance_sends`` (observable
counters)).  The two per-operation histograms
take the shape of gRPC's retry metrics (proposal A96); the attributes follow OpenTelemetry's
semantic conventions where one exists (``db.system.name``, ``db.operation.name``,
``server.address``, ``server.port``, ``db.response.status_code``, ``error.type``), whose
version the meter's ``schema_url`` names (:data:`SCHEMA_URL`).

Beyond the attributes Prometheus gets too, every instrument recorded per operation
(``db.client.operation.duration``, ``backpressure.client.operation.retries``,
``backpressure.client.operation.retry_delay``, ``backpressure.retries``) carries the
operation's ``db.namespace`` (the database) and ``db.collection.name`` (when the command names
one), as the MongoDB conventions require; the two per-operation histograms also carry the
last attempt's ``server.address`` and ``server.port``.  The retry events do not carry the
namespace: it is read from pymongo's command monitoring.  A command listener
(:class:`NamespaceListener`) notes the database and collection of each command as it starts,
in the thread or asyncio task that sends it, which is the one the operation's events are
recorded in.  The listener is registered with pymongo (``pymongo.monitoring.register``) when
the first reporter is created, so it reaches the clients created after that; pass
:func:`namespace_listener` in ``event_listeners`` to a client created before.  Without it, an
operation's instruments have no ``db.namespace`` and ``db.collection.name``.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Optional

from backpressure.core.events import Address, OperationFinishedEvent
from backpressure.core.extras import require
from backpressure.metrics._attributes import AttributeValue, server_attributes
from backpressure.metrics._catalogue import (
    AMPLIFICATION,
    BUDGET_TOKENS,
    METRICS,
    OPERATION_RETRIES,
    OPERATION_RETRY_DELAY,
    SERVER_METRICS,
    MetricSpec,
)
from backpressure.metrics._namespace import (
    NamespaceListener,
    forget_command,
    namespace_attributes,
    namespace_listener,
    register_listener,
)
from backpressure.metrics._recorder import MetricsListener
from backpressure.metrics._servers import server_readings

__all__ = ["SCHEMA_URL", "NamespaceListener", "OpenTelemetryMetrics", "namespace_listener"]

_VERSION = "0.1.0"

SCHEMA_URL = "https://opentelemetry.io/schemas/1.33.0"
"""The semantic conventions the instruments' names and attributes follow (the meter's
``schema_url``): the version whose database client conventions (``db.client.operation.duration``
and its attributes, ``db.system.name`` among them) were declared stable."""

_FINISHED_SERVER: contextvars.ContextVar[Optional[Address]] = contextvars.ContextVar(
    "backpressure_finished_server", default=None
)
"""The last attempt's server of the operation whose end is being recorded."""


def _histogram(meter: Any, name: str, unit: str, description: str, bounds: Sequence[float]) -> Any:
    """Create a histogram, advising ``bounds`` where the API supports it (1.23+)."""
    try:
        return meter.create_histogram(
            name,
            unit=unit,
            description=description,
            explicit_bucket_boundaries_advisory=list(bounds),
        )
    except TypeError:  # pragma: no cover - opentelemetry-api older than 1.23
        return meter.create_histogram(name, unit=unit, description=description)


_PER_OPERATION = (OPERATION_RETRIES, OPERATION_RETRY_DELAY)
"""The histograms of each retried operation, which get its last attempt's server here."""


class _Listener(MetricsListener):
    """The metrics listener, making an operation's last server known while its end is recorded."""

    def operation_finished(self, event: OperationFinishedEvent) -> None:
        """Record the operation's end (see :class:`MetricsListener`), then forget its last
        command: an operation that sends none (refused before it was sent) gets no namespace
        rather than the previous one's."""
        token = _FINISHED_SERVER.set(event.server)
        try:
            super().operation_finished(event)
        finally:
            _FINISHED_SERVER.reset(token)
            forget_command()


class _Instruments:
    """The synchronous instruments, fed by the listener."""

    def __init__(self, meter: Any) -> None:
        """Create the counters and histograms of ``METRICS`` on ``meter``."""
        self._instruments: dict[MetricSpec, Any] = {}
        for metric in METRICS:
            if metric in SERVER_METRICS:
                continue  # observed from the per-server snapshots (OpenTelemetryMetrics)
            if metric.kind == "counter":
                self._instruments[metric] = meter.create_counter(
                    metric.name, unit=metric.unit, description=metric.description
                )
            elif metric.kind == "histogram":
                self._instruments[metric] = _histogram(
                    meter, metric.name, metric.unit, metric.description, metric.buckets
                )

    def record(
        self, metric: MetricSpec, value: float, attributes: Mapping[str, AttributeValue]
    ) -> None:
        """Add ``value`` to a counter, or record it in a histogram, with ``attributes``."""
        instrument = self._instruments[metric]
        operation = attributes.get("db.operation.name")
        if operation is not None:
            extra = namespace_attributes(operation)
            if metric in _PER_OPERATION and "server.address" not in attributes:
                extra.update(server_attributes(_FINISHED_SERVER.get()))
            if extra:
                attributes = {**attributes, **extra}
        if metric.kind == "counter":
            instrument.add(value, attributes)
        else:
            instrument.record(value, attributes)


class OpenTelemetryMetrics:
    """The metrics of the covered clients, reported through one OpenTelemetry meter provider."""

    def __init__(
        self,
        meter_provider: Optional[Any] = None,
        clients: Optional[Iterable[Any]] = None,
        *,
        window: float = 60.0,
    ) -> None:
        """Create the instruments on ``meter_provider`` (the global one if None).

        Raises:
            MissingExtraError: opentelemetry-api is not installed.
            ValueError: one of ``clients`` is not enabled.
        """
        api = require("opentelemetry.metrics", "otel", "OpenTelemetry metrics")
        self._api = api
        self.meter_provider: Any = (
            api.get_meter_provider() if meter_provider is None else meter_provider
        )
        """The meter provider the instruments belong to."""
        meter = self.meter_provider.get_meter("backpressure", _VERSION, schema_url=SCHEMA_URL)
        register_listener()
        self.listener: MetricsListener = _Listener(_Instruments(meter), clients, window=window)
        namespace_listener().hold()
        self._holding = True
        """The listener attached to the covered clients."""
        for metric, callback in (
            (BUDGET_TOKENS, self._observe_budgets),
            (AMPLIFICATION, self._observe_amplification),
        ):
            meter.create_observable_gauge(
                metric.name,
                callbacks=[callback],
                unit=metric.unit,
                description=metric.description,
            )
        for metric in SERVER_METRICS:
            create = (
                meter.create_observable_counter
                if metric.kind == "counter"
                else meter.create_observable_gauge
            )
            create(
                metric.name,
                callbacks=[self._pacing_callback(metric)],
                unit=metric.unit,
                description=metric.description,
            )

    def _pacing_callback(self, metric: MetricSpec) -> Any:
        """Return the callback reporting ``metric`` for every server a pacer or a server
        choice knows."""

        def observe(_options: Any) -> Iterator[Any]:
            for attributes, value in server_readings(metric, self.listener.servers()):
                yield self._api.Observation(value, attributes)

        return observe

    def _observe_budgets(self, _options: Any) -> Iterator[Any]:
        """Report the budget of every covered client."""
        for label, tokens in self.listener.budget_tokens():
            yield self._api.Observation(tokens, {BUDGET_TOKENS.attributes[0]: label})

    def _observe_amplification(self, _options: Any) -> Iterator[Any]:
        """Report the amplification of the sliding window."""
        if self.listener.covered_states():
            yield self._api.Observation(self.listener.amplification())

    def close(self) -> None:
        """Detach from the clients; the gauges stop reporting (instruments cannot be removed)."""
        if self._holding:
            self._holding = False
            namespace_listener().release()
        self.listener.close()
