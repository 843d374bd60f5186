"""The amplification's sliding window: attempts over operations of the last ``window`` seconds.

``AmplificationWindow`` counts, in one-second slots, the operations that finished and the
attempts they sent; the ``backpressure.amplification`` gauge reads its ratio when scraped.
"""

from __future__ import annotations

import collections
import math
import threading
import time
from typing import Callable

__all__ = ["AmplificationWindow"]


class AmplificationWindow:
    """Attempts over operations for the operations finished in the last ``window`` seconds.

    Counts are kept in one-second slots on ``clock``, so memory stays bounded whatever the
    rate; the ratio is 0.0 when no operation finished in the window.
    """

    def __init__(
        self, window: float = 60.0, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        """Keep ``window`` seconds (a finite number >= 1) of counts measured on ``clock``."""
        if isinstance(window, bool) or not isinstance(window, (int, float)):
            raise TypeError(f"window must be a number of seconds, got {window!r}")
        if not math.isfinite(window) or window < 1:
            raise ValueError(f"window must be a finite number of seconds >= 1, got {window!r}")
        self._window = float(window)
        self._clock = clock
        self._lock = threading.Lock()
        self._slots: collections.deque[list[int]] = collections.deque()

    @property
    def window(self) -> float:
        """Length of the window in seconds."""
        return self._window

    def _expire(self, now: float) -> None:
        """Drop the slots older than the window (lock held)."""
        oldest = math.floor(now - self._window) + 1
        while self._slots and self._slots[0][0] < oldest:
            self._slots.popleft()

    def add(self, attempts: int) -> None:
        """Account for one finished operation that sent ``attempts`` attempts."""
        now = self._clock()
        second = math.floor(now)
        with self._lock:
            if self._slots and self._slots[-1][0] == second:
                slot = self._slots[-1]
                slot[1] += attempts
                slot[2] += 1
            else:
                self._slots.append([second, attempts, 1])
                self._expire(now)

    def ratio(self) -> float:
        """Return attempts over operations in the window (0.0 when there were none)."""
        with self._lock:
            self._expire(self._clock())
            attempts = sum(slot[1] for slot in self._slots)
            operations = sum(slot[2] for slot in self._slots)
        return attempts / operations if operations else 0.0
