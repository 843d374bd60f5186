"""Server parameters of one embedded member (``getParameter``/``setParameter``)."""

from __future__ import annotations

import ipaddress
import math
import sys
from collections.abc import Mapping
from typing import Any, Callable

from backpressure.testing.server.control.profiles import (
    DEFAULT_SERVER_VERSION,
    ServerProfile,
    profile_for,
)
from backpressure.testing.server.control.ratelimit import UNLIMITED_RATE, LimiterSettings
from backpressure.testing.server.errors import CommandError

__all__ = [
    "DEFAULTS",
    "SHARD_DEFAULTS",
    "SHARD_PREFIX",
    "ServerParameters",
    "ShardParameters",
    "shard_start_parameters",
    "start_parameters",
]

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
    "ingressRequestRateLimiterExemptions": {"ranges": []},
    "ingressConnectionEstablishmentRateLimiterBypass": {"ranges": []},
    "ingressRequestRateLimiterApplicationExemptions": {"appNames": []},
    # The embedded server's stand-in for mongod's adaptive operation rate limiter (8.3+):
    # a plain token bucket whose rejections are code 463. The names are this server's own.
    "backpressureOperationRateLimiterEnabled": False,
    "backpressureOperationRateLimiterRatePerSec": UNLIMITED_RATE,
    "backpressureOperationRateLimiterBurstCapacitySecs": DBL_MAX,
    "externalClientBaseBackoffMS": 0,
    # Accepted and stored for test suites that set them; they change nothing here.
    "transactionLifetimeLimitSeconds": 60,
    "maxTransactionLockRequestTimeoutMillis": 5,
    "cursorTimeoutMillis": 600_000,
    "logLevel": 0,
}
"""Every settable parameter and its default (mongod's defaults where mongod has one)."""

_BURST_SIZE = "ingressRequestAdmissionBurstSize"
"""Older 8.x builds size the burst in tokens with this parameter instead of seconds."""

_PROFILE_ONLY: Mapping[str, Callable[[ServerProfile], bool]] = {
    "ingressRequestRateLimiterAllowRetries": lambda p: p.allow_retries_parameter,
    "externalClientBaseBackoffMS": lambda p: p.base_backoff,
    "ingressRequestRateLimiterApplicationExemptions": lambda p: p.application_exemptions,
    "backpressureOperationRateLimiterEnabled": lambda p: p.operation_rate_limiter,
    "backpressureOperationRateLimiterRatePerSec": lambda p: p.operation_rate_limiter,
    "backpressureOperationRateLimiterBurstCapacitySecs": lambda p: p.operation_rate_limiter,
}
"""Parameters that exist only from some server version on (unknown before, as in mongod)."""

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


def _rate(name: str, value: Any) -> int:
    """mongod's admission rates: an int32 of at least 1 (an integral double is accepted)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CommandError(2, f"Invalid value for parameter {name}: {value!r} is not a number")
    if not math.isfinite(value) or value != int(value):
        raise CommandError(2, f"Invalid value for parameter {name}: {value!r} is not an integer")
    if value < 1:
        raise CommandError(
            2, f"Invalid value for parameter {name}: {int(value)} is not greater than or equal to 1"
        )
    if value > UNLIMITED_RATE:
        raise CommandError(2, f"Invalid value for parameter {name}: {value!r} is out of range")
    return int(value)


def _burst_size(name: str, value: Any) -> float:
    """The older token-count burst: at least one token."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise CommandError(2, f"Invalid value for parameter {name}: {value!r} is not a number")
    if value < 1.0:
        raise CommandError(2, "burstSize cannot be less than 1.0")
    return float(value)


def _ranges(name: str, value: Any) -> dict[str, list[str]]:
    """``{ranges: [CIDR, ...]}``: each entry an address or network, IPv4 or IPv6."""
    ranges = value.get("ranges") if isinstance(value, Mapping) else None
    if not isinstance(ranges, list) or set(value) - {"ranges"}:
        raise CommandError(2, f"Invalid value for parameter {name}: expected {{ranges: [...]}}")
    for entry in ranges:
        try:
            ipaddress.ip_network(entry, strict=False)
        except (TypeError, ValueError):
            raise CommandError(
                2, f"Invalid value for parameter {name}: {entry!r} is not a CIDR range"
            ) from None
    return {"ranges": list(ranges)}


def _app_names(name: str, value: Any) -> dict[str, list[str]]:
    """``{appNames: [prefix, ...]}``."""
    names = value.get("appNames") if isinstance(value, Mapping) else None
    if (
        not isinstance(names, list)
        or set(value) - {"appNames"}
        or not all(isinstance(n, str) for n in names)
    ):
        raise CommandError(
            2, f"Invalid value for parameter {name}: expected {{appNames: [string, ...]}}"
        )
    return {"appNames": list(names)}


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
    "ingressRequestAdmissionRatePerSec": _rate,
    "ingressRequestAdmissionBurstCapacitySecs": _positive,
    "ingressRequestAdmissionMaxQueueDepth": _non_negative_int,
    "ingressRequestRateLimiterAllowRetries": _bool,
    "ingressConnectionEstablishmentRateLimiterEnabled": _bool,
    "ingressConnectionEstablishmentRatePerSec": _positive,
    "ingressConnectionEstablishmentBurstCapacitySecs": _positive,
    "ingressConnectionEstablishmentMaxQueueDepth": _non_negative_int,
    "externalClientBaseBackoffMS": _non_negative_int,
    "ingressRequestRateLimiterExemptions": _ranges,
    "ingressConnectionEstablishmentRateLimiterBypass": _ranges,
    "backpressureOperationRateLimiterEnabled": _bool,
    "backpressureOperationRateLimiterRatePerSec": _rate,
    "backpressureOperationRateLimiterBurstCapacitySecs": _positive,
    "ingressRequestRateLimiterApplicationExemptions": _app_names,
    _BURST_SIZE: _burst_size,
}


def _profile_values(
    defaults: Mapping[str, Any],
    profile_only: Mapping[str, Callable[[ServerProfile], bool]],
    profile: ServerProfile,
) -> dict[str, Any]:
    """The defaults of the parameters ``profile`` knows (``profile_only`` says which it lacks)."""
    return {k: v for k, v in defaults.items() if k not in profile_only or profile_only[k](profile)}


def _unrecognized(name: str) -> CommandError:
    """mongod's error for setting a parameter it does not know."""
    return CommandError(
        72, f"attempted to set unrecognized parameter [{name}], use help:true to see options"
    )


class ServerParameters:
    """The parameter values of one member, as its server version's profile defines them."""

    def __init__(
        self,
        initial: Mapping[str, Any] | None = None,
        profile: ServerProfile | None = None,
    ) -> None:
        """Start from mongod's defaults overridden by ``initial`` (validated)."""
        self.profile = profile or profile_for(DEFAULT_SERVER_VERSION)
        self.values = _profile_values(DEFAULTS, _PROFILE_ONLY, self.profile)
        self.burst_tokens: float | None = None
        """The capacity in tokens when it was last set with ``ingressRequestAdmissionBurstSize``."""
        if initial:
            self.update(initial)

    def validate(self, name: str, value: Any) -> tuple[str, Any]:
        """Return the name and the checked value, or raise BadValue/InvalidOptions."""
        if name not in self.values and name != _BURST_SIZE:
            if name in _READ_ONLY:
                raise CommandError(72, f"parameter {name} cannot be set at runtime")
            raise _unrecognized(name)
        return name, _VALIDATORS.get(name, _any)(name, value)

    def update(self, changes: Mapping[str, Any]) -> dict[str, Any]:
        """Validate every change, then apply them all; return the previous values."""
        checked = [self.validate(name, value) for name, value in changes.items()]
        previous = {key: self.get(key) for key, _ in checked}
        for key, value in checked:
            if key == _BURST_SIZE:
                self.burst_tokens = value
            else:
                if key == "ingressRequestAdmissionBurstCapacitySecs":
                    self.burst_tokens = None
                self.values[key] = value
        return previous

    def get(self, name: str) -> Any:
        """Return a parameter (read-only ones included); KeyError when unknown."""
        if name in _READ_ONLY:
            return _READ_ONLY[name]
        if name == _BURST_SIZE:
            return self._burst_size()
        return self.values[name]

    def all(self) -> dict[str, Any]:
        """Every parameter, for ``getParameter: "*"``."""
        result = dict(self.values)
        result[_BURST_SIZE] = self._burst_size()
        result.update(_READ_ONLY)
        return result

    def _burst_size(self) -> float:
        if self.burst_tokens is not None:
            return self.burst_tokens
        values = self.values
        product = float(values["ingressRequestAdmissionRatePerSec"]) * float(
            values["ingressRequestAdmissionBurstCapacitySecs"]
        )
        return min(product, DBL_MAX)

    def request_limiter(self) -> LimiterSettings:
        """The request limiter's settings (no queue before the 9.0 profile)."""
        settings = self._limiter(_REQUEST, "RateLimiterEnabled", "AdmissionRatePerSec", "Admission")
        if self.burst_tokens is not None:
            seconds = self.burst_tokens / settings.rate
            while settings.rate * seconds < self.burst_tokens:  # no token lost to rounding
                seconds = math.nextafter(seconds, math.inf)
            settings.burst_seconds = seconds
        if not self.profile.request_queue:
            settings.max_queue_depth = 0
        return settings

    def operation_limiter(self) -> LimiterSettings:
        """The operation rate limiter's settings (disabled before 8.3; never a queue)."""
        values = self.values
        prefix = "backpressureOperationRateLimiter"
        if prefix + "Enabled" not in values:
            return LimiterSettings()
        return LimiterSettings(
            enabled=bool(values[prefix + "Enabled"]),
            rate=float(values[prefix + "RatePerSec"]),
            burst_seconds=float(values[prefix + "BurstCapacitySecs"]),
        )

    def connection_limiter(self) -> LimiterSettings:
        """The connection-establishment limiter's settings."""
        return self._limiter(_CONNECTION, "RateLimiterEnabled", "RatePerSec", "")

    @property
    def allow_retries(self) -> bool:
        """Whether rate-limiter rejections carry ``RetryableError`` (always before 9.0)."""
        return bool(self.values.get("ingressRequestRateLimiterAllowRetries", True))

    @property
    def base_backoff_ms(self) -> int:
        """``externalClientBaseBackoffMS`` (0, or before 9.0: do not attach ``baseBackoffMS``)."""
        return int(self.values.get("externalClientBaseBackoffMS", 0))

    @property
    def exempt_networks(self) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
        """The networks of ``ingressRequestRateLimiterExemptions``."""
        ranges = self.values["ingressRequestRateLimiterExemptions"]["ranges"]
        return [ipaddress.ip_network(r, strict=False) for r in ranges]

    @property
    def bypass_networks(self) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
        """The networks of ``ingressConnectionEstablishmentRateLimiterBypass``."""
        ranges = self.values["ingressConnectionEstablishmentRateLimiterBypass"]["ranges"]
        return [ipaddress.ip_network(r, strict=False) for r in ranges]

    @property
    def exempt_app_prefixes(self) -> list[str]:
        """The prefixes of ``ingressRequestRateLimiterApplicationExemptions`` (9.0)."""
        value = self.values.get("ingressRequestRateLimiterApplicationExemptions")
        return list(value["appNames"]) if value else []

    def _limiter(self, prefix: str, enabled: str, rate: str, middle: str) -> LimiterSettings:
        values = self.values
        return LimiterSettings(
            enabled=bool(values[prefix + enabled]),
            rate=float(values[prefix + rate]),
            burst_seconds=float(values[f"{prefix}{middle}BurstCapacitySecs"]),
            max_queue_depth=int(values[f"{prefix}{middle}MaxQueueDepth"]),
        )


SHARD_PREFIX = "backpressureShard"
"""Parameters of the shard behind a sharded topology's routers carry this prefix (this
server's own names: the shard has no port of its own, so any mongos sets them)."""

SHARD_DEFAULTS: Mapping[str, Any] = {
    "backpressureShardRateLimiterEnabled": False,
    "backpressureShardAdmissionRatePerSec": UNLIMITED_RATE,
    "backpressureShardAdmissionBurstCapacitySecs": DBL_MAX,
    "backpressureShardBaseBackoffMS": 0,
    "backpressureShardMaxRetries": 2,
    "backpressureShardRetryJitter": "random",
}
"""The shard hop's parameters and defaults: its ingress request limiter (off), the
``externalClientBaseBackoffMS`` the shard attaches to its overload errors (9.0 profile), and
the mongos side: how many times a mongos retries a shard's overload error, and the jitter of
its backoff (``"random"``, or a fixed number in [0, 1] for reproducible timings)."""

_SHARD_PROFILE_ONLY: Mapping[str, Callable[[ServerProfile], bool]] = {
    "backpressureShardBaseBackoffMS": lambda p: p.base_backoff,
}


def _jitter(name: str, value: Any) -> Any:
    """``"random"`` or a number in [0, 1]."""
    if value == "random":
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise CommandError(
            2, f"Invalid value for parameter {name}: {value!r} is not 'random' or in [0, 1]"
        )
    return float(value)


_SHARD_VALIDATORS: Mapping[str, Callable[[str, Any], Any]] = {
    "backpressureShardRateLimiterEnabled": _bool,
    "backpressureShardAdmissionRatePerSec": _rate,
    "backpressureShardAdmissionBurstCapacitySecs": _positive,
    "backpressureShardBaseBackoffMS": _non_negative_int,
    "backpressureShardMaxRetries": _non_negative_int,
    "backpressureShardRetryJitter": _jitter,
}


class ShardParameters:
    """The parameter values of the shard hop of a sharded topology (shared by its routers)."""

    def __init__(
        self,
        initial: Mapping[str, Any] | None = None,
        profile: ServerProfile | None = None,
    ) -> None:
        """Start from the defaults overridden by ``initial`` (validated)."""
        self.profile = profile or profile_for(DEFAULT_SERVER_VERSION)
        self.values = _profile_values(SHARD_DEFAULTS, _SHARD_PROFILE_ONLY, self.profile)
        if initial:
            self.update(initial)

    def validate(self, name: str, value: Any) -> tuple[str, Any]:
        """Return the name and the checked value, or raise InvalidOptions/BadValue."""
        if name not in self.values:
            raise _unrecognized(name)
        return name, _SHARD_VALIDATORS[name](name, value)

    def update(self, changes: Mapping[str, Any]) -> dict[str, Any]:
        """Validate every change, then apply them all; return the previous values."""
        checked = [self.validate(name, value) for name, value in changes.items()]
        previous = {key: self.values[key] for key, _ in checked}
        self.values.update(checked)
        return previous

    def limiter(self) -> LimiterSettings:
        """The shard's ingress request limiter (never a queue)."""
        values = self.values
        return LimiterSettings(
            enabled=bool(values["backpressureShardRateLimiterEnabled"]),
            rate=float(values["backpressureShardAdmissionRatePerSec"]),
            burst_seconds=float(values["backpressureShardAdmissionBurstCapacitySecs"]),
        )

    @property
    def base_backoff_ms(self) -> int:
        """The ``baseBackoffMS`` the shard attaches to its overload errors (0: none)."""
        return int(self.values.get("backpressureShardBaseBackoffMS", 0))

    @property
    def max_retries(self) -> int:
        """How many times a mongos retries a shard's overload error."""
        return int(self.values["backpressureShardMaxRetries"])

    @property
    def jitter(self) -> float | None:
        """The fixed backoff jitter, or None for a random one per retry."""
        value = self.values["backpressureShardRetryJitter"]
        return None if value == "random" else float(value)


def shard_start_parameters(
    *,
    server_version: str = DEFAULT_SERVER_VERSION,
    rate_limit: float | None = None,
    burst_seconds: float = 1.0,
    base_backoff_ms: int | None = None,
    max_retries: int | None = None,
    retry_jitter: float | None = None,
) -> dict[str, Any]:
    """Translate the shard-hop start-up options into :class:`ShardParameters` values."""
    params: dict[str, Any] = {}
    if rate_limit is not None:
        params.update(
            backpressureShardRateLimiterEnabled=True,
            backpressureShardAdmissionRatePerSec=rate_limit,
            backpressureShardAdmissionBurstCapacitySecs=burst_seconds,
        )
    if base_backoff_ms is not None:
        params["backpressureShardBaseBackoffMS"] = base_backoff_ms
    if max_retries is not None:
        params["backpressureShardMaxRetries"] = max_retries
    if retry_jitter is not None:
        params["backpressureShardRetryJitter"] = retry_jitter
    profile = profile_for(server_version)
    try:
        if base_backoff_ms is not None and not profile.base_backoff:
            raise CommandError(
                2,
                f"the shard's baseBackoffMS needs server version 9.0 or later "
                f"(not {server_version})",
            )
        ShardParameters(params, profile)
    except CommandError as exc:
        raise ValueError(exc.errmsg) from None
    return params


def start_parameters(
    *,
    server_version: str = DEFAULT_SERVER_VERSION,
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
    profile = profile_for(server_version)
    if connection_rate_limit is not None:
        params.update(
            ingressConnectionEstablishmentRateLimiterEnabled=True,
            ingressConnectionEstablishmentRatePerSec=connection_rate_limit,
            ingressConnectionEstablishmentBurstCapacitySecs=connection_burst_seconds,
            ingressConnectionEstablishmentMaxQueueDepth=connection_queue_depth,
        )
    try:
        if queue_depth and not profile.request_queue:
            raise CommandError(
                2, f"request queueing needs server version 9.0 or later (not {server_version})"
            )
        if base_backoff_ms is not None and not profile.base_backoff:
            raise CommandError(
                2,
                f"externalClientBaseBackoffMS needs server version 9.0 or later "
                f"(not {server_version})",
            )
        ServerParameters(params, profile)  # validate now: a bad option fails at start-up, not later
    except CommandError as exc:
        raise ValueError(exc.errmsg) from None
    return params
