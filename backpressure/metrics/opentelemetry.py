"""OpenTelemetry instruments for the retry metrics (needs the ``otel`` extra).

Instruments of the meter ``backpressure``:

====================================  ===============  =============  ==============================
name                                  kind             unit           attributes
====================================  ===============  =============  ==============================
``backpressure.retries``              Counter          ``{retry}``    ``db.operation.name``,
                                                                      ``server.address``,
                                                                      ``backpressure.retry.number``,
                                                                      ``db.response.status_code``
``backpressure.giveups``              Counter          ``{giveup}``   ``backpressure.reason``
``backpressure.operation.attempts``   Histogram        ``{attempt}``
``backpressure.backoff.duration``     Histogram        ``s``
``backpressure.budget.tokens``        ObservableGauge  ``{token}``    ``backpressure.client``
``backpressure.amplification``        ObservableGauge  ``1``
``backpressure.local.waits``          Counter          ``{wait}``     ``server.address``
``backpressure.local.wait.duration``  Histogram        ``s``
``backpressure.local.refusals``       Counter          ``{refusal}``  ``backpressure.reason``
``backpressure.hedges``               Counter          ``{hedge}``    ``server.address``
====================================  ===============  =============  ==============================
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Optional

from backpressure.core.extras import require
from backpressure.metrics._recorder import ATTEMPT_BUCKETS, BACKOFF_BUCKETS, MetricsListener

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
        """Create the instruments on ``meter``."""
        self.retries = meter.create_counter(
            "backpressure.retries", unit="{retry}", description="Overload retries."
        )
        self.give_ups = meter.create_counter(
            "backpressure.giveups",
            unit="{giveup}",
            description="Operations that stopped retrying an overload error.",
        )
        self.attempts = _histogram(
            meter,
            "backpressure.operation.attempts",
            "{attempt}",
            "Attempts sent per finished operation.",
            ATTEMPT_BUCKETS,
        )
        self.backoff = _histogram(
            meter,
            "backpressure.backoff.duration",
            "s",
            "Backoff granted before each retry.",
            BACKOFF_BUCKETS,
        )
        self.local_waits = meter.create_counter(
            "backpressure.local.waits",
            unit="{wait}",
            description="Attempts the adaptive policy held locally before sending them.",
        )
        self.local_wait_duration = _histogram(
            meter,
            "backpressure.local.wait.duration",
            "s",
            "Local wait of each attempt held by the adaptive policy.",
            BACKOFF_BUCKETS,
        )
        self.local_refusals = meter.create_counter(
            "backpressure.local.refusals",
            unit="{refusal}",
            description="Attempts the adaptive policy refused locally (not sent).",
        )
        self.hedges = meter.create_counter(
            "backpressure.hedges",
            unit="{hedge}",
            description="Hedged reads sent, by the server they went to.",
        )

    def retry(
        self, operation: str, server: str, retry_number: int, error_code: str, delay: float
    ) -> None:
        """Count one retry and record its backoff."""
        self.retries.add(
            1,
            {
                "db.operation.name": operation,
                "server.address": server,
                "backpressure.retry.number": retry_number,
                "db.response.status_code": error_code,
            },
        )
        self.backoff.record(delay)

    def give_up(self, reason: str) -> None:
        """Count one give-up."""
        self.give_ups.add(1, {"backpressure.reason": reason})

    def operation(self, attempts: int) -> None:
        """Record the attempts of one finished operation."""
        self.attempts.record(attempts)

    def local_wait(self, server: str, wait: float) -> None:
        """Count one local wait of the adaptive policy and record its seconds."""
        self.local_waits.add(1, {"server.address": server})
        self.local_wait_duration.record(wait)

    def local_refusal(self, reason: str) -> None:
        """Count one attempt the adaptive policy refused locally."""
        self.local_refusals.add(1, {"backpressure.reason": reason})

    def hedge(self, server: str) -> None:
        """Count one hedged read sent to ``server``."""
        self.hedges.add(1, {"server.address": server})


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
        meter.create_observable_gauge(
            "backpressure.budget.tokens",
            callbacks=[self._observe_budgets],
            unit="{token}",
            description="Tokens in the retry budget.",
        )
        meter.create_observable_gauge(
            "backpressure.amplification",
            callbacks=[self._observe_amplification],
            unit="1",
            description="Attempts over operations finished in the sliding window.",
        )

    def _observe_budgets(self, _options: Any) -> Iterator[Any]:
        """Report the budget of every covered client."""
        for label, tokens in self.listener.budget_tokens():
            yield self._api.Observation(tokens, {"backpressure.client": label})

    def _observe_amplification(self, _options: Any) -> Iterator[Any]:
        """Report the amplification of the sliding window."""
        if self.listener.covered_states():
            yield self._api.Observation(self.listener.amplification())

    def close(self) -> None:
        """Detach from the clients; the gauges stop reporting (instruments cannot be removed)."""
        self.listener.close()
