"""Incremental record decoding for the consumer: as many records as ``poll()`` asks for.

:func:`odradek.records.decode_batch` decodes a whole batch into ``Record`` objects; a broker may
return batches of thousands of records (librdkafka producers write up to 10,000), and a consumer
polling 500 at a time would keep them all alive as two objects each (the record and its headers
list) -- measured at twice the cost per record, mostly garbage-collector time. A
:class:`RecordCursor` instead keeps the batch's (decompressed) records section and a byte
position, and builds :class:`ConsumerRecord` s -- one object per record, headers an immutable
tuple -- only for the records returned. Batch framing, CRC and decompression stay with
:mod:`odradek.records` and the codec plugins; this module only walks Kafka's varint record layout.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from ..errors import CorruptMessage, InvalidRecord, UnsupportedCompressionType
from ..interfaces import Codec, TopicPartition
from ..records import HEADER_SIZE, LOG_OVERHEAD, BatchHeader, TimestampType, compute_crc

Headers = tuple[tuple[str, bytes | None], ...]


class ConsumerRecord(NamedTuple):
    """One record as ``poll()`` returns it (Kafka's ``ConsumerRecord``).

    A named tuple: the decoder builds it with one C call per record (``tuple.__new__``), which
    is a third of the cost of a class with ``__init__``.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime
    key: bytes | None
    value: bytes | None
    headers: Headers = ()
    leader_epoch: int = -1

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint at ``pos`` (the multi-byte case): (value, position after it)."""
    result = 0
    shift = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptMessage("varint is longer than 10 bytes")


def records_section(
    buf: bytes, pos: int, header: BatchHeader, codecs: Mapping[int, Codec] | None, verify_crc: bool
) -> bytes:
    """The batch at ``pos``'s records section, CRC-checked and decompressed."""
    end = pos + header.batch_length + LOG_OVERHEAD
    if verify_crc and compute_crc(buf, pos, end - pos) != header.crc:
        raise CorruptMessage(f"record batch at offset {header.base_offset} is corrupt (CRC mismatch)")
    section = memoryview(buf)[pos + HEADER_SIZE : end]
    cid = header.attributes & 0x07
    if not cid:
        return bytes(section)
    codec = codecs.get(cid) if codecs is not None else None
    if codec is None:
        from ..manager import default_plugins

        codec = default_plugins().codecs().get(cid)
        if codec is None:
            raise UnsupportedCompressionType(f"no codec plugin is loaded for compression id {cid}")
    try:
        return codec.decompress(section)
    except Exception as exc:
        raise CorruptMessage(f"record batch at offset {header.base_offset}: {codec.name} failed: {exc!r}") from exc


class RecordCursor:
    """Walks one batch's records section, building records on demand (see module doc)."""

    __slots__ = ("_data", "_left", "_pos", "base_offset", "epoch", "first_timestamp", "lat", "next_offset", "ts_type")

    def __init__(self, data: bytes, header: BatchHeader) -> None:
        self._data = data
        self._pos = 0
        self._left = header.record_count
        self.base_offset = header.base_offset
        self.first_timestamp = header.first_timestamp
        self.next_offset = header.base_offset + header.last_offset_delta + 1
        log_append = bool(header.attributes & 0x08)
        self.ts_type = TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME
        self.lat = header.max_timestamp if log_append else None
        self.epoch = header.partition_leader_epoch

    @property
    def exhausted(self) -> bool:
        return self._left <= 0

    def take(self, topic: str, partition: int, position: int, want: int, out: list[ConsumerRecord]) -> tuple[int, int]:
        """Append up to ``want`` records at or after ``position`` to ``out``; returns (new
        position, records appended). Records before ``position`` are skipped undecoded but for
        their lengths. The per-record hot loop of the consumer: varints of one and two bytes (every length up to
        8191 and most deltas) are decoded inline, longer ones by :func:`_varint`.
        """
        data = self._data
        pos = self._pos
        left = self._left
        base = self.base_offset
        first_ts = self.first_timestamp
        lat = self.lat
        ts_type = self.ts_type
        epoch = self.epoch
        append = out.append
        new = tuple.__new__
        record_cls = ConsumerRecord
        taken = 0
        try:
            while left > 0 and taken < want:
                b = data[pos]
                if b < 0x80:
                    length = (b >> 1) ^ -(b & 1)
                    pos += 1
                elif data[pos + 1] < 0x80:
                    z = (b & 0x7F) | (data[pos + 1] << 7)
                    length = (z >> 1) ^ -(z & 1)
                    pos += 2
                else:
                    length, pos = _varint(data, pos)
                end = pos + length
                left -= 1
                p = pos + 1  # skip the attributes byte
                b = data[p]
                if b < 0x80:
                    ts_delta = (b >> 1) ^ -(b & 1)
                    p += 1
                elif data[p + 1] < 0x80:
                    z = (b & 0x7F) | (data[p + 1] << 7)
                    ts_delta = (z >> 1) ^ -(z & 1)
                    p += 2
                else:
                    ts_delta, p = _varint(data, p)
                b = data[p]
                if b < 0x80:
                    off_delta = (b >> 1) ^ -(b & 1)
                    p += 1
                elif data[p + 1] < 0x80:
                    z = (b & 0x7F) | (data[p + 1] << 7)
                    off_delta = (z >> 1) ^ -(z & 1)
                    p += 2
                else:
                    off_delta, p = _varint(data, p)
                offset = base + off_delta
                if offset < position:
                    pos = end
                    continue
                b = data[p]
                if b == 1:  # varint -1: null
                    key: bytes | None = None
                    p += 1
                else:
                    if b < 0x80 and not b & 1:
                        klen = b >> 1
                        p += 1
                    else:
                        klen, p = _varint(data, p)
                        if klen < 0:
                            raise InvalidRecord(f"record at offset {offset} has a key of length {klen}")
                    key = data[p : p + klen]
                    p += klen
                b = data[p]
                if b == 1:
                    value: bytes | None = None
                    p += 1
                else:
                    if b < 0x80 and not b & 1:
                        vlen = b >> 1
                        p += 1
                    elif data[p + 1] < 0x80 and not b & 1:
                        vlen = ((b & 0x7F) | (data[p + 1] << 7)) >> 1
                        p += 2
                    else:
                        vlen, p = _varint(data, p)
                        if vlen < 0:
                            raise InvalidRecord(f"record at offset {offset} has a value of length {vlen}")
                    value = data[p : p + vlen]
                    p += vlen
                if data[p] == 0:
                    headers: Headers = ()
                    p += 1
                else:
                    headers, p = self._headers(data, p)
                if p != end:
                    raise InvalidRecord(f"record at offset {offset} declares {length} bytes but holds {p - pos}")
                append(
                    new(
                        record_cls,
                        (
                            topic,
                            partition,
                            offset,
                            lat if lat is not None else first_ts + ts_delta,
                            ts_type,
                            key,
                            value,
                            headers,
                            epoch,
                        ),
                    )
                )
                taken += 1
                position = offset + 1
                pos = end
        except IndexError:
            raise CorruptMessage(f"records of the batch at offset {base} are truncated") from None
        self._pos = pos
        self._left = left
        if left <= 0:
            position = max(position, self.next_offset)
        return position, taken

    @staticmethod
    def _headers(data: bytes, p: int) -> tuple[Headers, int]:
        count, p = _varint(data, p)
        if count < 0:
            raise InvalidRecord(f"record has {count} headers")
        out: list[tuple[str, bytes | None]] = []
        for _ in range(count):
            hklen, p = _varint(data, p)
            if hklen < 0:
                raise InvalidRecord("record header key has a negative length")
            try:
                hkey = data[p : p + hklen].decode()
            except UnicodeDecodeError as exc:
                raise InvalidRecord(f"record header key is not UTF-8: {exc}") from None
            p += hklen
            hvlen, p = _varint(data, p)
            if hvlen >= 0:
                out.append((hkey, data[p : p + hvlen]))
                p += hvlen
            else:
                out.append((hkey, None))
        return tuple(out), p
