"""Token buckets for the embedded server's ingress limiters, with an optional FIFO wait queue.

Theory of operation: a :class:`TokenBucket` refills at ``rate`` tokens per second up to
``capacity = rate * burst_seconds`` and starts full; below one token it admits nothing. An
:class:`AdmissionLimiter` wraps one bucket with mongod's admission rules: disabled admits
everything; otherwise a request takes a token, or waits in a FIFO queue of at most
``max_queue_depth`` entries (0 = reject at once), or is rejected. The waiting is the only
asyncio part: one pump task hands out tokens to waiters in arrival order. Time comes from an
injected clock so the buckets can be tested as timelines.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from typing import Any, Callable, Optional

__all__ = ["AdmissionLimiter", "LimiterSettings", "TokenBucket"]

Clock = Callable[[], float]
"""A monotonic clock in seconds."""

UNLIMITED_RATE = 2**31 - 1
"""mongod's default admission rate (INT32_MAX)."""

INT64_MAX = 2**63 - 1
"""mongod caps ``totalAvailableTokens`` here (an unlimited bucket holds infinitely many)."""


class TokenBucket:
    """A refilling token bucket; the caller owns all synchronisation (one event loop)."""

    def __init__(self, rate: float, burst_seconds: float, *, clock: Clock = time.monotonic) -> None:
        """Create a full bucket holding ``rate * burst_seconds`` tokens (at least one)."""
        self._clock = clock
        self.rate = float(rate)
        self.capacity = _capacity(rate, burst_seconds)
        self._tokens = self.capacity
        self._stamp = clock()

    def reconfigure(self, rate: float, burst_seconds: float) -> None:
        """Change rate and capacity, keeping the tokens already earned (clipped to capacity)."""
        self._refill()
        self.rate = float(rate)
        self.capacity = _capacity(rate, burst_seconds)
        self._tokens = min(self._tokens, self.capacity)

    def refill_to_capacity(self) -> None:
        """Fill the bucket completely (used when a limiter is switched on)."""
        self._tokens = self.capacity
        self._stamp = self._clock()

    def give_back(self) -> None:
        """Return one token (an interrupted waiter's), up to the capacity."""
        self._refill()
        self._tokens = min(self.capacity, self._tokens + 1.0)

    @property
    def tokens(self) -> float:
        """Tokens available now."""
        self._refill()
        return self._tokens

    def try_acquire(self) -> bool:
        """Take one token if available."""
        self._refill()
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False

    def seconds_until_token(self) -> float:
        """How long until one token is available (0 when one is)."""
        self._refill()
        if self._tokens >= 1.0:
            return 0.0
        if self.capacity < 1.0:
            return math.inf  # never: the bucket cannot hold a whole token
        return (1.0 - self._tokens) / self.rate

    def _refill(self) -> None:
        now = self._clock()
        elapsed = max(0.0, now - self._stamp)
        self._stamp = now
        if self._tokens < self.capacity:
            self._tokens = min(self.capacity, self._tokens + elapsed * self.rate)


def _capacity(rate: float, burst_seconds: float) -> float:
    """``rate * burst_seconds`` tokens: below one, the bucket admits nothing, as folly's
    TokenBucket under mongod's limiters does."""
    if rate <= 0 or burst_seconds <= 0:
        raise ValueError("rate and burst_seconds must be positive")
    product = rate * burst_seconds
    return product if math.isfinite(product) else math.inf


class LimiterSettings:
    """The mutable settings of one limiter (mirrors mongod's server parameters)."""

    def __init__(
        self,
        enabled: bool = False,
        rate: float = UNLIMITED_RATE,
        burst_seconds: float = math.inf,
        max_queue_depth: int = 0,
    ) -> None:
        """Store the settings; defaults are mongod's (disabled, unlimited)."""
        self.enabled = enabled
        self.rate = rate
        self.burst_seconds = burst_seconds
        self.max_queue_depth = max_queue_depth

    def copy(self) -> LimiterSettings:
        """Return an independent copy."""
        return LimiterSettings(self.enabled, self.rate, self.burst_seconds, self.max_queue_depth)


class AdmissionLimiter:
    """An ingress limiter: token bucket, FIFO queue, mongod's admission counters."""

    def __init__(self, settings: LimiterSettings, *, clock: Clock = time.monotonic) -> None:
        """Apply ``settings`` (copied) with a full bucket."""
        self._clock = clock
        self.settings = settings.copy()
        self.bucket = TokenBucket(settings.rate, settings.burst_seconds, clock=clock)
        self._waiters: deque[asyncio.Future[bool]] = deque()
        self._pump: asyncio.Task[None] | None = None
        self.attempted = 0
        """Requests that went through the limiter (admitted, queued or rejected)."""
        self.successful = 0
        """Requests admitted, immediately or after waiting."""
        self.rejected = 0
        """Requests rejected because the queue was full."""
        self.exempted = 0
        """Requests that bypassed the limiter."""

    def apply(self, settings: LimiterSettings) -> None:
        """Install new settings, keeping the tokens (clipped to the new capacity), as mongod's
        ``reset()`` does; switching on does not refill; switching off frees waiters."""
        self.settings = settings.copy()
        self.bucket.reconfigure(settings.rate, settings.burst_seconds)
        if not settings.enabled:
            self._release_all()

    @property
    def queued(self) -> int:
        """Requests currently waiting for a token."""
        return sum(1 for w in self._waiters if not w.done())

    def record_exempt(self) -> None:
        """Count a request that bypassed the limiter."""
        self.exempted += 1

    def try_admit(self) -> bool | None:
        """Admit (True), reject (False), or ``None``: the caller must :meth:`wait` in the queue."""
        if not self.settings.enabled:
            return True
        self.attempted += 1
        if not self._waiters and self.bucket.try_acquire():
            self.successful += 1
            return True
        if self.queued >= self.settings.max_queue_depth:
            self.rejected += 1
            return False
        return None

    async def wait(
        self,
        timeout: Optional[float] = None,
        interrupt: Optional[asyncio.Future[Any]] = None,
    ) -> bool:
        """Wait in the FIFO queue until a token is handed over (after ``try_admit`` said None).

        Return False when ``timeout`` seconds pass or ``interrupt`` completes first: the waiter
        leaves the queue, and a token handed over at that very moment goes back to the bucket
        (mongod returns the token its interrupted waiter borrowed).
        """
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        if self._pump is None or self._pump.done():
            self._pump = asyncio.ensure_future(self._run_pump())
        if timeout is None and interrupt is None:
            await future
            self.successful += 1
            return True
        waiting: set[asyncio.Future[Any]] = {future}
        if interrupt is not None:
            waiting.add(interrupt)
        try:
            await asyncio.wait(waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            self._leave(future)
            raise
        if future.done() and not (interrupt is not None and interrupt.done()):
            self.successful += 1
            return True
        self._leave(future)
        return False

    def _leave(self, future: asyncio.Future[bool]) -> None:
        """Take a waiter out of the queue, giving back a token it was just handed."""
        if future.done() and not future.cancelled():
            if self.settings.enabled:
                self.bucket.give_back()
        else:
            future.cancel()  # the pump skips it

    async def admit(self) -> bool:
        """Admit or reject one request, waiting in the queue when allowed."""
        decision = self.try_admit()
        if decision is None:
            await self.wait()
            return True
        return decision

    def reset_counters(self) -> None:
        """Zero the admission counters."""
        self.attempted = self.successful = self.rejected = self.exempted = 0

    def close(self) -> None:
        """Stop the pump task and release every waiter."""
        self._release_all()
        if self._pump is not None:
            self._pump.cancel()
            self._pump = None

    def status(self) -> dict[str, Any]:
        """The ``serverStatus`` section for this limiter (mongod's fields; mongod leaves queue
        statistics out of it, and so does this)."""
        return {
            "attemptedAdmissions": self.attempted,
            "successfulAdmissions": self.successful,
            "rejectedAdmissions": self.rejected,
            "exemptedAdmissions": self.exempted,
            "totalAvailableTokens": float(min(self.bucket.tokens, INT64_MAX)),
        }

    def _release_all(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(True)

    async def _run_pump(self) -> None:
        while self._waiters:
            if self._waiters[0].done():
                self._waiters.popleft()
                continue
            if self.bucket.try_acquire():
                self._waiters.popleft().set_result(True)
                continue
            # A bucket smaller than one token never admits: look again in a second, in case
            # the limiter is reconfigured (or switched off, which releases the waiters).
            await asyncio.sleep(min(1.0, max(0.001, self.bucket.seconds_until_token())))
