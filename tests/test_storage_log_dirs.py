"""Moving a partition's log between log dirs in the segment engine (KIP-113 future logs).

The lifecycle (create, copy, follow truncation and log-start moves, promote), a resumed copy
after a restart, and a process killed with SIGKILL at every step of the swap: the next start
has the partition's log whole, in exactly one dir, with no future or ``-delete`` dir left over.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from storage_helpers import TP, append, batch, read_batches

from odradek.broker.alter_log_dirs import catch_up, copy_step
from odradek.config import default_config
from odradek.errors import KafkaStorageError, LogDirNotFound
from odradek.interfaces import EpochEntry
from odradek.plugins.storage_segment import storage as storage_module
from odradek.plugins.storage_segment.log import SegmentLog
from odradek.plugins.storage_segment.storage import (
    DELETE_DIR_SUFFIX,
    FUTURE_DIR_SUFFIX,
    SWAP_MARKER,
    SegmentLogStorage,
    parse_future_dir,
)


def _dirs(tmp_path: Path) -> tuple[Path, Path]:
    return (tmp_path / "a").resolve(), (tmp_path / "b").resolve()


async def _storage(tmp_path: Path) -> SegmentLogStorage:
    a, b = _dirs(tmp_path)
    storage = SegmentLogStorage(default_config(log_dirs=[str(a), str(b)], log_segment_bytes=4096))
    await storage.open()
    return storage


def _current(storage: SegmentLogStorage, tmp_path: Path) -> SegmentLog:
    """TP's log, created in dir a, with three epochs, several segments and a moved log start."""
    storage.prefer_log_dir(TP, str(_dirs(tmp_path)[0]))
    log = storage.get_or_create_log(TP, storage.config.topic_config())
    for epoch in (0, 0, 1, 1, 3):
        for _ in range(6):
            append(log, batch(3, value_size=200), epoch)
    log.assign_epoch_start_offset(5, log.log_end_offset)  # a leader's epoch with no batch yet
    log.delete_records_before(7)  # inside a batch: the log start is not a batch boundary
    log.write_state("producer-snapshot", b"state")
    return log


def _content(log: SegmentLog) -> list[tuple[int, bytes]]:
    """Each batch's base offset and stored bytes, from the log start."""
    out: list[tuple[int, bytes]] = []
    for b in read_batches(log):
        fetched = log.read(max(b.header.base_offset, log.log_start_offset), 1, min_one_batch=True)
        out.append((b.header.base_offset, fetched.to_bytes()))
        fetched.release()
    return out


def _leftovers(tmp_path: Path) -> list[str]:
    return sorted(
        p.name
        for d in _dirs(tmp_path)
        for p in d.iterdir()
        if p.name.endswith((FUTURE_DIR_SUFFIX, DELETE_DIR_SUFFIX)) or (p / SWAP_MARKER).exists()
    )


async def test_a_future_log_is_copied_and_promoted(tmp_path: Path) -> None:
    a, b = _dirs(tmp_path)
    storage = await _storage(tmp_path)
    current = _current(storage, tmp_path)
    assert current.dir.parent == a
    future = storage.create_future_log(TP, str(b))
    assert parse_future_dir(future.dir.name) == TP and future.dir.parent == b
    assert storage.create_future_log(TP, str(b)) is future  # asked again: the same move
    dirs = await storage.describe_log_dirs()
    assert [(d.partitions, d.future_partitions) for d in dirs] == [((TP,), ()), ((), (TP,))]
    assert copy_step(current, future, 1000) > 0  # one chunk
    assert 0 < future.log_end_offset < current.log_end_offset
    # the current log goes on meanwhile: a truncation (as a follower's) and new appends
    current.truncate_to(future.log_end_offset - 2)
    append(current, batch(2), 6)
    catch_up(current, future)
    assert _content(future) == _content(current)
    assert future.epoch_entries() == current.epoch_entries()
    assert future.log_start_offset == current.log_start_offset == 7
    expected = _content(current)
    current.high_watermark = 40
    promoted = storage.replace_current_with_future_log(TP)
    assert promoted is future and storage.get_log(TP) is future and storage.get_future_log(TP) is None
    assert future.dir == b / str(TP) and future.high_watermark == 40
    assert future.read_state("producer-snapshot") == b"state"
    assert not (a / str(TP)).exists()
    append(future, batch(1), 6)  # the promoted log takes appends in its new place
    expected = _content(future)
    await storage.flush_tick()  # the old log's -delete dir goes in the background
    assert _leftovers(tmp_path) == []
    await storage.close()
    reopened = await _storage(tmp_path)
    log = reopened.get_log(TP)
    assert log is not None and log.dir.parent == b
    assert _content(log) == expected and log.log_start_offset == 7
    assert log.epoch_entries()[-1] == EpochEntry(6, expected[-1][0] - 2)
    await reopened.close()


async def test_bad_moves_are_refused(tmp_path: Path) -> None:
    a, b = _dirs(tmp_path)
    storage = await _storage(tmp_path)
    with pytest.raises(LogDirNotFound):
        storage.prefer_log_dir(TP, str(tmp_path / "elsewhere"))
    with pytest.raises(KafkaStorageError):  # nothing to move yet
        storage.create_future_log(TP, str(b))
    current = _current(storage, tmp_path)
    with pytest.raises(ValueError):
        storage.create_future_log(TP, str(a))  # where it is already
    future = storage.create_future_log(TP, str(b))
    copy_step(current, future, 1000)
    with pytest.raises(ValueError):  # not caught up: never promoted
        storage.replace_current_with_future_log(TP)
    await storage.delete_future_log(TP)  # called off: the current log is untouched
    assert storage.get_future_log(TP) is None and storage.get_log(TP) is current
    await storage.flush_tick()
    assert _leftovers(tmp_path) == []
    await storage.close()


async def test_an_unfinished_copy_resumes_after_a_restart(tmp_path: Path) -> None:
    a, b = _dirs(tmp_path)
    storage = await _storage(tmp_path)
    current = _current(storage, tmp_path)
    expected = _content(current)
    copy_step(current, storage.create_future_log(TP, str(b)), 1000)
    await storage.write_own_checkpoints()  # the log start offset is durable through them
    storage.abandon()  # a crash mid-copy
    reopened = await _storage(tmp_path)
    current, future = reopened.get_log(TP), reopened.get_future_log(TP)
    assert current is not None and future is not None
    assert current.dir.parent == a and future.dir.parent == b
    assert _content(current) == expected
    catch_up(current, future)
    reopened.replace_current_with_future_log(TP)
    assert _content(future) == expected
    await reopened.close()


CRASHER = r"""
import os, signal, sys, trio
from pathlib import Path
from odradek.config import default_config
from odradek.broker.alter_log_dirs import catch_up
from odradek.plugins.storage_segment import storage as storage_module
from storage_helpers import TP, append, batch

a, b, step = sys.argv[1], sys.argv[2], sys.argv[3]
renames = []
real_rename, real_write = os.rename, storage_module.atomic_write

def die():
    os.kill(os.getpid(), signal.SIGKILL)

def rename(src, dst):
    real_rename(src, dst)
    renames.append(dst)
    if step == f"rename{len(renames)}":
        die()

def atomic_write(path, data, **kw):
    if Path(path).name == storage_module.SWAP_MARKER and step == "marker":
        die()
    real_write(path, data, **kw)
    if Path(path).name == storage_module.SWAP_MARKER and step == "marked":
        die()

storage_module.os.rename = rename
storage_module.atomic_write = atomic_write

async def main():
    storage = storage_module.SegmentLogStorage(default_config(log_dirs=[a, b], log_segment_bytes=4096))
    await storage.open()
    storage.prefer_log_dir(TP, a)
    log = storage.get_or_create_log(TP, storage.config.topic_config())
    for epoch in (0, 1, 2):
        for _ in range(5):
            append(log, batch(3, value_size=200), epoch)
    await log.flush()
    future = storage.create_future_log(TP, b)
    catch_up(log, future)
    storage.replace_current_with_future_log(TP)
    if step == "unlinked":
        die()

trio.run(main)
"""


@pytest.mark.parametrize("step", ["marker", "marked", "rename1", "rename2", "unlinked"])
async def test_a_kill_at_any_step_of_the_swap_loses_nothing(tmp_path: Path, step: str) -> None:
    """SIGKILL before the future log is marked complete keeps the current log (the copy starts
    again); from the marker on, the next start finishes the swap."""
    a, b = _dirs(tmp_path)
    a.mkdir()
    b.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", CRASHER, str(a), str(b), step], env=env, capture_output=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    storage = await _storage(tmp_path)
    log = storage.get_log(TP)
    assert log is not None
    assert log.dir.parent == (a if step == "marker" else b)
    headers = [b_.header for b_ in read_batches(log)]
    assert [h.base_offset for h in headers] == list(range(0, 45, 3))
    assert [h.partition_leader_epoch for h in headers] == [0] * 5 + [1] * 5 + [2] * 5
    assert [e.epoch for e in log.epoch_entries()] == [0, 1, 2]
    if step == "marker":  # not committed: the future log waits for the copy to start over
        future = storage.get_future_log(TP)
        assert future is not None and future.dir.parent == b
        await storage.delete_future_log(TP)
    else:
        assert storage.get_future_log(TP) is None
    await storage.flush_tick()
    assert _leftovers(tmp_path) == []
    await storage.close()


@pytest.mark.parametrize("failing", [1, 2])
async def test_a_failed_rename_keeps_the_current_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: int
) -> None:
    """The swap's first or second rename fails (an I/O error): the current log stays the
    partition's, in its place, and the copy is no longer marked complete, so neither a crash
    afterwards nor the broker's clean-up loses a record."""
    a, b = _dirs(tmp_path)
    storage = await _storage(tmp_path)
    current = _current(storage, tmp_path)
    future = storage.create_future_log(TP, str(b))
    catch_up(current, future)
    expected = _content(current)
    calls: list[str] = []
    real = os.rename

    def rename(src: Path, dst: Path) -> None:
        calls.append(str(dst))
        if len(calls) == failing:
            raise OSError(5, "Input/output error")
        real(src, dst)

    monkeypatch.setattr(storage_module.os, "rename", rename)
    with pytest.raises(KafkaStorageError):
        storage.replace_current_with_future_log(TP)
    monkeypatch.undo()
    assert storage.get_log(TP) is current and current.dir == a / str(TP) and current.dir.is_dir()
    assert not (future.dir / SWAP_MARKER).exists()
    append(current, batch(1), 6)  # the current log goes on
    expected = _content(current)
    await storage.write_own_checkpoints()  # the log start offset is durable through them
    storage.abandon()  # a crash now: the copy is not promoted
    reopened = await _storage(tmp_path)
    log = reopened.get_log(TP)
    assert log is not None and log.dir.parent == a and _content(log) == expected
    await reopened.close()
