"""Logical sessions: retryable-write records and multi-document transactions.

Theory of operation:

* A write carrying ``lsid`` + ``txnNumber`` outside a transaction is a *retryable write*. Its
  first execution's reply is recorded under (session, txnNumber); a later command with the same
  pair gets that reply back and the write is not applied again. A smaller txnNumber than the
  session's latest is refused (225 TransactionTooOld). Only the latest reply per session is
  kept, and at most ``MAX_RECORDS`` statistics entries overall (least recently used dropped).
* ``startTransaction: true`` + ``autocommit: false`` starts a transaction. Its commands run in a
  private ``DataStore`` workspace that copies each collection on first touch, so other sessions
  see nothing until ``commitTransaction`` writes the touched collections back; abort discards the
  workspace. A session has at most one transaction; starting a newer one aborts the older.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from backpressure.testing.server.engine.store import DataStore
from backpressure.testing.server.errors import CommandError

__all__ = [
    "MAX_RECORDS",
    "RECOVERY_SHARD_ID",
    "TRANSIENT",
    "RouterTransactions",
    "SessionRegistry",
    "Transaction",
    "TxnRecord",
    "is_transaction_command",
    "session_key",
]

_EMPTY_WORKSPACE = DataStore()

MAX_RECORDS = 10_000
"""Upper bound on stored (session, txnNumber) records and on remembered sessions."""

TRANSIENT = "TransientTransactionError"
"""The label mongod puts on errors after which the whole transaction may be retried."""

RECOVERY_SHARD_ID = "shard0"
"""The one shard behind every emulated mongos; a ``recoveryToken`` names it."""


@dataclass
class TxnRecord:
    """What happened to one (session, txnNumber): a retryable write or a transaction."""

    lsid: dict[str, Any]
    """The session's ``lsid`` document."""
    txn_number: int
    """The transaction number."""
    attempts: int = 0
    """Executions that reached the engine (for transactions: commit attempts)."""
    applied: bool = False
    """True once the write was applied (for transactions: committed)."""
    reply: Optional[dict[str, Any]] = None
    """The stored reply returned to retries (retryable writes only)."""

    def stats(self) -> dict[str, Any]:
        """Return the public statistics of this record."""
        return {
            "lsid": copy.deepcopy(self.lsid),
            "txnNumber": self.txn_number,
            "attempts": self.attempts,
            "applied": self.applied,
        }


@dataclass
class Transaction:
    """A multi-document transaction and its private workspace."""

    key: Any
    """The session key (``lsid.id``)."""
    txn_number: int
    """The transaction number."""
    workspace: DataStore
    """The copy-on-touch view the transaction reads and writes (emptied once it ends)."""
    state: str = "in_progress"
    """``in_progress``, ``committed`` or ``aborted``."""
    commands: list[str] = field(default_factory=list)
    """Names of the commands sent inside the transaction, in order."""
    executed: int = 0
    """Commands the engine actually ran inside the transaction."""
    writes: dict[tuple[str, str], set[Any]] = field(default_factory=dict)
    """Per namespace, the keys of the documents the transaction has written so far."""

    def finish(self, state: str) -> None:
        """End a running transaction as ``committed`` or ``aborted`` and free its workspace."""
        if self.state == "in_progress":
            self.state = state
            self.workspace = _EMPTY_WORKSPACE


def session_key(lsid: Any) -> Any:
    """Return a hashable key for an ``lsid`` document (its ``id``), or None when absent."""
    if not isinstance(lsid, Mapping):
        return None
    value = lsid.get("id")
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


def is_transaction_command(body: Mapping[str, Any]) -> bool:
    """Return True if the body carries ``autocommit: false`` with a txnNumber and an lsid."""
    return (
        body.get("autocommit") is False
        and body.get("txnNumber") is not None
        and isinstance(body.get("lsid"), Mapping)
    )


class SessionRegistry:
    """Sessions known to one engine, with their retryable-write records and transactions."""

    def __init__(self) -> None:
        """Start with no sessions."""
        self._lsids: OrderedDict[Any, dict[str, Any]] = OrderedDict()
        self._latest: dict[Any, int] = {}
        self._records: OrderedDict[tuple[Any, int], TxnRecord] = OrderedDict()
        self._txns: dict[Any, Transaction] = {}

    # -- bookkeeping ---------------------------------------------------------------------------

    def note(self, body: Mapping[str, Any]) -> Any:
        """Remember the session of a command; return its key (None without ``lsid``)."""
        lsid = body.get("lsid")
        key = session_key(lsid)
        if key is None:
            return None
        self._lsids[key] = dict(lsid)  # type: ignore[arg-type]
        self._lsids.move_to_end(key)
        while len(self._lsids) > MAX_RECORDS:
            old, _ = self._lsids.popitem(last=False)
            self._latest.pop(old, None)
        return key

    def known_lsids(self) -> list[dict[str, Any]]:
        """Return the ``lsid`` documents of the sessions seen and not ended."""
        return [copy.deepcopy(lsid) for lsid in self._lsids.values()]

    def stats(self) -> list[dict[str, Any]]:
        """Return one statistics entry per recorded (session, txnNumber)."""
        return [record.stats() for record in self._records.values()]

    def _record(self, key: Any, lsid: dict[str, Any], txn_number: int) -> TxnRecord:
        record = self._records.get((key, txn_number))
        if record is None:
            record = self._records[(key, txn_number)] = TxnRecord(dict(lsid), txn_number)
            while len(self._records) > MAX_RECORDS:
                self._records.popitem(last=False)
        else:
            self._records.move_to_end((key, txn_number))
        return record

    def _advance(self, key: Any, txn_number: int) -> None:
        """Make ``txn_number`` the session's latest, refusing an older one."""
        latest = self._latest.get(key)
        if latest is not None and txn_number < latest:
            raise CommandError(
                225,
                f"Cannot start transaction {txn_number} on session because a newer "
                f"transaction {latest} has already started",
            )
        if latest is not None and txn_number > latest:
            old = self._records.get((key, latest))
            if old is not None:
                old.reply = None
            txn = self._txns.get(key)
            if txn is not None and txn.state == "in_progress":
                txn.finish("aborted")
        self._latest[key] = txn_number
        self._trim()

    def _trim(self) -> None:
        """Keep the per-session tables bounded (oldest sessions forgotten first)."""
        while len(self._latest) > MAX_RECORDS:
            del self._latest[next(iter(self._latest))]
        if len(self._txns) > MAX_RECORDS:
            for key in [k for k, t in self._txns.items() if t.state != "in_progress"]:
                del self._txns[key]
                if len(self._txns) <= MAX_RECORDS:
                    break

    def end(self, lsids: list[Any]) -> list[Any]:
        """End sessions: abort their transactions and forget them; return their keys."""
        keys = [session_key(lsid) for lsid in lsids]
        for key in keys:
            self._lsids.pop(key, None)
            txn = self._txns.pop(key, None)
            if txn is not None:
                txn.finish("aborted")
        return keys

    def kill_all(self) -> None:
        """Abort every running transaction (``killAllSessions``)."""
        for txn in self._txns.values():
            if txn.state == "in_progress":
                txn.finish("aborted")

    # -- retryable writes ----------------------------------------------------------------------

    def retryable_write(
        self, body: Mapping[str, Any], run: Callable[[], dict[str, Any]]
    ) -> dict[str, Any]:
        """Run a retryable write once per (session, txnNumber); replay the stored reply after."""
        key = self.note(body)
        txn_number = _txn_number(body)
        self._advance(key, txn_number)
        record = self._record(key, body["lsid"], txn_number)
        record.attempts += 1
        if record.applied and record.reply is not None:
            return copy.deepcopy(record.reply)
        reply = run()
        record.applied = True
        record.reply = copy.deepcopy(reply)
        return reply

    # -- transactions --------------------------------------------------------------------------

    def find(self, body: Mapping[str, Any]) -> Optional[Transaction]:
        """Return the transaction a command refers to (same session and txnNumber), if any."""
        if not is_transaction_command(body):
            return None
        txn = self._txns.get(session_key(body["lsid"]))
        if txn is None or txn.txn_number != _txn_number(body):
            return None
        return txn

    def enter(self, body: Mapping[str, Any], name: str, main: DataStore) -> Transaction:
        """Return the running transaction for a command, starting it on ``startTransaction``."""
        key = self.note(body)
        txn_number = _txn_number(body)
        if body.get("startTransaction") is True:
            existing = self._txns.get(key)
            if existing is not None and existing.txn_number == txn_number:
                return self._restart(existing, name)
            self._advance(key, txn_number)
            started = self._txns[key] = Transaction(key, txn_number, DataStore(parent=main))
            self._record(key, body["lsid"], txn_number)
            started.commands.append(name)
            return started
        latest = self._latest.get(key)
        if latest is not None and txn_number < latest:
            self._advance(key, txn_number)  # raises TransactionTooOld
        txn = self._txns.get(key)
        if txn is None or txn.txn_number != txn_number:
            raise CommandError(
                251,
                f"Given transaction number {txn_number} does not match any in-progress "
                "transactions",
                labels=(TRANSIENT,),
            )
        if txn.state == "committed" and name not in ("commitTransaction", "abortTransaction"):
            raise CommandError(256, f"Transaction {txn_number} has been committed.")
        if txn.state == "aborted" and name != "abortTransaction":
            raise CommandError(
                251, f"Transaction {txn_number} has been aborted.", labels=(TRANSIENT,)
            )
        txn.commands.append(name)
        return txn

    @staticmethod
    def _restart(txn: Transaction, name: str) -> Transaction:
        """Handle a repeated ``startTransaction`` for the same txnNumber.

        A transaction that nothing has run in yet (it was started on behalf of a command a fail
        point answered, see ``Engine.note_injected_error``) simply continues: that is how a
        driver's retry of the first statement behaves against mongod.
        """
        if txn.state == "in_progress" and txn.executed == 0:
            txn.commands.append(name)
            return txn
        if txn.state == "committed":
            raise CommandError(256, f"Transaction {txn.txn_number} has been committed.")
        if txn.state == "aborted":
            raise CommandError(
                251, f"Transaction {txn.txn_number} has been aborted.", labels=(TRANSIENT,)
            )
        raise CommandError(
            117, f"Transaction with txnNumber {txn.txn_number} has already been started"
        )

    def running(self) -> list[Transaction]:
        """Return the transactions in progress."""
        return [txn for txn in self._txns.values() if txn.state == "in_progress"]

    def commit(self, txn: Transaction, lsid: Mapping[str, Any], main: DataStore) -> None:
        """Commit (or re-acknowledge a committed) transaction."""
        record = self._record(txn.key, dict(lsid), txn.txn_number)
        record.attempts += 1
        if txn.state == "in_progress":
            txn.workspace.commit_into(main)
            txn.finish("committed")
            record.applied = True

    def abort(self, txn: Transaction) -> None:
        """Abort a running transaction; aborting twice or after commit fails like mongod."""
        if txn.state == "committed":
            raise CommandError(256, f"Transaction {txn.txn_number} has been committed.")
        if txn.state == "aborted":
            raise CommandError(
                251, f"Transaction {txn.txn_number} has been aborted.", labels=(TRANSIENT,)
            )
        txn.finish("aborted")

    def clear(self) -> None:
        """Forget every session, record and transaction."""
        self._lsids.clear()
        self._latest.clear()
        self._records.clear()
        self._txns.clear()


def _txn_number(body: Mapping[str, Any]) -> int:
    value = body.get("txnNumber")
    if isinstance(value, bool) or not isinstance(value, int):
        raise CommandError(14, "BSON field 'txnNumber' is the wrong type, expected long")
    return int(value)


class RouterTransactions:
    """What one mongos knows of the transactions it routes: per session, the latest txnNumber.

    In a sharded cluster the transaction itself lives on the shards (here: the engine's
    ``SessionRegistry``), while each mongos keeps its own router state. A mongos that did not
    route a transaction's statements cannot continue, commit or abort it; it can only recover a
    commit decision from the shard through the ``recoveryToken`` the first mongos returned.
    """

    def __init__(self) -> None:
        """Start knowing no transaction."""
        self._routed: OrderedDict[Any, int] = OrderedDict()

    def start(self, key: Any, txn_number: int) -> None:
        """Remember that this mongos started transaction ``txn_number`` of session ``key``."""
        self._routed[key] = txn_number
        self._routed.move_to_end(key)
        while len(self._routed) > MAX_RECORDS:
            self._routed.popitem(last=False)

    def knows(self, key: Any, txn_number: int) -> bool:
        """True when this mongos routed transaction ``txn_number`` of session ``key``."""
        return key is not None and self._routed.get(key) == txn_number

    def forget(self, keys: list[Any]) -> None:
        """Drop the router state of ended sessions."""
        for key in keys:
            self._routed.pop(key, None)

    def clear(self) -> None:
        """Forget every routed transaction."""
        self._routed.clear()
