"""Adapter for pymongo >= 4.17: our policy drives pymongo's own overload retry loop.

Theory of operation.  pymongo >= 4.17 retries overload errors itself in
``_ClientConnectionRetryable.run()``: for an overloaded failure it calls
``client._retry_policy.backoff(...)`` then ``should_retry(attempt, delay)`` and sleeps.  We never
add a second loop around it (that would take a new txnNumber per outer try).  Instead, per
client:

* ``client._retry_policy`` is replaced by a :class:`NativeRetryPolicy`.  Its ``backoff`` asks
  the shared core (``OperationRetries.failed``) about the error being handled (``sys.exc_info()``:
  the loop calls it inside its ``except`` block) and returns the core's delay; ``should_retry``
  returns that same decision.  The core counts only the overload retries it granted, so the
  exponent and the attempt limit follow our policy whatever number pymongo passes in.
  ``should_retry`` is ``async def`` only where the loop awaits it (4.17 async).
* ``client._retry_internal`` is wrapped on the instance (a pass-through around the original,
  ``@_csot.apply`` included): it makes the operation current in a context variable (thread- and
  task-local), records success (token deposits) and attaches the retry summary to the raised
  error.  The operation's ``OperationRetries`` is created only once something other than a
  first-attempt success happens, so the success path costs a few attribute reads.
* ``client._select_server`` is wrapped on the instance to record the server of each attempt.
  An attempt that started while the previous one never reached our policy means pymongo retried
  a classic (non-overload) error; such a failed retry refunds a token as the spec asks.
* ``client.options.max_adaptive_retries`` and ``enable_overload_retargeting`` are set to the
  policy's ``max_retries`` and ``retarget`` (pymongo re-reads them on every retry: the first
  bounds classic retries that follow an overload, the second drives deprioritization).

:func:`uninstall` puts back the original policy object, option values and instance attributes.
"""

from __future__ import annotations

import contextvars
import dataclasses
import random as _random
import sys
import time
import types
import weakref
from typing import Any, Callable, Optional

from backpressure.adapters import seams
from backpressure.core.backoff import backoff_delay
from backpressure.core.client_state import ClientState
from backpressure.core.decision import Decision, Retry, StopReason
from backpressure.core.events import attach_summary
from backpressure.core.labels import has_no_writes_performed
from backpressure.core.operation import OperationRetries

__all__ = ["NativeRetryPolicy", "install", "installed_state", "uninstall"]

_INSTALLATION_ATTR = "_backpressure_native"
_WRAPPED = ("_retry_internal", "_select_server")
_ABSENT = object()


_NOT_SELECTED = object()


class _Operation:
    """The retry bookkeeping of one call of the native loop on one client.

    The success path is kept cheap: the ``OperationRetries`` (and the operation name and server
    address it needs) is created only when something other than a first-attempt success
    happens: a failure reaching our policy, a second server selection (pymongo retried an error)
    or an error raised by the loop.  Until then only the first selected server is remembered.
    """

    __slots__ = (
        "args",
        "attempt_open",
        "decision",
        "first",
        "installation",
        "kwargs",
        "retries",
        "state",
    )

    def __init__(
        self, installation: _Installation, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        """Track one ``_retry_internal(*args, **kwargs)`` call on ``installation``'s client."""
        self.installation = installation
        self.state = installation.state
        self.args = args
        self.kwargs = kwargs
        self.retries: Optional[OperationRetries] = None
        self.first: Any = _NOT_SELECTED
        self.attempt_open = False
        self.decision: Optional[Decision] = None

    def tracked(self) -> OperationRetries:
        """Return the operation's ``OperationRetries``, creating it on first need."""
        retries = self.retries
        if retries is None:
            retries = self.state.new_operation(_operation_name(self.args, self.kwargs))
            if self.first is not _NOT_SELECTED:
                retries.attempt_started(_address(self.first))
                self.first = _NOT_SELECTED
            self.retries = retries
        return retries

    def attempt_started(self, server: Any) -> None:
        """Record an attempt; settle the previous one if pymongo retried it classically."""
        retries = self.retries
        if retries is None:
            if self.first is _NOT_SELECTED:
                self.first = server  # the first attempt: nothing else to do yet
                self.attempt_open = True
                return
            retries = self.tracked()
        if self.attempt_open and retries.retries > 0:
            # The previous attempt was a retry that failed without reaching our policy: an error
            # without the overload label.  The spec refunds one token for that.
            retries.controller.budget.record_non_overload_failure()
        retries.attempt_started(_address(server))
        self.attempt_open = True

    def decide(self, error: BaseException) -> float:
        """Ask the core about an overload failure; return the delay (0 when giving up)."""
        self.attempt_open = False
        deadline = seams.csot_deadline()
        now = time.monotonic() if deadline is not None else None
        decision = self.tracked().failed(error, deadline=deadline, now=now)
        self.decision = decision
        return decision.sleep_seconds if isinstance(decision, Retry) else 0.0

    def take_decision(self) -> Optional[Decision]:
        """Return and forget the decision made by the last ``decide``."""
        decision, self.decision = self.decision, None
        return decision

    def succeeded(self) -> None:
        """Record success (deposits tokens)."""
        self.attempt_open = False
        retries = self.retries
        if retries is None:
            # A first-attempt success: a deposit and a cached finished event.
            first = self.first
            self.state.first_attempt_succeeded(None if first is _NOT_SELECTED else _address(first))
        else:
            retries.succeeded()

    def failed(self, exc: BaseException) -> None:
        """Account for the error the loop raised and attach the retry summary to it."""
        if not isinstance(exc, Exception):
            return  # cancellation: nothing to account for
        if self.retries is None and self.first is _NOT_SELECTED:
            return  # no server was ever selected: nothing to account for
        retries = self.tracked()
        if retries.attempts == 0:
            return
        actual: BaseException = exc
        cause = exc.__cause__
        if cause is not None and has_no_writes_performed(cause):
            actual = cause  # pymongo re-raised the earlier error ``from`` this attempt's error
        if self.attempt_open:
            # The last attempt's error never reached our policy: pymongo refused to retry it
            # (not an overload error, or retryReads/retryWrites off).  The core records the
            # failure, logs and notifies when relevant; retries_allowed=False takes no token.
            self.attempt_open = False
            retries.failed(actual, retries_allowed=False)
        summary = retries.summary()
        if summary.stop_reason is None:
            reason = StopReason.DEADLINE if seams.csot_expired() else StopReason.NOT_RETRYABLE
            summary = dataclasses.replace(summary, stop_reason=reason)
        attach_summary(exc, summary)
        retries.ended()


_CURRENT: contextvars.ContextVar[Optional[_Operation]] = contextvars.ContextVar(
    "backpressure_native_operation", default=None
)


class NativeRetryPolicy:
    """Stands in for pymongo's ``_RetryPolicy`` on one client; decisions come from the core.

    ``backoff(attempt, base_backoff=None)`` accepts both the 4.17 and the 4.18+ calling
    convention; the numbers pymongo passes are used only outside an operation opened by our
    ``_retry_internal`` wrapper (a fallback that applies the policy statelessly).
    """

    def __init__(self, installation: _Installation) -> None:
        """Serve the client of ``installation``."""
        self._installation = installation

    @property
    def state(self) -> ClientState:
        """The client state whose policy this object applies."""
        return self._installation.state

    @property
    def attempts(self) -> int:
        """Overload retries allowed after the first attempt (pymongo's name)."""
        return self.state.policy.max_retries

    @property
    def backoff_initial(self) -> float:
        """Backoff base in seconds (pymongo's name)."""
        return self.state.policy.base_backoff

    @property
    def backoff_max(self) -> float:
        """Backoff ceiling in seconds (pymongo's name)."""
        return self.state.policy.max_backoff

    def _operation(self) -> Optional[_Operation]:
        """Return the operation of this client running in the current context, if any."""
        operation = _CURRENT.get()
        if operation is None or operation.installation is not self._installation:
            return None
        return operation

    def backoff(self, attempt: int, base_backoff: Optional[float] = None) -> float:
        """Return the delay before retry ``attempt`` of the overload error being handled."""
        operation = self._operation()
        error = sys.exc_info()[1]
        if operation is not None and error is not None:
            return operation.decide(error)
        policy = self.state.policy
        hint = base_backoff if base_backoff is not None and base_backoff >= 0 else None
        return backoff_delay(policy, max(attempt, 1), _random.random(), hint)

    def _should_retry(self, attempt: int, delay: float) -> bool:
        """Return the decision taken by ``backoff`` (or apply the policy statelessly)."""
        operation = self._operation()
        decision = operation.take_decision() if operation is not None else None
        if decision is not None:
            return isinstance(decision, Retry)
        if attempt > self.state.policy.max_retries:
            return False
        deadline = seams.csot_deadline()
        if deadline is not None and time.monotonic() + delay > deadline:
            return False
        return self.state.controller.budget.try_acquire()

    def __repr__(self) -> str:
        """Show the policy in force."""
        return f"{type(self).__name__}({self.state.policy!r})"


class _PlainRetryPolicy(NativeRetryPolicy):
    """The flavour for loops that call ``should_retry`` plainly (sync, and async from 4.18)."""

    def should_retry(self, attempt: int, delay: float) -> bool:
        """Return True to retry after ``delay`` seconds."""
        return self._should_retry(attempt, delay)


class _AwaitedRetryPolicy(NativeRetryPolicy):
    """The flavour for the pymongo 4.17 async loop, which awaits ``should_retry``."""

    async def should_retry(self, attempt: int, delay: float) -> bool:
        """Return True to retry after ``delay`` seconds."""
        return self._should_retry(attempt, delay)


def _operation_name(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """Return the ``operation`` argument of a ``_retry_internal`` call."""
    name = kwargs.get("operation", args[3] if len(args) > 3 else None)
    name = getattr(name, "value", name)  # pymongo's _Op is a str Enum
    return str(name) if name is not None else "unknown"


def _address(server: Any) -> Optional[tuple[str, int]]:
    """Return the (host, port) of a pymongo Server, or None."""
    address = getattr(getattr(server, "description", None), "address", None)
    if isinstance(address, tuple) and len(address) == 2:
        return (str(address[0]), int(address[1]))
    return None


class _Installation:
    """What :func:`install` changed on one client, and the wrappers it put there."""

    def __init__(self, client: Any, state: ClientState) -> None:
        """Take over ``client`` for ``state``; remember everything to put back."""
        self.state = state
        self.client_ref = weakref.ref(client)
        self.original_policy: Any = client._retry_policy
        options = client.options
        self.original_options = tuple(getattr(options, attr) for attr in seams.OPTION_ATTRIBUTES)
        self.prior: dict[str, Any] = {name: vars(client).get(name, _ABSENT) for name in _WRAPPED}
        policy_class = (
            _AwaitedRetryPolicy
            if seams.should_retry_is_awaited(self.original_policy)
            else _PlainRetryPolicy
        )
        self.policy: NativeRetryPolicy = policy_class(self)
        make = _async_wrappers if seams.is_async_client(client) else _sync_wrappers
        # A future pymongo without one of these methods still gets the policy object (which
        # then applies the policy statelessly); only wrap what exists.
        self.wrappers: dict[str, Callable[..., Any]] = {
            name: wrapper
            for name, wrapper in make(self, client).items()
            if callable(getattr(type(client), name, None))
        }

    def delegate(self, client: Any, name: str) -> Callable[..., Any]:
        """Return what our wrapper of ``name`` calls, as ``delegate(client, *args, **kwargs)``.

        Resolved once, when the wrappers are built: the method found on the instance before
        install (a plain callable), else the class's function (called with the client first).
        The client itself is not captured (the wrappers live on it): they pass it in.
        """
        prior = self.prior[name]
        if prior is not _ABSENT:

            def call_prior(_client: Any, *args: Any, **kwargs: Any) -> Any:
                return prior(*args, **kwargs)

            return call_prior
        function = getattr(type(client), name)
        if isinstance(function, types.FunctionType):
            return function

        def call_bound(client: Any, *args: Any, **kwargs: Any) -> Any:
            return getattr(type(client), name).__get__(client, type(client))(*args, **kwargs)

        return call_bound  # pragma: no cover - pymongo's methods are plain functions

    def apply(self, client: Any) -> None:
        """Put our policy object, option values and wrappers on ``client``."""
        policy = self.state.policy
        options = client.options
        max_attr, retarget_attr = seams.OPTION_ATTRIBUTES
        setattr(options, max_attr, policy.max_retries)
        setattr(options, retarget_attr, policy.retarget)
        client._retry_policy = self.policy
        for name, wrapper in self.wrappers.items():
            setattr(client, name, wrapper)

    def restore(self, client: Any) -> None:
        """Put back what :meth:`apply` replaced."""
        client._retry_policy = self.original_policy
        for attr, value in zip(seams.OPTION_ATTRIBUTES, self.original_options):
            setattr(client.options, attr, value)
        for name in self.wrappers:
            prior = self.prior[name]
            if prior is _ABSENT:
                vars(client).pop(name, None)
            else:
                setattr(client, name, prior)


def _sync_wrappers(installation: _Installation, client: Any) -> dict[str, Callable[..., Any]]:
    """Build the instance-level wrappers for a sync client.

    The success path is kept to a few attribute reads: the delegates are resolved here, the
    operation is made current with a plain ``ContextVar.set``/``reset`` (no context manager),
    and its bookkeeping stays lazy (see :class:`_Operation`).  A failure is recorded while the
    operation is still current, a success after it stopped being current.
    """
    ref = installation.client_ref
    retry_internal = installation.delegate(client, "_retry_internal")
    select_server = installation.delegate(client, "_select_server")
    current_get, current_set, current_reset = _CURRENT.get, _CURRENT.set, _CURRENT.reset

    def _retry_internal(*args: Any, **kwargs: Any) -> Any:
        operation = _Operation(installation, args, kwargs)
        token = current_set(operation)
        try:
            result = retry_internal(ref(), *args, **kwargs)
        except BaseException as exc:
            operation.failed(exc)
            raise
        finally:
            current_reset(token)
        operation.succeeded()
        return result

    def _select_server(*args: Any, **kwargs: Any) -> Any:
        server = select_server(ref(), *args, **kwargs)
        operation = current_get()
        if operation is not None and operation.installation is installation:
            operation.attempt_started(server)
        return server

    return {"_retry_internal": _retry_internal, "_select_server": _select_server}


def _async_wrappers(installation: _Installation, client: Any) -> dict[str, Callable[..., Any]]:
    """Build the instance-level wrappers for an AsyncMongoClient (as ``_sync_wrappers``)."""
    ref = installation.client_ref
    retry_internal = installation.delegate(client, "_retry_internal")
    select_server = installation.delegate(client, "_select_server")
    current_get, current_set, current_reset = _CURRENT.get, _CURRENT.set, _CURRENT.reset

    async def _retry_internal(*args: Any, **kwargs: Any) -> Any:
        operation = _Operation(installation, args, kwargs)
        token = current_set(operation)
        try:
            result = await retry_internal(ref(), *args, **kwargs)
        except BaseException as exc:
            operation.failed(exc)
            raise
        finally:
            current_reset(token)
        operation.succeeded()
        return result

    async def _select_server(*args: Any, **kwargs: Any) -> Any:
        server = await select_server(ref(), *args, **kwargs)
        operation = current_get()
        if operation is not None and operation.installation is installation:
            operation.attempt_started(server)
        return server

    return {"_retry_internal": _retry_internal, "_select_server": _select_server}


def install(client: Any, state: ClientState) -> None:
    """Make ``client`` (a pymongo >= 4.17 sync or async client) retry overload with ``state``.

    Installing again replaces the state (policy, budget, listeners); the originals remembered
    the first time are kept for :func:`uninstall`.

    Raises:
        TypeError: the client has no native backpressure loop.
    """
    if not seams.client_has_native_backpressure(client):
        raise TypeError(f"{type(client).__name__} has no native backpressure retry loop")
    installation = vars(client).get(_INSTALLATION_ATTR)
    if not isinstance(installation, _Installation):
        installation = _Installation(client, state)
        setattr(client, _INSTALLATION_ATTR, installation)
    installation.state = state
    installation.apply(client)


def uninstall(client: Any) -> None:
    """Restore the client's own retry policy, option values and methods (no-op if not installed)."""
    installation = vars(client).pop(_INSTALLATION_ATTR, None)
    if isinstance(installation, _Installation):
        installation.restore(client)


def installed_state(client: Any) -> Optional[ClientState]:
    """Return the state installed on ``client`` by this adapter, or None."""
    installation = vars(client).get(_INSTALLATION_ATTR)
    return installation.state if isinstance(installation, _Installation) else None
