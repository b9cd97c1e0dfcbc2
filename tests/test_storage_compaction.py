"""Log compaction: latest record per key, tombstones, preserved offsets and batch metadata,
producer-state batches, checkpoints, concurrency with appends and truncation, crash mid-swap."""

from __future__ import annotations

import itertools
import os
import shutil
import struct
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import trio
import trio.testing
from storage_helpers import TP, append, batch, key_values, open_storage, read_batches

from odradek import records
from odradek.config import ConfigError, TopicConfig, load_config
from odradek.errors import InvalidConfig
from odradek.interfaces import TopicPartition
from odradek.manager import Plugins, build_plugin_manager
from odradek.plugins.storage_segment import cleaner
from odradek.plugins.storage_segment.log import SegmentLog
from odradek.plugins.storage_segment.storage import SegmentLogStorage

COMPACT: dict[str, Any] = {"cleanup_policy": "compact", "segment_bytes": 400, "min_cleanable_dirty_ratio": 0.0}


def compact_config(storage: SegmentLogStorage, **overrides: Any) -> TopicConfig:
    return storage.config.topic_config({k.replace("_", "."): v for k, v in {**COMPACT, **overrides}.items()})


def compacted_log(storage: SegmentLogStorage, **overrides: Any) -> SegmentLog:
    return storage.get_or_create_log(TP, compact_config(storage, **overrides))


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def write_keys(log: SegmentLog, rounds: int, keys: int = 5, ts: int | None = None) -> dict[bytes, tuple[int, bytes]]:
    """``rounds`` batches each updating every key; returns key -> (offset, value) of the latest."""
    latest: dict[bytes, tuple[int, bytes]] = {}
    for r in range(rounds):
        names = [b"key-%d" % k for k in range(keys)]
        values = [b"v%d-%d" % (r, k) for k in range(keys)]
        first, _ = append(log, batch(keys, keys=names, values=values, ts=ts if ts is not None else now_ms()))
        for i, (name, value) in enumerate(zip(names, values, strict=True)):
            latest[name] = (first + i, value)
    return latest


def inactive_records(log: SegmentLog) -> list[tuple[int, bytes | None, bytes | None]]:
    active = log.segments[-1].base_offset
    return [kv for kv in key_values(log) if kv[0] < active]


async def test_keeps_the_latest_record_per_key_at_its_offset(tmp_path: Path) -> None:
    storage = await open_storage(tmp_path)
    log = compacted_log(storage)
    write_keys(log, 20)
    before = key_values(log)
    leo, active = log.log_end_offset, log.segments[-1].base_offset
    assert await storage.run_cleaner() == 1
    after = key_values(log)
    assert log.log_end_offset == leo
    cleaned = [kv for kv in after if kv[0] < active]
    # the latest of each key below the active segment (the active one is never cleaned, and
    # as in Kafka the key map covers only the cleanable range)
    latest_below = {}
    for offset, key, value in before:
        if offset < active:
            latest_below[key] = (offset, key, value)
    assert cleaned == sorted(latest_below.values())
    assert [kv for kv in after if kv[0] >= active] == [kv for kv in before if kv[0] >= active]
    assert set(before) >= set(after)
    for offset in range(log.log_start_offset, leo):  # any offset is still readable
        fetched = log.read(offset, 1)
        (found,) = records.iter_batches(fetched.to_bytes())
        assert found.header.last_offset >= offset
        fetched.release()
    assert await storage.run_cleaner() == 0  # nothing dirty any more
    await storage.close()


HOUR = 3_600_000


def _batch_holding(log: SegmentLog, offset: int) -> records.RecordBatch:
    return next(b for b in read_batches(log) if b.header.base_offset <= offset <= b.header.last_offset)


async def test_tombstones_go_after_delete_retention(tmp_path: Path) -> None:
    """KIP-534: the round that first sees a tombstone stamps now + delete.retention.ms in its
    batch; the tombstone stays until then, and the first round at or past it (due with no new
    dirt) removes it."""
    clock = [now_ms()]
    storage = await open_storage(tmp_path, time_ms=lambda: clock[0])
    log = compacted_log(storage, delete_retention_ms=HOUR)
    write_keys(log, 3)
    tombstone, _ = append(log, batch(1, keys=[b"key-1"], values=[None], ts=now_ms()))
    write_keys(log, 6, keys=1)  # only key-0 from now on, to roll segments past the tombstone
    assert await storage.run_cleaner() == 1
    kept = {k: v for _, k, v in inactive_records(log)}
    assert kept[b"key-1"] is None  # the tombstone stays, the values it deleted do not
    assert [v for _, k, v in inactive_records(log) if k == b"key-1"] == [None]
    stamped = _batch_holding(log, tombstone).header
    assert stamped.has_delete_horizon and stamped.first_timestamp == clock[0] + HOUR
    clock[0] += HOUR - 1
    assert await storage.run_cleaner() == 0  # nothing dirty and the horizon still ahead
    assert (tombstone, b"key-1", None) in key_values(log)
    clock[0] += 1
    assert await storage.run_cleaner() == 1  # the horizon alone makes the log due
    assert b"key-1" not in {k for _, k, _ in key_values(log)}
    assert await storage.run_cleaner() == 0  # nothing left waiting
    await storage.close()


async def test_a_tombstone_with_an_old_timestamp_still_waits_delete_retention(tmp_path: Path) -> None:
    """A producer replaying history writes a tombstone stamped a week ago. Measured by record
    timestamps it would go in the first round, before a consumer reading the log could see the
    delete; with the horizon stamped at the first round it stays delete.retention.ms, and
    every record keeps its own timestamp through the rewrite."""
    clock = [now_ms()]
    week_ago = clock[0] - 7 * 86_400_000
    storage = await open_storage(tmp_path, time_ms=lambda: clock[0])
    log = compacted_log(storage, delete_retention_ms=HOUR)
    append(log, batch(2, keys=[b"a", b"b"], values=[b"1", b"1"], ts=week_ago))
    tombstone, _ = append(log, batch(2, keys=[b"a", b"c"], values=[None, b"2"], ts=week_ago + 5))
    while len(log.segments) < 2:
        append(log, batch(1, keys=[b"filler"], values=[b"x" * 100], ts=week_ago + 10))
    assert await storage.run_cleaner() == 1
    assert (tombstone, b"a", None) in key_values(log)
    stamped = _batch_holding(log, tombstone)
    assert stamped.header.has_delete_horizon and stamped.header.first_timestamp == clock[0] + HOUR
    assert [(r.key, r.timestamp) for r in stamped.records] == [(b"a", week_ago + 5), (b"c", week_ago + 6)]
    assert stamped.header.max_timestamp == week_ago + 6
    clock[0] += HOUR
    assert await storage.run_cleaner() == 1
    assert [(k, v) for _, k, v in inactive_records(log) if k != b"filler"] == [(b"b", b"1"), (b"c", b"2")]
    kept_c = _batch_holding(log, tombstone + 1)
    assert [(r.key, r.timestamp) for r in kept_c.records] == [(b"c", week_ago + 6)]
    await storage.close()


async def test_batch_metadata_and_compression_survive(tmp_path: Path) -> None:
    plugins = Plugins(build_plugin_manager(entry_points_enabled=False, extra=["odradek.plugins.compress.plugin"]))
    cfg = load_config(env={}, plugins=plugins, overrides={"log.dirs": str(tmp_path)})
    storage = SegmentLogStorage(cfg)
    await storage.open()
    log = compacted_log(storage)
    codecs = plugins.codecs()
    keys = [b"a", b"b", b"c", b"d"]
    data = bytearray(
        records.build_batch(
            [(k, b"old-" + k, [("h", b"1")], now_ms()) for k in keys],
            compression=records.Compression.GZIP,
            codecs=codecs,
            producer_id=77,
            producer_epoch=3,
            base_sequence=40,
        )
    )
    append(log, data, epoch=9)
    append(log, batch(2, keys=[b"b", b"d"], values=[b"new-b", b"new-d"], ts=now_ms()), epoch=9)
    while len(log.segments) < 2:
        append(log, batch(1, keys=[b"z"], values=[b"filler" * 20], ts=now_ms()), epoch=9)
    await storage.run_cleaner()
    first = read_batches(log)[0]
    h = first.header
    assert (h.base_offset, h.last_offset_delta, h.record_count) == (0, 3, 2)  # offsets 0..3 kept as a span
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (77, 3, 40)
    assert h.partition_leader_epoch == 9 and h.compression == records.Compression.GZIP
    assert [(r.offset, r.key, r.value, r.headers) for r in first.records] == [
        (0, b"a", b"old-a", [("h", b"1")]),
        (2, b"c", b"old-c", [("h", b"1")]),
    ]
    await storage.close()


async def test_a_producers_last_batch_stays_as_an_empty_batch(tmp_path: Path) -> None:
    storage = await open_storage(tmp_path)
    log = compacted_log(storage)
    append(log, batch(1, keys=[b"x"], values=[b"1"], ts=now_ms()))  # no producer: dropped
    append(log, batch(1, keys=[b"p"], values=[b"1"], ts=now_ms(), producer_id=5, producer_epoch=1, base_sequence=0))
    append(log, batch(2, keys=[b"x", b"p"], values=[b"2", b"2"], ts=now_ms()))
    control = bytearray(records.build_control_batch(records.ControlRecordType.COMMIT, producer_id=6, producer_epoch=0))
    append(log, control)
    while len(log.segments) < 2:
        append(log, batch(1, keys=[b"y"], values=[b"f" * 100], ts=now_ms()))
    await storage.run_cleaner()
    batches = read_batches(log)
    assert batches[0].header.base_offset == 1  # offset 0 (x, no producer) is gone entirely
    empty = batches[0].header
    assert (empty.record_count, empty.producer_id, empty.producer_epoch, empty.base_sequence) == (0, 5, 1, 0)
    assert batches[2].header.is_control and batches[2].header.producer_id == 6
    await storage.close()


async def test_an_expired_producers_last_batch_goes(tmp_path: Path) -> None:
    """Producer 5 was last seen two days ago (past producer.id.expiration.ms, a day by default),
    producer 6 just now: only 6's last batch stays as an empty batch, and a marker that is an
    expired producer's last batch goes like any other once its transaction is gone."""
    storage = await open_storage(tmp_path)
    log = compacted_log(storage, delete_retention_ms=0)
    old = now_ms() - 2 * 86_400_000
    recent = now_ms() - 60_000  # multi-record batches end at ts + n - 1: keep them behind the clock
    idempotent = {"producer_epoch": 0, "base_sequence": 0}
    append(log, batch(1, keys=[b"p"], values=[b"1"], ts=old, producer_id=5, **idempotent))
    append(log, batch(1, keys=[b"q"], values=[b"1"], ts=recent, producer_id=6, **idempotent))
    txn = batch(1, keys=[b"r"], values=[b"1"], ts=old, producer_id=7, is_transactional=True, **idempotent)
    append(log, txn)
    marker = records.build_control_batch(
        records.ControlRecordType.COMMIT, producer_id=7, producer_epoch=0, timestamp=old
    )
    append(log, bytearray(marker))
    append(log, batch(3, keys=[b"p", b"q", b"r"], values=[b"2", b"2", b"2"], ts=recent))
    while len(log.segments) < 3:
        append(log, batch(1, keys=[b"y"], values=[b"f" * 100], ts=recent))
    await storage.run_cleaner()
    assert await storage.run_cleaner() == 1  # the marker's horizon (now + 0) stamped by the first
    headers = [b.header for b in read_batches(log)]
    assert [(h.producer_id, h.record_count) for h in headers if h.producer_id >= 0] == [(6, 0)]
    await storage.close()


async def test_min_compaction_lag_and_dirty_ratio(tmp_path: Path) -> None:
    storage = await open_storage(tmp_path)
    log = compacted_log(storage, min_compaction_lag_ms=3_600_000)
    write_keys(log, 20)
    assert await storage.run_cleaner() == 0  # every segment is younger than the lag
    log.update_config(compact_config(storage))
    assert await storage.run_cleaner() == 1
    write_keys(log, 1)
    log.update_config(compact_config(storage, min_cleanable_dirty_ratio=0.99))
    assert await storage.run_cleaner() == 0  # a little new dirt over a clean log is below the ratio
    await storage.close()


async def test_progress_is_checkpointed(tmp_path: Path) -> None:
    storage = await open_storage(tmp_path)
    log = compacted_log(storage)
    write_keys(log, 20)
    await storage.run_cleaner()
    end = log.first_dirty_offset
    assert end == log.segments[-1].base_offset
    await storage.close()
    assert f"events 0 {end}\n" in (tmp_path / "cleaner-offset-checkpoint").read_text()
    storage = await open_storage(tmp_path)
    log = compacted_log(storage)
    assert log.first_dirty_offset == end
    assert await storage.run_cleaner() == 0
    await storage.close()


async def test_a_small_key_map_cleans_in_several_rounds(tmp_path: Path) -> None:
    storage = await open_storage(tmp_path)
    storage.cleaner.max_map_bytes = 6 * 122  # six 2-byte keys
    log = compacted_log(storage)
    for r in range(30):
        append(log, batch(3, keys=[b"k%d" % (r % 10), b"k%d" % ((r + 1) % 10), b"s"], ts=now_ms()))
    rounds = 0
    while await storage.run_cleaner():
        rounds += 1
    assert rounds > 1
    keys = [k for _, k, _ in inactive_records(log)]
    assert len(keys) == len(set(keys))
    await storage.close()


def _latest_values(log: SegmentLog) -> dict[bytes, bytes]:
    """Key -> its latest value, reading the whole log (a deleted key is absent)."""
    out: dict[bytes, bytes | None] = {}
    for _, key, value in key_values(log):
        if key is not None:
            out[key] = value
    return {k: v for k, v in out.items() if v is not None}


async def test_the_key_map_fills_inside_a_segment_and_rounds_go_on_from_there(tmp_path: Path) -> None:
    """A byte budget smaller than one segment's keys: each round maps up to where it filled
    (not a segment boundary), cleans below that, and never drops a tombstone past it (that
    would bring back the value it deleted). Every round leaves each key's latest value as it was."""
    storage = await open_storage(tmp_path)
    past = now_ms() - 60_000  # multi-record batches end at ts + n - 1: keep them behind the clock
    storage.cleaner.max_map_bytes = 8 * 126  # about eight 6-byte keys
    log = compacted_log(storage, segment_bytes=3000, delete_retention_ms=0)
    for r in range(40):
        key = b"key-%02d" % (r % 17)
        value = None if r % 7 == 6 else b"v%d" % r
        append(log, batch(2, keys=[key, b"key-%02d" % ((r * 5) % 17)], values=[value, b"w%d" % r], ts=past))
    while len(log.segments) < 3:
        append(log, batch(1, keys=[b"filler"], values=[b"x" * 100], ts=past))
    expected = _latest_values(log)
    bases = {s.base_offset for s in log.segments}
    rounds = 0
    while await storage.run_cleaner():
        rounds += 1
        assert _latest_values(log) == expected, f"round {rounds} changed a key's latest value"
        if rounds == 1:
            assert log.first_dirty_offset not in bases  # the map filled inside a segment
        assert rounds < 40, "rounds make no progress"
    assert rounds > 2
    keys = [k for _, k, v in inactive_records(log)]
    assert len(keys) == len(set(keys))  # at the end, one record per key below the active segment
    await storage.close()


async def test_a_tombstone_past_where_the_map_filled_stays(tmp_path: Path) -> None:
    """The map fills after the key's old value and before its tombstone, in one segment: the
    round keeps the tombstone (it is past the round's end), so the key stays deleted."""
    storage = await open_storage(tmp_path)
    past = now_ms() - 60_000  # multi-record batches end at ts + n - 1: keep them behind the clock
    storage.cleaner.max_map_bytes = 4 * 124  # four 4-byte keys
    log = compacted_log(storage, segment_bytes=3000, delete_retention_ms=0)
    append(log, batch(2, keys=[b"gone", b"a001"], values=[b"old", b"x"], ts=past))
    append(log, batch(2, keys=[b"b001", b"b002"], values=[b"x", b"x"], ts=past))
    tombstone, _ = append(log, batch(1, keys=[b"gone"], values=[None], ts=past))
    while len(log.segments) < 2:
        append(log, batch(1, keys=[b"fill"], values=[b"x" * 100], ts=past))
    assert await storage.run_cleaner() == 1
    assert log.first_dirty_offset == tombstone  # the map filled right before the tombstone
    assert b"gone" not in _latest_values(log)
    assert (tombstone, b"gone", None) in key_values(log)
    while await storage.run_cleaner():
        pass
    assert b"gone" not in _latest_values(log) and b"gone" not in {k for _, k, _ in inactive_records(log)}
    await storage.close()


def test_the_dedupe_buffer_is_configured_as_in_kafka(tmp_path: Path) -> None:
    plugins = Plugins(
        build_plugin_manager(entry_points_enabled=False, extra=["odradek.plugins.storage_segment.plugin"])
    )
    overrides = {"log.dirs": str(tmp_path), "log.cleaner.dedupe.buffer.size": 1_000_000}
    cfg = load_config(env={}, plugins=plugins, overrides=overrides)
    assert SegmentLogStorage(cfg).cleaner.max_map_bytes == 900_000
    with pytest.raises(ConfigError, match="load.factor"):  # the key's own bounds, (0, 1]
        load_config(env={}, plugins=plugins, overrides={**overrides, "log.cleaner.io.buffer.load.factor": 1.5})
    zero = load_config(env={}, plugins=plugins, overrides={**overrides, "log.cleaner.io.buffer.load.factor": 0})
    with pytest.raises(ConfigError, match="load.factor"):  # 0 passes the minimum; the storage refuses it
        SegmentLogStorage(zero)


async def test_appends_and_reads_go_on_while_cleaning(tmp_path: Path) -> None:
    storage = await open_storage(tmp_path)
    log = compacted_log(storage, segment_bytes=20_000)
    write_keys(log, 400, keys=20)
    done = trio.Event()
    appended = 0

    async def clean() -> None:
        await storage.run_cleaner()
        done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(clean)
        while not done.is_set():
            append(log, batch(1, keys=[b"live"], values=[b"%d" % appended], ts=now_ms()))
            fetched = log.read(log.log_start_offset, 1 << 16)
            assert fetched.size > 0
            fetched.release()
            appended += 1
            await trio.sleep(0)
    assert appended > 1  # the cleaner yielded while it worked
    live = [v for _, k, v in key_values(log) if k == b"live"]
    assert live[-1] == b"%d" % (appended - 1)
    await storage.close()


async def test_truncation_during_a_round_discards_it(tmp_path: Path) -> None:
    storage = await open_storage(tmp_path)
    log = compacted_log(storage)
    write_keys(log, 20)
    before = key_values(log)
    cut = log.segments[1].base_offset
    result: list[int] = []

    async def clean() -> None:
        result.append(await storage.run_cleaner())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(clean)
        await trio.testing.wait_all_tasks_blocked()  # the cleaner is in a worker thread now
        log.truncate_to(cut)
    assert result == [0]
    assert key_values(log) == [kv for kv in before if kv[0] < cut]
    assert not list((tmp_path / "events-0").glob("*.cleaned"))
    await storage.close()


async def test_a_crash_during_the_swap_is_completed_on_start(tmp_path: Path) -> None:
    storage = await open_storage(tmp_path)
    log = compacted_log(storage)
    write_keys(log, 20)
    original = SegmentLog.replace_segments

    class PowerCut(BaseException):
        """Nothing after it runs (an Exception would be cleaned up after, as a failure)."""

    def crash(self: SegmentLog, old: Any, new: Any) -> Any:
        raise PowerCut("power cut after the .swap rename")

    SegmentLog.replace_segments = crash  # type: ignore[method-assign]
    try:
        with pytest.raises(PowerCut):
            await storage.run_cleaner()
    finally:
        SegmentLog.replace_segments = original  # type: ignore[method-assign]
    part = tmp_path / "events-0"
    assert list(part.glob("*.log.swap"))
    storage.abandon()
    storage = await open_storage(tmp_path)
    log = compacted_log(storage)
    assert not list(part.glob("*.swap")) and not list(part.glob("*.cleaned"))
    keys = [k for _, k, _ in inactive_records(log)]
    assert len(keys) < 20 * 5 and b"key-0" in keys
    offsets = [o for o, _, _ in key_values(log)]
    assert offsets == sorted(set(offsets)) and offsets[-1] == log.log_end_offset - 1
    await storage.close()


async def test_a_crash_before_the_swap_leaves_the_log_as_it_was(tmp_path: Path) -> None:
    storage = await open_storage(tmp_path)
    log = compacted_log(storage)
    write_keys(log, 20)
    before = key_values(log)
    (tmp_path / "events-0" / "00000000000000000000.log.cleaned").write_bytes(b"half written")
    (tmp_path / "events-0" / "00000000000000000000.index.swap").write_bytes(b"\x00" * 8)
    storage.abandon()
    storage = await open_storage(tmp_path)
    log = compacted_log(storage)
    assert key_values(log) == before
    assert not list((tmp_path / "events-0").glob("*.cleaned")) and not list((tmp_path / "events-0").glob("*.swap"))
    await storage.close()


def _txn_batch(keys: list[bytes], values: list[bytes], pid: int, seq: int) -> bytearray:
    return batch(
        len(keys), keys=keys, values=values, ts=now_ms(), producer_id=pid, producer_epoch=0,
        base_sequence=seq, is_transactional=True,
    )  # fmt: skip


def _marker(kind: records.ControlRecordType, pid: int) -> bytearray:
    return bytearray(records.build_control_batch(kind, producer_id=pid, producer_epoch=0, timestamp=now_ms()))


async def test_aborted_transactions_are_removed_and_never_hide_the_committed_value(tmp_path: Path) -> None:
    """Kafka's cleaner semantics for KIP-98: an aborted transaction's records go, and do not
    count as a key's latest value (else a read_committed reader would lose the key); a
    committed transaction's records count as any other."""
    storage = await open_storage(tmp_path)
    log = compacted_log(storage)
    append(log, batch(2, keys=[b"a", b"b"], values=[b"a-plain", b"b-plain"], ts=now_ms()))
    aborted_first, _ = append(log, _txn_batch([b"a"], [b"a-aborted"], pid=7, seq=0))
    append(log, _marker(records.ControlRecordType.ABORT, 7))
    committed_first, _ = append(log, _txn_batch([b"b"], [b"b-committed"], pid=8, seq=0))
    append(log, _marker(records.ControlRecordType.COMMIT, 8))
    while len(log.segments) < 3:  # push all of it out of the active segment
        append(log, batch(1, keys=[b"filler"], values=[b"x" * 100], ts=now_ms()))
    assert await storage.run_cleaner() == 1
    kept = {(k, v) for _, k, v in inactive_records(log)}
    assert (b"a", b"a-plain") in kept  # the aborted write did not supersede it
    assert (b"a", b"a-aborted") not in kept  # and is gone
    assert (b"b", b"b-committed") in kept and (b"b", b"b-plain") not in kept
    offsets = [o for o, _, _ in key_values(log)]
    assert aborted_first not in offsets and committed_first in offsets
    markers = [b for b in read_batches(log) if b.header.is_control]
    assert len(markers) == 2  # markers stay (consumers and producer state need them)
    await storage.close()


def _open_transactions(log: SegmentLog) -> dict[int, int]:
    """Producer id -> first offset of each transaction with records in the log and no marker
    after them: what producer state would rebuild as undecided (it must stay empty)."""
    open_txns: dict[int, int] = {}
    for b in read_batches(log):
        h = b.header
        if h.is_control:
            open_txns.pop(h.producer_id, None)
        elif h.is_transactional:
            open_txns.setdefault(h.producer_id, h.base_offset)
    return open_txns


def _markers(log: SegmentLog) -> list[tuple[int, int]]:
    return [(b.header.producer_id, b.header.base_offset) for b in read_batches(log) if b.header.is_control]


async def test_markers_go_once_their_transaction_is_gone_and_delete_retention_passed(tmp_path: Path) -> None:
    """A marker goes when no batch of its transaction is left before it and its segment is past
    delete.retention.ms, never while its records (or its producer's last batch) remain."""
    clock = [now_ms()]
    storage = await open_storage(tmp_path, time_ms=lambda: clock[0])
    log = compacted_log(storage, segment_bytes=2000, delete_retention_ms=HOUR)
    append(log, _txn_batch([b"a"], [b"a-aborted"], pid=7, seq=0))
    abort_7 = append(log, _marker(records.ControlRecordType.ABORT, 7))[0]
    append(log, _txn_batch([b"b"], [b"b-committed"], pid=8, seq=0))
    commit_8 = append(log, _marker(records.ControlRecordType.COMMIT, 8))[0]
    append(log, batch(1, keys=[b"b"], values=[b"b-plain"], ts=now_ms()))  # supersedes pid 8's record
    append(log, _txn_batch([b"c"], [b"c-committed"], pid=7, seq=1))  # still the latest c
    commit_7 = append(log, _marker(records.ControlRecordType.COMMIT, 7))[0]
    append(log, _txn_batch([b"d"], [b"d-committed"], pid=8, seq=1))
    last_8 = append(log, _marker(records.ControlRecordType.COMMIT, 8))[0]
    append(log, _txn_batch([b"e"], [b"e-committed"], pid=9, seq=0))
    last_9 = append(log, _marker(records.ControlRecordType.COMMIT, 9))[0]
    append(log, batch(1, keys=[b"e"], values=[b"e-plain"], ts=now_ms()))  # pid 9's record is gone
    append(log, _txn_batch([b"f"], [b"f-committed"], pid=7, seq=2))
    last_7 = append(log, _marker(records.ControlRecordType.COMMIT, 7))[0]
    while len(log.segments) < 3:  # filler after the markers, so none ends a cleaned group
        append(log, batch(1, keys=[b"filler"], values=[b"x" * 100], ts=now_ms()))
    all_markers = [(7, abort_7), (8, commit_8), (7, commit_7), (8, last_8), (9, last_9), (7, last_7)]
    assert await storage.run_cleaner() == 1
    # within delete.retention.ms every marker stays, though two transactions are gone: the
    # round stamps their horizon
    assert _markers(log) == all_markers
    assert b"a-aborted" not in {v for _, _, v in key_values(log)}
    assert b"b-committed" not in {v for _, _, v in key_values(log)}
    assert _batch_holding(log, abort_7).header.first_timestamp == clock[0] + HOUR
    clock[0] += HOUR
    assert await storage.run_cleaner() == 1  # due at the horizon, with nothing new written
    # the aborted one and pid 8's first commit had nothing left; pid 7's first commit still
    # has c, pid 8's and pid 7's last ones have d and f, and pid 9's is its producer's last batch
    assert _markers(log) == [(7, commit_7), (8, last_8), (9, last_9), (7, last_7)]
    assert _open_transactions(log) == {}
    kept = {(k, v) for _, k, v in key_values(log)}
    assert {(b"b", b"b-plain"), (b"c", b"c-committed"), (b"d", b"d-committed"), (b"e", b"e-plain")} <= kept
    assert (b"e", b"e-committed") not in kept
    # what is left reopens to the same log (recovery and producer state see no orphan records)
    before = key_values(log)
    await storage.close()
    storage = await open_storage(tmp_path)
    log = compacted_log(storage, segment_bytes=2000, delete_retention_ms=HOUR)
    assert key_values(log) == before and _open_transactions(log) == {}
    await storage.close()


async def test_markers_go_without_leaving_a_transaction_undecided(tmp_path: Path) -> None:
    """Over many small groups and rounds, with each transaction's record superseded at once:
    markers go, but no transactional batch is ever left without its marker, whichever batch
    ends a group or stays as its producer's last."""
    storage = await open_storage(tmp_path)
    log = compacted_log(storage, delete_retention_ms=0)  # 400-byte segments: many small groups
    for seq in range(12):
        append(log, _txn_batch([b"k"], [b"v%d" % seq], pid=5, seq=seq))
        append(log, _marker(records.ControlRecordType.COMMIT, 5))
        append(log, batch(1, keys=[b"k"], values=[b"plain-%d" % seq], ts=now_ms()))
    while len(log.segments) < 12:
        append(log, batch(1, keys=[b"filler"], values=[b"x" * 100], ts=now_ms()))
    for _ in range(3):
        await storage.run_cleaner()
        assert _open_transactions(log) == {}
        segs = log.segments  # a dropped marker never opens a gap between cleaned segments
        assert all(a.next_offset == b.base_offset for a, b in itertools.pairwise(segs))
    assert len(_markers(log)) < 12
    await storage.close()


async def test_compaction_stops_before_an_undecided_transaction(tmp_path: Path) -> None:
    storage = await open_storage(tmp_path)
    log = compacted_log(storage)
    write_keys(log, 6, keys=3)
    open_first, _ = append(log, _txn_batch([b"key-0"], [b"undecided"], pid=9, seq=0))
    write_keys(log, 6, keys=3)  # later plain updates of the same keys, in later segments
    while len(log.segments) < 4:
        append(log, batch(1, keys=[b"filler"], values=[b"x" * 100], ts=now_ms()))
    before = key_values(log)
    assert await storage.run_cleaner() == 1
    after = key_values(log)
    holding = next(s for s in log.segments if s.base_offset <= open_first < s.next_offset)
    # nothing from the segment holding the open transaction on was touched
    assert [kv for kv in after if kv[0] >= holding.base_offset] == [kv for kv in before if kv[0] >= holding.base_offset]
    assert (open_first, b"key-0", b"undecided") in after
    assert len([kv for kv in after if kv[0] < holding.base_offset]) < len(
        [kv for kv in before if kv[0] < holding.base_offset]
    )  # but what came before it was compacted
    await storage.close()


async def test_max_compaction_lag_cleans_below_the_dirty_ratio_and_rolls(tmp_path: Path) -> None:
    """KIP-354: a dirty record older than max.compaction.lag.ms makes the log due even below
    min.cleanable.dirty.ratio, and a compacted log's active segment rolls at that age (else a
    quiet key could wait in it for segment.ms, 7 days)."""
    clock = [now_ms()]
    storage = await open_storage(tmp_path, time_ms=lambda: clock[0])
    log = compacted_log(storage)
    write_keys(log, 20)
    assert await storage.run_cleaner() == 1
    log.update_config(compact_config(storage, min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=HOUR))
    while log.segments[-1].base_offset <= log.first_dirty_offset:  # a little new dirt, out of the active segment
        write_keys(log, 1)
    assert await storage.run_cleaner() == 0  # below the ratio, and younger than the lag
    clock[0] = now_ms() + HOUR + 1  # past the lag of every record written so far
    assert await storage.run_cleaner() == 1  # waited too long: cleaned anyway
    # the roll: a compacted log's segment rolls once its records span max.compaction.lag.ms
    segments = len(log.segments)
    append(log, batch(1, keys=[b"late"], values=[b"v"], ts=now_ms() + HOUR + 1))
    assert len(log.segments) == segments + 1
    plain = storage.get_or_create_log(
        TopicPartition("plain", 0), storage.config.topic_config({"max.compaction.lag.ms": HOUR})
    )
    append(plain, batch(1, ts=now_ms()))
    append(plain, batch(1, ts=now_ms() + HOUR + 1))
    assert len(plain.segments) == 1  # not compacted: segment.ms alone decides
    with pytest.raises(InvalidConfig, match="max.compaction.lag.ms"):
        compact_config(storage, min_compaction_lag_ms=2 * HOUR, max_compaction_lag_ms=HOUR)
    await storage.close()


async def test_an_undecided_transaction_does_not_make_the_cleaner_spin(tmp_path: Path) -> None:
    """A round stopped by a transaction without its marker cleans what lies before it and then
    the log is not due again (the dirty ratio counts only below the transaction, Kafka's last
    stable offset bound) until a marker is appended; the marker, though it sits in the active
    segment past the round's end, decides the transaction for the next round. Before, every
    round redid the same work (rewriting, fsyncing and renaming the same segments hundreds of
    times a second) while the transaction was open, and after it ended until the active
    segment rolled, and the cleaner never backed off."""
    storage = await open_storage(tmp_path)
    log = compacted_log(storage, min_cleanable_dirty_ratio=0.5)
    write_keys(log, 6, keys=3)
    open_first, _ = append(log, _txn_batch([b"key-0"], [b"aborted"], pid=9, seq=0))
    while len(log.segments) < 6:  # dirty segments after it, all inactive
        write_keys(log, 1, keys=3)
    assert await storage.run_cleaner() == 1  # what lies before the transaction
    assert log.first_dirty_offset <= open_first
    rounds = storage.cleaner.rounds
    for _ in range(5):
        assert await storage.run_cleaner() == 0
    write_keys(log, 3, keys=3)  # appends (and rolls) while the transaction stays open
    assert await storage.run_cleaner() == 0
    assert storage.cleaner.rounds == rounds
    append(log, _marker(records.ControlRecordType.ABORT, 9))  # into the active segment
    assert await storage.run_cleaner() == 1
    assert log.first_dirty_offset == log.segments[-1].base_offset
    assert (open_first, b"key-0", b"aborted") not in key_values(log)
    for _ in range(5):
        assert await storage.run_cleaner() == 0
    assert storage.cleaner.rounds == rounds + 1
    await storage.close()


class _Stop(Exception):
    pass


async def test_the_cleaner_loop_backs_off_when_no_round_can_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``_cleaner_loop`` goes on at once only after a pass that made progress; a pass with
    nothing cleanable (here: all of it behind an open transaction) sleeps
    ``log.cleaner.backoff.ms``. The sleeps it asks for are recorded, not timed."""
    storage = await open_storage(tmp_path, log_cleaner_backoff_ms=15_000)
    log = compacted_log(storage, min_cleanable_dirty_ratio=0.5)
    write_keys(log, 6, keys=3)
    append(log, _txn_batch([b"key-0"], [b"open"], pid=9, seq=0))
    while len(log.segments) < 6:
        write_keys(log, 1, keys=3)
    sleeps: list[float] = []

    async def recorded(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 5:
            raise _Stop
        await trio.lowlevel.checkpoint()

    monkeypatch.setattr(trio, "sleep", recorded)
    with pytest.raises(_Stop):
        await storage._cleaner_loop()
    monkeypatch.undo()
    assert sleeps == [0, 15.0, 15.0, 15.0, 15.0]
    await storage.close()


def _on_event_loop() -> bool:
    """Whether the caller runs on a trio thread (a worker thread has no trio token)."""
    try:
        trio.lowlevel.current_trio_token()
    except RuntimeError:
        return False
    return True


async def test_no_fsync_runs_on_the_event_loop_during_a_round(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A directory fsync waits for a journal commit (seconds on a busy disk): on the trio thread
    it froze every client of the broker while the cleaner committed a swap."""
    storage = await open_storage(tmp_path)
    log = compacted_log(storage)
    write_keys(log, 20)
    real_fsync = os.fsync
    on_loop: list[int] = []
    in_threads: list[int] = []

    def recording_fsync(fd: int) -> None:
        (on_loop if _on_event_loop() else in_threads).append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    assert await storage.run_cleaner() == 1
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert log.compaction_count > 0 and in_threads  # the round swapped segments, fsyncing them
    assert on_loop == []
    await storage.close()


def _disk_copy(src: Path, dst: Path) -> Path:
    """The log dir's files as they are now: what a start after a crash at this point finds."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".lock"))
    return dst


@pytest.mark.parametrize(
    ("change", "parked_call"),
    [("truncation", 0), ("truncation", 1), ("retention", 0), ("retention", 1), ("close", 0)],
    ids=["truncation-swap", "truncation-final-names", "retention-swap", "retention-final-names", "close-swap"],
)
async def test_truncation_or_retention_while_a_swap_fsync_is_parked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str, parked_call: int
) -> None:
    """The swap's directory fsyncs run in worker threads, so the log can change while one is
    parked: the result stays consistent, and a crash at that point (the files on disk then)
    brings nothing the truncation or retention removed back."""
    data = tmp_path / "data"
    storage = await open_storage(data)
    log = compacted_log(storage)
    write_keys(log, 20)
    parked, release = threading.Event(), threading.Event()
    calls: list[bool] = []  # per directory fsync of the cleaner: whether it ran on the loop
    real_fsync_dir = cleaner.fsync_dir

    def parking_fsync_dir(path: Path) -> None:
        calls.append(_on_event_loop())
        if len(calls) - 1 == parked_call:
            parked.set()
            if not calls[-1]:  # parking the trio thread would hang the test
                release.wait()
        real_fsync_dir(path)

    monkeypatch.setattr(cleaner, "fsync_dir", parking_fsync_dir)
    result: list[int] = []

    async def clean() -> None:
        result.append(await storage.run_cleaner())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(clean)
        await trio.to_thread.run_sync(parked.wait)
        part = data / "events-0"
        try:
            if parked_call == 0:
                assert list(part.glob("*.log.swap"))  # the commit point, not durable yet
            expected = key_values(log)
            if change == "truncation":
                log.truncate_to(log.segments[0].next_offset + 2)  # inside the cleaned group's range
                expected = key_values(log)
            elif change == "retention":
                log.delete_segments(log.segments[:2], "retention")
                expected = key_values(log)
            else:
                log.close_files()  # the partition moves away: the round backs out on its own
            if change != "close":  # a close takes nothing out: a crash now may complete the swap
                assert not list(part.glob("*.swap"))  # nothing a recovery could restore over the change
                crashed = await open_storage(_disk_copy(data, tmp_path / "crashed"))
                assert key_values(compacted_log(crashed)) == expected
                crashed.abandon()
        finally:
            release.set()
    assert True not in calls
    assert result == [0]  # the round saw the change and stopped
    if change != "close":
        assert key_values(log) == expected
    await storage.close()
    assert not [p for p in part.iterdir() if p.name.endswith((".swap", ".cleaned", ".deleted"))]
    reopened = await open_storage(data)
    assert key_values(compacted_log(reopened)) == expected
    await reopened.close()


async def test_a_cleaned_segment_has_a_time_index_the_next_start_trusts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Segments rolled by time, each with a time entry per batch (``index.interval.bytes`` 0),
    compacted together: the cleaner grouped them by their offset indexes only and wrote up to
    ``segment.index.bytes`` / 8 time entries, where a time index holds / 12. The next start
    took the file for corrupt and rebuilt the segment (after every compaction), and the rebuilt
    index, capped, no longer ended with the segment's largest timestamp. Groups now fit both
    indexes, as Kafka's do."""
    sizes = {"log_index_interval_bytes": 0, "log_index_size_max_bytes": 4096}  # 341 time entries
    storage = await open_storage(tmp_path, **sizes)
    lg = storage.get_or_create_log(
        TP,
        storage.config.topic_config(
            {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.0, "segment.ms": 150_000}
        ),
    )
    i = 0
    while len(lg.segments) < 5:  # 150 batches a segment, timestamps rising
        append(lg, batch(1, keys=[b"dup" if i % 50 == 49 else b"k%d" % i], ts=1_000_000 + 1000 * i))
        i += 1
    assert await storage.run_cleaner() == 1
    cleaned = lg.segments[:-1]
    assert len(cleaned) < 4 and all(s.time_index.entries <= 4096 // 12 for s in cleaned)
    expected = [s.max_timestamp_and_offset() for s in lg.segments]
    await storage.close()
    caplog.clear()
    storage = await open_storage(tmp_path, **sizes)
    lg = storage.get_log(TP)
    assert lg is not None
    assert "sanity check" not in caplog.text, caplog.text
    assert [s.max_timestamp_and_offset() for s in lg.segments] == expected
    assert [s.time_index.last_entry() for s in lg.segments[:-1]] == expected[:-1]
    await storage.close()


def test_a_cleaned_segment_whose_time_index_fills_ends_it_with_its_largest_timestamp(tmp_path: Path) -> None:
    """More rising timestamps than a time index holds: the entries stop one short of its
    capacity, and the last is the segment's largest timestamp."""
    writer = cleaner.GroupWriter(tmp_path, 0, 0, 4096)
    for offset in range(600):
        data = records.build_batch([(b"k", b"v", [], 5_000 + offset)], base_offset=offset)
        writer.write(data, records.parse_header(data))
    writer.finish(None)
    times = writer.time_path.read_bytes()
    assert len(times) == 4096 // 12 * 12
    assert struct.unpack(">qi", times[-12:]) == (5_599, 599)


async def test_the_cleaner_stops_at_the_high_watermark(tmp_path: Path) -> None:
    """Kafka cleans only below the last stable offset, so below the high watermark: key-0's
    value at offset 0 is committed, its newer value is not yet (a leader change may truncate
    it away). Cleaning offset 0 in favour of it lost key-0 on the replica that then truncated."""
    storage = await open_storage(tmp_path)
    log = compacted_log(storage)
    write_keys(log, 1)
    log.high_watermark = log.log_end_offset  # round 0 is committed; what follows is not yet
    committed = log.log_end_offset
    write_keys(log, 20)
    assert len(log.segments) > 3
    assert await storage.run_cleaner() == 0  # nothing cleanable below the high watermark
    log.truncate_to(committed)  # the leader changed: the uncommitted rounds go
    assert [(k, v) for _, k, v in key_values(log)] == [(b"key-%d" % k, b"v0-%d" % k) for k in range(5)]
    # once the high watermark moves on, the rounds below it are cleaned as before
    write_keys(log, 20)
    log.high_watermark = log.segments[-2].base_offset
    assert await storage.run_cleaner() == 1
    below = [k for offset, k, _ in key_values(log) if offset < log.high_watermark]
    assert len(below) == len(set(below)) == 5  # one record per key left below it
    await storage.close()


def test_a_group_never_spans_an_empty_segment() -> None:
    """Kafka keeps groups consecutive. Skipping an empty segment (one recovery cut to nothing)
    made a group of the segments around it; its replacement then failed after the swap files
    were durable, and the next start installed them over a log that had moved on."""

    def inp(base: int, size: int) -> Any:
        index = SimpleNamespace(entries=1)
        seg = SimpleNamespace(base_offset=base, next_offset=base + 10, offset_index=index, time_index=index)
        return SimpleNamespace(segment=seg, size=size)

    a, empty, c, d = inp(0, 100), inp(10, 0), inp(20, 100), inp(30, 100)
    groups = cleaner.group_inputs([a, empty, c, d], segment_bytes=1000, index_bytes=1000)
    assert groups == [[a], [c, d]]


async def test_a_replacement_that_fails_leaves_no_swap_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage = await open_storage(tmp_path)
    log = compacted_log(storage)
    write_keys(log, 20)

    def refuse(*_: object) -> list[Path]:
        raise ValueError("only consecutive inactive segments can be replaced")

    monkeypatch.setattr(log, "replace_segments", refuse)
    before = key_values(log)
    assert await storage.run_cleaner() == 0  # the round failed: the log is left uncleaned
    assert not list((tmp_path / "events-0").glob("*.swap"))
    assert key_values(log) == before
    await storage.close()
    reopened = await open_storage(tmp_path)  # and the next start installs nothing
    reloaded = reopened.get_log(TP)
    assert reloaded is not None and key_values(reloaded) == before  # type: ignore[arg-type]
    await reopened.close()
