"""What the pacing answers for one attempt: send after a wait (:class:`SlotGrant`, with the
:class:`SlotTicket` of a reserved slot) or do not send (:class:`Refusal`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Union

from backpressure.core.decision import StopReason

__all__ = ["SEND_NOW", "Refusal", "SlotDecision", "SlotGrant", "SlotTicket"]


class SlotTicket:
    """The send slot of one waiting attempt; the pacer may move it later, or cancel it."""

    __slots__ = ("last_chance", "latest", "rank", "reason", "refused", "retry", "slot", "until")

    def __init__(
        self,
        slot: float,
        latest: float,
        reason: StopReason,
        retry: bool,
        sheddable: bool = False,
        until: Optional[float] = None,
    ) -> None:
        """Reserve ``slot``; the attempt may be sent no later than ``latest``.

        ``sheddable``: the operation may be shed first; such an attempt refused after a move is
        held until ``until`` (its hold bound; default ``latest``) before it learns it.
        """
        self.slot = slot
        """The reserved send time on the pacer's clock."""
        self.latest = latest
        """The latest send time the attempt's bound allows (its deadline less the reply margin,
        or ``max_local_wait``)."""
        self.reason = reason
        """Which bound ``latest`` is, for a refusal."""
        self.retry = retry
        """Whether the attempt retries one the server pushed back."""
        self.rank = rank_of(retry, sheddable)
        """The attempt's class: it goes ahead of every waiting attempt of a higher rank."""
        self.until = latest if until is None else until
        """The hold bound: a sheddable attempt refused after a move is held until then."""
        self.refused = False
        """Set when a retry going ahead moved this slot past ``latest``: do not send."""
        self.last_chance = False
        """Set for a critical first attempt of a client that marks work sheddable, refused a
        slot: it is sent once at ``latest`` (its last chance, moved a little before its bound)
        instead of failing unsent, and its reply is kept out of the pacing (it was sent beyond
        the paced rate)."""

    def __repr__(self) -> str:
        """Show the slot and the bound."""
        state = ", last chance" if self.last_chance else ", refused" if self.refused else ""
        return f"SlotTicket(slot={self.slot!r}, latest={self.latest!r}{state})"


def rank_of(retry: bool, sheddable: bool) -> int:
    """The class of a waiting attempt: critical retries (0) first, sheddable first attempts (3)
    last."""
    return (2 if sheddable else 0) + (0 if retry else 1)


@dataclass(frozen=True)
class SlotGrant:
    """Send the attempt after waiting ``wait`` seconds locally (0: send now).

    ``round`` is the pacer's round the slot was reserved in (None: sent unpaced) and ``slot``
    the reserved send time on the pacer's clock (None: sent unpaced); hand the grant back to
    :meth:`ClientPacers.record` with the attempt's outcome.
    """

    wait: float
    round: Optional[int] = None
    slot: Optional[float] = field(default=None, compare=False)
    ticket: Optional[SlotTicket] = field(default=None, compare=False)
    """The reservation of a waiting attempt (None: sent now); the pacer may move its slot."""

    @property
    def send_slot(self) -> Optional[float]:
        """The slot the attempt was finally sent in (the ticket's, if the pacer moved it)."""
        ticket = self.ticket
        return self.slot if ticket is None else ticket.slot


@dataclass(frozen=True)
class Refusal:
    """Do not send the attempt: the local wait it needs (``wait``) is not allowed."""

    reason: StopReason
    wait: float


SlotDecision = Union[SlotGrant, Refusal]
"""What :meth:`ClientPacers.admit` returns."""

SEND_NOW = SlotGrant(0.0)
"""The grant of an attempt sent at once, unpaced."""
