"""Adapter for pymongo >= 4.17: our policy drives pymongo's own overload retry loop.

Theory of operation.  pymongo >= 4.17 retries overload errors itself in
``_ClientConnectionRetryable.run()``: for an overloaded failure it calls
``client._retry_policy.backoff(...)`` then ``should_retry(attempt, delay)`` and sleeps.  We never
add a second loop around it (that would take a new txnNumber per outer try).  Instead, per
client:

* ``client._retry_policy`` is replaced by a :class:`NativeRetryHook`.  pymongo calls its
  ``backoff(attempt[, base_backoff])`` inside the ``except`` block that caught the error, without
  the error: ``seams.handled_error()`` reads it there, and ``backoff`` hands it to the
  operation's attempt cycle (``TrackedCycle.decide`` -> ``AttemptCycle.failed``).  The
  answer travels back in the delay ``backoff`` returns, which pymongo passes unchanged to
  ``should_retry(attempt, delay)``: a granted retry's delay is a :class:`GrantedDelay`, and
  ``should_retry`` is true for that type only (nothing is stashed between the two calls).  The
  core's attempt ledger counts every failed attempt of the operation, classic ones included, so
  the exponent and the attempt cap follow our policy whatever number pymongo passes in.
  ``should_retry`` is ``async def`` only where the loop awaits it (4.17 async).
* ``client._retry_internal`` is wrapped on the instance (a pass-through around the original,
  ``@_csot.apply`` included): it makes the operation current in a context variable of the
  installation (thread- and task-local), records success (token deposits, statistics) and
  attaches the retry summary to the raised error.  Until something other than a first-attempt
  success outside a transaction happens, the operation is only a three-item list (the lean
  path, see ``operation.LeanCycle``); it is then promoted to a ``TrackedCycle`` (an
  ``AttemptCycle``) with the same history, whose record (``CycleRecord``) is created only
  when the core must decide something.  The wrappers are in ``async_wrappers`` (and its
  generated sync twin), the operation's bookkeeping in ``operation``.
* ``client._select_server`` is wrapped on the instance: the cycle admits each attempt there
  (send now, or wait locally and ask again, or refuse) and records its server.
  An attempt that started while the previous one never reached our policy means pymongo retried
  a classic (non-overload) error; such a failed retry refunds a token as the spec asks.
* ``client.options.max_adaptive_retries`` and ``enable_overload_retargeting`` are set to the
  policy's ``max_retries`` and ``retarget`` (pymongo re-reads them on every retry: the first
  bounds classic retries that follow an overload, the second drives deprioritization).

:func:`uninstall` puts back the original policy object, option values and instance attributes.
On pymongo 4.17 the handshake flag of an enabled client's connections is sent as ``"2"``
(``handshake``).
"""

from __future__ import annotations

import contextvars
import types
import weakref
from typing import Any, Callable, Optional

from backpressure.adapters import seams
from backpressure.adapters.native import async_wrappers, handshake, sync_wrappers
from backpressure.adapters.native.cycles import LeanCycle, TrackedCycle
from backpressure.core.client_state import ClientState
from backpressure.core.cycle import AttemptCycle, Backoff

__all__ = [
    "GrantedDelay",
    "NativeRetryHook",
    "install",
    "installed_state",
    "seam_problems",
    "uninstall",
    "wrapper_flavour",
]

_INSTALLATION_ATTR = "_backpressure_native"
_WRAPPED = ("_retry_internal", "_select_server", "_process_response")
_ABSENT = object()


class GrantedDelay(float):
    """The delay of a retry our policy granted, as :meth:`NativeRetryHook.backoff` returns it.

    pymongo (4.17-4.20.1) hands the value ``backoff`` returned to ``should_retry`` unchanged, so
    the decision travels with it: ``should_retry`` is true for this type only.  A plain float
    (a refusal, or a delay pymongo would have rebuilt) is refused: a change in that convention
    stops retries instead of granting them.
    """

    __slots__ = ()


class NativeRetryHook:
    """Stands in for pymongo's ``_RetryPolicy`` on one client; decisions come from the cycle.

    ``backoff(attempt, base_backoff=None)`` accepts both the 4.17 and the 4.18+ calling
    convention.  It asks the attempt cycle of the operation opened by our ``_retry_internal``
    wrapper (outside one: ``AttemptCycle.failed_alone``, with pymongo's attempt number) and
    returns the delay, a :class:`GrantedDelay` for a granted retry; ``should_retry`` reads the
    decision from the delay pymongo passes back.
    """

    def __init__(self, installation: NativeInstallation) -> None:
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

    def backoff(self, attempt: int, base_backoff: Optional[float] = None) -> float:
        """Return the delay before retry ``attempt`` of the overload error being handled: a
        :class:`GrantedDelay` when the retry is granted, else ``0.0``.

        pymongo does not pass the error: ``seams.handled_error()`` reads it.  ``attempt`` is
        used only outside an operation of ours (within one, the cycle's ledger numbers the
        retry from the whole history).  ``base_backoff`` (pymongo's reading of the server hint)
        is not used: the core reads the hint from the error itself and ignores values that are
        not sane numbers.
        """
        error = seams.handled_error()
        if error is None:  # not called while an error is handled: nothing to retry
            return 0.0
        operation = self._installation.operation()
        if operation is not None:
            delay = operation.decide(error)
        else:  # outside our wrapper: the cycle's answer about a lone failure
            state = self.state
            deadline, now = seams.csot_deadline_and_now(state.controller.clock)
            step = AttemptCycle.failed_alone(
                state,
                error,
                retry_number=attempt,
                deadline=deadline,
                now=now,
                classic_retryable=True,
            )
            delay = step.seconds if type(step) is Backoff else None
        return 0.0 if delay is None else GrantedDelay(delay)

    def __repr__(self) -> str:
        """Show the policy in force."""
        return f"{type(self).__name__}({self.state.policy!r})"


class _PlainRetryHook(NativeRetryHook):
    """The flavour for loops that call ``should_retry`` plainly (sync, and async from 4.18)."""

    def should_retry(self, attempt: int, delay: float) -> bool:
        """Return True to retry after ``delay`` seconds: ``backoff`` granted it (see
        :class:`GrantedDelay`)."""
        return type(delay) is GrantedDelay


class _AwaitedRetryHook(NativeRetryHook):
    """The flavour for the pymongo 4.17 async loop, which awaits ``should_retry``."""

    async def should_retry(self, attempt: int, delay: float) -> bool:
        """Return True to retry after ``delay`` seconds: ``backoff`` granted it (see
        :class:`GrantedDelay`)."""
        return type(delay) is GrantedDelay


class NativeInstallation:
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
            _AwaitedRetryHook
            if seams.should_retry_is_awaited(self.original_policy)
            else _PlainRetryHook
        )
        self.policy: NativeRetryHook = policy_class(self)
        self.current: contextvars.ContextVar[Any] = contextvars.ContextVar(
            "backpressure_native_operation", default=None
        )
        """The operation of this client running in the context: a ``LeanCycle``, an
        ``TrackedCycle`` or None."""
        self.signature: Optional[str] = seams.native_signature(client)
        """The known ``_retry_internal`` signature (``seams.NATIVE_RETRY_INTERNAL_SIGNATURES``'s
        key) the positional wrappers serve; None: the forwarding wrappers are installed."""
        self.retry_arity = seams.retry_internal_arity(client)
        """How many arguments the client's ``_retry_internal`` takes (``self`` left out)."""
        flavour = async_wrappers if seams.is_async_client(client) else sync_wrappers
        self.wrappers: dict[str, Callable[..., Any]] = flavour.lean_wrappers(self, client)
        if self.signature is None:
            self.wrappers.update(flavour.forwarding_wrappers(self, client))

    def operation(self) -> Optional[TrackedCycle]:
        """Return the current operation of this client, promoting a lean one (None: none)."""
        value = self.current.get()
        if type(value) is LeanCycle:
            value = TrackedCycle.promoted(self, value)
            self.current.set(value)  # the wrapper's ``reset`` still restores the outer value
        return value  # type: ignore[no-any-return]

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


def seam_problems(client: Any) -> list[str]:
    """Return the pymongo seams this adapter needs that ``client`` does not match (none: fine)."""
    return seams.native_problems(client)


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
    if not isinstance(installation, NativeInstallation):
        installation = NativeInstallation(client, state)
        setattr(client, _INSTALLATION_ATTR, installation)
    installation.state = state
    installation.apply(client)
    handshake.enable(client)  # pymongo 4.17: "2" in the handshake, as 4.18+


def uninstall(client: Any) -> None:
    """Restore the client's own retry policy, option values and methods (no-op if not installed)."""
    installation = vars(client).pop(_INSTALLATION_ATTR, None)
    if isinstance(installation, NativeInstallation):
        installation.restore(client)
        handshake.disable(client)


def installed_state(client: Any) -> Optional[ClientState]:
    """Return the state installed on ``client`` by this adapter, or None."""
    installation = vars(client).get(_INSTALLATION_ATTR)
    return installation.state if isinstance(installation, NativeInstallation) else None


def wrapper_flavour(client: Any) -> Optional[str]:
    """Name the wrappers the native adapter installed on ``client`` (None: not installed).

    ``"positional (4.20.1)"``: the lean wrappers for that known ``_retry_internal`` signature;
    ``"forwarding"``: the wrappers that forward ``*args, **kwargs`` (an unknown signature).
    """
    installation = vars(client).get(_INSTALLATION_ATTR)
    if installation is None:
        return None
    signature = installation.signature
    return "forwarding" if signature is None else f"positional ({signature})"
