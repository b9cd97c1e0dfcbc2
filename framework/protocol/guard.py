"""A bounds check of a message before kio's native reader sees it.

kio's reader (Rust) preallocates every array from its length field: an int32 count of 2**31 in
a 20-byte frame makes it request tens of gigabytes, and Rust aborts the whole process on
allocation failure. A broker cannot let one client's bytes kill it, so every message is first
walked here, schema-driven, without building objects: each length and count is checked against
the bytes that remain (every array element takes at least one byte), tagged fields are checked
inside their declared size. Only a message that passes reaches kio.

Unknown tagged fields are skipped, as KIP-482 asks of every receiver (Kafka adds tags to existing
versions without a version bump), but kio's reader refuses them; so a message that has any is
copied once more without them (:func:`entity_strip`, re-checking every length as it goes) and
that copy is what kio reads. Messages without unknown tags -- all of them, from today's clients --
pay nothing for it.

The walker is compiled once per kio class into closures; a typical request costs a few
microseconds (bench/protocol_produce.py measures the Produce path, which is hand-written).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from functools import cache
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

from ..errors import InvalidRequest, KafkaError
from .headers import write_uvarint

Buffer = bytes | bytearray | memoryview
#: skip(buf, pos, end) -> position after the value; raises InvalidRequest when it does not fit
Skip = Callable[[Buffer, int, int], int]
#: strip(buf, pos, end, out) -> position after the value, appended to ``out`` without unknown tags
Strip = Callable[[Buffer, int, int, bytearray], int]


class _UnknownTag(Exception):
    """The fast walk met an unknown tagged field: the message needs :func:`entity_strip`."""


_FIXED = {
    "bool": 1,
    "int8": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}


def _fail(what: str) -> KafkaError:
    return InvalidRequest(f"malformed message: {what}")


def _uvarint(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise _fail("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise _fail("varint too long")


def _int16(buf: Buffer, pos: int, end: int) -> int:
    if pos + 2 > end:
        raise _fail("truncated int16")
    return int.from_bytes(buf[pos : pos + 2], "big", signed=True)


def _int32(buf: Buffer, pos: int, end: int) -> int:
    if pos + 4 > end:
        raise _fail("truncated int32")
    return int.from_bytes(buf[pos : pos + 4], "big", signed=True)


def _fixed(size: int) -> Skip:
    def skip(buf: Buffer, pos: int, end: int) -> int:
        pos += size
        if pos > end:
            raise _fail("truncated field")
        return pos

    return skip


def _length_prefixed(kafka_type: str, flexible: bool, nullable: bool = True) -> Skip:
    legacy_string = kafka_type == "string"

    def skip(buf: Buffer, pos: int, end: int) -> int:
        if flexible:
            n, pos = _uvarint(buf, pos, end)
            n -= 1  # compact: length + 1, 0 is null
        elif legacy_string:
            n = _int16(buf, pos, end)
            pos += 2
        else:
            n = _int32(buf, pos, end)
            pos += 4
        if n < -1:
            raise _fail("negative length")
        if n == -1 and not nullable:
            raise _fail("null in a field that cannot be null")
        pos += max(n, 0)
        if pos > end:
            raise _fail("length beyond the message")
        return pos

    return skip


def _array_length(buf: Buffer, pos: int, end: int, flexible: bool, nullable: bool) -> tuple[int, int]:
    """An array's element count (-1: null) and the position after it, checked: not below -1,
    null only where the field may be null (Kafka's readers refuse it), and no more elements than
    bytes left (every element takes at least one)."""
    if flexible:
        n, pos = _uvarint(buf, pos, end)
        n -= 1
    else:
        n = _int32(buf, pos, end)
        pos += 4
    if n < -1:
        raise _fail("negative array length")
    if n == -1 and not nullable:
        raise _fail("null array in a field that cannot be null")
    if n > end - pos:
        raise _fail(f"array of {n} elements in {end - pos} bytes")
    return n, pos


def _array(item: Skip, flexible: bool, nullable: bool = True) -> Skip:
    def skip(buf: Buffer, pos: int, end: int) -> int:
        n, pos = _array_length(buf, pos, end, flexible, nullable)
        for _ in range(n):
            pos = item(buf, pos, end)
        return pos

    return skip


def _nullable_entity(inner: Skip) -> Skip:
    def skip(buf: Buffer, pos: int, end: int) -> int:
        if pos >= end:
            raise _fail("truncated struct marker")
        marker = buf[pos]
        if marker == 0xFF:  # -1: null (KIP-893)
            return pos + 1
        return inner(buf, pos + 1, end)

    return skip


def _field_skip(f: Any, flexible: bool, is_tag: bool) -> Skip:
    kind = classify_field(f)
    nullable = is_optional(f)
    if isinstance(kind, PrimitiveField | PrimitiveTupleField):
        kafka_type = get_schema_field_type(f)
        size = _FIXED.get(kafka_type)
        if isinstance(kind, PrimitiveTupleField):
            item = _fixed(size) if size is not None else _length_prefixed(kafka_type, flexible)
            return _array(item, flexible, nullable)
        return _fixed(size) if size is not None else _length_prefixed(kafka_type, flexible, nullable)
    if isinstance(kind, EntityTupleField):
        return _array(entity_skip(kind.type_), flexible, nullable)
    assert isinstance(kind, EntityField)
    inner = entity_skip(kind.type_)
    return _nullable_entity(inner) if (not is_tag and is_optional(f)) else inner


@cache
def entity_skip(cls: type[Any]) -> Skip:
    """The bounds-checking walker for one kio entity class."""
    flexible = bool(cls.__flexible__)
    regular: list[Skip] = []
    tagged: dict[int, Skip] = {}
    for f in fields(cls):
        tag = get_field_tag(f)
        if tag is None:
            regular.append(_field_skip(f, flexible, False))
        else:
            tagged[int(tag)] = _field_skip(f, flexible, True)

    def skip(buf: Buffer, pos: int, end: int) -> int:
        for s in regular:
            pos = s(buf, pos, end)
        if flexible:
            count, pos = _uvarint(buf, pos, end)
            if count > end - pos:
                raise _fail("too many tagged fields")
            for _ in range(count):
                tag, pos = _uvarint(buf, pos, end)
                size, pos = _uvarint(buf, pos, end)
                stop = pos + size
                if stop > end:
                    raise _fail("tagged field beyond the message")
                inner = tagged.get(tag)
                if inner is None:
                    raise _UnknownTag(tag)
                if inner(buf, pos, stop) != stop:
                    raise _fail(f"tagged field {tag} does not fill its size")
                pos = stop
        return pos

    return skip


# -- stripping unknown tagged fields ------------------------------------------------------------


def _copy(skip: Skip) -> Strip:
    def strip(buf: Buffer, pos: int, end: int, out: bytearray) -> int:
        stop = skip(buf, pos, end)
        out += buf[pos:stop]
        return stop

    return strip


def _array_strip(item: Strip, flexible: bool, nullable: bool = True) -> Strip:
    def strip(buf: Buffer, pos: int, end: int, out: bytearray) -> int:
        start = pos
        n, pos = _array_length(buf, pos, end, flexible, nullable)
        out += buf[start:pos]
        for _ in range(n):
            pos = item(buf, pos, end, out)
        return pos

    return strip


def _nullable_entity_strip(inner: Strip) -> Strip:
    def strip(buf: Buffer, pos: int, end: int, out: bytearray) -> int:
        if pos >= end:
            raise _fail("truncated struct marker")
        marker = buf[pos]
        out.append(marker)
        if marker == 0xFF:
            return pos + 1
        return inner(buf, pos + 1, end, out)

    return strip


def _field_strip(f: Any, flexible: bool, is_tag: bool) -> Strip:
    kind = classify_field(f)
    if isinstance(kind, EntityTupleField):
        return _array_strip(entity_strip(kind.type_), flexible, is_optional(f))
    if isinstance(kind, EntityField):
        inner = entity_strip(kind.type_)
        return _nullable_entity_strip(inner) if (not is_tag and is_optional(f)) else inner
    return _copy(_field_skip(f, flexible, is_tag))  # primitives hold no tags


@cache
def entity_strip(cls: type[Any]) -> Strip:
    """Copies one ``cls`` entity without its unknown tagged fields (at any depth), checking
    every length as :func:`entity_skip` does."""
    flexible = bool(cls.__flexible__)
    regular: list[Strip] = []
    tagged: dict[int, Strip] = {}
    for f in fields(cls):
        tag = get_field_tag(f)
        if tag is None:
            regular.append(_field_strip(f, flexible, False))
        else:
            tagged[int(tag)] = _field_strip(f, flexible, True)

    def strip(buf: Buffer, pos: int, end: int, out: bytearray) -> int:
        for s in regular:
            pos = s(buf, pos, end, out)
        if not flexible:
            return pos
        count, pos = _uvarint(buf, pos, end)
        if count > end - pos:
            raise _fail("too many tagged fields")
        kept: list[tuple[int, bytearray]] = []
        for _ in range(count):
            tag, pos = _uvarint(buf, pos, end)
            size, pos = _uvarint(buf, pos, end)
            stop = pos + size
            if stop > end:
                raise _fail("tagged field beyond the message")
            inner = tagged.get(tag)
            if inner is not None:  # a known tag, itself stripped; unknown ones are left out
                value = bytearray()
                if inner(buf, pos, stop, value) != stop:
                    raise _fail(f"tagged field {tag} does not fill its size")
                kept.append((tag, value))
            pos = stop
        out += write_uvarint(len(kept))
        for tag, value in kept:
            out += write_uvarint(tag)
            out += write_uvarint(len(value))
            out += value
        return pos

    return strip


def check_message(cls: type, buf: Buffer, offset: int) -> bytes | None:
    """Raise ``InvalidRequest`` unless ``buf[offset:]`` is exactly one plausible ``cls`` message.

    Returns None when kio may read ``buf`` from ``offset`` as it is, or, when the message has
    tagged fields ``cls`` does not know (KIP-482: skip them), a copy of the message without
    them, for kio to read from 0.
    """
    # ``cls`` is a bare ``type``: mypy does not see ``type[Any]`` as Hashable (python/mypy#11470),
    # which the cached ``entity_skip`` requires of its argument.
    try:
        end = entity_skip(cls)(buf, offset, len(buf))
    except _UnknownTag:
        out = bytearray()
        end = entity_strip(cls)(buf, offset, len(buf), out)
        stripped: bytes | None = bytes(out)
    else:
        stripped = None
    if end != len(buf):
        raise InvalidRequest(f"{len(buf) - end} unexpected bytes after the message")
    return stripped


__all__ = ["check_message", "entity_skip", "entity_strip"]
