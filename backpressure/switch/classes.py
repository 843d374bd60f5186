"""The client classes: ``MongoClient``, ``AsyncMongoClient`` and (built when first asked for,
so that importing this module never imports Motor) ``AsyncIOMotorClient``.

Each accepts every pymongo argument plus ``backpressure`` (``True``, ``False``, ``"draft"``,
``"current"``, ``"adaptive"`` or a :class:`~backpressure.Policy`), ``backpressure_listeners``,
``maxAdaptiveRetries``, ``enableOverloadRetargeting``, ``hedgeDelayMS`` and ``maxHedges``; all
but the listeners are also read from the connection string (see
:mod:`backpressure.switch.uri_options`).  The constructor takes our options out, builds the
pymongo client and enables it (:func:`backpressure.switch.client.enable`); with
``backpressure=False`` it is a stock pymongo client.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional, TypeVar, Union

import pymongo

from backpressure.adapters import seams
from backpressure.core.extras import require
from backpressure.core.policy import Policy, resolve_policy
from backpressure.switch.client import PolicySetting, enable, validate_listeners
from backpressure.switch.uri_options import (
    BACKPRESSURE,
    ENABLE_OVERLOAD_RETARGETING,
    MAX_ADAPTIVE_RETRIES,
    apply_overrides,
    parse_backpressure_options,
    split_backpressure_kwargs,
    validate_option,
    warn_inert_options,
)

if TYPE_CHECKING:
    from bson.codec_options import TypeRegistry

__all__ = ["AsyncMongoClient", "MongoClient", "motor_client_class"]

_DocumentType = TypeVar("_DocumentType", bound="Mapping[str, Any]")


class _Unset:
    """Marker for "argument not given"."""

    def __repr__(self) -> str:
        """Show the marker."""
        return "<unset>"


_UNSET: Any = _Unset()


@dataclass(frozen=True)
class _Prepared:
    """Constructor arguments with our options taken out."""

    host: Any
    kwargs: dict[str, Any]
    policy: Optional[Policy]
    listeners: tuple[object, ...]


def _clean_host(host: Any) -> tuple[Any, dict[str, Any]]:
    """Take our options out of ``host`` (a URI or a list of URIs/hosts)."""
    if isinstance(host, str):
        return parse_backpressure_options(host)
    if isinstance(host, (list, tuple)):
        options: dict[str, Any] = {}
        cleaned: list[Any] = []
        for item in host:
            if isinstance(item, str):
                item, found = parse_backpressure_options(item)
                options.update(found)
            cleaned.append(item)
        return type(host)(cleaned), options
    return host, {}


def _prepare(
    host: Any,
    kwargs: dict[str, Any],
    setting: Any,
    listeners: Sequence[object],
    *,
    is_async: bool,
) -> _Prepared:
    """Resolve our options (kwargs over URI) and build pymongo's arguments.

    Raises:
        InvalidPolicyError: an invalid keyword value.
    """
    host, uri_options = _clean_host(host)
    rest, kw_options = split_backpressure_kwargs(kwargs)
    options = {**uri_options, **kw_options}
    if setting is not _UNSET:
        options[BACKPRESSURE] = validate_option(BACKPRESSURE, setting)
    switch = options.get(BACKPRESSURE, True)
    policy = resolve_policy(switch)
    if policy is not None:
        policy = apply_overrides(policy, options)
        warn_inert_options(policy, options)
    checked = validate_listeners(listeners, "backpressure_listeners")
    if seams.HAS_NATIVE_BACKPRESSURE:
        # pymongo's own options: the user's values stay the client's "original" ones.
        for name in (MAX_ADAPTIVE_RETRIES, ENABLE_OVERLOAD_RETARGETING):
            if name in options:
                rest[name] = options[name]
    elif policy is not None:
        from backpressure.adapters import backport as _backport

        rest.update(_backport.client_kwargs(is_async=is_async))
    return _Prepared(host, rest, policy, checked)


def _construct(
    client: Any,
    base_init: Callable[..., None],
    host: Any,
    positional: tuple[Any, ...],
    kwargs: dict[str, Any],
    setting: Any,
    listeners: Sequence[object],
    *,
    is_async: bool,
    close_on_failure: bool,
    motor: bool = False,
) -> None:
    """Build ``client``: the base constructor with our options taken out, then ``enable``.

    ``base_init`` is the base class's bound ``__init__`` (``super().__init__``); ``positional``
    are the arguments that follow ``host``.  With ``close_on_failure`` a failing ``enable``
    closes the client before the error propagates (the sync clients, whose ``close`` is not a
    coroutine).  ``connect=True`` opens the topology after ``enable`` (``motor``: the client's
    sync ``delegate``); async clients never open it in their constructor.

    Raises:
        InvalidPolicyError: an invalid keyword value.
    """
    prepared = _prepare(host, kwargs, setting, listeners, is_async=is_async)
    if prepared.policy is None:
        base_init(prepared.host, *positional, **prepared.kwargs)
        return
    # The topology opens only once the client is enabled: a pool filling to minPoolSize, or a
    # monitor, must never meet the server before the hooks know the client is ours.
    hold = seams.TopologyOpenDeferral()
    with hold.held(client, motor=motor):
        base_init(prepared.host, *positional, **prepared.kwargs)
    try:
        enable(client, prepared.policy, listeners=prepared.listeners)
    except BaseException:
        if close_on_failure:
            client.close()
        raise
    hold.open_if_requested(client.delegate if motor else client)


class MongoClient(pymongo.MongoClient[_DocumentType]):
    """``pymongo.MongoClient`` with overload-aware retries (on unless ``backpressure=False``)."""

    def __init__(
        self,
        host: Optional[Union[str, Sequence[str]]] = None,
        port: Optional[int] = None,
        document_class: Optional[type[_DocumentType]] = None,
        tz_aware: Optional[bool] = None,
        connect: Optional[bool] = None,
        type_registry: Optional[TypeRegistry] = None,
        *,
        backpressure: PolicySetting = _UNSET,
        backpressure_listeners: Sequence[object] = (),
        **kwargs: Any,
    ) -> None:
        """Create a client; arguments as ``pymongo.MongoClient`` plus our options.

        Raises:
            InvalidPolicyError: an invalid ``backpressure``, ``maxAdaptiveRetries`` or
                ``enableOverloadRetargeting`` keyword value.
        """
        _construct(
            self,
            super().__init__,
            host,
            (port, document_class, tz_aware, connect, type_registry),
            kwargs,
            backpressure,
            backpressure_listeners,
            is_async=False,
            close_on_failure=True,
        )


class AsyncMongoClient(pymongo.AsyncMongoClient[_DocumentType]):
    """``pymongo.AsyncMongoClient`` with overload-aware retries (on unless disabled)."""

    def __init__(
        self,
        host: Optional[Union[str, Sequence[str]]] = None,
        port: Optional[int] = None,
        document_class: Optional[type[_DocumentType]] = None,
        tz_aware: Optional[bool] = None,
        connect: Optional[bool] = None,
        type_registry: Optional[TypeRegistry] = None,
        *,
        backpressure: PolicySetting = _UNSET,
        backpressure_listeners: Sequence[object] = (),
        **kwargs: Any,
    ) -> None:
        """Create a client; arguments as ``pymongo.AsyncMongoClient`` plus our options.

        Raises:
            InvalidPolicyError: an invalid ``backpressure``, ``maxAdaptiveRetries`` or
                ``enableOverloadRetargeting`` keyword value.
        """
        _construct(
            self,
            super().__init__,
            host,
            (port, document_class, tz_aware, connect, type_registry),
            kwargs,
            backpressure,
            backpressure_listeners,
            is_async=True,
            close_on_failure=False,
        )


_MOTOR_CLIENT: Optional[type] = None
_MOTOR_CLIENT_LOCK = threading.Lock()


def motor_client_class() -> type:
    """Return ``backpressure.AsyncIOMotorClient`` (imports Motor on first use).

    Built once even when threads ask at the same time, so ``isinstance`` checks hold.
    """
    global _MOTOR_CLIENT
    if _MOTOR_CLIENT is None:
        with _MOTOR_CLIENT_LOCK:
            if _MOTOR_CLIENT is None:
                _MOTOR_CLIENT = _build_motor_client_class()
    return _MOTOR_CLIENT


def _build_motor_client_class() -> type:
    """Define the ``AsyncIOMotorClient`` subclass (imports Motor)."""
    motor_asyncio = require("motor.motor_asyncio", "motor", "backpressure.AsyncIOMotorClient")
    base: Any = motor_asyncio.AsyncIOMotorClient

    class AsyncIOMotorClient(base):  # type: ignore[misc]
        """Motor's ``AsyncIOMotorClient`` with overload-aware retries on its sync delegate."""

        def __init__(
            self,
            *args: Any,
            backpressure: PolicySetting = _UNSET,
            backpressure_listeners: Sequence[object] = (),
            **kwargs: Any,
        ) -> None:
            """Create a client; arguments as Motor's plus our options."""
            host = kwargs.pop("host", args[0] if args else None)
            _construct(
                self,
                super().__init__,
                host,
                args[1:],
                kwargs,
                backpressure,
                backpressure_listeners,
                is_async=False,
                close_on_failure=True,
                motor=True,
            )

    AsyncIOMotorClient.__module__ = __name__
    return AsyncIOMotorClient


def __getattr__(name: str) -> Any:
    """Build ``AsyncIOMotorClient`` lazily so that importing this module never imports Motor."""
    if name == "AsyncIOMotorClient":
        return motor_client_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
