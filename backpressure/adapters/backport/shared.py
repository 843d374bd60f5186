"""Flavour-independent pieces of the pymongo 4.9-4.16 backport.

Holds what the async module and its generated sync twin share: feature detection, the registry of
enabled clients (by topology id), the connection-error classification, the handshake flag, the
bookkeeping of method-level retries, the CSOT deadline query and the Motor attribute refresh.
Nothing here does I/O or sleeps.
"""

from __future__ import annotations

import contextvars
import inspect
import socket
import ssl
import sys
import threading
import weakref
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from pymongo.errors import AutoReconnect, ClientBulkWriteException, NetworkTimeout, PyMongoError
from pymongo.topology_description import TopologyDescription

from backpressure.adapters import seams
from backpressure.adapters.seams import csot_deadline, csot_expired
from backpressure.core.cycle import AttemptCycle
from backpressure.core.labels import add_overload_labels

__all__ = [
    "CLASSIC_DEPRIORITIZES_ALWAYS",
    "HANDSHAKE_FIELD",
    "HANDSHAKE_VALUE",
    "METHOD_ATTEMPT",
    "NATIVE_BACKPRESSURE",
    "NATIVE_REASON",
    "WRAPPED_MARK",
    "MethodAttempt",
    "bound_arguments",
    "command_name",
    "csot_deadline",
    "csot_expired",
    "disable_topology",
    "enable_topology",
    "error_to_check",
    "forget_client_bulk_error",
    "hello_cmd_with_flag",
    "is_application_pool",
    "is_sharded",
    "is_transaction_end",
    "label_connection_error",
    "pool_enabled",
    "read_retries_allowed",
    "refresh_motor",
    "replace_attribute",
    "topology_enabled",
    "write_retries_allowed",
]

NATIVE_BACKPRESSURE: bool = seams.HAS_NATIVE_BACKPRESSURE
"""True when the installed pymongo retries overload errors itself (>= 4.17)."""

NATIVE_REASON = "pymongo has native backpressure; the backport is not used"
"""Why the backport is not used on pymongo >= 4.17."""

CLASSIC_DEPRIORITIZES_ALWAYS: bool = (
    "deprioritized_servers" in inspect.signature(TopologyDescription.apply_selector).parameters
)
"""pymongo 4.16 deprioritizes the failed server on every classic retry, whatever the topology."""

HANDSHAKE_FIELD = "backpressure"
"""Field added to the first hello of application connections of enabled clients."""

HANDSHAKE_VALUE = "2"
"""Its value: the client backpressure spec revision, a string (handshake spec; as pymongo 4.18+)."""

WRAPPED_MARK = "__backpressure_wrapped__"
"""Attribute set on every class-level replacement; its value is the replaced function."""

_TRANSACTION_ENDS = frozenset({"commitTransaction", "abortTransaction"})

# Enabled clients by topology id (one per client, stable across topology rebuilds: a
# ``mongodb+srv`` client of pymongo 4.11+ builds new settings with the same id once it resolves
# its SRV record).  The values are the clients, held weakly: a client dropped without disable
# leaves nothing.
_ENABLED_TOPOLOGIES: weakref.WeakValueDictionary[Any, Any] = weakref.WeakValueDictionary()
_REGISTRY_LOCK = threading.Lock()


def enable_topology(client: Any) -> None:
    """Mark ``client`` (a pymongo client) as enabled for the class-level hooks."""
    with _REGISTRY_LOCK:
        _ENABLED_TOPOLOGIES[client._topology_settings._topology_id] = client


def disable_topology(client: Any) -> None:
    """Make the class-level hooks inert again for ``client``."""
    with _REGISTRY_LOCK:
        _ENABLED_TOPOLOGIES.pop(client._topology_settings._topology_id, None)


def topology_enabled(topology_id: Any) -> bool:
    """Return True if the client owning ``topology_id`` is enabled."""
    return topology_id in _ENABLED_TOPOLOGIES


def is_application_pool(pool: Any) -> bool:
    """Return True for a connection pool of application connections (not a monitor's pool)."""
    if hasattr(pool, "is_sdam"):  # pymongo >= 4.13
        return not pool.is_sdam
    return bool(getattr(pool, "handshake", True))  # pymongo 4.9-4.12


def pool_enabled(pool: Any) -> bool:
    """Return True if ``pool`` holds application connections of an enabled client."""
    return is_application_pool(pool) and topology_enabled(getattr(pool, "_client_id", None))


def _is_overload_cause(cause: Optional[BaseException]) -> bool:
    """Return False for causes that are configuration problems, not overload (DNS, TLS, certs)."""
    if isinstance(cause, socket.gaierror):
        return False
    if isinstance(cause, (ssl.SSLEOFError, ssl.SSLZeroReturnError)):
        return True  # the server may hang up in the middle of the TLS handshake
    return not isinstance(cause, (ssl.SSLError, ssl.CertificateError))


def label_connection_error(pool: Any, error: BaseException) -> None:
    """Label a network error or timeout from opening an application connection as an overload.

    Only errors of exactly ``AutoReconnect`` or ``NetworkTimeout`` are labelled (what the server's
    connection rate limiter causes), never DNS, certificate or TLS configuration errors.
    """
    if type(error) not in (AutoReconnect, NetworkTimeout) or not pool_enabled(pool):
        return
    if _is_overload_cause(error.__cause__):
        add_overload_labels(error)


def hello_cmd_with_flag(original: Callable[[Any], dict[str, Any]]) -> Callable[[Any], Any]:
    """Wrap ``Connection.hello_cmd``: flag the handshake of connections of enabled clients."""

    def hello_cmd(self: Any) -> dict[str, Any]:
        cmd = original(self)
        if not self.performed_handshake:
            pool = self.pool_ref()
            if pool is not None and pool_enabled(pool):
                cmd[HANDSHAKE_FIELD] = HANDSHAKE_VALUE
        return cmd

    hello_cmd.__name__ = "hello_cmd"
    hello_cmd.__qualname__ = getattr(original, "__qualname__", "hello_cmd")
    hello_cmd.__doc__ = original.__doc__
    setattr(hello_cmd, WRAPPED_MARK, original)
    return hello_cmd


def replace_attribute(owner: type, name: str, factory: Callable[[Any], Any]) -> bool:
    """Replace ``owner.name`` by ``factory(original)`` once; return True if it was replaced now."""
    current = owner.__dict__.get(name)
    if current is None or getattr(current, WRAPPED_MARK, None) is not None:
        return False
    replacement = factory(current)
    setattr(replacement, WRAPPED_MARK, current)
    setattr(owner, name, replacement)
    return True


def error_to_check(exc: PyMongoError) -> PyMongoError:
    """Return the error whose labels decide a retry (the top-level error of a client bulk)."""
    if isinstance(exc, ClientBulkWriteException) and isinstance(exc.error, PyMongoError):
        return exc.error
    return exc


def forget_client_bulk_error(func: Callable[..., Any], exc: PyMongoError) -> None:
    """Undo the merge of a retried top-level error into a client bulk write's result.

    Before 4.17 ``_ClientBulk._execute_command`` merges a top-level error that is not one of
    pymongo's retryable errors into the operation's ``full_result`` before raising, so a
    successful overload retry would still raise it.  ``full_result`` is a closure variable of
    the callback (``retryable_bulk``); its ``error`` is cleared when it is the retried error.
    """
    if not isinstance(exc, ClientBulkWriteException):
        return
    full_result = seams.closure_value(func, "full_result")
    if isinstance(full_result, MutableMapping) and full_result.get("error") is exc.error:
        full_result["error"] = None


def is_transaction_end(operation: str) -> bool:
    """Return True for commitTransaction and abortTransaction."""
    return operation in _TRANSACTION_ENDS


def read_retries_allowed(client: Any, operation: str, retryable: bool, session: Any) -> bool:
    """Whether the client options let a read be retried on overload.

    Reads need retryReads; an aggregate with $out/$merge (a read that is not retryable although
    retryReads is on and no transaction runs) needs retryWrites as well.
    """
    options = client.options
    if not options.retry_reads:
        return False
    in_transaction = bool(session is not None and session.in_transaction)
    if operation == "aggregate" and not retryable and not in_transaction:
        return bool(options.retry_writes)
    return True


def write_retries_allowed(client: Any, operation: str) -> bool:
    """Whether the client options let a write be retried on overload (commit/abort always)."""
    return is_transaction_end(operation) or bool(client.options.retry_writes)


def is_sharded(client: Any) -> bool:
    """Return True if the client's topology is a sharded cluster."""
    return bool(client.topology_description.topology_type_name == "Sharded")


@dataclass
class MethodAttempt:
    """State of a method-level retry, shared with the client's ``_select_server`` override."""

    cycle: AttemptCycle
    """The operation's attempt cycle: the override admits each attempt at its selection."""
    deprioritized: list[Any] = field(default_factory=list)
    """Servers to avoid on the next selection."""
    server: Any = None
    """The server selected (and admitted) for the current attempt, if any."""
    refused: bool = False
    """The pacing refused the current attempt at its selection (the cycle accounted for it)."""


METHOD_ATTEMPT: contextvars.ContextVar[Optional[MethodAttempt]] = contextvars.ContextVar(
    "backpressure_method_attempt", default=None
)
"""Set while a method-level retry runs; nested wrapped methods then run without retrying."""


def bound_arguments(
    signature: inspect.Signature, args: tuple[Any, ...], kwargs: Any
) -> Mapping[str, Any]:
    """Return a call's arguments bound to ``signature`` (self included); {} if it cannot bind."""
    try:
        return signature.bind_partial(*args, **kwargs).arguments
    except TypeError:
        return {}


def command_name(default: str, arguments: Mapping[str, Any]) -> str:
    """Return the name of the command passed to ``Database.command`` (first key), or ``default``.

    ``arguments`` are the call's :func:`bound_arguments`.
    """
    command = arguments.get("command")
    if isinstance(command, str):
        return command
    if isinstance(command, Mapping):
        for key in command:
            return str(key)
    return default


def refresh_motor(names_by_class: Mapping[type, frozenset[str]]) -> int:
    """Rebuild Motor attributes that captured a pymongo method before it was wrapped.

    Motor copies public pymongo methods into its classes when they are built, so wrappers
    installed after ``import motor`` are invisible to those attributes. Returns how many
    attributes were rebuilt; does nothing if Motor was not imported.
    """
    metaprogramming = sys.modules.get("motor.metaprogramming")
    if metaprogramming is None:
        return 0
    factory_type = metaprogramming.Async
    rebuilt = 0
    for motor_class in list(metaprogramming._class_cache.values()):
        delegate = getattr(motor_class, "__delegate_class__", None)
        names = names_by_class.get(delegate) if delegate is not None else None
        if not names:
            continue
        for base in reversed(inspect.getmro(motor_class)):
            for attr_name, attr in list(vars(base).items()):
                if not isinstance(attr, factory_type):
                    continue
                target = getattr(attr, "attr_name", None) or attr_name
                if target in names:
                    setattr(motor_class, attr_name, attr.create_attribute(motor_class, attr_name))
                    rebuilt += 1
    return rebuilt
