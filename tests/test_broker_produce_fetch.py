"""Broker core: produce, fetch, list offsets, delete records and validation, against segment storage."""

from __future__ import annotations

import itertools
import struct
import time
from pathlib import Path

import pytest
import trio
from broker_harness import batch, create, fetch_records, produce, running_broker

from odradek import records
from odradek.broker import replica_manager
from odradek.broker.api import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    CreatableTopic,
    FetchPartition,
    IsolationLevel,
    ListOffsetsPartition,
    OffsetForLeaderEpochPartition,
)
from odradek.broker.internal_topic import InternalTopic
from odradek.broker.metadata_cache import registration_json
from odradek.errors import ErrorCode
from odradek.interfaces import TopicPartition
from odradek.plugins.meta_local.store import FILE_NAME, LocalMetadataStore

TP = TopicPartition("t", 0)


async def test_produce_fetch_round_trip(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as core:
        await create(core, "t")
        offsets = [(await produce(core, TP, batch([b"a", b"b", b"c"]))).base_offset for _ in range(3)]
        assert offsets == [0, 3, 6]
        got = await fetch_records(core, TP)
        assert [(r.offset, r.value) for r in got][:4] == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"a")]
        assert len(got) == 9
        for level, aborted in ((IsolationLevel.READ_UNCOMMITTED, None), (IsolationLevel.READ_COMMITTED, ())):
            r = (await core.fetch(-1, 0, 0, 1 << 20, level, [FetchPartition(TP, 4, 1 << 20)]))[TP]
            assert r.error == ErrorCode.NONE
            assert (r.high_watermark, r.last_stable_offset, r.log_start_offset) == (9, 9, 0)
            assert r.aborted_transactions == aborted
            assert r.records is not None and r.records.first_batch_offset == 3  # the batch holding 4
            r.records.release()
        # reading at the end is empty, not an error
        r = (await core.fetch(-1, 0, 0, 1 << 20, IsolationLevel.READ_UNCOMMITTED, [FetchPartition(TP, 9, 1000)]))[TP]
        assert r.error == ErrorCode.NONE and r.records is None and r.high_watermark == 9


async def test_unknown_topic_and_offset_out_of_range(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as core:
        await create(core, "t")
        for tp in (TopicPartition("nope", 0), TopicPartition("t", 1)):
            assert (await produce(core, tp, batch([b"x"]))).error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            r = await core.fetch(-1, 0, 0, 100, IsolationLevel.READ_UNCOMMITTED, [FetchPartition(tp, 0, 100)])
            assert r[tp].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        await produce(core, TP, batch([b"x"]))
        r = await core.fetch(-1, 0, 0, 100, IsolationLevel.READ_UNCOMMITTED, [FetchPartition(TP, 5, 100)])
        assert r[TP].error == ErrorCode.OFFSET_OUT_OF_RANGE and r[TP].high_watermark == 1


async def test_validation_errors_carry_kafka_codes(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as core:
        await create(core, "t")
        good = batch([b"v"])
        corrupt = bytearray(good)
        corrupt[-1] ^= 0xFF
        assert (await produce(core, TP, corrupt)).error == ErrorCode.CORRUPT_MESSAGE
        assert (await produce(core, TP, batch([b"a"]) + batch([b"b"]))).error == ErrorCode.INVALID_RECORD
        assert (await produce(core, TP, bytearray())).error == ErrorCode.INVALID_RECORD
        control = bytearray(
            records.build_control_batch(records.ControlRecordType.COMMIT, producer_id=1, producer_epoch=0)
        )
        assert (await produce(core, TP, control)).error == ErrorCode.INVALID_RECORD
        zstd = batch([b"z" * 100], compression=records.Compression.ZSTD)
        assert (await produce(core, TP, bytearray(zstd), api_version=6)).error == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
        assert (await produce(core, TP, zstd, api_version=7)).error == ErrorCode.NONE
        results = await core.produce(2, 1000, {TP: batch([b"v"])})
        assert results[TP].error == ErrorCode.INVALID_REQUIRED_ACKS
        # without a transaction coordinator no partition is part of a transaction (KIP-890)
        txn = batch([b"t"], producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True)
        assert (await produce(core, TP, txn)).error == ErrorCode.INVALID_TXN_STATE
        # nothing of the refused batches was appended
        assert [r.value for r in await fetch_records(core, TP)] == [b"z" * 100]


async def test_message_too_large_and_compacted_keys(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as core:
        await create(core, "small", **{"max.message.bytes": "200"})
        tp = TopicPartition("small", 0)
        assert (await produce(core, tp, batch([b"x" * 300]))).error == ErrorCode.MESSAGE_TOO_LARGE
        assert (await produce(core, tp, batch([b"x" * 10]))).error == ErrorCode.NONE
        await create(core, "compacted", **{"cleanup.policy": "compact"})
        ctp = TopicPartition("compacted", 0)
        assert (await produce(core, ctp, batch([b"v"]))).error == ErrorCode.INVALID_RECORD
        assert (await produce(core, ctp, batch([b"v"], keys=[b"k"]))).error == ErrorCode.NONE


async def test_log_append_time(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as core:
        await create(core, "lat", **{"message.timestamp.type": "LogAppendTime"})
        tp = TopicPartition("lat", 0)
        result = await produce(core, tp, batch([b"a", b"b"], timestamp=1000))
        assert result.error == ErrorCode.NONE and result.log_append_time > 1000
        r = (await core.fetch(-1, 0, 0, 1 << 20, IsolationLevel.READ_UNCOMMITTED, [FetchPartition(tp, 0, 1 << 20)]))[tp]
        assert r.records is not None
        data = r.records.to_bytes()
        r.records.release()
        decoded = records.decode_batch(data)  # verifies the recomputed CRC
        assert decoded.header.timestamp_type == records.TimestampType.LOG_APPEND_TIME
        assert decoded.header.max_timestamp == result.log_append_time
        assert [rec.timestamp for rec in decoded.records] == [result.log_append_time] * 2
        # CreateTime topics keep the producer's timestamp and report -1
        await create(core, "ct")
        assert (await produce(core, TopicPartition("ct", 0), batch([b"a"], timestamp=1000))).log_append_time == -1


async def test_topic_compression_type_recompresses(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as core:
        await create(core, "gz", **{"compression.type": "gzip"})
        tp = TopicPartition("gz", 0)
        assert (await produce(core, tp, batch([b"a" * 50, b"b"]))).error == ErrorCode.NONE
        r = (await core.fetch(-1, 0, 0, 1 << 20, IsolationLevel.READ_UNCOMMITTED, [FetchPartition(tp, 0, 1 << 20)]))[tp]
        assert r.records is not None
        data = r.records.to_bytes()
        r.records.release()
        decoded = records.decode_batch(data)
        assert decoded.header.compression == records.Compression.GZIP
        assert [x.value for x in decoded.records] == [b"a" * 50, b"b"]
        # KIP-390: compression.gzip.level sets the broker's level (a smaller batch at 9 than at 1)
        text = [b" ".join(b"word%d" % (i * j % 97) for j in range(200)) for i in range(20)]
        sizes = {}
        for level in ("1", "9"):
            name = f"gz{level}"
            await create(core, name, **{"compression.type": "gzip", "compression.gzip.level": level})
            assert (await produce(core, TopicPartition(name, 0), batch(text))).error == ErrorCode.NONE
            sizes[level] = core.storage.get_log(TopicPartition(name, 0)).size_in_bytes
        assert sizes["9"] < sizes["1"]
        for bad in ({"compression.gzip.level": "0"}, {"compression.lz4.level": "18"}, {"compression.zstd.level": "23"}):
            res = await core.create_topics([CreatableTopic("bad", 1, 1, configs=bad)], 1000, False)
            assert res["bad"].error == ErrorCode.INVALID_CONFIG, bad


async def test_fetch_max_bytes_across_partitions(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as core:
        await create(core, "m", partitions=3)
        tps = [TopicPartition("m", p) for p in range(3)]
        for tp in tps:
            for _ in range(2):
                await produce(core, tp, batch([b"x" * 1000]))
        size = 1000 + 61 + 10  # roughly one batch
        parts = [FetchPartition(tp, 0, 10 * size) for tp in tps]
        # max_bytes smaller than one batch: the first partition still returns one whole batch
        res = await core.fetch(-1, 0, 0, 100, IsolationLevel.READ_UNCOMMITTED, parts)
        assert list(res) == tps  # every requested partition echoed, in order
        first = res[tps[0]].records
        assert first is not None and first.size > 100 and first.size < 2 * size
        first.release()
        assert res[tps[1]].records is None and res[tps[2]].records is None
        assert all(r.high_watermark == 2 for r in res.values())
        # partition_max_bytes limits each partition, the total limit the sum
        res = await core.fetch(
            -1, 0, 0, 10 * size, IsolationLevel.READ_UNCOMMITTED, [FetchPartition(tp, 0, 1) for tp in tps]
        )
        sizes = [r.records.size if r.records else 0 for r in res.values()]
        assert sizes[0] > 0 and sizes[1] == 0  # min one batch applies to the first partition only
        for r in res.values():
            if r.records:
                r.records.release()


async def test_list_offsets(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as core:
        await create(core, "t")
        for ts in (1000, 3000, 2000):
            await produce(core, TP, batch([b"v"], timestamp=ts))

        async def ask(timestamp: int) -> tuple[int, int, int]:
            r = (await core.list_offsets(-1, IsolationLevel.READ_UNCOMMITTED, [ListOffsetsPartition(TP, timestamp)]))[
                TP
            ]
            assert r.error == ErrorCode.NONE
            return r.offset, r.timestamp, r.leader_epoch

        assert (await ask(EARLIEST_TIMESTAMP))[0] == 0
        assert (await ask(LATEST_TIMESTAMP))[0] == 3
        assert (await ask(MAX_TIMESTAMP))[:2] == (1, 3000)
        assert (await ask(1500))[:2] == (1, 3000)
        assert (await ask(500))[:2] == (0, 1000)
        assert (await ask(9999))[:2] == (-1, -1)
        assert (await ask(LATEST_TIMESTAMP))[2] == 0  # leader epoch of a new topic
        r = await core.list_offsets(
            -1, IsolationLevel.READ_UNCOMMITTED, [ListOffsetsPartition(TopicPartition("x", 0), -1)]
        )
        assert r[TopicPartition("x", 0)].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_delete_records(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as core:
        await create(core, "t")
        for _ in range(5):
            await produce(core, TP, batch([b"v"]))
        res = await core.delete_records({TP: 3}, 1000)
        assert res[TP].error == ErrorCode.NONE and res[TP].low_watermark == 3
        r = await core.fetch(-1, 0, 0, 100, IsolationLevel.READ_UNCOMMITTED, [FetchPartition(TP, 0, 100)])
        assert r[TP].error == ErrorCode.OFFSET_OUT_OF_RANGE and r[TP].log_start_offset == 3
        earliest = await core.list_offsets(
            -1, IsolationLevel.READ_UNCOMMITTED, [ListOffsetsPartition(TP, EARLIEST_TIMESTAMP)]
        )
        assert earliest[TP].offset == 3
        assert [x.offset for x in await fetch_records(core, TP, 3)] == [3, 4]
        assert (await core.delete_records({TP: 9}, 1000))[TP].error == ErrorCode.OFFSET_OUT_OF_RANGE
        res = await core.delete_records({TP: -1}, 1000)  # -1: up to the high watermark
        assert res[TP].low_watermark == 5
        unknown = TopicPartition("nope", 0)
        assert (await core.delete_records({unknown: 1}, 1000))[unknown].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_offset_for_leader_epoch_and_epoch_fencing(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as core:
        await create(core, "t")
        for _ in range(4):
            await produce(core, TP, batch([b"v"]))
        res = await core.offset_for_leader_epoch(-1, [OffsetForLeaderEpochPartition(TP, 0)])
        assert res[TP].error == ErrorCode.NONE and (res[TP].leader_epoch, res[TP].end_offset) == (0, 4)
        fenced = FetchPartition(TP, 0, 100, current_leader_epoch=1)
        r = await core.fetch(-1, 0, 0, 100, IsolationLevel.READ_UNCOMMITTED, [fenced])
        assert r[TP].error == ErrorCode.UNKNOWN_LEADER_EPOCH
        # on a follower the epoch is checked first too, as Kafka's getLocalLog: an older epoch
        # is FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH, the current one not the leader
        partition = core.replica_manager.get_partition(TP)
        assert partition is not None
        partition.make_follower(7, 3, [7, 0], [7, 0])
        for epoch, error in (
            (2, ErrorCode.FENCED_LEADER_EPOCH),
            (4, ErrorCode.UNKNOWN_LEADER_EPOCH),
            (3, ErrorCode.NOT_LEADER_OR_FOLLOWER),
        ):
            asked = FetchPartition(TP, 0, 100, current_leader_epoch=epoch)
            r = await core.fetch(-1, 0, 0, 100, IsolationLevel.READ_UNCOMMITTED, [asked])
            assert r[TP].error == error, epoch
            listed = await core.list_offsets(-1, IsolationLevel.READ_UNCOMMITTED, [ListOffsetsPartition(TP, -1, epoch)])
            assert listed[TP].error == error, epoch
            ends = await core.offset_for_leader_epoch(-1, [OffsetForLeaderEpochPartition(TP, 0, epoch)])
            assert ends[TP].error == error, epoch


@pytest.mark.parametrize("compression", list(records.Compression))
async def test_every_compression_round_trips(tmp_path: Path, compression: records.Compression) -> None:
    async with running_broker(tmp_path) as core:
        await create(core, "t")
        data = batch([b"v%d" % i for i in range(50)], compression=compression)
        assert (await produce(core, TP, data)).error == ErrorCode.NONE
        assert [r.value for r in await fetch_records(core, TP)] == [b"v%d" % i for i in range(50)]


def _with_records_section(good: bytearray, section: bytes, record_count: int | None = None) -> bytearray:
    """``good``'s header over another records section, with a valid CRC: only a look inside the
    section can tell it is garbage."""
    out = bytearray(good[: records.HEADER_SIZE]) + section
    struct.pack_into(">i", out, records.BATCH_LENGTH_OFFSET, len(out) - records.LOG_OVERHEAD)
    if record_count is not None:
        struct.pack_into(">i", out, records.RECORD_COUNT_OFFSET, record_count)
    struct.pack_into(">I", out, records.CRC_OFFSET, records.compute_crc(out))
    return out


@pytest.mark.parametrize("compression", [c for c in records.Compression if c != records.Compression.NONE])
async def test_a_crc_valid_batch_whose_records_do_not_decompress_is_refused(
    tmp_path: Path, compression: records.Compression
) -> None:
    """As Kafka's LogValidator, which decompresses every compressed batch: CORRUPT_MESSAGE, and
    nothing appended that consumers would fail on."""
    async with running_broker(tmp_path) as core:
        await create(core, "t")
        good = batch([b"v%d" % i for i in range(20)], compression=compression)
        garbage = _with_records_section(good, bytes(range(256)) * 2)
        result = await produce(core, TP, garbage)
        assert result.error == ErrorCode.CORRUPT_MESSAGE
        assert (await produce(core, TP, good)).error == ErrorCode.NONE
        assert [r.value for r in await fetch_records(core, TP)] == [b"v%d" % i for i in range(20)]


async def test_a_batch_declaring_more_records_than_its_section_can_hold_is_refused(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as core:
        await create(core, "t")
        good = batch([b"v"])
        section = bytes(good[records.HEADER_SIZE :])
        lying = _with_records_section(good, section, record_count=len(section) // 7 + 1)
        struct.pack_into(">i", lying, records.LAST_OFFSET_DELTA_OFFSET, len(section) // 7)
        struct.pack_into(">I", lying, records.CRC_OFFSET, records.compute_crc(lying))
        assert (await produce(core, TP, lying)).error == ErrorCode.CORRUPT_MESSAGE
        assert await fetch_records(core, TP) == []


async def test_full_record_validation_refuses_malformed_records_header_mode_lets_through(tmp_path: Path) -> None:
    """A readable records section whose records are malformed (here: the first record claims
    more bytes than the section has): only ``record.validation=full`` reads far enough to see it."""
    async with running_broker(tmp_path) as core:
        await create(core, "header")
        await create(core, "full", **{"record.validation": "full"})
        good = batch([b"v%d" % i for i in range(5)])
        section = bytearray(good[records.HEADER_SIZE :])
        section[0] = 0x7E  # zigzag 63: a first record of 63 bytes, in a section of fewer
        malformed = _with_records_section(good, bytes(section))
        header_tp, full_tp = TopicPartition("header", 0), TopicPartition("full", 0)
        assert (await produce(core, header_tp, bytearray(malformed))).error == ErrorCode.NONE
        assert (await produce(core, full_tp, bytearray(malformed))).error == ErrorCode.CORRUPT_MESSAGE
        assert (await produce(core, full_tp, good)).error == ErrorCode.NONE
        assert [r.value for r in await fetch_records(core, full_tp)] == [b"v%d" % i for i in range(5)]


async def test_full_validation_reads_inside_records_and_renumbers_compressed_batches(tmp_path: Path) -> None:
    """``record.validation=full`` reads every record (Kafka's LogValidator): a key length that runs
    past its record is refused even though the record's own length is right. A compressed batch
    whose inner offsets are not 0, 1, ... is rebuilt with consecutive ones, as Kafka rebuilds it;
    an uncompressed one is kept as sent, as in Kafka."""
    async with running_broker(tmp_path) as core:
        await create(core, "full", **{"record.validation": "full"})
        tp = TopicPartition("full", 0)
        good = batch([b"value"], keys=[b"key"])
        section = bytearray(good[records.HEADER_SIZE :])
        assert section[4] == 6  # the key length (zigzag 3) after length, attributes, two deltas
        section[4] = 40
        result = await produce(core, tp, _with_records_section(good, bytes(section)))
        assert result.error in (ErrorCode.INVALID_RECORD, ErrorCode.CORRUPT_MESSAGE)
        assert await fetch_records(core, tp) == []
        values = [b"a", b"b", b"c"]
        gzip = batch(values, compression=records.Compression.GZIP, offset_deltas=[0, 0, 2])
        assert (await produce(core, tp, gzip)).error == ErrorCode.NONE
        plain = batch(values, offset_deltas=[0, 0, 2])
        assert (await produce(core, tp, plain)).error == ErrorCode.NONE
        fetched = [(r.offset, r.value) for r in await fetch_records(core, tp)]
        assert fetched == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"a"), (3, b"b"), (5, b"c")]


async def test_fetch_from_a_broker_that_is_not_a_replica(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as core:
        await create(core, "t")
        await produce(core, TP, batch([b"x"]))
        r = await core.fetch(5, 0, 0, 100, IsolationLevel.READ_UNCOMMITTED, [FetchPartition(TP, 0, 100)])
        assert r[TP].error == ErrorCode.NOT_LEADER_OR_FOLLOWER and r[TP].records is None


async def test_a_batch_larger_than_a_segment_is_refused(tmp_path: Path) -> None:
    """Kafka's UnifiedLog.append: RECORD_LIST_TOO_LARGE when segment.bytes could not hold it,
    whatever max.message.bytes allows."""
    async with running_broker(tmp_path) as core:
        await create(core, "small", **{"segment.bytes": "2000", "max.message.bytes": "100000"})
        tp = TopicPartition("small", 0)
        assert (await produce(core, tp, batch([b"x" * 3000]))).error == ErrorCode.RECORD_LIST_TOO_LARGE
        assert (await produce(core, tp, batch([b"x" * 1000]))).error == ErrorCode.NONE


async def test_timestamp_difference_limit(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as core:
        await create(core, "ts", **{"message.timestamp.difference.max.ms": "60000"})
        tp = TopicPartition("ts", 0)
        assert (await produce(core, tp, batch([b"old"], timestamp=1000))).error == ErrorCode.INVALID_TIMESTAMP
        assert (await produce(core, tp, batch([b"now"]))).error == ErrorCode.NONE
        # KIP-937: separate limits into the past and into the future
        now = int(time.time() * 1000)
        window = {"message.timestamp.before.max.ms": "3600000", "message.timestamp.after.max.ms": "60000"}
        await create(core, "window", **window)
        tp = TopicPartition("window", 0)
        for ts, error in (
            (now - 1_800_000, ErrorCode.NONE),  # half an hour old: within before
            (now - 7_200_000, ErrorCode.INVALID_TIMESTAMP),  # two hours old
            (now + 600_000, ErrorCode.INVALID_TIMESTAMP),  # ten minutes ahead: past after
            (now + 10_000, ErrorCode.NONE),
            (-1, ErrorCode.NONE),  # no timestamp: nothing to bound (Kafka's LogValidator skips it)
        ):
            assert (await produce(core, tp, batch([b"v"], timestamp=ts))).error == error, ts
        # as Kafka's LogConfig: before/after, once set, take the place of the deprecated
        # difference.max.ms (not the tighter of the two); unset, the difference bounds that side
        both = {"message.timestamp.difference.max.ms": "3600000", "message.timestamp.before.max.ms": "86400000"}
        await create(core, "both", **both)
        tp = TopicPartition("both", 0)
        for ts, error in (
            (now - 7_200_000, ErrorCode.NONE),  # two hours old: within before, past difference
            (now - 2 * 86_400_000, ErrorCode.INVALID_TIMESTAMP),
            (now + 7_200_000, ErrorCode.INVALID_TIMESTAMP),  # after unset: the difference
        ):
            assert (await produce(core, tp, batch([b"v"], timestamp=ts))).error == error, ts


async def test_a_partition_this_broker_does_not_host_is_not_unknown(tmp_path: Path) -> None:
    """Kafka's getPartitionOrError: a partition the cluster has on other brokers only is
    NOT_LEADER_OR_FOLLOWER here (a client with stale metadata refreshes it and goes to the
    leader), not UNKNOWN_TOPIC_OR_PARTITION, which says the topic does not exist."""
    async with running_broker(tmp_path) as core:
        other = LocalMetadataStore(tmp_path / FILE_NAME)
        await other.open(6000)
        await other.register_broker(7, registration_json([("PLAINTEXT", "127.0.0.1", 9999, "PLAINTEXT")], None))
        while 7 not in core.metadata_cache.live_broker_ids():
            await trio.sleep(0.01)
        res = await core.create_topics([CreatableTopic("t", assignments={0: [7]})], 1000, False)
        assert res["t"].error == ErrorCode.NONE and core.replica_manager.get_partition(TP) is None
        assert (await produce(core, TP, batch([b"x"]))).error == ErrorCode.NOT_LEADER_OR_FOLLOWER
        r = await core.fetch(-1, 0, 0, 100, IsolationLevel.READ_UNCOMMITTED, [FetchPartition(TP, 0, 100)])
        assert r[TP].error == ErrorCode.NOT_LEADER_OR_FOLLOWER
        r2 = await core.list_offsets(-1, IsolationLevel.READ_UNCOMMITTED, [ListOffsetsPartition(TP, -1)])
        assert r2[TP].error == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert (await core.delete_records({TP: 1}, 1000))[TP].error == ErrorCode.NOT_LEADER_OR_FOLLOWER
        # a partition the topic does not have is still unknown
        missing = TopicPartition("t", 5)
        assert (await produce(core, missing, batch([b"x"]))).error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        await other.close()


async def test_list_offsets_after_a_leader_change_whose_high_watermark_lags(tmp_path: Path) -> None:
    """Kafka's fetchOffsetForTimestamp: while the HW is below the offset where the leader's
    epoch began, a consumer's LATEST (and a lookup that finds nothing readable) is
    OFFSET_NOT_AVAILABLE, retriable, not the old HW, which would take it back. Answers carry
    the epoch of their offset (KIP-320), not the current one."""

    async def ask(timestamp: int, replica_id: int = -1) -> tuple[ErrorCode, int, int]:
        got = await core.list_offsets(
            replica_id, IsolationLevel.READ_UNCOMMITTED, [ListOffsetsPartition(TP, timestamp)]
        )
        return got[TP].error, got[TP].offset, got[TP].leader_epoch

    async with running_broker(tmp_path) as core:
        await create(core, "t")
        for ts in (1000, 2000):
            assert (await produce(core, TP, batch([b"v"], timestamp=ts))).error == ErrorCode.NONE
        partition = core.replica_manager.get_partition(TP)
        assert partition is not None
        partition.make_leader(1, [0, 99], [0, 99])  # a follower that has not fetched yet
        assert (await produce(core, TP, batch([b"w"], timestamp=3000))).error == ErrorCode.NONE
        assert (partition.high_watermark, partition.log_end_offset) == (2, 3)
        assert await ask(LATEST_TIMESTAMP) == (ErrorCode.NONE, 2, 1)  # the epoch began at 2
        partition.make_leader(2, [0, 99], [0, 99])  # a new leader: its epoch begins at 3
        assert (await ask(LATEST_TIMESTAMP))[0] == ErrorCode.OFFSET_NOT_AVAILABLE
        assert (await ask(2500))[0] == ErrorCode.OFFSET_NOT_AVAILABLE  # offset 2 is not readable yet
        assert await ask(1500) == (ErrorCode.NONE, 1, 0)  # readable: its batch's epoch
        assert await ask(EARLIEST_TIMESTAMP) == (ErrorCode.NONE, 0, 0)
        assert await ask(LATEST_TIMESTAMP, replica_id=-2) == (ErrorCode.NONE, 3, 2)  # a debugging consumer
        assert await ask(2500, replica_id=-2) == (ErrorCode.NONE, 2, 1)  # it searches to the log end
        r = await core.fetch(-2, 0, 0, 1 << 20, IsolationLevel.READ_UNCOMMITTED, [FetchPartition(TP, 2, 1 << 20)])
        assert r[TP].records is not None and r[TP].records.size > 0  # it reads past the HW
        r[TP].records.release()


async def test_a_coordinator_loads_its_partition_to_the_log_end(tmp_path: Path) -> None:
    """Kafka's coordinators load to the log end: a new leader's HW may still lag records the
    old leader wrote and acknowledged (here: a follower has not fetched since). Loaded to the
    HW, the group coordinator lost those committed offsets after a failover."""
    async with running_broker(tmp_path) as core:
        await create(core, "t")
        partition = core.replica_manager.get_partition(TP)
        assert partition is not None
        partition.make_leader(1, [0, 99], [0, 99])
        for key in (b"a", b"b"):
            assert (await produce(core, TP, batch([b"v"], keys=[key]))).error == ErrorCode.NONE
        assert (partition.high_watermark, partition.log_end_offset) == (0, 2)
        topic = InternalTopic(core, "t", 1, 1, {}, 1000)
        assert [k async for k, _ in topic.read(0)] == [b"a", b"b"]


async def test_a_produce_of_many_heavy_partitions_lets_other_tasks_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Validation decompresses each compressed batch on the event loop: a request of many
    partitions whose batches inflate to megabytes each (a few KB on the wire) used to hold every
    other client for all of them; it now yields each time PRODUCE_SLICE_S is spent (here a
    clock that moves 20 ms per look: after every partition), never before its first partition
    (appends of one partition, the coordinators' commits, reach the log in call order)."""
    looks = itertools.count()
    monkeypatch.setattr(replica_manager, "_slice_clock", lambda: next(looks) * 0.02)
    async with running_broker(tmp_path) as core:
        await create(core, "heavy", partitions=24)
        data = batch([b"\0" * (1 << 20)], compression=records.Compression.ZSTD)
        assert len(data) < 4096
        ticks = 0
        done = False

        async def other_client() -> None:
            nonlocal ticks
            while not done:
                ticks += 1
                await trio.lowlevel.checkpoint()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(other_client)
            await trio.sleep(0)
            before = ticks
            one = await core.produce(1, 5000, {TopicPartition("heavy", 0): bytearray(data)}, api_version=7)
            assert ticks == before  # one partition: no yield, whatever the clock says
            entries = {TopicPartition("heavy", p): bytearray(data) for p in range(24)}
            results = await core.produce(1, 5000, entries, api_version=7)
            during = ticks - before
            done = True
        assert {r.error for r in (*one.values(), *results.values())} == {ErrorCode.NONE}
        assert during >= 20
