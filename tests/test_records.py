"""RecordBatch v2: round-trips, header-only validation, in-place rewrites, control batches, and
cross-checks against two independent encoders/decoders (kafka-python's and aiokafka's, both its
Cython and pure-Python builds) for every compression type."""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest
from aiokafka.record import default_records as aio_records
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch as KpBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder

from odradek import records as R
from odradek.errors import (
    CorruptMessage,
    ErrorCode,
    InvalidRecord,
    KafkaError,
    MessageTooLarge,
    UnsupportedCompressionType,
)
from odradek.interfaces import BatchMeta, Codec
from odradek.manager import Plugins, build_plugin_manager
from odradek.records import Compression, ControlRecordType, TimestampType

INT64 = st.integers(-(2**63), 2**63 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
# big values (2- and 3-byte length varints) are built from a small seed to keep entropy low
BIG = st.builds(lambda seed, n: (seed * n)[:n], st.binary(min_size=1, max_size=8), st.integers(8000, 9000))
BLOB = st.none() | st.binary(max_size=200) | BIG
HEADERS = st.lists(st.tuples(st.text(max_size=12), st.none() | st.binary(max_size=40)), max_size=3)
# timestamps near one another (as a producer writes them) plus the occasional -1 / far-off one
TIMESTAMPS = st.integers(1_700_000_000_000, 1_700_000_100_000) | st.sampled_from([-1, 0, 2**40])
RECORD = st.tuples(BLOB, BLOB, HEADERS, TIMESTAMPS)
RECORDS = st.lists(RECORD, min_size=1, max_size=12)
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


_CODECS: dict[int, Codec] = Plugins(
    build_plugin_manager(entry_points_enabled=False, extra=["odradek.plugins.compress.plugin"])
).codecs()


def _expected(records: Sequence[tuple[Any, ...]], base_offset: int = 0) -> list[R.Record]:
    return [R.Record(base_offset + i, ts, k, v, list(h)) for i, (k, v, h, ts) in enumerate(records)]


def _rewrite_header(buf: bytes, fmt: str, offset: int, value: int, *, fix_crc: bool = True) -> bytes:
    out = bytearray(buf)
    struct.pack_into(fmt, out, offset, value)
    if fix_crc:
        struct.pack_into(">I", out, R.CRC_OFFSET, R.compute_crc(out))
    return bytes(out)


# ---------------------------------------------------------------------------------------------
# round trips
# ---------------------------------------------------------------------------------------------


@FAST
@given(
    records=RECORDS,
    compression=st.sampled_from(list(Compression)),
    base_offset=st.integers(0, 2**62),
    producer_id=st.integers(-1, 2**63 - 1),
    producer_epoch=st.integers(-1, 2**15 - 1),
    base_sequence=st.integers(-1, 2**31 - 1),
    is_transactional=st.booleans(),
    leader_epoch=INT32,
)
def test_build_decode_round_trip(
    records: list[tuple[Any, ...]],
    compression: Compression,
    base_offset: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    is_transactional: bool,
    leader_epoch: int,
) -> None:
    buf = R.build_batch(
        records,
        base_offset=base_offset,
        compression=compression,
        codecs=_CODECS,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
        partition_leader_epoch=leader_epoch,
    )
    batch = R.decode_batch(buf, codecs=_CODECS)
    h = batch.header
    timestamps = [r[3] for r in records]
    assert (h.base_offset, h.partition_leader_epoch, h.magic) == (base_offset, leader_epoch, 2)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (producer_id, producer_epoch, base_sequence)
    assert (h.record_count, h.last_offset_delta, h.size) == (len(records), len(records) - 1, len(buf))
    assert (h.first_timestamp, h.max_timestamp) == (timestamps[0], max(timestamps))
    assert h.compression is compression and h.compression_id == compression
    assert h.is_transactional is is_transactional and not h.is_control
    assert h.timestamp_type is TimestampType.CREATE_TIME
    assert (h.last_offset, h.next_offset) == (base_offset + len(records) - 1, base_offset + len(records))
    assert batch.records == _expected(records, base_offset)
    assert R.parse_header(buf) == h
    meta = R.validate_batches(buf)
    assert meta == [
        BatchMeta(
            0, len(buf), len(records) - 1, len(records), max(timestamps), producer_id, producer_epoch,
            base_sequence, is_transactional, False,
        )
    ]  # fmt: skip
    assert h.meta(0) == meta[0]


@FAST
@given(records=RECORDS, gaps=st.lists(st.integers(0, 5), min_size=12, max_size=12))
def test_record_objects_and_offset_gaps_round_trip(records: list[tuple[Any, ...]], gaps: list[int]) -> None:
    """Records given as objects (as compaction re-writes them) with offset gaps kept."""
    deltas = [sum(gaps[: i + 1]) + i for i in range(len(records))]
    objs = [R.Record(0, ts, k, v, list(h)) for k, v, h, ts in records]
    buf = R.build_batch(objs, base_offset=100, offset_deltas=deltas)
    batch = R.decode_batch(buf)
    assert [r.offset for r in batch.records] == [100 + d for d in deltas]
    assert batch.header.last_offset_delta == deltas[-1]
    assert [(r.key, r.value, r.headers, r.timestamp) for r in batch.records] == [
        (o.key, o.value, o.headers, o.timestamp) for o in objs
    ]
    R.validate_batches(buf, exact_counts=False)
    if deltas[-1] != len(records) - 1:
        with pytest.raises(InvalidRecord):
            R.validate_batches(buf)


def test_none_timestamp_means_now() -> None:
    buf = R.build_batch([(b"k", b"v", [], None), (None, b"w", [], 5)])
    batch = R.decode_batch(buf)
    now = batch.records[0].timestamp
    assert now > 1_600_000_000_000
    assert batch.header.first_timestamp == now and batch.header.max_timestamp == now
    assert batch.records[1].timestamp == 5


def test_empty_record_list_is_refused() -> None:
    with pytest.raises(ValueError):
        R.build_batch([])


def test_varint_boundaries_round_trip() -> None:
    """Lengths and deltas at every varint width boundary (1/2/3 bytes, 64-bit extremes)."""
    sizes = [0, 63, 64, 8191, 8192, 70_000]
    records = [(b"k" * n, b"v" * n, [("h" * min(n, 300), b"x" * n)], 1000 + n) for n in sizes]
    records.append((None, None, [], -(2**62)))
    records.append((b"", b"", [], 2**62))
    batch = R.decode_batch(R.build_batch(records))
    assert batch.records == _expected(records)


def test_iter_batches_and_headers_over_a_log_slice() -> None:
    a = R.build_batch([(b"a", b"1", [], 10)], base_offset=0)
    b = R.build_batch(
        [(b"b", b"2", [], 20), (b"c", b"3", [], 30)], base_offset=1, compression=Compression.GZIP, codecs=_CODECS
    )
    c = R.build_batch([(b"d", b"4", [], 40)], base_offset=3)
    log = a + b + c
    assert [pos for pos, _ in R.iter_headers(log)] == [0, len(a), len(a) + len(b)]
    assert [r.offset for batch in R.iter_batches(log, codecs=_CODECS) for r in batch.records] == [0, 1, 2, 3]
    # a fetch response may end inside a batch: stop before it, never raise
    for cut in (1, 20, 61, len(c) - 1):
        partial = log[: len(log) - cut]
        assert [pos for pos, _ in R.iter_headers(partial)] == [0, len(a)]
        assert len(list(R.iter_batches(partial, codecs=_CODECS))) == 2
    metas = R.validate_batches(log)
    assert [(m.position, m.size, m.record_count) for m in metas] == [
        (0, len(a), 1),
        (len(a), len(b), 2),
        (len(a) + len(b), len(c), 1),
    ]


def test_default_codecs_come_from_the_process_wide_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    """``codecs=None`` resolves the process-wide plugin set, once, on the first compressed batch."""
    import odradek.manager

    calls: list[int] = []
    plugins = Plugins(build_plugin_manager(entry_points_enabled=False, extra=["odradek.plugins.compress.plugin"]))

    def fake_default() -> Plugins:
        calls.append(1)
        return plugins

    monkeypatch.setattr(odradek.manager, "default_plugins", fake_default)
    monkeypatch.setattr(R, "_default_codecs", None)
    plain = R.build_batch([(b"k", b"v", [], 1)])
    R.decode_batch(plain)
    assert calls == []  # uncompressed batches never need the plugins
    buf = R.build_batch([(b"k", b"v" * 100, [], 1)], compression=Compression.ZSTD)
    assert R.decode_batch(buf).records[0].value == b"v" * 100
    assert calls == [1]


# ---------------------------------------------------------------------------------------------
# corruption and validation
# ---------------------------------------------------------------------------------------------

_SAMPLE = R.build_batch(
    [(b"key-%d" % i, b"value-%d" % i * 5, [("trace", b"t%d" % i)], 1_700_000_000_000 + i) for i in range(20)],
    producer_id=42,
    producer_epoch=3,
    base_sequence=17,
)
_SAMPLE_ZSTD = R.build_batch([(b"k", b"v" * 500, [], 1)] * 20, compression=Compression.ZSTD, codecs=_CODECS)


@settings(max_examples=200, deadline=None)
@given(
    sample=st.sampled_from([_SAMPLE, _SAMPLE_ZSTD]), data=st.data(), flip=st.integers(1, 255)
)  # fmt: skip
def test_flipped_byte_in_crc_range_is_corrupt_message(sample: bytes, data: st.DataObject, flip: int) -> None:
    pos = data.draw(st.integers(R.ATTRIBUTES_OFFSET, len(sample) - 1))
    bad = bytearray(sample)
    bad[pos] ^= flip
    with pytest.raises(CorruptMessage) as exc:
        R.validate_batches(bad)
    assert exc.value.code is ErrorCode.CORRUPT_MESSAGE
    with pytest.raises(CorruptMessage):
        R.decode_batch(bad, codecs=_CODECS)


@settings(max_examples=100, deadline=None)
@given(data=st.data(), flip=st.integers(1, 255))
def test_flipped_byte_in_crc_field_length_or_magic_is_corrupt(data: st.DataObject, flip: int) -> None:
    pos = data.draw(st.sampled_from([*range(8, 12), *range(16, 21)]))
    bad = bytearray(_SAMPLE)
    bad[pos] ^= flip
    with pytest.raises(CorruptMessage):
        R.validate_batches(bad)


@settings(max_examples=50, deadline=None)
@given(pos=st.sampled_from([*range(0, 8), *range(12, 16)]), flip=st.integers(1, 255))
def test_bytes_outside_the_crc_are_free_to_change(pos: int, flip: int) -> None:
    """baseOffset and partitionLeaderEpoch lie outside the CRC: the broker rewrites them freely."""
    buf = bytearray(_SAMPLE)
    buf[pos] ^= flip
    assert len(R.validate_batches(buf)) == 1


@pytest.mark.parametrize("cut", [1, 5, 16, 17, 30, 60, 61, 62, len(_SAMPLE) - 1])
def test_truncated_batch_is_corrupt_message(cut: int) -> None:
    short = _SAMPLE[:cut]
    with pytest.raises(CorruptMessage, match="truncated"):
        R.validate_batches(short)
    with pytest.raises(CorruptMessage):
        R.decode_batch(short)
    assert list(R.iter_headers(short)) == []
    assert list(R.iter_batches(short)) == []


def test_trailing_bytes_after_a_whole_batch_are_corrupt_message() -> None:
    with pytest.raises(CorruptMessage):
        R.validate_batches(_SAMPLE + _SAMPLE[:30])


@pytest.mark.parametrize("magic", [0, 1, 3, 255])
def test_bad_magic_is_corrupt_message(magic: int) -> None:
    bad = bytearray(_SAMPLE)
    bad[R.MAGIC_OFFSET] = magic  # magic lies outside the CRC: only the magic check can catch it
    with pytest.raises(CorruptMessage, match="magic"):
        R.validate_batches(bad)
    with pytest.raises(CorruptMessage, match="magic"):
        R.decode_batch(bad)
    with pytest.raises(CorruptMessage, match="magic"):
        R.validate_batches(bad[:40])
    # from a producer (Kafka's ProduceRequest.validateRecords): INVALID_RECORD, which clients do
    # not retry, instead of the retriable CORRUPT_MESSAGE
    for payload in (bad, bad[:40]):
        with pytest.raises(InvalidRecord, match="magic") as exc:
            R.validate_batches(payload, from_client=True)
        assert exc.value.code is ErrorCode.INVALID_RECORD


def test_batch_length_below_minimum_is_corrupt_message() -> None:
    bad = _rewrite_header(_SAMPLE, ">i", R.BATCH_LENGTH_OFFSET, 48, fix_crc=False)
    with pytest.raises(CorruptMessage):
        R.validate_batches(bad)
    with pytest.raises(CorruptMessage):
        list(R.iter_headers(bad))
    assert R.MIN_BATCH_LENGTH == 49


def test_empty_payload_holds_no_batches() -> None:
    assert R.validate_batches(b"") == []


def test_message_too_large() -> None:
    assert len(R.validate_batches(_SAMPLE, max_batch_bytes=len(_SAMPLE))) == 1
    with pytest.raises(MessageTooLarge) as exc:
        R.validate_batches(_SAMPLE, max_batch_bytes=len(_SAMPLE) - 1)
    assert exc.value.code is ErrorCode.MESSAGE_TOO_LARGE


def test_record_count_must_match_last_offset_delta() -> None:
    for count in (19, 21):
        bad = _rewrite_header(_SAMPLE, ">i", R.RECORD_COUNT_OFFSET, count)
        with pytest.raises(InvalidRecord) as exc:
            R.validate_batches(bad)
        assert exc.value.code is ErrorCode.INVALID_RECORD
    # replicated data may have holes left by compaction: fewer records than the offset range
    fewer = _rewrite_header(_SAMPLE, ">i", R.RECORD_COUNT_OFFSET, 19)
    assert R.validate_batches(fewer, exact_counts=False)[0].record_count == 19
    more = _rewrite_header(_SAMPLE, ">i", R.RECORD_COUNT_OFFSET, 21)
    with pytest.raises(InvalidRecord):
        R.validate_batches(more, exact_counts=False)
    for offset in (R.RECORD_COUNT_OFFSET, R.LAST_OFFSET_DELTA_OFFSET):
        with pytest.raises(InvalidRecord):
            R.validate_batches(_rewrite_header(_SAMPLE, ">i", offset, -1), exact_counts=False)


def test_client_produce_checks() -> None:
    assert len(R.validate_batches(_SAMPLE, from_client=True)) == 1
    marker = R.build_control_batch(ControlRecordType.COMMIT, producer_id=1, producer_epoch=0)
    assert R.validate_batches(marker)[0].is_control  # the coordinator's own append is fine
    with pytest.raises(InvalidRecord, match="control"):
        R.validate_batches(marker, from_client=True)
    with pytest.raises(InvalidRecord, match="baseOffset"):
        R.validate_batches(R.build_batch([(b"k", b"v", [], 1)], base_offset=7), from_client=True)
    with pytest.raises(InvalidRecord, match="baseSequence"):
        R.validate_batches(R.build_batch([(b"k", b"v", [], 1)], producer_id=9, producer_epoch=0), from_client=True)
    lat = R.build_batch([(b"k", b"v", [], 1)], timestamp_type=TimestampType.LOG_APPEND_TIME)
    with pytest.raises(KafkaError) as exc:
        R.validate_batches(lat, from_client=True)
    assert exc.value.code is ErrorCode.INVALID_TIMESTAMP


def test_validation_never_decompresses() -> None:
    """Header-only: a CRC-valid gzip batch whose body is not gzip still validates; decode fails."""
    good = R.build_batch([(b"k", b"v" * 100, [], 1)], compression=Compression.GZIP, codecs=_CODECS)
    garbage = bytearray(good[: R.HEADER_SIZE] + b"\x00not gzip at all\x00")
    struct.pack_into(">i", garbage, R.BATCH_LENGTH_OFFSET, len(garbage) - R.LOG_OVERHEAD)
    struct.pack_into(">I", garbage, R.CRC_OFFSET, R.compute_crc(garbage))

    class Exploding(Mapping[int, Codec]):
        def __getitem__(self, key: int) -> Codec:
            raise AssertionError("validate_batches touched a codec")

        def __iter__(self) -> Any:
            raise AssertionError("validate_batches touched a codec")

        def __len__(self) -> int:
            raise AssertionError("validate_batches touched a codec")

    assert R.validate_batches(garbage)[0].record_count == 1
    with pytest.raises(CorruptMessage, match="gzip"):
        R.decode_batch(garbage, codecs=_CODECS)
    with pytest.raises(AssertionError):
        R.decode_batch(garbage, codecs=Exploding())


def test_unknown_compression_id() -> None:
    buf = _rewrite_header(_SAMPLE, ">h", R.ATTRIBUTES_OFFSET, 6)
    assert R.validate_batches(buf)[0].record_count == 20  # a codec id is not the broker's business
    with pytest.raises(UnsupportedCompressionType):
        R.decode_batch(buf, codecs=_CODECS)
    with pytest.raises(UnsupportedCompressionType):
        R.parse_header(buf).compression  # noqa: B018
    assert R.parse_header(buf).compression_id == 6


def test_malformed_records_section() -> None:
    one = R.build_batch([(b"k", b"v", [], 1)])
    # header claims two records but the section holds one
    with pytest.raises(CorruptMessage):
        R.decode_batch(_rewrite_header(one, ">i", R.RECORD_COUNT_OFFSET, 2))
    # header claims zero records but the section holds one
    with pytest.raises(InvalidRecord):
        R.decode_batch(_rewrite_header(one, ">i", R.RECORD_COUNT_OFFSET, 0))
    # a record whose length varint says more than its fields hold
    body = bytearray(one[R.HEADER_SIZE :])
    body[0] += 2  # zigzag +1 byte
    bad = one[: R.HEADER_SIZE] + bytes(body) + b"\x00"
    bad = _rewrite_header(bad, ">i", R.BATCH_LENGTH_OFFSET, len(bad) - R.LOG_OVERHEAD)
    with pytest.raises(InvalidRecord):
        R.decode_batch(bad)
    # negative header count
    neg = R.encode_records([(b"k", b"v", [], 1)], 1)[:-1] + b"\x01"
    with pytest.raises(InvalidRecord, match="header count"):
        R.decode_records(neg, 1, 0, 1)
    # a varint running past the end
    with pytest.raises(CorruptMessage):
        R.decode_records(b"\x80", 1, 0, 0)
    with pytest.raises(CorruptMessage):
        R.decode_records(b"\xff" * 11, 1, 0, 0)


def _outcome(fn: Callable[[], object]) -> str:
    try:
        fn()
    except (CorruptMessage, InvalidRecord):
        return "refused"
    return "read"


@FAST
@given(records=RECORDS, data=st.data())
def test_check_records_reads_what_decode_records_reads(records: list[tuple[Any, ...]], data: st.DataObject) -> None:
    """The broker's structural check (full validation, compacted topics) accepts exactly the
    records sections the decoder accepts: valid ones, and any of them with a byte changed,
    bytes cut off or bytes added."""
    recs = [(k, v, h, ts if ts is not None and ts >= 0 else 5) for k, v, h, ts in records]
    section = R.encode_records(recs, 5)
    assert R.check_records(section, len(recs)) is True
    assert R.check_records(memoryview(bytearray(section)), len(recs)) is True
    kind = data.draw(st.sampled_from(["flip", "cut", "extend"]))
    bad = bytearray(section)
    if kind == "flip":
        bad[data.draw(st.integers(0, len(bad) - 1))] ^= data.draw(st.integers(1, 255))
    elif kind == "cut":
        del bad[data.draw(st.integers(0, len(bad) - 1)) :]
    else:
        bad += data.draw(st.binary(min_size=1, max_size=4))
    count = len(recs)
    assert _outcome(lambda: R.check_records(bytes(bad), count)) == _outcome(
        lambda: R.decode_records(bytes(bad), count, 0, 0)
    )


def test_check_records_offsets_and_keys() -> None:
    recs = [(b"k", b"v", [], 1), (None, b"w", [("h", b"x")], 2)]
    assert R.check_records(R.encode_records(recs, 1, offset_deltas=[0, 2]), 2) is False
    assert R.check_records(R.encode_records(recs, 1, offset_deltas=[0, 0]), 2) is False
    assert R.check_records(R.encode_records(recs, 1), 2) is True
    with pytest.raises(InvalidRecord, match="key"):
        R.check_records(R.encode_records(recs, 1), 2, require_keys=True)
    assert R.check_records(R.encode_records(recs[:1], 1), 1, require_keys=True) is True
    # a key length running past the record (the record's own length is right)
    section = bytearray(R.encode_records([(b"key", b"value", [], 1)], 1))
    assert section[4] == 6  # zigzag of the key length 3, after length, attributes and two deltas
    section[4] = 40
    with pytest.raises((CorruptMessage, InvalidRecord)):
        R.check_records(bytes(section), 1)
    # a header key that is not UTF-8
    section = R.encode_records([(b"k", b"v", [("ab", None)], 1)], 1).replace(b"ab", b"\xff\xfe")
    with pytest.raises(InvalidRecord, match="UTF-8"):
        R.check_records(section, 1)
    with pytest.raises(InvalidRecord, match="UTF-8"):
        R.decode_records(section, 1, 0, 1)


# ---------------------------------------------------------------------------------------------
# in-place header rewrites (the broker's append path)
# ---------------------------------------------------------------------------------------------


def test_set_base_offset_and_leader_epoch_keep_the_crc() -> None:
    buf = bytearray(_SAMPLE)
    crc = R.parse_header(buf).crc
    R.set_base_offset(buf, 0, 123_456_789_000)
    R.set_partition_leader_epoch(buf, 0, 77)
    h = R.parse_header(buf)
    assert (h.base_offset, h.partition_leader_epoch, h.crc) == (123_456_789_000, 77, crc)
    R.validate_batches(buf)
    assert [r.offset for r in R.decode_batch(buf).records] == list(range(123_456_789_000, 123_456_789_020))


def test_set_base_offset_at_a_position_inside_a_buffer() -> None:
    buf = bytearray(_SAMPLE + _SAMPLE)
    R.set_base_offset(buf, len(_SAMPLE), 20)
    R.set_partition_leader_epoch(buf, len(_SAMPLE), 3)
    batches = list(R.iter_batches(buf))
    assert [b.header.base_offset for b in batches] == [0, 20]
    assert [b.header.partition_leader_epoch for b in batches] == [-1, 3]


def test_set_log_append_time() -> None:
    buf = bytearray(_SAMPLE_ZSTD)
    R.set_log_append_time(buf, 0, 1_800_000_000_000)
    R.validate_batches(buf)
    batch = R.decode_batch(buf, codecs=_CODECS)
    assert batch.header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert {r.timestamp for r in batch.records} == {1_800_000_000_000}
    kp = KpBatch(bytes(buf))
    assert kp.validate_crc() and {r.timestamp for r in kp} == {1_800_000_000_000}


def test_last_sequence_wraps_like_kafka() -> None:
    def header(base_sequence: int, delta: int) -> R.BatchHeader:
        return R.BatchHeader(0, 49, 0, 2, 0, 0, delta, 0, 0, 1, 0, base_sequence, delta + 1)

    assert header(10, 4).last_sequence == 14
    assert header(-1, 4).last_sequence == -1
    assert header(2**31 - 1, 0).last_sequence == 2**31 - 1
    assert header(2**31 - 2, 3).last_sequence == 1


# ---------------------------------------------------------------------------------------------
# control batches
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [ControlRecordType.ABORT, ControlRecordType.COMMIT])
def test_control_batch(kind: ControlRecordType) -> None:
    buf = R.build_control_batch(
        kind, producer_id=4000, producer_epoch=7, coordinator_epoch=12, timestamp=99, base_offset=50
    )
    batch = R.decode_batch(buf)
    h = batch.header
    assert h.is_control and h.is_transactional and batch.is_control
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.record_count) == (4000, 7, -1, 1)
    (record,) = batch.records
    assert (record.offset, record.timestamp) == (50, 99)
    assert record.key == struct.pack(">hh", 0, kind)
    assert record.value == struct.pack(">hi", 0, 12)
    assert R.parse_control_record(record) == R.ControlRecord(kind, 0, 12)
    # independent readers agree
    kp = KpBatch(buf)
    assert kp.is_control_batch and kp.is_transactional and kp.validate_crc()
    (kp_record,) = list(kp)
    assert kp_record.type == kind and kp_record.version == 0
    aio = aio_records.DefaultRecordBatch(buf)
    assert aio.is_control_batch and aio.validate_crc()


def test_control_record_parsing_edge_cases() -> None:
    leader_change = R.Record(0, 0, struct.pack(">hh", 0, 2), b"opaque", [])
    assert R.parse_control_record(leader_change).type is ControlRecordType.LEADER_CHANGE
    unknown = R.Record(0, 0, struct.pack(">hh", 0, 99), None, [])
    assert R.parse_control_record(unknown).type is ControlRecordType.UNKNOWN
    with pytest.raises(InvalidRecord):
        R.parse_control_record(R.Record(0, 0, b"\x00", None, []))
    with pytest.raises(InvalidRecord):
        R.parse_control_record(R.Record(0, 0, struct.pack(">hh", 0, 1), b"\x00", []))
    with pytest.raises(ValueError):
        R.build_control_batch(ControlRecordType.LEADER_CHANGE, producer_id=1, producer_epoch=0)


# ---------------------------------------------------------------------------------------------
# cross-checks against independent implementations
# ---------------------------------------------------------------------------------------------

Builder = Callable[..., Any]
BUILDERS: dict[str, tuple[Builder, Callable[[bytes], Any]]] = {
    "kafka-python": (KpBuilder, KpBatch),
    "aiokafka": (aio_records.DefaultRecordBatchBuilder, aio_records.DefaultRecordBatch),
    "aiokafka-py": (aio_records._DefaultRecordBatchBuilderPy, aio_records._DefaultRecordBatchPy),
}
# compressible values so foreign builders (which fall back to no compression when it does not
# help) really write compressed batches
COMPRESSIBLE = st.none() | st.binary(max_size=20).map(lambda b: b * 50) | st.just(b"")
FOREIGN_RECORDS = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=30),
        COMPRESSIBLE,
        st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=10)), max_size=2),
        st.integers(1_700_000_000_000, 1_700_000_100_000),
    ),
    min_size=1,
    max_size=10,
).filter(lambda rs: sum(len(r[1] or b"") for r in rs) >= 400)


def _foreign_build(
    name: str,
    records: Sequence[tuple[Any, ...]],
    compression: int,
    producer: tuple[int, int, int] = (-1, -1, -1),
    transactional: bool = False,
) -> bytes:
    builder = BUILDERS[name][0](2, compression, transactional, *producer, 10**8)
    for i, (k, v, h, ts) in enumerate(records):
        assert builder.append(i, ts, k, v, h) is not None
    return bytes(builder.build())


@settings(max_examples=25, deadline=None)
@given(
    records=FOREIGN_RECORDS,
    name=st.sampled_from(list(BUILDERS)),
    compression=st.sampled_from(list(Compression)),
    producer=st.sampled_from([(-1, -1, -1), (1234, 5, 0), (2**40, 32767, 2**31 - 10)]),
    transactional=st.booleans(),
)
def test_foreign_batches_decode_in_odradek(
    records: list[tuple[Any, ...]],
    name: str,
    compression: Compression,
    producer: tuple[int, int, int],
    transactional: bool,
) -> None:
    transactional = transactional and producer[0] >= 0
    buf = _foreign_build(name, records, compression, producer, transactional)
    metas = R.validate_batches(buf, from_client=True)
    batch = R.decode_batch(buf, codecs=_CODECS)
    h = batch.header
    assert h.compression is compression  # the data is compressible: nobody fell back to NONE
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == producer
    assert h.is_transactional is transactional
    assert (h.record_count, h.last_offset_delta) == (len(records), len(records) - 1)
    assert (h.first_timestamp, h.max_timestamp) == (records[0][3], max(r[3] for r in records))
    assert metas == [h.meta(0)]
    assert batch.records == _expected(records)
    # byte for byte: odradek encodes the same records section and, uncompressed, the same batch
    section = buf[R.HEADER_SIZE :] if compression == 0 else _CODECS[compression].decompress(buf[R.HEADER_SIZE :])
    assert R.encode_records(records, records[0][3]) == section
    if compression == Compression.NONE:
        ours = R.build_batch(
            records,
            producer_id=producer[0],
            producer_epoch=producer[1],
            base_sequence=producer[2],
            is_transactional=transactional,
            partition_leader_epoch=h.partition_leader_epoch,
        )
        assert ours == buf


@settings(max_examples=25, deadline=None)
@given(
    records=RECORDS,
    name=st.sampled_from(list(BUILDERS)),
    compression=st.sampled_from(list(Compression)),
    base_offset=st.integers(0, 2**40),
    producer=st.sampled_from([(-1, -1, -1), (77, 1, 5)]),
    transactional=st.booleans(),
)
def test_odradek_batches_decode_in_foreign_readers(
    records: list[tuple[Any, ...]],
    name: str,
    compression: Compression,
    base_offset: int,
    producer: tuple[int, int, int],
    transactional: bool,
) -> None:
    buf = R.build_batch(
        records,
        base_offset=base_offset,
        compression=compression,
        codecs=_CODECS,
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=producer[2],
        is_transactional=transactional,
        partition_leader_epoch=9,
    )
    theirs = BUILDERS[name][1](buf)
    assert theirs.validate_crc()
    assert (theirs.base_offset, theirs.compression_type, theirs.is_transactional) == (
        base_offset,
        compression,
        transactional,
    )
    assert (theirs.producer_id, theirs.producer_epoch, theirs.base_sequence) == producer
    assert (theirs.last_offset_delta, theirs.max_timestamp) == (len(records) - 1, max(r[3] for r in records))
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in theirs]
    assert got == [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in _expected(records, base_offset)]


@pytest.mark.parametrize("compression", list(Compression))
@pytest.mark.parametrize("name", list(BUILDERS))
def test_every_compression_crosses_both_ways(name: str, compression: Compression) -> None:
    """A fixed, non-random pass over every (implementation, codec) pair."""
    records = [(b"key-%d" % i, b"payload %d " % i * 40, [("h", b"%d" % i)], 1_700_000_000_000 + i) for i in range(50)]
    foreign = _foreign_build(name, records, compression)
    assert R.parse_header(foreign).compression is compression
    assert R.decode_batch(foreign, codecs=_CODECS).records == _expected(records)
    ours = R.build_batch(records, compression=compression, codecs=_CODECS, base_offset=1000)
    theirs = BUILDERS[name][1](ours)
    assert theirs.validate_crc()
    assert [(r.offset, r.key, r.value) for r in theirs] == [
        (1000 + i, k, v) for i, (k, v, _h, _t) in enumerate(records)
    ]


def test_batch_header_is_immutable_and_parse_header_checks_length() -> None:
    h = R.parse_header(_SAMPLE)
    with pytest.raises(AttributeError):
        h.base_offset = 5  # type: ignore[misc]
    assert h._replace(base_offset=5).base_offset == 5 and h.base_offset == 0
    assert R.parse_header(b"\x00" * 3 + _SAMPLE, 3) == h
    for short in (b"", _SAMPLE[:60]):
        with pytest.raises(CorruptMessage, match="truncated"):
            R.parse_header(short)
    with pytest.raises(CorruptMessage):
        R.parse_header(_SAMPLE, len(_SAMPLE) - 60)
