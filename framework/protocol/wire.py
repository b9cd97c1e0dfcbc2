"""Bounds-checked readers of Kafka's primitive types, for the hand-written codecs: the
non-flexible ones, and the compact lengths and tagged fields of the flexible versions (KIP-482).

Every read checks the remaining length first and raises ``InvalidRequest`` naming the request,
so a decoder built from these never raises anything else on a client's bytes and never trusts a
count to size a loop (an array count larger than the bytes left is refused before the loop).
"""

from __future__ import annotations

import struct

from ..errors import InvalidRequest
from .headers import read_uvarint

Buffer = bytes | bytearray | memoryview

I16 = struct.Struct(">h")
I32 = struct.Struct(">i")


def need(buf: Buffer, pos: int, size: int, what: str) -> None:
    if pos + size > len(buf):
        raise InvalidRequest(f"truncated {what}")


def read_string(buf: Buffer, pos: int, what: str, *, nullable: bool) -> tuple[str | None, int]:
    """An int16-length UTF-8 string (-1: null when ``nullable``) and the position after it."""
    need(buf, pos, 2, what)
    (n,) = I16.unpack_from(buf, pos)
    pos += 2
    if n < 0:
        if not nullable or n != -1:
            raise InvalidRequest(f"invalid string length in {what}")
        return None, pos
    need(buf, pos, n, what)
    try:
        return str(buf[pos : pos + n], "utf-8"), pos + n
    except UnicodeDecodeError:
        raise InvalidRequest(f"a string in {what} is not UTF-8") from None


def read_count(buf: Buffer, pos: int, what: str, element_bytes: int = 2) -> tuple[int, int]:
    """An int32 array count (null, -1, reads as empty, as Kafka treats it) and the position after
    it. Each element takes at least ``element_bytes``: a count beyond what is left is a lie."""
    need(buf, pos, 4, what)
    (n,) = I32.unpack_from(buf, pos)
    if n < 0:
        n = 0
    if n > (len(buf) - pos - 4) // element_bytes:
        raise InvalidRequest(f"array count {n} exceeds the remaining {what}")
    return n, pos + 4


def read_compact_count(buf: Buffer, pos: int, what: str, element_bytes: int = 1) -> tuple[int, int]:
    """A compact array's length (an unsigned varint of length+1; 0, null, reads as empty) and the
    position after it; a length beyond what is left is refused, as by :func:`read_count`."""
    n, pos = read_uvarint(buf, pos)
    n = max(n - 1, 0)
    if n > (len(buf) - pos) // element_bytes:
        raise InvalidRequest(f"array count {n} exceeds the remaining {what}")
    return n, pos


def read_compact_bytes_length(buf: Buffer, pos: int, what: str) -> tuple[int, int]:
    """A compact (nullable) string's or bytes' length, -1 for null, checked against what is left."""
    n, pos = read_uvarint(buf, pos)
    n -= 1
    need(buf, pos, max(n, 0), what)
    return n, pos


def read_compact_string(buf: Buffer, pos: int, what: str, *, nullable: bool) -> tuple[str | None, int]:
    """A compact UTF-8 string (null only when ``nullable``) and the position after it."""
    n, pos = read_compact_bytes_length(buf, pos, what)
    if n < 0:
        if not nullable:
            raise InvalidRequest(f"a null string in {what}")
        return None, pos
    try:
        return str(buf[pos : pos + n], "utf-8"), pos + n
    except UnicodeDecodeError:
        raise InvalidRequest(f"a string in {what} is not UTF-8") from None


def skip_tagged_fields(buf: Buffer, pos: int, what: str) -> int:
    """The position after a tagged-field section whose fields the reader does not use (Kafka's
    generated readers keep tags they do not know aside, unread)."""
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        need(buf, pos, size, what)
        pos += size
    return pos
