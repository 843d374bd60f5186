"""The CRC-32C trailer of OP_MSG (flag bit 0, ``checksumPresent``).

mongod verifies the checksum when the flag is set and rejects a message whose trailer does not
match. The CRC comes from ``google-crc32c`` (hardware-accelerated, part of the ``server`` extra);
without it a table-driven pure-Python CRC is used, which is correct but slow (about a second
per megabyte), so the transport parses large messages off the event loop.
"""

from __future__ import annotations

from typing import Callable, Union

__all__ = ["crc32c"]

Buffer = Union[bytes, bytearray, memoryview]


def _table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _table()


def _pure_extend(crc: int, data: bytes) -> int:
    crc ^= 0xFFFFFFFF
    table = _TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _extender() -> Callable[[int, bytes], int]:
    try:
        import google_crc32c
    except ImportError:  # pragma: no cover - the server extra installs it
        return _pure_extend
    if google_crc32c.implementation != "c":  # pragma: no cover - wheels ship the C version
        return _pure_extend
    extend: Callable[[int, bytes], int] = google_crc32c.extend
    return extend


_extend = _extender()
_CHUNK = 1 << 20


def crc32c(*parts: Buffer) -> int:
    """CRC-32C (Castagnoli) of the concatenated parts, as OP_MSG's checksum trailer holds it.

    Large parts are fed in 1 MiB chunks, so no copy of a whole message is made.
    """
    crc = 0
    for part in parts:
        view = memoryview(part)
        for start in range(0, len(view), _CHUNK):
            crc = _extend(crc, bytes(view[start : start + _CHUNK]))
    return crc
