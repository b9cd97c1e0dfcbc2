"""Disk blocks reserved ahead of the active segment's data (``storage.segment.reserve.bytes``,
plugins/storage_segment/reserve.py): appends write into them, the file's size never shows them,
a roll, a close, a truncation and recovery cut them, and a failed reservation never fails an
append."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from storage_helpers import TP, append, batch, log_of, open_storage, read_batches

from odradek.config import ConfigError, load_config
from odradek.manager import Plugins, build_plugin_manager
from odradek.plugins.storage_segment import reserve as reserve_module
from odradek.plugins.storage_segment import segment as segment_module
from odradek.plugins.storage_segment.segment import NO_RESERVATION, LogSegment
from odradek.plugins.storage_segment.storage import RESERVE_BYTES_KEY, SegmentLogStorage

KIB = 1024
MIB = 1024 * KIB
STEP = 256 * KIB
#: allocated bytes past a file's data that are not a reservation: its last partly filled block
SLACK = 8 * KIB


def _past_data(seg: LogSegment) -> int:
    """Bytes the segment's file has allocated past its data."""
    st = seg.log.path.stat()
    assert st.st_size == seg.size  # a reservation never shows in the size
    return st.st_blocks * 512 - seg.size


def test_this_platform_reserves() -> None:
    """The suite runs on Linux, where libc has ``fallocate``: the tests below check real blocks."""
    assert reserve_module.SUPPORTED, "libc's fallocate was not found: blocks cannot be reserved ahead"


async def test_appends_reserve_one_step_ahead_and_the_size_shows_only_data(tmp_path: Path) -> None:
    storage = await open_storage(tmp_path)
    storage.ctx.reserve_bytes = STEP
    log = log_of(storage)
    append(log, batch(1, value_size=1000))
    seg = log.segments[-1]
    assert seg.reserved_to == seg.size + STEP
    assert STEP - SLACK <= _past_data(seg) <= STEP + SLACK
    # appends inside the step take no new reservation; the one that passes it takes the next
    while seg.size + 1200 <= seg.reserved_to:
        append(log, batch(1, value_size=1000))
    first_step = seg.reserved_to
    append(log, batch(1, value_size=1000))
    assert seg.reserved_to == seg.size + STEP > first_step
    assert [len(b.records) for b in read_batches(log)] == [1] * len(read_batches(log))
    await storage.close()


async def test_a_roll_and_a_close_cut_the_reservation(tmp_path: Path) -> None:
    storage = await open_storage(tmp_path)
    storage.ctx.reserve_bytes = STEP
    log = log_of(storage, segment_bytes=64 * KIB)
    while len(log.segments) < 3:
        append(log, batch(1, value_size=3000))
    for old in log.segments[:-1]:
        assert _past_data(old) < SLACK  # cut when the segment rolled
    active = log.segments[-1]
    # never reserved past segment.bytes: the segment rolls there
    assert 0 < _past_data(active) <= 64 * KIB - active.size + SLACK
    path = active.log.path
    await storage.close()
    assert path.stat().st_blocks * 512 - path.stat().st_size < SLACK


async def test_truncation_cuts_the_reservation_and_the_next_append_reserves_again(tmp_path: Path) -> None:
    storage = await open_storage(tmp_path)
    storage.ctx.reserve_bytes = STEP
    log = log_of(storage)
    for _ in range(5):
        append(log, batch(1, value_size=1000))
    seg = log.segments[-1]
    assert _past_data(seg) > STEP - SLACK
    log.truncate_to(2)
    assert (log.log_end_offset, seg.reserved_to) == (2, 0)
    assert _past_data(seg) < SLACK
    assert append(log, batch(1, value_size=1000)) == (2, 2)
    assert seg.reserved_to == seg.size + STEP and _past_data(seg) > STEP - SLACK
    await storage.close()


async def test_recovery_cuts_blocks_a_crash_left_reserved(tmp_path: Path) -> None:
    """A crash (the files closed without the close's trim) leaves up to one step reserved past
    the data; recovery cuts it, keeps every batch, and the log takes appends where it ended."""
    storage = await open_storage(tmp_path)
    storage.ctx.reserve_bytes = STEP
    log = log_of(storage)
    for _ in range(4):
        append(log, batch(1, value_size=1000))
    path = log.segments[-1].log.path
    storage.abandon()  # no trim, no checkpoint: what kill -9 leaves
    assert path.stat().st_blocks * 512 - path.stat().st_size > STEP - SLACK
    storage = await open_storage(tmp_path)
    log = storage.get_log(TP)
    assert log is not None and log.log_end_offset == 4
    assert path.stat().st_blocks * 512 - path.stat().st_size < SLACK
    assert append(log, batch(1)) == (4, 4)
    await storage.close()


async def test_no_reservation_when_switched_off_or_preallocated(tmp_path: Path) -> None:
    storage = await open_storage(tmp_path)
    storage.ctx.reserve_bytes = 0
    log = log_of(storage)
    append(log, batch(1, value_size=1000))
    assert log.segments[-1].reserved_to == NO_RESERVATION and _past_data(log.segments[-1]) < SLACK
    storage.ctx.reserve_bytes = STEP
    pre = log_of(storage, TP._replace(partition=1), preallocate=True, segment_bytes=MIB)
    append(pre, batch(1, value_size=1000))
    assert pre.segments[-1].reserved_to == NO_RESERVATION  # the whole segment is allocated already
    await storage.close()


@pytest.mark.parametrize(
    ("code", "stops"), [(errno.ENOSPC, False), (errno.EIO, False), (errno.EOPNOTSUPP, True), (errno.ENOSYS, True)]
)
async def test_a_failed_reservation_never_fails_the_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, stops: bool
) -> None:
    """ENOSPC (or another error) skips one step and the next step tries again; a filesystem
    that cannot reserve at all switches the segment off. Every append lands either way."""
    calls: list[tuple[int, int]] = []

    def failing(fd: int, offset: int, length: int) -> None:
        calls.append((offset, length))
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(segment_module, "reserve_blocks", failing)
    storage = await open_storage(tmp_path)
    storage.ctx.reserve_bytes = 16 * KIB
    log = log_of(storage)
    for i in range(20):
        assert append(log, batch(1, value_size=4000)) == (i, i)
    assert len(read_batches(log)) == 20
    if stops:
        assert len(calls) == 1 and log.segments[-1].reserved_to == NO_RESERVATION
    else:
        assert len(calls) >= 4  # one per step of appends
    await storage.close()


def test_the_key_is_the_storage_plugins_and_configures_the_step(tmp_path: Path) -> None:
    plugins = Plugins(
        build_plugin_manager(entry_points_enabled=False, extra=["odradek.plugins.storage_segment.plugin"])
    )
    overrides = {"log.dirs": str(tmp_path)}
    default = load_config(env={}, plugins=plugins, overrides=overrides)
    assert default[RESERVE_BYTES_KEY] == MIB and SegmentLogStorage(default).ctx.reserve_bytes == MIB
    off = load_config(env={}, plugins=plugins, overrides={**overrides, RESERVE_BYTES_KEY: 0})
    assert SegmentLogStorage(off).ctx.reserve_bytes == 0
    with pytest.raises(ConfigError, match=RESERVE_BYTES_KEY):
        load_config(env={}, plugins=plugins, overrides={**overrides, RESERVE_BYTES_KEY: -1})
