"""The native adapter's wrappers for ``AsyncMongoClient`` (the async flavour).

The sync twin ``native/sync_wrappers.py`` is generated from ``native/async_wrappers.py`` by
``scripts/unasync.py``: edit the async file, then run ``python scripts/unasync.py``.

:func:`lean_wrappers` builds what ``client._retry_internal``, ``_select_server`` and
``_process_response`` become on one client (a known signature of pymongo 4.17-4.20.1, see
``seams.NATIVE_RETRY_INTERNAL_SIGNATURES``); :func:`forwarding_wrappers` builds the
``_retry_internal`` and ``_select_server`` wrappers for other signatures.  The bookkeeping they
drive (``TrackedCycle``, ``LeanCycle``) is in :mod:`backpressure.adapters.native.cycles`,
the retry policy object in :mod:`backpressure.adapters.native`.
"""

from __future__ import annotations

from contextvars import Token
from typing import Any, Callable, Optional

from backpressure.adapters import seams
from backpressure.adapters.native.cycles import (
    InstallationView,
    LeanCycle,
    TrackedCycle,
)
from backpressure.core.cycle import SEND

# isort: split
# The flavour's own module (sync_cycle in the generated twin).
from backpressure.adapters.async_cycle import after_wait, carry_out, pause

__all__ = ["forwarding_wrappers", "lean_wrappers"]

steer = seams.steer


def lean_wrappers(installation: InstallationView, client: Any) -> dict[str, Callable[..., Any]]:
    """Build the instance-level wrappers of one client (the async flavour).

    The success path is the lean one (see ``native.LeanCycle``): per operation a three-item list
    (the server, the session, the operation) made current with ``ContextVar.set`` and
    ``reset``, per attempt one store of the selected server, per reply two key lookups, and a
    call of ``ClientState.count_first_attempt`` (its lock-free count, which is what
    ``AttemptCycle.succeeded`` does for a first-attempt success).  ``_retry_internal`` and
    ``_select_server`` take pymongo's exact parameters
    (``seams.NATIVE_RETRY_INTERNAL_SIGNATURES``, probed on install; ``_retry_internal`` takes
    the longest known one and passes on as many arguments as the client's own takes) and pass
    them on positionally, without building a tuple: forwarding ``*args, **kwargs`` cost more
    than everything else the wrappers do.
    A client with pacing (adaptive policy) takes the lean path too while none of its servers is
    paced (``PacingGate.engaged`` is False; its successes are counted for the pacing in
    batches, see ``ClientState.count_first_attempt``), and tracks every operation with a
    ``TrackedCycle`` (its ``AttemptCycle``) from its start while one is: the cycle answers
    at ``_select_server`` (send, or wait and ask again, or refuse: ``carry_out``),
    at our policy's ``backoff`` and at the end of ``_retry_internal``.  While the client has an
    operation listener (``ClientState.timed``: metrics are on) every operation is tracked too,
    so that its cycle times it; without one, that check is all the timing costs.  A failure is
    recorded while the operation is still current, a success after it stopped being current.
    ``_process_response`` sees every reply before pymongo builds an error from it: hostile
    fields are made harmless there (see ``seams.sanitize_reply``).

    One builder per wrapped method returns its closure (:func:`_lean_retry_internal`,
    :func:`_lean_select_server`, :func:`_lean_process_response`); what a closure reads per call
    is bound once, when it is built.
    """
    return {
        "_retry_internal": _lean_retry_internal(installation, client),
        "_select_server": _lean_select_server(installation, client),
        "_process_response": _lean_process_response(installation, client),
    }


def _lean_retry_internal(installation: InstallationView, client: Any) -> Callable[..., Any]:
    """Build the lean ``_retry_internal`` wrapper of one client (see :func:`lean_wrappers`)."""
    ref = installation.client_ref
    retry_internal = installation.delegate(client, "_retry_internal")
    current_get, current_set, current_reset = (
        installation.current.get,
        installation.current.set,
        installation.current.reset,
    )
    server_address = seams.server_address
    operation_class = TrackedCycle
    cell_class = LeanCycle
    # 11 arguments before pymongo 4.20.1 (no conn_mgr), 12 from it: the call below passes as
    # many as the client's own ``_retry_internal`` takes, the cell keeps all twelve.
    with_conn_mgr = installation.retry_arity > 11

    def finish_failed(exc: BaseException) -> None:
        """Account for the error the loop raised (the operation still current)."""
        value = current_get()
        if type(value) is cell_class:
            if value[0] is None:
                return  # no server was ever selected: nothing to account for
            value = installation.operation()
        if value is not None:
            value.raised(exc)

    async def _retry_internal(
        func: Any,
        session: Any,
        bulk: Any,
        operation: Any,
        is_read: bool = False,
        address: Any = None,
        read_pref: Any = None,
        retryable: bool = False,
        operation_id: Optional[int] = None,
        is_run_command: bool = False,
        is_aggregate_write: bool = False,
        conn_mgr: Any = None,
    ) -> Any:
        state = installation.state
        gate = state.gate
        if (gate is None or not gate.engaged) and not state.timed:
            cell: Any = [None, session, operation]
            token = current_set(cell)
        else:
            cell = None
            token = current_set(operation_class(installation, session, operation))
        try:
            if with_conn_mgr:
                result = await retry_internal(
                    ref(), func, session, bulk, operation, is_read, address, read_pref,
                    retryable, operation_id, is_run_command, is_aggregate_write, conn_mgr,
                )  # fmt: skip
            else:
                result = await retry_internal(
                    ref(), func, session, bulk, operation, is_read, address, read_pref,
                    retryable, operation_id, is_run_command, is_aggregate_write,
                )  # fmt: skip
        except BaseException as exc:
            try:
                finish_failed(exc)
            finally:
                current_reset(token)
            raise
        value = current_get()
        current_reset(token)
        if value is not cell:
            value.succeeded()
            return result
        # A first-attempt success without pacing: AttemptCycle.succeeded's first branch.
        state.count_first_attempt(cell[0], server_address)
        return result

    return _retry_internal


def _lean_select_server(installation: InstallationView, client: Any) -> Callable[..., Any]:
    """Build the lean ``_select_server`` wrapper of one client (see :func:`lean_wrappers`)."""
    ref = installation.client_ref
    select_server = installation.delegate(client, "_select_server")
    current_get, current_set = installation.current.get, installation.current.set
    active_states = seams.ACTIVE_TRANSACTION_STATES
    operation_class = TrackedCycle
    cell_class = LeanCycle

    async def _select_server(
        server_selector: Any,
        session: Any,
        operation: Any,
        address: Any = None,
        deprioritized_servers: Optional[list[Any]] = None,
        operation_id: Optional[int] = None,
    ) -> Any:
        value = current_get()
        fresh = type(value) is cell_class and value[0] is None
        if fresh and (session is None or session._transaction.state not in active_states):
            choice = installation.state.choice
            if choice is not None and choice.engaged:  # a server pushed back: steer around it
                deprioritized_servers = steer(
                    ref(), installation.state.avoid, server_selector, address,
                    deprioritized_servers,
                )  # fmt: skip
            value[0] = server = await select_server(
                ref(),
                server_selector,
                session,
                operation,
                address,
                deprioritized_servers,
                operation_id,
            )
            return server
        tracked: Optional[TrackedCycle]
        if fresh:  # the first attempt of a statement in a transaction: tracked from here
            tracked = cycle = operation_class(installation, value[1], value[2])
            current_set(cycle)  # the wrapper's ``reset`` still restores the outer value
            if not cycle.state.steers() and cycle.paced() is None:
                # _select_tracked's quiet path (a fresh cycle has no backoff to sleep), with
                # pymongo's arguments passed on as they came
                server = await select_server(
                    ref(), server_selector, session, operation, address,
                    deprioritized_servers, operation_id,
                )  # fmt: skip
                cycle.attempt_started(server)
                return server
        elif type(value) is not cell_class:
            tracked = value
        else:
            tracked = installation.operation()
        args = (server_selector, session, operation)
        kwargs = {
            "address": address,
            "deprioritized_servers": deprioritized_servers,
            "operation_id": operation_id,
        }
        if tracked is None:  # not within an operation of ours
            return await select_server(ref(), *args, **kwargs)
        return await _select_tracked(tracked, select_server, ref(), args, kwargs)

    return _select_server


def _lean_process_response(installation: InstallationView, client: Any) -> Callable[..., Any]:
    """Build the ``_process_response`` wrapper of one client (see :func:`lean_wrappers`)."""
    ref = installation.client_ref
    process_response = installation.delegate(client, "_process_response")
    current_get = installation.current.get
    operation_class = TrackedCycle
    dict_class = dict

    async def _process_response(reply: Any, session: Any) -> Any:
        if type(reply) is not dict_class or "errorLabels" in reply or "baseBackoffMS" in reply:
            seams.sanitize_reply(reply)
        value = current_get()
        if type(value) is operation_class and value.opens_transaction:
            value.reply_received(reply, session)
        return await process_response(ref(), reply, session)

    return _process_response


def forwarding_wrappers(
    installation: InstallationView, client: Any
) -> dict[str, Callable[..., Any]]:
    """``_retry_internal`` and ``_select_server`` wrappers for signatures not known to the seams.

    A pymongo release that adds a parameter to either method keeps working: these wrappers
    forward ``*args, **kwargs`` and track every operation with a ``TrackedCycle`` from its
    start (the path an adaptive client takes), at the cost of the lean success path.
    """
    ref = installation.client_ref
    retry_internal = installation.delegate(client, "_retry_internal")
    select_server = installation.delegate(client, "_select_server")
    current = installation.current

    def failed(token: Token[Any], exc: BaseException) -> None:
        try:
            current.get().raised(exc)
        finally:
            current.reset(token)

    def succeeded(token: Token[Any]) -> None:
        operation = current.get()
        current.reset(token)
        operation.succeeded()

    async def _retry_internal(*args: Any, **kwargs: Any) -> Any:
        session = seams.retry_internal_argument(args, kwargs, "session")
        operation = seams.retry_internal_argument(args, kwargs, "operation")
        token = current.set(TrackedCycle(installation, session, operation))
        try:
            result = await retry_internal(ref(), *args, **kwargs)
        except BaseException as exc:
            failed(token, exc)
            raise
        succeeded(token)
        return result

    async def _select_server(*args: Any, **kwargs: Any) -> Any:
        tracked = current.get()
        if type(tracked) is not TrackedCycle:
            return await select_server(ref(), *args, **kwargs)
        return await _select_tracked(tracked, select_server, ref(), args, kwargs)

    return {"_retry_internal": _retry_internal, "_select_server": _select_server}


async def _select_tracked(
    tracked: TrackedCycle,
    select_server: Callable[..., Any],
    client: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """Select the server of one tracked attempt, and carry out the attempt cycle's answer.

    A backoff left for the client's sleep hook is slept first; while a server pushes back or
    is paced the selection steers around it (``seams.steer``); while nothing is paced the
    server is sent to without asking, otherwise the cycle admits the attempt (send, or wait
    and ask again, or refuse).
    """
    if tracked.backoff:  # a backoff the client's sleep hook sleeps (see TrackedCycle)
        seconds, tracked.backoff = tracked.backoff, 0.0
        await pause(tracked.state, seconds)
    state = tracked.state
    if state.steers():  # a server pushes back or is paced: steer around it
        kwargs = {
            **kwargs,
            "deprioritized_servers": steer(
                client, state.avoid, args[0], kwargs["address"], kwargs["deprioritized_servers"]
            ),
        }
    if tracked.paced() is None:  # nothing is paced: send without asking
        server = await select_server(client, *args, **kwargs)
    else:

        def select() -> Any:
            return select_server(client, *args, **kwargs)

        server = await select()
        step = tracked.admit(server, seams.csot_deadline)
        if step is not SEND:
            await carry_out(tracked, step)
            server = await after_wait(tracked, server, select)
    tracked.attempt_started(server)
    return server
