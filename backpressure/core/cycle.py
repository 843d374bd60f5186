"""The attempt cycle of one operation: what to do next, as values (sans I/O).

Theory of operation.  Every executor (the native wrappers of pymongo >= 4.17, the backport loop
of 4.9-4.16, the simulator) runs one :class:`AttemptCycle` per operation and does what it says;
the cycle never sleeps, sends or reads a clock it was not given.  One attempt goes:

1. **Select.**  The executor selects a server (avoiding :meth:`AttemptCycle.paced` servers).
2. **Admit.**  ``admit(server, deadline)`` answers :data:`SEND`, :class:`Wait` (wait, then ask
   ``waited()``: :meth:`AttemptCycle.wait_out` is that loop, the executors only sleep) or
   :class:`Stop` (refused locally: raise ``Stop.error``; nothing was sent).
3. **Send.**  ``started(server)`` records the attempt.
4. **Reply.**  ``succeeded()`` does the success accounting (a first-attempt success is the
   lock-free ``ClientState.count_first_attempt``); ``failed(error, ...)`` hands the outcome to
   the pacing and asks the retry rules: :class:`Backoff` (sleep, then select again, avoiding
   the failed server when ``retarget``) or :class:`Stop` (raise ``Stop.error``, with the
   retry summary).

The answers and :class:`WaitOut` live in :mod:`backpressure.core.cycle_steps`, the order of
the calls (a state machine: :class:`Phase`, :class:`Event`, the one table :data:`TRANSITIONS`,
:class:`CycleOrderError`) in :mod:`backpressure.core.cycle_order`; both are re-exported here.
A call out of order raises while :data:`STRICT` is on (the project's tests, and
``BACKPRESSURE_STRICT_CYCLE=1``); off (production) a cycle does not track its phase.  The
record (:class:`~backpressure.core.cycle_record.CycleRecord`) is created only when something
other than a first-attempt success happens.  A cycle reads the client's clock only while its
client has an operation listener (``ClientState.timed``), to time the operation.  Era rules
(classic retries, transaction fix-ups) stay in the executors, which reach the record through
:meth:`AttemptCycle.record`.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Optional, Union

from backpressure.core.adaptive import LocalOverloadError, PacingGate, SlotGrant
from backpressure.core.client_state import ClientState
from backpressure.core.cycle_order import (
    TRANSITIONS,
    CycleOrderError,
    Event,
    Phase,
    order_error,
)
from backpressure.core.cycle_record import CycleRecord
from backpressure.core.cycle_steps import (
    SEND,
    Backoff,
    Send,
    Step,
    Stop,
    Wait,
    WaitOut,
    step_of,
)
from backpressure.core.decision import StopReason
from backpressure.core.events import Address, attach_summary
from backpressure.core.labels import is_timeout, overload_labels
from backpressure.core.overrides import Criticality

__all__ = [
    "SEND",
    "STRICT",
    "TRANSITIONS",
    "AttemptCycle",
    "Backoff",
    "CycleOrderError",
    "Deadline",
    "Event",
    "Phase",
    "Send",
    "Step",
    "Stop",
    "Wait",
    "WaitOut",
]

STRICT = os.environ.get("BACKPRESSURE_STRICT_CYCLE", "") == "1"
"""Whether a cycle created now raises :class:`CycleOrderError` on a call out of order (off in
production; on in the project's tests and with ``BACKPRESSURE_STRICT_CYCLE=1``)."""


Deadline = Union[None, float, Callable[[], Optional[float]]]
"""An operation's deadline on the client's clock (None: none), or the query that returns it
(called only when the pacing needs it: the adapters pass pymongo's CSOT query)."""

_NONE: Any = object()  # no attempt has started yet


def _same(server: Any) -> Optional[Address]:
    """The server key is the address itself (the simulator's case)."""
    return server  # type: ignore[no-any-return]


class AttemptCycle:
    """One operation's attempt cycle: admit, wait, recheck, send, record, decide (see module)."""

    __slots__ = (
        "_address_of",
        "_criticality",
        "_name",
        "address",
        "asked",
        "attempt_open",
        "first",
        "gate",
        "grant",
        "opens_transaction",
        "phase",
        "processed",
        "pushed_back",
        "retries",
        "server",
        "started_at",
        "state",
    )

    def __init__(
        self,
        state: ClientState,
        name: Union[str, Callable[[], str]],
        *,
        address_of: Callable[[Any], Optional[Address]] = _same,
        opens_transaction: bool = False,
        criticality: Optional[Criticality] = None,
    ) -> None:
        """Start the cycle of one operation of the client whose state is ``state``.

        ``name`` is the operation's name, or a callable returning it (called on first need).
        ``address_of`` turns the executor's server object into its address (called only when
        the address is needed).  ``opens_transaction``: the operation is the first statement of
        a transaction.  ``criticality``: the operation's criticality when the executor knows it
        (None: from the client's settings).
        """
        self.state = state
        self.gate: Optional[PacingGate] = state.gate
        self._name = name
        self._address_of = address_of
        self._criticality = criticality
        self.opens_transaction = opens_transaction
        self.retries: Optional[CycleRecord] = None
        self.first: Any = _NONE
        """The first attempt's server while ``retries`` does not exist yet."""
        self.server: Any = _NONE
        """The server of the current attempt (the executor's object)."""
        self.address: Optional[Address] = None
        """Its address, when the pacing asked for it."""
        self.grant: Optional[SlotGrant] = None
        """The pacing's grant of the current attempt (None: sent unpaced)."""
        self.asked = False
        """``admit`` was asked about the attempt about to start."""
        self.attempt_open = False
        """An attempt was sent and its outcome is not known yet."""
        self.pushed_back = False
        """The server pushed the last attempt back (its retry goes ahead of the pacing queue)."""
        self.processed = False
        """A reply to the statement opening a transaction came before ``retries`` existed."""
        self.started_at: Optional[float] = state.controller.clock() if state.timed else None
        """When the operation started, on the client's clock, if it is timed (None: not)."""
        self.phase: Optional[Phase] = Phase.IDLE if STRICT else None
        """Where the cycle is (see :data:`TRANSITIONS`); None: not tracked (:data:`STRICT` was
        off when the cycle was created)."""

    # -- the order of the calls ---------------------------------------------------------------

    def _to(self, event: Event) -> None:
        """Take ``event`` from the current phase (called only while the phase is tracked)."""
        after = TRANSITIONS.get((self.phase, event))  # type: ignore[arg-type]
        if after is None:
            after = self._out_of_order(event)
        self.phase = after

    def _out_of_order(self, event: Event) -> Optional[Phase]:
        """Raise :class:`CycleOrderError` for ``event`` while :data:`STRICT`; else stop tracking."""
        if STRICT:
            raise order_error(self.name(), self.phase, event)
        return None

    # -- the per-operation record -------------------------------------------------------------

    def name(self) -> str:
        """The operation's name (resolved once)."""
        name = self._name
        if not isinstance(name, str):
            name = self._name = name()
        return name

    def attempted(self) -> bool:
        """Whether an attempt was started (a server was selected for it)."""
        return self.retries is not None or self.first is not _NONE

    def record(self) -> CycleRecord:
        """Return the operation's record (attempts, retries, ledger), creating it on first need."""
        retries = self.retries
        if retries is None:
            retries = self.retries = self.state.new_operation(
                self.name(),
                opens_transaction=self.opens_transaction,
                criticality=self._criticality,
                started=self.started_at,
            )
            first = self.first
            if first is not _NONE:
                retries.attempt_started(self._address_of(first))
                if self.server is _NONE:
                    self.server = first
                self.first = _NONE
                if self.processed:
                    retries.command_processed()  # during that first attempt
        return retries

    # -- before sending -----------------------------------------------------------------------

    def paced(self) -> Optional[Callable[[Address], bool]]:
        """The servers a selection with a choice avoids now.

        None: no server is paced, so nothing would wait: an executor may then send without
        asking :meth:`admit` (which would answer :data:`SEND`).
        """
        gate = self.gate
        return gate.is_paced if gate is not None and gate.engaged else None

    def avoiding(self) -> Optional[Callable[[list[Address]], list[Address]]]:
        """What draws the servers a selection with a choice avoids now
        (``ClientState.avoid``), or None while no server pushes back or is paced."""
        state = self.state
        return state.avoid if state.steers() else None

    def admit(self, server: Any, deadline: Deadline = None) -> Step:
        """Ask the pacing about an attempt to ``server``: :data:`SEND`, :class:`Wait` or
        :class:`Stop` (refused).

        ``deadline`` is the operation's deadline on the client's clock (None: none), or the
        query returning it.
        """
        if self.phase is not None:
            self._to(Event.ADMIT)
        self.server = server
        self.grant = None
        self.asked = True
        gate = self.gate
        if gate is None or not gate.engaged:
            self.address = None  # read from ``server`` only if the pacing needs it
            return SEND
        address = self.address = self._address_of(server)
        if callable(deadline):
            deadline = deadline()
        state = self.state
        criticality = self._criticality
        sheddable = (
            state.sheddable() if criticality is None else criticality is Criticality.SHEDDABLE
        )
        try:
            grant = gate.admit(
                self.name(),
                address,
                deadline,
                retry=self.pushed_back,
                hold=state.holds_locally(),
                sheddable=sheddable,
            )
        except LocalOverloadError as exc:
            return self._refused(exc)
        self.grant = grant
        if grant.wait > 0.0:
            if self.phase is not None:
                self._to(Event.WAIT)
            return Wait(grant.wait)
        return SEND

    def waited(self) -> Step:
        """Ask again once a :class:`Wait` is over: :data:`SEND`, :class:`Wait` or :class:`Stop`."""
        if self.phase is not None:
            self._to(Event.WAITED)
        grant = self.grant
        gate = self.gate
        if gate is None or grant is None or grant.ticket is None:
            return SEND
        try:
            wait = gate.recheck(self.name(), self.address, grant)
        except LocalOverloadError as exc:
            self.grant = None
            return self._refused(exc)
        if wait > 0.0:
            if self.phase is not None:
                self._to(Event.WAIT)
            return Wait(wait)
        return SEND

    def wait_out(self, step: Step) -> WaitOut:
        """The wait-and-recheck loop of ``step``, ``admit``'s answer: an iterable of the seconds
        to wait (the executor sleeps each its own way); its ``answer`` is then :data:`SEND` or
        :class:`Stop` (a ``step`` that is not a :class:`Wait` is the answer at once)."""
        return WaitOut(self.waited, step)

    def _refused(self, exc: LocalOverloadError) -> Stop:
        """Account for an attempt the pacing refused (nothing was sent for it)."""
        if self.phase is not None:
            self._to(Event.REFUSE)
        self.attempt_open = False
        retries = self.record()
        retries.stopped(exc.reason)
        attach_summary(exc, retries.summary())
        retries.ended(exc)
        return Stop(exc, exc.reason)

    # -- sending and the reply ----------------------------------------------------------------

    def started(self, server: Any) -> None:
        """Record an attempt sent to ``server``.

        An attempt still open here failed without the executor reporting it (pymongo's own loop
        retried an error its classic rules retry): it is recorded as such.
        """
        if self.phase is not None:
            self._to(Event.START)
        if self.asked:
            self.asked = False
        else:  # sent without asking admit: nothing was paced
            self.server = server
            self.grant = None
            self.address = None
        retries = self.retries
        if retries is None:
            if self.first is _NONE:
                self.first = server  # the first attempt: nothing else to do yet
                self.attempt_open = True
                return
            retries = self.record()
        if self.attempt_open:
            retries.classic_retry()
        self.server = server
        retries.attempt_started(self._address_of(server))
        self.attempt_open = True

    def transaction_began(self) -> None:
        """Note that the server processed a command of the statement opening a transaction."""
        if self.phase is not None:
            self._to(Event.TRANSACTION_BEGAN)
        if self.retries is None and self.first is not _NONE:
            self.processed = True  # replayed by ``record`` if it is ever needed
        else:
            self.record().command_processed()

    def _attempt_address(self) -> Optional[Address]:
        """The address of the open attempt's server (None: no server was selected)."""
        if self.address is not None:
            return self.address
        server = self.server if self.server is not _NONE else self.first
        return None if server is _NONE else self._address_of(server)

    def settle(self, error: Optional[BaseException], overload: Optional[bool] = None) -> None:
        """Hand the open attempt's outcome to the server choice and the pacing (``error`` None:
        a reply, no overload) and close it; ``overload``: whether ``error`` carries the overload
        label, if read."""
        if self.phase is not None:
            self._to(Event.SETTLE)
        self._settle(error, overload)

    def _settle(self, error: Optional[BaseException], overload: Optional[bool] = None) -> None:
        """``settle`` without the order check (``succeeded`` and ``failed`` settle too)."""
        if not self.attempt_open:
            return
        gate = self.gate
        address = self._attempt_address()
        pushed_back = False
        if error is not None:
            if overload is None:
                overload = overload_labels(error).overload
            pushed_back = overload or is_timeout(error)
        self.state.attempt_finished(address, pushed_back)
        if gate is not None:
            self.pushed_back = gate.record(address, self.grant, error, overload)
        self.attempt_open = False

    def succeeded(self) -> None:
        """The success accounting: the reply to the pacing, then the count or the record."""
        if self.phase is not None:
            self._to(Event.SUCCEED)
        counted = (
            self.gate is not None
            and self.attempt_open
            and (self.grant is not None or self.retries is not None)
        )
        retries = self.retries
        if counted:
            self._settle(None)
        elif retries is not None and self.attempt_open:
            self.state.attempt_finished(self._attempt_address(), False)
        self.attempt_open = False
        if retries is None:
            first = None if self.first is _NONE else self.first
            started = self.started_at
            if started is not None:  # timed: the event carries the name and the duration
                state = self.state
                state.first_attempt_succeeded(
                    None if first is None else self._address_of(first),
                    paced_counted=counted,
                    operation=self.name(),
                    duration=state.controller.clock() - started,
                )
                return
            # A first attempt sent unpaced is counted for the pacing by the lean count (in
            # batches); a paced one was handed to the pacing above.
            self.state.count_first_attempt(first, self._address_of, paced_counted=counted)
        else:
            retries.succeeded()

    def failed(
        self,
        error: BaseException,
        *,
        deadline: Optional[float] = None,
        now: Optional[float] = None,
        retries_allowed: bool = True,
        classic_retryable: bool = False,
    ) -> Union[Backoff, Stop]:
        """Record a failed attempt; answer :class:`Backoff` or :class:`Stop`.

        ``deadline`` and ``now`` are on the client's clock;
        ``classic_retryable``: pymongo's own retryable read/write rules would retry ``error``.
        The error's overload labels are read once for the pacing and every retry rule.
        """
        if self.phase is not None:
            self._to(Event.FAIL)
        labels = overload_labels(error)
        if self.attempt_open:
            self._settle(error, labels.overload)
        decision = self.record().failed(
            error,
            deadline=deadline,
            now=now,
            retries_allowed=retries_allowed,
            classic_retryable=classic_retryable,
            labels=labels,
        )
        step = step_of(error, decision)
        if self.phase is not None:
            self._to(Event.RETRY if type(step) is Backoff else Event.STOP)
        return step

    def unsent(
        self, error: BaseException, *, deadline: Optional[float] = None
    ) -> Union[Backoff, Stop]:
        """Record ``error``, which left no attempt to send (no server was found for it, or the
        deadline passed before it), as the operation's failure and ask the retry rules, whose
        answer names why the operation stops; the executor raises either way.

        ``deadline`` is on the client's clock.  No attempt is open: nothing goes to the pacing.
        """
        if self.phase is not None:
            self._to(Event.UNSENT)
        step = step_of(error, self.record().failed(error, deadline=deadline))
        if self.phase is not None:
            self._to(Event.RETRY if type(step) is Backoff else Event.STOP)
        return step

    def decided_inside(self, error: BaseException) -> None:
        """The open attempt failed with ``error``, which a retry loop within the attempt has
        already decided about (it carries that loop's summary): hand the outcome to the pacing
        and count the failure for the budget, without asking the retry rules; the executor
        raises ``error`` as it is."""
        if self.phase is not None:
            self._to(Event.DECIDED_INSIDE)
        labels = overload_labels(error)
        if self.attempt_open:
            self._settle(error, labels.overload)
        retries = self.record()
        retries.controller.record_failure(error, retried=retries.retries > 0, labels=labels)

    @staticmethod
    def failed_alone(
        state: ClientState,
        error: BaseException,
        *,
        retry_number: int,
        deadline: Optional[float] = None,
        now: Optional[float] = None,
        classic_retryable: bool = False,
    ) -> Union[Backoff, Stop]:
        """Answer about a failure outside any operation (the native hook called outside our
        wrapper): the retry rules for the caller's ``retry_number``, nothing recorded."""
        decision = state.controller.decide(
            retry_number=max(retry_number, 1), error=error, deadline=deadline, now=now,
            classic_retryable=classic_retryable,
        )  # fmt: skip
        return step_of(error, decision)

    def ended(self, error: BaseException, reason: Optional[StopReason] = None) -> None:
        """The operation ends with ``error`` raised without a decision of :meth:`failed` (an
        error no attempt could report, e.g. no server for a retry): attach the summary and
        report the operation finished.  ``reason`` replaces a summary without a stop reason."""
        if self.phase is not None:
            self._to(Event.END)
        retries = self.record()
        summary = retries.summary()
        if summary.stop_reason is None and reason is not None:
            summary = dataclasses.replace(summary, stop_reason=reason)
        attach_summary(error, summary)
        retries.ended(error)
