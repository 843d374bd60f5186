"""A rate limit for log lines that could flood a log under sustained overload."""

from __future__ import annotations

import math
import threading
import time
from typing import Callable, Optional

__all__ = ["LogRateLimit"]


class LogRateLimit:
    """At most one log line per ``interval`` seconds; counts the lines it held back.

    One instance is shared by every caller that would log the same kind of line (all the
    operations of a client, say).  Only logging is limited: listeners still receive every event.
    """

    def __init__(
        self, interval: float = 5.0, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        """Allow one line per ``interval`` seconds (finite, >= 0) measured on ``clock``."""
        if isinstance(interval, bool) or not isinstance(interval, (int, float)):
            raise TypeError(f"interval must be a number, got {interval!r}")
        if not math.isfinite(interval) or interval < 0:
            raise ValueError(f"interval must be a finite number >= 0, got {interval!r}")
        self._interval = float(interval)
        self._clock = clock
        self._lock = threading.Lock()
        self._last: Optional[float] = None
        self._held = 0

    @property
    def interval(self) -> float:
        """Minimum number of seconds between two lines."""
        return self._interval

    def admit(self) -> Optional[int]:
        """Account for one line that is due.

        Return None when it is to be held back (a line went out less than ``interval``
        seconds ago); otherwise the number held back since the previous line (0 for the
        first), and this one is to be logged.
        """
        now = self._clock()
        with self._lock:
            if self._last is not None and now - self._last < self._interval:
                self._held += 1
                return None
            held, self._held, self._last = self._held, 0, now
            return held
