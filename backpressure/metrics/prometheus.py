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

import contextlib
from collections.abc import Iterable
from typing import Any, Optional

from backpressure.core.extras import require
from backpressure.metrics._prometheus_collector import Aggregates, Collector
from backpressure.metrics._prometheus_multiprocess import (
    GAUGE_INTERVAL,
    MULTIPROCESS_MODES,
    GaugeWriter,
    file_metrics,
    multiprocess_dir,
)
from backpressure.metrics._recorder import MetricsListener

__all__ = ["GAUGE_INTERVAL", "MULTIPROCESS_MODES", "PrometheusMetrics", "multiprocess_dir"]


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
        self._writer: Optional[GaugeWriter] = None
        self._collector: Optional[Collector] = None
        if self.multiprocess:
            files = file_metrics()
            self.listener = MetricsListener(files, clients, window=window)
            self._writer = GaugeWriter(files, self.listener)
            return
        self._aggregates = Aggregates()
        self.listener = MetricsListener(self._aggregates, clients, window=window)
        """The listener attached to the covered clients."""
        self._collector = Collector(self._aggregates, self.listener)
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
            self._writer.stop()
        if self._collector is not None:
            with contextlib.suppress(KeyError):  # already unregistered by the user
                self.registry.unregister(self._collector)
