"""The metric catalogue: every instrument both exporters serve, as one ``MetricSpec`` each.

A spec holds the OpenTelemetry name, kind, unit, description, attribute names and histogram
bounds of one metric, and derives the Prometheus family and label names from them.  The tuples
group the specs as the exporters read them (``METRICS``, ``SERVER_METRICS`` ...).  Nothing here
records or reads a value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "AMPLIFICATION",
    "BACKOFF_BUCKETS",
    "BUDGET_TOKENS",
    "CHOICE_AVOIDED",
    "CHOICE_METRICS",
    "CHOICE_ROUTED_AROUND",
    "CHOICE_SIGNAL",
    "DURATION_BUCKETS",
    "GIVEUPS",
    "HEDGES",
    "LOCAL_REFUSALS",
    "LOCAL_WAITS",
    "LOCAL_WAIT_DURATION",
    "METRICS",
    "OPERATIONS",
    "OPERATION_DURATION",
    "OPERATION_RETRIES",
    "OPERATION_RETRY_DELAY",
    "PACING_BACKLOG",
    "PACING_COMPETING",
    "PACING_GAUGES",
    "PACING_LAST_CHANCES",
    "PACING_PACED",
    "PACING_PUSHBACKS",
    "PACING_RATE",
    "PACING_WAITING",
    "RETRIES",
    "RETRY_BUCKETS",
    "SERVER_METRICS",
    "MetricSpec",
]

RETRY_BUCKETS: tuple[float, ...] = (1, 2, 3, 4, 5, 7, 10, 15, 20, 50, 100)
"""Histogram bounds of retries per retried operation (gRPC A96 advises 1-5; a policy allows
up to 100)."""

BACKOFF_BUCKETS: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    25.0,
)
"""Histogram bounds of backoff delays and local waits in seconds (one retry's ceiling is 10 s
by default; an operation's total may be several)."""

DURATION_BUCKETS: tuple[float, ...] = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0)
"""Histogram bounds of operation durations in seconds: the boundaries OpenTelemetry's database
client metrics advise for ``db.client.operation.duration``."""

_PROMETHEUS_UNITS = {"s": "seconds"}
"""OpenTelemetry units with a Prometheus suffix (``{annotations}`` get none, ``{annotation}/s``
gets ``per_second``; ``1`` on a gauge is ``ratio``)."""


@dataclass(frozen=True)
class MetricSpec:
    """One metric as both exporters name it: an OpenTelemetry instrument and its attributes.

    The Prometheus names follow OpenTelemetry's mapping to Prometheus: dots become
    underscores, the unit ``s`` adds ``_seconds``, a gauge of unit ``1`` adds ``_ratio``, a
    counter's samples end in ``_total`` (prometheus-client adds it) and a ``{annotation}``
    unit adds nothing.
    """

    name: str
    kind: str
    unit: str
    description: str
    attributes: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()

    @property
    def prometheus_name(self) -> str:
        """The Prometheus family name (a counter's samples add ``_total``)."""
        name = self.name.replace(".", "_")
        suffix = _PROMETHEUS_UNITS.get(self.unit)
        if suffix is None and self.unit.startswith("{") and self.unit.endswith("}/s"):
            suffix = "per_second"
        if suffix is None and self.unit == "1" and self.kind == "gauge":
            suffix = "ratio"
        return name if suffix is None else f"{name}_{suffix}"

    @property
    def prometheus_labels(self) -> tuple[str, ...]:
        """The Prometheus label names (the attributes with underscores for dots)."""
        return tuple(attribute.replace(".", "_") for attribute in self.attributes)

    def label_values(self, attributes: Mapping[str, object]) -> tuple[str, ...]:
        """The Prometheus label values in ``attributes``, in label order (an absent one is "")."""
        return tuple(str(attributes.get(name, "")) for name in self.attributes)


_OPERATION = ("db.system.name", "db.operation.name")
_SERVER = ("server.address", "server.port")

OPERATION_DURATION = MetricSpec(
    "db.client.operation.duration",
    "histogram",
    "s",
    "Duration of database client operations (retries, backoffs and local waits included).",
    (*_OPERATION, "error.type", "db.response.status_code", *_SERVER),
    DURATION_BUCKETS,
)
OPERATIONS = MetricSpec(
    "backpressure.client.operations",
    "counter",
    "{operation}",
    "Operations finished, by outcome (succeeded or failed).",
    ("db.system.name", "backpressure.outcome"),
)
OPERATION_RETRIES = MetricSpec(
    "backpressure.client.operation.retries",
    "histogram",
    "{retry}",
    "Retries of each retried operation (an operation without retries records nothing).",
    _OPERATION,
    RETRY_BUCKETS,
)
OPERATION_RETRY_DELAY = MetricSpec(
    "backpressure.client.operation.retry_delay",
    "histogram",
    "s",
    "Total backoff of each retried operation (the time without an attempt in flight).",
    _OPERATION,
    BACKOFF_BUCKETS,
)
RETRIES = MetricSpec(
    "backpressure.retries",
    "counter",
    "{retry}",
    "Overload retries, by server, error code and retry number.",
    (*_OPERATION, *_SERVER, "db.response.status_code", "backpressure.retry.number"),
)
GIVEUPS = MetricSpec(
    "backpressure.giveups",
    "counter",
    "{giveup}",
    "Operations that stopped retrying an overload error, by reason.",
    ("backpressure.reason",),
)
BUDGET_TOKENS = MetricSpec(
    "backpressure.budget.tokens",
    "gauge",
    "{token}",
    "Tokens in the retry budget.",
    ("backpressure.client",),
)
AMPLIFICATION = MetricSpec(
    "backpressure.amplification",
    "gauge",
    "1",
    "Attempts over operations finished in the sliding window.",
)
LOCAL_WAITS = MetricSpec(
    "backpressure.local.waits",
    "counter",
    "{wait}",
    "Attempts the adaptive policy held locally before sending them.",
    _SERVER,
)
LOCAL_WAIT_DURATION = MetricSpec(
    "backpressure.local.wait.duration",
    "histogram",
    "s",
    "Local wait of each attempt held by the adaptive policy.",
    (),
    BACKOFF_BUCKETS,
)
LOCAL_REFUSALS = MetricSpec(
    "backpressure.local.refusals",
    "counter",
    "{refusal}",
    "Attempts the adaptive policy refused locally (not sent).",
    ("backpressure.reason",),
)
HEDGES = MetricSpec(
    "backpressure.hedges",
    "counter",
    "{hedge}",
    "Hedged reads sent, by the server they went to.",
    _SERVER,
)
_PACED_SERVER = ("backpressure.client", *_SERVER)

PACING_PACED = MetricSpec(
    "backpressure.pacing.paced",
    "gauge",
    "{server}",
    "1 while the adaptive policy paces the attempts to the server, else 0.",
    _PACED_SERVER,
)
PACING_RATE = MetricSpec(
    "backpressure.pacing.rate",
    "gauge",
    "{attempt}/s",
    "The paced send rate to the server (only while it is paced).",
    _PACED_SERVER,
)
PACING_WAITING = MetricSpec(
    "backpressure.pacing.waiting",
    "gauge",
    "{attempt}",
    "Attempts waiting locally for their reserved send slot to the server.",
    _PACED_SERVER,
)
PACING_BACKLOG = MetricSpec(
    "backpressure.pacing.backlog",
    "gauge",
    "s",
    "Seconds of reserved send slots ahead of a new attempt to the server.",
    _PACED_SERVER,
)
PACING_PUSHBACKS = MetricSpec(
    "backpressure.pacing.pushbacks",
    "counter",
    "{pushback}",
    "Overload errors (pushbacks) the server returned, as the pacing counted them.",
    _PACED_SERVER,
)
PACING_COMPETING = MetricSpec(
    "backpressure.pacing.competing",
    "gauge",
    "{server}",
    "1 while the pacing competes (its cuts did not move the pushback), else 0.",
    _PACED_SERVER,
)

PACING_LAST_CHANCES = MetricSpec(
    "backpressure.pacing.last_chance_sends",
    "counter",
    "{attempt}",
    "Critical attempts (first attempts or retries) no send slot could serve, sent once just "
    "before their bound and answered (the client marks work sheddable).",
    _PACED_SERVER,
)

PACING_GAUGES: tuple[MetricSpec, ...] = (
    PACING_PACED,
    PACING_RATE,
    PACING_WAITING,
    PACING_BACKLOG,
    PACING_PUSHBACKS,
    PACING_COMPETING,
    PACING_LAST_CHANCES,
)
"""The per-server pacing metrics, read from the pacers' snapshots at scrape/collection time."""


CHOICE_SIGNAL = MetricSpec(
    "backpressure.server_choice.signal",
    "gauge",
    "1",
    "Share of the server's recent attempts pushed back (overload errors, timeouts), as the "
    "server choice sees it (0..1, halving each second).",
    _PACED_SERVER,
)
CHOICE_AVOIDED = MetricSpec(
    "backpressure.server_choice.avoided",
    "gauge",
    "{server}",
    "1 while selections with a choice of server steer away from the server, else 0.",
    _PACED_SERVER,
)
CHOICE_ROUTED_AROUND = MetricSpec(
    "backpressure.server_choice.routed_around",
    "counter",
    "{selection}",
    "Selections with a choice of server that left the server out.",
    _PACED_SERVER,
)

CHOICE_METRICS: tuple[MetricSpec, ...] = (CHOICE_SIGNAL, CHOICE_AVOIDED, CHOICE_ROUTED_AROUND)
"""The per-server server choice metrics, read from its signals at scrape/collection time."""

SERVER_METRICS: tuple[MetricSpec, ...] = (*PACING_GAUGES, *CHOICE_METRICS)
"""Every per-server metric read from a snapshot (see ``_servers.server_value``)."""

METRICS: tuple[MetricSpec, ...] = (
    OPERATION_DURATION,
    OPERATIONS,
    OPERATION_RETRIES,
    OPERATION_RETRY_DELAY,
    RETRIES,
    GIVEUPS,
    BUDGET_TOKENS,
    AMPLIFICATION,
    LOCAL_WAITS,
    LOCAL_WAIT_DURATION,
    LOCAL_REFUSALS,
    HEDGES,
    *PACING_GAUGES,
    *CHOICE_METRICS,
)
"""Every metric both exporters serve, in the order they list them."""
