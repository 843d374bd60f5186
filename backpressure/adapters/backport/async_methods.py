"""Overload retries for the methods that bypass ``_retry_internal`` before pymongo 4.17
(runCommand and DDL), for ``AsyncMongoClient`` (the async flavour).

They get class-level wrappers, inert unless the client is enabled, that re-run the whole method
on overload (``_AsyncMethodRetry``).  The client's ``_select_server`` is overridden on the
instance to deprioritize servers for them.

The sync twin ``sync_methods.py`` is generated from ``async_methods.py`` by ``scripts/unasync.py``:
edit the async file, then run ``python scripts/unasync.py``.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Optional

from pymongo import _csot
from pymongo.errors import (
    PyMongoError,
)

from backpressure.adapters import seams
from backpressure.adapters.backport import shared as _shared
from backpressure.core.client_state import STATE_ATTRIBUTE, ClientState
from backpressure.core.cycle import AttemptCycle, Stop
from backpressure.core.events import retry_summary

# isort: split
# The flavour's own modules (sync_cycle and pymongo.synchronous in the generated twin).
from pymongo.asynchronous import mongo_client as _mongo_client
from pymongo.asynchronous.collection import AsyncCollection as _Collection
from pymongo.asynchronous.database import AsyncDatabase as _Database

from backpressure.adapters.async_cycle import pause

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
    """Instance override of ``_select_server``: deprioritization for method-level retries."""
    attempt = _shared.METHOD_ATTEMPT.get()
    if attempt is None or deprioritized_servers is not None:
        return await type(self)._select_server(
            self, server_selector, session, operation, address, deprioritized_servers,
            operation_id,
        )  # fmt: skip
    if attempt.deprioritized:
        seams.keep_candidate_servers(self)  # the filter steers this selection only
    server = await type(self)._select_server(
        self, server_selector, session, operation, address, attempt.deprioritized or None,
        operation_id,
    )  # fmt: skip
    if attempt.server is None:
        attempt.server = server
    return server


class _AsyncMethodRetry:
    """Retries one call of a method that bypasses ``_retry_internal`` (runCommand, DDL)."""

    def __init__(self, client: Any, state: ClientState, name: str, run_command: bool) -> None:
        """Prepare the bookkeeping for one call of the method."""
        self._client = client
        self._state = state
        self._run_command = run_command
        self._cycle = AttemptCycle(state, name)

    def _retries_allowed(self) -> bool:
        """runCommand needs retryReads and retryWrites; DDL needs retryWrites."""
        if not self._state.policy.respect_retry_options:
            return True
        options = self._client.options
        if self._run_command:
            return bool(options.retry_reads and options.retry_writes)
        return bool(options.retry_writes)

    async def run(self, method: Callable[..., Any], args: tuple[Any, ...], kwargs: Any) -> Any:
        """Call ``method`` until it succeeds or the core says to give up."""
        attempt = _shared.MethodAttempt()
        token = _shared.METHOD_ATTEMPT.set(attempt)
        try:
            while True:
                attempt.server = None
                try:
                    result = await method(*args, **kwargs)
                except PyMongoError as exc:
                    cycle = self._cycle
                    record = cycle.record()
                    record.attempt_started(attempt.address())
                    if retry_summary(exc) is not None:
                        # An inner retry loop already decided about this error.
                        record.controller.record_failure(exc, retried=record.retries > 0)
                        raise
                    step = cycle.step(
                        exc,
                        record.failed(
                            exc,
                            deadline=_shared.csot_deadline(),
                            retries_allowed=self._retries_allowed(),
                        ),
                    )
                    if isinstance(step, Stop):
                        raise
                    if attempt.server is not None and (
                        step.retarget or _shared.is_sharded(self._client)
                    ):
                        attempt.deprioritized.append(attempt.server)
                    await pause(self._state, step.seconds)
                    continue
                self._cycle.record().attempt_started(attempt.address())
                self._cycle.record().succeeded()
                return result
        finally:
            _shared.METHOD_ATTEMPT.reset(token)


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
            label = _shared.command_name(name, arguments)
            retry = _AsyncMethodRetry(client, state, label, run_command)
            timeout = getattr(self, "_timeout", None)
            if _csot.get_timeout() is None and timeout is not None:
                # One client-side timeout for all attempts, as _csot.apply gives pymongo's loop.
                with _csot._TimeoutContext(timeout):
                    return await retry.run(original, (self, *args), kwargs)
            return await retry.run(original, (self, *args), kwargs)

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
