"""What every operation shares: its signature, its argument reader and cursor draining.

An operation is an ``async def (ctx, target, args) -> result``. :class:`Arguments` pops the
arguments an operation understands; whatever is left makes the test skip with the argument's
name (:class:`Unsupported`), so nothing is ignored silently.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import Any, Callable

from backpressure.testing.unified.entities import TestContext, Unsupported, maybe_await

__all__ = ["Arguments", "Method", "Operation", "to_list"]

Operation = Callable[[TestContext, Any, dict[str, Any]], Awaitable[Any]]
"""``(context, target entity, arguments) -> result``."""

Method = Callable[[Any], Callable[..., Any]]
"""Picks the bound pymongo method an operation calls, e.g. ``lambda coll: coll.delete_one``."""


class Arguments:
    """The arguments of one operation; leftovers make the test skip, never pass silently."""

    def __init__(self, ctx: TestContext, operation: str, args: Mapping[str, Any]) -> None:
        """Wrap an operation's arguments."""
        self._ctx = ctx
        self._operation = operation
        self._args = dict(args)

    def required(self, key: str) -> Any:
        """A required argument."""
        if key not in self._args:
            raise ValueError(f"{self._operation}: missing argument {key!r}")
        return self._args.pop(key)

    def optional(self, key: str, default: Any = None) -> Any:
        """An optional argument."""
        return self._args.pop(key, default)

    def options(self, names: Mapping[str, str]) -> dict[str, Any]:
        """Pop the listed options, renamed to pymongo's keyword names."""
        return {names[k]: self._args.pop(k) for k in list(self._args) if k in names}

    def session(self) -> dict[str, Any]:
        """``{"session": <entity>}`` when a session is given, else ``{}``."""
        if "session" not in self._args:
            return {}
        return {"session": self._ctx.entities.get(self._args.pop("session"))}

    def done(self) -> None:
        """Raise :class:`Unsupported` for any argument nobody consumed."""
        if "rawData" in self._args:
            raise Unsupported(f"{self._operation}: pymongo has no rawData option")
        if self._args:
            raise Unsupported(
                f"{self._operation}: arguments {sorted(self._args)} are not supported"
            )


async def to_list(cursor: Any) -> list[Any]:
    """Drain a cursor (sync or async) and close it, also on error."""
    try:
        return list(await maybe_await(cursor.to_list()))
    finally:
        await maybe_await(cursor.close())
