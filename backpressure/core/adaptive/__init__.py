"""Adaptive pacing: a per-server AIMD send-rate pacer that composes across a fleet.

Theory of operation.  One :class:`ServerPacer` per server address, all kept by one
:class:`ClientPacers` per client.  A pacer starts *open*: :meth:`ClientPacers.admit`
answers 0 without taking a lock and nothing waits (the inert state; its only cost is counting
replies in coarse time buckets so the send rate is known when it is needed).  The rules are
additive increase, multiplicative decrease (Chiu and Jain, 1989; TCP): every client of a server
decreases by the same factor and increases by the same absolute amount, so their shares
converge to fair ones whatever they started at (a rate copied from a measurement keeps
whatever share it saw).

1. **Close on overload, not on a blip.**  An open pacer closes when the server pushed back at
   least ``_CLOSE_PUSHBACKS`` (2) times within ``adaptive_window`` and those pushbacks are at
   least ``_CLOSE_FRACTION`` (a tenth) of the window's replies: one to three rejections among
   many admitted replies change nothing, so a transient costs only the attempts it rejected.
   It closes at ``adaptive_decrease`` times what the server admitted over the window, and at
   no less than ``adaptive_decrease`` times half the send rate (when the server admits
   nothing, the rate must not collapse).
2. **Multiplicative decrease, once per round.**  A pushback of an attempt sent at or after the
   last rate change lowers the rate to ``adaptive_decrease`` times the lower of the current
   rate and the send rate of the last 0.3 window, at most once per round: a round lasts at
   least twice the learned slot-to-reply time (a decrease reaches the server's queue only
   after what was queued there before it) and a tenth of the window.  A round in which the
   server admitted nothing (and pushed back at least 3 attempts: a client starved by its
   neighbours sees a reply or two a round) holds the rate instead (a fault rejecting
   everything): the pacer goes on probing at a steady pace, so it finds the server admitting
   again at once.
3. **Additive increase, then a fast climb.**  Between decreases the rate grows by
   ``adaptive_increase`` attempts/s every second, the same for every client.  Once the server
   has not pushed back for ``adaptive_quiet`` seconds (a quarter of it after a held round),
   the rate doubles every ``_CLIMB_DOUBLING`` windows until the next pushback, with no ceiling
   (the quiet may be the overload's end; a climb during the overload finds the capacity at its
   first pushback, and joins the neighbour tests' cuts so that its peers' verdicts hold, until
   it has had no pushback for ``_CLIMB_CUT_QUIET`` windows).
   After a held round the climb starts as soon as the server has admitted everything for a
   round, if that comes first (the rate was held, not learned).  A *young* overload (a
   pushback less than ``_YOUNG`` windows after the close: a tight limit of a second or two)
   ends sooner: its rate is still coming down, so its pushback rounds come often, and
   ``_YOUNG_GAPS`` times their mean gap without one (at least ``_YOUNG_QUIET`` window) is its
   quiet.  A climb that starts within ``_JUMP_AGE`` windows of the close starts from what the
   server admitted before the overload, when the pacer had a window of replies before it
   closed (a short overload's end most likely gives that capacity back; a client that closed
   in its first window saw only its first burst).
4. **Pacing.**  Every attempt to a paced server, the first attempt of an operation included,
   reserves the next free send slot: ``slot = max(now, next_slot)``, ``next_slot = slot +
   1/rate``, first come, first served; the retry of an attempt the server pushed back goes
   ahead of the waiting first attempts (it takes the slot of the first one, which moves to the
   slot behind it, and so on: no slot is sent twice).  A waiting caller holds a
   :class:`SlotTicket` and asks again (:meth:`ClientPacers.recheck`) when its wait is over,
   at most every ``_NAP`` windows: a decrease, or a rise of a tenth, re-spaces the waiting
   slots at the new rate at once (without that, slots reserved at the old rate would be sent
   for as long as the queue is, and the late feedback makes every client overshoot; after an
   overload the queue would drain at the overload's pace).  A slot is usable only if the reply
   can still arrive in time: the deadline bound is shortened by twice a smoothed slot-to-reply
   time, at most half the time left.
5. **Critical first.**  Every waiting slot has a class: critical retries, critical first
   attempts, sheddable retries, sheddable first attempts (``overrides(criticality=
   "sheddable")``), in that order.  An attempt goes ahead of the waiting attempts of every
   later class, as a retry does (it takes the first such slot it can wait for, and those
   behind it move one slot back; the first one moved past its bound is refused), so critical
   callers are served first come, first served and sheddable ones get only the slots no
   critical caller needs.  A sheddable attempt moved past its bound is held until that bound,
   then refused (as when it asks first).  When no attempt is sheddable the order is the one of 4.
   While a client marks work sheddable (within ``_MARKING`` windows of a sheddable attempt),
   a critical attempt (a first attempt or a retry) that no slot can serve gets a *last
   chance*: it waits until ``_LAST_CHANCE_LEAD`` (a fifth of a) window before its bound, so
   that a retry still fits (at once when less is left), and is sent once, instead of failing
   unsent.  Each client orders only its own queue, so one client would refuse critical work
   while its neighbours' sheddable work takes the server's tokens; the last chance takes a
   token the server has to spare (most are admitted), or is pushed back as the refusal would
   have failed.  Its reply is kept out of the pacing (it was sent beyond the paced rate).  A
   client that marks nothing keeps refusing: there, a token taken beyond the paced rate is a
   peer's critical one.  A critical retry to a paced server whose backoff would pass its
   deadline waits a part of the time left instead of failing (see
   :mod:`backpressure.core.decision`): the pacing spaces it.
6. **Hold, never spin.**  A caller whose wait would pass its deadline (or ``max_local_wait``)
   reserves nothing and is held until that bound, then refused on its recheck (the adapters'
   wait-and-recheck loop): refused at once, a closed loop would start its next operation at
   once and spin on refusals.  A caller whose deadline has already passed is refused at once.
7. **Reopening.**  The pacer opens again (the inert state) when the server has not pushed back
   for a window and no caller had to wait, nor was held, during that window: the pacing limits
   nothing.  A pacer that still limits callers keeps climbing instead (reopened, it would
   close again at a rate measured while it was paced).

8. **Compete when the cuts move nothing.**  At instants one window apart, the same for every
   client of the clock, every pacer paced for a window and pushed back in 2 % of its replies
   cuts to 0.8 of its send rate for 0.5 window: at every instant until 4 windows after
   it closed (peers close together when an overload begins, so they test together), then at
   every third one.  The cut acts at once: the callers already waiting are spaced at its rate
   (none past its bound), or the queue's old slots would answer for most of the cut.  Among
   polite peers, who all cut together, the pushback drains; next to clients that do not cut
   (stock retry loops) it does not.  A pacer that saw pushback in at least 15 % of its replies,
   one of them within 0.2 window or among its last 5 replies, judges its cut's replies (from
   the tenth of a window after the one its cut began in, to the end of the cut: a first test
   that begins late, once the pacer settled, is not judged on the pushback before it, nor on
   the reply that ends it; every cut lasts as long, or a peer back at its rate early would
   push back the cuts still running): each adds to a log-likelihood ratio (pushed back as
   often as before the cut, against a fifth as often), summed over tests because one test has
   only a few replies (one test lowers a polite pacer's evidence by at most 0.5: a starved
   client's few admitted replies must not outweigh the tests before), and bounded to +-3.  At
   +3 the pacer *competes*: it sends as the spec's retry loop alone does (no local waits),
   testing at one instant in 16 with a cut to three quarters of what the server admitted it
   (each such test hands its share to the neighbours that do not cut); back at -3 it is
   polite again, from that test's rate (one test lowers a competing pacer's evidence by at
   most 3: at least two drained cuts, however many replies one has).
   A window in which the server admitted nothing is a fault, not a neighbour: no test.  A
   client that marks work sheddable cuts with the others but takes no verdict from its cuts
   (a competing one still judges, to be polite again): its last chances are sent beyond its
   rate, so among such peers a joint cut need not drain the pushback.  The pushback level
   alone cannot tell the two apart (Copa's competitive mode, NSDI 2018).

Retries to a paced server spend no budget (a paced retry takes the slot of another attempt);
before the pacer closes, they draw on the per-server budget (see :mod:`backpressure.core.budget`).

All state changes happen under one ``threading.Lock`` per pacer held only around arithmetic
(never across a sleep, an await or I/O), so one :class:`ClientPacers` serves threads, Motor's
executor and the event loop alike.  Time comes from the injected clock; nothing here sleeps.
"""

from __future__ import annotations

from backpressure.core.adaptive.gate import (
    LocalOverloadError,
    LocalRefusalEvent,
    LocalWaitEvent,
    PacingGate,
    PacingListener,
)
from backpressure.core.adaptive.pacer import ServerPacer, ServerPacerSnapshot
from backpressure.core.adaptive.pacers import ClientPacers, pacers_for
from backpressure.core.adaptive.slots import Refusal, SlotDecision, SlotGrant, SlotTicket
from backpressure.core.log_limit import LogRateLimit

__all__ = [
    "ClientPacers",
    "LocalOverloadError",
    "LocalRefusalEvent",
    "LocalWaitEvent",
    "LogRateLimit",
    "PacingGate",
    "PacingListener",
    "Refusal",
    "ServerPacer",
    "ServerPacerSnapshot",
    "SlotDecision",
    "SlotGrant",
    "SlotTicket",
    "pacers_for",
]
