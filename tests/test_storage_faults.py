"""Faults the segment engine must survive: kill -9 mid-append, torn and corrupted files, a full disk."""

from __future__ import annotations

import errno
import logging
import os
import random
import shutil
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio
import trio.testing
from storage_helpers import TP, append, batch, log_of, open_storage, read_batches

from odradek import records
from odradek.config import default_config
from odradek.errors import KafkaStorageError
from odradek.interfaces import LogDirDescription, TopicPartition
from odradek.plugins.storage_segment import checkpoint as checkpoint_module
from odradek.plugins.storage_segment import cleaner as cleaner_module
from odradek.plugins.storage_segment import index as index_module
from odradek.plugins.storage_segment import segment as segment_module
from odradek.plugins.storage_segment.log import SegmentLog
from odradek.plugins.storage_segment.storage import SegmentLogStorage

WRITER = r"""
import os, random, sys, trio
from odradek import records
from odradek.config import default_config
from odradek.interfaces import TopicPartition
from odradek.plugins.storage_segment.storage import SegmentLogStorage

async def main(path, seed, tear):
    rng = random.Random(seed)
    storage = SegmentLogStorage(default_config(log_dirs=[path], log_segment_bytes=1 << 20))
    await storage.open()
    log = storage.get_or_create_log(TopicPartition("events", 0), storage.config.topic_config())
    print("ready", log.log_end_offset, flush=True)
    while True:
        count = rng.randint(1, 8)
        recs = [(b"k%d" % i, rng.randbytes(rng.randint(10, 60_000)), [], 1_000 + i) for i in range(count)]
        data = bytearray(records.build_batch(recs))
        first = log.log_end_offset
        print("begin", first, first + count - 1, flush=True)
        if tear and rng.random() < 0.2:  # die in the middle of writing this batch
            segment = log.segments[-1]
            os.pwrite(segment.log.fd(), data[: rng.randrange(1, len(data))], segment.size)
            print("torn", flush=True)
            await trio.sleep_forever()
        info = log.append_as_leader(data, records.validate_batches(data), 0)
        print("done", info.last_offset, flush=True)

trio.run(main, sys.argv[1], int(sys.argv[2]), sys.argv[3] == "tear")
"""


def _check_contiguous(log: SegmentLog) -> list[records.RecordBatch]:
    """Every batch from the log start is whole, CRC-valid and follows the previous one."""
    batches = read_batches(log)
    expect = log.log_start_offset
    for b in batches:
        assert b.header.base_offset == expect
        expect = b.header.next_offset
    assert expect == log.log_end_offset
    return batches


async def test_kill_9_mid_append(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A writer appends as fast as it can and is killed at a random moment; every other round
    it tears a batch on purpose first (half written, then killed), as a kill during a large
    write() can. Every acknowledged batch must survive, the torn one must go."""
    rng = random.Random(99)
    expected_leo = 0
    for round_ in range(6):
        tear = round_ % 2 == 1
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path), str(round_), "tear" if tear else "run"],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        ready = proc.stdout.readline().split()
        assert ready == ["ready", str(expected_leo)], ready
        done, began, torn = -1, None, False
        if tear:
            for line in proc.stdout:
                kind, *offsets = line.split()
                if kind == "begin":
                    began = int(offsets[1])
                elif kind == "done":
                    done = int(offsets[0])
                elif kind == "torn":
                    torn = True
                    break
        else:
            time.sleep(rng.uniform(0.05, 0.25))
        proc.kill()
        proc.wait()
        rest = proc.stdout.read()
        lines = rest.split("\n")[:-1]  # a kill can cut the last line short: only whole lines count
        for line in lines:
            kind, *offsets = line.split()
            assert len(offsets) == {"begin": 2, "done": 1}.get(kind, len(offsets)), f"writer printed {line!r}"
            if kind == "begin":
                began = int(offsets[1])
            elif kind == "done":
                done = int(offsets[0])
        proc.stdout.close()
        caplog.clear()
        storage = await open_storage(tmp_path, log_segment_bytes=1 << 20)
        log = storage.get_log(TP)
        assert log is not None
        batches = _check_contiguous(log)
        leo = log.log_end_offset
        # every acknowledged append survived; the in-flight one is there whole or not at all
        acked = max(done, expected_leo - 1)
        if torn:
            assert leo == acked + 1
            assert "recovery cut" in caplog.text
        else:
            assert leo in {acked + 1, (began if began is not None else acked) + 1}, (leo, acked, began)
        assert all(len(b.records) == b.header.record_count for b in batches)
        first, _ = append(log, batch(1))
        assert first == leo
        expected_leo = leo + 1
        await storage.close()


async def _crashed_log_files(path: Path, seed: int) -> tuple[list[tuple[int, int, bytes]], Path]:
    """Write a few segments, then "crash"; returns (segment base, position, bytes) per batch."""
    storage = await open_storage(path, log_segment_bytes=6000, log_index_interval_bytes=300)
    log = log_of(storage)
    rng = random.Random(seed)
    for i in range(rng.randint(15, 40)):
        append(log, batch(rng.randint(1, 5), value_size=rng.randint(5, 400), ts=10_000 + 10 * i))
    layout = []
    for seg in log.segments:
        data = seg.read_bytes(0, seg.size)
        layout += [(seg.base_offset, p, bytes(data[p : p + h.size])) for p, h in records.iter_headers(data)]
    storage.abandon()
    return layout, path / "events-0"


def _damage(part: Path, active: int, rng: random.Random) -> tuple[str, int | None]:
    """Damage the active segment or its indexes; returns (what, first damaged log byte or None)."""
    log_file = part / f"{active:020d}.log"
    size = log_file.stat().st_size
    kind = rng.choice(["truncate-log", "flip-log", "garbage-tail", "index", "timeindex", "delete-indexes"])
    if kind == "truncate-log":
        cut = rng.randrange(0, size) if size else 0
        os.truncate(log_file, cut)
        return kind, cut
    if kind == "flip-log" and size:
        pos = rng.randrange(size)
        data = bytearray(log_file.read_bytes())
        for p in range(pos, min(pos + rng.randint(1, 3), size)):
            data[p] ^= rng.randint(1, 255)
        log_file.write_bytes(data)
        return kind, pos
    if kind == "garbage-tail":
        with open(log_file, "ab") as f:
            f.write(rng.randbytes(rng.randint(1, 200)))
        return kind, size
    for suffix in [".index", ".timeindex"] if kind == "delete-indexes" else ["." + kind]:
        path = part / f"{active:020d}{suffix}"
        if kind == "delete-indexes":
            path.unlink(missing_ok=True)
        elif path.exists() and path.stat().st_size:
            data = bytearray(path.read_bytes())
            for _ in range(rng.randint(1, 20)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            path.write_bytes(data[: rng.randint(0, len(data))])
    return kind, None


@pytest.mark.parametrize("seed", range(30))
async def test_damaged_active_segment_recovers_every_batch_before_the_damage(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    layout, part = await _crashed_log_files(tmp_path, seed)
    active = layout[-1][0]
    kind, damage = _damage(part, active, rng)
    storage = await open_storage(tmp_path, log_segment_bytes=6000, log_index_interval_bytes=300)
    log = storage.get_log(TP)
    assert log is not None, kind
    batches = _check_contiguous(log)
    intact = [raw for base, pos, raw in layout if base < active or damage is None or pos + len(raw) <= damage]
    got = [records.build_batch([(r.key, r.value, r.headers, r.timestamp) for r in b.records]) for b in batches]
    assert len(batches) >= len(intact), (kind, damage)
    for raw, b in zip(intact, batches, strict=False):
        assert records.decode_batch(raw).records == b.records, kind
    if damage is None or kind == "garbage-tail":
        assert len(batches) == len(layout), kind
    assert len(got) == len(batches)
    for offset in range(log.log_start_offset, log.log_end_offset, 3):
        fetched = log.read(offset, 1)
        (found,) = records.iter_batches(fetched.to_bytes())
        assert found.header.base_offset <= offset <= found.header.last_offset
        fetched.release()
    first, _ = append(log, batch(2))
    assert first == log.log_end_offset - 2
    await storage.close()


@pytest.mark.parametrize("seed", range(10))
async def test_corrupt_indexes_after_a_clean_shutdown_are_caught(tmp_path: Path, seed: int) -> None:
    """Indexes below the recovery point are trusted but checked on use: a lying entry is
    detected (its batch does not match) and the index rebuilt, never served."""
    rng = random.Random(seed)
    storage = await open_storage(tmp_path, log_segment_bytes=4000, log_index_interval_bytes=200)
    log = log_of(storage)
    for i in range(40):
        append(log, batch(rng.randint(1, 4), value_size=rng.randint(5, 150), ts=50_000 + 10 * i))
    expected = [b.header for b in read_batches(log)]
    by_offset = {o: b for b in expected for o in range(b.base_offset, b.next_offset)}
    stamps = {
        t: o for o, t in sorted(((r.offset, r.timestamp) for b in read_batches(log) for r in b.records), reverse=True)
    }
    await storage.close()
    for path in rng.sample(sorted((tmp_path / "events-0").glob("*index")), 3):
        data = bytearray(path.read_bytes())
        if not data:
            continue
        entry = 8 if path.suffix == ".index" else 12
        i = rng.randrange(len(data) // entry) * entry
        data[i : i + entry] = rng.randbytes(entry) if rng.random() < 0.5 else data[0:entry]
        path.write_bytes(data)
    storage = await open_storage(tmp_path, log_segment_bytes=4000, log_index_interval_bytes=200)
    log = storage.get_log(TP)
    assert log is not None
    for offset in range(log.log_end_offset):
        fetched = log.read(offset, 1)
        (found,) = records.iter_batches(fetched.to_bytes())
        assert found.header == by_offset[offset]
        fetched.release()
    for ts in sorted(stamps)[:: max(1, len(stamps) // 15)]:
        assert log.offset_for_timestamp(ts) == (stamps[ts], ts)
    await storage.close()


HOUR = 3_600_000


@pytest.mark.parametrize("damage", ["empty", "cut-at-an-entry", "offset-past-the-end"])
async def test_a_time_index_that_lost_entries_is_rebuilt_not_trusted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    """A rolled segment's largest timestamp -- what time retention and ListOffsets skip
    segments by -- is its time index's last entry. A time index that lost its last entries (an
    empty file, one cut at an entry boundary) passed the file's own checks after a clean
    shutdown, and retention deleted a segment holding a record an hour old under a 5 h
    retention.ms; ListOffsets skipped the segment too. The load finds the last entry below the
    timestamps of the batches it reads anyway, and rebuilds the index."""
    now = [1_700_000_000_000]
    kwargs: dict[str, int] = {"log_segment_bytes": 2000, "log_index_interval_bytes": 0}
    storage = await open_storage(tmp_path, time_ms=lambda: now[0], **kwargs)
    log = log_of(storage, retention_ms=5 * HOUR)
    for i in range(40):  # records 10 h old, but offset 5 of the first segment is 1 h old
        append(log, batch(1, ts=now[0] - HOUR if i == 5 else now[0] - 10 * HOUR + i))
    first_bases = [seg.base_offset for seg in log.segments]
    assert len(first_bases) == 2 and log.segments[0].max_timestamp_and_offset() == (now[0] - HOUR, 5)
    await storage.close()
    index = tmp_path / "events-0" / "00000000000000000000.timeindex"
    entries = index.read_bytes()
    assert entries[48:60] == struct.pack(">qi", now[0] - HOUR, 5)  # the 5th entry: the young record
    if damage == "empty":
        index.write_bytes(b"")
    elif damage == "cut-at-an-entry":
        index.write_bytes(entries[:48])
    else:  # the young record's entry, moved past the segment's last offset
        index.write_bytes(entries[:48] + struct.pack(">qi", now[0] - HOUR, 500))
    caplog.clear()
    storage = await open_storage(tmp_path, time_ms=lambda: now[0], **kwargs)
    log = log_of(storage, retention_ms=5 * HOUR)
    assert log.offset_for_timestamp(now[0] - 2 * HOUR) == (5, now[0] - HOUR)
    assert await storage.run_retention() == 0
    assert [seg.base_offset for seg in log.segments] == first_bases
    assert log.segments[0].max_timestamp_and_offset() == (now[0] - HOUR, 5)
    assert "segment 0 fails its sanity check (time index:" in caplog.text
    await storage.close()
    caplog.clear()
    storage = await open_storage(tmp_path, time_ms=lambda: now[0], **kwargs)  # the rebuilt index holds
    assert "sanity check" not in caplog.text
    await storage.close()


# -- damage below the recovery point ------------------------------------------------------------

OLD_SEGMENTS = {"log_segment_bytes": 6000, "log_index_interval_bytes": 300}


async def _segmented_log(path: Path, *, crash: bool) -> tuple[dict[int, records.BatchHeader], list[int], int]:
    """About 10 segments of 3-record batches, the leader epoch rising in the 4th; closed
    cleanly, or "crashed" after the flusher fsynced the rolled segments and the recovery point
    was checkpointed, with a few unflushed batches in the active segment. Returns the batch
    headers by base offset, the segment bases and the recovery point."""
    storage = await open_storage(path, **OLD_SEGMENTS)
    log = log_of(storage)
    for i in range(200):
        append(log, batch(3, value_size=60, ts=10_000 + 10 * i), epoch=0 if i < 70 else 1)
    if crash:
        await storage.flush_tick()  # fsync of the rolled segments moves the recovery point
        await storage.write_own_checkpoints()
        for i in range(5):
            append(log, batch(3, value_size=60, ts=20_000 + 10 * i), epoch=1)
    headers = {b.header.base_offset: b.header for b in read_batches(log)}
    bases = [seg.base_offset for seg in log.segments]
    recovery_point = log.recovery_point
    if crash:
        storage.abandon()
    else:
        await storage.close()
    assert len(bases) >= 8 and (recovery_point >= bases[-1] or not crash)
    return headers, bases, recovery_point


@pytest.mark.parametrize("crash", [False, True], ids=["clean", "crash"])
@pytest.mark.parametrize("damage", ["half", "last-batch"])
async def test_a_torn_segment_below_the_recovery_point_is_cut_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, crash: bool, damage: str
) -> None:
    """A flushed segment cut short (a damaged disk, not a torn write: the data was fsynced)
    loses only the batches past the damage, as Kafka's loader recovers one segment whose index
    fails its sanity check: the later segments stay and the log has an offset gap that reads
    cross. ``last-batch`` cuts into the segment's last batch, past its last index entry, which
    the index alone cannot show: the log's framing from that entry is checked too."""
    headers, bases, _ = await _segmented_log(tmp_path, crash=crash)
    leo = max(h.next_offset for h in headers.values())
    victim = tmp_path / "events-0" / f"{bases[1]:020d}.log"
    size = victim.stat().st_size
    os.truncate(victim, size // 2 + 100 if damage == "half" else size - 50)
    caplog.clear()
    storage = await open_storage(tmp_path, **OLD_SEGMENTS)
    log = storage.get_log(TP)
    assert log is not None
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and f"segment {bases[1]} below the recovery point" in errors[0].getMessage(), caplog.text
    assert "later segment(s) are kept" in errors[0].getMessage() and "deleting" not in caplog.text
    assert [seg.base_offset for seg in log.segments] == bases
    assert log.log_end_offset == leo
    cut_at = log.segments[1].next_offset
    assert bases[1] < cut_at < bases[2]
    lost = [o for o in headers if cut_at <= o < bases[2]]
    assert lost and f"offsets {cut_at} to {bases[2] - 1}" in errors[0].getMessage()
    # every batch outside the damage is read whole, in order, across the gap
    got = [b.header for b in read_batches(log)]
    assert got == [h for o, h in sorted(headers.items()) if o not in lost]
    for offset in range(0, leo, 2):
        fetched = log.read(offset, 1)
        (found,) = records.iter_batches(fetched.to_bytes())
        fetched.release()
        expect = headers[min(o for o in headers if o not in lost and headers[o].last_offset >= offset)]
        assert found.header == expect, offset
    assert log.offset_for_timestamp(10_000 + 10 * 40) is not None
    assert [(e.epoch, e.start_offset) for e in log.epoch_entries()] == [(0, 0), (1, 210)]
    first, _ = append(log, batch(2), epoch=1)
    assert first == leo
    await storage.close()
    caplog.clear()
    storage = await open_storage(tmp_path, **OLD_SEGMENTS)  # the cut and the rebuilt indexes hold
    log = storage.get_log(TP)
    assert log is not None and log.log_end_offset == leo + 2
    assert [b.header for b in read_batches(log)][: len(got)] == got
    assert "WARNING" not in caplog.text and "ERROR" not in caplog.text, caplog.text
    await storage.close()


async def test_a_torn_segment_in_the_unflushed_tail_still_ends_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Past the recovery point a bad batch is a torn write: nothing valid can follow it, so
    the log ends there and later segments go (Kafka's recoverLog)."""
    storage = await open_storage(tmp_path, **OLD_SEGMENTS)
    log = log_of(storage)
    for i in range(60):
        append(log, batch(3, value_size=60, ts=10_000 + 10 * i))
    await storage.flush_tick()
    await storage.write_own_checkpoints()
    flushed = log.recovery_point
    for i in range(120):  # several more segments, none of them fsynced
        append(log, batch(3, value_size=60, ts=20_000 + 10 * i))
    bases = [seg.base_offset for seg in log.segments]
    storage.abandon()
    later = [b for b in bases if b > flushed]
    assert len(later) >= 3
    victim = tmp_path / "events-0" / f"{later[0]:020d}.log"
    os.truncate(victim, victim.stat().st_size // 2 + 100)
    caplog.clear()
    storage = await open_storage(tmp_path, **OLD_SEGMENTS)
    log = storage.get_log(TP)
    assert log is not None
    assert f"deleting {len(later) - 1} later segment(s)" in caplog.text
    assert [seg.base_offset for seg in log.segments] == [b for b in bases if b <= later[0]]
    assert later[0] < log.log_end_offset < later[1]
    _check_contiguous(log)
    await storage.close()


# -- disk full ----------------------------------------------------------------------------------


@contextmanager
def small_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, real: bool
) -> Iterator[tuple[Path, Callable[[], None], Callable[[], None]]]:
    """With ``real``, a 4 MiB tmpfs when this process may mount one (root), else -- or without
    ``real`` -- a simulated ENOSPC on the engine's writes. Yields (dir, fill(), free())."""
    mount = tmp_path / "disk"
    mount.mkdir()
    mounted = (
        real
        and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True
        ).returncode
        == 0
    )
    if mounted:
        filler = mount / "filler"

        def fill() -> None:
            fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                while True:
                    os.write(fd, b"\0" * 4096)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
            finally:
                os.close(fd)

        def free() -> None:
            filler.unlink()

        try:
            yield mount, fill, free
        finally:
            subprocess.run(["umount", "-l", str(mount)], check=False)
        return

    full = [False]
    real_pwrite, real_fallocate = os.pwrite, os.posix_fallocate

    def pwrite(fd: int, data: bytes, offset: int) -> int:
        if full[0]:
            if len(data) > 1:  # a short write first, as a filling disk does, then the error
                full[0] = False
                written = real_pwrite(fd, memoryview(data)[: len(data) // 2], offset)
                full[0] = True
                return written
            raise OSError(errno.ENOSPC, "No space left on device (simulated)")
        return real_pwrite(fd, data, offset)

    def fallocate(fd: int, offset: int, length: int) -> None:
        if full[0]:
            raise OSError(errno.ENOSPC, "No space left on device (simulated)")
        real_fallocate(fd, offset, length)

    monkeypatch.setattr(segment_module.os, "pwrite", pwrite)
    monkeypatch.setattr(index_module.os, "posix_fallocate", fallocate)
    yield mount, lambda: full.__setitem__(0, True), lambda: full.__setitem__(0, False)


@pytest.mark.parametrize("real", [True, False], ids=["tmpfs-if-root", "simulated-enospc"])
async def test_disk_full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, real: bool) -> None:
    with small_disk(tmp_path, monkeypatch, real=real) as (disk, fill, free):
        storage = await open_storage(disk, log_segment_bytes=256 * 1024, log_index_size_max_bytes=4096)
        try:
            log = log_of(storage)
            for _ in range(10):
                append(log, batch(5, value_size=1000))
            before = [b.header for b in read_batches(log)]
            fill()
            failures = 0
            for _ in range(200):  # whatever space is left goes, then appends fail
                leo, size = log.log_end_offset, log.size_in_bytes
                try:
                    append(log, batch(5, value_size=3000))
                except KafkaStorageError:
                    failures += 1
                    assert (log.log_end_offset, log.size_in_bytes) == (leo, size)
                    active = log.segments[-1]
                    assert active.log.path.stat().st_size == active.size  # nothing partial left
                    if failures >= 3:
                        break
            assert failures >= 3
            kept = _check_contiguous(log)
            assert [b.header for b in kept[: len(before)]] == before
            free()
            leo = log.log_end_offset
            first, _ = append(log, batch(5, value_size=3000))
            assert first == leo
            _check_contiguous(log)
        finally:
            free_ok = True
            try:
                await storage.close()
            except KafkaStorageError:
                free_ok = False
        assert free_ok
        storage = await open_storage(disk, log_segment_bytes=256 * 1024, log_index_size_max_bytes=4096)
        log = storage.get_log(TP)
        assert log is not None and _check_contiguous(log)[-1].header.base_offset == first
        await storage.close()


class _WritesFail:
    """``os`` for one module whose ``write`` fails with ENOSPC while ``full[0]`` is set."""

    def __init__(self, full: list[bool]) -> None:
        self._full = full

    def __getattr__(self, name: str) -> object:
        return getattr(os, name)

    def write(self, fd: int, data: bytes | memoryview) -> int:
        if self._full[0]:
            raise OSError(errno.ENOSPC, "No space left on device (simulated)")
        return os.write(fd, data)


@pytest.mark.parametrize("real", [True, False], ids=["tmpfs-if-root", "simulated-enospc"])
async def test_checkpoint_writes_on_a_full_disk_keep_the_previous_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, real: bool
) -> None:
    """The per-dir checkpoints are replaced through a temp file: on a full disk the write fails
    with a storage error, the previous files stay whole and no temp file is left; once there is
    room the next write goes through."""
    with small_disk(tmp_path, monkeypatch, real=real) as (disk, fill, free):
        if not os.path.ismount(disk):
            full = [False]
            monkeypatch.setattr(checkpoint_module, "os", _WritesFail(full))
            fill, free = (lambda: full.__setitem__(0, True)), (lambda: full.__setitem__(0, False))
        storage = await open_storage(disk)
        try:
            log = log_of(storage)
            append(log, batch(3))
            await log.flush()
            await storage.write_own_checkpoints()
            names = ("recovery-point-offset-checkpoint", "log-start-offset-checkpoint", "cleaner-offset-checkpoint")
            before = {name: (disk / name).read_text() for name in names}
            assert before["recovery-point-offset-checkpoint"] == "0\n1\nevents 0 3\n"
            append(log, batch(2))
            await log.flush()
            log.delete_records_before(1)
            fill()
            with pytest.raises(KafkaStorageError, match="writing checkpoints failed"):
                await storage.write_own_checkpoints()
            assert {name: (disk / name).read_text() for name in names} == before
            assert not list(disk.glob("*.tmp"))
            free()
            await storage.write_own_checkpoints()
            assert (disk / "recovery-point-offset-checkpoint").read_text() == "0\n1\nevents 0 5\n"
            assert (disk / "log-start-offset-checkpoint").read_text() == "0\n1\nevents 0 1\n"
        finally:
            await storage.close()


@pytest.mark.parametrize("real", [True, False], ids=["tmpfs-if-root", "simulated-enospc"])
async def test_a_roll_that_fails_for_lack_of_space_leaves_no_segment_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, real: bool
) -> None:
    """With ``preallocate`` a roll reserves segment.bytes, which fails on a full disk. The new
    segment's files stayed behind, empty; once there was room, batches that still fit went to
    the old segment, and at the next start the empty file was the last segment: the log ended
    at its base, hiding those acknowledged batches, and handed their offsets out again."""
    with small_disk(tmp_path, monkeypatch, real=real) as (disk, fill, free):
        storage = await open_storage(disk)
        try:
            log = log_of(storage, preallocate=True, segment_bytes=8192)
            while len(log.segments) < 2 or log.segments[-1].size + 2 * len(batch(3, value_size=300)) < 8192:
                append(log, batch(3, value_size=300))
            segments = [seg.base_offset for seg in log.segments]
            fill()
            with pytest.raises(KafkaStorageError, match="cannot roll"):
                append(log, batch(3, value_size=3000))  # does not fit: rolls
            assert sorted(p.name for p in log.dir.glob("*.log")) == [f"{b:020d}.log" for b in segments]
            free()
            acked = [append(log, batch(1)) for _ in range(3)]  # fit the active segment
            assert [seg.base_offset for seg in log.segments] == segments
        finally:
            await storage.close()
        storage = await open_storage(disk)
        log = storage.get_log(TP)
        assert log is not None
        assert log.log_end_offset == acked[-1][1] + 1
        assert [b.header.base_offset for b in _check_contiguous(log)[-3:]] == [first for first, _ in acked]
        assert append(log, batch(1))[0] == acked[-1][1] + 1
        await storage.close()


async def _reopen_with_failed_roll_files(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, stale: list[int]
) -> tuple[SegmentLogStorage, SegmentLog]:
    """Leave the empty files of a roll that failed half-way at each base offset in ``stale``
    (the storage is closed), then open the storage again with a fresh log capture."""
    for base in stale:
        for suffix in (".log", ".index", ".timeindex"):
            (tmp_path / "events-0" / f"{base:020d}{suffix}").touch()
    caplog.clear()
    storage = await open_storage(tmp_path, **OLD_SEGMENTS)
    log = storage.get_log(TP)
    assert log is not None
    return storage, log


async def test_empty_segments_a_failed_roll_left_are_deleted_at_load(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Files of a roll that failed half-way (a crash before they were removed) name an empty
    segment at offsets the segment before it holds: as the last segment it ended the log at its
    base; in the middle, reads skipped to the segment after it. The load deletes them."""
    storage = await open_storage(tmp_path, **OLD_SEGMENTS)
    log = log_of(storage)
    for i in range(60):
        append(log, batch(3, value_size=60, ts=10_000 + 10 * i))
    headers = [b.header for b in read_batches(log)]
    bases = [seg.base_offset for seg in log.segments]
    leo = log.log_end_offset
    await storage.close()
    assert len(bases) >= 3
    stale = [bases[1] + 4, bases[-1] + 4]  # inside a middle segment, inside the active one
    storage, log = await _reopen_with_failed_roll_files(tmp_path, caplog, stale)
    assert [seg.base_offset for seg in log.segments] == bases and log.log_end_offset == leo
    assert [b.header for b in read_batches(log)] == headers
    for offset in range(0, leo, 2):
        fetched = log.read(offset, 1)
        (found,) = records.iter_batches(fetched.to_bytes())
        fetched.release()
        assert found.header.base_offset <= offset <= found.header.last_offset
    assert all(f"deleting empty segment {base} left by a failed roll" in caplog.text for base in stale)
    assert not [p for base in stale for p in (tmp_path / "events-0").glob(f"{base:020d}.*")]
    await storage.close()


async def test_a_torn_tail_before_an_empty_segment_takes_the_segment_with_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Power lost after a roll: the new segment's file is empty and the rolled segment's last
    batches read as zeros. Recovery cuts the zeros and deletes the segments after the cut, so
    the log ends where its data does. The check for empty segments of a failed roll asked the
    torn segment for its end first, which rebuilt it out of the recovery's sight: recovery
    then found nothing to cut, kept the empty segment, and the log ended at its base -- past
    offsets it no longer held, which a follower would never fetch again."""
    storage = await open_storage(tmp_path, log_segment_bytes=1000)
    log = log_of(storage)
    while len(log.segments) < 2:
        append(log, batch(2, value_size=50))
    await log.flush()
    await storage.write_own_checkpoints()  # the recovery point: the second segment's base
    while len(log.segments) < 3:
        append(log, batch(2, value_size=50))
    torn, rolled = log.segments[1:]
    storage.abandon()
    path = tmp_path / "events-0" / f"{torn.base_offset:020d}.log"
    data = path.read_bytes()
    path.write_bytes(data[: torn.size - 300] + bytes(len(data) - torn.size + 300))
    (tmp_path / "events-0" / f"{rolled.base_offset:020d}.log").write_bytes(b"")
    caplog.clear()
    storage = await open_storage(tmp_path, log_segment_bytes=1000)
    log = storage.get_log(TP)
    assert log is not None
    assert [seg.base_offset for seg in log.segments] == [0, torn.base_offset]
    assert log.log_end_offset == _check_contiguous(log)[-1].header.next_offset < rolled.base_offset
    assert f"recovery cut 358 bytes from segment {torn.base_offset}" in caplog.text
    assert "deleting 1 later segment(s)" in caplog.text and "rebuilding" not in caplog.text
    await storage.close()


async def test_an_empty_segment_after_a_segment_with_a_damaged_index_is_deleted_once_it_is_recovered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Empty files of a failed roll inside the active segment, whose offset index was damaged
    too (its last entry points into the middle of a batch): the segment's end is unknown until
    it is recovered, and the empty segment is deleted then."""
    storage = await open_storage(tmp_path, **OLD_SEGMENTS)
    log = log_of(storage)
    for i in range(60):
        append(log, batch(3, value_size=60, ts=10_000 + 10 * i))
    headers = [b.header for b in read_batches(log)]
    active = log.segments[-1]
    leo = log.log_end_offset
    await storage.close()
    index = tmp_path / "events-0" / f"{active.base_offset:020d}.index"
    entries = index.read_bytes()
    index.write_bytes(entries[:-4] + struct.pack(">i", struct.unpack(">i", entries[-4:])[0] + 7))
    stale = active.base_offset + 4
    storage, log = await _reopen_with_failed_roll_files(tmp_path, caplog, [stale])
    assert log.segments[-1].base_offset == active.base_offset and log.log_end_offset == leo
    assert [b.header for b in read_batches(log)] == headers
    assert f"segment {active.base_offset} fails its sanity check (log:" in caplog.text
    assert f"deleting empty segment {stale} left by a failed roll" in caplog.text
    assert not list((tmp_path / "events-0").glob(f"{stale:020d}.*"))
    append(log, batch(1))
    assert log.log_end_offset == leo + 1
    await storage.close()


@pytest.mark.parametrize("real", [True, False], ids=["tmpfs-if-root", "simulated-enospc"])
async def test_compaction_on_a_full_disk_goes_on_when_space_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, real: bool
) -> None:
    """A round that runs out of space leaves no ``*.cleaned`` file behind (their space is what
    the disk lacks) and raises a storage error the cleaner loop logs rate-limited; once there
    is room the log is compacted again. The partition was marked uncleanable until a restart,
    so a compacted topic (``__consumer_offsets``) grew without bound after a passing full disk."""
    with small_disk(tmp_path, monkeypatch, real=real) as (disk, fill, free):
        if not os.path.ismount(disk):  # simulated: the cleaner's writes fail too
            full = [False]
            real_write = cleaner_module.GroupWriter.write

            def write(self: cleaner_module.GroupWriter, data: bytes | memoryview, h: records.BatchHeader) -> None:
                if full[0]:
                    raise OSError(errno.ENOSPC, "No space left on device (simulated)")
                real_write(self, data, h)

            monkeypatch.setattr(cleaner_module.GroupWriter, "write", write)
            fill_disk, free_disk = fill, free
            fill = lambda: (fill_disk(), full.__setitem__(0, True))  # noqa: E731
            free = lambda: (free_disk(), full.__setitem__(0, False))  # noqa: E731
        storage = await open_storage(disk)
        try:
            log = log_of(storage, cleanup_policy="compact", segment_bytes=400, min_cleanable_dirty_ratio=0.0)
            for r in range(20):
                append(log, batch(5, keys=[b"key-%d" % k for k in range(5)], values=[b"v%d" % r] * 5))
            size = log.size_in_bytes
            fill()
            with pytest.raises(KafkaStorageError, match="ENOSPC|No space left"):
                await storage.run_cleaner()
            assert not list(log.dir.glob("*.cleaned")) and log.size_in_bytes == size
            free()
            assert await storage.run_cleaner() == 1
            assert log.size_in_bytes < size
            latest = [r for b in read_batches(log) for r in b.records if r.offset < log.segments[-1].base_offset]
            assert sorted(r.key for r in latest) == sorted(set(r.key for r in latest))
        finally:
            await storage.close()


async def test_failing_background_work_is_logged_rate_limited(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """At the fd limit (or on a full disk) the once-a-second flush tick fails writing the
    checkpoints every time; it logged an ERROR each second. Now one ERROR when it starts, at
    most one a minute (with how many failed meanwhile) while it goes on, and one INFO when it
    works again. Virtual time; the work itself is stubbed (no worker threads)."""
    storage = await open_storage(tmp_path)
    failing = [True]

    async def flush_tick() -> None:
        if failing[0]:
            error = OSError(errno.EMFILE, "Too many open files", str(tmp_path / "log-start-offset-checkpoint.tmp"))
            raise KafkaStorageError(f"writing checkpoints failed: {error}") from error

    async def nothing() -> int:
        return 0

    async def every_dir_online() -> list[LogDirDescription]:  # after a failure: no dir went offline
        return []

    monkeypatch.setattr(storage, "flush_tick", flush_tick)
    monkeypatch.setattr(storage, "describe_log_dirs", every_dir_online)
    for name in ("run_retention", "write_own_checkpoints", "run_cleaner"):
        monkeypatch.setattr(storage, name, nothing)
    caplog.set_level(logging.INFO, logger="odradek.plugins.storage_segment.storage")
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(storage.run)
            await trio.sleep(150.5)  # ~150 failed ticks
            errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
            assert len(errors) == 3, errors
            assert errors[0].startswith("scheduled flushes in ") and "(errno 24 EMFILE)" in errors[0]
            assert "still failing after 60 s (60 more failures)" in errors[1]
            failing[0] = False
            await trio.sleep(2)
            infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
            assert len(infos) == 1 and "scheduled flushes in" in infos[0] and "work again" in infos[0], infos
            nursery.cancel_scope.cancel()
    finally:
        await storage.close()


def _fds_under(path: Path) -> list[str]:
    """This process's open files under ``path`` (deleted ones included)."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(path)):
            out.append(target)
    return out


async def _logs_in_two_dirs(
    first: Path, second: Path
) -> tuple[SegmentLogStorage, list[TopicPartition], tuple[TopicPartition, ...]]:
    """An open storage over two dirs with four logs of one batch each: (storage, the logs, the
    ones in ``second``)."""
    storage = SegmentLogStorage(default_config(log_dirs=[str(first), str(second)]))
    await storage.open()
    tps = [TopicPartition("t", p) for p in range(4)]
    for tp in tps:
        append(log_of(storage, tp), batch(3))
    lost = tuple(sorted(tp for tp in tps if log_of(storage, tp).dir.parent == second))
    assert lost and len(lost) < len(tps)
    return storage, tps, lost


async def test_a_log_dir_removed_under_the_storage_is_closed_without_leaks(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A log dir deleted while its logs are open (a lost volume, an operator's mistake): close
    releases every descriptor and map of every log, names the logs it could not close in one
    ERROR line, and raises one KafkaStorageError (the process exits non-zero) instead of a raw
    FileNotFoundError that left the other segments' files open. The other dir reopens intact."""
    first, second = tmp_path / "a", tmp_path / "b"
    storage, tps, lost = await _logs_in_two_dirs(first, second)
    assert _fds_under(second)
    shutil.rmtree(second)
    with pytest.raises(KafkaStorageError, match="without persisting everything"):
        await storage.close()
    assert not _fds_under(tmp_path)  # every log file, map and lock released, in both dirs
    (line,) = [r for r in caplog.records if "could not be closed cleanly" in r.getMessage()]
    assert line.levelname == "ERROR" and all(str(tp) in line.getMessage() for tp in lost)
    reopened = SegmentLogStorage(default_config(log_dirs=[str(first)]))
    await reopened.open()
    try:
        for tp in tps:
            if tp not in lost:
                assert len(read_batches(log_of(reopened, tp))) == 1
    finally:
        await reopened.close()


async def test_a_failed_log_dir_is_taken_offline_and_the_others_keep_working(tmp_path: Path) -> None:
    """A log dir found gone by ``describe_log_dirs`` goes offline for the storage's life (Kafka's
    offline log dir): it lists the logs it held, which are released and dropped; checkpoints,
    new logs and close use the other dir only, so close succeeds instead of failing on it, and
    the other dir reopens intact."""
    first, second = tmp_path / "a", tmp_path / "b"
    storage, tps, lost = await _logs_in_two_dirs(first, second)
    shutil.rmtree(second)
    online, offline = await storage.describe_log_dirs()
    assert online.error is None and offline.error is not None and "No such file" in offline.error
    assert offline.partitions == lost
    assert (await storage.describe_log_dirs())[1] == offline  # stays offline, its logs still named
    # every segment file and index map released; the dir's lock is kept until close
    assert [f for f in _fds_under(second) if ".lock" not in f] == []
    assert all(storage.get_log(tp) is None for tp in lost) and set(storage.all_logs()) == set(tps) - set(lost)
    storage.write_checkpoint("replication-offset-checkpoint", {tp: 1 for tp in storage.all_logs()})
    assert log_of(storage, TopicPartition("new", 0)).dir.parent == first
    await storage.close()  # clean: nothing left in the failed dir to persist
    assert not second.exists()
    reopened = SegmentLogStorage(default_config(log_dirs=[str(first)]))
    await reopened.open()
    try:
        assert set(reopened.all_logs()) == (set(tps) - set(lost)) | {TopicPartition("new", 0)}
        assert reopened.read_checkpoint("replication-offset-checkpoint") == {tp: 1 for tp in set(tps) - set(lost)}
    finally:
        await reopened.close()
