"""Test doubles shared by the unit and server tests."""

from __future__ import annotations


class FakeClock:
    """A monotonic clock that moves only when the test (or its event loop) moves it."""

    def __init__(self, now: float = 100.0) -> None:
        """Start at ``now`` seconds."""
        self.now = now

    def __call__(self) -> float:
        """Return the current fake time."""
        return self.now

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``."""
        self.now += seconds
