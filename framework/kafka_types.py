"""Kafka's classic (non-flexible) primitive types for small version-prefixed blobs.

Some bytes Kafka defines are not requests and carry their own ``int16`` version prefix: the
consumer protocol's subscription and assignment (inside JoinGroup/SyncGroup), the sticky
assignors' user data, and the keys and values of ``__consumer_offsets`` records. They are tiny and
written once per rebalance or commit, so a plain ``struct`` reader/writer is simpler (and faster)
than a schema library. Sans-IO; no flexible versions (tagged fields) are needed for these blobs,
except skipping a trailing tag buffer, which :meth:`Reader.skip_tagged_fields` does.
"""

from __future__ import annotations

import struct

from .errors import CorruptMessage

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class Reader:
    """Reads Kafka primitives from a buffer; raises :class:`CorruptMessage` when it runs short."""

    __slots__ = ("_buf", "pos")

    def __init__(self, buf: bytes | bytearray | memoryview, pos: int = 0) -> None:
        self._buf = memoryview(buf)
        self.pos = pos

    def remaining(self) -> int:
        return len(self._buf) - self.pos

    def _take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self._buf):
            raise CorruptMessage(f"buffer too short: need {n} bytes at {self.pos}, have {len(self._buf) - self.pos}")
        view = self._buf[self.pos : self.pos + n]
        self.pos += n
        return view

    def raw(self, n: int) -> bytes:
        """The next ``n`` bytes."""
        return bytes(self._take(n))

    def int16(self) -> int:
        value: int = _I16.unpack(self._take(2))[0]
        return value

    def int32(self) -> int:
        value: int = _I32.unpack(self._take(4))[0]
        return value

    def int64(self) -> int:
        value: int = _I64.unpack(self._take(8))[0]
        return value

    def nullable_string(self) -> str | None:
        n = self.int16()
        if n < 0:
            return None
        return bytes(self._take(n)).decode("utf-8")

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise CorruptMessage(f"null where a string is required (at {self.pos - 2})")
        return value

    def nullable_bytes(self) -> bytes | None:
        n = self.int32()
        if n < 0:
            return None
        return bytes(self._take(n))

    def array_length(self) -> int:
        """An array's element count; -1 (null) reads as 0 elements."""
        n = self.int32()
        if n > self.remaining():  # every element takes at least one byte: reject absurd counts early
            raise CorruptMessage(f"array of {n} elements in {self.remaining()} bytes")
        return max(n, 0)

    def uvarint(self) -> int:
        shift = 0
        value = 0
        while True:
            b = self._take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise CorruptMessage("varint too long")

    def skip_tagged_fields(self) -> None:
        """Skip a flexible version's tag buffer (count, then tag/size/bytes triples)."""
        for _ in range(self.uvarint()):
            self.uvarint()
            self._take(self.uvarint())


class Writer:
    """Appends Kafka primitives to a bytearray; :meth:`getvalue` returns the bytes."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def getvalue(self) -> bytes:
        return bytes(self._buf)

    def int16(self, value: int) -> Writer:
        self._buf += _I16.pack(value)
        return self

    def int32(self, value: int) -> Writer:
        self._buf += _I32.pack(value)
        return self

    def int64(self, value: int) -> Writer:
        self._buf += _I64.pack(value)
        return self

    def nullable_string(self, value: str | None) -> Writer:
        if value is None:
            return self.int16(-1)
        data = value.encode("utf-8")
        self.int16(len(data))
        self._buf += data
        return self

    def string(self, value: str) -> Writer:
        return self.nullable_string(value)

    def nullable_bytes(self, value: bytes | bytearray | memoryview | None) -> Writer:
        if value is None:
            return self.int32(-1)
        self.int32(len(value))
        self._buf += value
        return self

    def array_length(self, n: int) -> Writer:
        return self.int32(n)

    # -- flexible versions (KIP-482): compact strings and arrays, tag buffers --------------------
    def int8(self, value: int) -> Writer:
        self._buf += value.to_bytes(1, "big", signed=True)
        return self

    def uvarint(self, value: int) -> Writer:
        while value >= 0x80:
            self._buf.append((value & 0x7F) | 0x80)
            value >>= 7
        self._buf.append(value)
        return self

    def compact_nullable_string(self, value: str | None) -> Writer:
        if value is None:
            return self.uvarint(0)
        data = value.encode("utf-8")
        self.uvarint(len(data) + 1)
        self._buf += data
        return self

    def compact_string(self, value: str) -> Writer:
        return self.compact_nullable_string(value)

    def compact_array_length(self, n: int) -> Writer:
        return self.uvarint(n + 1)

    def compact_bytes(self, value: bytes) -> Writer:
        self.uvarint(len(value) + 1)
        self._buf += value
        return self

    def raw(self, data: bytes) -> Writer:
        """Bytes already encoded (a tagged field's body)."""
        self._buf += data
        return self

    def uuid(self, raw16: bytes) -> Writer:
        """A UUID's 16 bytes."""
        if len(raw16) != 16:
            raise ValueError("a UUID is 16 bytes")
        self._buf += raw16
        return self

    def empty_tagged_fields(self) -> Writer:
        return self.uvarint(0)


_MASK32 = 0xFFFFFFFF


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units, as a
    signed 32-bit int (characters outside the BMP count as two surrogate units, as in Java).
    Kafka places groups on ``__consumer_offsets`` partitions by it, and Java's ``HashMap``
    iteration order (which the Java assignors' tie-breaking follows) derives from it."""
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & _MASK32
    return h - (1 << 32) if h & 0x80000000 else h


def java_hashmap_order(keys: list[str]) -> list[str]:
    """The iteration order of a ``java.util.HashMap<String, ?>`` built by putting ``keys`` in
    order into a default-sized map: by bucket (``(h ^ h >>> 16) & (capacity - 1)``), and in
    insertion order within a bucket (Java keeps that order through resizes)."""
    capacity = 16
    while len(keys) > capacity * 3 // 4:
        capacity *= 2

    def bucket(key: str) -> int:
        h = java_string_hash(key) & _MASK32
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(keys, key=bucket)


__all__ = ["Reader", "Writer", "java_hashmap_order", "java_string_hash"]
