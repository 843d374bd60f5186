"""Hostile wire messages for the embedded server: named worst cases and a Hypothesis strategy.

Shared by the bounded fuzz test (``test_server_fuzz.py``) and the measurement script
(``scripts/measure_wire_fuzz.py``), which reports memory growth and the stall other connections
see.
"""

from __future__ import annotations

import os
import struct
import zlib
from typing import Callable

import bson
from hypothesis import strategies as st

OP_COMPRESSED = 2012
OP_MSG = 2013
MAX_MESSAGE = 48_000_000
MIB = 1 << 20


def header(length: int, op_code: int, request_id: int = 1) -> bytes:
    """A 16-byte message header."""
    return struct.pack("<iiii", length, request_id, 0, op_code)


def op_msg(sections: bytes, flags: int = 0, request_id: int = 1) -> bytes:
    """An OP_MSG with the given raw sections."""
    payload = struct.pack("<I", flags) + sections
    return header(16 + len(payload), OP_MSG, request_id) + payload


def body_section(doc: dict[str, object]) -> bytes:
    """A kind-0 section."""
    return b"\x00" + bson.encode(doc)


def sequence_section(identifier: str, docs_bytes: bytes) -> bytes:
    """A kind-1 section holding already-encoded documents."""
    data = identifier.encode() + b"\x00" + docs_bytes
    return b"\x01" + struct.pack("<i", 4 + len(data)) + data


def compressed(inner_op: int, declared: int, data: bytes, compressor: int = 2) -> bytes:
    """An OP_COMPRESSED wrapper around ``data`` with a chosen declared size."""
    wrapped = struct.pack("<iiB", inner_op, declared, compressor) + data
    return header(16 + len(wrapped), OP_COMPRESSED) + wrapped


def zlib_zeros(size: int) -> bytes:
    """zlib stream of ``size`` zero bytes, compressing one MiB only (no ``size``-byte buffer).

    After a full flush a deflater starts afresh, so every MiB of zeros compresses to the same
    bytes: the stream is the zlib header, that MiB's deflate blocks repeated, the rest's blocks
    and the Adler-32 of ``size`` zeros (a = 1, b = size mod 65521).
    """
    whole, rest = divmod(size, MIB)
    deflater = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)  # raw deflate, no header
    one_mib = deflater.compress(bytes(MIB)) + deflater.flush(zlib.Z_FULL_FLUSH) if whole else b""
    tail = deflater.compress(bytes(rest)) + deflater.flush()
    adler = ((size % 65521) << 16) | 1
    return b"\x78\xda" + one_mib * whole + tail + struct.pack(">I", adler)


def zlib_bomb(inflated: int, declared: int) -> bytes:
    """The zip bomb: ``inflated`` bytes of zeros claiming ``declared`` bytes."""
    return compressed(OP_MSG, declared, zlib_zeros(inflated))


def garbage(size: int) -> bytes:
    """An OP_MSG of ``size`` bytes whose payload is random (not BSON)."""
    return header(size, OP_MSG) + os.urandom(size - 16)


def bad_checksum(size: int) -> bytes:
    """A well-formed OP_MSG of about ``size`` bytes with the checksum flag and a wrong CRC."""
    filler = "x" * max(0, size - 200)
    sections = body_section({"ping": 1, "pad": filler, "$db": "admin"})
    return op_msg(sections + b"\xde\xad\xbe\xef", flags=1)


def many_tiny_documents(size: int) -> bytes:
    """An insert whose document sequence holds ``size`` bytes of empty documents."""
    empty = bson.encode({})
    count = (size - 200) // len(empty)
    return op_msg(
        body_section({"insert": "fuzz", "$db": "fuzz"})
        + sequence_section("documents", empty * count)
    )


def nested_empty_documents(size: int) -> bytes:
    """A ping whose body is one array of ``size`` bytes of empty documents (BSON -> objects)."""
    element = b"\x03" + b"0\x00" + bson.encode({})  # type, key "0", empty document
    count = (size - 100) // len(element)
    array = struct.pack("<i", 4 + count * len(element) + 1) + element * count + b"\x00"
    inner = b"\x10ping\x00" + struct.pack("<i", 1) + b"\x04a\x00" + array
    inner += b"\x02$db\x00" + struct.pack("<i", 6) + b"admin\x00"
    doc = struct.pack("<i", 4 + len(inner) + 1) + inner + b"\x00"
    return op_msg(b"\x00" + doc)


NAMED_CASES: dict[str, Callable[[], bytes]] = {
    "zlib bomb: 256 MiB of zeros declared as 100 bytes": lambda: zlib_bomb(256 * MIB, 100),
    "zlib bomb: 1 GiB of zeros declared as 100 bytes": lambda: zlib_bomb(1024 * MIB, 100),
    "zlib bomb: 1 GiB of zeros declared as 47.9 MB": lambda: zlib_bomb(
        1024 * MIB, MAX_MESSAGE - 16
    ),
    "zlib bomb: 40 MB declared as 48 MB (short stream)": lambda: zlib_bomb(
        40_000_000, MAX_MESSAGE - 16
    ),
    "48 MB OP_MSG of random bytes": lambda: garbage(MAX_MESSAGE),
    "16 MB OP_MSG with a wrong CRC-32C": lambda: bad_checksum(16 * MIB),
    "48 MB insert of empty documents (9.6 M)": lambda: many_tiny_documents(MAX_MESSAGE),
    "16 MB body: one array of empty documents (1.3 M)": lambda: nested_empty_documents(16 * MIB),
}
"""Worst cases by name; each returns the bytes one hostile connection sends."""


def _mutated_valid() -> st.SearchStrategy[bytes]:
    valid = op_msg(
        body_section({"insert": "fuzz", "$db": "fuzz"})
        + sequence_section("documents", bson.encode({"a": 1}) + bson.encode({"b": "x" * 20}))
    )

    @st.composite
    def mutate(draw: st.DrawFn) -> bytes:
        message = bytearray(valid)
        for _ in range(draw(st.integers(1, 4))):
            position = draw(st.integers(0, len(message) - 1))
            noise = draw(st.binary(min_size=1, max_size=6))
            message[position : position + len(noise)] = noise
        return bytes(message)

    return mutate()


@st.composite
def _compressed_lies(draw: st.DrawFn) -> bytes:
    inflated = draw(st.integers(0, 4 * MIB))
    declared = draw(
        st.one_of(
            st.just(inflated),
            st.integers(-(2**31), 2**31 - 1),
            st.integers(0, 2 * inflated + 16),
        )
    )
    compressor = draw(st.sampled_from([0, 1, 2, 3, 255]))
    data = zlib_zeros(inflated) if compressor == 2 else bytes(min(inflated, 4096))
    inner_op = draw(st.sampled_from([OP_MSG, OP_COMPRESSED, 2004, 1]))
    return compressed(inner_op, declared, data, compressor)


@st.composite
def _checksummed(draw: st.DrawFn) -> bytes:
    doc = draw(
        st.dictionaries(
            st.text(min_size=1, max_size=5).filter(lambda k: "\x00" not in k),
            st.integers(-(2**31), 2**31 - 1),
            max_size=4,
        )
    )
    trailer = draw(st.binary(min_size=0, max_size=4))
    flags = draw(st.sampled_from([1, 3, 1 | (1 << 16), 1 << 5]))
    return op_msg(body_section({"ping": 1, **doc, "$db": "admin"}) + trailer, flags=flags)


@st.composite
def _lying_length(draw: st.DrawFn) -> bytes:
    body = draw(st.binary(max_size=64))
    length = draw(st.integers(-(2**31), 2**31 - 1))
    op_code = draw(st.sampled_from([OP_MSG, OP_COMPRESSED, 2004, 2013, 0, 1]))
    return header(length, op_code) + body


def hostile_messages() -> st.SearchStrategy[bytes]:
    """Random hostile messages: corrupted valid ones, compression lies, checksums, bad lengths."""
    return st.one_of(
        _mutated_valid(),
        _compressed_lies(),
        _checksummed(),
        _lying_length(),
        st.binary(min_size=16, max_size=256).map(
            lambda data: struct.pack("<i", len(data)) + data[4:]
        ),
    )
