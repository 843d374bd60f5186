"""Test mode for users' test suites: overload retries without sleeping, with seeded jitter.

::

    from backpressure.testing import set_testing

    set_testing(True)                 # e.g. in conftest.py: every enabled client, whole process
    with set_testing(True, seed=7):   # or for one block; the previous mode comes back after
        ...

In test mode every enabled client retries overload errors as its policy says (same attempt
counts, same budget, same events, statistics and metrics), but the retry loops do not sleep,
the adaptive pacing holds (or refuses) no attempt, and the jitter comes from one generator seeded
with ``seed``, so the reported delays repeat from run to run.  ``max_retries`` caps the retries
of every operation (None keeps each policy's).
"""

from __future__ import annotations

from types import TracebackType
from typing import Optional

from backpressure.switch.overrides import TestMode, current_test_mode, set_test_mode

__all__ = ["TestMode", "is_testing", "set_testing"]


class _TestingSwitch:
    """Returned by ``set_testing``: as a context manager it restores the previous mode on exit."""

    __test__ = False  # not a pytest test class

    def __init__(self, previous: Optional[TestMode]) -> None:
        """Remember the mode that was in force before."""
        self._previous = previous

    def __enter__(self) -> None:
        """The new mode is already in force."""

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        """Put the previous mode back."""
        set_test_mode(self._previous)


def set_testing(
    testing: bool, *, seed: int = 0, max_retries: Optional[int] = None
) -> _TestingSwitch:
    """Turn test mode on or off for the whole process; use as a context manager to scope it.

    Args:
        testing: True for test mode (no sleeping, seeded jitter), False for normal retries.
        seed: seed of the jitter generator (an int).
        max_retries: cap on retries per operation, >= 0; None keeps every policy's count.

    Raises:
        TypeError: ``testing`` is not a bool or ``seed`` not an int.
        InvalidPolicyError: ``max_retries`` out of range.
    """
    if not isinstance(testing, bool):
        raise TypeError(f"set_testing(testing=...) must be a bool, got {testing!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"set_testing(seed=...) must be an int, got {seed!r}")
    mode = TestMode(seed=seed, max_retries=max_retries) if testing else None
    return _TestingSwitch(set_test_mode(mode))


def is_testing() -> bool:
    """Return True while test mode is on."""
    return current_test_mode() is not None
