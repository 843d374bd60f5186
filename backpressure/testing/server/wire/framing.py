"""MongoDB wire protocol framing for the embedded server: parse requests, pack replies (no I/O).

Theory of operation: the transport reads a 16-byte header, checks the declared length against
``maxMessageSizeBytes`` with :func:`parse_header`, reads the rest and hands it to
:func:`parse_request`, which returns a :class:`Request` or raises :class:`WireError`. Replies are
packed with :func:`pack_reply` in the form the request expects (OP_MSG, OP_REPLY for a legacy
OP_QUERY, wrapped in OP_COMPRESSED when the request was compressed).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional, Union

import bson
from bson.codec_options import CodecOptions
from bson.errors import BSONError

from backpressure.testing.server.wire.checksum import crc32c
from backpressure.testing.server.wire.compression import (
    NOOP_COMPRESSOR_ID,
    ZLIB_COMPRESSOR_ID,
    CompressionError,
    compress,
    decompress,
)

__all__ = [
    "CHECKSUM_PRESENT",
    "EXHAUST_ALLOWED",
    "HEADER_SIZE",
    "MAX_DOCUMENT_BYTES",
    "MAX_MESSAGE_SIZE_BYTES",
    "MAX_SEQUENCE_DOCUMENTS",
    "MORE_TO_COME",
    "NOOP_COMPRESSOR_ID",
    "OP_COMPRESSED",
    "OP_MSG",
    "OP_QUERY",
    "OP_REPLY",
    "ZLIB_COMPRESSOR_ID",
    "Header",
    "Peek",
    "Request",
    "WireError",
    "compressed_size",
    "pack_msg",
    "pack_reply",
    "parse_header",
    "parse_reply",
    "parse_request",
    "peek_request",
]

OP_REPLY = 1
"""Legacy reply opcode (answers an OP_QUERY)."""
OP_QUERY = 2004
"""Legacy query opcode (the first hello of pymongo < 4.18)."""
OP_COMPRESSED = 2012
"""Compressed wrapper opcode."""
OP_MSG = 2013
"""The modern message opcode."""

HEADER_SIZE = 16
"""Bytes in a message header."""
MAX_MESSAGE_SIZE_BYTES = 48_000_000
"""mongod's ``maxMessageSizeBytes``; longer messages close the connection."""
MAX_DOCUMENT_BYTES = 16 * 1024 * 1024 + 16 * 1024
"""mongod's limit on one document of a request (``maxBsonObjectSize`` plus 16 KiB of slack)."""
MAX_SEQUENCE_DOCUMENTS = 100_000
"""Documents one OP_MSG document sequence may hold (mongod's ``maxWriteBatchSize``)."""

CHECKSUM_PRESENT = 1 << 0
"""OP_MSG flag: a CRC-32C trailer follows the sections."""
MORE_TO_COME = 1 << 1
"""OP_MSG flag: the sender expects no reply (unacknowledged write)."""
EXHAUST_ALLOWED = 1 << 16
"""OP_MSG flag: the client accepts several replies (awaitable hello, exhaust getMore)."""
_KNOWN_MSG_FLAGS = CHECKSUM_PRESENT | MORE_TO_COME | EXHAUST_ALLOWED

_HEADER = struct.Struct("<iiii")
_INT32 = struct.Struct("<i")
_UINT32 = struct.Struct("<I")
_COMPRESSED = struct.Struct("<iiB")
_REPLY_PREFIX = struct.Struct("<iqii")
_QUERY_TAIL = struct.Struct("<ii")

Payload = Union[bytes, bytearray]
"""A message body as read from the socket or inflated."""

_CODEC: CodecOptions[dict[str, Any]] = CodecOptions()
_MAX_INNER = MAX_MESSAGE_SIZE_BYTES - HEADER_SIZE


class WireError(Exception):
    """A request that cannot be parsed; the server closes the connection that sent it."""


@dataclass(frozen=True)
class Header:
    """The standard 16-byte message header."""

    length: int
    request_id: int
    response_to: int
    op_code: int


@dataclass(frozen=True)
class Request:
    """One decoded client request."""

    request_id: int
    op_code: int
    db: str
    body: dict[str, Any]
    more_to_come: bool = False
    exhaust_allowed: bool = False
    compressor_id: Optional[int] = None
    query_flags: int = 0

    @property
    def legacy(self) -> bool:
        """True for an OP_QUERY command, which expects an OP_REPLY."""
        return self.op_code == OP_QUERY

    @property
    def command_name(self) -> str:
        """The first key of the command document."""
        return next(iter(self.body), "")


def parse_header(data: bytes, max_size: int = MAX_MESSAGE_SIZE_BYTES) -> Header:
    """Decode a message header and check that its length is plausible."""
    if len(data) != HEADER_SIZE:
        raise WireError(f"short header: {len(data)} bytes")
    length, request_id, response_to, op_code = _HEADER.unpack(data)
    if length <= HEADER_SIZE or length > max_size:
        raise WireError(f"bad message length {length} (max {max_size})")
    return Header(length, request_id, response_to, op_code)


def parse_request(header: Header, payload: Payload) -> Request:
    """Decode the payload that followed ``header`` into a :class:`Request`."""
    if len(payload) != header.length - HEADER_SIZE:
        raise WireError("payload does not match the declared length")
    if header.op_code == OP_COMPRESSED:
        op_code, payload, compressor_id = _decompress(payload)
        if op_code == OP_COMPRESSED:
            raise WireError("nested OP_COMPRESSED")
        # the checksum covers the original message: its header as it was before compression
        original = Header(
            HEADER_SIZE + len(payload), header.request_id, header.response_to, op_code
        )
    else:
        op_code, compressor_id, original = header.op_code, None, header
    if op_code == OP_MSG:
        return _parse_msg(original, payload, compressor_id)
    if op_code == OP_QUERY:
        return _parse_query(header.request_id, payload, compressor_id)
    raise WireError(f"unsupported opcode {op_code}")


@dataclass(frozen=True)
class Peek:
    """What the ingress limiter reads of a message without decoding its body."""

    command_name: str
    """The first key of the command document."""
    op_code: int
    """OP_MSG or OP_QUERY."""
    more_to_come: bool
    """An OP_MSG the client expects no reply to."""

    def as_request(self, request_id: int) -> Request:
        """A body-less :class:`Request` for :func:`pack_reply` (reply form and id only)."""
        return Request(
            request_id=request_id,
            op_code=self.op_code,
            db="",
            body={},
            more_to_come=self.more_to_come,
        )


def peek_request(header: Header, payload: Payload) -> Optional[Peek]:
    """The command name and reply form of an uncompressed OP_MSG or OP_QUERY, read from fixed
    offsets without decoding any BSON; ``None`` when the message is compressed or does not
    have the usual layout (the caller then decodes it in full)."""
    try:
        if header.op_code == OP_MSG:
            flags: int = _UINT32.unpack_from(payload)[0]
            if len(payload) < 5 or payload[4] != 0:
                return None
            name = _first_key(payload, 5)
            if name is None:
                return None
            return Peek(name, OP_MSG, bool(flags & MORE_TO_COME))
        if header.op_code == OP_QUERY:
            name_end = payload.find(b"\x00", 4)
            if name_end < 0:
                return None
            offset = name_end + 1 + _QUERY_TAIL.size
            name = _first_key(payload, offset)
            if name == "$query" and payload[offset + 4] == 0x03:
                name = _first_key(payload, offset + 4 + 1 + len(b"$query") + 1)
            return None if name is None else Peek(name, OP_QUERY, False)
    except (IndexError, struct.error, UnicodeDecodeError):
        return None
    return None


def _first_key(payload: Payload, offset: int) -> Optional[str]:
    """The first element name of the BSON document at ``offset`` (None if it has none)."""
    size: int = _INT32.unpack_from(payload, offset)[0]
    if size < 5 or offset + size > len(payload) or payload[offset + 4] == 0:
        return None
    start = offset + 5
    end = payload.find(b"\x00", start, offset + size)
    if end < 0:
        return None
    return bytes(payload[start:end]).decode("utf-8")


def pack_msg(doc: Mapping[str, Any], request_id: int, response_to: int, *, flags: int = 0) -> bytes:
    """Pack an OP_MSG holding one kind-0 section."""
    payload = _UINT32.pack(flags) + b"\x00" + bson.encode(doc)
    return _HEADER.pack(HEADER_SIZE + len(payload), request_id, response_to, OP_MSG) + payload


def pack_reply(
    request: Request,
    doc: Mapping[str, Any],
    request_id: int,
    *,
    more_to_come: bool = False,
    response_to: Optional[int] = None,
) -> bytes:
    """Pack ``doc`` as the reply ``request`` expects (OP_REPLY or OP_MSG, compressed alike).

    ``more_to_come``: an OP_MSG reply of an exhaust stream, more replies follow unasked;
    ``response_to``: the id it answers (default the request's; in an exhaust stream, the
    previous reply's).
    """
    answered = request.request_id if response_to is None else response_to
    if request.legacy:
        payload = _REPLY_PREFIX.pack(0, 0, 0, 1) + bson.encode(doc)
        op_code = OP_REPLY
    else:
        flags = MORE_TO_COME if more_to_come else 0
        payload = _UINT32.pack(flags) + b"\x00" + bson.encode(doc)
        op_code = OP_MSG
    if request.compressor_id is None:
        return _HEADER.pack(HEADER_SIZE + len(payload), request_id, answered, op_code) + payload
    body = compress(request.compressor_id, payload)
    wrapped = _COMPRESSED.pack(op_code, len(payload), request.compressor_id) + body
    return _HEADER.pack(HEADER_SIZE + len(wrapped), request_id, answered, OP_COMPRESSED) + wrapped


def parse_reply(header: Header, payload: Payload) -> dict[str, Any]:
    """Decode a server reply (OP_MSG or OP_REPLY, possibly compressed) into its document."""
    if header.op_code == OP_COMPRESSED:
        op_code, payload, _ = _decompress(payload)
    else:
        op_code = header.op_code
    if op_code == OP_MSG:
        if len(payload) < 5 or payload[4] != 0:
            raise WireError("OP_MSG reply without a leading kind-0 section")
        size = _bson_length(payload, 5)
        return _decode_one(payload[5 : 5 + size], "OP_MSG reply")
    if op_code == OP_REPLY:
        size = _bson_length(payload, _REPLY_PREFIX.size)
        return _decode_one(payload[_REPLY_PREFIX.size : _REPLY_PREFIX.size + size], "OP_REPLY")
    raise WireError(f"unexpected reply opcode {op_code}")


def compressed_size(header: Header, payload: Payload) -> int:
    """The declared uncompressed size of an OP_COMPRESSED message (its own length otherwise)."""
    if header.op_code != OP_COMPRESSED or len(payload) < _COMPRESSED.size:
        return header.length
    declared: int = _COMPRESSED.unpack_from(payload)[1]
    return max(declared, header.length)


def _decompress(payload: Payload) -> tuple[int, Payload, int]:
    if len(payload) < _COMPRESSED.size:
        raise WireError("short OP_COMPRESSED")
    op_code, size, compressor_id = _COMPRESSED.unpack_from(payload)
    data = memoryview(payload)[_COMPRESSED.size :]
    try:
        return op_code, decompress(compressor_id, data, size, _MAX_INNER), compressor_id
    except CompressionError as exc:
        raise WireError(str(exc)) from None


_DECODES_BUFFERS = bson.has_c()
"""bson's C extension decodes from a ``bytearray``; its pure-Python decoder (PyPy, or no
compiled extension) builds ObjectIds from slices, which must be ``bytes``."""


def _decode_one(data: Payload, what: str) -> dict[str, Any]:
    try:
        return bson.decode(data if _DECODES_BUFFERS else bytes(data), _CODEC)
    except (BSONError, ValueError, IndexError, struct.error) as exc:
        raise WireError(f"bad BSON in {what}: {exc}") from None


def _bson_length(payload: Payload, offset: int) -> int:
    if offset + 4 > len(payload):
        raise WireError("truncated BSON document")
    size: int = _INT32.unpack_from(payload, offset)[0]
    if size < 5 or offset + size > len(payload):
        raise WireError(f"bad BSON document length {size}")
    if size > MAX_DOCUMENT_BYTES:
        raise WireError(f"BSON document of {size} bytes exceeds {MAX_DOCUMENT_BYTES}")
    return size


def _parse_msg(header: Header, payload: Payload, compressor_id: int | None) -> Request:
    request_id = header.request_id
    if len(payload) < 5:
        raise WireError("short OP_MSG")
    flags: int = _UINT32.unpack_from(payload)[0]
    if flags & 0xFFFF & ~_KNOWN_MSG_FLAGS:
        raise WireError(f"unknown required OP_MSG flag bits {flags:#x}")
    end = len(payload)
    if flags & CHECKSUM_PRESENT:
        end -= 4
        if end < 5:
            raise WireError("OP_MSG too short for its checksum")
        _verify_checksum(header, payload, end)
    offset = 4
    body: dict[str, Any] | None = None
    sequences: dict[str, list[dict[str, Any]]] = {}
    while offset < end:
        kind = payload[offset]
        offset += 1
        if kind == 0:
            size = _bson_length(payload, offset)
            if body is not None:
                raise WireError("more than one kind-0 section")
            body = _decode_one(payload[offset : offset + size], "OP_MSG body")
            offset += size
        elif kind == 1:
            offset = _parse_sequence(payload, offset, end, sequences)
        else:
            raise WireError(f"unknown OP_MSG section kind {kind}")
    if offset != end:
        raise WireError("OP_MSG sections overrun the message")
    if body is None:
        raise WireError("OP_MSG without a kind-0 section")
    for identifier, docs in sequences.items():
        if identifier in body:
            raise WireError(f"field {identifier!r} is both in the body and a document sequence")
        body[identifier] = docs
    db = body.get("$db")
    if not isinstance(db, str) or not db:
        raise WireError("OP_MSG body without $db")
    return Request(
        request_id=request_id,
        op_code=OP_MSG,
        db=db,
        body=body,
        more_to_come=bool(flags & MORE_TO_COME),
        exhaust_allowed=bool(flags & EXHAUST_ALLOWED),
        compressor_id=compressor_id,
    )


def _verify_checksum(header: Header, payload: Payload, end: int) -> None:
    """Check the CRC-32C trailer over the header and everything before the trailer."""
    expected: int = _UINT32.unpack_from(payload, end)[0]
    head = _HEADER.pack(header.length, header.request_id, header.response_to, header.op_code)
    actual = crc32c(head, memoryview(payload)[:end])
    if actual != expected:
        raise WireError(
            f"OP_MSG checksum mismatch: trailer {expected:#010x}, content {actual:#010x}"
        )


def _parse_sequence(
    payload: Payload, offset: int, end: int, sequences: dict[str, list[dict[str, Any]]]
) -> int:
    if offset + 4 > end:
        raise WireError("truncated document sequence")
    size: int = _INT32.unpack_from(payload, offset)[0]
    seq_end = offset + size
    if size < 5 or seq_end > end:
        raise WireError(f"bad document sequence length {size}")
    name_end = payload.find(b"\x00", offset + 4, seq_end)
    if name_end < 0:
        raise WireError("document sequence identifier is not terminated")
    try:
        identifier = payload[offset + 4 : name_end].decode("utf-8")
    except UnicodeDecodeError:
        raise WireError("document sequence identifier is not UTF-8") from None
    if identifier in sequences:
        raise WireError(f"duplicate document sequence {identifier!r}")
    bounds: list[tuple[int, int]] = []  # found before decoding anything: a count check is cheap
    pos = name_end + 1
    while pos < seq_end:
        doc_size = _bson_length(payload, pos)
        if pos + doc_size > seq_end:
            raise WireError("document overruns its sequence")
        if len(bounds) == MAX_SEQUENCE_DOCUMENTS:
            raise WireError(
                f"document sequence {identifier!r} holds more than {MAX_SEQUENCE_DOCUMENTS} "
                "documents (maxWriteBatchSize)"
            )
        bounds.append((pos, pos + doc_size))
        pos += doc_size
    what = f"sequence {identifier!r}"
    sequences[identifier] = [_decode_one(payload[a:b], what) for a, b in bounds]
    return seq_end


def _parse_query(request_id: int, payload: Payload, compressor_id: int | None) -> Request:
    if len(payload) < 4:
        raise WireError("short OP_QUERY")
    flags: int = _INT32.unpack_from(payload)[0]
    name_end = payload.find(b"\x00", 4)
    if name_end < 0:
        raise WireError("OP_QUERY collection name is not terminated")
    namespace = payload[4:name_end].decode("utf-8", "replace")
    offset = name_end + 1 + _QUERY_TAIL.size
    size = _bson_length(payload, offset)
    query = _decode_one(payload[offset : offset + size], "OP_QUERY")
    db, _, collection = namespace.partition(".")
    if collection != "$cmd" or not db:
        raise WireError(f"OP_QUERY on {namespace!r}: only commands on <db>.$cmd are supported")
    inner = query.get("$query")
    body = dict(inner) if isinstance(inner, dict) else query
    return Request(
        request_id=request_id,
        op_code=OP_QUERY,
        db=db,
        body=body,
        compressor_id=compressor_id,
        query_flags=flags,
    )
