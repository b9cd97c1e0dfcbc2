"""AlterReplicaLogDirs (KIP-113) in a whole broker without sockets: a partition moved between log
dirs while it is produced to, every record once and in order at its offset; DescribeLogDirs'
future replicas; the errors; a destination dir that fails during the move."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio
from broker_harness import batch, broker_plugins, create, fetch_records, produce, serving

from odradek.broker.core import BrokerCore
from odradek.broker.server import BrokerServer
from odradek.config import Config, default_config
from odradek.errors import ErrorCode
from odradek.interfaces import TopicPartition
from odradek.plugins.storage_segment.storage import SegmentLogStorage

TP = TopicPartition("moving", 0)


def _config(tmp_path: Path, **overrides: Any) -> Config:
    dirs = f"{tmp_path / 'a'},{tmp_path / 'b'}"
    return default_config(log_dirs=dirs, listeners="PLAINTEXT://127.0.0.1:0", log_segment_bytes=8192, **overrides)


@asynccontextmanager
async def two_dir_broker(tmp_path: Path, **overrides: Any) -> AsyncIterator[BrokerCore]:
    async with serving(BrokerServer(_config(tmp_path, **overrides), broker_plugins())) as core:
        await create(core, TP.topic)
        yield core


def _where(core: BrokerCore) -> tuple[str, str]:
    """(the dir holding TP's log, the other dir)."""
    storage = core.storage
    assert isinstance(storage, SegmentLogStorage)
    log = storage.get_log(TP)
    assert log is not None
    here = str(log.dir.parent)
    (other,) = (str(d) for d in storage.log_dirs if str(d) != here)
    return here, other


async def _rows(core: BrokerCore) -> list[tuple[str, TopicPartition, int, bool]]:
    return [(r.path, p.tp, p.offset_lag, p.is_future) for r in await core.describe_log_dirs({TP}) for p in r.partitions]


async def _produce_values(core: BrokerCore, values: list[bytes], stop: trio.Event) -> None:
    """Produce one record a batch until ``stop``; ``values`` is what was acknowledged, in order."""
    n = 0
    while not stop.is_set():
        value = b"value-%06d" % n + b"x" * 300
        result = await produce(core, TP, batch([value]))
        assert result.error == ErrorCode.NONE, result
        assert result.base_offset == len(values)
        values.append(value)
        n += 1
        await trio.sleep(0)


async def _fetch_all(core: BrokerCore) -> list[tuple[int, bytes | None]]:
    """Every record from offset 0 as a consumer reads it, fetch after fetch."""
    out: list[tuple[int, bytes | None]] = []
    while True:
        got = await fetch_records(core, TP, out[-1][0] + 1 if out else 0)
        if not got:
            return out
        out += [(r.offset, r.value) for r in got]


async def _wait_moved(core: BrokerCore, target: str) -> None:
    with trio.fail_after(30):
        while _where(core)[0] != target or core.alter_log_dirs.moves.all_future_logs():  # type: ignore[union-attr]
            await trio.sleep(0.01)


async def test_a_partition_moves_while_it_is_produced_to(tmp_path: Path) -> None:
    async with two_dir_broker(tmp_path) as core:
        core.alter_log_dirs.chunk_bytes = 2000  # many copy steps, with appends in between
        values: list[bytes] = []
        for i in range(300):
            await produce(core, TP, batch([b"value-before-%04d" % i + b"y" * 300]))
            values.append(b"value-before-%04d" % i + b"y" * 300)
        here, target = _where(core)
        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_produce_values, core, values, stop)
            assert await core.alter_replica_log_dirs({TP: target}) == {TP: ErrorCode.NONE}
            await _wait_moved(core, target)
            await trio.sleep(0.05)  # appends to the moved log too
            stop.set()
        assert core.alter_log_dirs.failed == {}
        assert await _rows(core) == [(target, TP, 0, False)]
        assert await _fetch_all(core) == list(enumerate(values))
        assert not (Path(here) / str(TP)).exists()
        partition = core.replica_manager.get_partition(TP)
        assert partition is not None and partition.high_watermark == len(values)


async def test_describe_log_dirs_reports_the_future_replica(tmp_path: Path) -> None:
    async with two_dir_broker(tmp_path) as core:
        for i in range(5):
            await produce(core, TP, batch([b"%d" % i]))
        here, target = _where(core)
        storage = core.storage
        assert isinstance(storage, SegmentLogStorage)
        storage.create_future_log(TP, target)  # a move under way whose copy has not run yet
        assert sorted(await _rows(core)) == sorted([(here, TP, 0, False), (target, TP, 5, True)])
        # asked to stay where it is: the move is called off
        assert await core.alter_replica_log_dirs({TP: here}) == {TP: ErrorCode.NONE}
        assert await _rows(core) == [(here, TP, 0, False)]


async def test_errors(tmp_path: Path) -> None:
    async with two_dir_broker(tmp_path) as core:
        here, target = _where(core)
        unknown = TopicPartition("no-such-topic", 0)
        answers = await core.alter_replica_log_dirs(
            {TP: str(tmp_path / "c"), unknown: target, TopicPartition(TP.topic, 1): "relative/../" + target}
        )
        assert answers == {
            TP: ErrorCode.LOG_DIR_NOT_FOUND,
            unknown: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            TopicPartition(TP.topic, 1): ErrorCode.LOG_DIR_NOT_FOUND,
        }
        assert await core.alter_replica_log_dirs({TP: here}) == {TP: ErrorCode.NONE}  # there already
        shutil.rmtree(target)  # the destination's volume is gone
        assert await core.alter_replica_log_dirs({TP: target}) == {TP: ErrorCode.KAFKA_STORAGE_ERROR}
        assert _where(core)[0] == here


async def test_a_destination_that_fails_during_the_move_leaves_the_current_log(tmp_path: Path) -> None:
    async with two_dir_broker(tmp_path) as core:
        for i in range(50):
            await produce(core, TP, batch([b"%04d" % i + b"z" * 500]))
        here, target = _where(core)
        assert await core.alter_replica_log_dirs({TP: target}) == {TP: ErrorCode.NONE}
        shutil.rmtree(target)  # before the copy's first step: it cannot finish
        with trio.fail_after(30):
            while TP not in core.alter_log_dirs.failed:
                await trio.sleep(0.01)
        assert _where(core)[0] == here
        assert await produce(core, TP, batch([b"after"])) is not None
        assert [v for _, v in await _fetch_all(core)] == [b"%04d" % i + b"z" * 500 for i in range(50)] + [b"after"]


@asynccontextmanager
async def throttled_broker(tmp_path: Path, rate: int, values: list[bytes]) -> AsyncIterator[BrokerCore]:
    """A broker whose log-dir copies are bounded to ``rate`` bytes a second (measured over about
    a second), copying 5000 bytes a step, with ``values`` produced to TP."""
    async with two_dir_broker(
        tmp_path, replica_alter_log_dirs_io_max_bytes_per_second=rate, alter_log_dirs_replication_quota_window_num=2
    ) as core:
        core.alter_log_dirs.chunk_bytes = 5000
        for value in values:
            await produce(core, TP, batch([value]))
        yield core


async def test_the_copy_is_throttled(tmp_path: Path) -> None:
    """replica.alter.log.dirs.io.max.bytes.per.second: every copied byte counts, and the copy
    waits while the rate is over it (its window is one second here: the rate is the bytes of
    the last second or so)."""
    values = [b"%04d" % i + b"t" * 1000 for i in range(150)]
    async with throttled_broker(tmp_path, 100_000, values) as core:
        size = core.replica_manager.get_partition(TP).log.size_in_bytes  # type: ignore[union-attr]
        target = _where(core)[1]
        assert await core.alter_replica_log_dirs({TP: target}) == {TP: ErrorCode.NONE}
        await _wait_moved(core, target)
        quota = core.alter_log_dirs.quota
        assert quota.enabled and quota.held_back > 0
        assert size <= quota.throttled_bytes <= size + 5000
        assert await _fetch_all(core) == list(enumerate(values))


async def test_a_move_interrupted_by_a_restart_resumes(tmp_path: Path) -> None:
    """The broker stops while the (throttled) copy is under way: started again, it finds the
    future log and finishes the move, with every record at its offset."""
    values = [b"%04d" % i + b"r" * 1000 for i in range(120)]
    async with throttled_broker(tmp_path, 20_000, values) as core:
        here, target = _where(core)
        assert await core.alter_replica_log_dirs({TP: target}) == {TP: ErrorCode.NONE}
        with trio.fail_after(30):
            while core.alter_log_dirs.quota.held_back == 0:
                await trio.sleep(0.01)
        assert (target, TP, True) in [(path, tp, future) for path, tp, _lag, future in await _rows(core)]
    async with serving(BrokerServer(_config(tmp_path), broker_plugins())) as restarted:  # unthrottled
        await _wait_moved(restarted, target)
        assert await _fetch_all(restarted) == list(enumerate(values))
        assert not (Path(here) / str(TP)).exists()


async def test_a_replica_not_hosted_yet_is_created_in_the_dir_asked(tmp_path: Path) -> None:
    """Kafka's answer to a move of a replica the broker does not host yet (as
    kafka-reassign-partitions sends before the reassignment adds it): REPLICA_NOT_AVAILABLE,
    and the log is created in that dir when the replica comes."""
    async with two_dir_broker(tmp_path) as core:
        storage = core.storage
        assert isinstance(storage, SegmentLogStorage)
        later = TopicPartition("later", 0)
        dirs = [str(d) for d in storage.log_dirs]
        # the default placement (the dir with fewer logs) is the other one: TP's is asked for
        asked = _where(core)[0]
        held = [str(lg.dir.parent) for lg in storage.all_logs().values()]
        assert held.count(asked) > min(held.count(d) for d in dirs)
        known = core.replica_manager.partition_known
        core.replica_manager.partition_known = lambda tp: tp == later or known(tp)  # in the cluster's metadata
        assert await core.alter_replica_log_dirs({later: asked}) == {later: ErrorCode.REPLICA_NOT_AVAILABLE}
        core.replica_manager.partition_known = known
        await create(core, later.topic)
        log = storage.get_log(later)
        assert log is not None and str(log.dir.parent) == asked and asked in dirs
