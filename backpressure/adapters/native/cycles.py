"""One operation on the native adapter's path (pymongo >= 4.17): the bookkeeping the sync and
async wrappers (``async_wrappers`` and its generated twin) drive.

An operation starts on the lean path, a :data:`LeanCycle`; anything other than a first-attempt
success outside a transaction promotes it to a :class:`TrackedCycle` with the same history:
the operation's :class:`~backpressure.core.cycle.AttemptCycle`, plus pymongo's transaction
specifics.
:class:`InstallationView` is what the wrappers and the operations need of the adapter's
installation on one client (``native.NativeInstallation``).
"""

from __future__ import annotations

import contextvars
from typing import Any, Callable, Optional, Protocol

from backpressure.adapters import seams
from backpressure.core.adaptive import LocalOverloadError
from backpressure.core.client_state import ClientState
from backpressure.core.cycle import AttemptCycle, Backoff
from backpressure.core.decision import StopReason
from backpressure.core.labels import has_no_writes_performed

__all__ = ["InstallationView", "LeanCycle", "TrackedCycle"]


class InstallationView(Protocol):
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
        """The operation of this client running in the context: a ``LeanCycle``, a
        ``TrackedCycle`` or None."""
        ...

    @property
    def retry_arity(self) -> int:
        """How many arguments the client's ``_retry_internal`` takes (``self`` left out)."""
        ...

    def operation(self) -> Optional[TrackedCycle]:
        """Return the current operation of this client, promoting a lean one (None: none)."""
        ...

    def delegate(self, client: Any, name: str) -> Callable[..., Any]:
        """Return what the wrapper of ``name`` calls, as ``delegate(client, *args, **kwargs)``."""
        ...


class TrackedCycle(AttemptCycle):
    """One call of the native loop on one client: its :class:`AttemptCycle`, plus the pymongo
    specifics around it (the session's transaction, its pinned mongos, the commit counter).

    The cycle's per-operation record is created only when something other than a first-attempt
    success happens: a failure reaching our policy, a second server selection (pymongo retried
    an error), an error raised by the loop, or the first reply to a statement that opens a
    transaction.  Until then only the first selected server is remembered.
    """

    __slots__ = (
        "backoff",
        "commit_attempt",
        "in_transaction",
        "installation",
        "operation",
        "pinned",
        "session",
    )

    def __init__(self, installation: InstallationView, session: Any, operation: Any) -> None:
        """Track one ``_retry_internal`` call on ``installation``'s client, made with
        ``session`` and ``operation`` (its arguments of those names)."""
        self.installation = installation
        self.backoff = 0.0
        """A backoff the executor sleeps at the next server selection (only with a sleep hook,
        ``ClientState.sleep``: pymongo's own loop is then handed a delay of 0).  Deferred because
        pymongo's loop sleeps the delay itself (``time.sleep`` / ``asyncio.sleep``), and from
        4.18 its async loop calls ``should_retry`` without awaiting it: no hook of ours can
        sleep between the decision and the next attempt's selection."""
        self.session = session
        """The session argument of the ``_retry_internal`` call (None when absent)."""
        self.operation = operation
        """The operation argument of the ``_retry_internal`` call (see ``name``)."""
        state = None if session is None else session._transaction.state
        self.in_transaction = state in seams.ACTIVE_TRANSACTION_STATES
        super().__init__(
            installation.state,
            "",  # see ``name``
            address_of=seams.server_address,
            opens_transaction=state in seams.STARTING_TRANSACTION_STATES,
        )
        # In a transaction: the mongos it was pinned to when the attempt started.
        self.pinned: Optional[tuple[str, int]] = None
        # For commitTransaction: the session's commit attempt counter when the attempt started
        # (None for every other operation).
        self.commit_attempt: Optional[int] = None
        if self.in_transaction and operation == "commitTransaction":
            self.commit_attempt = 0

    @classmethod
    def promoted(cls, installation: InstallationView, cell: list[Any]) -> TrackedCycle:
        """Take over an operation that ran on the lean path so far (see :data:`LeanCycle`)."""
        operation = cls(installation, cell[1], cell[2])
        first = cell[0]
        if first is not None:
            operation.started(first)
        return operation

    def name(self) -> str:
        """The operation's name, for the pacing's events and the retry bookkeeping (read from
        the call's arguments only when needed)."""
        return seams.operation_name(self.operation)

    def attempt_started(self, server: Any) -> None:
        """Record an attempt (the cycle records a classic retry pymongo made without asking)."""
        if self.in_transaction:
            session = self.session
            self.pinned = seams.pinned_address(session)
            if self.commit_attempt is not None:
                self.commit_attempt = seams.commit_attempt(session)
        self.started(server)

    def reply_received(self, reply: Any, session: Any) -> None:
        """Note a reply to the statement that opens a transaction (the transaction began)."""
        if self.opens_transaction and session is self.session and seams.reply_ok(reply):
            self.transaction_began()

    def decide(self, error: BaseException) -> Optional[float]:
        """Ask the cycle about ``error``, an overload failure pymongo would retry; return the
        delay to hand pymongo's loop (None: give up).

        pymongo asks only about errors it is about to retry (labelled ``RetryableError``, or
        retryable under its classic rules), so ``classic_retryable`` is true here.  The CSOT
        deadline is compared on the client's clock (``ClientState.controller.clock``), read
        only under a timeout.  When the cycle grants the retry of a statement whose transaction
        the server already began, pymongo's own revert to "starting" is undone (it would send
        ``startTransaction`` twice).
        """
        deadline, now = seams.csot_deadline_and_now(self.state.controller.clock)
        step = self.failed(error, deadline=deadline, now=now, classic_retryable=True)
        if type(step) is not Backoff:
            return None
        ledger = self.record().ledger
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
        if self.state.sleep is not None:  # slept through the hook, not by pymongo's loop
            self.backoff = step.seconds
            return 0.0
        return step.seconds

    def raised(self, exc: BaseException) -> None:
        """Account for the error the loop raised and attach the retry summary to it."""
        if not isinstance(exc, Exception) or isinstance(exc, LocalOverloadError):
            return  # cancellation, or a refusal the cycle accounted for when it answered it
        cycle = self
        if not cycle.attempted():
            return  # no server was ever selected: nothing to account for
        if cycle.record().attempts == 0:
            return
        actual: BaseException = exc
        cause = exc.__cause__
        if cause is not None and has_no_writes_performed(cause):
            actual = cause  # pymongo re-raised the earlier error ``from`` this attempt's error
        if cycle.attempt_open:
            # The last attempt's error never reached our policy: pymongo refused to retry it
            # (not an overload error, or retryReads/retryWrites off).  The cycle records the
            # failure, logs and notifies when relevant; retries_allowed=False takes no token.
            cycle.failed(actual, retries_allowed=False)
        reason = StopReason.DEADLINE if seams.csot_expired() else StopReason.NOT_RETRYABLE
        cycle.ended(exc, reason)


LeanCycle = list
"""An operation on the lean path: ``[first selected Server or None, session, operation]`` (the
last two: the arguments of the ``_retry_internal`` call of those names).

While an operation of a client without pacing has neither failed nor been retried and is not
in a transaction, this three-item list is all there is of it: the ``_retry_internal`` wrapper
makes it current, the ``_select_server`` wrapper stores the first server in it, and the success
counts it.  Anything else (a failure reaching our policy, a second attempt, a transaction, an
error raised by the loop) promotes it to a :class:`TrackedCycle` with the same history.
"""
