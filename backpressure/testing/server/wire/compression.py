"""OP_COMPRESSED payloads, decompressed with a bound: never beyond the declared size.

A hostile client can declare a small size and send a zlib stream that inflates to gigabytes
(a "zip bomb"). The declared ``uncompressedSize`` is checked against the message limit first,
then the stream is inflated with ``max_length`` set to one byte more than declared: output that
would exceed the declaration, a stream that ends early, or bytes after its end are all lies and
fail the message. Memory is bounded by the declared size (itself at most the message limit),
CPU by the output produced. Compressors other than noop and zlib are refused before any work.
"""

from __future__ import annotations

import zlib
from typing import Union

__all__ = [
    "NOOP_COMPRESSOR_ID",
    "SNAPPY_COMPRESSOR_ID",
    "SUPPORTED_COMPRESSORS",
    "ZLIB_COMPRESSOR_ID",
    "ZSTD_COMPRESSOR_ID",
    "CompressionError",
    "compress",
    "decompress",
]

NOOP_COMPRESSOR_ID = 0
"""OP_COMPRESSED id of the no-op compressor."""
SNAPPY_COMPRESSOR_ID = 1
"""OP_COMPRESSED id of snappy (not offered by the server)."""
ZLIB_COMPRESSOR_ID = 2
"""OP_COMPRESSED id of zlib (the only real compressor the server offers)."""
ZSTD_COMPRESSOR_ID = 3
"""OP_COMPRESSED id of zstd (not offered by the server)."""

SUPPORTED_COMPRESSORS = ("zlib",)
"""Compressor names the server negotiates in hello (``compression``)."""

_NAMES = {SNAPPY_COMPRESSOR_ID: "snappy", ZSTD_COMPRESSOR_ID: "zstd"}

Buffer = Union[bytes, bytearray, memoryview]

_IN_SLICE = 64 * 1024
_OUT_SLICE = 1 << 20


class CompressionError(ValueError):
    """A compressed payload that is malformed, unsupported or lies about its size."""


def decompress(compressor_id: int, data: Buffer, declared: int, limit: int) -> bytearray:
    """Return exactly ``declared`` bytes decompressed from ``data``, or raise.

    ``limit`` caps ``declared`` (the message limit less the header); no more than
    ``declared + 1`` bytes are ever produced.
    """
    if not 0 <= declared <= limit:
        raise CompressionError(f"declared uncompressed size {declared} is outside 0..{limit}")
    if compressor_id == NOOP_COMPRESSOR_ID:
        if len(data) != declared:
            raise CompressionError(f"noop payload has {len(data)} bytes, {declared} declared")
        return bytearray(data)
    if compressor_id != ZLIB_COMPRESSOR_ID:
        name = _NAMES.get(compressor_id, f"id {compressor_id}")
        raise CompressionError(f"unsupported compressor {name} (the server offers zlib only)")
    try:
        return _inflate(data, declared)
    except zlib.error as exc:
        raise CompressionError(f"bad zlib data: {exc}") from None


def _inflate(data: Buffer, declared: int) -> bytearray:
    """Inflate in slices (64 KiB in, 1 MiB out) into one buffer: peak memory is the output."""
    inflater = zlib.decompressobj()
    out = bytearray()
    view = memoryview(data)
    offset = 0
    pending: Buffer = b""
    while True:
        if not pending and offset < len(view):
            pending = view[offset : offset + _IN_SLICE]
            offset += len(pending)
        out += inflater.decompress(pending, min(_OUT_SLICE, declared + 1 - len(out)))
        if len(out) > declared:
            raise CompressionError(f"zlib data inflates beyond the declared {declared} bytes")
        pending = inflater.unconsumed_tail
        if inflater.eof:
            extra = len(inflater.unused_data) + len(view) - offset
            if extra:
                raise CompressionError(f"{extra} bytes follow the zlib stream")
            break
        if not pending and offset >= len(view):  # all input in: is output still held back?
            held = inflater.decompress(b"", 1)
            if not held:
                raise CompressionError(f"zlib stream ends early: {len(out)} of {declared} bytes")
            out += held
    if len(out) != declared:
        raise CompressionError(f"zlib data inflates to {len(out)} bytes, {declared} declared")
    return out


def compress(compressor_id: int, data: bytes) -> bytes:
    """Compress a reply with the compressor the request used (noop or zlib)."""
    if compressor_id == ZLIB_COMPRESSOR_ID:
        return zlib.compress(data)
    if compressor_id == NOOP_COMPRESSOR_ID:
        return data
    raise CompressionError(f"cannot compress with compressor id {compressor_id}")
