"""The pacers of one client's servers, and the questions the gate asks them."""

from __future__ import annotations

import threading
import time
from typing import Callable, Optional, Union

from backpressure.core.adaptive.pacer import Address, ServerPacer, ServerPacerSnapshot
from backpressure.core.adaptive.slots import SEND_NOW, Refusal, SlotDecision, SlotGrant
from backpressure.core.policy import Policy

__all__ = ["ClientPacers", "PacingTransition", "pacers_for"]

PacingTransition = Callable[[Address, ServerPacerSnapshot], None]
"""Called once each time a server's pacer closes (``snapshot.paced``) or opens again."""


def pacers_for(
    policy: Policy, *, clock: Callable[[], float] = time.monotonic
) -> Optional[ClientPacers]:
    """Return a fresh ClientPacers for an adaptive ``policy``, else None (no pacing)."""
    return ClientPacers(policy, clock=clock) if policy.adaptive else None


class ClientPacers:
    """The pacers of one client's servers, and the questions the adapters ask them.

    ``admit(server, deadline)`` before every attempt, then ``record(server, overloaded)`` after
    it.  Pacers are created on first use of an address; the map is read without a lock.
    """

    def __init__(self, policy: Policy, *, clock: Callable[[], float] = time.monotonic) -> None:
        """Create an empty map of pacers configured by ``policy``, timed by ``clock``."""
        self._policy = policy
        self._clock = clock
        self._max_wait = float(policy.max_local_wait)
        self._pacers: dict[Address, ServerPacer] = {}
        self._lock = threading.Lock()
        self._announced: dict[Address, bool] = {}  # the last state told to ``on_transition``
        self.on_transition: Optional[PacingTransition] = None
        """Called (outside any lock) once per change of a server's pacing state: when its pacer
        closes (a pushback is recorded) and when it opens again (asked to admit, or whether it
        is paced); exceptions propagate to the caller (the gate's callback logs only)."""
        self.engaged = False
        """Whether some server may be paced: set by pushback, cleared once every pacer has
        opened again.  While it is False the adapters skip the pacing (nothing would wait)."""

    @property
    def clock(self) -> Callable[[], float]:
        """The injected monotonic clock."""
        return self._clock

    @property
    def policy(self) -> Policy:
        """The policy whose adaptive fields configure the pacers."""
        return self._policy

    def pacer(self, server: Address) -> ServerPacer:
        """Return the pacer of ``server``, creating it on first use."""
        pacer = self._pacers.get(server)
        if pacer is None:
            with self._lock:
                pacer = self._pacers.get(server)
                if pacer is None:
                    pacer = self._pacers[server] = ServerPacer(self._policy)
        return pacer

    def admit(
        self,
        server: Optional[Address],
        deadline: Optional[float] = None,
        *,
        retry: bool = False,
        sheddable: bool = False,
    ) -> SlotDecision:
        """Decide whether an attempt to ``server`` is sent now, after a wait, or refused.

        ``deadline`` is the operation's deadline on the injected clock (None: no deadline).  The
        wait allowed is ``max_local_wait``, or the time left before the deadline if shorter.
        ``retry``: the attempt retries one a server pushed back (it goes ahead of the queue).
        ``sheddable``: the operation may be shed first (critical attempts go ahead of it).
        """
        if server is None:
            return SEND_NOW
        pacer = self._pacers.get(server)
        if pacer is None or not pacer.paced:
            return SEND_NOW
        now = self._clock()
        limit = self._max_wait
        deadline_bound = False
        if deadline is not None and deadline - now < limit:
            limit = max(0.0, deadline - now)
            deadline_bound = True
        decision = pacer.admit(now, limit, deadline_bound, retry, sheddable)
        if not pacer.paced:
            self._refresh_engaged()
            self._announce(server, pacer, paced=False)
        return decision

    def record(
        self,
        server: Optional[Address],
        *,
        overloaded: bool,
        grant: Optional[SlotGrant] = None,
    ) -> None:
        """Account for the reply to an attempt on ``server`` (``overloaded``: pushed back).

        ``grant`` is what :meth:`admit` answered for that attempt (None when unknown).
        """
        if server is None:
            return
        ticket = None if grant is None else grant.ticket
        last_chance = ticket is not None and ticket.last_chance
        if overloaded:
            slot = None if grant is None else grant.send_slot
            pacer = self.pacer(server)
            pacer.record_pushback(self._clock(), slot, last_chance)
            self.engaged = True
            if pacer.paced:
                self._announce(server, pacer, paced=True)
        else:
            slot = None if grant is None else grant.send_slot
            self.pacer(server).record_admitted(self._clock(), slot, last_chance)

    def batch_counter(self, server: Address, count: int) -> Callable[[], None]:
        """Return a callable that counts ``count`` admitted replies from ``server`` now."""
        pacer = self.pacer(server)
        clock = self._clock

        def count_batch() -> None:
            pacer.add_admitted(clock(), count)

        return count_batch

    def recheck(self, server: Optional[Address], grant: SlotGrant) -> Union[float, Refusal]:
        """Return how much longer an admitted attempt waits (0: send now), or its refusal.

        Ask when the wait ``admit`` answered is over: a retry going ahead may have moved the
        slot later, or past the attempt's bound.
        """
        ticket = grant.ticket
        if server is None or ticket is None:
            return 0.0
        return self.pacer(server).recheck(self._clock(), ticket)

    def is_paced(self, server: Address) -> bool:
        """Whether attempts to ``server`` are paced now (opening its pacer if it is due)."""
        pacer = self._pacers.get(server)
        if pacer is None or not pacer.paced:
            return False
        if pacer.still_paced(self._clock()):
            return True
        self._refresh_engaged()
        self._announce(server, pacer, paced=False)
        return False

    def _announce(self, server: Address, pacer: ServerPacer, *, paced: bool) -> None:
        """Tell ``on_transition`` that ``server``'s pacer is now ``paced`` (once per change).

        Only a pushback can close a pacer and only ``admit``/``is_paced`` open it, so this runs
        on those paths alone, never on the success path.  Callers racing over one change find
        it told already under the lock, so exactly one of them reports it.
        """
        if self._announced.get(server, False) is paced:
            return  # told already (read without the lock: most pushbacks find it so)
        with self._lock:
            if self._announced.get(server, False) is paced:
                return
            self._announced[server] = paced
        callback = self.on_transition
        if callback is not None:
            callback(server, pacer.snapshot(self._clock()))

    def _refresh_engaged(self) -> None:
        """Recompute ``engaged`` after a pacer opened again."""
        self.engaged = any(p.paced for p in list(self._pacers.values()))

    def pushing_back(self) -> bool:
        """Whether any server of this client is paced (used to hold hedges and probes)."""
        return any(pacer.paced for pacer in list(self._pacers.values()))

    def snapshot(self) -> dict[Address, ServerPacerSnapshot]:
        """Return the state of every known server's pacer.

        A pacer due to open again opens first (as :meth:`is_paced` does), so an idle client's
        metrics and statistics do not show a server paced after its overload ended.
        """
        pacers = list(self._pacers.items())
        for server, pacer in pacers:
            if pacer.paced:
                self.is_paced(server)
        now = self._clock()
        return {server: pacer.snapshot(now) for server, pacer in pacers}
