"""The per-operation attempt ledger: every attempt of one operation and what the rules derive.

Theory of operation.  The adapters (native loop on pymongo >= 4.17, backport on 4.9-4.16) feed
one ``AttemptLedger`` per operation: ``started(server)`` before each attempt, ``finished(outcome)``
after it, and ``command_processed()`` when the server processed a command of a transaction this
operation opens.  The rules that depend on the whole history of the operation are answered here,
in pure code, so that both adapters apply them the same way:

* :meth:`AttemptLedger.retry_number`: the number the next retry would carry, counting *every*
  failed attempt (classic and overload).  Once an overload error has been seen, all retries
  together are capped at the policy's ``max_retries`` (current spec, "Interaction with Other
  Retry Policies").
* :meth:`AttemptLedger.classic_retry_allowed`: whether pymongo's own (classic) retry rules may
  retry once more, given that cap.
* :meth:`AttemptLedger.restarts_transaction`: a transaction whose first command was never
  processed by the server sends ``startTransaction`` again on the retry (transactions spec:
  "the command executed in the retry attempt must be treated as the first command").
* :meth:`AttemptLedger.keeps_pinned_server`: inside a transaction pinned to a mongos, a retry
  after an overload error goes to that mongos again (the transaction lives there; another mongos
  could only recover or abort it).
* :meth:`AttemptLedger.commit_keeps_write_concern`: a ``commitTransaction`` retried after
  overload errors only keeps the write concern of the attempt that failed; after any other
  failure it is upgraded to majority (transactions spec, "Interaction with Client Backpressure").

Nothing here does I/O, reads a clock or touches pymongo objects.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional

from backpressure.core.events import Address

__all__ = ["AttemptLedger", "AttemptOutcome", "AttemptRecord"]


class AttemptOutcome(enum.Enum):
    """How one attempt ended."""

    SUCCESS = "success"
    """The attempt succeeded."""
    OVERLOAD = "overload"
    """It failed with an error labelled ``SystemOverloadedError``."""
    CLASSIC_RETRYABLE = "classic retryable"
    """It failed with an error pymongo's own retryable read/write rules retry (no overload)."""
    OTHER = "other"
    """It failed with any other error."""


@dataclass(frozen=True)
class AttemptRecord:
    """One attempt: the server it went to and how it ended (None while it runs)."""

    server: Optional[Address]
    """The server selected for the attempt, when known."""
    outcome: Optional[AttemptOutcome] = None
    """How the attempt ended; None while it is running."""


class AttemptLedger:
    """Every attempt of one operation, and the rules that depend on that history."""

    __slots__ = ("_first_command_processed", "_opens_transaction", "_records")

    def __init__(self, *, opens_transaction: bool = False) -> None:
        """Start an empty ledger.

        ``opens_transaction``: the operation is the first statement of a transaction (the session
        was in the "starting" state when the operation began).
        """
        self._records: list[AttemptRecord] = []
        self._opens_transaction = opens_transaction
        self._first_command_processed = False

    # -- feeding ---------------------------------------------------------------------------

    def started(self, server: Optional[Address]) -> None:
        """Record the start of an attempt on ``server``; an attempt still open is closed as OTHER.

        An adapter that cannot see how an attempt ended closes it with :meth:`finished` before
        starting the next one; this fallback only keeps the ledger consistent.
        """
        if self._records and self._records[-1].outcome is None:
            self.finished(AttemptOutcome.OTHER)
        self._records.append(AttemptRecord(server))

    def finished(self, outcome: AttemptOutcome) -> None:
        """Record how the current attempt ended (no-op when no attempt is open)."""
        if self._records and self._records[-1].outcome is None:
            self._records[-1] = AttemptRecord(self._records[-1].server, outcome)

    def command_processed(self) -> None:
        """Record that the server processed a command of this operation (the transaction began)."""
        self._first_command_processed = True

    # -- reading ---------------------------------------------------------------------------

    @property
    def records(self) -> tuple[AttemptRecord, ...]:
        """Every attempt so far, in order."""
        return tuple(self._records)

    @property
    def attempts(self) -> int:
        """Attempts started so far."""
        return len(self._records)

    @property
    def open(self) -> bool:
        """True while the last attempt has started and not yet ended."""
        return bool(self._records) and self._records[-1].outcome is None

    @property
    def failures(self) -> int:
        """Attempts that ended in an error."""
        return sum(
            1
            for record in self._records
            if record.outcome is not None and record.outcome is not AttemptOutcome.SUCCESS
        )

    @property
    def overload_seen(self) -> bool:
        """True once any attempt failed with an overload error."""
        return any(record.outcome is AttemptOutcome.OVERLOAD for record in self._records)

    @property
    def non_overload_failure(self) -> bool:
        """True once any attempt failed with an error that is not an overload error."""
        return any(
            record.outcome in (AttemptOutcome.CLASSIC_RETRYABLE, AttemptOutcome.OTHER)
            for record in self._records
        )

    @property
    def opens_transaction(self) -> bool:
        """True when the operation is the first statement of a transaction."""
        return self._opens_transaction

    @property
    def first_command_processed(self) -> bool:
        """True once the server processed a command of this operation."""
        return self._first_command_processed

    def servers(self) -> tuple[Address, ...]:
        """The servers tried, in order, without duplicates."""
        seen: list[Address] = []
        for record in self._records:
            if record.server is not None and record.server not in seen:
                seen.append(record.server)
        return tuple(seen)

    # -- rules -----------------------------------------------------------------------------

    def retry_number(self) -> int:
        """The number the next retry would carry: every failed attempt counts (1 = first retry)."""
        return self.failures

    def classic_retry_allowed(self, max_retries: int, *, unlimited: bool) -> bool:
        """Whether pymongo's classic rules may retry once more after the last failure.

        Classic rules allow one retry, or any number under a CSOT timeout (``unlimited``).  Once
        an overload error has been seen, all retries together are capped at ``max_retries``.
        """
        if self.overload_seen:
            return self.retry_number() <= max_retries
        return unlimited or self.retry_number() <= 1

    def restarts_transaction(self) -> bool:
        """Whether the retry must send ``startTransaction`` again.

        True when the operation opens a transaction and the server never processed any of its
        commands (every attempt so far was refused before the transaction began).
        """
        return self._opens_transaction and not self._first_command_processed

    def keeps_pinned_server(self) -> bool:
        """Whether the retry stays on the server the transaction is pinned to.

        True when the last failure was an overload error and the transaction is not being
        restarted (a restarted transaction has no server yet).
        """
        failed = [r for r in self._records if r.outcome not in (None, AttemptOutcome.SUCCESS)]
        return (
            bool(failed)
            and failed[-1].outcome is AttemptOutcome.OVERLOAD
            and not (self.restarts_transaction())
        )

    def commit_keeps_write_concern(self) -> bool:
        """Whether a retried ``commitTransaction`` keeps the write concern of the failed attempt.

        True when every failure so far was an overload error; after any other failure the retry
        uses the upgraded (majority) write concern of the transactions spec.
        """
        return self.overload_seen and not self.non_overload_failure
