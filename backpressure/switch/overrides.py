"""Per-operation overrides (a context variable) and the process-wide test mode.

``overrides(...)`` changes the policy of the operations started inside a ``with`` block, in
this thread or asyncio task only (a ``ContextVar``; tasks created inside the block inherit it).
Test mode (``backpressure.testing.set_testing``) applies to every enabled client of the process:
retries happen with their normal attempt counts, but nothing sleeps and the jitter comes from a
seeded generator, so tests are fast and repeatable.  Both reach the core as one
:class:`~backpressure.core.overrides.OperationSettings` per operation (``current_settings``).
"""

from __future__ import annotations

import contextlib
import contextvars
import random as _random
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Optional, Union

from backpressure.core.overrides import Criticality, OperationSettings, validate_policy_changes
from backpressure.core.policy import InvalidPolicyError

__all__ = [
    "TestMode",
    "current_settings",
    "current_test_mode",
    "overrides",
    "set_test_mode",
]

_OVERRIDES: contextvars.ContextVar[Optional[OperationSettings]] = contextvars.ContextVar(
    "backpressure_overrides", default=None
)


@dataclass(frozen=True)
class TestMode:
    """The test mode in force: seed of the jitter generator, optional cap on retries."""

    __test__ = False  # not a pytest test class

    seed: int
    """Seed of the jitter generator shared by all clients."""
    max_retries: Optional[int]
    """Cap on retries per operation (None keeps every policy's own count)."""


_TEST_LOCK = threading.Lock()
_TEST_MODE: Optional[TestMode] = None
_TEST_SETTINGS: Optional[OperationSettings] = None


class _LockedRandom:
    """A seeded ``random.Random`` safe to share between threads (one draw at a time)."""

    def __init__(self, seed: int) -> None:
        """Seed the generator."""
        self._random = _random.Random(seed)
        self._lock = threading.Lock()

    def __call__(self) -> float:
        """Return the next number in [0, 1)."""
        with self._lock:
            return self._random.random()


def current_test_mode() -> Optional[TestMode]:
    """Return the test mode in force, or None."""
    return _TEST_MODE


def set_test_mode(mode: Optional[TestMode]) -> Optional[TestMode]:
    """Put ``mode`` in force (None turns test mode off); return the previous one."""
    global _TEST_MODE, _TEST_SETTINGS
    if mode is not None and mode.max_retries is not None:
        validate_policy_changes({"max_retries": mode.max_retries})
    with _TEST_LOCK:
        previous = _TEST_MODE
        _TEST_MODE = mode
        if mode is None:
            _TEST_SETTINGS = None
        else:
            changes = {} if mode.max_retries is None else {"max_retries": mode.max_retries}
            _TEST_SETTINGS = OperationSettings(
                policy_changes=validate_policy_changes(changes),
                testing=True,
                random=_LockedRandom(mode.seed),
            )
    return previous


def current_settings() -> Optional[OperationSettings]:
    """Return the settings for an operation starting now: overrides and test mode, or None."""
    local = _OVERRIDES.get()
    testing = _TEST_SETTINGS
    if testing is None:
        return local
    if local is None:
        return testing
    changes = {**testing.policy_changes, **local.policy_changes}
    if "max_retries" in testing.policy_changes and "max_retries" in local.policy_changes:
        changes["max_retries"] = min(
            testing.policy_changes["max_retries"], local.policy_changes["max_retries"]
        )
    return OperationSettings(
        policy_changes=validate_policy_changes(changes),
        criticality=local.criticality,
        testing=True,
        random=testing.random,
    )


@contextlib.contextmanager
def overrides(
    *,
    enabled: bool = True,
    criticality: Union[str, Criticality, None] = None,
    **policy_changes: Any,
) -> Iterator[OperationSettings]:
    """Change overload retries for the operations started in this block (thread/task-local).

    ``policy_changes`` are ``Policy`` fields (``max_retries=0``, ``max_backoff=1.0``, ...) that
    replace the client's for these operations; ``enabled=False`` turns overload retries off
    (the same as ``max_retries=0``).  ``criticality`` is ``"critical"`` (default) or
    ``"sheddable"``, a hint an adaptive policy may use to shed sheddable work first.  Blocks nest:
    inner values win, the rest is inherited.  The budget stays the client's.

    Raises:
        InvalidPolicyError: an unknown field, an invalid value or criticality.
    """
    if not isinstance(enabled, bool):
        raise InvalidPolicyError(f"overrides(enabled=...) must be a bool, got {enabled!r}")
    if not enabled:
        policy_changes["max_retries"] = 0
    changes = validate_policy_changes(policy_changes)
    outer = _OVERRIDES.get()
    merged = {**(outer.policy_changes if outer is not None else {}), **changes}
    if criticality is not None:
        level = Criticality.parse(criticality)
    elif outer is not None:
        level = outer.criticality
    else:
        level = Criticality.CRITICAL
    settings = OperationSettings(policy_changes=validate_policy_changes(merged), criticality=level)
    token = _OVERRIDES.set(settings)
    try:
        yield settings
    finally:
        _OVERRIDES.reset(token)
