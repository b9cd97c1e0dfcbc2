"""Request and response headers, hand-parsed: they sit in front of every message.

A Kafka frame on the wire is a big-endian int32 size followed by that many bytes; everything in
this package that *reads* takes the bytes after the size (the "frame"), everything that *writes*
returns a frame without the size unless it says otherwise (the Fetch envelope writes its own).

Request header v1: api_key int16, api_version int16, correlation_id int32, client_id nullable
string (int16 length -- legacy even in v2). v2 adds tagged fields (uvarint count, then tag, size,
data per field). Response header v0: correlation_id; v1 adds tagged fields (an empty set: 0x00).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from ..errors import InvalidRequest
from .apis import ApiKey, is_supported, request_header_version, response_header_version

_HEADER_FIXED = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length
_INT32 = struct.Struct(">i")


class RequestHeader(NamedTuple):
    """A parsed request header; ``body_offset`` is where the request body starts in the frame."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int


def read_uvarint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """An unsigned varint at ``pos``: (value, position after it); raises on truncation/overflow."""
    result = 0
    shift = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise InvalidRequest("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise InvalidRequest("varint longer than 10 bytes")


def write_uvarint(value: int) -> bytes:
    """The unsigned varint encoding of ``value`` (>= 0)."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def skip_tagged_fields(buf: bytes | bytearray | memoryview, pos: int) -> int:
    """Skip a tagged-field section (count, then tag/size/data each); returns the position after."""
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise InvalidRequest("truncated tagged field")
    return pos


def parse_request_header(frame: bytes | bytearray | memoryview) -> RequestHeader:
    """Parse the request header at the start of ``frame`` (header v1 or v2 by api/version).

    Works for any api key and version, known or not (an unknown version of a known API still
    gets its header parsed, so the broker can answer or log it). Raises ``InvalidRequest`` when
    the frame is too short for its header. A client id that is not valid UTF-8 is decoded with
    U+FFFD in place of each malformed sequence, as Kafka's Java broker decodes it.
    """
    if len(frame) < _HEADER_FIXED.size:
        raise InvalidRequest(f"frame of {len(frame)} bytes is shorter than a request header")
    api_key, api_version, correlation_id, client_id_len = _HEADER_FIXED.unpack_from(frame, 0)
    pos = _HEADER_FIXED.size
    client_id: str | None
    if client_id_len < 0:
        if client_id_len != -1:
            raise InvalidRequest(f"invalid client id length {client_id_len}")
        client_id = None
    else:
        end = pos + client_id_len
        if end > len(frame):
            raise InvalidRequest("truncated client id")
        # leniently, as Kafka's ``new String(bytes, UTF_8)``: malformed input becomes U+FFFD and
        # the request is served (the client id only labels logs and quotas)
        client_id = bytes(frame[pos:end]).decode("utf-8", errors="replace")
        pos = end
    if request_header_version(api_key, api_version) >= 2:
        try:
            pos = skip_tagged_fields(frame, pos)
        except InvalidRequest:
            # An ApiVersions request of a version the broker does not know is answered from
            # the header alone (KIP-511), so what follows the client id need not parse.
            if api_key != ApiKey.API_VERSIONS or is_supported(api_key, api_version):
                raise
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)


def encode_request_header(api_key: int, api_version: int, correlation_id: int, client_id: str | None) -> bytes:
    """Request header bytes (v1 or v2 by api/version), as a client writes them."""
    if client_id is None:
        cid = b"\xff\xff"
    else:
        raw = client_id.encode("utf-8")
        cid = len(raw).to_bytes(2, "big") + raw
    head = struct.pack(">hhi", api_key, api_version, correlation_id) + cid
    if request_header_version(api_key, api_version) >= 2:
        head += b"\x00"
    return head


def encode_response_header(api_key: int, api_version: int, correlation_id: int) -> bytes:
    """Response header bytes: v0 (correlation id) or v1 (plus empty tagged fields)."""
    if response_header_version(api_key, api_version) >= 1:
        return _INT32.pack(correlation_id) + b"\x00"
    return _INT32.pack(correlation_id)


def parse_response_header(api_key: int, api_version: int, frame: bytes | bytearray | memoryview) -> tuple[int, int]:
    """(correlation_id, body offset) of a response frame to a request of api/version."""
    if len(frame) < 4:
        raise InvalidRequest("response frame shorter than its header")
    (correlation_id,) = _INT32.unpack_from(frame, 0)
    pos = 4
    if response_header_version(api_key, api_version) >= 1:
        pos = skip_tagged_fields(frame, pos)
    return correlation_id, pos


def peek_correlation_id(frame: bytes | bytearray | memoryview) -> int:
    """The correlation id of a response frame (its first 4 bytes), to match it to a request."""
    if len(frame) < 4:
        raise InvalidRequest("response frame shorter than its header")
    value: int = _INT32.unpack_from(frame, 0)[0]
    return value


__all__ = [
    "RequestHeader",
    "encode_request_header",
    "encode_response_header",
    "parse_request_header",
    "parse_response_header",
    "peek_correlation_id",
    "read_uvarint",
    "skip_tagged_fields",
    "write_uvarint",
]
