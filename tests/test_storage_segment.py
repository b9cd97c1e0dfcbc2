"""The segment engine's own behaviour: files on disk, indexes, rolling, checkpoints, recovery
point, flush policy, bounded descriptors and maps."""

from __future__ import annotations

import logging
import os
import random
import socket
import struct
from pathlib import Path

import pytest
from storage_helpers import TP, append, batch, config, log_of, open_storage, read_batches, topic_config

from odradek import records
from odradek.errors import KafkaStorageError
from odradek.interfaces import TopicPartition
from odradek.plugins.storage_segment import log as log_module
from odradek.plugins.storage_segment import segment as segment_module
from odradek.plugins.storage_segment.checkpoint import read_offsets
from odradek.plugins.storage_segment.handles import HandleCache
from odradek.plugins.storage_segment.index import OffsetIndex
from odradek.plugins.storage_segment.log import SegmentLog
from odradek.plugins.storage_segment.storage import (
    CLEANER_CHECKPOINT,
    LOG_START_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    SegmentLogStorage,
)

HOUR = 3_600_000


def _entries(path: Path, fmt: str) -> list[tuple[int, ...]]:
    data = path.read_bytes()
    size = struct.calcsize(fmt)
    return [struct.unpack_from(fmt, data, i) for i in range(0, len(data), size)]


async def test_layout_file_names_and_preallocated_indexes(tmp_path: Path) -> None:
    storage = await open_storage(tmp_path, log_segment_bytes=300, log_index_size_max_bytes=8192)
    log = log_of(storage)
    part = tmp_path / "events-0"
    first = part / "00000000000000000000"
    append(log, batch(2))
    assert first.with_suffix(".log").stat().st_size == log.size_in_bytes
    assert first.with_suffix(".index").stat().st_size == 8192  # preallocated while active
    assert first.with_suffix(".timeindex").stat().st_size == 8192 // 12 * 12
    while len(log.segments) == 1:
        append(log, batch(2))
    second = log.segments[1].base_offset
    assert (part / f"{second:020d}.log").exists()
    assert first.with_suffix(".index").stat().st_size % 8 == 0
    assert first.with_suffix(".index").stat().st_size < 8192  # trimmed on roll
    assert first.with_suffix(".timeindex").stat().st_size == 12  # the final max-timestamp entry
    await storage.close()


async def test_the_active_segments_indexes_are_trimmed_at_close_and_preallocated_again(tmp_path: Path) -> None:
    """A clean close trims the active segment's indexes to their entries (the next start counts
    entries by file length); reopened, the segment takes appends again: its indexes are
    preallocated again and keep the entries they had. After a crash the untrimmed files are
    rebuilt by recovery and trimmed at the next close."""
    sizes = {"log_index_size_max_bytes": 8192, "log_index_interval_bytes": 0}
    storage = await open_storage(tmp_path, **sizes)
    log = log_of(storage)
    for i in range(10):
        append(log, batch(1, ts=1000 + i))
    entries = (log.segments[0].offset_index.entries, log.segments[0].time_index.entries)
    assert entries == (9, 9)  # the first batch starts the first stretch
    await storage.close()
    base = tmp_path / "events-0" / "00000000000000000000"
    index, times = base.with_suffix(".index"), base.with_suffix(".timeindex")
    assert (index.stat().st_size, times.stat().st_size) == (9 * 8, 9 * 12)
    storage = await open_storage(tmp_path, **sizes)
    log = log_of(storage)
    active = log.segments[-1]
    assert (active.offset_index.entries, active.time_index.entries) == entries
    for i in range(3):
        append(log, batch(1, ts=2000 + i))
    assert (index.stat().st_size, times.stat().st_size) == (8192, 8192 // 12 * 12)
    assert active.offset_index.entries == 11 and log.offset_for_timestamp(2001) == (11, 2001)
    storage.abandon()  # a crash leaves them preallocated
    storage = await open_storage(tmp_path, **sizes)
    log = log_of(storage)
    assert log.segments[-1].offset_index.entries == 12 and log.offset_for_timestamp(2001) == (11, 2001)
    await storage.close()
    assert (index.stat().st_size, times.stat().st_size) == (12 * 8, 12 * 12)


async def test_index_entries_are_kafkas(tmp_path: Path) -> None:
    storage = await open_storage(tmp_path, log_index_interval_bytes=0, log_segment_bytes=2000)
    log = log_of(storage)
    spans, positions, pos = [], [], 0
    while len(log.segments) == 1:
        data = batch(3, ts=5000 + 10 * len(spans))
        positions.append(pos)
        spans.append(append(log, data))
        pos += len(data)
    spans.pop()  # the last append went to the new segment
    positions.pop()
    await storage.close()
    base = tmp_path / "events-0" / "00000000000000000000"
    expected = [(last, p) for (_, last), p in zip(spans[1:], positions[1:], strict=True)]
    assert _entries(base.with_suffix(".index"), ">ii") == expected
    times = _entries(base.with_suffix(".timeindex"), ">qi")
    assert [t for t, _ in times] == sorted({t for t, _ in times})
    assert times[-1] == (5000 + 10 * (len(spans) - 1) + 2, spans[-1][1])


async def test_offset_index_entries_reach_the_file_by_the_fsync_and_in_bounded_batches(tmp_path: Path) -> None:
    """The append path keeps new offset-index entries in memory and stores them in batches: an
    fsync of the log (and so the recovery point, which trusts the index) covers all of them, and
    without any read or flush at most ``_ROOM_STEP`` of them are held back."""
    storage = await open_storage(tmp_path, log_index_interval_bytes=0)
    log = log_of(storage)
    index_file = tmp_path / "events-0" / "00000000000000000000.index"
    spans, positions, pos = [], [], 0
    for i in range(3 * segment_module._ROOM_STEP + 17):
        data = batch(1, ts=1000 + i)
        positions.append(pos)
        spans.append(append(log, data))
        pos += len(data)
    # the first batch starts the first stretch; each later one gets an entry
    expected = [(last, p) for (_, last), p in zip(spans[1:], positions[1:], strict=True)]
    on_disk = [e for e in _entries(index_file, ">ii") if e != (0, 0)]
    assert on_disk == expected[: len(on_disk)]
    assert len(expected) - len(on_disk) <= segment_module._ROOM_STEP
    await log.flush()
    assert log.recovery_point == log.log_end_offset
    assert _entries(index_file, ">ii")[: len(expected)] == expected
    # each indexed batch carried a new largest timestamp: the time index has one entry for each
    times = [(1000 + i, last) for i, (_, last) in enumerate(spans) if i]
    assert _entries(index_file.with_suffix(".timeindex"), ">qi")[: len(times)] == times
    await storage.close()


async def test_roll_by_time_uses_record_timestamps(tmp_path: Path) -> None:
    storage = await open_storage(tmp_path, log_roll_ms=1000)
    log = log_of(storage)
    append(log, batch(1, ts=1_000_000))
    append(log, batch(1, ts=1_000_900))
    assert len(log.segments) == 1
    append(log, batch(1, ts=1_001_500))
    assert [s.base_offset for s in log.segments] == [0, 2]
    await storage.close()


async def test_roll_by_time_follows_a_live_segment_ms_change(tmp_path: Path) -> None:
    """The append path skips the full roll check below a time limit the segment keeps; a new
    segment.ms must take effect at once, not when that cached limit is passed."""
    storage = await open_storage(tmp_path)
    log = log_of(storage)
    for ts in (1_000_000, 1_000_400, 1_000_800):
        append(log, batch(1, ts=ts))
    assert len(log.segments) == 1
    log.update_config(topic_config(storage, segment_ms=1000))
    append(log, batch(1, ts=1_000_900))
    assert len(log.segments) == 1
    append(log, batch(1, ts=1_001_100))
    assert [s.base_offset for s in log.segments] == [0, 4]
    await storage.close()


async def test_segment_jitter_stays_below_segment_ms_and_applies_to_every_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kafka's randomSegmentJitter: drawn modulo min(segment.jitter.ms, segment.ms), for every
    segment. A jitter above segment.ms made the roll age negative (a segment per batch), and
    the first segment and those loaded at a restart had none."""
    bounds: list[int] = []

    def half(bound: int) -> int:
        bounds.append(bound)
        return bound // 2

    monkeypatch.setattr(log_module.random, "randrange", half)
    storage = await open_storage(tmp_path, log_roll_ms=1000)
    log = log_of(storage, segment_jitter_ms=5000)
    assert log.segments[0].roll_jitter_ms == 500  # the first segment too
    for i in range(20):
        append(log, batch(1, ts=1_000_000 + 100 * i))
    assert [s.base_offset for s in log.segments] == [0, 6, 12, 18]  # rolls at 500 ms of record time
    assert set(bounds) == {1000}
    await storage.close()
    storage = await open_storage(tmp_path, log_roll_ms=1000)
    log = log_of(storage, segment_jitter_ms=5000)
    assert log.segments[-1].roll_jitter_ms == 500  # the active segment after a restart
    await storage.close()


async def test_time_index_keeps_up_with_single_batch_appends(tmp_path: Path) -> None:
    """Single-batch appends add a time-index entry only when the largest timestamp rose since
    the last one; after a truncation that forgets entries, the next rise is indexed again."""
    storage = await open_storage(tmp_path, log_index_interval_bytes=0)
    log = log_of(storage)
    for ts in (5000, 5000, 6000, 6000, 4000, 7000, 7000):
        append(log, batch(1, ts=ts))
    seg = log.segments[0]
    entries = [seg.time_index._entry(i) for i in range(seg.time_index.entries)]
    assert entries == [(5000, 0), (6000, 2), (7000, 5)]  # (largest timestamp so far, its offset)
    assert log.offset_for_timestamp(6500) == (5, 7000)
    log.truncate_to(3)
    append(log, batch(1, ts=6500))
    append(log, batch(1, ts=6500))
    entries = [seg.time_index._entry(i) for i in range(seg.time_index.entries)]
    assert entries == [(5000, 0), (6000, 2), (6500, 3)]
    assert log.offset_for_timestamp(6200) == (3, 6500)
    await storage.close()


async def test_roll_when_the_index_is_full(tmp_path: Path) -> None:
    storage = await open_storage(tmp_path, log_index_size_max_bytes=4096, log_index_interval_bytes=0)
    log = log_of(storage)
    for _ in range(600):
        append(log, batch(1))
    first = log.segments[0]
    assert len(log.segments) == 2 and first.offset_index.entries <= 512
    assert first.size < storage.config["log.segment.bytes"]
    await storage.close()


async def test_roll_when_the_time_index_is_full(tmp_path: Path) -> None:
    """The time index (12-byte entries) fills before the offset index (8 bytes) when every
    indexed batch carries a new largest timestamp: the segment rolls then too, so no later
    batch goes unindexed by time (Kafka's timeIndex.isFull)."""
    storage = await open_storage(tmp_path, log_index_size_max_bytes=4096, log_index_interval_bytes=0)
    log = log_of(storage)
    for i in range(800):
        append(log, batch(1, ts=10_000 + i))
    first = log.segments[0]
    assert len(log.segments) == 3 and first.time_index.entries == 4096 // 12
    assert first.offset_index.entries < first.offset_index.max_entries
    for ts in (10_000, 10_340, 10_341, 10_700, 10_799):
        assert log.offset_for_timestamp(ts) == (ts - 10_000, ts)
    await storage.close()


async def test_offsets_beyond_int32_of_the_base_roll(tmp_path: Path) -> None:
    storage = await open_storage(tmp_path)
    log = log_of(storage)
    append(log, batch(1))
    far = batch(1, base_offset=2**31 + 10)
    log.append_as_follower(bytes(far), records.validate_batches(far))
    assert [s.base_offset for s in log.segments] == [0, 2**31 + 10]
    assert log.log_end_offset == 2**31 + 11
    await storage.close()


async def test_file_range_is_sendfile_ready(tmp_path: Path) -> None:
    storage = await open_storage(tmp_path)
    log = log_of(storage)
    for _ in range(5):
        append(log, batch(4, value_size=100))
    fetched = log.read(8, 1 << 20)
    span = fetched.file_range()
    assert span is not None and span.length == fetched.size
    a, b = socket.socketpair()
    try:
        sent = os.sendfile(a.fileno(), span.fd, span.position, span.length)
        assert sent == span.length
        got = b""
        while len(got) < sent:
            got += b.recv(65536)
        assert got == fetched.to_bytes()
        assert [x.base_offset for x in records.iter_batches(got)] == [8, 12, 16]
    finally:
        a.close()
        b.close()
        fetched.release()
    await storage.close()


async def test_log_append_time_is_reported(tmp_path: Path) -> None:
    storage = await open_storage(tmp_path)
    log = log_of(storage)
    data = batch(2)
    records.set_log_append_time(data, 0, 1_234_567)
    info = log.log_end_offset, log.append_as_leader(data, records.validate_batches(data), 0)
    assert info[1].log_append_time == 1_234_567
    await storage.close()


async def test_checkpoint_files_use_kafkas_text_format(tmp_path: Path) -> None:
    storage = await open_storage(tmp_path)
    log = log_of(storage)
    append(log, batch(3), epoch=4)
    log.delete_records_before(1)
    storage.write_checkpoint("replication-offset-checkpoint", {TP: 3})
    await storage.close()
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text() == "0\n1\nevents 0 3\n"
    assert (tmp_path / "log-start-offset-checkpoint").read_text() == "0\n1\nevents 0 1\n"
    assert (tmp_path / "replication-offset-checkpoint").read_text() == "0\n1\nevents 0 3\n"
    assert (tmp_path / "events-0" / "leader-epoch-checkpoint").read_text() == "0\n1\n4 1\n"
    assert (tmp_path / ".kafka_cleanshutdown").exists()
    storage = await open_storage(tmp_path)
    assert not (tmp_path / ".kafka_cleanshutdown").exists()
    with pytest.raises(ValueError):
        storage.write_checkpoint("recovery-point-offset-checkpoint", {})
    with pytest.raises(ValueError):
        storage.write_checkpoint("../escape", {})
    await storage.close()


def _checkpointed(path: Path) -> dict[str, dict[TopicPartition, int]]:
    return {
        name: read_offsets(path / name)
        for name in (LOG_START_CHECKPOINT, RECOVERY_POINT_CHECKPOINT, CLEANER_CHECKPOINT)
    }


async def _log_deleted_after_checkpointing(tmp_path: Path) -> SegmentLogStorage:
    """A storage whose checkpoints name ``TP`` at log start 60, recovery point and cleaner
    offset 100, and whose log of ``TP`` has just been deleted (the files not rewritten yet)."""
    storage = await open_storage(tmp_path)
    log = log_of(storage)
    for _ in range(10):
        append(log, batch(10))
    log.delete_records_before(60)
    log.first_dirty_offset = 100
    await log.flush()
    await storage.write_own_checkpoints()
    assert {name: e[TP] for name, e in _checkpointed(tmp_path).items()} == {
        LOG_START_CHECKPOINT: 60,
        RECOVERY_POINT_CHECKPOINT: 100,
        CLEANER_CHECKPOINT: 100,
    }
    await storage.delete_log(TP)
    return storage


async def _reopened_log(tmp_path: Path) -> tuple[SegmentLogStorage, SegmentLog]:
    storage = await open_storage(tmp_path)
    log = storage.get_log(TP)
    assert log is not None
    return storage, log


async def test_a_log_created_again_does_not_inherit_the_deleted_logs_checkpoints(tmp_path: Path) -> None:
    """A topic deleted and created again under its name before the checkpoints were next written
    (the flusher's tick), then kill -9: the old log's log start offset (60, past the new log's
    end) truncated the new log's acknowledged records at the next start. Creating the log
    rewrites the checkpoints without the deleted log's entries first (Kafka rewrites them when
    it deletes a log)."""
    storage = await _log_deleted_after_checkpointing(tmp_path)
    log = log_of(storage)  # before any periodic write
    assert all(TP not in entries for entries in _checkpointed(tmp_path).values())
    for _ in range(2):
        append(log, batch(10))
    await log.flush()
    storage.abandon()  # kill -9: no checkpoint written since
    storage, log = await _reopened_log(tmp_path)
    assert (log.log_start_offset, log.log_end_offset, log.first_dirty_offset) == (0, 20, 0)
    assert len(read_batches(log)) == 2
    await storage.close()


async def test_a_crash_after_a_deletion_does_not_leave_its_entries_to_the_next_log(tmp_path: Path) -> None:
    """Deleted, then a crash before the checkpoints were written: the files still name the log
    at the next start; a log created then under the name must not inherit the entries either."""
    storage = await _log_deleted_after_checkpointing(tmp_path)
    storage.abandon()
    storage = await open_storage(tmp_path)
    assert storage.get_log(TP) is None and _checkpointed(tmp_path)[LOG_START_CHECKPOINT][TP] == 60
    log = log_of(storage)
    append(log, batch(5))
    await log.flush()
    storage.abandon()
    storage, log = await _reopened_log(tmp_path)
    assert (log.log_start_offset, log.log_end_offset) == (0, 5)
    await storage.close()


async def test_the_flusher_drops_a_deleted_logs_checkpoint_entries(tmp_path: Path) -> None:
    storage = await _log_deleted_after_checkpointing(tmp_path)
    await storage.flush_tick()
    assert all(TP not in entries for entries in _checkpointed(tmp_path).values())
    await storage.close()


async def test_a_cleaner_offset_past_the_log_end_is_reset(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Kafka's cleanableOffsets: a checkpointed cleaner offset past the log's end does not
    describe this log; compaction starts again from the log start instead of never cleaning
    the records below it."""
    storage = await open_storage(tmp_path)
    append(log_of(storage), batch(5))
    await storage.close()
    (tmp_path / CLEANER_CHECKPOINT).write_text("0\n1\nevents 0 500\n")
    storage, log = await _reopened_log(tmp_path)
    assert log.first_dirty_offset == 0
    assert "cleaner offset checkpoint (500) is past the log end offset (5)" in caplog.text
    await storage.close()


async def test_a_second_storage_cannot_take_the_same_dir(tmp_path: Path) -> None:
    storage = await open_storage(tmp_path)
    with pytest.raises(KafkaStorageError, match="in use"):
        await open_storage(tmp_path)
    await storage.close()


async def test_a_log_dir_that_cannot_be_a_directory_is_a_storage_error(tmp_path: Path) -> None:
    """A file where a log dir should be: a storage error naming the dir, and the locks taken on
    the dirs before it are released (a retry with a fixed config can take them)."""
    (tmp_path / "file").write_text("not a directory")
    good = tmp_path / "good"
    storage = SegmentLogStorage(config(good).replace(log_dirs=[str(good), str(tmp_path / "file")]))
    with pytest.raises(KafkaStorageError, match=r"log dir .*file cannot be created"):
        await storage.open()
    again = await open_storage(good)  # not left locked
    await again.close()


def _count_recoveries(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    recovered: list[int] = []
    original = segment_module.LogSegment.recover

    def spy(self: segment_module.LogSegment) -> tuple[int, str | None]:
        recovered.append(self.base_offset)
        return original(self)

    monkeypatch.setattr(segment_module.LogSegment, "recover", spy)
    return recovered


async def _flushed_and_checkpointed(tmp_path: Path, batches: int) -> tuple[SegmentLogStorage, SegmentLog]:
    """A log of ``batches`` 2-record batches in 400-byte segments, fsynced, its recovery point
    checkpointed."""
    storage = await open_storage(tmp_path, log_segment_bytes=400)
    log = log_of(storage)
    for _ in range(batches):
        append(log, batch(2))
    await log.flush()
    await storage.write_own_checkpoints()
    return storage, log


async def test_recovery_scans_only_past_the_recovery_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage, log = await _flushed_and_checkpointed(tmp_path, 40)
    flushed = log.log_end_offset
    for _ in range(6):
        append(log, batch(2))
    expected = read_batches(log)
    segments = len(log.segments)
    storage.abandon()  # as kill -9 would leave it
    recovered = _count_recoveries(monkeypatch)
    storage = await open_storage(tmp_path, log_segment_bytes=400)
    log = storage.get_log(TP)
    assert log is not None
    assert [b.header for b in read_batches(log)] == [b.header for b in expected]
    assert recovered and min(recovered) <= flushed and len(recovered) < segments / 2
    assert recovered == sorted(recovered) and recovered[-1] == log.segments[-1].base_offset
    await storage.close()
    recovered.clear()
    storage = await open_storage(tmp_path, log_segment_bytes=400)
    assert recovered == []  # clean shutdown: nothing to verify
    await storage.close()


async def test_a_truncation_takes_the_checkpointed_recovery_point_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kafka's truncateTo checkpoints the lowered recovery point at once. Left at its old value,
    segments re-appended below it after a truncation were trusted unscanned after a crash (a
    power loss may have left them torn): here, at the next flush tick."""
    storage, log = await _flushed_and_checkpointed(tmp_path, 40)
    log.truncate_to(5)
    await storage.flush_tick()
    assert read_offsets(tmp_path / RECOVERY_POINT_CHECKPOINT)[TP] <= 5
    for _ in range(40):
        append(log, batch(2))
    storage.abandon()
    recovered = _count_recoveries(monkeypatch)
    storage = await open_storage(tmp_path, log_segment_bytes=400)
    assert recovered and recovered[0] <= 5  # every re-appended segment is scanned
    await storage.close()


def _follower_batches(first: int, count: int, ts: int) -> bytes:
    """``count`` one-record batches from ``first`` with a gap of 3 offsets before each, as a
    leader's compacted log replicates them."""
    out = b""
    for i in range(count):
        first += 3
        out += records.build_batch([(b"k%d" % i, b"v", [], ts - 5 * i)], base_offset=first, partition_leader_epoch=0)
        first += 1
    return out


async def _write_every_kind_of_segment(storage: SegmentLogStorage, now: list[int]) -> None:
    """Logs whose segments each writer of the engine made: single and multi-batch appends with
    timestamps out of order or absent, LogAppendTime batches, follower appends with offset gaps,
    truncation into a rolled segment and to a segment's base, DeleteRecords and retention,
    compaction of a ``compact,delete`` log, rolls by time and by a full time index."""
    mixed = log_of(storage, TopicPartition("mixed", 0), segment_bytes=700, index_interval_bytes=100)
    rng = random.Random(7)
    for i in range(60):
        if i % 7 == 3:  # several batches in one append
            data = bytearray(b"".join(bytes(batch(2, ts=now[0] - rng.randint(0, HOUR))) for _ in range(3)))
            mixed.append_as_leader(data, records.validate_batches(data, exact_counts=False), 0)
        elif i % 7 == 5:  # no timestamps
            append(mixed, bytearray(records.build_batch([(b"k", b"v" * 40, [], -1)] * 2)))
        elif i % 7 == 6:  # LogAppendTime, as the broker's validation stamps it
            data = batch(2, ts=now[0] - 2 * HOUR)
            records.set_log_append_time(data, 0, now[0] - i)
            append(mixed, data)
        else:
            append(mixed, batch(2, ts=now[0] - rng.randint(0, HOUR), value_size=rng.randint(5, 120)))
        if i == 30:
            data = _follower_batches(mixed.log_end_offset, 5, now[0] + HOUR)
            mixed.append_as_follower(data, records.validate_batches(data, exact_counts=False))
    mixed.truncate_to(mixed.segments[-3].base_offset + 3)  # into a rolled segment
    for _ in range(12):
        append(mixed, batch(3, ts=now[0] - 3 * HOUR, value_size=50))
    mixed.truncate_to(mixed.segments[-1].base_offset)  # an empty active segment
    mixed.delete_records_before(mixed.segments[2].base_offset + 1)
    compacted = log_of(
        storage,
        TopicPartition("compacted", 0),
        segment_bytes=400,
        cleanup_policy="compact,delete",
        min_cleanable_dirty_ratio=0.0,
        retention_ms=30 * HOUR,
    )
    for i in range(40):
        append(compacted, batch(2, keys=[b"a%d" % (i % 3), b"b"], ts=now[0] - (40 - i) * HOUR + (i % 4) * 1000))
    await storage.run_cleaner()
    compacted.truncate_to(compacted.log_end_offset - 3)
    for i in range(10):
        append(compacted, batch(2, keys=[b"a%d" % i, b"b"], ts=now[0] - i * 1000))
    await storage.run_cleaner()
    full = log_of(storage, TopicPartition("full-time-index", 0), segment_index_bytes=4096, index_interval_bytes=0)
    for i in range(800):
        append(full, batch(1, ts=now[0] + i))
    assert len(full.segments) > 2
    timed = log_of(storage, TopicPartition("time-rolled", 0), segment_ms=60_000)
    for i in range(30):
        append(timed, batch(1, ts=now[0] + i * 20_000 - (i % 3) * 30_000))
    assert len(timed.segments) > 3
    await storage.run_retention()


async def test_a_clean_restart_trusts_every_segment_normal_operation_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """After a clean shutdown no segment written by normal operation fails the load's sanity
    checks (its time index check included): none is recovered, nothing is logged at WARNING,
    and reads, timestamps and offsets are what they were. A false alarm rebuilds healthy
    segments at every start -- the whole disk read for a broker with much data."""
    now = [1_700_000_000_000]
    storage = await open_storage(tmp_path, time_ms=lambda: now[0])
    await _write_every_kind_of_segment(storage, now)
    await storage.close()
    storage = await open_storage(tmp_path, time_ms=lambda: now[0])  # reopened, then written more
    for lg in storage.all_logs().values():
        for i in range(5):
            append(lg, batch(2, ts=now[0] - 4 * HOUR - i, keys=[b"a", b"b"]))
    mixed = storage.get_log(TopicPartition("mixed", 0))
    assert mixed is not None
    mixed.truncate_to(mixed.log_end_offset - 4)
    expected = {
        tp: ([b.header for b in read_batches(lg)], lg.max_timestamp_and_offset(), [s.base_offset for s in lg.segments])
        for tp, lg in storage.all_logs().items()
    }
    await storage.close()
    recovered = _count_recoveries(monkeypatch)
    caplog.clear()
    caplog.set_level(logging.INFO)
    storage = await open_storage(tmp_path, time_ms=lambda: now[0])
    assert recovered == []
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    got = {
        tp: ([b.header for b in read_batches(lg)], lg.max_timestamp_and_offset(), [s.base_offset for s in lg.segments])
        for tp, lg in storage.all_logs().items()
    }
    assert got == expected
    await storage.close()


async def test_new_epochs_are_fsynced_with_the_log_not_on_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """KAFKA-15046: an epoch change writes the checkpoint without fsync; the log's flush fsyncs it."""
    from odradek.plugins.storage_segment import checkpoint

    synced: list[str] = []
    real_fsync = os.fsync
    monkeypatch.setattr(
        checkpoint.os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real_fsync(fd))[1]
    )
    storage = await open_storage(tmp_path)
    log = log_of(storage)
    path = tmp_path / "events-0" / "leader-epoch-checkpoint"
    synced.clear()
    append(log, batch(2), epoch=3)
    assert path.read_text() == "0\n1\n3 0\n"  # written (readable at once) ...
    assert not synced  # ... but nothing fsynced on the append path
    await log.flush()
    assert str(path) in synced and str(path.parent) in synced
    synced.clear()
    append(log, batch(2), epoch=3)
    await log.flush()
    assert str(path) not in synced  # unchanged since the last flush
    append(log, batch(2), epoch=4)
    synced.clear()
    log.truncate_to(4)  # dropping epoch 4 is made durable at once
    assert path.read_text() == "0\n1\n3 0\n"
    assert str(path) + ".tmp" in synced and str(path.parent) in synced
    await storage.close()


async def test_a_log_start_move_writes_epochs_without_fsync_on_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Retention and DeleteRecords move the log start on the trio thread: the epoch cache's
    rewrite there is not fsynced (an fsync stalls every client), the log's flush fsyncs it."""
    from odradek.plugins.storage_segment import checkpoint

    storage = await open_storage(tmp_path)
    log = log_of(storage)
    append(log, batch(2), epoch=3)
    append(log, batch(2), epoch=5)
    await log.flush()
    synced: list[str] = []
    real_fsync = os.fsync
    monkeypatch.setattr(
        checkpoint.os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real_fsync(fd))[1]
    )
    path = tmp_path / "events-0" / "leader-epoch-checkpoint"
    log.delete_records_before(1)
    assert path.read_text() == "0\n2\n3 1\n5 2\n"  # written at once ...
    assert not synced  # ... without an fsync on this thread
    await log.flush()
    assert str(path) in synced and str(path.parent) in synced
    await storage.write_own_checkpoints()
    storage.abandon()
    path.write_text("0\n2\n3 0\n5 2\n")  # a crash kept the older file
    storage = await open_storage(tmp_path)
    log = log_of(storage)
    assert log.log_start_offset == 1 and [(e.epoch, e.start_offset) for e in log.epoch_entries()] == [(3, 1), (5, 2)]
    await storage.close()


async def _flushed_at_epoch_0(tmp_path: Path) -> tuple[SegmentLogStorage, SegmentLog]:
    """A log of one batch at epoch 0, fsynced, its recovery point checkpointed."""
    storage = await open_storage(tmp_path)
    log = log_of(storage)
    append(log, batch(2), epoch=0)
    await log.flush()
    await storage.write_own_checkpoints()
    return storage, log


async def test_recovery_restores_epochs_the_checkpoint_lost(tmp_path: Path) -> None:
    storage, log = await _flushed_at_epoch_0(tmp_path)
    append(log, batch(2), epoch=2)
    append(log, batch(3), epoch=5)
    path = tmp_path / "events-0" / "leader-epoch-checkpoint"
    storage.abandon()  # kill -9 ...
    path.write_text("0\n1\n0 0\n")  # ... and a power loss that kept only the flushed epoch
    storage = await open_storage(tmp_path)
    log = storage.get_log(TP)
    assert log is not None
    assert [(e.epoch, e.start_offset) for e in log.epoch_entries()] == [(0, 0), (2, 2), (5, 4)]
    assert log.end_offset_for_epoch(2) == (2, 4)
    await storage.close()


async def test_recovery_restores_an_epoch_that_began_below_the_log_start(tmp_path: Path) -> None:
    """Epoch 5 began at offset 4, DeleteRecords then moved the log start to 6, and a power loss
    kept only epoch 0 of the checkpoint. Recovery assigned epochs only from the log start on,
    so epoch 5 was lost and offsets 6 on counted as epoch 0's (OffsetForLeaderEpoch answered
    wrong, and a follower truncating by epoch diverged). As Kafka's recovery: assigned, then
    moved up to the log start."""
    storage, log = await _flushed_at_epoch_0(tmp_path)
    append(log, batch(2), epoch=0)
    append(log, batch(4), epoch=5)
    assert log.delete_records_before(6) == 6
    await storage.write_own_checkpoints(recovery=False)  # the log start is checkpointed
    path = tmp_path / "events-0" / "leader-epoch-checkpoint"
    storage.abandon()
    path.write_text("0\n1\n0 0\n")
    storage = await open_storage(tmp_path)
    log = storage.get_log(TP)
    assert log is not None and log.log_start_offset == 6
    assert [(e.epoch, e.start_offset) for e in log.epoch_entries()] == [(5, 6)]
    assert log.end_offset_for_epoch(0) == (0, 6)  # older than every known epoch: up to its start
    assert log.end_offset_for_epoch(5) == (5, 8)
    await storage.close()


async def test_preallocated_segments_are_cut_to_their_data(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """preallocate=true reserves segment.bytes per new segment; roll and close cut the file to
    its data, and recovery after a crash cuts the unused zeros, saying that is what they were."""
    storage = await open_storage(tmp_path)
    log = log_of(storage, preallocate=True, segment_bytes=64 * 1024)
    part = tmp_path / "events-0"
    first = part / "00000000000000000000.log"
    append(log, batch(3))
    assert first.stat().st_size == 64 * 1024 and log.size_in_bytes < 1024
    while len(log.segments) == 1:
        append(log, batch(3, value_size=1000))
    assert first.stat().st_size == log.segments[0].size  # cut at roll
    second = part / f"{log.segments[1].base_offset:020d}.log"
    assert second.stat().st_size == 64 * 1024
    expected = read_batches(log)
    await storage.close()
    assert second.stat().st_size == log.segments[1].size  # cut at close
    storage = await open_storage(tmp_path)
    log = log_of(storage, preallocate=True, segment_bytes=64 * 1024)
    assert [b.header for b in read_batches(log)] == [b.header for b in expected]
    while len(log.segments) == 2:
        append(log, batch(3, value_size=1000))
    third = part / f"{log.segments[2].base_offset:020d}.log"
    append(log, batch(2))
    expected = read_batches(log)
    storage.abandon()  # kill -9 with a preallocated active segment
    assert third.stat().st_size == 64 * 1024
    caplog.clear()
    storage = await open_storage(tmp_path)
    assert "only zero bytes follow (unused preallocated space" in caplog.text
    log = storage.get_log(TP)
    assert log is not None
    assert [b.header for b in read_batches(log)] == [b.header for b in expected]
    assert third.stat().st_size == log.segments[-1].size
    end = log.log_end_offset
    assert append(log, batch(1)) == (end, end)
    await storage.close()


async def test_missing_and_corrupt_indexes_are_rebuilt(tmp_path: Path) -> None:
    storage = await open_storage(tmp_path, log_segment_bytes=600, log_index_interval_bytes=0)
    log = log_of(storage)
    for i in range(30):
        append(log, batch(2, ts=1000 + i))
    expected = read_batches(log)
    await storage.close()
    part = tmp_path / "events-0"
    indexes = sorted(part.glob("*.index"))
    indexes[0].unlink()
    indexes[1].write_bytes(b"\x01\x02\x03")  # not a multiple of 8
    # plausible entries (monotonic, in range) that point into the middle of batches
    indexes[2].write_bytes(struct.pack(">iiii", 1, 5, 3, 9))
    storage = await open_storage(tmp_path, log_segment_bytes=600, log_index_interval_bytes=0)
    log = storage.get_log(TP)
    assert log is not None
    assert [b.header for b in read_batches(log)] == [b.header for b in expected]
    for offset in range(log.log_end_offset):
        fetched = log.read(offset, 1)
        (found,) = records.iter_batches(fetched.to_bytes())
        assert found.header.base_offset <= offset <= found.header.last_offset
        fetched.release()
    assert log.offset_for_timestamp(1010) == (19, 1010)  # batch 9 holds 1009 and 1010
    await storage.close()


async def test_flush_policy(tmp_path: Path) -> None:
    now = [10_000_000]
    storage = await open_storage(tmp_path / "a", time_ms=lambda: now[0], log_flush_interval_messages=1)
    log = log_of(storage)
    for _ in range(3):
        append(log, batch(2))
        assert log.recovery_point == log.log_end_offset  # fsynced in the append
    await storage.close()

    storage = await open_storage(tmp_path / "b", time_ms=lambda: now[0], log_flush_interval_ms=1000)
    log = log_of(storage)
    append(log, batch(2))
    now[0] += 500
    await storage.flush_tick()
    assert log.recovery_point == 0
    now[0] += 600
    await storage.flush_tick()
    assert log.recovery_point == 2
    await storage.close()

    storage = await open_storage(tmp_path / "c", time_ms=lambda: now[0], log_segment_bytes=300)
    log = log_of(storage)
    while len(log.segments) < 3:
        append(log, batch(2))
    assert log.recovery_point == 0  # default policy: the page cache, until a roll's fsync
    await storage.flush_tick()
    assert log.recovery_point == log.segments[-1].base_offset
    await storage.close()


async def test_a_roll_fsyncs_the_rolled_segment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ "fsync on roll": the flusher's next tick fsyncs the segment that rolled (its log and both
    indexes, and the directory holding the new segment's entries) before the recovery point
    passes it; the active segment is left to the page cache."""
    synced: list[Path] = []
    real = log_module.fsync_paths
    monkeypatch.setattr(log_module, "fsync_paths", lambda paths: (synced.extend(paths), real(paths))[1])
    storage = await open_storage(tmp_path, log_segment_bytes=300)
    log = log_of(storage)
    while len(log.segments) < 2:
        append(log, batch(2))
    append(log, batch(2))
    rolled, active = log.segments
    assert not synced and log.recovery_point == 0
    await storage.flush_tick()
    assert set(synced) == {*rolled.paths, log.dir}
    assert log.recovery_point == active.base_offset
    await storage.close()


async def test_a_corrupt_recovery_point_checkpoint_recovers_every_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """After a crash, a recovery-point checkpoint that cannot be parsed is logged and ignored:
    every segment is verified (as with no checkpoint), none is trusted on its word."""
    storage, log = await _flushed_and_checkpointed(tmp_path, 30)
    expected = [b.header for b in read_batches(log)]
    bases = [seg.base_offset for seg in log.segments]
    storage.abandon()
    (tmp_path / RECOVERY_POINT_CHECKPOINT).write_text("0\n1\nevents 0\n")  # an entry lost its offset
    recovered = _count_recoveries(monkeypatch)
    storage = await open_storage(tmp_path, log_segment_bytes=400)
    assert "ignoring malformed checkpoint file" in caplog.text
    assert recovered == bases
    log = storage.get_log(TP)
    assert log is not None and [b.header for b in read_batches(log)] == expected
    await storage.close()


async def test_open_files_and_maps_stay_within_budget(tmp_path: Path) -> None:
    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    def mapped_indexes() -> int:
        with open("/proc/self/maps") as f:
            return sum(1 for line in f if line.rstrip().endswith((".index", ".timeindex")) and str(tmp_path) in line)

    storage = SegmentLogStorage(config(tmp_path, log_segment_bytes=300), max_open_files=8, max_mapped_indexes=8)
    await storage.open()
    before = open_fds()
    tps = [TopicPartition("many", p) for p in range(60)]
    for tp in tps:
        log = log_of(storage, tp)
        while len(log.segments) < 3:
            append(log, batch(2))
    for tp in tps:
        log = storage.get_log(tp)
        assert log is not None and len(read_batches(log)) == log.log_end_offset // 2
    # an mmap holds a descriptor of its own (Python dups it): the fd budget is files + maps
    assert open_fds() - before <= 8 + 8
    assert mapped_indexes() <= 8
    await storage.close()
    storage = SegmentLogStorage(config(tmp_path, log_segment_bytes=300), max_open_files=8, max_mapped_indexes=8)
    await storage.open()
    assert open_fds() - before <= 8 + 8 and mapped_indexes() <= 8
    await storage.close()


async def test_thousands_of_partitions_stay_within_the_descriptor_and_map_budget(tmp_path: Path) -> None:
    """3,000 partitions of 3 segments each (27,000 files) with a budget of 300 open files and
    300 maps: appends, reads, a clean restart and a crash recovery stay within it, counted in
    /proc/self/fd and /proc/self/maps."""
    budget = 300

    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    def mapped() -> int:
        with open("/proc/self/maps") as f:
            return sum(1 for line in f if str(tmp_path) in line)

    def start() -> SegmentLogStorage:
        cfg = config(tmp_path, log_segment_bytes=300, log_index_interval_bytes=0)
        return SegmentLogStorage(cfg, max_open_files=budget, max_mapped_indexes=budget)

    storage = start()
    await storage.open()
    before = open_fds()
    tps = [TopicPartition("many", p) for p in range(3000)]
    data = bytes(batch(2, value_size=200))  # more than segment.bytes: a segment per batch
    for tp in tps:
        log = log_of(storage, tp)
        for _ in range(3):
            append(log, bytearray(data))
        assert len(log.segments) == 3
    assert open_fds() - before <= 2 * budget and mapped() <= budget
    for tp in tps[::7]:
        log = storage.get_log(tp)
        assert log is not None and len(read_batches(log)) == log.log_end_offset // 2
    assert open_fds() - before <= 2 * budget and mapped() <= budget
    await storage.close()
    assert open_fds() < before and mapped() == 0
    storage = start()
    await storage.open()  # a clean restart checks every segment's indexes
    assert open_fds() - before <= 2 * budget and mapped() <= budget
    storage.abandon()
    storage = start()
    await storage.open()  # a crash: every active segment is recovered
    assert open_fds() - before <= 2 * budget and mapped() <= budget
    assert sorted(log.log_end_offset for log in storage.all_logs().values()) == [6] * len(tps)
    await storage.close()


async def test_a_fetch_pins_its_file(tmp_path: Path) -> None:
    storage = SegmentLogStorage(config(tmp_path), max_open_files=2, max_mapped_indexes=2)
    await storage.open()
    for p in range(6):
        append(log_of(storage, TopicPartition("pin", p)), batch(3, value_size=50))
    log0 = storage.get_log(TopicPartition("pin", 0))
    assert log0 is not None
    held = log0.read(0, 1 << 20)
    span = held.file_range()
    assert span is not None
    expected = held.to_bytes()
    for p in range(1, 6):  # evicts everything it can
        other = storage.get_log(TopicPartition("pin", p))
        assert other is not None
        other.read(0, 100).release()
    await storage.delete_log(TopicPartition("pin", 0))
    assert not (tmp_path / "pin-0").exists()
    assert os.pread(span.fd, span.length, span.position) == expected  # still the old inode
    file = log0.segments[0].log
    assert file.is_open
    held.release()
    assert not file.is_open
    await storage.close()


async def test_a_fetch_pinning_more_files_than_the_budget_tries_each_eviction_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One fetch reading 400 partitions holds 400 pinned files against a budget of 8: each file
    opened asks the cache to evict, and a pinned file must not be asked again on every later
    open (that re-walk made a 5,000-partition fetch take 3 s instead of 0.05 s). Once the reads
    are released the budget holds again."""
    from odradek.plugins.storage_segment.handles import LogFile

    storage = SegmentLogStorage(config(tmp_path), max_open_files=8, max_mapped_indexes=8)
    await storage.open()
    tps = [TopicPartition("wide", p) for p in range(400)]
    for tp in tps:
        append(log_of(storage, tp), batch(1, value_size=20))
    attempts = 0
    evict = LogFile.evict

    def counting_evict(self: LogFile) -> bool:
        nonlocal attempts
        attempts += 1
        return evict(self)

    monkeypatch.setattr(LogFile, "evict", counting_evict)
    held = []
    for tp in tps:
        log = storage.get_log(tp)
        assert log is not None
        held.append(log.read(0, 1 << 20))
    assert attempts <= 2 * len(tps)  # 79,000 before: every open re-asked every pinned file
    for read in held:
        read.release()
    assert len(storage.ctx.files) <= 8
    await storage.close()


async def test_delete_log_removes_the_directory(tmp_path: Path) -> None:
    storage = await open_storage(tmp_path)
    append(log_of(storage), batch(2))
    await storage.delete_log(TP)
    assert not (tmp_path / "events-0").exists()  # renamed to <dir>.<uuid>-delete at once
    await storage.flush_tick()  # removed in the background
    assert [p.name for p in tmp_path.iterdir() if p.is_dir()] == []
    await storage.close()


@pytest.mark.parametrize("partition", [0, 12, 99_999])
async def test_deleting_a_log_of_the_longest_topic_name(tmp_path: Path, partition: int) -> None:
    """A 249-character topic (Kafka's longest) with the delete suffix would pass 255 bytes: the
    name is cut as Kafka cuts it, the delete goes through, and the topic created again is empty."""
    tp = TopicPartition("t" * 249, partition)
    storage = await open_storage(tmp_path)
    append(log_of(storage, tp), batch(2))
    await storage.delete_log(tp)
    assert not (tmp_path / f"{tp.topic}-{partition}").exists()
    assert log_of(storage, tp).log_end_offset == 0
    await storage.close()


async def test_a_log_dir_that_cannot_be_renamed_is_removed_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the rename for deletion fails, the directory must not stay under its name (a topic
    created again would reopen its data): it is removed where it is."""
    storage = await open_storage(tmp_path)
    append(log_of(storage), batch(2))

    def refuse(src: object, dst: object) -> None:
        raise OSError(36, "File name too long")

    monkeypatch.setattr(os, "rename", refuse)
    await storage.delete_log(TP)
    monkeypatch.undo()
    assert not (tmp_path / "events-0").exists()
    assert log_of(storage).log_end_offset == 0
    await storage.close()


async def test_reads_near_the_end_agree_with_the_index_and_scan(tmp_path: Path) -> None:
    """The active segment remembers where the batches after its last index entry start, so a
    fetch at the end reads one header instead of scanning; every read must find the batch the
    index and a header scan find, through index entries, truncation and multi-batch appends."""
    storage = await open_storage(tmp_path, log_index_interval_bytes=1000)
    log = log_of(storage)

    def check_every_offset() -> None:
        seg = log.segments[-1]
        for offset in range(log.log_start_offset, log.log_end_offset):
            fast = seg.translate(offset)
            seg_tail = (seg._tail_after, list(seg._tail_last), list(seg._tail_pos))
            seg._forget_tail()
            slow = seg.translate(offset)
            seg._tail_after, seg._tail_last[:], seg._tail_pos[:] = seg_tail[0], seg_tail[1], seg_tail[2]
            assert fast is not None and slow is not None
            assert (fast[0], fast[1].base_offset) == (slow[0], slow[1].base_offset), offset
            info = log.read(offset, 1)
            assert info.first_batch_offset == fast[1].base_offset
            info.release()

    for i in range(60):
        append(log, batch(1 + i % 3, ts=1_000_000 + i))
    assert log.segments[-1]._tail_last  # batches after the last index entry are remembered
    check_every_offset()
    log.truncate_to(log.log_end_offset - 5)
    assert not log.segments[-1]._tail_last
    check_every_offset()
    for i in range(20):
        append(log, batch(2, ts=2_000_000 + i))
    two = batch(1) + batch(2)
    log.append_as_leader(two, records.validate_batches(two, exact_counts=False), 0)
    check_every_offset()
    for i in range(20):
        append(log, batch(1, ts=3_000_000 + i))
    check_every_offset()
    await storage.close()


async def test_a_tail_that_disagrees_with_the_file_is_dropped(tmp_path: Path) -> None:
    storage = await open_storage(tmp_path, log_index_interval_bytes=1000)
    log = log_of(storage)
    for _ in range(30):
        append(log, batch(1))
    seg = log.segments[-1]
    assert len(seg._tail_last) >= 2
    seg._tail_pos[-1] = seg._tail_pos[-2]  # a wrong position: its header names other offsets
    found = seg.translate(seg._tail_last[-1])
    assert found is not None and found[1].last_offset == log.log_end_offset - 1
    assert not seg._tail_last
    await storage.close()


def _uncached_read(log: SegmentLog, offset: int, max_bytes: int) -> tuple[int, int, int]:
    """A read with every segment's fetch-end memory set aside (and restored afterwards)."""
    saved = [dict(seg._fetch_ends) for seg in log.segments]
    for seg in log.segments:
        seg._fetch_ends.clear()
    info = log.read(offset, max_bytes)
    answer = (info.first_batch_offset, info.position, info.size)
    info.release()
    for seg, ends in zip(log.segments, saved, strict=True):
        seg._fetch_ends.clear()
        seg._fetch_ends.update(ends)
    return answer


async def test_sequential_reads_agree_with_uncached_reads(tmp_path: Path) -> None:
    """Each read remembers where it ended, so the next fetch of a consumer starts from one header
    read and a narrowed index search; every such read must return exactly what a read without
    that memory returns, for batches of mixed sizes, several consumers and fetch sizes."""
    rng = random.Random(7)
    storage = await open_storage(tmp_path, log_index_interval_bytes=700, log_segment_bytes=60_000)
    log = log_of(storage)
    for i in range(400):
        append(log, batch(rng.randint(1, 4), value_size=rng.choice([10, 100, 900, 3000]), ts=1_000_000 + i))
    assert len(log.segments) > 3
    hits = 0
    for consumer in range(5):
        offset = rng.randrange(0, 50) * consumer
        fetch = rng.choice([1, 500, 4000, 20_000, 1 << 20])
        while offset < log.log_end_offset:
            expected = _uncached_read(log, offset, fetch)
            hits += any(offset in seg._fetch_ends for seg in log.segments)
            info = log.read(offset, fetch)
            assert (info.first_batch_offset, info.position, info.size) == expected, (consumer, offset, fetch)
            assert info.size > 0
            last = list(records.iter_batches(info.to_bytes()))[-1]
            info.release()
            offset = last.header.next_offset
    assert hits > 100  # the memory was used, not bypassed
    await storage.close()


async def test_truncation_forgets_where_reads_ended(tmp_path: Path) -> None:
    """After truncation the remembered end of a read may lie inside a new batch whose record
    bytes look like a batch header with the right offset: the memory must be gone, not trusted."""
    storage = await open_storage(tmp_path)
    log = log_of(storage)
    for _ in range(10):
        append(log, batch(1, value_size=100))
    first = log.read(0, 450)
    assert first.first_batch_offset == 0
    end_position = first.position + first.size
    ended_at = len(list(records.iter_batches(first.to_bytes())))  # the next offset to fetch
    first.release()
    seg = log.segments[-1]
    assert ended_at in seg._fetch_ends
    log.truncate_to(1)
    batch_start = seg.size
    # a forged header for offset ``ended_at`` lands on ``end_position`` inside the new batch
    forged = struct.pack(">qiib", ended_at, 200, 0, records.MAGIC) + bytes(records.HEADER_SIZE - 17)
    marker = b"\xa5" * 16
    probe = batch(1, values=[marker + bytes(400)])
    value_at = batch_start + bytes(probe).index(marker)
    pad = end_position - value_at
    assert 0 <= pad <= 400 - len(forged)
    value = bytes(pad) + forged + bytes(400 + 16 - pad - len(forged))
    append(log, batch(2, values=[value, b"x"]))  # offsets 1 and 2
    for _ in range(5):
        append(log, batch(1, value_size=100))
    assert os.pread(seg.log.fd(), 8, end_position) == struct.pack(">q", ended_at)
    info = log.read(ended_at, 1 << 20)
    got = list(records.iter_batches(info.to_bytes()))
    info.release()
    assert got[0].header.base_offset <= ended_at <= got[0].header.last_offset
    assert info.position != end_position
    await storage.close()


def test_narrowed_index_search_agrees_with_the_full_one(tmp_path: Path) -> None:
    """``after``/``span`` only narrow the search: any valid starting entry and any guess of the
    span give the plain binary search's answer."""
    rng = random.Random(3)
    index = OffsetIndex(tmp_path / "0.index", 0, 8 * 4096, HandleCache(8), writable=True)
    position = 0
    positions = []
    for i in range(2000):
        index.reserve(1)
        index.append(i, position)
        positions.append(position)
        position += rng.choice([50, 700, 4096, 17_000])
    for _ in range(6000):
        # exact entry positions, the gaps between them, and starts and guesses near the end
        target = rng.choice(positions) + rng.choice([0, 0, -1, 1]) if rng.random() < 0.7 else rng.randrange(position)
        plain = index._search(1, target)
        after = rng.randint(max(plain - 60, 0), plain) if plain >= 0 else -1
        span = rng.choice([0, 1, 2, 5, 50, 3000, max(len(positions) - 1 - after, 1), len(positions) - after])
        assert index._search(1, target, after=after, span=span) == plain, (target, after, span)
        slot, found_position = index.slot_at_or_before(target, after=after, span=span)
        assert slot == plain and (slot < 0 or found_position <= target)
    index.close()
