"""The public switch: ``enable``/``disable`` for existing clients, and what an enabled one reports.

``enable`` works on a ``pymongo.MongoClient``, a ``pymongo.AsyncMongoClient`` or a Motor
``AsyncIOMotorClient`` (on its sync ``delegate``), per client: other clients in the process are
unaffected.  It installs the adapter that fits the client: the native adapter
(:mod:`backpressure.adapters.native`) when pymongo has its own overload retry loop (4.17+), else the
backport (:mod:`backpressure.adapters.backport`, pymongo 4.9-4.16).

The client classes (:mod:`backpressure.switch.classes`) enable the clients they build.

``policy(client)`` returns the policy an enabled client retries with; each ``enable`` logs one
INFO line on the ``backpressure`` logger naming the client and that policy.
"""

from __future__ import annotations

import dataclasses
import logging
import random as _random
import time
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Optional, TypeVar, Union

import pymongo
from pymongo.errors import InvalidOperation

from backpressure.adapters import hedging, seams
from backpressure.core.adaptive import pacers_for
from backpressure.core.budget import Budget
from backpressure.core.client_state import STATE_ATTRIBUTE, ClientState
from backpressure.core.decision import RetryController
from backpressure.core.events import InvalidListenerError, check_listener
from backpressure.core.policy import Policy, resolve_policy
from backpressure.core.stats import BackpressureStats
from backpressure.switch import registry
from backpressure.switch.overrides import current_settings
from backpressure.switch.uri_options import (
    apply_overrides,
)

if TYPE_CHECKING:
    pass

__all__ = [
    "budget",
    "disable",
    "enable",
    "is_enabled",
    "policy",
    "state",
    "stats",
]

LOGGER = logging.getLogger("backpressure")
"""Where ``enable`` reports each client it enables (one INFO line per call)."""

C = TypeVar("C")
PolicySetting = Union[bool, str, Policy, None]
"""What ``enable`` and the ``backpressure`` option accept."""


def _pymongo_client(client: Any) -> Any:
    """Return the pymongo client behind ``client`` (Motor's ``delegate``), or raise TypeError."""
    delegate = getattr(client, "delegate", None)
    if isinstance(delegate, pymongo.MongoClient):
        return delegate
    if isinstance(client, pymongo.MongoClient) or seams.is_async_client(client):
        return client
    raise TypeError(
        "backpressure works with pymongo.MongoClient, pymongo.AsyncMongoClient and "
        f"motor's AsyncIOMotorClient, not {type(client).__name__}"
    )


def validate_listeners(listeners: object, option: str = "listeners") -> tuple[Any, ...]:
    """Return ``listeners`` as a tuple after checking that each one is a listener.

    The rule is ``backpressure.register``'s (:func:`backpressure.core.events.check_listener`):
    a listener implements at least one method of ``RetryListener`` (``retried``, ``gave_up``),
    ``OperationListener`` (``operation_finished``), ``PacingListener`` (``waited``,
    ``refused``) or ``HedgeListener`` (``hedged``).

    Raises:
        InvalidListenerError: ``listeners`` is not a list or tuple, or an item is no listener
            (the message names the option, the item and the accepted methods).
    """
    if not isinstance(listeners, (list, tuple)):
        raise InvalidListenerError(
            f"{option} must be a list or tuple of listeners, got {type(listeners).__name__} "
            f"{listeners!r}"
        )
    for index, listener in enumerate(listeners):
        check_listener(listener, f"{option}[{index}]")
    return tuple(listeners)


def _adapter(target: Any) -> ModuleType:
    """Return the adapter module for ``target``: native (pymongo 4.17+) or the backport."""
    if seams.client_has_native_backpressure(target):
        from backpressure.adapters import native

        return native
    try:
        from backpressure.adapters import backport as _backport
    except ImportError as exc:  # pragma: no cover - the backport ships with the package
        raise RuntimeError(
            "backpressure: pymongo "
            + ".".join(map(str, seams.PYMONGO_VERSION))
            + " has no native overload retries and the backport (backpressure.adapters.backport) "
            "could not be imported"
        ) from exc
    return _backport


def enable(
    client: C,
    policy: PolicySetting = True,
    *,
    listeners: Sequence[object] = (),
    random: Optional[Callable[[], float]] = None,
) -> C:
    """Make ``client`` retry overload errors with ``policy``; return ``client``.

    Enabling an enabled client replaces its policy, budget and listeners.  ``policy`` False or
    None disables it.

    The application's own ``maxAdaptiveRetries`` and ``enableOverloadRetargeting`` (given to a
    pymongo >= 4.17 client in its URI or keywords) beat the policy's ``max_retries`` and
    ``retarget``, as they do for the client classes.  Each call logs one INFO line on the
    ``backpressure`` logger naming the client and the policy.

    Args:
        client: a ``pymongo.MongoClient``, ``pymongo.AsyncMongoClient`` or Motor
            ``AsyncIOMotorClient``.
        policy: True (the default preset, "current"), a preset name ("adaptive", "draft",
            "current") or a Policy.
        listeners: objects implementing at least one listener method (``retried``,
            ``gave_up``, ``operation_finished``, ``waited``, ``refused``, ``hedged``; the rule
            of ``backpressure.register``); they get their events after the listeners
            registered with ``backpressure.register``.
        random: jitter source in [0, 1) (tests pin it); defaults to ``random.random``, looked up
            at each draw as pymongo does, so ``unittest.mock.patch("random.random")`` reaches it.

    Raises:
        InvalidPolicyError: ``policy`` is not a valid setting, or ``listeners`` is not a list
            or tuple of listeners (then an ``InvalidListenerError``, from
            ``backpressure.core.events``, which is also a ``TypeError``).
        TypeError: ``client`` is not a supported client.
        pymongo.errors.InvalidOperation: ``client`` is closed.
        UnsupportedPymongoError: a pymongo internal the adapter needs does not match (the
            message names the pymongo version and the seam); the client is left untouched.
    """
    resolved = resolve_policy(policy)
    if resolved is None:
        return disable(client)
    checked = validate_listeners(listeners)
    target = _pymongo_client(client)
    if _is_closed(target):
        raise InvalidOperation(
            f"Cannot enable backpressure on a closed {type(client).__name__}: create a new client"
        )
    # The application's own maxAdaptiveRetries / enableOverloadRetargeting beat the preset, as
    # they do for the client classes.
    resolved = apply_overrides(resolved, seams.explicit_overload_options(target))
    controller = RetryController(
        resolved,
        random=_module_random if random is None else random,
        pacing=pacers_for(resolved),
    )
    new_state = ClientState(
        controller,
        (*registry.registered_listeners(), *checked),
        settings=current_settings,
        label=_client_label(target),
    )
    _install(target, new_state)
    LOGGER.info(
        "backpressure enabled on %s(%s) with policy %s",
        type(client).__name__,
        new_state.label,
        resolved.describe(),
    )
    return client


def _install(target: Any, new_state: ClientState) -> None:
    """Put ``new_state`` on the pymongo client ``target`` through its era's adapter."""
    adapter = _adapter(target)
    # Every seam is probed before anything is changed: a mismatch leaves the client untouched.
    seams.guard(target, adapter.seam_problems(target))
    hedging.uninstall(target)  # hedging wraps the adapter's methods: off while they change
    adapter.install(target, new_state)
    hedging.install(target, new_state)  # a no-op unless the policy sets hedge_delay
    setattr(target, STATE_ATTRIBUTE, new_state)
    registry.track(target, new_state)


def set_timing(
    client: Any,
    *,
    clock: Optional[Callable[[], float]] = None,
    sleep: Optional[Callable[[float], Any]] = None,
) -> None:
    """Run an enabled client's pacing, server choice and hedging on ``clock`` and its sleeps on
    ``sleep`` (a private hook for tests).

    The client starts afresh (new budget, pacing and statistics; same policy, listeners and
    jitter source) with its adaptive pacing, server choice and hedged reads' schedule on
    ``clock`` (a monotonic clock; None: ``time.monotonic``), and every local wait, backoff and
    wait for a hedge slept with ``sleep`` (of the client's flavour: a coroutine function for an
    async client; None: ``time.sleep`` or ``asyncio.sleep``).  On pymongo >= 4.17, whose own
    loop sleeps a backoff with ``time.sleep`` or ``asyncio.sleep``, a client with a ``sleep``
    hands pymongo a delay of 0 and sleeps the backoff with ``sleep`` at its next server
    selection instead.  Deadlines (CSOT) stay on pymongo's clock, ``time.monotonic``, and so
    does the retry rules' clock.

    Raises:
        InvalidOperation: ``client`` is not enabled.
    """
    current = state(client)
    if current is None:
        raise InvalidOperation("set_timing needs a client with backpressure enabled")
    old = current.controller
    policy = old.policy
    controller = RetryController(
        policy,
        random=old.random,
        pacing=pacers_for(policy, clock=time.monotonic if clock is None else clock),
    )
    new_state = dataclasses.replace(current, controller=controller, sleep=sleep)
    if clock is not None:
        new_state.clock = clock
        new_state.choice = new_state.server_choice(clock)
    _install(_pymongo_client(client), new_state)


def _is_closed(target: Any) -> bool:
    """Whether the pymongo client ``target`` was closed (pymongo 4.9+ set ``_closed``)."""
    return getattr(target, "_closed", False) is True


def _module_random() -> float:
    """Draw from ``random.random`` as found at this call (pymongo's jitter draws the same way)."""
    return _random.random()


def _client_label(target: Any) -> str:
    """Name a client for metrics: its seed list ``host:port,...`` (sorted)."""
    seeds = getattr(getattr(target, "_topology_settings", None), "seeds", None) or ()
    try:
        return ",".join(sorted(f"{host}:{port}" for host, port in seeds)) or "client"
    except (TypeError, ValueError):
        return "client"


def disable(client: C) -> C:
    """Give ``client`` back its stock retry behaviour (no-op when not enabled); return it."""
    target = _pymongo_client(client)
    if getattr(target, STATE_ATTRIBUTE, None) is None:
        return client
    hedging.uninstall(target)
    _adapter(target).uninstall(target)
    vars(target).pop(STATE_ATTRIBUTE, None)
    registry.untrack(target)
    return client


def state(client: Any) -> Optional[ClientState]:
    """Return the backpressure state of ``client``, or None when it is not enabled."""
    value = getattr(_pymongo_client(client), STATE_ATTRIBUTE, None)
    return value if isinstance(value, ClientState) else None


def is_enabled(client: Any) -> bool:
    """Return True if backpressure is enabled on ``client``."""
    return state(client) is not None


def policy(client: Any) -> Policy:
    """Return the policy ``client`` retries overload errors with.

    That is the preset or Policy it was enabled with, after its ``maxAdaptiveRetries``,
    ``enableOverloadRetargeting``, ``hedgeDelayMS`` and ``maxHedges`` options.
    ``policy(client).describe()`` names it and its key fields in one line.

    Raises:
        ValueError: ``client`` is not enabled.
        TypeError: ``client`` is not a supported client.
    """
    current = state(client)
    if current is None:
        raise ValueError(
            f"backpressure is not enabled on this {type(client).__name__}, so it has no policy; "
            "enable it with backpressure.enable(client) or create it with backpressure.MongoClient"
        )
    return current.policy


def stats(client: Any) -> BackpressureStats:
    """Return a frozen snapshot of ``client``'s retry statistics since it was enabled.

    Raises:
        ValueError: ``client`` is not enabled.
        TypeError: ``client`` is not a supported client.
    """
    current = state(client)
    if current is None:
        raise ValueError("backpressure is not enabled on this client: it has no statistics")
    return current.snapshot()


def budget(client: Any) -> Optional[Budget]:
    """Return the retry budget (token bucket) of ``client``, or None when not enabled."""
    current = state(client)
    return None if current is None else current.controller.budget
