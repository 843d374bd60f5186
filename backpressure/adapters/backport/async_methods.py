"""Overload retries for the methods that bypass ``_retry_internal`` before pymongo 4.17
(runCommand and DDL), for ``AsyncMongoClient`` (the async flavour).

They get class-level wrappers, inert unless the client is enabled, that re-run the whole method
on overload, driven by the operation's attempt cycle.  The client's ``_select_server`` is
overridden on the instance: an attempt's selection deprioritizes the servers a retry avoids,
and the cycle admits the attempt there, where its server is known (wait, or raise the pacing's
refusal).

The sync twin ``sync_methods.py`` is generated from ``async_methods.py`` by ``scripts/unasync.py``:
edit the async file, then run ``python scripts/unasync.py``.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from typing import Any, Callable, Optional

from pymongo import _csot
from pymongo.errors import (
    PyMongoError,
)

from backpressure.adapters import seams
from backpressure.adapters.backport import shared as _shared
from backpressure.core.adaptive import LocalOverloadError
from backpressure.core.client_state import STATE_ATTRIBUTE, ClientState
from backpressure.core.cycle import SEND, AttemptCycle, Stop
from backpressure.core.events import retry_summary

# isort: split
# The flavour's own modules (sync_cycle and pymongo.synchronous in the generated twin).
from pymongo.asynchronous import mongo_client as _mongo_client
from pymongo.asynchronous.collection import AsyncCollection as _Collection
from pymongo.asynchronous.database import AsyncDatabase as _Database

from backpressure.adapters.async_cycle import after_wait, carry_out, pause

__all__ = []

# pymongo >= 4.17 moved some of these names; the backport only runs on 4.9-4.16.
_CLIENT_MODULE: Any = _mongo_client
_CLIENT_CLASS: Any = _CLIENT_MODULE.AsyncMongoClient


async def _select_server(
    self: Any,
    server_selector: Any,
    session: Any,
    operation: str,
    address: Any = None,
    deprioritized_servers: Optional[list[Any]] = None,
    operation_id: Optional[int] = None,
) -> Any:
    """Instance override of ``_select_server``: a method-level attempt's selection avoids the
    deprioritized servers, and its first selection is admitted by the attempt cycle."""
    attempt = _shared.METHOD_ATTEMPT.get()
    if attempt is None or deprioritized_servers is not None:
        return await type(self)._select_server(
            self, server_selector, session, operation, address, deprioritized_servers,
            operation_id,
        )  # fmt: skip
    deprioritized = attempt.deprioritized or None
    if deprioritized:
        seams.keep_candidate_servers(self)  # the filter steers this selection only

    def select() -> Any:
        return type(self)._select_server(
            self, server_selector, session, operation, address, deprioritized, operation_id
        )

    server = await select()
    if attempt.server is not None:  # a later selection of the same attempt
        return server
    cycle = attempt.cycle
    if cycle.paced() is not None:  # a server is paced: the pacing admits (else send at once)
        step = cycle.admit(server, _shared.csot_deadline)
        if step is not SEND:
            try:
                await carry_out(cycle, step)
                server = await after_wait(cycle, server, select)
            except LocalOverloadError:
                attempt.refused = True
                raise
    attempt.server = server
    cycle.started(server)
    return server


def _retries_allowed(client: Any, state: ClientState, run_command: bool) -> bool:
    """runCommand needs retryReads and retryWrites; DDL needs retryWrites."""
    if not state.policy.respect_retry_options:
        return True
    options = client.options
    if run_command:
        return bool(options.retry_reads and options.retry_writes)
    return bool(options.retry_writes)


def _owning_client(owner_kind: str, target: Any) -> Any:
    """Return the client of a client, database or collection object."""
    if owner_kind == "client":
        return target
    if owner_kind == "database":
        return target.client
    return target.database.client


def _method_with_retries(
    owner_kind: str, name: str, run_command: bool
) -> Callable[[Any], Callable[..., Any]]:
    """Build the factory wrapping one bypassing method with gated overload retries."""

    def factory(original: Any) -> Callable[..., Any]:
        signature = inspect.signature(original)

        @functools.wraps(original)
        async def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            client = _owning_client(owner_kind, self)
            state: Optional[ClientState] = getattr(client, STATE_ATTRIBUTE, None)
            if state is None or _shared.METHOD_ATTEMPT.get() is not None:
                return await original(self, *args, **kwargs)
            arguments = _shared.bound_arguments(signature, (self, *args), kwargs)
            session = arguments.get("session")
            if session is not None and session.in_transaction:
                return await original(self, *args, **kwargs)
            cycle = AttemptCycle(
                state, _shared.command_name(name, arguments), address_of=seams.server_address
            )
            attempt = _shared.MethodAttempt(cycle)
            timeout = getattr(self, "_timeout", None)
            scope: Any = contextlib.nullcontext()
            if _csot.get_timeout() is None and timeout is not None:
                # One client-side timeout for all attempts, as _csot.apply gives pymongo's loop.
                scope = _csot._TimeoutContext(timeout)
            token = _shared.METHOD_ATTEMPT.set(attempt)
            try:
                with scope:
                    while True:  # each pass is one attempt: the selection admits it
                        attempt.server = None
                        try:
                            result = await original(self, *args, **kwargs)
                        except PyMongoError as exc:
                            if attempt.refused:  # the cycle has accounted for the refusal
                                raise
                            if attempt.server is None:  # failed before a server was selected
                                cycle.started(None)
                            if retry_summary(exc) is not None:
                                cycle.decided_inside(exc)  # an inner retry loop decided
                                raise
                            step = cycle.failed(
                                exc,
                                deadline=_shared.csot_deadline(),
                                retries_allowed=_retries_allowed(client, state, run_command),
                            )
                            if isinstance(step, Stop):
                                raise
                            if attempt.server is not None and (
                                step.retarget or _shared.is_sharded(client)
                            ):
                                attempt.deprioritized.append(attempt.server)
                            await pause(state, step.seconds)
                            continue
                        if attempt.server is None:  # no server was selected
                            cycle.started(None)
                        cycle.succeeded()
                        return result
            finally:
                _shared.METHOD_ATTEMPT.reset(token)

        return method

    return factory


# (owner class, kind, method name, operation name, is runCommand)
_BYPASSING_METHODS: tuple[tuple[type, str, str, str, bool], ...] = (
    (_Database, "database", "command", "command", True),
    (_Database, "database", "cursor_command", "command", True),
    (_Database, "database", "_drop_helper", "drop", False),
    (_Collection, "collection", "_create_helper", "create", False),
    (_Collection, "collection", "_create_indexes", "createIndexes", False),
    (_Collection, "collection", "_drop_index", "dropIndexes", False),
    (_Collection, "collection", "_create_search_indexes", "createSearchIndexes", False),
    (_Collection, "collection", "drop_search_index", "dropSearchIndex", False),
    (_Collection, "collection", "update_search_index", "updateSearchIndex", False),
    (_Collection, "collection", "rename", "renameCollection", False),
    (_CLIENT_CLASS, "client", "drop_database", "dropDatabase", False),
)


def public_wrapped_names() -> dict[type, frozenset[str]]:
    """Return the public method names wrapped per pymongo class (for the Motor refresh)."""
    names: dict[type, set[str]] = {}
    for owner, _kind, method_name, _name, _run_command in _BYPASSING_METHODS:
        if not method_name.startswith("_"):
            names.setdefault(owner, set()).add(method_name)
    return {owner: frozenset(found) for owner, found in names.items()}
