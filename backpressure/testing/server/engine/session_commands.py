"""Session commands: endSessions, killSessions, killAllSessions(ByPattern); commit/abort outside a
transaction (inside one, ``Engine`` drives them itself)."""

from __future__ import annotations

from typing import Any

from backpressure.testing.server.engine.request import Handler, Request
from backpressure.testing.server.engine.sessions import TRANSIENT
from backpressure.testing.server.errors import CommandError

__all__ = ["HANDLERS"]


def _end_sessions(req: Request) -> dict[str, Any]:
    lsids = req.body.get(req.name)
    if not isinstance(lsids, list):
        raise CommandError(14, f"BSON field '{req.name}' must be an array of session ids")
    keys = req.sessions.end(lsids)
    req.cursors.close_for_sessions({key for key in keys if key is not None})
    return {"ok": 1.0}


def _kill_all_sessions(req: Request) -> dict[str, Any]:
    req.sessions.kill_all()
    req.cursors.clear()
    return {"ok": 1.0}


def _transaction_only(req: Request) -> dict[str, Any]:
    raise CommandError(251, f"{req.name} requires a transaction", labels=(TRANSIENT,))


HANDLERS: dict[str, Handler] = {
    "endSessions": _end_sessions,
    "killSessions": _end_sessions,
    "killAllSessions": _kill_all_sessions,
    "killAllSessionsByPattern": _kill_all_sessions,
    "commitTransaction": _transaction_only,
    "abortTransaction": _transaction_only,
}
"""Command name to handler (commit and abort are driven by ``Engine`` itself)."""
