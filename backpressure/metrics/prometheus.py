"""Prometheus exposition of the retry metrics (needs the ``prometheus`` extra).

One custom collector per registry serves, at scrape time:

========================================  =========  =========================================
name                                      type       labels
========================================  =========  =========================================
``backpressure_retries_total``            counter    operation, server, retry_number, error_code
``backpressure_giveups_total``            counter    reason
``backpressure_attempts_per_operation``   histogram  (none)
``backpressure_backoff_seconds``          histogram  (none)
``backpressure_budget_tokens``            gauge      client
``backpressure_amplification_ratio``      gauge      (none)
``backpressure_local_waits_total``        counter    server
``backpressure_local_wait_seconds``       histogram  (none)
``backpressure_local_refusals_total``     counter    reason
``backpressure_hedges_total``             counter    server
========================================  =========  =========================================
"""

from __future__ import annotations

import bisect
import contextlib
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Optional

from backpressure.core.extras import require
from backpressure.metrics._recorder import ATTEMPT_BUCKETS, BACKOFF_BUCKETS, MetricsListener

__all__ = ["PrometheusMetrics"]

_RETRY_LABELS = ("operation", "server", "retry_number", "error_code")
_LOCAL_WAITS_HELP = "Attempts the adaptive policy held locally before sending them."
_LOCAL_WAIT_SECONDS_HELP = "Local wait of each attempt held by the adaptive policy."
_LOCAL_REFUSALS_HELP = "Attempts the adaptive policy refused locally (not sent)."
_HEDGES_HELP = "Hedged reads sent, by the server they went to."


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


class _Aggregates:
    """The counters and histograms the listener fills and the collector reads."""

    def __init__(self) -> None:
        """Start empty."""
        self.lock = threading.Lock()
        self.retries: dict[tuple[str, str, str, str], int] = {}
        self.give_ups: dict[str, int] = {}
        self.attempts = _Histogram(ATTEMPT_BUCKETS)
        self.backoff = _Histogram(BACKOFF_BUCKETS)
        self.local_waits: dict[str, int] = {}
        self.local_wait_seconds = _Histogram(BACKOFF_BUCKETS)
        self.local_refusals: dict[str, int] = {}
        self.hedges: dict[str, int] = {}

    def retry(
        self, operation: str, server: str, retry_number: int, error_code: str, delay: float
    ) -> None:
        """Count one retry and record its backoff."""
        key = (operation, server, str(retry_number), error_code)
        with self.lock:
            self.retries[key] = self.retries.get(key, 0) + 1
            self.backoff.observe(delay)

    def give_up(self, reason: str) -> None:
        """Count one give-up."""
        with self.lock:
            self.give_ups[reason] = self.give_ups.get(reason, 0) + 1

    def operation(self, attempts: int) -> None:
        """Record the attempts of one finished operation."""
        with self.lock:
            self.attempts.observe(attempts)

    def local_wait(self, server: str, wait: float) -> None:
        """Count one local wait of the adaptive policy and record its seconds."""
        with self.lock:
            self.local_waits[server] = self.local_waits.get(server, 0) + 1
            self.local_wait_seconds.observe(wait)

    def local_refusal(self, reason: str) -> None:
        """Count one attempt the adaptive policy refused locally."""
        with self.lock:
            self.local_refusals[reason] = self.local_refusals.get(reason, 0) + 1

    def hedge(self, server: str) -> None:
        """Count one hedged read sent to ``server``."""
        with self.lock:
            self.hedges[server] = self.hedges.get(server, 0) + 1


class _Collector:
    """The prometheus-client collector serving the ten metric families."""

    def __init__(self, aggregates: _Aggregates, listener: MetricsListener) -> None:
        """Serve ``aggregates`` and the gauges of ``listener``."""
        self._aggregates = aggregates
        self._listener = listener
        self._core = require("prometheus_client.core", "prometheus", "Prometheus metrics")

    def describe(self) -> Iterator[Any]:
        """Yield the families without samples (lets the registry detect name clashes)."""
        core = self._core
        yield core.CounterMetricFamily(
            "backpressure_retries", "Overload retries.", labels=_RETRY_LABELS
        )
        yield core.CounterMetricFamily(
            "backpressure_giveups", "Operations that stopped retrying.", labels=("reason",)
        )
        yield core.HistogramMetricFamily(
            "backpressure_attempts_per_operation", "Attempts sent per finished operation."
        )
        yield core.HistogramMetricFamily(
            "backpressure_backoff_seconds", "Backoff granted before each retry.", unit="seconds"
        )
        yield core.GaugeMetricFamily(
            "backpressure_budget_tokens", "Tokens in the retry budget.", labels=("client",)
        )
        yield core.GaugeMetricFamily(
            "backpressure_amplification_ratio",
            "Attempts over operations finished in the sliding window.",
        )
        yield core.CounterMetricFamily(
            "backpressure_local_waits", _LOCAL_WAITS_HELP, labels=("server",)
        )
        yield core.HistogramMetricFamily(
            "backpressure_local_wait_seconds", _LOCAL_WAIT_SECONDS_HELP, unit="seconds"
        )
        yield core.CounterMetricFamily(
            "backpressure_local_refusals", _LOCAL_REFUSALS_HELP, labels=("reason",)
        )
        yield core.CounterMetricFamily("backpressure_hedges", _HEDGES_HELP, labels=("server",))

    def collect(self) -> Iterator[Any]:
        """Yield the ten metric families with their current values."""
        core = self._core
        aggregates = self._aggregates
        with aggregates.lock:
            retries = dict(aggregates.retries)
            give_ups = dict(aggregates.give_ups)
            attempts = (aggregates.attempts.buckets(), aggregates.attempts.total)
            backoff = (aggregates.backoff.buckets(), aggregates.backoff.total)
            local_waits = dict(aggregates.local_waits)
            local_wait_seconds = (
                aggregates.local_wait_seconds.buckets(),
                aggregates.local_wait_seconds.total,
            )
            local_refusals = dict(aggregates.local_refusals)
            hedges = dict(aggregates.hedges)
        family = core.CounterMetricFamily(
            "backpressure_retries", "Overload retries.", labels=_RETRY_LABELS
        )
        for key, count in sorted(retries.items()):
            family.add_metric(list(key), count)
        yield family
        family = core.CounterMetricFamily(
            "backpressure_giveups", "Operations that stopped retrying.", labels=("reason",)
        )
        for reason, count in sorted(give_ups.items()):
            family.add_metric([reason], count)
        yield family
        yield core.HistogramMetricFamily(
            "backpressure_attempts_per_operation",
            "Attempts sent per finished operation.",
            buckets=attempts[0],
            sum_value=attempts[1],
        )
        yield core.HistogramMetricFamily(
            "backpressure_backoff_seconds",
            "Backoff granted before each retry.",
            buckets=backoff[0],
            sum_value=backoff[1],
            unit="seconds",
        )
        gauge = core.GaugeMetricFamily(
            "backpressure_budget_tokens", "Tokens in the retry budget.", labels=("client",)
        )
        for label, tokens in self._listener.budget_tokens():
            gauge.add_metric([label], tokens)
        yield gauge
        yield core.GaugeMetricFamily(
            "backpressure_amplification_ratio",
            "Attempts over operations finished in the sliding window.",
            value=self._listener.amplification(),
        )
        family = core.CounterMetricFamily(
            "backpressure_local_waits", _LOCAL_WAITS_HELP, labels=("server",)
        )
        for server, count in sorted(local_waits.items()):
            family.add_metric([server], count)
        yield family
        yield core.HistogramMetricFamily(
            "backpressure_local_wait_seconds",
            _LOCAL_WAIT_SECONDS_HELP,
            buckets=local_wait_seconds[0],
            sum_value=local_wait_seconds[1],
            unit="seconds",
        )
        family = core.CounterMetricFamily(
            "backpressure_local_refusals", _LOCAL_REFUSALS_HELP, labels=("reason",)
        )
        for reason, count in sorted(local_refusals.items()):
            family.add_metric([reason], count)
        yield family
        family = core.CounterMetricFamily("backpressure_hedges", _HEDGES_HELP, labels=("server",))
        for server, count in sorted(hedges.items()):
            family.add_metric([server], count)
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
