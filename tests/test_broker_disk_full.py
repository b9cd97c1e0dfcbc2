"""A whole broker on a full disk (simulated ENOSPC): shutdown finishes, failures are logged once
and rate-limited rather than with a traceback each, Produce and CreateTopics answer
KAFKA_STORAGE_ERROR, and what was acknowledged is there after a restart."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import trio
from broker_harness import batch, broker_config, broker_plugins, create, fetch_records, produce

from odradek.broker import metadata_cache as metadata_cache_module
from odradek.broker import replica_manager as replica_manager_module
from odradek.broker.api import CreatableTopic
from odradek.broker.core import BrokerCore
from odradek.broker.log_dir_failures import LogDirsFailed
from odradek.broker.meta_properties import MissingLogDir
from odradek.broker.replica_manager import ReplicaManager
from odradek.broker.server import BrokerServer
from odradek.broker.storage_failures import StorageFailureLog
from odradek.config import Config, default_config
from odradek.errors import ErrorCode, KafkaStorageError
from odradek.interfaces import TopicPartition
from odradek.plugins.meta_local import store as meta_local_store
from odradek.plugins.storage_segment import checkpoint as checkpoint_module
from odradek.plugins.storage_segment import index as index_module
from odradek.plugins.storage_segment import segment as segment_module
from odradek.plugins.storage_segment import storage as storage_module

TP = TopicPartition("t", 0)


class _FullOs:
    """``os`` for one module, whose writes fail with ENOSPC while ``full`` is set."""

    def __init__(self) -> None:
        self.full = False

    def __getattr__(self, name: str) -> Any:
        real = getattr(os, name)
        if name not in ("write", "pwrite", "posix_fallocate"):
            return real

        def call(*args: Any) -> Any:
            if self.full:
                raise OSError(errno.ENOSPC, "No space left on device (simulated)")
            return real(*args)

        return call


@contextmanager
def disk(monkeypatch: pytest.MonkeyPatch, *modules: ModuleType) -> Iterator[_FullOs]:
    """Simulated ENOSPC for the writes of ``modules`` (default: every storage and metadata file)."""
    fake = _FullOs()
    for module in modules or (checkpoint_module, segment_module, index_module, meta_local_store):
        monkeypatch.setattr(module, "os", fake)
    yield fake


async def _start(nursery: trio.Nursery, data: Path) -> BrokerServer:
    server = BrokerServer(broker_config(data), broker_plugins())
    await nursery.start(server.serve)
    return server


@pytest.mark.timeout(60)
async def test_shutdown_finishes_while_the_disk_is_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Checkpoints, snapshots and the clean-shutdown marker all fail: each failure is one ERROR
    line naming the file and the errno, the broker still stops (it hung forever) with an error
    once everything is closed, and the acknowledged records are there at the next start."""
    data = tmp_path / "data"
    with disk(monkeypatch) as fs:
        # the storage closes every file, then raises, so that `odradek serve` exits non-zero
        with pytest.RaisesGroup(pytest.RaisesExc(KafkaStorageError, match="the next start recovers")):
            async with trio.open_nursery() as nursery:
                server = await _start(nursery, data)
                assert server.core is not None
                await create(server.core, "t")
                for i in range(3):
                    assert (await produce(server.core, TP, batch([b"v%d" % i]))).error == ErrorCode.NONE
                fs.full = True
                caplog.clear()
                nursery.cancel_scope.cancel()
        fs.full = False
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors, "the failed writes at shutdown must be logged"
    assert all(r.exc_info is None and "\n" not in r.getMessage() for r in errors)
    checkpoint = [r.getMessage() for r in errors if "replication-offset-checkpoint" in r.getMessage()]
    assert len(checkpoint) == 1 and "ENOSPC" in checkpoint[0] and str(data) in checkpoint[0]
    assert not (data / storage_module.CLEAN_SHUTDOWN_FILE).exists()  # the next start recovers
    async with trio.open_nursery() as nursery:
        server = await _start(nursery, data)
        assert server.core is not None
        assert [r.value for r in await fetch_records(server.core, TP)] == [b"v0", b"v1", b"v2"]
        nursery.cancel_scope.cancel()


class _FailingStorage:
    """Just enough of a LogStorage for the replica manager's housekeeping."""

    def __init__(self) -> None:
        self.full = True
        self.writes = 0

    def write_checkpoint(self, name: str, offsets: Any) -> None:
        self.writes += 1
        if self.full:
            raise KafkaStorageError(f"writing checkpoint /d/{name} failed: [Errno 28] No space left on device") from (
                OSError(errno.ENOSPC, "No space left on device")
            )


async def test_housekeeping_on_a_full_disk_logs_once_then_rate_limited(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The 5 s checkpoint failing for good logged a traceback each time; now one ERROR line when
    it starts, then at most one per interval, and INFO when it works again (real time, shrunk:
    the write runs in a worker thread, which trio's autojump clock would jump over)."""
    monkeypatch.setattr(replica_manager_module, "HW_CHECKPOINT_INTERVAL_MS", 10)
    storage = _FailingStorage()
    manager = ReplicaManager(0, storage, {})  # type: ignore[arg-type]
    manager.persist_failures.interval_s = 0.5
    caplog.set_level(logging.INFO, logger="odradek.broker.replica_manager")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(manager.run)
        while storage.writes < 100:
            await trio.sleep(0.05)
        failing = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert all(r.exc_info is None for r in failing)  # no traceback for a known condition
        assert 1 <= len(failing) <= 1 + storage.writes * 0.01 / 0.5 + 2
        assert len(failing) < storage.writes / 10
        assert "ENOSPC" in failing[0].getMessage() and "replication-offset-checkpoint" in failing[0].getMessage()
        storage.full = False
        written = storage.writes
        while storage.writes < written + 2:
            await trio.sleep(0.05)
        infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
        assert infos[-1].startswith("checkpoints and producer-state snapshots in the log dirs work again")
        nursery.cancel_scope.cancel()


def test_storage_failure_log_rate_limits_per_key() -> None:
    now = [0.0]
    logger = logging.getLogger("test.storage_failures")
    messages: list[tuple[int, str]] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append((record.levelno, record.getMessage()))

    handler = Capture()
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        failures = StorageFailureLog(logger, "appends", interval_s=60, clock=lambda: now[0])
        exc = KafkaStorageError("append failed")
        exc.__cause__ = OSError(errno.ENOSPC, "No space left on device")
        for _ in range(100):
            failures.failed("/a", exc)
            now[0] += 1
        failures.failed("/b", exc)
        failures.succeeded("/a")
        failures.succeeded("/a")
    finally:
        logger.removeHandler(handler)
    assert [level for level, _ in messages] == [logging.ERROR, logging.ERROR, logging.ERROR, logging.INFO]
    assert messages[0][1] == "appends in /a failing: append failed (errno 28 ENOSPC)"
    assert messages[1][1].startswith("appends in /a still failing after 60 s (60 more failures)")
    assert messages[2][1].startswith("appends in /b failing")
    assert messages[3][1] == "appends in /a work again (failed for 100 s)"


async def test_produce_on_a_full_disk_logs_the_log_dir_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """One ERROR for the dir, once the log-dir check the failures woke found it online (a full
    disk is not a failed dir), then INFO when appends work again."""
    data = tmp_path / "data"
    caplog.set_level(logging.INFO, logger="odradek.broker.replica_manager")
    with disk(monkeypatch, segment_module, index_module) as fs:
        async with trio.open_nursery() as nursery:
            server = await _start(nursery, data)
            assert server.core is not None
            await create(server.core, "t")
            caplog.clear()
            fs.full = True
            for _ in range(5):
                result = await produce(server.core, TP, batch([b"x" * 100]))
                assert result.error == ErrorCode.KAFKA_STORAGE_ERROR
            assert not await server.core.replica_manager.check_log_dirs()
            errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
            assert len(errors) == 1 and errors[0].exc_info is None
            assert str(data.resolve()) in errors[0].getMessage() and "ENOSPC" in errors[0].getMessage()
            fs.full = False
            assert (await produce(server.core, TP, batch([b"y"]))).error == ErrorCode.NONE
            assert any(
                r.levelno == logging.INFO and "work again" in r.getMessage() and str(data.resolve()) in r.getMessage()
                for r in caplog.records
            )
            nursery.cancel_scope.cancel()


def _logs_cannot_be_created(monkeypatch: pytest.MonkeyPatch, topic: str, *, full: bool) -> list[bool]:
    """Creating or loading a log of ``topic`` fails with ENOSPC while the returned flag is set."""
    real_load_log = storage_module.load_log
    flag = [full]

    def load_log(directory: Path, tp: TopicPartition, *args: Any, **kwargs: Any) -> Any:
        if flag[0] and tp.topic == topic:
            raise OSError(errno.ENOSPC, "No space left on device (simulated)", str(directory / "0.log"))
        return real_load_log(directory, tp, *args, **kwargs)

    monkeypatch.setattr(storage_module, "load_log", load_log)
    return flag


async def test_create_topics_when_the_partition_files_cannot_be_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """KAFKA_STORAGE_ERROR for that topic (it was UNKNOWN_SERVER_ERROR with a traceback), the
    topic taken back, other topics unaffected, and the same CreateTopics works once there is room."""
    full = _logs_cannot_be_created(monkeypatch, "t2", full=True)
    async with trio.open_nursery() as nursery:
        server = await _start(nursery, tmp_path / "data")
        core = server.core
        assert core is not None
        topics = [CreatableTopic("t1", 1, 1), CreatableTopic("t2", 3, 1)]
        results = await core.create_topics(topics, 5000, False)
        assert results["t1"].error == ErrorCode.NONE
        assert results["t2"].error == ErrorCode.KAFKA_STORAGE_ERROR
        assert "No space left on device" in (results["t2"].error_message or "")
        assert not core.metadata_cache.contains_topic("t2")
        full[0] = False
        again = await core.create_topics([CreatableTopic("t2", 3, 1)], 5000, False)
        assert again["t2"].error == ErrorCode.NONE
        for p in range(3):
            assert (await produce(core, TopicPartition("t2", p), batch([b"z"]))).error == ErrorCode.NONE
        nursery.cancel_scope.cancel()


async def test_create_topics_when_the_metadata_file_cannot_be_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with disk(monkeypatch, meta_local_store) as fs:
        async with trio.open_nursery() as nursery:
            server = await _start(nursery, tmp_path / "data")
            assert server.core is not None
            fs.full = True
            results = await server.core.create_topics([CreatableTopic("t2", 1, 1)], 5000, False)
            assert results["t2"].error == ErrorCode.KAFKA_STORAGE_ERROR
            assert "odradek-metadata.json" in (results["t2"].error_message or "")
            assert not list((tmp_path / "data").glob("*.tmp"))  # no half-written temp file stays
            fs.full = False
            nursery.cancel_scope.cancel()


async def test_partitions_left_unhosted_by_a_full_disk_are_hosted_once_there_is_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partition of an existing topic whose log cannot be created when the broker should host
    it (here: its log gone and the disk full when the topic is reconciled) is tried again by the
    broker's retry (every UNHOSTED_RETRY_S): it was hosted only at the next change to its topic
    or a restart."""
    full = _logs_cannot_be_created(monkeypatch, "t3", full=False)
    monkeypatch.setattr(metadata_cache_module, "UNHOSTED_RETRY_S", 0.1)
    async with trio.open_nursery() as nursery:
        server = await _start(nursery, tmp_path / "data")
        core = server.core
        assert core is not None
        assert (await core.create_topics([CreatableTopic("t3", 2, 1)], 5000, False))["t3"].error == ErrorCode.NONE
        tp = TopicPartition("t3", 1)
        await core.replica_manager.remove_partition(tp, delete=True)
        full[0] = True
        await core.metadata_cache.refresh_topic("t3")
        assert tp in core.metadata_cache.storage_failures and core.replica_manager.get_partition(tp) is None
        assert await core.metadata_cache.retry_unhosted() == 1  # still full
        full[0] = False
        with trio.fail_after(10):  # the server's retry, every UNHOSTED_RETRY_S (0.1 s here)
            while core.replica_manager.get_partition(tp) is None:
                await trio.sleep(0.05)
        assert not core.metadata_cache.storage_failures
        assert (await produce(core, tp, batch([b"z"]))).error == ErrorCode.NONE
        nursery.cancel_scope.cancel()


async def _serving_topic_t(nursery: trio.Nursery, config: Config) -> BrokerCore:
    """A broker started on ``config``, with topic t of four partitions (spread over its dirs)."""
    server = BrokerServer(config, broker_plugins())
    await nursery.start(server.serve)
    core = server.core
    assert core is not None
    await create(core, "t", partitions=4)
    return core


async def test_appends_failing_in_a_failed_log_dir_leave_one_line_for_the_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Appends fail in both log dirs: one was removed, the other is full. A failed append only
    wakes the log-dir check, which asks the volumes in a worker thread (never on the event loop:
    a stuck mount would freeze every client), so the append's line waits for the check: the
    removed dir gets its one ERROR line (its partitions offline) and no appends line, the full
    one the appends line (a full disk is not a failed dir); no tracebacks."""
    first, second = tmp_path / "a", tmp_path / "b"
    config = default_config(log_dirs=[str(first), str(second)], listeners="PLAINTEXT://127.0.0.1:0")
    real_statvfs = os.statvfs
    callers: set[int] = set()

    def statvfs(path: Any) -> os.statvfs_result:
        callers.add(threading.get_ident())
        return real_statvfs(path)

    monkeypatch.setattr(os, "statvfs", statvfs)
    caplog.set_level(logging.INFO, logger="odradek.broker")
    with disk(monkeypatch, segment_module, index_module) as fs:
        async with trio.open_nursery() as nursery:
            core = await _serving_topic_t(nursery, config)
            assert isinstance(core.storage, storage_module.SegmentLogStorage)
            dirs = {tp: lg.dir.parent for tp, lg in core.storage.all_logs().items()}
            gone = sorted(tp for tp, d in dirs.items() if d == second)
            kept = sorted(tp for tp, d in dirs.items() if d == first)
            assert gone and kept
            caplog.clear()
            callers.clear()
            shutil.rmtree(second)
            fs.full = True
            for tp in (*gone, *kept):
                assert (await produce(core, tp, batch([b"x"]))).error == ErrorCode.KAFKA_STORAGE_ERROR
            await core.replica_manager.check_log_dirs()  # the one the failures woke is done by then
            assert set(core.replica_manager.offline_partitions) == set(gone)
            errors = sorted(r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR)
            assert len(errors) == 2 and not any(r.exc_info for r in caplog.records), errors
            assert errors[0].startswith(f"appends to partitions in {first} failing: ") and "ENOSPC" in errors[0]
            assert errors[1].startswith(f"log dir {second} is offline: ") and "partition(s) taken offline" in errors[1]
            assert callers and threading.get_ident() not in callers
            fs.full = False
            nursery.cancel_scope.cancel()


async def test_a_checkpoint_failing_in_a_dir_a_concurrent_check_took_offline_is_not_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The checkpoint fails in a dir that a log-dir check already under way when it failed takes
    offline: the check it waits for finds no new failed dir, but the one before did. That dir
    held no partition (a fresh broker, a second dir still empty), and the replica manager, which
    counted offline partitions, logged the checkpoint failure besides the dir's line; it counts
    failed dirs now, and writes again at once without the dir."""
    monkeypatch.setattr(replica_manager_module, "HW_CHECKPOINT_INTERVAL_MS", 10)
    storage = _FailingStorage()
    manager = ReplicaManager(0, storage, {})  # type: ignore[arg-type]

    async def checked_after_a_concurrent_check() -> bool:
        manager.take_offline(set(), "/d")  # the check under way when the write failed
        storage.full = False
        return False  # the next one, waited for, found nothing new

    manager.check_log_dirs = checked_after_a_concurrent_check
    caplog.set_level(logging.INFO, logger="odradek.broker.replica_manager")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(manager.run)
        with trio.fail_after(10):
            while storage.writes < 2:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_failed_log_dir_holding_the_metadata_store_stops_the_broker(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """meta_local keeps its file in the first log dir. When that dir fails and the second is
    fine, the broker stops with one line naming the dir, as Kafka halts a broker whose metadata
    log dir failed; it lived on with a store it could not write (no topic could be created, no
    offline replica published) and warned so at every check, every 5 s, for good."""
    first, second = tmp_path / "a", tmp_path / "b"
    config = default_config(log_dirs=[str(first), str(second)], listeners="PLAINTEXT://127.0.0.1:0")
    caplog.set_level(logging.WARNING, logger="odradek.broker")
    with pytest.RaisesGroup(
        pytest.RaisesExc(LogDirsFailed, match=f"the log dir holding the metadata store is offline.*{first}"),
        flatten_subgroups=True,
    ):
        async with trio.open_nursery() as nursery:
            core = await _serving_topic_t(nursery, config)
            caplog.clear()
            shutil.rmtree(first)
            await core.replica_manager.check_log_dirs()
            with trio.fail_after(10):
                await trio.sleep_forever()
    assert not [r.getMessage() for r in caplog.records if r.name.startswith("odradek.broker.log_dir")]


async def test_a_log_dir_missing_or_empty_at_start_is_refused_not_served_empty(tmp_path: Path) -> None:
    """The broker ran on two dirs; the second is gone at the next start (its volume not
    mounted, or a restart after it failed), or is an empty mount point. The start is refused
    with one error naming it, as Kafka counts such a dir offline rather than a home for its
    replicas; the broker used to create it again and serve its partitions empty, from offset 0,
    the records of a partition with no other replica gone without a word. Removed from
    ``log.dirs`` the broker starts without it, and added back later the dir is a new one."""
    first, second = tmp_path / "a", tmp_path / "b"

    def config(*dirs: Path) -> Config:
        return default_config(log_dirs=[str(d) for d in dirs], listeners="PLAINTEXT://127.0.0.1:0")

    async with trio.open_nursery() as nursery:
        core = await _serving_topic_t(nursery, config(first, second))
        for p in range(4):
            assert (await produce(core, TopicPartition("t", p), batch([b"x"]))).error == ErrorCode.NONE
        nursery.cancel_scope.cancel()
    shutil.rmtree(second)
    for _ in ("gone", "an empty mount point"):
        with (
            trio.fail_after(10),  # it served, empty
            pytest.raises(MissingLogDir, match=f"log dir {second} is missing or empty.*meta.properties lists it"),
        ):
            await BrokerServer(config(first, second), broker_plugins()).serve()
        second.mkdir(exist_ok=True)
    assert list(second.iterdir()) == []
    for dirs in ((first,), (first, second)):
        async with trio.open_nursery() as nursery:
            server = BrokerServer(config(*dirs), broker_plugins())
            await nursery.start(server.serve)
            nursery.cancel_scope.cancel()


async def test_a_storage_whose_describe_log_dirs_raises_does_not_stop_the_broker(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The log-dir checks call the storage engine's describe_log_dirs every few seconds; an
    engine's bug there (an exception) is one ERROR with its traceback, not a broker that stops
    with it, and the broker keeps serving. Once the engine answers again, checks go on."""
    from odradek.broker import log_dir_failures

    caplog.set_level(logging.INFO, logger=log_dir_failures.__name__)
    monkeypatch.setattr(log_dir_failures, "CHECK_INTERVAL_S", 0.01)
    real = storage_module.SegmentLogStorage.describe_log_dirs
    calls = {"n": 0, "broken": True}

    async def describe(self: Any) -> Any:
        calls["n"] += 1
        if calls["broken"]:
            raise RuntimeError("engine bug")
        return await real(self)

    monkeypatch.setattr(storage_module.SegmentLogStorage, "describe_log_dirs", describe)
    server = BrokerServer(broker_config(tmp_path), broker_plugins())
    with trio.fail_after(30):
        await _serve_through_broken_checks(server, calls)
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert [r.getMessage() for r in errors] == ["cannot check the log dirs: the storage's describe_log_dirs failed"]
    assert errors[0].exc_info is not None and "engine bug" in str(errors[0].exc_info[1])
    assert "the storage's describe_log_dirs answers again: log dirs are checked" in caplog.text


async def _serve_through_broken_checks(server: BrokerServer, calls: dict[str, Any]) -> None:
    """Serve until describe_log_dirs failed five times (a produce still succeeds), then answered twice."""
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        core = server.core
        assert core is not None
        await create(core, "t")
        with trio.fail_after(10):
            while calls["n"] < 5:
                await trio.sleep(0.01)
        assert (await produce(core, TP, batch([b"x"]))).error is ErrorCode.NONE
        calls["broken"] = False
        seen = calls["n"]
        with trio.fail_after(10):
            while calls["n"] < seen + 2:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
