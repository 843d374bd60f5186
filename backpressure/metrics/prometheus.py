"""Prometheus exposition of the retry metrics (needs the ``prometheus`` extra).

One custom collector per registry serves, at scrape time, every metric of
``backpressure.metrics._recorder.METRICS`` under its OpenTelemetry name mapped to Prometheus
(``MetricSpec.prometheus_name``; the labels are the attributes with underscores for dots):
``db_client_operation_duration_seconds`` (histogram), ``backpressure_client_operations_total``,
``backpressure_client_operation_retries`` and
``backpressure_client_operation_retry_delay_seconds`` (histograms), ``backpressure_retries_total``,
``backpressure_giveups_total``, ``backpressure_budget_tokens`` and
``backpressure_amplification_ratio`` (gauges), ``backpressure_local_waits_total``,
``backpressure_local_wait_duration_seconds`` (histogram), ``backpressure_local_refusals_total``
and ``backpressure_hedges_total``; per server of an adaptive client, read from its pacer at
scrape time, ``backpressure_pacing_paced``, ``backpressure_pacing_rate_per_second``,
``backpressure_pacing_waiting``, ``backpressure_pacing_backlog_seconds``,
``backpressure_pacing_pushbacks_total``, ``backpressure_pacing_competing`` and
``backpressure_pacing_last_chance_sends_total``.
"""

from __future__ import annotations

import bisect
import contextlib
import threading
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

__all__ = ["PrometheusMetrics"]


class _Histogram:
    """Bucket counts and sum of observed values (cumulative counts are built at scrape)."""

    def __init__(self, bounds: Sequence[float]) -> None:
        """Count values per bound of ``bounds`` (ascending) plus one overflow slot."""
        self.bounds = tuple(float(bound) for bound in bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        """Add ``value`` (caller holds the lock)."""
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    def buckets(self) -> list[tuple[str, float]]:
        """Return cumulative ``(le, count)`` pairs, ``+Inf`` last (caller holds the lock)."""
        pairs: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts):
            running += count
            pairs.append(("+Inf" if bound == float("inf") else repr(bound), float(running)))
        return pairs


_Labels = tuple[str, ...]


class _Aggregates:
    """The counters and histograms the listener fills and the collector reads."""

    def __init__(self) -> None:
        """Start empty."""
        self.lock = threading.Lock()
        self.counters: dict[MetricSpec, dict[_Labels, float]] = {}
        self.histograms: dict[MetricSpec, dict[_Labels, _Histogram]] = {}

    def record(
        self, metric: MetricSpec, value: float, attributes: Mapping[str, AttributeValue]
    ) -> None:
        """Add ``value`` to a counter, or observe it in a histogram (absent labels are "")."""
        labels = tuple(str(attributes.get(name, "")) for name in metric.attributes)
        with self.lock:
            if metric.kind == "histogram":
                series = self.histograms.setdefault(metric, {})
                histogram = series.get(labels)
                if histogram is None:
                    histogram = series[labels] = _Histogram(metric.buckets)
                histogram.observe(value)
            else:
                counts = self.counters.setdefault(metric, {})
                counts[labels] = counts.get(labels, 0) + value

    def snapshot(
        self,
    ) -> tuple[
        dict[MetricSpec, dict[_Labels, float]],
        dict[MetricSpec, dict[_Labels, tuple[list[tuple[str, float]], float]]],
    ]:
        """Copy the counters and the histograms' cumulative buckets and sums."""
        with self.lock:
            counters = {metric: dict(series) for metric, series in self.counters.items()}
            histograms = {
                metric: {labels: (h.buckets(), h.total) for labels, h in series.items()}
                for metric, series in self.histograms.items()
            }
        return counters, histograms


class _Collector:
    """The prometheus-client collector serving every metric family of ``METRICS``."""

    def __init__(self, aggregates: _Aggregates, listener: MetricsListener) -> None:
        """Serve ``aggregates`` and the gauges of ``listener``."""
        self._aggregates = aggregates
        self._listener = listener
        self._core = require("prometheus_client.core", "prometheus", "Prometheus metrics")

    def _family(self, metric: MetricSpec) -> Any:
        """An empty family of ``metric`` (its type, name, help and labels)."""
        core = self._core
        kinds = {
            "counter": core.CounterMetricFamily,
            "histogram": core.HistogramMetricFamily,
            "gauge": core.GaugeMetricFamily,
        }
        unit = "seconds" if metric.unit == "s" else ""
        return kinds[metric.kind](
            metric.prometheus_name,
            metric.description,
            labels=metric.prometheus_labels,
            unit=unit,
        )

    def describe(self) -> Iterator[Any]:
        """Yield the families without samples (lets the registry detect name clashes)."""
        for metric in METRICS:
            yield self._family(metric)

    def collect(self) -> Iterator[Any]:
        """Yield every metric family with its current values."""
        counters, histograms = self._aggregates.snapshot()
        pacing = self._listener.pacing()
        for metric in METRICS:
            family = self._family(metric)
            if metric is BUDGET_TOKENS:
                for label, tokens in self._listener.budget_tokens():
                    family.add_metric([label], tokens)
            elif metric is AMPLIFICATION:
                family.add_metric([], self._listener.amplification())
            elif metric in PACING_GAUGES:
                for attributes, snapshot in pacing:
                    value = pacing_value(metric, snapshot)
                    if value is not None:
                        values = [str(attributes[name]) for name in metric.attributes]
                        family.add_metric(values, value)
            elif metric.kind == "histogram":
                for labels, (buckets, total) in sorted(histograms.get(metric, {}).items()):
                    family.add_metric(list(labels), buckets, total)
            else:
                for labels, count in sorted(counters.get(metric, {}).items()):
                    family.add_metric(list(labels), count)
            yield family


class PrometheusMetrics:
    """The metrics of the covered clients, registered in one prometheus-client registry."""

    def __init__(
        self,
        registry: Optional[Any] = None,
        clients: Optional[Iterable[Any]] = None,
        *,
        window: float = 60.0,
    ) -> None:
        """Register the collector in ``registry`` (prometheus-client's default one if None).

        Raises:
            MissingExtraError: prometheus-client is not installed.
            ValueError: one of ``clients`` is not enabled, or the registry already has
                metrics of these names.
        """
        client_registry = require("prometheus_client.registry", "prometheus", "Prometheus metrics")
        self.registry: Any = client_registry.REGISTRY if registry is None else registry
        """The prometheus-client registry the collector is registered in."""
        self._aggregates = _Aggregates()
        self.listener = MetricsListener(self._aggregates, clients, window=window)
        """The listener attached to the covered clients."""
        self._collector = _Collector(self._aggregates, self.listener)
        try:
            self.registry.register(self._collector)
        except BaseException:
            self.listener.close()
            raise

    def close(self) -> None:
        """Unregister the collector and detach from the clients."""
        self.listener.close()
        with contextlib.suppress(KeyError):  # already unregistered by the user
            self.registry.unregister(self._collector)
