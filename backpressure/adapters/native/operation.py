"""One operation on the native adapter's path (pymongo >= 4.17): the bookkeeping the sync and
async wrappers (``async_wrappers`` and its generated twin) drive.

An operation starts on the lean path, a :data:`LeanCell`; anything other than a first-attempt
success outside a transaction promotes it to a :class:`TrackedOperation` with the same history.
:class:`Installation` is what the wrappers and the operations need of the adapter's
installation on one client (``native._Installation``).
"""

from __future__ import annotations

import contextvars
import dataclasses
import time
from typing import Any, Callable, Optional, Protocol

from backpressure.adapters import seams
from backpressure.core.adaptive import Admission, AdmissionGate, LocalOverloadError
from backpressure.core.client_state import ClientState
from backpressure.core.decision import Decision, Retry, StopReason
from backpressure.core.events import attach_summary
from backpressure.core.labels import has_no_writes_performed
from backpressure.core.operation import OperationRetries

__all__ = ["Installation", "LeanCell", "TrackedOperation", "avoid_paced"]


class Installation(Protocol):
    """The native adapter's installation on one client, as its wrappers and operations use it."""

    @property
    def state(self) -> ClientState:
        """The client's state (policy, budget, pacing, statistics)."""
        ...

    @property
    def client_ref(self) -> Callable[[], Any]:
        """A weak reference to the client (calling it returns the client, or None)."""
        ...

    @property
    def current(self) -> contextvars.ContextVar[Any]:
        """The operation of this client running in the context: a lean cell, an operation or
        None."""
        ...

    @property
    def retry_arity(self) -> int:
        """How many arguments the client's ``_retry_internal`` takes (``self`` left out)."""
        ...

    def operation(self) -> Optional[TrackedOperation]:
        """Return the current operation of this client, promoting a lean one (None: none)."""
        ...

    def delegate(self, client: Any, name: str) -> Callable[..., Any]:
        """Return what the wrapper of ``name`` calls, as ``delegate(client, *args, **kwargs)``."""
        ...


_NOT_SELECTED = object()


class TrackedOperation:
    """The retry bookkeeping of one call of the native loop on one client.

    The success path is kept cheap: the ``OperationRetries`` (and the operation name and server
    address it needs) is created only when something other than a first-attempt success
    happens: a failure reaching our policy, a second server selection (pymongo retried an error),
    an error raised by the loop, or the first reply to a statement that opens a transaction.
    Until then only the first selected server is remembered.
    """

    __slots__ = (
        "address",
        "admission",
        "args",
        "attempt_open",
        "commit_attempt",
        "decision",
        "first",
        "in_transaction",
        "installation",
        "kwargs",
        "opens_transaction",
        "pinned",
        "processed",
        "pushed_back",
        "retries",
        "sent_to",
        "session",
        "state",
    )

    def __init__(
        self, installation: Installation, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        """Track one ``_retry_internal(*args, **kwargs)`` call on ``installation``'s client."""
        self.installation = installation
        self.state = installation.state
        self.args = args
        self.kwargs = kwargs
        self.retries: Optional[OperationRetries] = None
        self.first: Any = _NOT_SELECTED
        self.attempt_open = False
        self.decision: Optional[Decision] = None
        if kwargs:
            session = seams.retry_internal_argument(args, kwargs, "session")
            operation = seams.retry_internal_argument(args, kwargs, "operation")
        else:  # the wrappers pass every argument positionally
            session, operation = args[1], args[3]
        self.session = session
        """The session argument of the ``_retry_internal`` call (None when absent)."""
        state = None if session is None else session._transaction.state
        self.in_transaction = state in seams.ACTIVE_TRANSACTION_STATES
        self.opens_transaction = state in seams.STARTING_TRANSACTION_STATES
        # In a transaction: the mongos it was pinned to when the attempt started.
        self.pinned: Optional[tuple[str, int]] = None
        # For commitTransaction: the session's commit attempt counter when the attempt started
        # (None for every other operation).
        self.commit_attempt: Optional[int] = None
        if self.in_transaction and operation == "commitTransaction":
            self.commit_attempt = 0
        # The pacing's admission of the open attempt and the address it went to (adaptive).
        self.admission: Optional[Admission] = None
        self.address: Optional[tuple[str, int]] = None
        self.sent_to: Any = None  # the Server of an attempt sent unpaced (address read lazily)
        # Whether a server pushed the last attempt back (its retry goes ahead of the pacing queue).
        self.pushed_back = False
        # A reply to the statement opening a transaction arrived before ``retries`` existed.
        self.processed = False

    @classmethod
    def promoted(cls, installation: Installation, cell: list[Any]) -> TrackedOperation:
        """Take over an operation that ran on the lean path so far (see :data:`LeanCell`)."""
        operation = cls(installation, cell[1], cell[2])
        first = cell[0]
        if first is not None:
            operation.first = first
            operation.attempt_open = True
        return operation

    def name(self) -> str:
        """The operation's name, for the pacing's events and the retry bookkeeping."""
        return seams.operation_name(
            seams.retry_internal_argument(self.args, self.kwargs, "operation")
        )

    def admit(self, gate: AdmissionGate, server: Any) -> float:
        """Ask the pacing about the attempt about to go to ``server``; return the local wait.

        Raises:
            LocalOverloadError: the wait is not allowed; the attempt is not sent.
        """
        address = seams.server_address(server)
        self.address = address
        self.sent_to = None
        self.admission = None
        admission = gate.admit(
            self.name(),
            address,
            seams.csot_deadline(),
            retry=self.pushed_back,
            hold=self.state.holds_locally(),
            sheddable=self.state.sheddable(),
        )
        self.admission = admission
        return admission.wait

    def unpaced(self, server: Any) -> None:
        """Record that the attempt about to go to ``server`` was not asked to wait."""
        self.admission = None
        self.address = None  # read from ``sent_to`` only if the pacing needs it
        self.sent_to = server

    def recheck(self, gate: Optional[AdmissionGate]) -> float:
        """Ask the pacing again once the wait is over; return the further wait (0: send now).

        Raises:
            LocalOverloadError: a retry going ahead moved the slot past the attempt's bound.
        """
        admission = self.admission
        if gate is None or admission is None or admission.ticket is None:
            return 0.0
        try:
            return gate.recheck(
                self.name(),
                self.address,
                admission,
            )
        except LocalOverloadError:
            self.admission = None
            raise

    def settle(self, error: Optional[BaseException]) -> None:
        """Hand the outcome of the last attempt to the pacing (None: a reply, not an overload)."""
        gate = self.state.gate
        if gate is not None and self.attempt_open:
            address = self.address
            if address is None:
                server = self.sent_to if self.sent_to is not None else self.first
                if server is not _NOT_SELECTED:
                    address = seams.server_address(server)
            self.pushed_back = gate.record(address, self.admission, error)

    def tracked(self) -> OperationRetries:
        """Return the operation's ``OperationRetries``, creating it on first need."""
        retries = self.retries
        if retries is None:
            retries = self.state.new_operation(
                self.name(), opens_transaction=self.opens_transaction
            )
            if self.first is not _NOT_SELECTED:
                retries.attempt_started(seams.server_address(self.first))
                if self.sent_to is None:  # the lean path's first attempt: its server, for settle
                    self.sent_to = self.first
                self.first = _NOT_SELECTED
                if self.processed:
                    retries.command_processed()  # during that first attempt
            self.retries = retries
        return retries

    def attempt_started(self, server: Any) -> None:
        """Record an attempt; settle the previous one if pymongo retried it classically."""
        if self.in_transaction:
            session = self.session
            self.pinned = seams.pinned_address(session)
            if self.commit_attempt is not None:
                self.commit_attempt = seams.commit_attempt(session)
        retries = self.retries
        if retries is None:
            if self.first is _NOT_SELECTED:
                self.first = server  # the first attempt: nothing else to do yet
                self.attempt_open = True
                return
            retries = self.tracked()
        if self.attempt_open:
            # The previous attempt failed without reaching our policy and pymongo retried it:
            # an error its classic retryable read/write rules retry.
            retries.classic_retry()
        retries.attempt_started(seams.server_address(server))
        self.attempt_open = True

    def reply_received(self, reply: Any, session: Any) -> None:
        """Note a reply to the statement that opens a transaction (the transaction began)."""
        if self.opens_transaction and session is self.session and seams.reply_ok(reply):
            if self.retries is None and self.first is not _NOT_SELECTED:
                self.processed = True  # replayed by ``tracked`` if it is ever needed
            else:
                self.tracked().command_processed()

    def decide(self, error: BaseException) -> float:
        """Ask the core about an overload failure pymongo would retry; return the delay.

        pymongo asks only about errors it is about to retry (labelled ``RetryableError``, or
        retryable under its classic rules), so ``classic_retryable`` is true here.  When the
        core grants the retry of a statement whose transaction the server already began,
        pymongo's own revert to "starting" is undone (it would send ``startTransaction`` twice).
        """
        self.settle(error)
        self.attempt_open = False
        deadline = seams.csot_deadline()
        now = time.monotonic() if deadline is not None else None
        retries = self.tracked()
        decision = retries.failed(error, deadline=deadline, now=now, classic_retryable=True)
        self.decision = decision
        if not isinstance(decision, Retry):
            return 0.0
        ledger = retries.ledger
        if ledger.opens_transaction and not ledger.restarts_transaction():
            seams.resume_transaction(self.session)
        if self.pinned is not None and ledger.keeps_pinned_server():
            # pymongo unpinned the transaction on overload (its retry could go to another
            # mongos, which can only recover or abort the transaction): keep its mongos.
            seams.repin(self.session, self.pinned)
        if self.commit_attempt is not None:
            # pymongo resets the counter on overload (plain write concern on the retry); the
            # transactions spec keeps the failed attempt's write concern only while every
            # failure was an overload error, and upgrades it after any other failure.
            keep = ledger.commit_keeps_write_concern()
            counter = self.commit_attempt if keep else self.commit_attempt + 1
            seams.set_commit_attempt(self.session, counter)
        return decision.sleep_seconds

    def take_decision(self) -> Optional[Decision]:
        """Return and forget the decision made by the last ``decide``."""
        decision, self.decision = self.decision, None
        return decision

    def succeeded(self) -> None:
        """Record success (deposits tokens)."""
        # A first attempt sent unpaced is counted for the pacing by the lean success count
        # (in batches); a paced one, or a retried operation's, is handed to the pacing here.
        counted = (
            self.state.gate is not None
            and self.attempt_open
            and (self.admission is not None or self.retries is not None)
        )
        if counted:
            self.settle(None)
        self.attempt_open = False
        retries = self.retries
        if retries is None:
            first = self.first
            self.state.count_first_attempt(
                None if first is _NOT_SELECTED else first,
                seams.server_address,
                paced_counted=counted,
            )
        else:
            retries.succeeded()

    def failed(self, exc: BaseException) -> None:
        """Account for the error the loop raised and attach the retry summary to it."""
        if not isinstance(exc, Exception):
            return  # cancellation: nothing to account for
        if isinstance(exc, LocalOverloadError):
            self.refused(exc)
            return
        if self.retries is None and self.first is _NOT_SELECTED:
            return  # no server was ever selected: nothing to account for
        retries = self.tracked()
        if retries.attempts == 0:
            return
        actual: BaseException = exc
        cause = exc.__cause__
        if cause is not None and has_no_writes_performed(cause):
            actual = cause  # pymongo re-raised the earlier error ``from`` this attempt's error
        if self.attempt_open:
            self.settle(actual)
            # The last attempt's error never reached our policy: pymongo refused to retry it
            # (not an overload error, or retryReads/retryWrites off).  The core records the
            # failure, logs and notifies when relevant; retries_allowed=False takes no token.
            self.attempt_open = False
            retries.failed(actual, retries_allowed=False)
        summary = retries.summary()
        if summary.stop_reason is None:
            reason = StopReason.DEADLINE if seams.csot_expired() else StopReason.NOT_RETRYABLE
            summary = dataclasses.replace(summary, stop_reason=reason)
        attach_summary(exc, summary)
        retries.ended()

    def refused(self, exc: LocalOverloadError) -> None:
        """Account for an attempt the pacing refused: nothing was sent for it."""
        self.attempt_open = False
        retries = self.tracked()
        retries.stopped(exc.reason)
        attach_summary(exc, retries.summary())
        retries.ended()


LeanCell = list
"""An operation on the lean path: ``[first selected Server or None, args, kwargs]``.

While an operation of a client without pacing has neither failed nor been retried and is not
in a transaction, this three-item list is all there is of it: the ``_retry_internal`` wrapper
makes it current, the ``_select_server`` wrapper stores the first server in it, and the success
counts it.  Anything else (a failure reaching our policy, a second attempt, a transaction, an
error raised by the loop) promotes it to a :class:`TrackedOperation` with the same history.
"""


def avoid_paced(
    client: Any, gate: AdmissionGate, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any]:
    """Add the servers that are paced (pushing back) to the deprioritized servers.

    pymongo then selects another eligible server when the read preference allows one, and the
    paced server otherwise (a transaction keeps its pinned server: pymongo selects it by
    address).  Inert until some server of the client is paced, and for selections that have no
    choice: writes and primary reads outside a sharded cluster (``seams.selection_has_choice``),
    and selections by address.  pymongo would leave the filtered candidate list on the
    topology's shared description (``client.primary`` would find no primary): the topology puts
    it back before its lock is released (``seams.keep_candidate_servers``).
    """
    if not gate.engaged or len(args) > 4:
        return kwargs  # ``len(args) > 4``: deprioritized_servers passed positionally; leave it
    selector = args[0] if args else kwargs.get("server_selector")
    if kwargs.get("address") is not None or not seams.selection_has_choice(client, selector):
        return kwargs
    busy = seams.servers_where(client, gate.is_paced)
    if not busy:
        return kwargs
    current = kwargs.get("deprioritized_servers") or []
    merged = [*current, *(server for server in busy if server not in current)]
    seams.keep_candidate_servers(client)
    return {**kwargs, "deprioritized_servers": merged}
