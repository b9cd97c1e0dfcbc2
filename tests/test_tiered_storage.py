"""Tiered storage (KIP-405) in one broker without sockets: the remote log manager copies rolled
segments once and in order, local retention deletes only copied segments, fetches below the
local log start are read from remote storage, ListOffsets and DeleteRecords see the whole log,
remote retention, a restart, and a failing remote storage that loses nothing.

The remote log manager's background task is started by the broker (its first visit runs at
start, its next an hour later, and waking it is switched off); the tests visit with
``run_once`` and run retention with the segment engine's ``run_retention``, so nothing depends
on timing.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from broker_harness import FAKE_TRANSPORT, batch, broker_plugins, create, fetch_records, produce, serving

from odradek import records
from odradek.broker.api import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    ConfigResourceType,
    FetchPartition,
    IsolationLevel,
    ListOffsetsPartition,
)
from odradek.broker.core import BrokerCore
from odradek.broker.partition import ReplicaState
from odradek.broker.remote_log_manager import RemoteLogManager
from odradek.broker.server import BrokerServer
from odradek.config import load_config
from odradek.errors import ErrorCode, OdradekError, RemoteStorageError
from odradek.interfaces import RemoteSegmentState, TopicPartition
from odradek.metrics import BrokerCollector
from odradek.plugins.storage_segment.storage import SegmentLogStorage

pytestmark = pytest.mark.trio

TOPIC = "tiered"
TP = TopicPartition(TOPIC, 0)
#: about three 8-record batches a segment
SEGMENT_BYTES = "600"


@asynccontextmanager
async def tiered_broker(tmp_path: Path, **overrides: Any) -> AsyncIterator[BrokerCore]:
    plugins = broker_plugins(FAKE_TRANSPORT, extra=["odradek.plugins.storage_tiered.plugin"])
    settings = {
        "log.dirs": str(tmp_path / "data"),
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "remote.log.storage.system.enable": True,
        "remote.log.storage.dir": str(tmp_path / "remote"),
        "remote.log.manager.task.interval.ms": 3_600_000,
        "log.retention.check.interval.ms": 3_600_000,
        **overrides,
    }
    async with serving(BrokerServer(load_config(env={}, overrides=settings, plugins=plugins), plugins)) as core:
        # the background task visits only at its (hour-long) interval: the tests visit themselves,
        # so a visit woken by a topic's creation cannot land between a test's steps
        rlm(core).wake = lambda: None  # type: ignore[method-assign]
        yield core


def remote_gauge(core: BrokerCore, name: str) -> float:
    """A tiered storage metric as the broker's Prometheus collector reports it."""
    families = BrokerCollector(core).collect()
    (value,) = [s.value for f in families for s in f.samples if s.name == f"kafka_server_brokertopicmetrics_{name}"]
    return value


def rlm(core: BrokerCore) -> RemoteLogManager:
    manager = core.replica_manager.remote_log_manager
    assert manager is not None
    return manager


def storage(core: BrokerCore) -> SegmentLogStorage:
    assert isinstance(core.storage, SegmentLogStorage)
    return core.storage


async def produce_values(core: BrokerCore, start: int, batches: int, per_batch: int = 8) -> list[bytes]:
    values = []
    for b in range(batches):
        vals = [b"value-%06d" % (start + b * per_batch + i) for i in range(per_batch)]
        result = await produce(core, TP, batch(vals))
        assert result.error == ErrorCode.NONE
        values += vals
    return values


async def read_all(core: BrokerCore, start: int = 0, max_bytes: int = 1 << 20) -> list[tuple[int, bytes]]:
    """Every record from ``start`` to the high watermark, fetch after fetch, as a consumer."""
    out: list[tuple[int, bytes]] = []
    offset = start
    hw = core.replica_manager.partitions[TP].high_watermark
    while offset < hw:
        got = await fetch_records(core, TP, offset, max_bytes=max_bytes)
        assert got, f"no records at offset {offset}"
        out += [(r.offset, r.value or b"") for r in got]
        offset = got[-1].offset + 1
    return out


async def list_offset(core: BrokerCore, timestamp: int) -> int:
    result = await core.list_offsets(-1, IsolationLevel.READ_UNCOMMITTED, [ListOffsetsPartition(TP, timestamp)])
    assert result[TP].error == ErrorCode.NONE
    return result[TP].offset


def finished(core: BrokerCore) -> list[tuple[int, int]]:
    listed = rlm(core).metadata.list_remote_log_segments(TP)
    return [(m.start_offset, m.end_offset) for m in listed if m.state is RemoteSegmentState.COPY_SEGMENT_FINISHED]


async def tiered_topic(core: BrokerCore, **configs: str) -> None:
    await create(core, TOPIC, 1, **{"remote.storage.enable": "true", "segment.bytes": SEGMENT_BYTES, **configs})


async def tiered_and_trimmed(core: BrokerCore, **configs: str) -> list[bytes]:
    """A tiered topic keeping only its active segment locally, written with 12 batches of 8
    records, copied and trimmed by local retention; the values written."""
    await tiered_topic(core, **{"local.retention.bytes": "0", **configs})
    values = await produce_values(core, 0, 12)
    await rlm(core).run_once()
    await storage(core).run_retention()
    return values


async def test_rolled_segments_are_copied_once_in_order(tmp_path: Path) -> None:
    async with tiered_broker(tmp_path) as core:
        await tiered_topic(core)
        await produce_values(core, 0, 12)
        log = core.replica_manager.partitions[TP].log
        rolled = [(s.base_offset, s.next_offset - 1) for s in log.rolled_segments(log.log_end_offset)]
        assert len(rolled) >= 3
        await rlm(core).run_once()
        assert finished(core) == rolled  # every rolled segment, none of the active one
        copies = rlm(core).metrics.copy_segments
        await rlm(core).run_once()
        assert rlm(core).metrics.copy_segments == copies == len(rolled)
        assert finished(core) == rolled
        assert log.remote_copied_end == rolled[-1][1] + 1


async def test_only_committed_segments_are_copied(tmp_path: Path) -> None:
    async with tiered_broker(tmp_path) as core:
        await tiered_topic(core)
        await produce_values(core, 0, 12)
        partition = core.replica_manager.partitions[TP]
        partition._set_high_watermark(8)  # as if the followers had only the first batch
        await rlm(core).run_once()
        assert all(end < 8 for _, end in finished(core))


async def test_local_retention_deletes_only_copied_segments(tmp_path: Path) -> None:
    async with tiered_broker(tmp_path) as core:
        await tiered_topic(core, **{"local.retention.bytes": "0"})
        values = await produce_values(core, 0, 12)
        partition = core.replica_manager.partitions[TP]
        await storage(core).run_retention()
        assert partition.local_log_start_offset == 0  # nothing is in remote storage yet
        await rlm(core).run_once()
        await storage(core).run_retention()
        copied_end = finished(core)[-1][1] + 1
        assert partition.local_log_start_offset == copied_end  # the active segment stays
        assert partition.log_start_offset == 0
        assert await list_offset(core, EARLIEST_TIMESTAMP) == 0
        assert await list_offset(core, EARLIEST_LOCAL_TIMESTAMP) == copied_end
        assert await list_offset(core, LATEST_TIERED_TIMESTAMP) == copied_end - 1  # KIP-1005
        assert await list_offset(core, LATEST_TIMESTAMP) == len(values)
        assert await read_all(core) == list(enumerate(values))


async def test_a_remote_fetch_is_whole_batches_within_max_bytes(tmp_path: Path) -> None:
    async with tiered_broker(tmp_path) as core:
        values = await tiered_and_trimmed(core)
        fetched = (await core.fetch(-1, 0, 0, 100, IsolationLevel.READ_UNCOMMITTED, [FetchPartition(TP, 3, 100)]))[TP]
        assert fetched.error == ErrorCode.NONE and fetched.records is not None
        data = fetched.records.to_bytes()
        fetched.records.release()
        (only,) = records.iter_batches(data)  # one batch, past max_bytes: at least one is answered
        assert only.base_offset == 0 and [r.value for r in only.records] == values[:8]
        assert await read_all(core, 5, max_bytes=150) == list(enumerate(values))[5:]
        assert rlm(core).metrics.fetch_requests > 0


async def test_a_follower_below_the_local_log_is_told_offset_moved_to_tiered_storage(tmp_path: Path) -> None:
    async with tiered_broker(tmp_path) as core:
        await tiered_and_trimmed(core)
        partition = core.replica_manager.partitions[TP]
        partition.remote_replicas[2] = ReplicaState(2)  # a follower of it
        result = await core.fetch(2, 0, 0, 1 << 20, IsolationLevel.READ_UNCOMMITTED, [FetchPartition(TP, 0, 1 << 20)])
        assert result[TP].error == ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE
        assert result[TP].log_start_offset == 0
        restart = await rlm(core).follower_restart_offset(partition)
        assert restart == partition.local_log_start_offset


async def test_remote_retention_deletes_the_oldest_remote_segments(tmp_path: Path) -> None:
    async with tiered_broker(tmp_path) as core:
        values = await tiered_and_trimmed(core, **{"retention.bytes": "1200"})  # copies, then expires the oldest
        remaining = finished(core)
        partition = core.replica_manager.partitions[TP]
        assert remaining and remaining[0][0] > 0
        assert partition.log_start_offset == remaining[0][0] == await list_offset(core, EARLIEST_TIMESTAMP)
        assert rlm(core).metrics.delete_segments > 0
        start = partition.log_start_offset
        assert await read_all(core, start) == list(enumerate(values))[start:]
        stale = await core.fetch(-1, 0, 0, 1 << 20, IsolationLevel.READ_UNCOMMITTED, [FetchPartition(TP, 0, 1 << 20)])
        assert stale[TP].error == ErrorCode.OFFSET_OUT_OF_RANGE


async def test_delete_records_moves_the_log_start_into_remote_storage(tmp_path: Path) -> None:
    async with tiered_broker(tmp_path) as core:
        values = await tiered_and_trimmed(core)
        first_two = finished(core)[1][1] + 1
        result = await core.delete_records({TP: first_two + 1}, 5000)
        assert result[TP].error == ErrorCode.NONE and result[TP].low_watermark == first_two + 1
        assert await list_offset(core, EARLIEST_TIMESTAMP) == first_two + 1
        await rlm(core).run_once()
        assert finished(core)[0][0] == first_two  # the two segments wholly below it are gone
        assert await read_all(core, first_two + 1) == list(enumerate(values))[first_two + 1 :]
    async with tiered_broker(tmp_path) as core:  # a restart keeps the start inside the segment
        assert await list_offset(core, EARLIEST_TIMESTAMP) == first_two + 1
        below = await core.fetch(
            -1, 0, 0, 1 << 20, IsolationLevel.READ_UNCOMMITTED, [FetchPartition(TP, first_two, 1 << 20)]
        )
        assert below[TP].error == ErrorCode.OFFSET_OUT_OF_RANGE
        assert await read_all(core, first_two + 1) == list(enumerate(values))[first_two + 1 :]


async def test_a_restart_keeps_the_remote_log(tmp_path: Path) -> None:
    async with tiered_broker(tmp_path) as core:
        values = await tiered_and_trimmed(core)
        local_start = core.replica_manager.partitions[TP].local_log_start_offset
        assert local_start > 0
    async with tiered_broker(tmp_path) as core:
        await rlm(core).run_once()
        partition = core.replica_manager.partitions[TP]
        assert partition.local_log_start_offset == local_start
        assert await list_offset(core, EARLIEST_TIMESTAMP) == 0
        assert await read_all(core) == list(enumerate(values))
        more = await produce_values(core, len(values), 4)
        await rlm(core).run_once()
        assert await read_all(core) == list(enumerate(values + more))


async def test_a_failing_remote_storage_loses_nothing_and_is_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with tiered_broker(tmp_path) as core:
        await tiered_topic(core, **{"local.retention.bytes": "0"})
        values = await produce_values(core, 0, 12)
        remote = tmp_path / "remote"
        shutil.rmtree(remote)
        remote.write_bytes(b"not a directory")  # every write under it fails
        with caplog.at_level(logging.ERROR):
            await rlm(core).run_once()
        assert any("remote storage in tiered-0 failing" in r.getMessage() for r in caplog.records)
        assert rlm(core).failures.is_failing(str(TP))
        assert remote_gauge(core, "remotestoragefailingpartitions") == 1
        await storage(core).run_retention()
        partition = core.replica_manager.partitions[TP]
        assert partition.local_log_start_offset == 0  # nothing was copied: nothing deleted locally
        assert await read_all(core) == list(enumerate(values))
        remote.unlink()
        remote.mkdir()
        await rlm(core).run_once()  # works again
        assert not rlm(core).failures.is_failing(str(TP))
        assert remote_gauge(core, "remotestoragefailingpartitions") == 0
        assert remote_gauge(core, "remotecopysegments") == len(finished(core))
        assert finished(core)
        await storage(core).run_retention()
        assert partition.local_log_start_offset > 0
        assert await read_all(core) == list(enumerate(values))


async def test_a_partition_that_stops_failing_here_is_not_counted_as_failing(tmp_path: Path) -> None:
    """A partition whose remote tasks failed and that then stops being hosted here no longer
    counts in ``remotestoragefailingpartitions``: nothing here will retry it."""
    async with tiered_broker(tmp_path) as core:
        await tiered_topic(core, **{"local.retention.bytes": "0"})
        await produce_values(core, 0, 12)
        remote = tmp_path / "remote"
        shutil.rmtree(remote)
        remote.write_bytes(b"not a directory")
        await rlm(core).run_once()
        assert remote_gauge(core, "remotestoragefailingpartitions") == 1
        await core.replica_manager.remove_partition(TP, delete=False)
        assert remote_gauge(core, "remotestoragefailingpartitions") == 0
        assert not rlm(core).failures.is_failing(str(TP))


async def test_a_topic_that_is_not_tiered_is_left_alone(tmp_path: Path) -> None:
    async with tiered_broker(tmp_path) as core:
        await create(core, TOPIC, 1, **{"segment.bytes": SEGMENT_BYTES})
        await produce_values(core, 0, 12)
        await rlm(core).run_once()
        assert finished(core) == []
        assert core.replica_manager.partitions[TP].log.remote_copied_end is None
        assert await list_offset(core, LATEST_TIERED_TIMESTAMP) == -1


def remote_files(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "remote" / str(TP)).rglob("*") if p.is_file())


async def test_deleting_a_tiered_topic_deletes_its_remote_segments(tmp_path: Path) -> None:
    async with tiered_broker(tmp_path) as core:
        await tiered_and_trimmed(core)
        assert remote_files(tmp_path)
        assert (await core.delete_topics([TOPIC], 1000))[TOPIC].error == ErrorCode.NONE
        assert core.storage.get_log(TP) is None
        assert remote_files(tmp_path) == []


async def test_a_topic_created_again_never_reads_the_earlier_topics_segments(tmp_path: Path) -> None:
    async with tiered_broker(tmp_path) as core:
        await tiered_and_trimmed(core)
        earlier = tmp_path / "earlier"
        shutil.copytree(tmp_path / "remote", earlier)
        assert (await core.delete_topics([TOPIC], 1000))[TOPIC].error == ErrorCode.NONE
        shutil.rmtree(tmp_path / "remote")
        shutil.copytree(earlier, tmp_path / "remote")  # as if their deletion had failed
        await tiered_topic(core)
        new = await produce_values(core, 0, 1)
        await rlm(core).run_once()
        assert finished(core) == []  # the earlier topic's segments were deleted, not taken
        assert await list_offset(core, EARLIEST_TIMESTAMP) == 0
        assert await read_all(core) == list(enumerate(new))


async def test_remote_log_copy_disable_stops_copying_and_keeps_reading(tmp_path: Path) -> None:
    """KIP-950: with remote.log.copy.disable the leader copies nothing more, retention.ms/bytes
    apply to the local log again, and what remote storage holds is still read."""
    async with tiered_broker(tmp_path) as core:
        values = await tiered_and_trimmed(core)
        copied = finished(core)
        disable = AlterableConfig("remote.log.copy.disable", AlterConfigOp.SET, "true")
        # Kafka requires local retention to be the whole log's once nothing more is copied
        whole = AlterableConfig("local.retention.bytes", AlterConfigOp.DELETE, None)
        resource = AlterConfigsResource(ConfigResourceType.TOPIC, TOPIC, [disable, whole])
        assert (await core.incremental_alter_configs([resource], False))[0].error == ErrorCode.NONE
        more = await produce_values(core, len(values), 12)
        await rlm(core).run_once()
        assert finished(core) == copied
        partition = core.replica_manager.partitions[TP]
        assert partition.log.remote_copied_end is None
        local_start = partition.local_log_start_offset
        await storage(core).run_retention()  # retention.ms/bytes (unlimited) keep the local log
        assert partition.local_log_start_offset == local_start
        assert await read_all(core) == list(enumerate(values + more))


async def test_a_partition_taken_on_reads_remote_storage_before_the_next_visit(tmp_path: Path) -> None:
    async with tiered_broker(tmp_path) as core:
        values = await tiered_and_trimmed(core)
        partition = core.replica_manager.partitions[TP]
        partition.remote = None  # as a partition this broker just took on
        partition.log.remote_copied_end = None
        assert await read_all(core) == list(enumerate(values))


async def test_remote_retention_moves_the_log_start_and_never_copies_again(tmp_path: Path) -> None:
    """Every remote segment past retention.ms: the whole log's start moves past them (the local
    copies of those segments go too), and the leader does not copy them again."""
    async with tiered_broker(tmp_path) as core:
        await tiered_topic(core)  # local retention is not run: every segment stays local
        values = await produce_values(core, 0, 12)
        await rlm(core).run_once()
        copied = finished(core)
        copies = rlm(core).metrics.copy_segments
        partition = core.replica_manager.partitions[TP]
        assert partition.local_log_start_offset == 0  # every segment is local too
        retention = AlterableConfig("retention.ms", AlterConfigOp.SET, "60000")
        resource = AlterConfigsResource(ConfigResourceType.TOPIC, TOPIC, [retention])
        assert (await core.incremental_alter_configs([resource], False))[0].error == ErrorCode.NONE
        clock = rlm(core).clock_ms
        rlm(core).clock_ms = lambda: clock() + 3_600_000  # an hour later
        await rlm(core).run_once()
        await rlm(core).run_once()
        assert finished(core) == []
        assert rlm(core).metrics.copy_segments == copies  # nothing copied again
        start = copied[-1][1] + 1
        assert partition.log_start_offset == partition.local_log_start_offset == start
        assert await list_offset(core, EARLIEST_TIMESTAMP) == start
        assert await read_all(core, start) == list(enumerate(values))[start:]


class FailingCopies:
    """A remote storage whose copies fail (a full bucket); everything else is the real one's."""

    def __init__(self, storage: Any) -> None:
        self._storage = storage

    def __getattr__(self, name: str) -> Any:
        return getattr(self._storage, name)

    def copy_log_segment_data(self, metadata: Any, data: Any) -> None:
        raise RemoteStorageError("the bucket is full")


async def test_a_failed_copy_leaves_nothing_behind_and_keeps_the_local_segments(tmp_path: Path) -> None:
    async with tiered_broker(tmp_path) as core:
        await tiered_topic(core, **{"local.retention.bytes": "0"})
        values = await produce_values(core, 0, 12)
        manager = rlm(core)
        real = manager.storage
        manager.storage = FailingCopies(real)  # type: ignore[assignment]
        await manager.run_once()
        assert manager.metrics.copy_failures == 1 and manager.failures.is_failing(str(TP))
        assert manager.metadata.list_remote_log_segments(TP) == []  # the started copy was forgotten
        await storage(core).run_retention()
        assert core.replica_manager.partitions[TP].local_log_start_offset == 0
        manager.storage = real
        await manager.run_once()
        await storage(core).run_retention()
        assert core.replica_manager.partitions[TP].local_log_start_offset > 0
        assert await read_all(core) == list(enumerate(values))


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        ({"remote.log.storage.dir": ""}, "'remote.log.storage.dir' must be set"),
        ({"remote.log.storage.manager": "s3"}, "no remote storage plugin named 's3'.*'remote.log.storage.manager'"),
    ],
)
async def test_a_broker_without_a_usable_remote_storage_stops_with_the_reason(
    tmp_path: Path, settings: dict[str, str], error: str
) -> None:
    expected = pytest.RaisesExc(OdradekError, match=error)
    with pytest.RaisesGroup(expected, flatten_subgroups=True, allow_unwrapped=True):
        async with tiered_broker(tmp_path, **settings):
            pytest.fail("the broker started")


async def alter_topic(core: BrokerCore, *configs: tuple[str, str | None]) -> tuple[ErrorCode, str | None]:
    """IncrementalAlterConfigs on the topic: SET each (key, value), DELETE each (key, None)."""
    ops = [AlterableConfig(k, AlterConfigOp.SET if v is not None else AlterConfigOp.DELETE, v) for k, v in configs]
    resource = AlterConfigsResource(ConfigResourceType.TOPIC, TOPIC, ops)
    (result,) = await core.incremental_alter_configs([resource], False)
    return result.error, result.error_message


async def test_turning_tiering_off_deletes_the_remote_data_only_when_asked(tmp_path: Path) -> None:
    """KIP-950: remote.storage.enable back to false is INVALID_CONFIG (Kafka's message) unless
    remote.log.delete.on.disable=true; then the leader deletes the remote segments, the log
    starts at the local log start, and local retention takes retention.ms/bytes again."""
    async with tiered_broker(tmp_path) as core:
        values = await tiered_and_trimmed(core)
        partition = core.replica_manager.partitions[TP]
        local_start = partition.local_log_start_offset
        assert local_start > 0 and finished(core) and remote_files(tmp_path)
        error, message = await alter_topic(core, ("remote.storage.enable", "false"))
        assert error == ErrorCode.INVALID_CONFIG
        assert message is not None and message.startswith("It is invalid to disable remote storage without deleting")
        assert "`remote.storage.enable=false,remote.log.delete.on.disable=true`" in message
        # the compacted policy Kafka refuses for a tiered topic, and local retention above the whole log's
        error, message = await alter_topic(core, ("cleanup.policy", "compact"))
        assert error == ErrorCode.INVALID_CONFIG and message is not None and "cleanup.policy=delete" in message
        error, message = await alter_topic(core, ("retention.bytes", "100"))  # local.retention.bytes is 0
        assert error == ErrorCode.NONE
        error, message = await alter_topic(core, ("local.retention.bytes", "200"))
        assert error == ErrorCode.INVALID_CONFIG
        assert message is not None and "retention.bytes property value: 100" in message
        assert await alter_topic(core, ("retention.bytes", None)) == (ErrorCode.NONE, None)
        assert await read_all(core) == list(enumerate(values))  # nothing changed
        off = (("remote.storage.enable", "false"), ("remote.log.delete.on.disable", "true"))
        assert await alter_topic(core, *off) == (ErrorCode.NONE, None)
        await rlm(core).run_once()
        assert finished(core) == [] and remote_files(tmp_path) == []
        assert partition.remote is None and partition.log.remote_copied_end is None
        assert partition.log_start_offset == partition.local_log_start_offset == local_start
        assert await list_offset(core, EARLIEST_TIMESTAMP) == local_start
        assert await list_offset(core, LATEST_TIERED_TIMESTAMP) == -1
        gone = await core.fetch(-1, 0, 0, 1 << 20, IsolationLevel.READ_UNCOMMITTED, [FetchPartition(TP, 0, 1 << 20)])
        assert gone[TP].error == ErrorCode.OFFSET_OUT_OF_RANGE
        assert await read_all(core, local_start) == list(enumerate(values))[local_start:]
        more = await produce_values(core, len(values), 12)
        await rlm(core).run_once()
        await storage(core).run_retention()  # retention.bytes/ms (unlimited) keep everything now
        assert finished(core) == [] and partition.local_log_start_offset == local_start
        assert await read_all(core, local_start) == list(enumerate(values + more))[local_start:]


async def test_list_offsets_by_time_searches_remote_storage_first(tmp_path: Path) -> None:
    """As Kafka: a timestamp whose first record is in a segment only remote storage holds is
    answered from it (offset, its timestamp, its leader epoch); later ones from the local log."""
    async with tiered_broker(tmp_path) as core:
        await tiered_topic(core, **{"local.retention.bytes": "0"})
        base = time.time_ns() // 1_000_000 - 3_600_000
        for b in range(12):  # batch b: offsets 8b..8b+7, every record at base + 1000 b
            vals = [b"value-%06d" % (b * 8 + i) for i in range(8)]
            assert (await produce(core, TP, batch(vals, timestamp=base + 1000 * b))).error == ErrorCode.NONE
        await rlm(core).run_once()
        await storage(core).run_retention()
        local_start = core.replica_manager.partitions[TP].local_log_start_offset
        assert local_start >= 16 and local_start % 8 == 0
        assert await list_offset(core, base - 5) == 0
        assert await list_offset(core, base + 1000) == 8  # in remote storage only
        assert await list_offset(core, base + 1001) == 16
        assert await list_offset(core, base + 1000 * (local_start // 8)) == local_start  # the local log
        assert await list_offset(core, base + 11_000) == 88
        assert await list_offset(core, base + 11_001) == -1
        asked = [ListOffsetsPartition(TP, base + 1000)]
        found = (await core.list_offsets(-1, IsolationLevel.READ_UNCOMMITTED, asked))[TP]
        assert (found.offset, found.timestamp, found.leader_epoch) == (8, base + 1000, 0)
        remote = tmp_path / "remote"
        shutil.rmtree(remote)
        remote.write_bytes(b"not a directory")
        failed = (await core.list_offsets(-1, IsolationLevel.READ_UNCOMMITTED, asked))[TP]
        assert failed.error == ErrorCode.KAFKA_STORAGE_ERROR
        assert await list_offset(core, base + 11_000) == 88  # still searched remotely first: no segment reaches it
