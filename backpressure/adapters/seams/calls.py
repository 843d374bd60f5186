"""The calls the adapters wrap: the arguments of ``MongoClient._retry_internal``, the
operation's name, the error pymongo's loop does not pass to its retry policy, and the hold on a
sync client's topology while its constructor runs."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Callable, Optional


class TopologyOpenDeferral:
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


# -- the arguments of ``MongoClient._retry_internal`` --------------------------------------------

_RETRY_INTERNAL_POSITIONS = {"func": 0, "session": 1, "bulk": 2, "operation": 3}


def retry_internal_argument(args: tuple[Any, ...], kwargs: Mapping[str, Any], name: str) -> Any:
    """Return argument ``name`` of a ``_retry_internal(func, session, bulk, operation)`` call."""
    if name in kwargs:
        return kwargs[name]
    position = _RETRY_INTERNAL_POSITIONS[name]
    return args[position] if len(args) > position else None


def handled_error() -> Optional[BaseException]:
    """Return the exception being handled where pymongo called our retry policy (None: none).

    pymongo's overload loop (``_ClientConnectionRetryable.run``, 4.17-4.20.1) calls
    ``_retry_policy.backoff(attempt[, base_backoff])`` from inside the ``except`` block that
    caught the attempt's error, and passes the attempt number but not the error: this is the one
    place that reads it (``sys.exc_info``), and the policy hands it on as a parameter.
    """
    return sys.exc_info()[1]


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
