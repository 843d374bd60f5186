"""The retry policy: a frozen, validated value object, its presets and ``resolve_policy``.

Backoff formula (keep in sync with :mod:`backpressure.core.backoff` and the docs)::

    delay(n) = jitter * min(max_backoff,
                            base * backoff_multiplier ** (first_retry_exponent + n - 1))

where ``n`` is the retry number (1 for the first retry), ``jitter`` is uniform in ``[0, 1)`` and
``base`` is the server's ``baseBackoffMS`` hint (when ``honour_server_backoff``) or
``base_backoff``.  The draft (default) gives ceilings 0.1, 0.2, 0.4, 0.8, 1.6 s; the current spec
(``first_retry_exponent=1``, two retries) gives 0.2, 0.4 s.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Optional, Union

from pymongo.errors import ConfigurationError

__all__ = [
    "CURRENT_SPEC",
    "DEFAULT_POLICY",
    "DRAFT",
    "PRESETS",
    "InvalidPolicyError",
    "Policy",
    "resolve_policy",
]


class InvalidPolicyError(ConfigurationError):
    """A retry policy, or the value naming one, is invalid."""


_BOOL_FIELDS = (
    "budget_enabled",
    "honour_server_backoff",
    "retarget",
    "respect_retry_options",
)
_INT_FIELDS = ("max_retries", "first_retry_exponent")
_FLOAT_FIELDS = (
    "base_backoff",
    "max_backoff",
    "backoff_multiplier",
    "budget_capacity",
    "budget_success_deposit",
    "budget_retry_cost",
    "budget_failure_deposit",
)
_MAX_RETRIES_LIMIT = 100
_EXPONENT_LIMIT = 64


def short_repr(value: object) -> str:
    """``repr(value)``, shortened when huge (an int of hundreds of digits)."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}... ({len(text)} characters)"


def _bad(field: str, value: object, allowed: str) -> InvalidPolicyError:
    """Build the error for one invalid field."""
    return InvalidPolicyError(f"Policy.{field} must be {allowed}, got {short_repr(value)}")


@dataclass(frozen=True)
class Policy:
    """How overload errors are retried: attempts, backoff, retry budget and retargeting.

    Defaults are the draft spec: 5 retries; backoff ``jitter * min(10 s, 0.1 s * 2 ** (n - 1))``
    for retry ``n`` (ceilings 0.1, 0.2, 0.4, 0.8, 1.6 s); a per-client token bucket of 1000
    tokens (+0.1 per first-try success, +1.1 per successful retry, +1 per retry failing without
    the overload label, -1 per retry); the server's ``baseBackoffMS`` honoured; the overloaded
    server deprioritized; retryReads/retryWrites respected.
    """

    max_retries: int = 5
    """Retries after the first attempt (attempts = max_retries + 1), 0..100."""
    base_backoff: float = 0.1
    """Backoff base in seconds (>= 0)."""
    max_backoff: float = 10.0
    """Backoff ceiling in seconds (>= base_backoff)."""
    backoff_multiplier: float = 2.0
    """Base of the exponent (>= 1)."""
    first_retry_exponent: int = 0
    """Exponent used for the first retry, 0..64 (draft 0, current spec 1)."""
    budget_enabled: bool = True
    """Whether retries draw tokens from a per-client bucket."""
    budget_capacity: float = 1000.0
    """Bucket capacity and initial tokens (> 0)."""
    budget_success_deposit: float = 0.1
    """Tokens deposited per first-try success (a successful retry adds retry_cost too)."""
    budget_retry_cost: float = 1.0
    """Tokens taken per retry."""
    budget_failure_deposit: float = 1.0
    """Tokens deposited per retry that fails without the overload label."""
    honour_server_backoff: bool = True
    """Use the server's baseBackoffMS as the base when present."""
    retarget: bool = True
    """Deprioritize the server that returned the overload error."""
    respect_retry_options: bool = True
    """retryReads/retryWrites gate overload retries (runCommand needs both)."""
    name: str = dataclasses.field(default="custom", compare=False)
    """Label for logs and reprs (not compared); presets are named "draft" and "current"."""

    def __post_init__(self) -> None:
        """Validate every field; raise InvalidPolicyError naming the first bad one."""
        for field in _BOOL_FIELDS:
            value = getattr(self, field)
            if not isinstance(value, bool):
                raise _bad(field, value, "a bool (True or False)")
        for field in _INT_FIELDS:
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int):
                raise _bad(field, value, "an int")
        for field in _FLOAT_FIELDS:
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise _bad(field, value, "a number (int or float)")
            try:
                finite = math.isfinite(value)
            except OverflowError:  # an int too large for a float
                finite = False
            if not finite:
                raise _bad(field, value, "a finite number")
            if value < 0:
                raise _bad(field, value, "a number >= 0")
        if not isinstance(self.name, str):
            raise _bad("name", self.name, "a str")
        if not 0 <= self.max_retries <= _MAX_RETRIES_LIMIT:
            raise _bad("max_retries", self.max_retries, f"an int in 0..{_MAX_RETRIES_LIMIT}")
        if not 0 <= self.first_retry_exponent <= _EXPONENT_LIMIT:
            raise _bad(
                "first_retry_exponent", self.first_retry_exponent, f"an int in 0..{_EXPONENT_LIMIT}"
            )
        if self.max_backoff < self.base_backoff:
            raise _bad(
                "max_backoff",
                self.max_backoff,
                f"a number >= base_backoff ({self.base_backoff!r})",
            )
        if self.backoff_multiplier < 1:
            raise _bad("backoff_multiplier", self.backoff_multiplier, "a number >= 1")
        if self.budget_capacity <= 0:
            raise _bad("budget_capacity", self.budget_capacity, "a number > 0")

    def replace(self, **changes: Any) -> Policy:
        """Return a copy with ``changes`` applied (validated again)."""
        return dataclasses.replace(self, **changes)


DRAFT = Policy(name="draft")
"""The draft spec: 5 retries, 0.1 s base, exponent from 0, token bucket, retargeting."""

CURRENT_SPEC = Policy(
    name="current",
    max_retries=2,
    budget_enabled=False,
    first_retry_exponent=1,
    retarget=False,
)
"""The current spec: 2 retries, ceilings 0.2/0.4 s, no bucket, no retargeting."""

PRESETS: Mapping[str, Policy] = MappingProxyType({"draft": DRAFT, "current": CURRENT_SPEC})
"""Presets by name."""

DEFAULT_POLICY = DRAFT
"""The policy used when backpressure is simply switched on."""

_ALIASES: Mapping[str, Policy] = MappingProxyType(
    {"draft": DRAFT, "default": DRAFT, "current": CURRENT_SPEC, "current-spec": CURRENT_SPEC}
)


def resolve_policy(value: Union[bool, str, Policy, None]) -> Optional[Policy]:
    """Turn a user setting into a Policy, or None when backpressure is disabled.

    ``None``/``False``/``"false"`` -> None; ``True``/``"true"`` -> DRAFT (the strings exactly so,
    as pymongo reads URI booleans); a preset name ("draft", "default", "current", "current-spec",
    case-insensitive) -> that preset; a Policy -> itself.

    Raises:
        InvalidPolicyError: for any other value.
    """
    if value is None or value is False or value == "false":
        return None
    if value is True or value == "true":
        return DEFAULT_POLICY
    if isinstance(value, Policy):
        return value
    if isinstance(value, str):
        preset = _ALIASES.get(value.strip().lower())
        if preset is not None:
            return preset
    raise InvalidPolicyError(
        f"backpressure must be None, a bool, a Policy or one of "
        f"{', '.join(repr(k) for k in _ALIASES)}; got {value!r}"
    )
