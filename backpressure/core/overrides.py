"""Per-operation adjustments to a client's policy: overrides, criticality and test mode (pure).

The switch layer keeps the adjustments in force (a context variable for overrides, a process
setting for test mode) and hands them to the core as an ``OperationSettings`` value when an
operation starts; nothing here reads a context variable, a clock or a global.
``OperationSettings.controller_for`` derives the operation's controller from the client's: the
same budget and clock, the overridden policy, and in test mode a seeded jitter source and no
sleeping (the delays are still computed, reported and counted).
"""

from __future__ import annotations

import dataclasses
import enum
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Optional

from backpressure.core.decision import RetryController
from backpressure.core.policy import InvalidPolicyError, Policy

__all__ = ["Criticality", "OperationSettings", "validate_policy_changes"]


class Criticality(enum.Enum):
    """How much an operation matters when the client must shed work (Google SRE book, ch. 21).

    ``CRITICAL`` (the default) is work whose failure users see; ``SHEDDABLE`` is work that may be
    dropped first (batch jobs, prefetching, best-effort writes).  Overload retries of both follow
    the policy in force; an adaptive policy may refuse sheddable work first.
    """

    CRITICAL = "critical"
    SHEDDABLE = "sheddable"

    @classmethod
    def parse(cls, value: Any) -> Criticality:
        """Return the member named by ``value`` (a member or "critical"/"sheddable").

        Raises:
            InvalidPolicyError: any other value.
        """
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            for member in cls:
                if member.value == value.strip().lower():
                    return member
        raise InvalidPolicyError(
            f"criticality must be 'critical' or 'sheddable' (or a Criticality), got {value!r}"
        )


_OVERRIDABLE = frozenset(f.name for f in dataclasses.fields(Policy)) - {"name"}
_LOOSE = Policy(base_backoff=0.0, max_backoff=sys.float_info.max)
"""A policy against which each overridden field is validated on its own."""


def validate_policy_changes(changes: Mapping[str, Any]) -> Mapping[str, Any]:
    """Check that ``changes`` name Policy fields with valid values; return a read-only copy.

    Each value is checked on its own (against the draft preset); cross-field rules such as
    ``max_backoff >= base_backoff`` are checked when the changes meet a client's policy.

    Raises:
        InvalidPolicyError: an unknown field or an invalid value.
    """
    for name in changes:
        if name not in _OVERRIDABLE:
            raise InvalidPolicyError(
                f"overrides accepts the Policy fields {', '.join(sorted(_OVERRIDABLE))}; "
                f"got {name!r}"
            )
    for name, value in changes.items():
        _LOOSE.replace(**{name: value})
    return MappingProxyType(dict(changes))


@dataclass(frozen=True)
class OperationSettings:
    """What is in force for one operation besides the client's policy."""

    policy_changes: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    """Policy fields replaced for this operation (validated)."""
    criticality: Criticality = Criticality.CRITICAL
    """The operation's criticality hint."""
    testing: bool = False
    """Test mode: no sleeping between attempts, jitter from ``random``."""
    random: Optional[Callable[[], float]] = None
    """The jitter source replacing the client's (test mode's seeded generator), if any."""

    def policy_for(self, policy: Policy) -> Policy:
        """Return ``policy`` with this operation's changes applied.

        Raises:
            InvalidPolicyError: the changes do not fit this policy (e.g. ``max_backoff`` below
                its ``base_backoff``).
        """
        if not self.policy_changes:
            return policy
        return policy.replace(**self.policy_changes)

    def controller_for(self, controller: RetryController) -> RetryController:
        """Return the controller for one operation: same budget and clock, adjusted policy."""
        return RetryController(
            self.policy_for(controller.policy),
            budget=controller.budget,
            random=controller.random if self.random is None else self.random,
            clock=controller.clock,
            sleeps=controller.sleeps and not self.testing,
            pacing=controller.pacing,
        )
