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


class CompressionError(ValueError):
    """A compressed payload that is malformed, unsupported or lies about its size."""


def decompress(compressor_id: int, data: Buffer, declared: int, limit: int) -> bytes:
    """Return exactly ``declared`` bytes decompressed from ``data``, or raise.

    ``limit`` caps ``declared`` (the message limit less the header); no more than
    ``declared + 1`` bytes are ever produced.
    """
    if not 0 <= declared <= limit:
        raise CompressionError(f"declared uncompressed size {declared} is outside 0..{limit}")
    if compressor_id == NOOP_COMPRESSOR_ID:
        if len(data) != declared:
            raise CompressionError(f"noop payload has {len(data)} bytes, {declared} declared")
        return bytes(data)
    if compressor_id != ZLIB_COMPRESSOR_ID:
        name = _NAMES.get(compressor_id, f"id {compressor_id}")
        raise CompressionError(f"unsupported compressor {name} (the server offers zlib only)")
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(data, declared + 1)
    except zlib.error as exc:
        raise CompressionError(f"bad zlib data: {exc}") from None
    if len(out) > declared or inflater.unconsumed_tail:
        raise CompressionError(f"zlib data inflates beyond the declared {declared} bytes")
    if not inflater.eof:
        raise CompressionError(f"zlib stream ends early: {len(out)} of {declared} bytes")
    if inflater.unused_data:
        raise CompressionError(f"{len(inflater.unused_data)} bytes follow the zlib stream")
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
