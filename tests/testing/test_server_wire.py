"""Sans-I/O tests of the embedded server's wire framing."""

from __future__ import annotations

import contextlib
import struct
import zlib

import bson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def test_checksum_trailer_is_skipped_and_flags_are_read() -> None:
    """checksumPresent drops 4 trailing bytes; moreToCome and exhaustAllowed are reported."""
    body = b"\x00" + bson.encode({"ping": 1, "$db": "admin"})
    flags = 1 | 2 | (1 << 16)
    request = parse_request(*_split(_msg(body + b"\xde\xad\xbe\xef", flags=flags)))
    assert request.body == {"ping": 1, "$db": "admin"}
    assert request.more_to_come
    assert request.exhaust_allowed


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
