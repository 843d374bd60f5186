"""Overload retries for ``MongoClient`` on pymongo 4.9-4.16: the retry loop (the async
flavour).

``client._retry_internal`` (the loop every retryable read and write passes through) is replaced
on the client instance by ``_retry_internal``, the loop, whose per-call state and steps are an
``_SyncCycleLoop``: the classic retryable read/write rules of
pymongo 4.9-4.16, unchanged, plus an overload branch driven by the operation's attempt cycle
(``AttemptCycle``: it admits each attempt, records it and answers ``Backoff`` or ``Stop``;
this module selects, sends and sleeps, through ``async_cycle``).  The txnNumber is taken once
before the first attempt; bulk writes retry batch by batch through ``bulk.retrying``.  The other
parts of the backport: ``async_methods.py`` (methods that bypass this loop), ``async_pool.py``
(connection errors as overloads), ``async_install.py`` (what is put on classes and clients).

The sync twin ``sync_loop.py`` is generated from ``async_loop.py`` by ``scripts/unasync.py``:
edit the async file, then run ``python scripts/unasync.py``.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from pymongo import _csot
from pymongo.errors import (
    ConnectionFailure,
    OperationFailure,
    PyMongoError,
    ServerSelectionTimeoutError,
)
from pymongo.helpers_shared import _RETRYABLE_ERROR_CODES
from pymongo.server_selectors import writable_server_selector

from backpressure.adapters import seams
from backpressure.adapters.backport import shared as _shared
from backpressure.core.adaptive import LocalOverloadError
from backpressure.core.client_state import STATE_ATTRIBUTE, ClientState
from backpressure.core.cycle import SEND, AttemptCycle, Stop
from backpressure.core.events import retry_summary
from backpressure.core.labels import has_no_writes_performed, is_overload, is_retryable_overload
from backpressure.core.ledger import AttemptLedger, AttemptOutcome

# isort: split
# The flavour's own modules (sync_cycle and pymongo.synchronous in the generated twin).
from pymongo.synchronous import mongo_client as _mongo_client

from backpressure.adapters.sync_cycle import after_wait, carry_out, pause

__all__ = []

# pymongo >= 4.17 moved some of these names; the backport only runs on 4.9-4.16.
_CLIENT_MODULE: Any = _mongo_client
_ACTIVE_STATES = seams.ACTIVE_TRANSACTION_STATES
_STARTING_STATES = seams.STARTING_TRANSACTION_STATES


class _SyncCycleLoop:
    """One call of ``_retry_internal``: classic retryable reads/writes plus overload retries."""

    def __init__(
        self,
        client: Any,
        state: ClientState,
        func: Callable[..., Any],
        session: Any,
        bulk: Any,
        operation: str,
        is_read: bool,
        address: Any,
        read_pref: Any,
        retryable: bool,
        operation_id: Optional[int],
    ) -> None:
        """Capture one call's arguments; nothing runs until ``run``."""
        self._client = client
        self._state = state
        self._func = func
        self._session = session
        self._bulk = bulk
        self._operation = operation
        self._name: Optional[str] = None  # resolved on first need (see ``_tracked``)
        self._is_read = is_read
        self._address = address
        self._read_pref = read_pref
        self._selector = read_pref if is_read else writable_server_selector
        self._retryable = retryable
        self._operation_id = operation_id
        self._server: Any = None
        self._deprioritized: list[Any] = []
        self._last_error: Optional[PyMongoError] = None
        self._retrying = False
        self._after_overload = False
        self._ended = False  # ``_raise`` ended the operation (see ``run``)
        self._commit_attempt: Optional[int] = None  # the session's counter before this attempt
        # Every decision about the operation: admit, wait, record, retry or give up.  Its
        # record (CycleRecord) is created only when an attempt fails or a second one
        # starts, so the success path stays cheap.
        self._cycle = AttemptCycle(
            state,
            self._operation_name,
            address_of=seams.server_address,
            opens_transaction=session is not None
            and session._transaction.state in _STARTING_STATES,  # seams.transaction_starting
        )

    def _operation_name(self) -> str:
        """The operation's name for logs, events and the retry options (resolved once)."""
        name = self._name
        if name is None:
            name = self._name = seams.operation_name(self._operation, self._func)
        return name

    def _start_retryable_write(self, session: Any) -> None:
        """Take the txnNumber once: every attempt, even one failing before sending, reuses it."""
        if not session.in_transaction:
            session._start_retryable_write()
            if self._bulk is not None:
                self._bulk.started_retryable_write = True

    def _deadline_passed(self) -> None:
        """Raise the last error once the CSOT deadline has passed before the next attempt."""
        error = self._last_error
        assert error is not None
        if is_retryable_overload(_shared.error_to_check(error)):
            # Let the core record the stop (reason DEADLINE), as if asked before sleeping.
            self._cycle.unsent(error, deadline=_shared.csot_deadline())
        self._raise(error)

    def _is_retrying(self) -> bool:
        """Return True while the current write batch (or the operation) is being retried."""
        return bool(self._bulk.retrying) if self._bulk is not None else self._retrying

    def _raise(self, error: Optional[BaseException], cause: Optional[BaseException] = None) -> Any:
        """Raise ``error`` with the operation's retry summary attached."""
        assert error is not None
        self._ended = True
        self._cycle.ended(error)
        if cause is not None and cause is not error:
            raise error from cause
        raise error

    def _select(self) -> Any:
        """Select the server for the next attempt, avoiding the deprioritized ones, and admit
        the attempt (wait for its slot, or raise the pacing's refusal)."""
        self._server = None
        cycle = self._cycle
        client = self._client
        avoided: Optional[list[Any]] = self._deprioritized
        state = cycle.state

        def select() -> Any:
            # Through the instance: the hedging wrapper (``adapters/hedging/``) sits there.
            return client._select_server(
                self._selector,
                self._session,
                self._operation,
                address=self._address,
                deprioritized_servers=avoided,
                operation_id=self._operation_id,
            )

        try:
            if state.steers():  # a server pushes back or is paced: steer around it
                avoided = seams.steer(client, state.avoid, self._selector, self._address, avoided)
            if avoided:
                seams.keep_candidate_servers(client)  # the filter steers this selection only
            server = select()
            # Asked after the selection (which may have waited): a server pushing back
            # meanwhile paces this attempt too.  Nothing paced: send without asking.
            if cycle.paced() is not None:
                step = cycle.admit(server, _shared.csot_deadline)
                if step is not SEND:
                    carry_out(cycle, step)
                    server = after_wait(cycle, server, select)
        except PyMongoError as exc:
            if self._retryable and not self._is_read:  # as pymongo labels a write's errors
                _CLIENT_MODULE._add_retryable_write_error(exc, 0, False)
            raise
        self._server = server
        cycle.started(server)
        return server

    def _write_once(self, server: Any) -> Any:
        """One write attempt on ``server`` (just selected) and a fresh connection."""
        max_wire_version = 0
        is_mongos = False
        try:
            with self._client._checkout(server, self._session) as conn:
                max_wire_version = conn.max_wire_version
                is_mongos = conn.is_mongos
                supported = bool(
                    self._session is not None
                    and server.description.retryable_writes_supported
                    and conn.supports_sessions
                )
                if not supported:
                    self._retryable = False
                    if self._is_retrying() and not self._after_overload:
                        # pymongo's own retry needs sessions: report the error retried.
                        self._raise(self._last_error)
                watch = self._bulk is not None and self._cycle.opens_transaction
                if watch:
                    self._watch_batches(conn)
                session = self._session
                if (
                    session is not None
                    and session._transaction.state in _ACTIVE_STATES  # seams.outside_transaction
                    and self._operation_name() == "commitTransaction"
                ):
                    self._commit_attempt = seams.commit_attempt(session)
                try:
                    return self._func(self._session, conn, self._retryable)
                finally:
                    if watch:
                        vars(conn).pop("write_command", None)
        except PyMongoError as exc:
            if self._retryable:
                _CLIENT_MODULE._add_retryable_write_error(exc, max_wire_version, is_mongos)
            raise

    def _watch_batches(self, conn: Any) -> None:
        """Notice when a batch of a bulk write that opens a transaction completes.

        Once one batch has completed the server has started the transaction, so an overload
        on a later batch must not send ``startTransaction`` again.
        """
        write_command = conn.write_command

        def watched(*args: Any, **kwargs: Any) -> Any:
            reply = write_command(*args, **kwargs)
            self._cycle.transaction_began()
            return reply

        conn.write_command = watched

    def _read_once(self, server: Any) -> Any:
        """One read attempt on ``server`` (just selected) and a fresh connection."""
        with self._client._conn_from_server(self._read_pref, server, self._session) as (
            conn,
            read_pref,
        ):
            return self._func(self._session, server, conn, read_pref)

    def _classic_eligible(self, exc: PyMongoError, error: PyMongoError) -> bool:
        """Whether pymongo's own retryable read/write rules retry ``exc`` (count limits aside)."""
        if not self._retryable:
            return False
        if self._is_read:
            return isinstance(exc, ConnectionFailure) or (
                isinstance(exc, OperationFailure) and exc.code in _RETRYABLE_ERROR_CODES
            )
        return error.has_error_label("RetryableWriteError")

    def _overload_retries_allowed(self) -> bool:
        """Whether retryReads/retryWrites allow retrying this operation on overload."""
        if not self._state.policy.respect_retry_options:
            return True
        if self._is_read:
            return _shared.read_retries_allowed(
                self._client, self._operation_name(), self._retryable, self._session
            )
        return _shared.write_retries_allowed(self._client, self._operation_name())

    def _after_overload_error(self, exc: PyMongoError, error: PyMongoError) -> float:
        """Ask the core about an overload error; prepare the retry it grants.

        An overload error without ``RetryableError`` is still retried (with backoff) when
        pymongo's own rules retry it; the core caps all retries together once an overload error
        has been seen, and the ledger decides the transaction rules.
        """
        step = self._cycle.failed(
            exc,
            deadline=_shared.csot_deadline(),
            retries_allowed=self._overload_retries_allowed(),
            classic_retryable=self._classic_eligible(exc, error),
        )
        if isinstance(step, Stop):
            if has_no_writes_performed(error) and self._last_error is not None:
                self._raise(self._last_error, exc)
            raise exc
        self._note_retry(exc, error)
        _shared.forget_client_bulk_error(self._func, exc)
        self._after_overload = True
        ops = self._cycle.record()
        session = self._session
        if session is not None and session.in_transaction:
            if ops.ledger.restarts_transaction():
                # The server never started the transaction: send startTransaction again.
                seams.restart_transaction(session)
                session._unpin()
            elif _shared.is_transaction_end(self._operation_name()) and not (
                ops.ledger.keeps_pinned_server() and seams.pinned_address(session) is not None
            ):
                # A load-balanced transaction's connection is released; a transaction pinned
                # to a mongos stays there (another mongos could only recover or abort it).
                session._unpin()
            if (
                self._commit_attempt is not None
                and self._operation_name() == "commitTransaction"
                and ops.ledger.commit_keeps_write_concern()
            ):
                # Overload errors only so far: the retry keeps the failed attempt's write concern.
                seams.set_commit_attempt(session, self._commit_attempt)
        if self._server is not None and (step.retarget or _shared.is_sharded(self._client)):
            self._deprioritized.append(self._server)
        return step.seconds

    def _after_classic_error(self, exc: PyMongoError, error: PyMongoError) -> None:
        """Apply pymongo's own retryable read/write rules to an error that is no overload."""
        eligible = self._classic_eligible(exc, error)
        if eligible and not self._is_read and self._session is not None:
            self._session._unpin()
        ops = self._cycle.record()
        if eligible:
            ops.ledger.finished(AttemptOutcome.CLASSIC_RETRYABLE)
        if not eligible or self._classic_retries_exhausted(ops.ledger):
            if retry_summary(exc) is None:
                self._cycle.failed(exc, classic_retryable=eligible)
            if not self._is_read and has_no_writes_performed(error) and self._last_error:
                self._raise(self._last_error, exc)
            raise exc
        ops.classic_retry(exc)
        self._note_retry(exc, error)
        self._after_overload = False
        if self._server is not None and (
            _shared.CLASSIC_DEPRIORITIZES_ALWAYS or _shared.is_sharded(self._client)
        ):
            self._deprioritized.append(self._server)

    def _classic_retries_exhausted(self, ledger: AttemptLedger) -> bool:
        """Whether pymongo's own rules allow no further retry of an error that is no overload.

        pymongo retries once per write batch (or operation), without limit under CSOT; once an
        overload error has been seen, all retries together are capped at the policy's
        ``max_retries`` (the ledger counts them).
        """
        unlimited = _csot.get_timeout() is not None
        if ledger.overload_seen:
            return not ledger.classic_retry_allowed(
                self._state.policy.max_retries, unlimited=unlimited
            )
        return self._is_retrying() and not unlimited

    def _note_retry(self, exc: PyMongoError, error: PyMongoError) -> None:
        """Remember that a retry follows, and which error to report if it writes nothing."""
        if self._bulk is not None and not self._is_read:
            self._bulk.retrying = True
        else:
            self._retrying = True
        if self._last_error is None or not has_no_writes_performed(error):
            self._last_error = exc


def _retry_internal(
    self: Any,
    func: Callable[..., Any],
    session: Any,
    bulk: Any,
    operation: str,
    is_read: bool = False,
    address: Any = None,
    read_pref: Any = None,
    retryable: bool = False,
    operation_id: Optional[int] = None,
) -> Any:
    """Replacement of ``MongoClient._retry_internal`` for an enabled client: the retry
    loop.  Each pass selects and admits (``_select``), sends (``_read_once`` / ``_write_once``)
    and, on an error, hands it to the cycle (overload) or pymongo's classic rules."""
    state: Optional[ClientState] = getattr(self, STATE_ATTRIBUTE, None)
    if state is None:  # disabled while an operation was starting
        return type(self)._retry_internal(
            self, func, session, bulk, operation, is_read, address, read_pref, retryable,
            operation_id,
        )  # fmt: skip
    loop = _SyncCycleLoop(
        self, state, func, session, bulk, operation, is_read, address, read_pref, retryable,
        operation_id,
    )  # fmt: skip
    cycle = loop._cycle
    if retryable and not is_read and session is not None:
        loop._start_retryable_write(session)
    while True:
        if (loop._retrying or bulk is not None) and loop._is_retrying() and _shared.csot_expired():
            loop._deadline_passed()
        try:
            server = loop._select()
            result = loop._read_once(server) if is_read else loop._write_once(server)
        except LocalOverloadError as exc:
            # Refused by the pacing: the cycle has accounted for it and attached the summary.
            if loop._last_error is not None:
                raise exc from loop._last_error
            raise
        except ServerSelectionTimeoutError as exc:
            cycle.unsent(exc)
            # A retry that finds no server reports the error of the attempt before it.
            loop._raise(loop._last_error if loop._is_retrying() else exc, exc)
        except PyMongoError as exc:
            if loop._ended:
                # ``_write_once`` raised the error retried from within the attempt (pymongo's
                # retry needs sessions): the operation is over, nothing failed here.
                raise
            error = _shared.error_to_check(exc)
            cycle.settle(error)  # the attempt's outcome, for the pacing
            if is_overload(error):
                pause(state, loop._after_overload_error(exc, error))
            else:
                loop._after_classic_error(exc, error)
            continue
        cycle.succeeded()
        return result
