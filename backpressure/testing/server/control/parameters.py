"""Server parameters of one embedded member (``getParameter``/``setParameter``)."""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from typing import Any, Callable

from backpressure.testing.server.control.ratelimit import UNLIMITED_RATE, LimiterSettings
from backpressure.testing.server.errors import CommandError

__all__ = ["DEFAULTS", "ServerParameters", "start_parameters"]

DBL_MAX = sys.float_info.max
"""mongod's default burst capacity (unlimited)."""

_REQUEST = "ingressRequest"
_CONNECTION = "ingressConnectionEstablishment"

DEFAULTS: Mapping[str, Any] = {
    "ingressRequestRateLimiterEnabled": False,
    "ingressRequestAdmissionRatePerSec": UNLIMITED_RATE,
    "ingressRequestAdmissionBurstCapacitySecs": DBL_MAX,
    "ingressRequestAdmissionMaxQueueDepth": 0,
    "ingressRequestRateLimiterAllowRetries": True,
    "ingressConnectionEstablishmentRateLimiterEnabled": False,
    "ingressConnectionEstablishmentRatePerSec": UNLIMITED_RATE,
    "ingressConnectionEstablishmentBurstCapacitySecs": DBL_MAX,
    "ingressConnectionEstablishmentMaxQueueDepth": 0,
    "externalClientBaseBackoffMS": 0,
    # Accepted and stored for test suites that set them; they change nothing here.
    "transactionLifetimeLimitSeconds": 60,
    "maxTransactionLockRequestTimeoutMillis": 5,
    "cursorTimeoutMillis": 600_000,
    "logLevel": 0,
}
"""Every settable parameter and its default (mongod's defaults where mongod has one)."""

_ALIASES = {"ingressRequestAdmissionBurstSize": "ingressRequestAdmissionBurstCapacitySecs"}
"""Older 8.x builds call the burst capacity ``ingressRequestAdmissionBurstSize``."""

_READ_ONLY: Mapping[str, Any] = {"enableTestCommands": 1, "authenticationMechanisms": []}


def _bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    raise CommandError(2, f"Invalid value for parameter {name}: {value!r} is not a boolean")


def _positive(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise CommandError(2, f"Invalid value for parameter {name}: {value!r} must be > 0")
    if not math.isfinite(value) and value != math.inf:
        raise CommandError(2, f"Invalid value for parameter {name}: {value!r}")
    return value


def _non_negative_int(name: str, value: Any) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or value < 0
        or value != int(value)
    ):
        raise CommandError(
            2, f"Invalid value for parameter {name}: {value!r} must be an integer >= 0"
        )
    return int(value)


def _any(name: str, value: Any) -> Any:
    return value


_VALIDATORS: Mapping[str, Callable[[str, Any], Any]] = {
    "ingressRequestRateLimiterEnabled": _bool,
    "ingressRequestAdmissionRatePerSec": _positive,
    "ingressRequestAdmissionBurstCapacitySecs": _positive,
    "ingressRequestAdmissionMaxQueueDepth": _non_negative_int,
    "ingressRequestRateLimiterAllowRetries": _bool,
    "ingressConnectionEstablishmentRateLimiterEnabled": _bool,
    "ingressConnectionEstablishmentRatePerSec": _positive,
    "ingressConnectionEstablishmentBurstCapacitySecs": _positive,
    "ingressConnectionEstablishmentMaxQueueDepth": _non_negative_int,
    "externalClientBaseBackoffMS": _non_negative_int,
}


class ServerParameters:
    """The parameter values of one member."""

    def __init__(self, initial: Mapping[str, Any] | None = None) -> None:
        """Start from mongod's defaults overridden by ``initial`` (validated)."""
        self.values: dict[str, Any] = dict(DEFAULTS)
        if initial:
            self.update(initial)

    @staticmethod
    def canonical(name: str) -> str:
        """Resolve a parameter alias."""
        return _ALIASES.get(name, name)

    def validate(self, name: str, value: Any) -> tuple[str, Any]:
        """Return the canonical name and the checked value, or raise BadValue/InvalidOptions."""
        key = self.canonical(name)
        if key not in self.values:
            if name in _READ_ONLY:
                raise CommandError(72, f"parameter {name} cannot be set at runtime")
            raise CommandError(
                72,
                f"attempted to set unrecognized parameter [{name}], use help:true to see options",
            )
        return key, _VALIDATORS.get(key, _any)(name, value)

    def update(self, changes: Mapping[str, Any]) -> dict[str, Any]:
        """Validate every change, then apply them all; return the previous values."""
        checked = [self.validate(name, value) for name, value in changes.items()]
        previous = {key: self.values[key] for key, _ in checked}
        for key, value in checked:
            self.values[key] = value
        return previous

    def get(self, name: str) -> Any:
        """Return a parameter (aliases and read-only ones included); KeyError when unknown."""
        if name in _READ_ONLY:
            return _READ_ONLY[name]
        return self.values[self.canonical(name)]

    def all(self) -> dict[str, Any]:
        """Every parameter, for ``getParameter: "*"``."""
        result = dict(self.values)
        result["ingressRequestAdmissionBurstSize"] = result[
            "ingressRequestAdmissionBurstCapacitySecs"
        ]
        result.update(_READ_ONLY)
        return result

    def request_limiter(self) -> LimiterSettings:
        """The request limiter's settings."""
        return self._limiter(_REQUEST, "RateLimiterEnabled", "AdmissionRatePerSec", "Admission")

    def connection_limiter(self) -> LimiterSettings:
        """The connection-establishment limiter's settings."""
        return self._limiter(_CONNECTION, "RateLimiterEnabled", "RatePerSec", "")

    @property
    def allow_retries(self) -> bool:
        """Whether rate-limiter rejections carry ``RetryableError``."""
        return bool(self.values["ingressRequestRateLimiterAllowRetries"])

    @property
    def base_backoff_ms(self) -> int:
        """``externalClientBaseBackoffMS`` (0: do not attach ``baseBackoffMS``)."""
        return int(self.values["externalClientBaseBackoffMS"])

    def _limiter(self, prefix: str, enabled: str, rate: str, middle: str) -> LimiterSettings:
        values = self.values
        return LimiterSettings(
            enabled=bool(values[prefix + enabled]),
            rate=float(values[prefix + rate]),
            burst_seconds=float(values[f"{prefix}{middle}BurstCapacitySecs"]),
            max_queue_depth=int(values[f"{prefix}{middle}MaxQueueDepth"]),
        )


def start_parameters(
    *,
    rate_limit: float | None = None,
    burst_seconds: float = 1.0,
    queue_depth: int = 0,
    base_backoff_ms: int | None = None,
    connection_rate_limit: float | None = None,
    connection_burst_seconds: float = 1.0,
    connection_queue_depth: int = 0,
) -> dict[str, Any]:
    """Translate the server's start-up options into mongod parameter values."""
    params: dict[str, Any] = {}
    if rate_limit is not None:
        params.update(
            ingressRequestRateLimiterEnabled=True,
            ingressRequestAdmissionRatePerSec=rate_limit,
            ingressRequestAdmissionBurstCapacitySecs=burst_seconds,
            ingressRequestAdmissionMaxQueueDepth=queue_depth,
        )
    if base_backoff_ms is not None:
        params["externalClientBaseBackoffMS"] = base_backoff_ms
    if connection_rate_limit is not None:
        params.update(
            ingressConnectionEstablishmentRateLimiterEnabled=True,
            ingressConnectionEstablishmentRatePerSec=connection_rate_limit,
            ingressConnectionEstablishmentBurstCapacitySecs=connection_burst_seconds,
            ingressConnectionEstablishmentMaxQueueDepth=connection_queue_depth,
        )
    try:
        ServerParameters(params)  # validate now: a bad option fails at start-up, not later
    except CommandError as exc:
        raise ValueError(exc.errmsg) from None
    return params
