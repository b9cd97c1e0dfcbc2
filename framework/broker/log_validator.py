"""Validation of a produce payload before it is appended (Kafka's ``LogValidator``).

The hot path reads headers: :func:`odradek.records.validate_batches` checks magic, framing,
size against ``max.message.bytes``, the CRC and the counts from each 61-byte header plus one CRC
call, then the rules Kafka applies to client produce are checked here: exactly one batch per
partition (Produce v3+), no control batches, zstd only from Produce v7, a producer id on
transactional batches. ``LogAppendTime`` topics get their timestamp written into the header (the
CRC is recomputed, records stay untouched).

The CRC proves the bytes arrived as the producer sent them, not that they hold records: a buggy
or hostile producer can send a CRC-valid batch whose records section is garbage, which every
consumer would then fail on. Two cheap checks stop most of it, as Kafka's LogValidator (which
reads every record) stops all of it: the section must be large enough for ``recordCount``
records (7 bytes is the smallest record), and a compressed section must decompress (C code, a
few microseconds per 16 KiB batch, where decoding every record in Python would cost more than
the rest of the produce path). A topic with ``record.validation=full`` (broker default
``log.record.validation``) has every record read instead, as Kafka does
(:func:`odradek.records.check_records`, ~0.6 us a record), and a compressed batch whose inner
offset deltas are not 0, 1, ... rebuilt with consecutive ones, as Kafka rebuilds it.

Two rules need the records themselves and so leave the hot path, exactly where Kafka does too:
compacted topics require a key on every record (their records are read as under ``full``), and a
topic whose ``compression.type`` names a codec recompresses batches written with another one
(its records are read as under ``full`` first, and get consecutive offsets, as Kafka's rebuild
assigns them).

Every path that inflates a client's compressed section (the check above, full validation,
compaction's key check, the rebuild) passes the broker's ``message.max.decompressed.bytes`` to the
codec, which stops at that bound instead of inflating a "decompression bomb" (a few KiB claiming
gigabytes): the produce gets MESSAGE_TOO_LARGE naming the sizes, on which producers split the batch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from .. import errors, records
from ..config import LONG_MAX, TopicConfig
from ..errors import CorruptMessage, ErrorCode, InvalidRecord, KafkaError, UnsupportedCompressionType
from ..interfaces import BatchMeta, Codec
from .producer_state import AppendOrigin

#: Produce version from which zstd batches are allowed (KIP-110).
ZSTD_MIN_PRODUCE_VERSION = 7
LOG_APPEND_TIME = "LogAppendTime"
#: attributes is an int16 at byte 21; the codec id sits in the low bits of its second byte
_COMPRESSION_BYTE = records.ATTRIBUTES_OFFSET + 1
#: the smallest encoded record: length, attributes, timestamp and offset deltas, key and value
#: lengths (-1: null) and a header count, one byte each
MIN_RECORD_BYTES = 7
#: the default of ``message.max.decompressed.bytes``: how far a produced batch's records section
#: may inflate (64 MiB: 64 times Kafka's default max.message.bytes, far above what a producer's
#: batch.size gives, far below what would take a broker's memory)
DEFAULT_MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024
_TOPIC_COMPRESSION = {
    "uncompressed": records.Compression.NONE,
    "gzip": records.Compression.GZIP,
    "snappy": records.Compression.SNAPPY,
    "lz4": records.Compression.LZ4,
    "zstd": records.Compression.ZSTD,
}


@dataclass(frozen=True, slots=True)
class AppendSettings:
    """The topic configs the append path reads, resolved once per config change (reading them
    from a TopicConfig on every produce costs more than validating the batch headers)."""

    max_message_bytes: int
    log_append_time: bool
    compact: bool
    target_compression: int | None  # None: keep the producer's codec (or see target_codec)
    #: how far a CreateTime timestamp may lie before / after the broker's clock:
    #: message.timestamp.before/after.max.ms (KIP-937) when set, else the deprecated
    #: message.timestamp.difference.max.ms, as Kafka's LogConfig; None when nothing limits it
    timestamp_window_ms: tuple[int, int] | None
    full_validation: bool = False  # record.validation=full: decode every record
    compression_level: int | None = None  # compression.<codec>.level of target_compression
    segment_bytes: int | None = None  # segment.bytes: no append may be larger than a segment
    #: a third-party codec's name from compression.type: its id is found among the broker's
    #: codecs on each append (the topic config does not know the plugins)
    target_codec: str | None = None

    @classmethod
    def from_config(cls, config: TopicConfig) -> AppendSettings:
        target = config["compression.type"]
        # Kafka's LogConfig: before/after when set (not LONG_MAX), else the deprecated difference
        max_diff = int(config["message.timestamp.difference.max.ms"])
        before = int(config["message.timestamp.before.max.ms"])
        after = int(config["message.timestamp.after.max.ms"])
        before = max_diff if before >= LONG_MAX else before
        after = max_diff if after >= LONG_MAX else after
        return cls(
            config.max_message_bytes,
            config.message_timestamp_type == LOG_APPEND_TIME,
            config.compact,
            int(_TOPIC_COMPRESSION[target]) if target in _TOPIC_COMPRESSION else None,
            None if before >= LONG_MAX and after >= LONG_MAX else (before, after),
            config["record.validation"] == "full",
            _compression_level(config, target),
            config.segment_bytes,
            None if target == "producer" or target in _TOPIC_COMPRESSION else target,
        )


def _compression_level(config: TopicConfig, target: str) -> int | None:
    """The configured level of the topic's codec (KIP-390); None for the codec's own default."""
    if target not in ("gzip", "lz4", "zstd"):
        return None
    level = int(config[f"compression.{target}.level"])
    return None if level == -1 and target == "gzip" else level


class ValidatedRecords(NamedTuple):
    """What the append path appends: the (possibly rewritten) bytes and their batch metadata
    (a NamedTuple: one is built per produced partition)."""

    data: bytearray | memoryview
    batches: list[BatchMeta]
    log_append_time: int  # -1 unless the topic uses LogAppendTime


def validate_records(
    data: bytearray | memoryview,
    settings: AppendSettings,
    *,
    origin: AppendOrigin,
    api_version: int,
    now_ms: int,
    codecs: Mapping[int, Codec],
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> ValidatedRecords:
    """Validate ``data`` for a leader append, raising the Kafka error a client should see.

    ``max_decompressed_bytes`` bounds what a client's compressed records section may inflate to
    (``message.max.decompressed.bytes``); past it the codec stops and MESSAGE_TOO_LARGE is raised.
    """
    if not data:
        raise InvalidRecord("a produce request must hold one record batch per partition")
    client = origin is AppendOrigin.CLIENT
    batches = records.validate_batches(data, max_batch_bytes=settings.max_message_bytes, from_client=client)
    if client and len(batches) != 1:
        raise InvalidRecord(f"produce requests may hold exactly one record batch per partition, got {len(batches)}")
    window = settings.timestamp_window_ms
    for meta in batches:
        cid = data[meta.position + _COMPRESSION_BYTE] & records.COMPRESSION_MASK
        if cid:
            if cid == records.Compression.ZSTD and api_version < ZSTD_MIN_PRODUCE_VERSION:
                raise UnsupportedCompressionType(f"zstd needs Produce v{ZSTD_MIN_PRODUCE_VERSION}+, got v{api_version}")
            if cid not in codecs:
                raise UnsupportedCompressionType(f"no codec with compression id {cid}")
        if client and not settings.compact:  # a compacted topic decodes every record below
            if cid:
                _check_decompresses(data, meta, codecs[cid], max_decompressed_bytes)
            elif meta.size - records.HEADER_SIZE < MIN_RECORD_BYTES * meta.record_count:
                raise _too_many_records(meta, meta.size - records.HEADER_SIZE)
        if meta.producer_id >= 0:
            if meta.base_sequence < 0 and not meta.is_control:
                raise InvalidRecord(f"producer {meta.producer_id} sent a batch without a sequence number")
        elif meta.is_transactional:
            raise InvalidRecord("a transactional batch needs a producer id")
        if window is not None and not settings.log_append_time:
            _check_timestamps(data, meta, window, now_ms, codecs, max_decompressed_bytes)
    renumber: set[int] = set()
    if client and (settings.compact or settings.full_validation):
        for meta in batches:  # raises CorruptMessage / InvalidRecord for the first bad record
            section = _records_section(data, meta, codecs, max_decompressed_bytes)
            if not _check_records(data, meta, section, require_keys=settings.compact):
                renumber.add(meta.position)
    target = settings.target_compression
    if target is None and settings.target_codec is not None:
        target = records.codec_named(settings.target_codec, codecs).id
    if client and (target is not None or renumber):
        rebuild = _Rebuild(
            codecs,
            settings.compression_level,
            max_decompressed_bytes,
            checked=settings.compact or settings.full_validation,
        )
        data, batches = rebuild.run(data, batches, target, renumber)
    if settings.segment_bytes is not None and len(data) > settings.segment_bytes:
        # Kafka's UnifiedLog.append: a segment must hold the whole append (as validated, recompressed)
        raise KafkaError(
            f"the records are {len(data)} bytes, more than the topic's segment.bytes ({settings.segment_bytes})",
            code=ErrorCode.RECORD_LIST_TOO_LARGE,
        )
    log_append_time = -1
    if settings.log_append_time:
        log_append_time = now_ms
        for i, meta in enumerate(batches):
            records.set_log_append_time(data, meta.position, now_ms)
            batches[i] = meta._replace(max_timestamp=now_ms)
    return ValidatedRecords(data, batches, log_append_time)


def _check_decompresses(data: bytearray | memoryview, meta: BatchMeta, codec: Codec, limit: int) -> None:
    """A compressed records section decompresses, within ``limit`` bytes, into room for
    ``recordCount`` records."""
    size = len(_inflate(data, meta, codec, limit))
    if size < MIN_RECORD_BYTES * meta.record_count:
        raise _too_many_records(meta, size)


def _inflate(data: bytearray | memoryview, meta: BatchMeta, codec: Codec, limit: int) -> bytes:
    """The batch's records section decompressed, to at most ``limit`` bytes: past it
    MESSAGE_TOO_LARGE naming the sizes, a codec failure CORRUPT_MESSAGE."""
    section = memoryview(data)[meta.position + records.HEADER_SIZE : meta.position + meta.size]
    try:
        return records.decompress_section(codec, section, limit)
    except errors.DecompressionLimitExceeded as exc:
        claims = f"declares {exc.declared} bytes" if exc.declared is not None else "inflates to more than"
        raise errors.MessageTooLarge(
            f"the batch's {len(section)}-byte {codec.name} records section {claims}"
            f"{', more than' if exc.declared is not None else ''} the broker's "
            f"message.max.decompressed.bytes ({limit})"
        ) from None
    except Exception as exc:  # each codec library raises its own error type
        raise CorruptMessage(f"the batch's records do not decompress with {codec.name}: {exc!r}") from None


def _records_section(
    data: bytearray | memoryview, meta: BatchMeta, codecs: Mapping[int, Codec], limit: int
) -> bytes | memoryview:
    """The batch's records section, decompressed (within ``limit``) if it is compressed."""
    cid = data[meta.position + _COMPRESSION_BYTE] & records.COMPRESSION_MASK
    if cid:
        return _inflate(data, meta, codecs[cid], limit)
    return memoryview(data)[meta.position + records.HEADER_SIZE : meta.position + meta.size]


def _too_many_records(meta: BatchMeta, section_bytes: int) -> KafkaError:
    return CorruptMessage(f"the batch declares {meta.record_count} records in a {section_bytes}-byte records section")


def _check_timestamps(
    data: bytearray | memoryview,
    meta: BatchMeta,
    window: tuple[int, int],
    now_ms: int,
    codecs: Mapping[int, Codec],
    max_decompressed_bytes: int,
) -> None:
    """The timestamp window (see :attr:`AppendSettings.timestamp_window_ms`) on the header's
    first and max timestamps; -1 (no timestamp) is not checked, as in Kafka's LogValidator. A
    batch outside it is INVALID_TIMESTAMP naming the records at fault (Produce v8's record errors,
    KIP-467), found by reading the batch only then."""
    before, after = window
    header = records.parse_header(data, meta.position)
    for ts in (header.first_timestamp, header.max_timestamp):
        if ts == records.NO_TIMESTAMP:
            continue
        if now_ms - ts > before:
            message = f"timestamp {ts} is more than {before} ms before the broker's time {now_ms}"
        elif ts - now_ms > after:
            message = f"timestamp {ts} is more than {after} ms after the broker's time {now_ms}"
        else:
            continue
        raise KafkaError(
            message,
            code=ErrorCode.INVALID_TIMESTAMP,
            record_errors=_records_out_of_window(
                lambda: records.decode_batch(
                    data, meta.position, codecs=codecs, max_decompressed=max_decompressed_bytes
                ),
                window,
                now_ms,
            ),
        )


def _records_out_of_window(
    read: Callable[[], records.RecordBatch], window: tuple[int, int], now_ms: int
) -> tuple[tuple[int, str | None], ...]:
    """(index in the batch, why) of each record of the batch ``read`` decodes whose timestamp
    lies outside ``window`` around ``now_ms``; none when the batch does not decode (the error
    stands without indexes)."""
    before, after = window
    try:
        batch = read()
    except Exception:  # best effort: a client's bytes must not fail the error's report
        return ()
    return tuple(
        (i, f"timestamp {r.timestamp} is out of range [{now_ms - before}, {now_ms + after}]")
        for i, r in enumerate(batch.records)
        if r.timestamp != records.NO_TIMESTAMP and not now_ms - before <= r.timestamp <= now_ms + after
    )


def _check_records(
    data: bytearray | memoryview, meta: BatchMeta, section: bytes | memoryview, *, require_keys: bool
) -> bool:
    """Every record of the batch read (:func:`odradek.records.check_records`) from its
    ``section`` (decompressed); False when a compressed batch's offset deltas are not 0, 1, ...
    and it must be renumbered (Kafka rebuilds such a batch; an uncompressed one is kept as sent)."""
    first_timestamp = records.parse_header(data, meta.position).first_timestamp
    consecutive = records.check_records(
        section, meta.record_count, require_keys=require_keys, first_timestamp=first_timestamp
    )
    cid = data[meta.position + _COMPRESSION_BYTE] & records.COMPRESSION_MASK
    return consecutive or not cid


@dataclass(frozen=True, slots=True)
class _Rebuild:
    """Rewrites batches for the topic's ``compression.type`` or with consecutive offset deltas."""

    codecs: Mapping[int, Codec]
    level: int | None
    limit: int  # message.max.decompressed.bytes
    checked: bool  # every record was already read by check_records (full validation, compaction)

    def run(
        self, data: bytearray | memoryview, batches: list[BatchMeta], target: int | None, renumber: set[int]
    ) -> tuple[bytearray | memoryview, list[BatchMeta]]:
        """Rewrite the batches whose codec differs from ``target`` (None: keep each batch's), and
        those at a position in ``renumber``; the others are copied as they are. Producer id,
        epoch, sequence and transactional flag stay.

        A rewritten batch's records get offset deltas 0, 1, ... whatever the producer wrote, as
        Kafka's LogValidator assigns consecutive offsets to the batches it rebuilds: the stored
        batch is then consistent with its header (lastOffsetDelta = recordCount - 1, checked on
        produce). Its records are read as under full validation first, so a record no Kafka
        field can hold (an offset delta beyond int32, a timestamp beyond int64) is CORRUPT_MESSAGE
        instead of failing while the batch is written."""
        out = bytearray()
        new_batches: list[BatchMeta] = []
        changed = False
        for meta in batches:
            header = records.parse_header(data, meta.position)
            chunk: bytes | bytearray | memoryview = data[meta.position : meta.position + meta.size]
            codec = header.compression_id if target is None else target
            if header.compression_id != codec or meta.position in renumber:
                changed = True
                chunk = self._rebuilt(data, meta, header, codec)
            new_batches.append(meta._replace(position=len(out), size=len(chunk)))
            out += chunk
        return (out, new_batches) if changed else (data, batches)

    def _rebuilt(self, data: bytearray | memoryview, meta: BatchMeta, header: records.BatchHeader, codec: int) -> bytes:
        section = _records_section(data, meta, self.codecs, self.limit)
        if not self.checked:
            _check_records(data, meta, section, require_keys=False)
        decoded = records.decode_records(bytes(section), header.record_count, 0, header.first_timestamp)
        return records.build_batch(
            [(r.key, r.value, r.headers, r.timestamp) for r in decoded],
            compression=codec,
            codecs=self.codecs,
            compression_level=self.level,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
            is_transactional=header.is_transactional,
        )
