"""Metrics a user can scrape or export: Prometheus or OpenTelemetry, each an optional extra.

Turning them on is one call; neither library is imported before it::

    import backpressure.metrics

    backpressure.metrics.enable_prometheus()      # extra: pymongo-backpressure[prometheus]
    backpressure.metrics.enable_opentelemetry()   # extra: pymongo-backpressure[otel]

Without ``clients`` the metrics cover every client enabled now and later; with ``clients`` only
those.  Calling again for the same registry or meter provider returns the same object.  What is
measured: the duration of every operation (OpenTelemetry's ``db.client.operation.duration``,
timed only while metrics are on), operations by outcome, the retries and the total backoff of
each retried operation (histograms, as gRPC's A96 retry metrics), retries (by operation,
server, retry number and error code), give-ups by reason, each client's budget tokens, the
amplification (attempts over operations) of the last ``window`` seconds, the adaptive policy's
local waits (by server, and their seconds) and local refusals (by reason), and hedged reads.
Names and attributes follow OpenTelemetry's semantic conventions where one exists; the
Prometheus names are the OpenTelemetry ones under its Prometheus mapping.

The package ships a Grafana dashboard and Prometheus alert rules for these metrics:
``GRAFANA_DASHBOARD`` and ``PROMETHEUS_ALERTS`` are the paths of the installed files (see
docs/production.md).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from backpressure.metrics._recorder import MetricsListener
from backpressure.metrics._window import AmplificationWindow

if TYPE_CHECKING:
    from backpressure.metrics.opentelemetry import OpenTelemetryMetrics
    from backpressure.metrics.prometheus import PrometheusMetrics

__all__ = [
    "GRAFANA_DASHBOARD",
    "PROMETHEUS_ALERTS",
    "AmplificationWindow",
    "MetricsListener",
    "disable_metrics",
    "enable_opentelemetry",
    "enable_prometheus",
]

GRAFANA_DASHBOARD = Path(__file__).resolve().parent / "dashboards" / "grafana.json"
"""The Grafana dashboard of these metrics (JSON, with ``datasource``, ``job`` and ``instance``
variables), installed with the package: import it in Grafana."""

PROMETHEUS_ALERTS = GRAFANA_DASHBOARD.with_name("prometheus-alerts.yml")
"""The Prometheus alerting rules of these metrics, installed with the package: name it (or a
copy) in Prometheus's ``rule_files``."""

_LOCK = threading.Lock()
_ENABLED: dict[int, tuple[Any, Any]] = {}
"""id(registry or provider) -> (that object, the metrics serving it)."""


def _existing(target: Any) -> Optional[Any]:
    """Return the metrics already serving ``target`` (lock held)."""
    found = _ENABLED.get(id(target))
    return found[1] if found is not None and found[0] is target else None


def enable_prometheus(
    registry: Optional[Any] = None,
    *,
    clients: Optional[Iterable[Any]] = None,
    window: float = 60.0,
) -> PrometheusMetrics:
    """Expose the retry metrics in a prometheus-client registry; return the exporter.

    Args:
        registry: a ``prometheus_client.CollectorRegistry``; the default registry if None.
        clients: the enabled clients to cover; every client enabled now and later if None.
        window: seconds of the amplification gauge's sliding window.

    Raises:
        MissingExtraError: prometheus-client is not installed (the ``prometheus`` extra).
        ValueError: one of ``clients`` is not enabled.
    """
    from backpressure.metrics.prometheus import PrometheusMetrics

    with _LOCK:
        if clients is None:
            registry_key = _default_prometheus_registry() if registry is None else registry
            existing = _existing(registry_key)
            if existing is not None:
                return existing  # type: ignore[no-any-return]
        metrics = PrometheusMetrics(registry, clients, window=window)
        if clients is None:
            _ENABLED[id(metrics.registry)] = (metrics.registry, metrics)
        return metrics


def _default_prometheus_registry() -> Any:
    """Return prometheus-client's default registry (raises MissingExtraError without it)."""
    from backpressure.core.extras import require

    return require("prometheus_client.registry", "prometheus", "Prometheus metrics").REGISTRY


def enable_opentelemetry(
    meter_provider: Optional[Any] = None,
    *,
    clients: Optional[Iterable[Any]] = None,
    window: float = 60.0,
) -> OpenTelemetryMetrics:
    """Report the retry metrics through an OpenTelemetry meter provider; return the reporter.

    Args:
        meter_provider: a ``MeterProvider``; the global one (``metrics.get_meter_provider()``)
            if None.
        clients: the enabled clients to cover; every client enabled now and later if None.
        window: seconds of the amplification gauge's sliding window.

    Raises:
        MissingExtraError: opentelemetry-api is not installed (the ``otel`` extra).
        ValueError: one of ``clients`` is not enabled.
    """
    from backpressure.core.extras import require
    from backpressure.metrics.opentelemetry import OpenTelemetryMetrics

    if meter_provider is None:
        api = require("opentelemetry.metrics", "otel", "OpenTelemetry metrics")
        meter_provider = api.get_meter_provider()
    with _LOCK:
        if clients is None:
            existing = _existing(meter_provider)
            if existing is not None:
                return existing  # type: ignore[no-any-return]
        metrics = OpenTelemetryMetrics(meter_provider, clients, window=window)
        if clients is None:
            _ENABLED[id(meter_provider)] = (meter_provider, metrics)
        return metrics


def disable_metrics() -> None:
    """Close every exporter enabled without ``clients`` (their clients stop being measured)."""
    with _LOCK:
        enabled = list(_ENABLED.values())
        _ENABLED.clear()
    for _target, metrics in enabled:
        metrics.close()
