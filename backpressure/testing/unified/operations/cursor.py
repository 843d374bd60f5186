"""Operations on cursor and change stream entities (saved with ``saveResultAsEntity``)."""

from __future__ import annotations

from typing import Any

from backpressure.testing.unified.entities import TestContext, maybe_await
from backpressure.testing.unified.operations.arguments import Arguments, Operation
from backpressure.testing.unified.operations.shared import close

__all__ = ["CURSOR_OPERATIONS"]


async def _iterate_until_document_or_error(
    ctx: TestContext, cursor: Any, raw: dict[str, Any]
) -> Any:
    """``iterateUntilDocumentOrError``."""
    Arguments(ctx, "iterateUntilDocumentOrError", raw).done()
    return await maybe_await(cursor.next())


async def _iterate_once(ctx: TestContext, cursor: Any, raw: dict[str, Any]) -> Any:
    """``iterateOnce``."""
    Arguments(ctx, "iterateOnce", raw).done()
    return await maybe_await(cursor.try_next())


CURSOR_OPERATIONS: dict[str, Operation] = {
    "iterateUntilDocumentOrError": _iterate_until_document_or_error,
    "iterateOnce": _iterate_once,
    "close": close,
}
"""Operations on cursor and change stream entities."""
