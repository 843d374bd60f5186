"""Transaction fix-ups: the session's transaction state, its pinned mongos and its commit
attempt counter (``ClientSession._transaction``)."""

from __future__ import annotations

import sys
from typing import Any, Optional

from backpressure.adapters.seams.versions import _import

# -- transactions (``ClientSession._transaction``) -----------------------------------------------


def _transaction_states(session: Any) -> Any:
    """Return pymongo's ``_TxnState`` namespace from the module defining the session's class."""
    for cls in type(session).__mro__:
        states = getattr(sys.modules.get(cls.__module__), "_TxnState", None)
        if states is not None:
            return states
    raise TypeError(f"{type(session).__name__} is not a pymongo ClientSession")


def _transaction_state_values(*names: str) -> frozenset[Any]:
    """pymongo's ``_TxnState`` values ``names`` of both flavours (probed on install)."""
    found: set[Any] = set()
    for flavour in ("synchronous", "asynchronous"):
        states = getattr(_import(f"pymongo.{flavour}.client_session"), "_TxnState", None)
        for name in names:
            if hasattr(states, name):
                found.add(getattr(states, name))
    return frozenset(found)


ACTIVE_TRANSACTION_STATES = _transaction_state_values("STARTING", "IN_PROGRESS")
"""``ClientSession._transaction.state`` values of a session in a transaction (for hot paths)."""

STARTING_TRANSACTION_STATES = _transaction_state_values("STARTING")
"""``ClientSession._transaction.state`` values of a transaction that sent no command yet."""


def outside_transaction(session: Any) -> bool:
    """Return True unless ``session`` is in a transaction (the success path's one check).

    The same answer as ``not session.in_transaction`` without its two calls.
    """
    return session is None or session._transaction.state not in ACTIVE_TRANSACTION_STATES


def transaction_starting(session: Any) -> bool:
    """Return True if ``session`` is in a transaction that has not sent a command yet."""
    return not outside_transaction(session) and bool(session._transaction.starting())


def restart_transaction(session: Any) -> None:
    """Move a transaction whose first command failed back to STARTING (startTransaction again)."""
    transaction = session._transaction
    transaction.state = _transaction_states(session).STARTING
    transaction.attempt = 0


def resume_transaction(session: Any) -> None:
    """Undo a revert to STARTING: the server already began the transaction (no second start)."""
    if session is None or not session.in_transaction:
        return
    transaction = session._transaction
    if transaction.starting():
        transaction.state = _transaction_states(session).IN_PROGRESS
    if hasattr(transaction, "has_completed_command"):  # pymongo >= 4.17
        transaction.has_completed_command = True


def pinned_address(session: Any) -> Optional[tuple[str, int]]:
    """The mongos address a transaction is pinned to, or None (no transaction, not pinned, or
    pinned to a load balancer connection, which cannot be pinned again by address)."""
    if session is None:
        return None
    transaction = session._transaction
    if transaction.state not in ACTIVE_TRANSACTION_STATES:  # outside_transaction, written out
        return None
    if getattr(transaction, "conn_mgr", None) is not None:
        return None
    address = transaction.pinned_address
    return address if isinstance(address, tuple) else None


def repin(session: Any, address: tuple[str, int]) -> None:
    """Pin the session's transaction to ``address`` again after pymongo unpinned it."""
    if session is not None and session.in_transaction:
        session._transaction.pinned_address = address


def commit_attempt(session: Any) -> int:
    """Return the session's commitTransaction attempt counter (> 1 upgrades the write concern)."""
    return int(session._transaction.attempt)


def set_commit_attempt(session: Any, attempt: int) -> None:
    """Set the session's commitTransaction attempt counter (see :func:`commit_attempt`)."""
    session._transaction.attempt = attempt
