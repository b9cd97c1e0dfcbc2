"""Retention of the segment engine: by time, by size, by log start offset; whole segments only
(a breached active one rolls first); in the background under an autojump clock."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing
from storage_helpers import TP, append, batch, config, log_of, open_storage, read_batches, topic_config

from odradek.plugins.storage_segment.storage import SegmentLogStorage

HOUR = 3_600_000


async def _log_with_segments(tmp_path: Path, now: list[int], count: int = 12, **topic: object):
    storage = await open_storage(tmp_path, time_ms=lambda: now[0], log_segment_bytes=250)
    log = log_of(storage, segment_bytes=250, **topic)
    for i in range(count):
        append(log, batch(2, ts=now[0] - (count - i) * HOUR))  # one hour apart, oldest first
    return storage, log


async def test_time_retention_deletes_old_inactive_segments(tmp_path: Path) -> None:
    now = [1_700_000_000_000]
    storage, log = await _log_with_segments(tmp_path, now, retention_ms=5 * HOUR + 1)
    before = len(log.segments)
    assert before > 3
    freed = await storage.run_retention()
    remaining = log.segments
    assert freed > 0 and len(remaining) < before
    for seg in remaining[:-1]:
        assert now[0] - seg.largest_timestamp() <= 5 * HOUR + 1
    assert log.log_start_offset == remaining[0].base_offset
    assert read_batches(log)[0].header.base_offset == log.log_start_offset
    part = tmp_path / "events-0"
    assert sorted(p.name for p in part.glob("*.log")) == [f"{s.base_offset:020d}.log" for s in remaining]
    assert not list(part.glob("*.deleted"))
    assert (tmp_path / "log-start-offset-checkpoint").read_text().endswith(f"events 0 {log.log_start_offset}\n")
    await storage.close()


async def test_a_breached_active_segment_is_rolled_then_deleted(tmp_path: Path) -> None:
    """Kafka's ``deletableSegments``/``deleteSegments``: when every record is past retention.ms
    (a topic nobody writes to any more), the active segment goes too, after a new empty one is
    rolled at the log end; appends continue at the same offset, and a restart keeps the log
    start there."""
    now = [1_700_000_000_000]
    storage, log = await _log_with_segments(tmp_path, now, retention_ms=1)
    leo = log.log_end_offset
    assert leo > 0 and log.segments[-1].size > 0
    await storage.run_retention()  # no high watermark set (no broker): the active segment stays
    assert len(log.segments) == 1 and log.segments[0].size > 0
    log.high_watermark = leo  # every record committed, as the broker sets it
    freed = await storage.run_retention()
    assert freed > 0 and log.size_in_bytes == 0
    assert [seg.base_offset for seg in log.segments] == [leo]
    assert (log.log_start_offset, log.log_end_offset) == (leo, leo)
    part = tmp_path / "events-0"
    assert sorted(p.name for p in part.glob("*.log")) == [f"{leo:020d}.log"]
    assert await storage.run_retention() == 0  # an empty active segment stays: no roll after roll
    assert [seg.base_offset for seg in log.segments] == [leo]
    assert append(log, batch(2, ts=now[0])) == (leo, leo + 1)
    log.high_watermark = leo + 2
    assert read_batches(log)[0].header.base_offset == leo
    await storage.close()
    storage = await open_storage(tmp_path, time_ms=lambda: now[0], log_segment_bytes=250)
    reopened = storage.get_log(TP)
    assert reopened is not None
    assert (reopened.log_start_offset, reopened.log_end_offset) == (leo, leo + 2)
    await storage.close()


async def test_the_active_segment_stays_while_retention_keeps_it(tmp_path: Path) -> None:
    """The active segment is only taken when its own records are breached; by size, as any
    segment, only when the log without it still holds retention.bytes (alone: retention.bytes=0)."""
    now = [1_700_000_000_000]
    storage, log = await _log_with_segments(tmp_path, now, retention_ms=HOUR + 1)
    log.high_watermark = log.log_end_offset
    active = log.segments[-1]
    await storage.run_retention()
    assert list(log.segments) == [active] and active.size > 0
    log.update_config(topic_config(storage, segment_bytes=250, retention_bytes=1))
    await storage.run_retention()
    assert list(log.segments) == [active]
    log.update_config(topic_config(storage, segment_bytes=250, retention_bytes=0))
    leo = log.log_end_offset
    await storage.run_retention()
    assert [seg.base_offset for seg in log.segments] == [leo] and log.log_start_offset == leo
    await storage.close()


async def test_size_retention_keeps_at_least_retention_bytes(tmp_path: Path) -> None:
    now = [1_700_000_000_000]
    storage, log = await _log_with_segments(tmp_path, now, count=20, retention_bytes=1000)
    await storage.run_retention()
    assert log.size_in_bytes >= 1000
    assert log.size_in_bytes - log.segments[0].size < 1000
    await storage.close()


async def test_a_future_timestamp_holds_time_retention_but_not_size_retention(tmp_path: Path) -> None:
    """Time retention reads a segment's largest timestamp, as Kafka does: a record stamped in
    the future (a producer's wrong clock) keeps its segment, and, since retention deletes a
    prefix of the log, every later one; it never makes a segment look old. Size retention
    still applies."""
    now = [1_700_000_000_000]
    storage, log = await _log_with_segments(tmp_path, now, count=12, retention_ms=HOUR)
    log.truncate_to(log.segments[3].base_offset)  # the 4th segment anew, with a record a day ahead
    append(log, batch(2, ts=now[0] + 24 * HOUR))
    while len(log.segments) < 8:
        append(log, batch(2, ts=now[0] - 3 * HOUR))
    assert log.segments[3].largest_timestamp() == now[0] + 24 * HOUR + 1
    bases = [seg.base_offset for seg in log.segments]
    await storage.run_retention()
    assert [seg.base_offset for seg in log.segments] == bases[3:]  # the three before it go
    now[0] += 20 * HOUR
    await storage.run_retention()
    assert [seg.base_offset for seg in log.segments] == bases[3:]  # still in its future
    log.update_config(topic_config(storage, segment_bytes=250, retention_ms=HOUR, retention_bytes=600))
    await storage.run_retention()
    assert log.segments[0].base_offset > bases[3] and log.size_in_bytes >= 600
    await storage.close()


async def test_compact_delete_logs_are_compacted_and_retained(tmp_path: Path) -> None:
    """cleanup.policy=compact,delete: the cleaner keeps the latest record per key and time
    retention still deletes whole old segments."""
    now = [1_700_000_000_000]
    storage = await open_storage(tmp_path, time_ms=lambda: now[0], log_segment_bytes=250)
    policy = {"cleanup_policy": "compact,delete", "min_cleanable_dirty_ratio": 0.0}
    log = log_of(storage, segment_bytes=250, retention_ms=5 * HOUR, **policy)
    for i in range(12):  # keys k0, k1 updated each hour, oldest first
        append(log, batch(2, values=[b"v%d" % i] * 2, ts=now[0] - (12 - i) * HOUR))
    assert await storage.run_cleaner() == 1
    active = log.segments[-1].base_offset
    kept = [(r.key, r.value) for b in read_batches(log) for r in b.records if r.offset < active]
    assert sorted(kept) == sorted(set(kept)) and len({k for k, _ in kept}) == len(kept)
    await storage.run_retention()
    assert all(now[0] - seg.largest_timestamp() <= 5 * HOUR for seg in log.segments[:-1])
    assert log.log_start_offset == log.segments[0].base_offset > 0
    await storage.close()


async def test_compacted_topics_keep_old_segments_but_honour_the_log_start(tmp_path: Path) -> None:
    now = [1_700_000_000_000]
    storage, log = await _log_with_segments(tmp_path, now, retention_ms=1, cleanup_policy="compact")
    before = len(log.segments)
    await storage.run_retention()
    assert len(log.segments) == before  # no time/size retention without "delete"
    cut = log.segments[3].base_offset + 1
    log.delete_records_before(cut)
    await storage.run_retention()
    assert log.segments[0].base_offset <= cut < log.segments[1].base_offset
    assert len(log.segments) == before - 3 and log.log_start_offset == cut
    await storage.close()
    storage = await open_storage(tmp_path, log_segment_bytes=250)
    reopened = storage.get_log(TP)
    assert reopened is not None and reopened.log_start_offset == cut
    await storage.close()


@pytest.mark.trio
async def test_retention_runs_in_the_background(tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    wall = [1_700_000_000_000]

    def now_ms() -> int:
        return wall[0] + int(trio.current_time() * 1000)

    cfg = config(
        tmp_path,
        log_segment_bytes=250,
        log_retention_check_interval_ms=60_000,
        log_retention_ms=HOUR,
        log_flush_scheduler_interval_ms=60_000,
    )
    storage = SegmentLogStorage(cfg, time_ms=now_ms)
    await storage.open()
    log = log_of(storage, segment_bytes=250)
    for i in range(10):
        append(log, batch(2, ts=now_ms() + i))
    log.high_watermark = log.log_end_offset
    segments = len(log.segments)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(storage.run)
        await trio.sleep(30 * 60)  # half the retention time: nothing goes
        assert len(log.segments) == segments
        await trio.sleep(45 * 60)  # every record is past retention.ms: the active segment goes too
        assert len(log.segments) == 1 and log.size_in_bytes == 0
        assert log.log_start_offset == log.log_end_offset == 20
        nursery.cancel_scope.cancel()
    await storage.close()


async def test_retention_stops_at_the_high_watermark(tmp_path: Path) -> None:
    """Kafka's ``deletableSegments``: a segment whose successor starts past the high watermark
    stays, whatever the retention settings say; its records may still be truncated away, and
    the log start never passes the high watermark."""
    now = [1_700_000_000_000]
    storage, log = await _log_with_segments(tmp_path, now, retention_ms=1)
    segments = log.segments
    assert len(segments) > 4
    log.high_watermark = segments[2].base_offset
    await storage.run_retention()
    assert log.segments[0].base_offset == segments[2].base_offset == log.log_start_offset
    assert log.log_start_offset <= log.high_watermark
    log.high_watermark = log.log_end_offset - 1  # the active segment's records are not all committed
    await storage.run_retention()
    assert len(log.segments) == 1 and log.segments[0].size > 0
    assert log.log_start_offset == log.segments[0].base_offset <= log.high_watermark
    log.high_watermark = leo = log.log_end_offset
    await storage.run_retention()
    assert [seg.base_offset for seg in log.segments] == [leo] and log.log_start_offset == leo
    await storage.close()
