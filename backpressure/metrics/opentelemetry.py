"""OpenTelemetry instruments for the retry metrics (needs the ``otel`` extra).

Instruments of the meter ``backpressure``: one per metric of
``backpressure.metrics._recorder.METRICS``, with its name, unit and attributes
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
``server.address``, ``server.port``, ``db.response.status_code``, ``error.type``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Optional

from backpressure.core.extras import require
from backpressure.metrics._recorder import (
    AMPLIFICATION,
    BUDGET_TOKENS,
    METRICS,
    PACING_GAUGES,
    AttributeValue,
    MetricsListener,
    MetricSpec,
    pacing_value,
)

__all__ = ["OpenTelemetryMetrics"]

_VERSION = "0.1.0"


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


class _Instruments:
    """The synchronous instruments, fed by the listener."""

    def __init__(self, meter: Any) -> None:
        """Create the counters and histograms of ``METRICS`` on ``meter``."""
        self._instruments: dict[MetricSpec, Any] = {}
        for metric in METRICS:
            if metric in PACING_GAUGES:
                continue  # observed from the pacers' snapshots (OpenTelemetryMetrics)
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
        meter = self.meter_provider.get_meter("backpressure", _VERSION)
        self.listener = MetricsListener(_Instruments(meter), clients, window=window)
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
        for metric in PACING_GAUGES:
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
        """Return the callback reporting ``metric`` for every server a pacer knows."""

        def observe(_options: Any) -> Iterator[Any]:
            for attributes, snapshot in self.listener.pacing():
                value = pacing_value(metric, snapshot)
                if value is not None:
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
        self.listener.close()
