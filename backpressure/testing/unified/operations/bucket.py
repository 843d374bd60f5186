"""Operations on GridFS bucket entities: downloads (what the retryable-reads suites use)."""

from __future__ import annotations

from typing import Any

from backpressure.testing.unified.entities import TestContext, maybe_await
from backpressure.testing.unified.operations.arguments import Arguments, Operation

__all__ = ["BUCKET_OPERATIONS"]


async def _read_all(stream: Any) -> bytes:
    """Read a download stream (``GridOut``, its async twin or Motor's) to the end."""
    return bytes(await maybe_await(stream.read()))


async def _bucket_download(ctx: TestContext, bucket: Any, raw: dict[str, Any]) -> Any:
    """``download``: the file's bytes by ``_id``."""
    args = Arguments(ctx, "download", raw)
    file_id = args.required("id")
    args.done()
    return await _read_all(await maybe_await(bucket.open_download_stream(file_id)))


async def _bucket_download_by_name(ctx: TestContext, bucket: Any, raw: dict[str, Any]) -> Any:
    """``downloadByName``: the file's bytes by name (``revision``, default the newest)."""
    args = Arguments(ctx, "downloadByName", raw)
    filename = args.required("filename")
    revision = args.optional("revision", -1)
    args.done()
    stream = await maybe_await(bucket.open_download_stream_by_name(filename, revision=revision))
    return await _read_all(stream)


BUCKET_OPERATIONS: dict[str, Operation] = {
    "download": _bucket_download,
    "downloadByName": _bucket_download_by_name,
}
"""Operations on bucket entities."""
