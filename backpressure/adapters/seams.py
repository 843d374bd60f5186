"""Feature detection of the installed pymongo: which retry machinery and calling conventions exist.

Everything here is detected from pymongo's code (attributes, signatures), never from version
strings, so an unknown future release is classified by what it actually offers.  Per-client
checks (:func:`client_has_native_backpressure`, :func:`should_retry_is_awaited`) look at the
client object itself and are what the adapters use; the module-level flags describe the
installed pymongo and are what tests gate on.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import warnings
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import Any, Callable, Optional

import pymongo
import pymongo.common
from pymongo import _csot
from pymongo.read_preferences import Primary
from pymongo.server_selectors import writable_server_selector
from pymongo.topology_description import TOPOLOGY_TYPE, TopologyDescription

from backpressure.core.labels import valid_milliseconds

PRIVATE_NAMES: Mapping[str, str] = {
    # Both adapters.
    "MongoClient._retry_internal": "the retry loop every retryable operation passes through "
    "(4.20.1 added conn_mgr: a pinned cursor's connection)",
    "MongoClient._select_server": "server selection of each attempt (wrapped per instance)",
    "MongoClient._retry_policy": "the native loop's policy object (native: replaced)",
    "MongoClient._get_topology": "the constructor's topology open, held until enable",
    "AgnosticClient.__delegate_class__": "Motor builds its sync delegate from it",
    "ClientSession._transaction": "transaction state: state, attempt, pinned_address, conn_mgr",
    "client_session._TxnState": "transaction states STARTING / IN_PROGRESS",
    "client_session._Transaction.starting": "whether the transaction sent no command yet",
    "_Transaction.has_completed_command": "pymongo >= 4.17: first command completed",
    "_csot.get_timeout/get_deadline/remaining": "the CSOT deadline",
    "ClientOptions._ClientOptions__max_adaptive_retries": "native: maxAdaptiveRetries value",
    "ClientOptions._options": "native: the options the application gave (URI and keywords)",
    "ClientOptions._ClientOptions__enable_overload_retargeting": "native: retargeting value",
    "helpers._RetryPolicy (4.17) / helpers_shared._RetryPolicy (4.18+)": "native: detection "
    "of the native loop and its conventions",
    # Native adapter (pymongo >= 4.17).
    "MongoClient._process_response": "sees every reply before pymongo builds an error",
    # Backport (pymongo 4.9-4.16).
    "MongoClient._checkout": "connection checkout of a write attempt",
    "MongoClient._conn_from_server": "connection checkout of a read attempt",
    "MongoClient._topology / ._topology_settings": "pools to tag; _topology_id; pool_class",
    "MongoClient(_pool_class=...)": "the pool class of an enabled client",
    "MongoClient._resolve_srv_info": "pool class of a mongodb+srv topology built on first use",
    "mongo_client._add_retryable_write_error": "labels write errors as pymongo's loop does "
    "(probed through the client's modules: 4.20.1 moved it to mongo_client_shared)",
    "helpers_shared._RETRYABLE_ERROR_CODES": "classic retryable read codes",
    "_csot._TimeoutContext / _csot.apply": "one deadline for method-level retries",
    "ClientSession._start_retryable_write / ._unpin": "txnNumber once; unpin for retries",
    "Topology._servers / ._create_pool_for_server / ._topology_id": "tag existing/new pools",
    "Topology.handle_error": "leave SDAM alone for overload-labelled connection errors",
    # Server avoidance (both adapters, pymongo >= 4.16).
    "Topology._select_servers_loop / ._description": "put back the candidate servers a "
    "deprioritized selection leaves filtered on the shared description",
    "TopologyDescription._filter_servers": "its candidate list, filtered in place by selection",
    "Pool.connect / Pool._client_id / Pool.is_sdam (4.13+) / Pool.handshake (<4.13)": "label "
    "connection-establishment errors of application pools",
    "Connection.hello_cmd / .pool_ref / .performed_handshake": "the handshake flag",
    "Connection._hello (4.17)": "native: its source shows whether it sets the flag to True "
    "after hello_cmd (then hello_cmd returns a dict that stores '2' instead)",
    "Connection.write_command": "a bulk batch of a transaction's first statement completed",
    "_Bulk.retrying / .started_retryable_write": "batch-level retries",
    "retryable_bulk closure: full_result": "client bulk write: forget a retried error",
    "_finish_transaction_with_retry closure: command_name": "pymongo <= 4.14: commit vs abort",
    "Database._drop_helper, Collection._create_helper / ._create_indexes / ._drop_index / "
    "._create_search_indexes, ._timeout": "commands that bypass the retry loop before 4.17",
    "motor.metaprogramming._class_cache": "Motor attributes rebuilt after wrapping",
    # Hedged reads (adapters/hedging.py, both eras).
    "MongoClient._run_operation / ._retryable_read": "hedging: the read entry points wrapped",
    "message._Query (copy, reset) / message._CursorAddress": "hedging: a hedge's own find",
    "MongoClient._close_cursor_soon": "hedging: kill the server cursor of a losing find",
    "ClientSession._implicit / ._server_session.mark_dirty": "hedging: implicit sessions only",
}
"""Every private pymongo name the adapters touch, with what it is used for.

A new pymongo release can break exactly these; :func:`native_problems` and
:func:`backport_problems` probe the shapes the adapters depend on most before a client is
enabled, and ``tests/unit/test_seams_inventory.py`` fails when the adapters start using a
private name that is not listed here.
"""

__all__ = [
    "ASYNC_SHOULD_RETRY_AWAITED",
    "BACKOFF_TAKES_BASE",
    "DESCRIPTION_KEEPS_FILTER",
    "HAS_ASYNC_CLIENT",
    "HAS_NATIVE_BACKPRESSURE",
    "OPTION_ATTRIBUTES",
    "PRIVATE_NAMES",
    "PYMONGO_VERSION",
    "TopologyOpenHold",
    "client_has_native_backpressure",
    "csot_deadline",
    "csot_expired",
    "explicit_overload_options",
    "is_async_client",
    "keep_candidate_servers",
    "selection_has_choice",
    "servers_where",
    "should_retry_is_awaited",
]


class TopologyOpenHold:
    """Holds back a sync pymongo client's ``connect=True`` while its constructor runs.

    Inside :meth:`held`, the client's ``_get_topology`` (what the constructor calls to open the
    topology) only notes the request; :meth:`open_if_requested` opens it later, once the client
    is enabled.
    """

    def __init__(self) -> None:
        """Start with no open requested."""
        self.requested = False

    def __call__(self) -> None:
        """Stand in for ``_get_topology``: note the request."""
        self.requested = True

    @contextmanager
    def held(self, client: Any, *, motor: bool = False) -> Iterator[None]:
        """While inside, ``client``'s constructor notes its open instead of opening.

        ``motor``: ``client`` is a Motor client, whose constructor builds its sync delegate from
        the instance's ``__delegate_class__``: the delegate is built held.
        """
        if motor:
            delegate_class = type(client).__delegate_class__
            name = "__delegate_class__"
            vars(client)[name] = lambda *a, **k: self._build(delegate_class, a, k)
        else:
            name = "_get_topology"
            vars(client)[name] = self
        try:
            yield
        finally:
            vars(client).pop(name, None)

    def _build(self, cls: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Construct a ``cls`` (a pymongo client class) held back."""
        client = cls.__new__(cls)
        with self.held(client):
            cls.__init__(client, *args, **kwargs)
        return client

    def open_if_requested(self, client: Any) -> None:
        """Open ``client``'s topology (a pymongo client) if its constructor asked to."""
        if self.requested:
            client._get_topology()


def csot_deadline() -> Optional[float]:
    """Return the CSOT deadline (``time.monotonic`` clock) or None when no timeout applies."""
    if _csot.get_timeout() is None:
        return None
    deadline = _csot.get_deadline()
    return deadline if deadline != float("inf") else None


def servers_where(client: Any, predicate: Callable[[Any], bool]) -> list[Any]:
    """Return the client's known ``Server`` objects whose address satisfies ``predicate``."""
    servers = getattr(getattr(client, "_topology", None), "_servers", None)
    if not isinstance(servers, dict):
        return []
    return [server for address, server in list(servers.items()) if predicate(address)]


# -- server avoidance (``deprioritized_servers``) ----------------------------------------------

DESCRIPTION_KEEPS_FILTER: bool = (
    callable(getattr(TopologyDescription, "_filter_servers", None))
    and "deprioritized_servers" in inspect.signature(TopologyDescription.apply_selector).parameters
)
"""pymongo >= 4.16 filters the deprioritized servers out of the candidate list of the topology's
shared description (``TopologyDescription._filter_servers``) and leaves it so until its next
selection: ``client.primary`` and ``client.secondaries`` (``Topology._new_selection``) read it."""

_KEEPS_CANDIDATES = "_backpressure_keeps_candidates"


def selection_has_choice(client: Any, selector: Any) -> bool:
    """Whether pymongo may choose between servers for ``selector`` on ``client``.

    False for writes and primary reads outside a sharded cluster: the primary is the only
    eligible server there, so deprioritizing a server cannot send the attempt elsewhere.
    """
    if selector is not writable_server_selector and type(selector) is not Primary:
        return True
    description = getattr(getattr(client, "_topology", None), "description", None)
    return getattr(description, "topology_type", None) == TOPOLOGY_TYPE.Sharded


def _restore_candidates(topology: Any) -> None:
    """Put back the full candidate list on ``topology``'s description (its lock held)."""
    topology._description._filter_servers(None)


def _deprioritizes(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> bool:
    """Whether a ``_select_servers_loop(selector, timeout, operation, operation_id, address,
    deprioritized_servers)`` call deprioritizes servers."""
    return bool(kwargs.get("deprioritized_servers") or (len(args) > 5 and args[5]))


def keep_candidate_servers(client: Any) -> None:
    """Make ``client``'s topology undo the filter a deprioritized selection leaves behind.

    After each selection that deprioritized servers, the topology's ``_select_servers_loop`` puts
    the full candidate list back on the shared description before the topology's lock is
    released (see :data:`DESCRIPTION_KEEPS_FILTER`), so no other caller ever sees it filtered:
    what the adapters pass as ``deprioritized_servers`` steers one selection and nothing else.
    Installed on the topology object on first need (a topology rebuilt after a fork gets it
    again); a no-op on pymongo < 4.16, whose deprioritization filters a copy.
    """
    topology = getattr(client, "_topology", None)
    if not DESCRIPTION_KEEPS_FILTER or topology is None or _KEEPS_CANDIDATES in vars(topology):
        return
    original = topology._select_servers_loop
    if inspect.iscoroutinefunction(original):

        async def select_servers_loop(*args: Any, **kwargs: Any) -> Any:
            try:
                return await original(*args, **kwargs)
            finally:
                if _deprioritizes(args, kwargs):
                    _restore_candidates(topology)

    else:

        def select_servers_loop(*args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
            try:
                return original(*args, **kwargs)
            finally:
                if _deprioritizes(args, kwargs):
                    _restore_candidates(topology)

    topology._select_servers_loop = select_servers_loop
    setattr(topology, _KEEPS_CANDIDATES, True)


def csot_expired() -> bool:
    """Return True if a CSOT timeout applies and no time is left."""
    remaining = _csot.remaining()
    return remaining is not None and remaining <= 0


def _version_tuple() -> tuple[int, ...]:
    """Return the numeric leading part of ``pymongo.version_tuple`` (e.g. ``(4, 20, 0)``)."""
    numbers: list[int] = []
    for part in pymongo.version_tuple:
        if not isinstance(part, int):
            break
        numbers.append(part)
    return tuple(numbers)


PYMONGO_VERSION: tuple[int, ...] = _version_tuple()
"""The installed pymongo version as a tuple of ints (for messages and reports, not for gating)."""


def _import(name: str) -> Optional[Any]:
    """Import a module by name, or return None when it does not exist."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _native_retry_policy_classes() -> tuple[Optional[type], Optional[type]]:
    """Return pymongo's (sync, async) ``_RetryPolicy`` classes, or None where absent."""
    shared = _import("pymongo.helpers_shared")
    shared_cls = getattr(shared, "_RetryPolicy", None) if shared is not None else None
    sync_helpers = _import("pymongo.synchronous.helpers")
    async_helpers = _import("pymongo.asynchronous.helpers")
    sync_cls = getattr(sync_helpers, "_RetryPolicy", None) if sync_helpers is not None else None
    async_cls = getattr(async_helpers, "_RetryPolicy", None) if async_helpers else None
    sync_cls = sync_cls or shared_cls
    async_cls = async_cls or shared_cls
    return (
        sync_cls if isinstance(sync_cls, type) else None,
        async_cls if isinstance(async_cls, type) else None,
    )


_SYNC_POLICY, _ASYNC_POLICY = _native_retry_policy_classes()

OPTION_ATTRIBUTES: tuple[str, str] = (
    "_ClientOptions__max_adaptive_retries",
    "_ClientOptions__enable_overload_retargeting",
)
"""Private attributes behind the two ``ClientOptions`` overload-retry properties."""


def _options_support_adaptive_retries() -> bool:
    """Return True if pymongo knows maxAdaptiveRetries and enableOverloadRetargeting."""
    from pymongo.client_options import ClientOptions

    validators = getattr(pymongo.common, "URI_OPTIONS_VALIDATOR_MAP", {})
    return (
        "maxadaptiveretries" in validators
        and "enableoverloadretargeting" in validators
        and isinstance(getattr(ClientOptions, "max_adaptive_retries", None), property)
        and isinstance(getattr(ClientOptions, "enable_overload_retargeting", None), property)
    )


HAS_NATIVE_BACKPRESSURE: bool = _SYNC_POLICY is not None and _options_support_adaptive_retries()
"""pymongo has its own overload retry loop (``client._retry_policy``, ``maxAdaptiveRetries``)."""

BACKOFF_TAKES_BASE: bool = _SYNC_POLICY is not None and "base_backoff" in (
    inspect.signature(getattr(_SYNC_POLICY, "backoff")).parameters  # noqa: B009
)
"""The native loop calls ``backoff(attempt, base_backoff)`` (server baseBackoffMS handed over)."""

ASYNC_SHOULD_RETRY_AWAITED: bool = _ASYNC_POLICY is not None and (
    inspect.iscoroutinefunction(getattr(_ASYNC_POLICY, "should_retry", None))
)
"""The async native loop awaits ``should_retry`` (so our replacement must be ``async def``)."""

_ASYNC_CLIENT_MODULE = _import("pymongo.asynchronous.mongo_client")
_ASYNC_CLIENT_CLASS: Optional[type] = getattr(_ASYNC_CLIENT_MODULE, "AsyncMongoClient", None)

HAS_ASYNC_CLIENT: bool = _ASYNC_CLIENT_MODULE is not None
"""pymongo ships ``AsyncMongoClient``."""


def is_async_client(client: object) -> bool:
    """Return True for a pymongo ``AsyncMongoClient`` (not for Motor, whose delegate is sync)."""
    cls = _ASYNC_CLIENT_CLASS
    return isinstance(cls, type) and isinstance(client, cls)


def client_has_native_backpressure(client: object) -> bool:
    """Return True if this client object runs pymongo's native overload retry loop."""
    options = getattr(client, "options", None)
    return (
        HAS_NATIVE_BACKPRESSURE
        and hasattr(client, "_retry_policy")
        and hasattr(options, "max_adaptive_retries")
        and all(hasattr(options, attr) for attr in OPTION_ATTRIBUTES)
    )


_EXPLICIT_OPTION_KEYS: Mapping[str, tuple[str, str]] = {
    "maxAdaptiveRetries": ("maxadaptiveretries", "max_adaptive_retries"),
    "enableOverloadRetargeting": ("enableoverloadretargeting", "enable_overload_retargeting"),
}


def explicit_overload_options(client: object) -> dict[str, Any]:
    """Return the overload-retry options the application gave ``client`` (URI or keyword).

    Keys ``maxAdaptiveRetries`` / ``enableOverloadRetargeting``, only for those it gave: a value
    pymongo chose by default is left out.  Empty before pymongo 4.17 (no such options).
    """
    given = getattr(getattr(client, "options", None), "_options", None)
    if not isinstance(given, Mapping):
        return {}
    found: dict[str, Any] = {}
    for name, keys in _EXPLICIT_OPTION_KEYS.items():
        for key in keys:
            if key in given:
                found[name] = given[key]
                break
    return found


def should_retry_is_awaited(native_policy: object) -> bool:
    """Return True if the loop owning ``native_policy`` awaits its ``should_retry``.

    The convention is taken from the policy object pymongo built for that client: the loop and
    its own policy always agree.
    """
    method = getattr(native_policy, "should_retry", None)
    return method is not None and inspect.iscoroutinefunction(method)


# -- the arguments of ``MongoClient._retry_internal`` --------------------------------------------

_RETRY_INTERNAL_POSITIONS = {"func": 0, "session": 1, "bulk": 2, "operation": 3}


def retry_internal_argument(args: tuple[Any, ...], kwargs: Mapping[str, Any], name: str) -> Any:
    """Return argument ``name`` of a ``_retry_internal(func, session, bulk, operation)`` call."""
    if name in kwargs:
        return kwargs[name]
    position = _RETRY_INTERNAL_POSITIONS[name]
    return args[position] if len(args) > position else None


def operation_name(operation: Any, func: Optional[Callable[..., Any]] = None) -> str:
    """Name an operation (the ``operation`` argument of ``_retry_internal``) for logs and events.

    pymongo passes a ``_Op`` member (a str Enum), named by its value here.  pymongo <= 4.14
    passes ``abortTransaction`` for commits too; the real command name is then read from the
    callback's closure (``command_name`` of ``_finish_transaction_with_retry``).
    """
    value = getattr(operation, "value", operation)
    if value is None:
        return "unknown"
    name = value if isinstance(value, str) else str(value)
    if name == "abortTransaction" and func is not None:
        command = closure_value(func, "command_name")
        if isinstance(command, str):
            return command
    return name


def closure_value(func: Callable[..., Any], name: str) -> Any:
    """Return the value of ``func``'s closure variable ``name``, or None (absent or unset)."""
    code = getattr(func, "__code__", None)
    if code is None:
        return None
    cells = getattr(func, "__closure__", None) or ()
    for free, cell in zip(code.co_freevars, cells):
        if free == name:
            try:
                return cell.cell_contents
            except ValueError:
                return None
    return None


def server_address(server: Any) -> Optional[tuple[str, int]]:
    """Return the (host, port) of a pymongo Server, or None."""
    try:
        address = server.description.address
    except AttributeError:
        return None
    if type(address) is tuple and len(address) == 2:
        return address  # pymongo's own (host, port): already a str and an int (success path)
    if isinstance(address, tuple) and len(address) == 2:
        return (str(address[0]), int(address[1]))
    return None


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
    if outside_transaction(session):
        return None
    transaction = session._transaction
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


# -- replies (``MongoClient._process_response`` sees each one before pymongo builds an error) ----


def reply_ok(reply: Any) -> bool:
    """Return True for a command reply with ``ok: 1``."""
    if type(reply) is dict:
        return bool(reply.get("ok") == 1)
    try:
        return isinstance(reply, Mapping) and reply.get("ok") == 1
    except Exception:
        return False


def sanitize_reply(reply: Any) -> None:
    """Make hostile backpressure fields of a reply harmless, in place, before pymongo reads them.

    A ``baseBackoffMS`` that is not a positive finite number is removed (pymongo >= 4.18 would
    divide it and raise ``TypeError``); ``errorLabels`` that is not a list of strings keeps only
    its strings (pymongo would raise ``TypeError`` building the error).  Replies that cannot be
    changed (e.g. ``RawBSONDocument``) are left alone.
    """
    if not isinstance(reply, MutableMapping):
        return
    try:
        if "baseBackoffMS" in reply and valid_milliseconds(reply["baseBackoffMS"]) is None:
            del reply["baseBackoffMS"]
        if "errorLabels" in reply:
            labels = reply["errorLabels"]
            if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
                kept = [x for x in labels if isinstance(x, str)] if isinstance(labels, list) else []
                reply["errorLabels"] = kept
    except Exception:  # a reply type we do not understand: leave it to pymongo
        return


# -- the version guard: probe each seam's shape before an adapter touches a client ---------------

TESTED_RANGE: tuple[tuple[int, int], tuple[int, int]] = ((4, 9), (4, 20))
"""The oldest and newest pymongo minor releases the adapters are tested with."""


class UnsupportedPymongoError(TypeError):
    """The installed pymongo lacks a private seam an adapter needs (the client is untouched)."""


def _version_text() -> str:
    """The installed pymongo version, for messages."""
    return str(getattr(pymongo, "__version__", ".".join(map(str, PYMONGO_VERSION))))


def _parameters(owner: Any, name: str) -> Optional[list[str]]:
    """Return the parameter names of ``owner.name`` (a function), or None when it is absent."""
    function = getattr(owner, name, None)
    if not callable(function):
        return None
    try:
        return list(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return None


def _expect_parameters(
    problems: list[str], owner: Any, label: str, name: str, expected: list[str], *, exact: bool
) -> None:
    """Append a problem unless ``owner.name`` takes ``expected`` (first, in order; or exactly)."""
    found = _parameters(owner, name)
    if found is None:
        problems.append(f"{label}.{name} is missing")
        return
    head = found[: len(expected)]
    if head != expected or (exact and found != expected):
        problems.append(f"{label}.{name}{tuple(found)} does not take {tuple(expected)}")


_RETRY_INTERNAL_PARAMETERS = [
    "self",
    "func",
    "session",
    "bulk",
    "operation",
    "is_read",
    "address",
    "read_pref",
    "retryable",
    "operation_id",
]


def _session_problems(client: Any) -> list[str]:
    """Problems with the transaction internals both adapters use."""
    problems: list[str] = []
    flavour = "asynchronous" if is_async_client(client) else "synchronous"
    module = _import(f"pymongo.{flavour}.client_session")
    states = getattr(module, "_TxnState", None)
    if not all(hasattr(states, name) for name in ("STARTING", "IN_PROGRESS")):
        problems.append(f"pymongo.{flavour}.client_session._TxnState is missing")
    transaction = getattr(module, "_Transaction", None)
    if not callable(getattr(transaction, "starting", None)):
        problems.append(f"pymongo.{flavour}.client_session._Transaction.starting is missing")
    return problems


_EMPTY = inspect.Parameter.empty

_RETRY_INTERNAL_4_17: tuple[tuple[str, Any], ...] = (
    ("self", _EMPTY),
    ("func", _EMPTY),
    ("session", _EMPTY),
    ("bulk", _EMPTY),
    ("operation", _EMPTY),
    ("is_read", False),
    ("address", None),
    ("read_pref", None),
    ("retryable", False),
    ("operation_id", None),
    ("is_run_command", False),
    ("is_aggregate_write", False),
)

NATIVE_RETRY_INTERNAL_SIGNATURES: Mapping[str, tuple[tuple[str, Any], ...]] = {
    "4.17-4.20.0": _RETRY_INTERNAL_4_17,
    "4.20.1": (*_RETRY_INTERNAL_4_17, ("conn_mgr", None)),
}
"""``MongoClient._retry_internal``'s known signatures (names and defaults), by the pymongo
releases that have them: with one of these the native adapter's wrapper takes the parameters by
name and forwards them positionally, without ``*args`` and ``**kwargs`` (the success path's
biggest cost); see :func:`native_signature`.  4.20.1 added ``conn_mgr`` (a load-balanced
cursor's pinned connection, so that its getMore can be retried on overload)."""

NATIVE_SELECT_SERVER_SIGNATURE: tuple[tuple[str, Any], ...] = (
    ("self", _EMPTY),
    ("server_selector", _EMPTY),
    ("session", _EMPTY),
    ("operation", _EMPTY),
    ("address", None),
    ("deprioritized_servers", None),
    ("operation_id", None),
)
"""``MongoClient._select_server`` of pymongo 4.17-4.20.1 (names and defaults), as above."""


def _signature(owner: Any, name: str) -> Optional[tuple[tuple[str, Any], ...]]:
    """Return ``owner.name``'s parameters as (name, default) pairs, or None.

    None when it is missing, has no signature, or takes anything but plain positional-or-keyword
    parameters (``*args``, keyword-only...).
    """
    function = getattr(owner, name, None)
    if not callable(function):
        return None
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return None
    if not all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in parameters):
        return None
    return tuple((p.name, p.default) for p in parameters)


def _same_signature(
    found: Optional[tuple[tuple[str, Any], ...]], expected: tuple[tuple[str, Any], ...]
) -> bool:
    """Whether ``found`` has exactly ``expected``'s names and defaults, in order."""
    return (
        found is not None
        and len(found) == len(expected)
        and all(
            f_name == e_name and (f_default is e_default or f_default == e_default)
            for (f_name, f_default), (e_name, e_default) in zip(found, expected)
        )
    )


def native_signature(client: Any) -> Optional[str]:
    """Name the known ``_retry_internal`` signature ``client`` has (None: not a known one).

    The key of :data:`NATIVE_RETRY_INTERNAL_SIGNATURES` (e.g. ``"4.20.1"``) when
    ``_retry_internal`` has one of them and ``_select_server`` is
    :data:`NATIVE_SELECT_SERVER_SIGNATURE`: the native adapter then installs its positional
    wrappers (the fastest).  Any other signature that :func:`native_problems` accepts gets
    wrappers that forward ``*args, **kwargs``; :func:`signature_report` says why.
    """
    cls = type(client)
    if _FORWARDING_ONLY or not _same_signature(
        _signature(cls, "_select_server"), NATIVE_SELECT_SERVER_SIGNATURE
    ):
        return None
    found = _signature(cls, "_retry_internal")
    for releases, expected in NATIVE_RETRY_INTERNAL_SIGNATURES.items():
        if _same_signature(found, expected):
            return releases
    return None


_FORWARDING_ONLY: list[bool] = []


@contextmanager
def forwarding_only() -> Iterator[None]:
    """While inside, :func:`native_signature` knows no signature: clients enabled get the
    forwarding wrappers (the overhead benchmark measures their cost against the positional ones).
    """
    _FORWARDING_ONLY.append(True)
    try:
        yield
    finally:
        _FORWARDING_ONLY.pop()


def native_exact_signatures(client: Any) -> bool:
    """Whether ``client`` gets the positional wrappers (a known signature, see above)."""
    return native_signature(client) is not None


def retry_internal_arity(client: Any) -> int:
    """How many arguments (``self`` left out) ``client``'s ``_retry_internal`` takes.

    Only meaningful for a client with a known signature (:func:`native_signature`).
    """
    found = _signature(type(client), "_retry_internal")
    return len(found) - 1 if found is not None else 0


def signature_report(cls: Any) -> str:
    """Say, for people, whether a client class's wrapped methods have a known signature.

    For example ``"pymongo 4.21.0: MongoClient._retry_internal has parameters (...) not in the
    known signatures (4.17-4.20.0: (...); 4.20.1: (...))"``, or ``"... known signature 4.20.1"``.
    """
    head = f"pymongo {_version_text()}: {cls.__name__}"
    problems = []
    found = _signature(cls, "_retry_internal")
    known = [r for r, e in NATIVE_RETRY_INTERNAL_SIGNATURES.items() if _same_signature(found, e)]
    if not known:
        shown = _shown(found, cls, "_retry_internal")
        expected = "; ".join(
            f"{releases}: {tuple(n for n, _ in sig[1:])}"
            for releases, sig in NATIVE_RETRY_INTERNAL_SIGNATURES.items()
        )
        problems.append(
            f"{head}._retry_internal has parameters {shown} not in the known signatures"
            f" ({expected})"
        )
    select = _signature(cls, "_select_server")
    if not _same_signature(select, NATIVE_SELECT_SERVER_SIGNATURE):
        problems.append(
            f"{head}._select_server has parameters {_shown(select, cls, '_select_server')}, not"
            f" the known {tuple(n for n, _ in NATIVE_SELECT_SERVER_SIGNATURE[1:])}"
        )
    if problems:
        return "; ".join(problems) + " (the adapter falls back to its forwarding wrappers)"
    return f"{head} has the known _retry_internal signature {known[0]}"


def _shown(found: Optional[tuple[tuple[str, Any], ...]], cls: Any, name: str) -> str:
    """Show a method's parameter names (``self`` left out), for :func:`signature_report`."""
    if found is not None:
        return str(tuple(n for n, _ in found[1:]))
    try:
        return str(inspect.signature(getattr(cls, name)))
    except (TypeError, ValueError, AttributeError):
        return "(missing)"


def native_problems(client: Any) -> list[str]:
    """Return the seams of the native adapter (pymongo >= 4.17) that ``client`` does not match."""
    cls = type(client)
    label = cls.__name__
    problems: list[str] = []
    _expect_parameters(
        problems, cls, label, "_retry_internal", _RETRY_INTERNAL_PARAMETERS[:5], exact=False
    )
    if not callable(getattr(cls, "_select_server", None)):
        problems.append(f"{label}._select_server is missing")
    _expect_parameters(
        problems, cls, label, "_process_response", ["self", "reply", "session"], exact=True
    )
    policy = getattr(client, "_retry_policy", None)
    _expect_parameters(
        problems, policy, f"{label}._retry_policy", "backoff", ["attempt"], exact=False
    )
    _expect_parameters(
        problems, policy, f"{label}._retry_policy", "should_retry", ["attempt", "delay"], exact=True
    )
    options = getattr(client, "options", None)
    for attr in OPTION_ATTRIBUTES:
        if not hasattr(options, attr):
            problems.append(f"ClientOptions.{attr} is missing")
    return problems + _session_problems(client)


def backport_problems(client: Any) -> list[str]:
    """Return the seams of the backport (pymongo 4.9-4.16) that ``client`` does not match."""
    cls = type(client)
    label = cls.__name__
    problems: list[str] = []
    _expect_parameters(
        problems, cls, label, "_retry_internal", _RETRY_INTERNAL_PARAMETERS, exact=True
    )
    _expect_parameters(
        problems,
        cls,
        label,
        "_select_server",
        [
            "self",
            "server_selector",
            "session",
            "operation",
            "address",
            "deprioritized_servers",
            "operation_id",
        ],
        exact=False,
    )
    for name in ("_checkout", "_conn_from_server"):
        if not callable(getattr(cls, name, None)):
            problems.append(f"{label}.{name} is missing")
    module = sys.modules.get(cls.__module__)
    for candidate in cls.__mro__:
        if hasattr(sys.modules.get(candidate.__module__), "_add_retryable_write_error"):
            module = sys.modules.get(candidate.__module__)
            break
    _expect_parameters(
        problems,
        module,
        "mongo_client",
        "_add_retryable_write_error",
        ["exc", "max_wire_version", "is_mongos"],
        exact=True,
    )
    return problems + _session_problems(client)


def guard(client: Any, problems: list[str]) -> None:
    """Refuse a client whose seams do not match; warn once on a newer, untested pymongo.

    Raises:
        UnsupportedPymongoError: naming the pymongo version and every seam that does not match.
    """
    if problems:
        raise UnsupportedPymongoError(
            f"backpressure cannot enable {type(client).__name__} on pymongo {_version_text()}: "
            + "; ".join(problems)
            + f" (tested with pymongo {_range_text()}); the client was left untouched"
        )
    if PYMONGO_VERSION[:2] > TESTED_RANGE[1]:
        _warn_untested()


def _range_text() -> str:
    """The tested range, for messages."""
    (low_major, low_minor), (high_major, high_minor) = TESTED_RANGE
    return f"{low_major}.{low_minor}-{high_major}.{high_minor}"


_WARNED: list[bool] = []


def _warn_untested() -> None:
    """Warn once per process that pymongo is newer than the tested range."""
    if _WARNED:
        return
    _WARNED.append(True)
    warnings.warn(
        f"backpressure is tested with pymongo {_range_text()}; pymongo {_version_text()} is "
        "newer, but every seam it uses matched, so it is enabled",
        UntestedPymongoWarning,
        stacklevel=4,
    )


class UntestedPymongoWarning(UserWarning):
    """pymongo is newer than the tested range (all seams matched, so backpressure is enabled)."""


def print_report() -> int:
    """Print, for people, whether the adapters know the installed pymongo; 0 if they do, else 1.

    ``scripts/lookahead.sh`` runs it against the newest pymongo release before its tests, so that
    a release with new seams fails with a line naming the release, the method and its parameters.
    """
    if not HAS_NATIVE_BACKPRESSURE:
        print(f"pymongo {_version_text()}: no native overload loop; the backport serves it")
        return 0
    from pymongo import AsyncMongoClient, MongoClient

    known = True
    classes: tuple[type[Any], ...] = (MongoClient, AsyncMongoClient)
    for cls in classes:
        client: Any = cls(connect=False)
        try:
            known = known and native_signature(client) is not None
            print(signature_report(cls))
            for problem in native_problems(client):
                known = False
                print(f"pymongo {_version_text()}: {problem} (the adapter refuses the client)")
        finally:
            if cls is MongoClient:
                client.close()
    return 0 if known else 1
