"""Prometheus in one process: the listener's aggregates and the collector serving them at scrape.

``Aggregates`` is the ``MetricsBackend`` of a single process: it adds up counters and histogram
buckets per label values.  ``Collector`` is the prometheus-client custom collector that, at
scrape time, serves every family of ``METRICS`` from those aggregates and from the gauges the
listener reads (budgets, amplification, per-server snapshots).  prometheus-client is imported
only when a collector is created.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from backpressure.core.extras import require
from backpressure.metrics._attributes import AttributeValue
from backpressure.metrics._catalogue import (
    AMPLIFICATION,
    BUDGET_TOKENS,
    METRICS,
    SERVER_METRICS,
    MetricSpec,
)
from backpressure.metrics._recorder import MetricsListener
from backpressure.metrics._servers import server_readings

__all__ = ["Aggregates", "Collector"]


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


class Aggregates:
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
        labels = metric.label_values(attributes)
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


class Collector:
    """The prometheus-client collector serving every metric family of ``METRICS``."""

    def __init__(self, aggregates: Aggregates, listener: MetricsListener) -> None:
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
        servers = self._listener.servers()
        for metric in METRICS:
            family = self._family(metric)
            if metric is BUDGET_TOKENS:
                for label, tokens in self._listener.budget_tokens():
                    family.add_metric([label], tokens)
            elif metric is AMPLIFICATION:
                family.add_metric([], self._listener.amplification())
            elif metric in SERVER_METRICS:
                for attributes, value in server_readings(metric, servers):
                    family.add_metric(list(metric.label_values(attributes)), value)
            elif metric.kind == "histogram":
                for labels, (buckets, total) in sorted(histograms.get(metric, {}).items()):
                    family.add_metric(list(labels), buckets, total)
            else:
                for labels, count in sorted(counters.get(metric, {}).items()):
                    family.add_metric(list(labels), count)
            yield family
