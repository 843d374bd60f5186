"""Prometheus in multiprocess mode: the metrics written to prometheus-client's files.

When ``PROMETHEUS_MULTIPROC_DIR`` is set, each process writes its values with prometheus-client's
own ``Counter``, ``Histogram`` and ``Gauge`` objects (``FileMetrics``, one set per process) and a
``MultiProcessCollector`` adds them up; a thread of each process (``GaugeWriter``) writes the
gauges read from the clients every ``GAUGE_INTERVAL`` seconds, and starts again in a forked
child.  ``MULTIPROCESS_MODES`` says how each gauge is aggregated over the processes (the public
``backpressure.metrics.prometheus`` explains why).  prometheus-client is imported only when the
metric objects are made.
"""

from __future__ import annotations

import math
import os
import threading
import weakref
from collections.abc import Mapping, Sequence
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

__all__ = [
    "GAUGE_INTERVAL",
    "MULTIPROCESS_MODES",
    "FileMetrics",
    "GaugeWriter",
    "file_metrics",
    "multiprocess_dir",
]

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


class FileMetrics:
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
        series = self.series(metric, metric.label_values(attributes))
        if metric.kind == "histogram":
            series.observe(value)
        else:
            series.inc(value)


_FILE_METRICS: Optional[FileMetrics] = None
_FILE_LOCK = threading.Lock()


def file_metrics() -> FileMetrics:
    """The process's one set of file-backed metrics (two sets would overwrite each other's
    values in the same files)."""
    global _FILE_METRICS
    with _FILE_LOCK:
        if _FILE_METRICS is None:
            _FILE_METRICS = FileMetrics()
        return _FILE_METRICS


class GaugeWriter:
    """Writes the gauges (and the pacers' counts) read from the clients into the files."""

    def __init__(self, files: FileMetrics, listener: MetricsListener) -> None:
        """Write for the clients of ``listener``; start the thread that writes every second."""
        self._files = files
        self._listener = listener
        self._lock = threading.Lock()
        self._written: dict[MetricSpec, set[tuple[str, ...]]] = {}
        self._counted: dict[tuple[MetricSpec, tuple[str, ...]], float] = {}
        self._stopping = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.start()
        _WRITERS.add(self)

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
            current[metric] = {metric.label_values(attributes): v for attributes, v in readings}
        return current

    def write(self, *, closing: bool = False) -> None:
        """Write every gauge now; a series gone since the last write (or all of them when
        ``closing``) is written as 0 or NaN (see ``backpressure.metrics.prometheus``)."""
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
        """Stop the thread (it is no longer started again in a forked child); write the
        gauges one last time as gone."""
        _WRITERS.discard(self)
        self._stopping.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=30)
        self.write(closing=True)


_WRITERS: weakref.WeakSet[GaugeWriter] = weakref.WeakSet()
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
