"""Prometheus exposition of the retry metrics (needs the ``prometheus`` extra).

One custom collector per registry serves, at scrape time, every metric of
``backpressure.metrics._catalogue.METRICS`` under its OpenTelemetry name mapped to Prometheus
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

**Multiprocess mode.** When ``PROMETHEUS_MULTIPROC_DIR`` is set (prometheus-client's
multiprocess mode, for gunicorn or uWSGI workers), a custom collector would only ever show the
process serving the scrape. So the same families are prometheus-client's own ``Counter``,
``Histogram`` and ``Gauge`` objects instead, whose values each process writes to files in that
directory, and which ``prometheus_client.multiprocess.MultiProcessCollector`` adds up over the
processes. Counters and histograms are summed. The gauges, read from the clients, are written
every ``GAUGE_INTERVAL`` seconds by a thread of each process, and aggregated over the live
processes as ``MULTIPROCESS_MODES`` says: the ones the dashboard and the alerts sum (paced,
waiting and competing clients) summed, the backlog as its maximum, and the ones they take the
minimum, maximum and mean of (budget tokens, amplification, paced rate) one series per process
(a ``pid`` label). A gauge whose client or server is gone is written as 0 (summed ones, the
backlog) or NaN (per-process ones; Prometheus's ``min``, ``max`` and ``avg`` skip NaN). The
processes' files are removed with ``mark_process_dead(pid)`` when a worker exits (gunicorn's
``child_exit`` hook): see docs/production.md.
"""

from __future__ import annotations

import bisect
import contextlib
import math
import os
import threading
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Optional

from backpressure.core.extras import require
from backpressure.metrics._attributes import AttributeValue
from backpressure.metrics._catalogue import (
    AMPLIFICATION,
    BUDGET_TOKENS,
    CHOICE_AVOIDED,
    CHOICE_SIGNAL,
    METRICS,
    PACING_BACKLOG,
    PACING_COMPETING,
    PACING_PACED,
    PACING_RATE,
    PACING_WAITING,
    SERVER_METRICS,
    MetricSpec,
)
from backpressure.metrics._recorder import MetricsListener
from backpressure.metrics._servers import server_readings

__all__ = ["GAUGE_INTERVAL", "MULTIPROCESS_MODES", "PrometheusMetrics", "multiprocess_dir"]

MULTIPROCESS_MODES: Mapping[MetricSpec, str] = {
    BUDGET_TOKENS: "liveall",
    AMPLIFICATION: "liveall",
    PACING_PACED: "livesum",
    PACING_RATE: "liveall",
    PACING_WAITING: "livesum",
    PACING_BACKLOG: "livemax",
    PACING_COMPETING: "livesum",
    CHOICE_SIGNAL: "liveall",
    CHOICE_AVOIDED: "livesum",
}
"""How multiprocess mode aggregates each gauge over the live processes (prometheus-client's
``multiprocess_mode``): ``liveall`` keeps one series per process (``pid`` label)."""

GAUGE_INTERVAL = 1.0
"""Seconds between two writes of the gauges in multiprocess mode."""


def multiprocess_dir() -> Optional[str]:
    """The directory of prometheus-client's multiprocess mode (None: not in that mode).

    ``PROMETHEUS_MULTIPROC_DIR`` (or its old name ``prometheus_multiproc_dir``), as
    prometheus-client reads it: set it before the process starts, in every worker.
    """
    old_name = "prometheus_multiproc_dir"  # prometheus-client reads both
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or os.environ.get(old_name)


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


def _label_values(metric: MetricSpec, attributes: Mapping[str, AttributeValue]) -> _Labels:
    """The values of ``metric``'s labels in ``attributes`` (an absent one is "")."""
    return tuple(str(attributes.get(name, "")) for name in metric.attributes)


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
        labels = _label_values(metric, attributes)
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
                    family.add_metric(list(_label_values(metric, attributes)), value)
            elif metric.kind == "histogram":
                for labels, (buckets, total) in sorted(histograms.get(metric, {}).items()):
                    family.add_metric(list(labels), buckets, total)
            else:
                for labels, count in sorted(counters.get(metric, {}).items()):
                    family.add_metric(list(labels), count)
            yield family


class _FileMetrics:
    """prometheus-client's metric objects for every family (multiprocess mode: their values
    go to the files of ``PROMETHEUS_MULTIPROC_DIR``); registered in no registry, since a
    ``MultiProcessCollector`` serves them."""

    def __init__(self) -> None:
        """Create one object per metric of ``METRICS``."""
        client = require("prometheus_client", "prometheus", "Prometheus metrics")
        self.objects: dict[MetricSpec, Any] = {}
        for metric in METRICS:
            labels = metric.prometheus_labels
            name, doc = metric.prometheus_name, metric.description
            if metric.kind == "histogram":
                made = client.Histogram(name, doc, labels, registry=None, buckets=metric.buckets)
            elif metric.kind == "counter":
                made = client.Counter(name, doc, labels, registry=None)
            else:
                mode = MULTIPROCESS_MODES[metric]
                made = client.Gauge(name, doc, labels, registry=None, multiprocess_mode=mode)
            self.objects[metric] = made

    def series(self, metric: MetricSpec, labels: Sequence[str]) -> Any:
        """The child of ``metric`` for ``labels`` (the metric itself without labels)."""
        found = self.objects[metric]
        return found.labels(*labels) if labels else found

    def record(
        self, metric: MetricSpec, value: float, attributes: Mapping[str, AttributeValue]
    ) -> None:
        """Add ``value`` to a counter, or observe it in a histogram (absent labels are "")."""
        series = self.series(metric, _label_values(metric, attributes))
        if metric.kind == "histogram":
            series.observe(value)
        else:
            series.inc(value)


_FILE_METRICS: Optional[_FileMetrics] = None
_FILE_LOCK = threading.Lock()


def _file_metrics() -> _FileMetrics:
    """The process's one set of file-backed metrics (two sets would overwrite each other's
    values in the same files)."""
    global _FILE_METRICS
    with _FILE_LOCK:
        if _FILE_METRICS is None:
            _FILE_METRICS = _FileMetrics()
        return _FILE_METRICS


class _GaugeWriter:
    """Writes the gauges (and the pacers' counts) read from the clients into the files."""

    def __init__(self, files: _FileMetrics, listener: MetricsListener) -> None:
        """Write for the clients of ``listener``; start the thread that writes every second."""
        self._files = files
        self._listener = listener
        self._lock = threading.Lock()
        self._written: dict[MetricSpec, set[tuple[str, ...]]] = {}
        self._counted: dict[tuple[MetricSpec, tuple[str, ...]], float] = {}
        self._stopping = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.start()

    def after_fork(self) -> None:
        """In a forked child: a new lock, and the writing thread started again."""
        self._lock = threading.Lock()
        self.start()

    def start(self) -> None:
        """Start the writing thread."""
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="backpressure-prometheus-gauges", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        """Write now, then every ``GAUGE_INTERVAL`` seconds until stopped."""
        stopping = self._stopping
        self.write()
        while not stopping.wait(GAUGE_INTERVAL):
            self.write()

    def _current(self) -> dict[MetricSpec, dict[tuple[str, ...], float]]:
        """The values to write now, by metric and labels."""
        listener = self._listener
        current: dict[MetricSpec, dict[tuple[str, ...], float]] = {
            BUDGET_TOKENS: {(label,): tokens for label, tokens in listener.budget_tokens()},
            AMPLIFICATION: {(): listener.amplification()},
        }
        servers = listener.servers()
        for metric in SERVER_METRICS:
            readings = server_readings(metric, servers)
            current[metric] = {_label_values(metric, attributes): v for attributes, v in readings}
        return current

    def write(self, *, closing: bool = False) -> None:
        """Write every gauge now; a series gone since the last write (or all of them when
        ``closing``) is written as 0 or NaN (see the module's docstring)."""
        current = {} if closing else self._current()
        with self._lock:
            for metric in (BUDGET_TOKENS, AMPLIFICATION, *SERVER_METRICS):
                values = current.get(metric, {})
                if metric.kind == "counter":
                    self._count(metric, values)
                    continue
                idle = math.nan if MULTIPROCESS_MODES[metric] == "liveall" else 0.0
                for labels in self._written.get(metric, set()) - set(values):
                    self._files.series(metric, labels).set(idle)
                for labels, value in values.items():
                    self._files.series(metric, labels).set(value)
                self._written[metric] = set(values)

    def _count(self, metric: MetricSpec, values: Mapping[tuple[str, ...], float]) -> None:
        """Add to a counter what a pacer counted since the last write (lock held)."""
        for labels, value in values.items():
            before = self._counted.get((metric, labels), 0.0)
            added = value - before if value >= before else value  # a new pacer: from 0
            if added > 0:
                self._files.series(metric, labels).inc(added)
            self._counted[metric, labels] = value

    def stop(self) -> None:
        """Stop the thread; write the gauges one last time as gone."""
        self._stopping.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=30)
        self.write(closing=True)


_WRITERS: weakref.WeakSet[_GaugeWriter] = weakref.WeakSet()
"""The writers of open exporters, started again in a forked child (a thread does not survive
a fork: with gunicorn's ``preload_app`` the exporter may be enabled before it)."""


def _restart_writers() -> None:
    """In a forked child: start every open exporter's writing thread again, with new locks
    (the parent's thread may have held one when the process forked)."""
    global _FILE_LOCK
    _FILE_LOCK = threading.Lock()
    for writer in list(_WRITERS):
        writer.after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_restart_writers)


class PrometheusMetrics:
    """The metrics of the covered clients, registered in one prometheus-client registry (in
    multiprocess mode: written to ``PROMETHEUS_MULTIPROC_DIR``, see the module's docstring)."""

    def __init__(
        self,
        registry: Optional[Any] = None,
        clients: Optional[Iterable[Any]] = None,
        *,
        window: float = 60.0,
    ) -> None:
        """Register the collector in ``registry`` (prometheus-client's default one if None).

        In multiprocess mode nothing is registered: the values go to the files of
        ``PROMETHEUS_MULTIPROC_DIR``, which a ``MultiProcessCollector`` serves.

        Raises:
            MissingExtraError: prometheus-client is not installed.
            ValueError: one of ``clients`` is not enabled, or the registry already has
                metrics of these names.
        """
        client_registry = require("prometheus_client.registry", "prometheus", "Prometheus metrics")
        self.registry: Any = client_registry.REGISTRY if registry is None else registry
        """The prometheus-client registry the collector is registered in."""
        self.multiprocess = multiprocess_dir() is not None
        """Whether the metrics are written for prometheus-client's multiprocess mode."""
        self._writer: Optional[_GaugeWriter] = None
        self._collector: Optional[_Collector] = None
        if self.multiprocess:
            files = _file_metrics()
            self.listener = MetricsListener(files, clients, window=window)
            self._writer = _GaugeWriter(files, self.listener)
            _WRITERS.add(self._writer)
            return
        self._aggregates = _Aggregates()
        self.listener = MetricsListener(self._aggregates, clients, window=window)
        """The listener attached to the covered clients."""
        self._collector = _Collector(self._aggregates, self.listener)
        try:
            self.registry.register(self._collector)
        except BaseException:
            self.listener.close()
            raise

    def write_gauges(self) -> None:
        """Multiprocess mode: write the gauges now (a thread does every ``GAUGE_INTERVAL``
        seconds), for example before a worker exits. Otherwise nothing to do: the gauges
        are read at scrape time."""
        if self._writer is not None:
            self._writer.write()

    def close(self) -> None:
        """Unregister the collector and detach from the clients (multiprocess mode: write
        their gauges as gone)."""
        self.listener.close()
        if self._writer is not None:
            _WRITERS.discard(self._writer)
            self._writer.stop()
        if self._collector is not None:
            with contextlib.suppress(KeyError):  # already unregistered by the user
                self.registry.unregister(self._collector)
