"""The embedded server's data and command engine.

The transport (``transport/deployment.py``) and the cluster layer answer handshake, diagnostics
and fail-point commands themselves and hand every other command to ``Engine.execute``. The engine
keeps one shared data store (mongomock) for all members of a topology, the open cursors, the
logical sessions with their retryable-write records, and the transactions with their private
workspaces. Command families live in
``crud``, ``cursor_commands``, ``aggregate``, ``ddl``, ``bulk`` and ``session_commands``;
cursor state in ``cursors``, sessions and transactions in ``sessions``.

Commands (mongomock 4.3 is the query engine):

* CRUD: insert, update (operators, replacement, pipeline, upsert, multi, arrayFilters, sort),
  delete, findAndModify, count, distinct; find, getMore, killCursors; aggregate (mongomock stages,
  ``$out``, ``$merge``, ``$changeStream``, database-level ``$listLocalSessions``, ``$currentOp``,
  ``$documents``); explain (a COLLSCAN plan); client ``bulkWrite``.
* Catalog: create, collMod, drop, dropDatabase, createIndexes, listIndexes, dropIndexes,
  listCollections, listDatabases, renameCollection, dbStats, collStats.
* Sessions: endSessions, killSessions, killAllSessions(ByPattern), commitTransaction,
  abortTransaction; retryable writes and transactions keyed by ``lsid`` + ``txnNumber``.

Emulated around mongomock (``rewrite``, ``writes``): ``let`` variables,
case-insensitive collations, ``$replaceWith``, ``$type: "null"``, ``arrayFilters``, null ``_id``
upserts, top-level ``$`` field names, first-writer-wins WriteConflict between transactions.
Not emulated: views, ``$text``, ``$setField``, ``$rand``, accent-insensitive collation,
JavaScript (``$where`` is understood only for ``sleep(<arithmetic>)`` and constant results, see
``where``; its sleeps are reported by ``delay_seconds``), and non-transactional writes waiting
for transactions.

Call an ``Engine`` from one thread only (the server's event-loop thread): mongomock is not
thread-safe.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Optional

from backpressure.testing.server.engine import (
    aggregate,
    bulk,
    crud,
    cursor_commands,
    ddl,
    session_commands,
)
from backpressure.testing.server.engine.cursors import CursorRegistry
from backpressure.testing.server.engine.request import CommandContext, Handler, Request
from backpressure.testing.server.engine.rewrite import rewrite_body
from backpressure.testing.server.engine.sessions import (
    RECOVERY_SHARD_ID,
    TRANSIENT,
    RouterTransactions,
    SessionRegistry,
    Transaction,
    is_transaction_command,
    session_key,
)
from backpressure.testing.server.engine.store import DataStore, where_sleep_seconds
from backpressure.testing.server.errors import CODE_NAMES, CommandError

__all__ = ["CODE_NAMES", "CommandContext", "CommandError", "Engine"]

_RETRYABLE_WRITES = frozenset({"insert", "update", "delete", "findAndModify", "bulkWrite"})

_ALLOWED_IN_TRANSACTION = frozenset(
    {
        "find",
        "getMore",
        "killCursors",
        "aggregate",
        "distinct",
        "insert",
        "update",
        "delete",
        "findAndModify",
        "bulkWrite",
        "create",
        "createIndexes",
        "commitTransaction",
        "abortTransaction",
    }
)

_ALIASES = {"findandmodify": "findAndModify", "collstats": "collStats", "dbstats": "dbStats"}


def _written_namespaces(req: Request) -> list[tuple[str, str]]:
    """The namespaces a write command targets (``nsInfo`` for client bulkWrite)."""
    if req.name == "bulkWrite":
        info = req.body.get("nsInfo")
        out: list[tuple[str, str]] = []
        for entry in info if isinstance(info, list) else []:
            ns = entry.get("ns") if isinstance(entry, Mapping) else None
            if isinstance(ns, str) and "." in ns:
                db, _, coll = ns.partition(".")
                out.append((db, coll))
        return out
    target = req.body.get(req.name)
    return [(req.db, target)] if isinstance(target, str) else []


class Engine:
    """Shared data store and command semantics for all members of one topology.

    Call only from the event-loop thread.
    """

    WRITE_COMMANDS: ClassVar[frozenset[str]] = frozenset(
        {
            "insert",
            "update",
            "delete",
            "findAndModify",
            "create",
            "drop",
            "createIndexes",
            "dropIndexes",
            "dropDatabase",
            "renameCollection",
            "collMod",
            "bulkWrite",
            "commitTransaction",
            "abortTransaction",
        }
    )
    """Commands a secondary must reject (aggregate with ``$out``/``$merge``: see ``is_write``)."""

    HANDLERS: ClassVar[Mapping[str, Handler]] = {
        **crud.HANDLERS,
        **cursor_commands.HANDLERS,
        **aggregate.HANDLERS,
        **ddl.HANDLERS,
        **bulk.HANDLERS,
        **session_commands.HANDLERS,
    }
    """Command name to implementation."""

    def __init__(self) -> None:
        """Create an engine with no data, cursors or sessions."""
        self.store = DataStore()
        self.cursors = CursorRegistry()
        self.sessions = SessionRegistry()
        self.routers: dict[int, RouterTransactions] = {}
        """Per mongos (by member index), the transactions it routes."""

    def reset(self) -> None:
        """Drop all data, cursors, sessions and transactions."""
        self.store = DataStore()
        self.cursors.clear()
        self.sessions.clear()
        for router in self.routers.values():
            router.clear()

    def _router(self, ctx: CommandContext) -> Optional[RouterTransactions]:
        """The router state of the mongos a command arrived at (None on a mongod)."""
        if ctx.role != "mongos":
            return None
        router = self.routers.get(ctx.member_index)
        if router is None:
            router = self.routers[ctx.member_index] = RouterTransactions()
        return router

    @classmethod
    def command_name(cls, body: Mapping[str, Any]) -> str:
        """Return the canonical command name of a body (its first key, aliases resolved)."""
        name = next(iter(body), "")
        return _ALIASES.get(name, name)

    @classmethod
    def is_write(cls, name: str, body: Mapping[str, Any]) -> bool:
        """Return True if the command writes (a secondary must reject it)."""
        name = _ALIASES.get(name, name)
        if name in cls.WRITE_COMMANDS:
            return True
        if name == "aggregate":
            pipeline = body.get("pipeline")
            if isinstance(pipeline, list) and pipeline and isinstance(pipeline[-1], Mapping):
                return next(iter(pipeline[-1]), "") in ("$out", "$merge")
        return False

    def delay_seconds(self, db: str, body: Mapping[str, Any]) -> float:
        """Seconds a real server would spend in the command's ``$where`` ``sleep(ms)`` calls.

        mongod runs ``$where`` once per scanned document; the engine cannot sleep (it runs on the
        event loop), so the transport should ``await asyncio.sleep(...)`` this long before
        replying. Only find, count, distinct, delete, update, findAndModify and aggregate (first
        ``$match``) filters are inspected.
        """
        name = self.command_name(body)
        target = body.get(name)
        filters: list[Any] = []
        if name == "find":
            filters.append(body.get("filter"))
        elif name in ("count", "distinct", "findAndModify"):
            filters.append(body.get("query"))
        elif name in ("delete", "update"):
            statements = body.get("deletes" if name == "delete" else "updates")
            if isinstance(statements, list):
                filters.extend(s.get("q") for s in statements if isinstance(s, Mapping))
        elif name == "aggregate":
            pipeline = body.get("pipeline")
            if isinstance(pipeline, list) and pipeline and isinstance(pipeline[0], Mapping):
                filters.append(pipeline[0].get("$match"))
        per_document = sum(where_sleep_seconds(f) for f in filters)
        if not per_document or not isinstance(target, str):
            return 0.0
        coll = self.store.collection_store(db, target)
        scanned = len(coll._documents) if coll is not None else 0
        return per_document * min(scanned, 100)

    def await_seconds(self, body: Mapping[str, Any]) -> float:
        """Seconds a getMore on a change stream should wait before its (always empty) reply.

        mongod holds such a getMore for ``maxTimeMS`` (default 1 s) when no event arrives; without
        the wait a client's ``ChangeStream.next()`` polls in a busy loop. Other commands: 0.
        """
        if self.command_name(body) != "getMore":
            return 0.0
        cursor_id = body.get("getMore")
        if isinstance(cursor_id, bool) or not isinstance(cursor_id, int):
            return 0.0
        cursor = self.cursors.get(int(cursor_id))
        if cursor is None or not cursor.change_stream:
            return 0.0
        max_time = body.get("maxTimeMS")
        if isinstance(max_time, (int, float)) and not isinstance(max_time, bool) and max_time >= 0:
            return float(max_time) / 1000.0
        return 1.0

    def note_injected_error(
        self, db: str, body: dict[str, Any], ctx: Optional[CommandContext] = None
    ) -> None:
        """Record a command that a fail point answered before it reached ``execute``.

        mongod checks the session out, and begins the transaction of a ``startTransaction``
        command, before it evaluates ``failCommand``; so the transaction exists even though its
        first command failed, and a retry without ``startTransaction`` continues it. Call this
        for fail-point errors only (the ingress rate limiter rejects before any session work).
        """
        self.sessions.note(body)
        if not is_transaction_command(body) or body.get("startTransaction") is not True:
            return
        name = self.command_name(body)
        if name not in _ALLOWED_IN_TRANSACTION or name in ("commitTransaction", "abortTransaction"):
            return
        try:
            self.sessions.enter(body, name, self.store)
        except CommandError:
            return
        router = None if ctx is None else self._router(ctx)
        if router is not None:
            router.start(session_key(body.get("lsid")), int(body["txnNumber"]))

    def in_transaction(self, body: dict[str, Any]) -> bool:
        """True if this command belongs to a running (or starting) multi-document transaction."""
        if not is_transaction_command(body):
            return False
        if body.get("startTransaction") is True:
            return True
        txn = self.sessions.find(body)
        return txn is not None and txn.state in ("in_progress", "committed")

    def txn_stats(self) -> list[dict[str, Any]]:
        """Per (lsid id, txnNumber): ``{lsid, txnNumber, attempts, applied}``."""
        return self.sessions.stats()

    def execute(self, db: str, body: dict[str, Any], ctx: CommandContext) -> dict[str, Any]:
        """Run one command and return its reply (``ok: 1``); failures raise ``CommandError``."""
        name = self.command_name(body)
        handler = self.HANDLERS.get(name)
        if handler is None:
            raise CommandError(59, f"no such command: '{name}'", "CommandNotFound")
        body = rewrite_body(name, body)
        req = Request(name, db, body, ctx, self.store, self.cursors, self.sessions)
        if is_transaction_command(body):
            router = self._router(ctx)
            if router is None:
                return self._in_transaction(req, handler)
            return self._routed_transaction(req, handler, router)
        self.sessions.note(body)
        if name in ("endSessions", "killSessions", "killAllSessions", "killAllSessionsByPattern"):
            reply = handler(req)
            for router in self.routers.values():
                if name.startswith("killAll"):
                    router.clear()
                else:
                    router.forget([session_key(lsid) for lsid in body.get(name) or ()])
            return reply
        if name in ("commitTransaction", "abortTransaction"):
            if "txnNumber" in body:
                raise CommandError(251, f"{name} requires autocommit: false", labels=(TRANSIENT,))
            raise CommandError(72, f"{name} must be run within a transaction")
        if name in _RETRYABLE_WRITES and body.get("txnNumber") is not None:
            if session_key(body.get("lsid")) is None:
                raise CommandError(72, "Transaction number requires a session ID")
            return self.sessions.retryable_write(body, lambda: handler(req))
        return handler(req)

    def _routed_transaction(
        self, req: Request, handler: Handler, router: RouterTransactions
    ) -> dict[str, Any]:
        """A transaction command on a mongos: only the mongos that started it may continue it.

        Every statement's reply carries the ``recoveryToken`` naming the shard; a commit sent to
        another mongos without it fails with NoSuchTransaction (TransientTransactionError), with
        it the commit decision is recovered from the shard.
        """
        key = session_key(req.body.get("lsid"))
        txn_number = req.body["txnNumber"]
        if not isinstance(txn_number, int) or isinstance(txn_number, bool):
            raise CommandError(14, "BSON field 'txnNumber' is the wrong type, expected long")
        starting = req.body.get("startTransaction") is True
        if not starting and not router.knows(key, txn_number):
            if req.name == "commitTransaction" and "recoveryToken" in req.body:
                return self._recover_commit(req)
            raise CommandError(
                251,
                f"Transaction {txn_number} is not known to this mongos"
                + (
                    "; a commit on another mongos needs the recoveryToken"
                    if req.name == "commitTransaction"
                    else ""
                ),
                labels=(TRANSIENT,),
            )
        if starting and req.name not in ("commitTransaction", "abortTransaction"):
            router.start(key, txn_number)
        reply = self._in_transaction(req, handler)
        if req.name not in ("commitTransaction", "abortTransaction"):
            reply["recoveryToken"] = {"recoveryShardId": RECOVERY_SHARD_ID}
        return reply

    def _recover_commit(self, req: Request) -> dict[str, Any]:
        """Commit through a ``recoveryToken``: report the shard's decision, never start one.

        A committed transaction answers ok (the commit is acknowledged again); one that never
        received a commit is aborted, as the shard does when a recovery finds no decision.
        """
        token = req.body["recoveryToken"]
        if not isinstance(token, Mapping):
            raise CommandError(14, "BSON field 'recoveryToken' is the wrong type, expected object")
        shard = token.get("recoveryShardId")
        if shard != RECOVERY_SHARD_ID:
            raise CommandError(70, f"Shard {shard!r} not found", "ShardNotFound")
        txn = self.sessions.find(req.body)
        if txn is not None and txn.state == "committed":
            self.sessions.commit(txn, req.body["lsid"], self.store)
            return {"ok": 1.0}
        if txn is not None:
            txn.finish("aborted")
        raise CommandError(
            251,
            "Recovering the transaction's outcome found the transaction aborted",
            labels=(TRANSIENT,),
        )

    def _in_transaction(self, req: Request, handler: Handler) -> dict[str, Any]:
        if req.name not in _ALLOWED_IN_TRANSACTION:
            raise CommandError(263, f"Cannot run '{req.name}' in a multi-document transaction.")
        if req.body.get("startTransaction") is True and req.name in (
            "commitTransaction",
            "abortTransaction",
        ):
            raise CommandError(
                251, "Cannot start a transaction with commit or abort", labels=(TRANSIENT,)
            )
        txn = self.sessions.enter(req.body, req.name, self.store)
        if req.name == "commitTransaction":
            self.sessions.commit(txn, req.body["lsid"], self.store)
            return {"ok": 1.0}
        if req.name == "abortTransaction":
            self.sessions.abort(txn)
            return {"ok": 1.0}
        req.store = txn.workspace
        req.txn = txn
        txn.executed += 1
        try:
            reply = handler(req)
        except CommandError:
            self._abort_quietly(txn)
            raise
        if reply.get("writeErrors"):
            self._abort_quietly(txn)
        elif req.name in _RETRYABLE_WRITES:
            self._check_write_conflicts(req, txn)
        return reply

    def _check_write_conflicts(self, req: Request, txn: Transaction) -> None:
        """Fail with WriteConflict if another transaction wrote the same documents first.

        First writer wins, as under mongod's snapshot isolation: a document written by another
        running transaction, or by a transaction that committed after our snapshot of the
        collection, cannot be written again; the later transaction is aborted.
        """
        for ns in _written_namespaces(req):
            keys = txn.workspace.written_keys(*ns)
            txn.writes[ns] = keys
            if not keys:
                continue
            clash = txn.workspace.committed_since_snapshot(*ns, keys) or any(
                other is not txn and other.writes.get(ns, set()) & keys
                for other in self.sessions.running()
            )
            if clash:
                txn.finish("aborted")
                raise CommandError(
                    112,
                    "WriteConflict error: this operation conflicted with another operation. "
                    "Please retry your operation or multi-document transaction.",
                    labels=(TRANSIENT,),
                )

    @staticmethod
    def _abort_quietly(txn: Transaction) -> None:
        txn.finish("aborted")
