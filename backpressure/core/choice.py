"""Server choice: a per-server overload signal and the rule that steers selections around an
overloaded server.

When pymongo may choose between servers (several mongos routers, reads from secondaries), a
server that pushes back keeps receiving a share of the first attempts with pymongo's own choice
(two at random, the one with fewer operations in flight: a server that rejects at once has
few).  :class:`ServerChoice` keeps, per server address, a signal in 0..1: the share of its
recent attempts that were pushed back (an overload error, or a timeout), with a short memory.
Each attempt moves it by :data:`WEIGHT` towards 1 (pushed back) or 0 (a reply), and it decays
towards 0 with a half-life of :data:`HALF_LIFE` seconds, so it fades when nothing new is heard
and a few good replies to the probes of a recovered server bring it down.  At each selection
with a choice, :meth:`ServerChoice.avoid` draws the servers to deprioritize: a server whose
signal exceeds the lowest among the known servers by more than :data:`DEAD_ZONE` is avoided
with a probability that grows to ``1 - PROBE_SHARE`` at :data:`FULL_AVOID` above it.  The
selection itself stays pymongo's: the adapters hand the drawn servers to it as deprioritized
servers, which it leaves out of the eligible ones only when another eligible server remains,
and then chooses as it always does.

So the rule never widens eligibility (read preference, tags, staleness, the latency window are
pymongo's), never herds (the servers left keep pymongo's own balancing, and a server that turns
hot in turn is avoided in turn), chooses as stock does when every server pushes back equally,
and probes an avoided server with a small share of the selections so its recovery is seen.

Pure logic: the clock and the random source are given; a lock guards the arithmetic only.
"""

from __future__ import annotations

import math
import random as _random
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Callable, Optional

from backpressure.core.events import Address

__all__ = [
    "DEAD_ZONE",
    "FULL_AVOID",
    "HALF_LIFE",
    "PROBE_SHARE",
    "WEIGHT",
    "ChoiceListener",
    "ServerChoice",
    "ServerSignal",
]

HALF_LIFE = 1.0
"""Seconds after which a server's signal counts half, when nothing new is heard."""

WEIGHT = 0.3
"""How far one attempt moves its server's signal towards its outcome (1: pushed back)."""

DEAD_ZONE = 0.005
"""A server whose signal exceeds the lowest by at most this much is never avoided."""

FULL_AVOID = 0.05
"""Above the dead zone, the signal gap at which a server is avoided on every selection (but
the probes)."""

PROBE_SHARE = 0.05
"""The share of selections that leave even a fully avoided server eligible."""

AVOIDED = 0.5
"""An avoidance probability from which a server counts as avoided (gauge, log line); it counts
as returned once the probability is back to 0."""

_QUIET = 1e-3
"""A signal below which a server no longer engages the rule."""


@dataclass(frozen=True)
class ServerSignal:
    """One server's overload signal as the choice rule sees it."""

    address: Address
    """The server's (host, port)."""
    signal: float
    """Share of its recent attempts pushed back (0..1, decaying)."""
    avoided: bool
    """Whether selections are steered away from it now."""
    routed_around: int
    """How many selections were steered away from it so far."""


class ChoiceListener:
    """Told when a server becomes avoided and when it returns (the metrics' and the log's
    hook); both methods do nothing here."""

    def server_avoided(self, address: Address, signal: float) -> None:
        """Selections are now steered away from ``address``, whose signal is ``signal``."""

    def server_returned(self, address: Address) -> None:
        """Selections no longer avoid ``address``."""


class _Server:
    """The signal of one server (guarded by the owner's lock)."""

    __slots__ = ("at", "avoided", "routed_around", "signal")

    def __init__(self, now: float) -> None:
        self.signal = 0.0
        self.at = now
        self.avoided = False
        self.routed_around = 0

    def decay(self, now: float, rate: float) -> None:
        """Bring the signal to ``now`` (``rate``: ln 2 / half-life)."""
        elapsed = now - self.at
        if elapsed > 0.0:
            self.signal *= math.exp(-rate * elapsed)
            self.at = now


class ServerChoice:
    """Per-server overload signal and the choice rule over the servers pymongo finds eligible
    (see the module).

    ``engaged`` is False while no server has pushed back lately: the adapters read it on every
    selection and do nothing else then, so a quiet path costs one attribute read.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        random: Callable[[], float] = _random.random,
        half_life: float = HALF_LIFE,
        probe_share: float = PROBE_SHARE,
        listener: Optional[ChoiceListener] = None,
    ) -> None:
        """Keep signals on ``clock``, draw with ``random`` (uniform in [0, 1)); ``half_life``
        (> 0 seconds) and ``probe_share`` (0..1) as in the module; ``listener`` is told of
        servers that become avoided and that return."""
        if not half_life > 0 or not math.isfinite(half_life):
            raise ValueError(f"half_life must be a finite number > 0, got {half_life!r}")
        if not 0.0 <= probe_share <= 1.0:
            raise ValueError(f"probe_share must be between 0 and 1, got {probe_share!r}")
        self._clock = clock
        self._random = random
        self._rate = math.log(2.0) / half_life
        self._keep = 1.0 - probe_share
        self._lock = threading.Lock()
        self._servers: dict[Address, _Server] = {}
        self.listener: ChoiceListener = listener if listener is not None else ChoiceListener()
        self.engaged = False
        """Whether some server pushed back lately (the rule has work to do)."""

    # -- what the executors report ----------------------------------------------------------

    def record(self, address: Optional[Address], attempts: int = 1, pushed_back: int = 0) -> None:
        """Count ``attempts`` finished attempts on ``address``, ``pushed_back`` of them pushed
        back (an overload error or a timeout).  Unknown addresses (None) are ignored."""
        if address is None:
            return
        now = self._clock()
        with self._lock:
            server = self._servers.get(address)
            if server is None:
                if not pushed_back and not self.engaged:
                    return  # nothing to remember while every server is quiet
                server = self._servers[address] = _Server(now)
            server.decay(now, self._rate)
            replies = attempts - pushed_back
            if replies > 0:
                server.signal *= (1.0 - WEIGHT) ** replies
            if pushed_back:
                server.signal = 1.0 - (1.0 - server.signal) * (1.0 - WEIGHT) ** pushed_back
                self.engaged = True

    def successes(self, address: Optional[Address], count: int) -> None:
        """Count ``count`` attempts on ``address`` that got a reply (the lean path's batches)."""
        if self.engaged:
            self.record(address, count)

    # -- the choice -------------------------------------------------------------------------

    def avoid(self, addresses: Iterable[Address]) -> list[Address]:
        """Draw the servers among ``addresses`` (the servers a selection may choose from, or
        all the client knows) that this selection should deprioritize."""
        if not self.engaged:
            return []
        now = self._clock()
        avoided: list[Address] = []
        changes: list[tuple[Address, Optional[float]]] = []
        with self._lock:
            signals: list[tuple[Address, float, Optional[_Server]]] = []
            for address in addresses:
                server = self._servers.get(address)
                if server is None:
                    signals.append((address, 0.0, None))
                    continue
                server.decay(now, self._rate)
                signals.append((address, server.signal, server))
            if not signals:
                return []
            lowest = min(signal for _, signal, _ in signals)
            for address, signal, server in signals:
                if server is None:
                    continue
                chance = self.chance(signal - lowest)
                if server.avoided and chance == 0.0:
                    server.avoided = False
                    changes.append((address, None))
                elif not server.avoided and chance >= AVOIDED:
                    server.avoided = True
                    changes.append((address, signal))
                if chance > 0.0 and self._random() < chance:
                    server.routed_around += 1
                    avoided.append(address)
            if all(s.signal < _QUIET and not s.avoided for s in self._servers.values()):
                self.engaged = False  # the signals stay: they decay on
        for address, change in changes:
            if change is None:
                self.listener.server_returned(address)
            else:
                self.listener.server_avoided(address, change)
        return avoided

    def chance(self, gap: float) -> float:
        """The probability that a selection avoids a server whose signal exceeds the lowest
        by ``gap``: 0 up to the dead zone, then growing linearly to ``1 - probe share``."""
        if gap <= DEAD_ZONE:
            return 0.0
        return min(1.0, (gap - DEAD_ZONE) / (FULL_AVOID - DEAD_ZONE)) * self._keep

    # -- what operators see -----------------------------------------------------------------

    def signals(self) -> dict[Address, ServerSignal]:
        """Every remembered server's signal now, by address."""
        now = self._clock()
        with self._lock:
            found = {}
            for address, server in self._servers.items():
                server.decay(now, self._rate)
                found[address] = ServerSignal(
                    address, server.signal, server.avoided, server.routed_around
                )
            return found
