"""The shard behind a sharded topology's routers: its ingress limiter and the mongos retries.

Theory of operation: the embedded sharded topology has one data store and no shard process. A
:class:`ShardHop` stands in for the shard's replica-set primary as far as admission goes: one
token bucket (the shard's ``ingressRequestRateLimiter``) shared by every mongos of the
topology. A command a mongos has admitted (its own limiter, its own fail point) and would send
to a shard passes :meth:`ShardHop.forward` before it runs on the engine:

* the shard admits it (a token), or rejects it with the 462 reply of the server version's
  profile (``NoWritesPerformed`` from 8.2.6 on; with the 9.0 profile, ``baseBackoffMS`` when
  ``backpressureShardBaseBackoffMS`` is set);
* on a rejection the mongos retries itself, up to ``backpressureShardMaxRetries`` times
  (default 2), after ``jitter * min(10 s, base * 2**retry)`` with ``base`` 100 ms or the
  shard's ``baseBackoffMS`` and ``retry`` counting from 1: the client backoff of the driver
  specification (``client-backpressure.md``, "Overload retry policy");
* when the retries are spent, the client gets the shard's overload error: same code, errmsg
  and labels, without the shard's ``baseBackoffMS`` (the mongos consumed it; the mongos's own
  ``externalClientBaseBackoffMS`` is attached as to any overload reply).

The backoff is an ``asyncio.sleep`` in the connection's coroutine: other connections, monitors
included, are served meanwhile.

mongod reference (``../shared/notes/mongod-limiter-facts.md``, "Sharded clusters"): mongos
retries a shard's SystemOverloadedError itself with a default retry strategy and backoff
before answering the client, honours the shard's ``baseBackoffMS`` (SERVER-130142), and the
mongos-to-shard hop is rate limited (SERVER-137353). The note gives no attempt count, so the
retry count (2, the specification's default ``maxAdaptiveRetries``), the use of the
specification's backoff formula, and the reply the client sees are this server's choices.
Not modelled: several shards, a shard's request queue or exemptions, ``maxTimeMS`` cutting the
mongos's retries short.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Mapping
from typing import Any, Callable, Optional

from backpressure.testing.server.cluster.replies import rate_limited_reply
from backpressure.testing.server.control.parameters import ShardParameters
from backpressure.testing.server.control.profiles import ServerProfile
from backpressure.testing.server.control.ratelimit import AdmissionLimiter
from backpressure.testing.server.control.stats import ShardHopCounters

__all__ = [
    "MAX_BACKOFF_MS",
    "SHARD_BASE_BACKOFF_MS",
    "SHARD_LOCAL_COMMANDS",
    "ShardHop",
    "mongos_backoff_seconds",
]

SHARD_BASE_BACKOFF_MS = 100
"""The backoff base without a shard hint (the specification's ``BASE_BACKOFF``)."""
MAX_BACKOFF_MS = 10_000
"""The backoff cap (the specification's ``MAX_BACKOFF``)."""

SHARD_LOCAL_COMMANDS = frozenset({"endSessions", "refreshSessions", "startSession"})
"""Engine commands a mongos answers without a shard (its logical session cache); the
transport's own commands (hello, ping, buildInfo, setParameter, ...) never reach a shard."""


def mongos_backoff_seconds(retry: int, base_backoff_ms: Optional[float], jitter: float) -> float:
    """``jitter * min(MAX_BACKOFF, base * 2**retry)`` in seconds; ``retry`` counts from 1 and
    ``base`` is ``base_backoff_ms`` when positive, else 100 ms."""
    base = base_backoff_ms if base_backoff_ms is not None and base_backoff_ms > 0 else None
    base_ms = float(base) if base is not None else float(SHARD_BASE_BACKOFF_MS)
    return jitter * min(float(MAX_BACKOFF_MS), base_ms * 2.0**retry) / 1000.0


class ShardHop:
    """The shard's limiter (shared by every mongos) and the mongos-side retry loop."""

    def __init__(
        self,
        start_parameters: Mapping[str, Any],
        profile: ServerProfile,
        *,
        rng: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Build the shard from its start-up parameters (validated by ``ShardParameters``);
        its limiter refills on ``clock``."""
        self.profile = profile
        self.start_parameters = dict(start_parameters)
        self.parameters = ShardParameters(start_parameters, profile)
        self.limiter = AdmissionLimiter(self.parameters.limiter(), clock=clock)
        self._rng = rng
        self.attempted = 0
        """Commands that reached the shard (first attempts and mongos retries)."""
        self.admitted = 0
        """Commands the shard admitted."""
        self.rejected = 0
        """Commands the shard rejected with an overload error."""

    def apply_parameters(self) -> None:
        """Push the current parameter values into the shard's limiter (tokens kept)."""
        self.limiter.apply(self.parameters.limiter())

    def reset(self) -> None:
        """Parameters back to start-up, a full bucket, counters zeroed."""
        self.parameters = ShardParameters(self.start_parameters, self.profile)
        self.limiter.apply(self.parameters.limiter())
        self.limiter.bucket.refill_to_capacity()
        self.limiter.reset_counters()
        self.reset_counters()

    def reset_counters(self) -> None:
        """Zero the shard's counters."""
        self.attempted = self.admitted = self.rejected = 0

    def close(self) -> None:
        """Release the limiter."""
        self.limiter.close()

    def admit(self) -> Optional[dict[str, Any]]:
        """One attempt at the shard: None (admitted) or the shard's overload reply."""
        self.attempted += 1
        if self.limiter.try_admit():
            self.admitted += 1
            return None
        self.rejected += 1
        reply = rate_limited_reply(True, self.profile.no_writes_performed)
        backoff = self.parameters.base_backoff_ms
        if backoff > 0:
            reply["baseBackoffMS"] = backoff
        return reply

    async def forward(self, mongos: ShardHopCounters) -> Optional[dict[str, Any]]:
        """Send one command from a mongos to the shard, retrying its overload errors with
        backoff; return None once admitted, or the error for the client when the retries are
        spent. ``mongos`` holds the calling mongos's counters."""
        mongos.forwarded += 1
        retry = 0
        while True:
            reply = self.admit()
            if reply is None:
                return None
            mongos.shard_rejections += 1
            if retry >= self.parameters.max_retries:
                mongos.retries_exhausted += 1
                reply.pop("baseBackoffMS", None)
                return reply
            retry += 1
            jitter = self.parameters.jitter
            delay = mongos_backoff_seconds(
                retry,
                reply.get("baseBackoffMS"),
                self._rng() if jitter is None else jitter,
            )
            mongos.retries += 1
            mongos.backoff_seconds += delay
            await asyncio.sleep(delay)

    def status(self) -> dict[str, Any]:
        """The shard's counters and limiter, for ``backpressureStats`` and ``serverStatus``."""
        return {
            "attempted": self.attempted,
            "admitted": self.admitted,
            "rejected": self.rejected,
            "rateLimiterEnabled": self.limiter.settings.enabled,
            "ingressRequestRateLimiter": self.limiter.status(),
        }
