"""Operations on session entities."""

from __future__ import annotations

from typing import Any

from backpressure.testing.unified.entities import (
    TestContext,
    maybe_await,
    read_concern,
    read_preference,
    write_concern,
)
from backpressure.testing.unified.operations.arguments import Arguments, Method, Operation

__all__ = ["SESSION_OPERATIONS"]


async def _session_start_transaction(ctx: TestContext, session: Any, raw: dict[str, Any]) -> Any:
    """``startTransaction``."""
    args = Arguments(ctx, "startTransaction", raw)
    kwargs: dict[str, Any] = {}
    if "readConcern" in raw:
        kwargs["read_concern"] = read_concern(args.required("readConcern"))
    if "writeConcern" in raw:
        kwargs["write_concern"] = write_concern(args.required("writeConcern"))
    if "readPreference" in raw:
        kwargs["read_preference"] = read_preference(args.required("readPreference"))
    if "maxCommitTimeMS" in raw:
        kwargs["max_commit_time_ms"] = args.required("maxCommitTimeMS")
    args.done()
    await maybe_await(session.start_transaction(**kwargs))
    return None


def _session_call(name: str, method: Method) -> Operation:
    """A session operation without arguments."""

    async def run(ctx: TestContext, session: Any, raw: dict[str, Any]) -> Any:
        """Call the session method."""
        Arguments(ctx, name, raw).done()
        await maybe_await(method(session)())
        return None

    run.__doc__ = f"``{name}``."
    return run


SESSION_OPERATIONS: dict[str, Operation] = {
    "startTransaction": _session_start_transaction,
    "commitTransaction": _session_call("commitTransaction", lambda s: s.commit_transaction),
    "abortTransaction": _session_call("abortTransaction", lambda s: s.abort_transaction),
    "endSession": _session_call("endSession", lambda s: s.end_session),
}
"""Operations on session entities."""
