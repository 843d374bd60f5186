"""Sans-I/O tests of the embedded server's wire framing."""

from __future__ import annotations

import contextlib
import struct
import zlib

import bson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backpressure.testing.server.wire import checksum, compression
from backpressure.testing.server.wire.checksum import crc32c
from backpressure.testing.server.wire.framing import (
    OP_COMPRESSED,
    OP_MSG,
    OP_QUERY,
    OP_REPLY,
    Header,
    WireError,
    pack_msg,
    pack_reply,
    parse_header,
    parse_reply,
    parse_request,
)


def _split(message: bytes) -> tuple[Header, bytes]:
    return parse_header(message[:16]), message[16:]


def _msg(sections: bytes, flags: int = 0, request_id: int = 7) -> bytes:
    payload = struct.pack("<I", flags) + sections
    return struct.pack("<iiii", 16 + len(payload), request_id, 0, OP_MSG) + payload


def _sequence(identifier: str, docs: list[dict[str, object]]) -> bytes:
    data = identifier.encode() + b"\x00" + b"".join(bson.encode(d) for d in docs)
    return b"\x01" + struct.pack("<i", 4 + len(data)) + data


def test_kind1_sequences_are_merged_into_the_body() -> None:
    """A document sequence becomes a body field under its identifier."""
    body = b"\x00" + bson.encode({"insert": "c", "$db": "db"})
    request = parse_request(*_split(_msg(body + _sequence("documents", [{"a": 1}, {"a": 2}]))))
    assert request.db == "db"
    assert request.command_name == "insert"
    assert request.body["documents"] == [{"a": 1}, {"a": 2}]
    assert not request.more_to_come


def test_field_in_body_and_sequence_is_rejected() -> None:
    """The same field as a body key and a sequence is a protocol error."""
    body = b"\x00" + bson.encode({"insert": "c", "documents": [], "$db": "db"})
    with pytest.raises(WireError, match="both"):
        parse_request(*_split(_msg(body + _sequence("documents", [{"a": 1}]))))


def _with_checksum(message: bytes) -> bytes:
    """Append the CRC-32C trailer (computed over the whole message, length updated first)."""
    head = struct.pack("<i", len(message) + 4) + message[4:]
    return head + struct.pack("<I", crc32c(head))


def test_checksum_is_verified_and_flags_are_read() -> None:
    """checksumPresent: a correct CRC-32C is accepted; moreToCome and exhaustAllowed reported."""
    body = b"\x00" + bson.encode({"ping": 1, "$db": "admin"})
    flags = 1 | 2 | (1 << 16)
    request = parse_request(*_split(_with_checksum(_msg(body, flags=flags))))
    assert request.body == {"ping": 1, "$db": "admin"}
    assert request.more_to_come
    assert request.exhaust_allowed


def test_wrong_checksum_is_rejected() -> None:
    """A trailer that does not match the content is a WireError, as mongod rejects it."""
    body = b"\x00" + bson.encode({"ping": 1, "$db": "admin"})
    good = _with_checksum(_msg(body, flags=1))
    bad = good[:-4] + bytes([good[-4] ^ 0xFF]) + good[-3:]
    with pytest.raises(WireError, match="checksum"):
        parse_request(*_split(bad))
    with pytest.raises(WireError, match="checksum"):
        parse_request(*_split(_msg(body + b"\xde\xad\xbe\xef", flags=1)))


def test_checksum_inside_compressed_message_covers_the_original() -> None:
    """Compressed: the CRC covers the original OP_MSG header and body, as the sender built it."""
    original = _with_checksum(_msg(b"\x00" + bson.encode({"ping": 1, "$db": "admin"}), flags=1))
    inner = original[16:]
    wrapped = struct.pack("<iiB", OP_MSG, len(inner), 2) + zlib.compress(inner)
    message = struct.pack("<iiii", 16 + len(wrapped), 7, 0, OP_COMPRESSED) + wrapped
    assert parse_request(*_split(message)).body == {"ping": 1, "$db": "admin"}
    tampered = bytearray(inner)
    tampered[-5] ^= 0x01  # inside the BSON body's terminator area: content changes
    wrapped = struct.pack("<iiB", OP_MSG, len(inner), 2) + zlib.compress(bytes(tampered))
    message = struct.pack("<iiii", 16 + len(wrapped), 7, 0, OP_COMPRESSED) + wrapped
    with pytest.raises(WireError):
        parse_request(*_split(message))


def test_crc32c_matches_the_standard_check_value() -> None:
    """CRC-32C("123456789") is 0xE3069283 (RFC 3720), in parts and with the pure fallback."""
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(b"1234", memoryview(b"56789")) == 0xE3069283
    assert checksum._pure_extend(0, b"123456789") == 0xE3069283
    assert checksum._pure_extend(checksum._pure_extend(0, b"1234"), b"56789") == 0xE3069283


def _compressed(inner: bytes, declared: int, compressor: int = 2, request_id: int = 3) -> bytes:
    wrapped = struct.pack("<iiB", OP_MSG, declared, compressor) + inner
    return struct.pack("<iiii", 16 + len(wrapped), request_id, 0, OP_COMPRESSED) + wrapped


@pytest.mark.parametrize(
    ("payload", "declared", "reason"),
    [
        (zlib.compress(b"\x00" * (1 << 24)), 100, "beyond the declared"),
        (zlib.compress(b"\x00" * 1000), 48_000_000, "outside"),
        (zlib.compress(b"\x00" * 1000), -1, "outside"),
        (zlib.compress(b"\x00" * 1000), 2000, "inflates to 1000 bytes, 2000 declared"),
        (zlib.compress(b"\x00" * 1000) + b"trailing", 1000, "follow"),
        (zlib.compress(b"\x00" * 1000)[:-3], 1000, "ends early|bad zlib"),
        (b"not zlib at all", 10, "bad zlib"),
    ],
)
def test_compressed_size_lies_are_rejected(payload: bytes, declared: int, reason: str) -> None:
    """The declared size bounds inflation; any disagreement with the stream is refused."""
    with pytest.raises(WireError, match=reason):
        parse_request(*_split(_compressed(payload, declared)))


def test_decompression_never_produces_more_than_declared() -> None:
    """A 16 MiB bomb declared as 100 bytes inflates at most 101 bytes before failing."""
    bomb = zlib.compress(b"\x00" * (1 << 24))
    with pytest.raises(compression.CompressionError):
        compression.decompress(2, bomb, 100, 1 << 30)
    produced = zlib.decompressobj().decompress(bomb, 101)
    assert len(produced) == 101  # the same call the server makes: bounded by max_length


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (_msg(b"\x00" + bson.encode({"ping": 1})), "without \\$db"),
        (_msg(b"\x05" + bson.encode({"ping": 1, "$db": "a"})), "section kind"),
        (_msg(b"\x00" + b"\x10\x00\x00\x00garbage-garbage!"), "BSON"),
        (_msg(b""), "short"),
        (_msg(b"\x00" + bson.encode({"ping": 1, "$db": "a"}), flags=1 << 3), "flag"),
        (struct.pack("<iiii", 20, 1, 0, 2002) + b"\x00" * 4, "opcode"),
    ],
)
def test_malformed_requests_raise_wire_error(message: bytes, reason: str) -> None:
    """Bad sections, BSON, flags and opcodes are WireErrors, never other exceptions."""
    with pytest.raises(WireError, match=reason):
        parse_request(*_split(message))


@pytest.mark.parametrize("length", [0, 16, 48_000_001, -5])
def test_bad_lengths_are_rejected_from_the_header(length: int) -> None:
    """A declared length outside (16, maxMessageSizeBytes] is refused before reading on."""
    with pytest.raises(WireError, match="length"):
        parse_header(struct.pack("<iiii", length, 1, 0, OP_MSG))


def test_op_query_command_and_op_reply() -> None:
    """A legacy OP_QUERY on admin.$cmd parses, and its reply is an OP_REPLY."""
    query = bson.encode({"$query": {"isMaster": 1, "helloOk": True}})
    payload = struct.pack("<i", 4) + b"admin.$cmd\x00" + struct.pack("<ii", 0, -1) + query
    message = struct.pack("<iiii", 16 + len(payload), 9, 0, OP_QUERY) + payload
    request = parse_request(*_split(message))
    assert request.legacy
    assert request.body == {"isMaster": 1, "helloOk": True}
    assert request.query_flags == 4
    reply = pack_reply(request, {"ok": 1.0}, 10)
    header, rest = _split(reply)
    assert (header.op_code, header.response_to) == (OP_REPLY, 9)
    assert parse_reply(header, rest) == {"ok": 1.0}


def test_op_query_outside_cmd_namespace_is_rejected() -> None:
    """Legacy queries on a collection are not supported."""
    payload = struct.pack("<i", 0) + b"db.coll\x00" + struct.pack("<ii", 0, 1) + bson.encode({})
    message = struct.pack("<iiii", 16 + len(payload), 9, 0, OP_QUERY) + payload
    with pytest.raises(WireError, match="only commands"):
        parse_request(*_split(message))


def test_zlib_compressed_round_trip() -> None:
    """An OP_COMPRESSED(zlib) request parses and its reply is compressed the same way."""
    inner = pack_msg({"ping": 1, "$db": "admin"}, 3, 0)[16:]
    wrapped = struct.pack("<iiB", OP_MSG, len(inner), 2) + zlib.compress(inner)
    message = struct.pack("<iiii", 16 + len(wrapped), 3, 0, OP_COMPRESSED) + wrapped
    request = parse_request(*_split(message))
    assert request.compressor_id == 2
    header, rest = _split(pack_reply(request, {"ok": 1.0}, 4))
    assert header.op_code == OP_COMPRESSED
    assert parse_reply(header, rest) == {"ok": 1.0}


def test_unknown_compressor_is_rejected() -> None:
    """snappy/zstd (ids 1 and 3) are not offered, so receiving them is an error."""
    inner = pack_msg({"ping": 1, "$db": "admin"}, 3, 0)[16:]
    wrapped = struct.pack("<iiB", OP_MSG, len(inner), 1) + inner
    message = struct.pack("<iiii", 16 + len(wrapped), 3, 0, OP_COMPRESSED) + wrapped
    with pytest.raises(WireError, match="compressor"):
        parse_request(*_split(message))


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=16, max_size=200))
def test_random_bytes_only_ever_raise_wire_error(data: bytes) -> None:
    """Whatever arrives, framing either yields a request or raises WireError."""
    try:
        header = parse_header(data[:16])
        body = data[16 : header.length]
        if len(body) == header.length - 16:
            parse_request(header, body)
    except WireError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=16, max_value=120), st.binary(min_size=1, max_size=8))
def test_corrupted_valid_messages_only_raise_wire_error(position: int, noise: bytes) -> None:
    """Overwriting bytes of a valid OP_MSG with sequences never escapes as another exception."""
    body = b"\x00" + bson.encode({"insert": "c", "$db": "db"})
    message = bytearray(_msg(body + _sequence("documents", [{"a": 1}, {"b": "x" * 20}])))
    message[position : position + len(noise)] = noise
    header = Header(len(message), 1, 0, OP_MSG)
    with contextlib.suppress(WireError):
        parse_request(header, bytes(message[16:]))


_PURE_BSON_SCRIPT = """
import sys
sys.modules["bson._cbson"] = None  # bson's pure-Python decoder, as on PyPy
import bson
from bson.objectid import ObjectId
from backpressure.testing.server.wire import framing

assert not bson.has_c()
oid = ObjectId()
doc = bson.encode({"_id": oid})
body = bson.encode({"insert": "c", "$db": "db"})
payload = bytearray(b"\\x00\\x00\\x00\\x00\\x00" + body)
payload += b"\\x01" + (4 + 10 + len(doc)).to_bytes(4, "little") + b"documents\\x00" + doc
header = framing.Header(framing.HEADER_SIZE + len(payload), 7, 0, framing.OP_MSG)
request = framing.parse_request(header, payload)
assert request.body["documents"] == [{"_id": oid}], request.body
print("decoded")
"""


def test_pure_python_bson_decodes_a_request_held_in_a_bytearray() -> None:
    """Without bson's C extension (PyPy), a document sequence holding an ObjectId decodes: the
    server reads messages into a ``bytearray``, which the pure-Python decoder cannot slice into
    an ObjectId (it closed the connection: "id must be an instance of (bytes, str, ObjectId)")."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _PURE_BSON_SCRIPT], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "decoded"
