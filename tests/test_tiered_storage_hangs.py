"""A remote storage that *hangs* (a call that never returns) does not stall the broker.

A remote storage plugin defined here, ``hanging``, wraps the built-in directory storage and
blocks the calls a test names on a gate (a ``threading.Event``) until the test opens it. With
it, in one broker without sockets:

- a consumer's remote read is given up after ``remote.fetch.max.wait.ms`` (KIP-1018) and the
  fetch answered without the partition's records, while produce and local reads go on; reads
  beyond the reader threads and ``remote.log.reader.max.pending.tasks`` are refused;
- a partition whose copy hangs holds up neither the other partitions' copies nor their
  expiration; a leadership change abandons the hung copy (logged, counted), and so does shutdown;
- a broker whose remote storage hangs at start still starts.

Nothing is timed: the tests wait for conditions (``eventually``), bounded only so that a broken
build fails instead of hanging.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from broker_harness import FAKE_TRANSPORT, batch, broker_plugins, create, fetch_records, produce, serving

from odradek.broker import remote_log_manager
from odradek.broker import server as broker_server
from odradek.broker.api import FetchPartition, IsolationLevel, ListOffsetsPartition
from odradek.broker.core import BrokerCore
from odradek.broker.remote_log_manager import RemoteLogManager
from odradek.broker.server import BrokerServer
from odradek.config import Config, load_config
from odradek.errors import ErrorCode
from odradek.hookspecs import hookimpl
from odradek.interfaces import RemoteSegmentState, RemoteStorageFactory, TopicPartition
from odradek.metrics import BrokerCollector
from odradek.plugins.storage_segment.storage import SegmentLogStorage
from odradek.plugins.storage_tiered.plugin import create as create_directory

pytestmark = pytest.mark.trio

SEGMENT_BYTES = "600"
HUNG = TopicPartition("hung", 0)
OTHER = TopicPartition("other", 0)
#: how long a test waits for what must happen at once, before it fails rather than hangs
PATIENCE_S = 30


class Gate:
    """The calls to hold: each named method of the wrapped storage blocks, for the topics
    named, until :meth:`open`; :attr:`entered` counts calls that reached the gate."""

    def __init__(self) -> None:
        self.methods: set[str] = set()
        self.topics: set[str] = set()
        self.entered = 0
        self._opened = threading.Event()
        self._lock = threading.Lock()

    def close(self, methods: Sequence[str], topics: Sequence[str]) -> None:
        self.methods = set(methods)
        self.topics = set(topics)
        self._opened.clear()

    def open(self) -> None:
        self.methods = set()
        self._opened.set()

    def pass_(self, method: str, topic: str) -> None:
        if method in self.methods and topic in self.topics:
            with self._lock:
                self.entered += 1
            self._opened.wait()


class _Gated:
    """A storage or metadata manager whose calls pass the gate first."""

    def __init__(self, inner: Any, gate: Gate) -> None:
        self._inner = inner
        self._gate = gate

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        if not callable(target):
            return target

        def call(*args: Any) -> Any:
            first = args[0] if args else None
            tp = getattr(first, "topic_partition", first)
            self._gate.pass_(name, getattr(tp, "topic", ""))
            return target(*args)

        call.__name__ = name
        return call


class HangingRemoteStorage:
    """The ``hanging`` remote storage plugin: the directory storage behind :class:`Gate`."""

    def __init__(self) -> None:
        self.gate = Gate()

    def _create(self, config: Config) -> tuple[Any, Any]:
        storage, metadata = create_directory(config)
        return _Gated(storage, self.gate), _Gated(metadata, self.gate)

    @hookimpl
    def odradek_register_remote_storage(self) -> Sequence[RemoteStorageFactory]:
        return [RemoteStorageFactory("hanging", self._create, "the directory storage, its calls held on a gate")]


@asynccontextmanager
async def hanging_broker(tmp_path: Path, plugin: HangingRemoteStorage, **overrides: Any) -> AsyncIterator[BrokerCore]:
    plugins = broker_plugins(FAKE_TRANSPORT, extra=["odradek.plugins.storage_tiered.plugin", plugin])
    settings = {
        "log.dirs": str(tmp_path / "data"),
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "remote.log.storage.system.enable": True,
        "remote.log.storage.manager": "hanging",
        "remote.log.storage.dir": str(tmp_path / "remote"),
        "remote.log.manager.task.interval.ms": 3_600_000,
        "log.retention.check.interval.ms": 3_600_000,
        "remote.fetch.max.wait.ms": 200,
        **overrides,
    }
    try:
        async with serving(BrokerServer(load_config(env={}, overrides=settings, plugins=plugins), plugins)) as core:
            yield core
    finally:
        plugin.gate.open()  # the threads left hanging end with the test


@pytest.fixture
def plugin() -> HangingRemoteStorage:
    return HangingRemoteStorage()


def rlm(core: BrokerCore) -> RemoteLogManager:
    manager = core.replica_manager.remote_log_manager
    assert manager is not None
    return manager


async def eventually(condition: Any) -> None:
    """Wait for ``condition()`` (what the background tasks do at once), failing after PATIENCE_S."""
    with trio.fail_after(PATIENCE_S):
        while not condition():
            await trio.sleep(0.01)


async def visited_until(manager: RemoteLogManager, condition: Any) -> None:
    """Wake the remote log manager until ``condition()``: a wake that comes while a partition's
    task still runs (from before what the test just wrote) starts none for it."""

    def woken() -> bool:
        manager.wake()
        return bool(condition())

    await eventually(woken)


async def produce_batches(core: BrokerCore, tp: TopicPartition, batches: int) -> list[bytes]:
    values = []
    start = core.replica_manager.partitions[tp].log_end_offset
    for b in range(batches):
        vals = [b"%s-%06d" % (tp.topic.encode(), start + b * 8 + i) for i in range(8)]
        assert (await produce(core, tp, batch(vals))).error == ErrorCode.NONE
        values += vals
    return values


def finished(core: BrokerCore, tp: TopicPartition) -> list[tuple[int, int]]:
    listed = rlm(core).metadata._inner.list_remote_log_segments(tp)  # type: ignore[attr-defined]
    return [(m.start_offset, m.end_offset) for m in listed if m.state is RemoteSegmentState.COPY_SEGMENT_FINISHED]


async def tiered_topic(core: BrokerCore, tp: TopicPartition, **configs: str) -> None:
    await create(core, tp.topic, 1, **{"remote.storage.enable": "true", "segment.bytes": SEGMENT_BYTES, **configs})


async def fetch_one(core: BrokerCore, tp: TopicPartition, offset: int) -> tuple[ErrorCode, bytes]:
    wanted = [FetchPartition(tp, offset, 1 << 20)]
    result = (await core.fetch(-1, 0, 0, 1 << 20, IsolationLevel.READ_UNCOMMITTED, wanted))[tp]
    if result.records is None:
        return result.error, b""
    try:
        return result.error, result.records.to_bytes()
    finally:
        result.records.release()


async def read_from(core: BrokerCore, tp: TopicPartition, start: int) -> list[bytes]:
    """Every record's value from ``start`` to the high watermark, fetch after fetch."""
    out: list[bytes] = []
    hw = core.replica_manager.partitions[tp].high_watermark
    while start + len(out) < hw:
        got = await fetch_records(core, tp, start + len(out))
        assert got, f"no records at offset {start + len(out)}"
        out += [r.value or b"" for r in got]
    return out


def gauge(core: BrokerCore, name: str) -> float:
    families = BrokerCollector(core).collect()
    (value,) = [s.value for f in families for s in f.samples if s.name == f"kafka_server_brokertopicmetrics_{name}"]
    return value


async def trimmed(core: BrokerCore, tp: TopicPartition) -> list[bytes]:
    """``tp`` tiered, written, copied and trimmed to its active segment locally."""
    await tiered_topic(core, tp, **{"local.retention.bytes": "0"})
    values = await produce_batches(core, tp, 12)
    await rlm(core).run_once()
    assert isinstance(core.storage, SegmentLogStorage)
    await core.storage.run_retention()
    assert core.replica_manager.partitions[tp].local_log_start_offset > 0
    return values


async def test_a_hung_remote_read_is_answered_without_records_and_abandoned(
    tmp_path: Path, plugin: HangingRemoteStorage
) -> None:
    async with hanging_broker(tmp_path, plugin) as core:
        values = await trimmed(core, HUNG)
        manager = rlm(core)
        plugin.gate.close(["fetch_index", "fetch_log_segment"], [HUNG.topic])
        error, data = await fetch_one(core, HUNG, 0)
        assert (error, data) == (ErrorCode.NONE, b"")  # answered, without that partition's records
        assert manager.metrics.fetch_expired == 1
        assert (manager.read_calls.abandoned, manager.read_calls.hung) == (1, 1)
        assert gauge(core, "remotefetchexpired") == 1 and gauge(core, "remotestorageabandonedcalls") == 1
        # the broker goes on: produce, and reads of the local log
        more = await produce_batches(core, HUNG, 1)
        local_start = core.replica_manager.partitions[HUNG].local_log_start_offset
        assert await read_from(core, HUNG, local_start) == (values + more)[local_start:]
        plugin.gate.open()
        await eventually(lambda: manager.read_calls.hung == 0)  # the thread returned by itself
        got = await fetch_records(core, HUNG, 0)
        assert got and [r.value for r in got] == values[: len(got)]


async def test_remote_reads_beyond_the_readers_and_their_queue_are_refused(
    tmp_path: Path, plugin: HangingRemoteStorage
) -> None:
    # a longer wait than the others': the waiting read must still wait while the test looks
    settings = {
        "remote.log.reader.threads": 1,
        "remote.log.reader.max.pending.tasks": 1,
        "remote.fetch.max.wait.ms": 1500,
    }
    async with hanging_broker(tmp_path, plugin, **settings) as core:
        await trimmed(core, HUNG)
        manager = rlm(core)
        plugin.gate.close(["fetch_index", "fetch_log_segment"], [HUNG.topic])
        assert await fetch_one(core, HUNG, 0) == (ErrorCode.NONE, b"")  # its thread hangs on
        waiting: list[tuple[ErrorCode, bytes]] = []
        async with trio.open_nursery() as nursery:

            async def wait_for_a_reader() -> None:
                waiting.append(await fetch_one(core, HUNG, 0))

            nursery.start_soon(wait_for_a_reader)
            await eventually(lambda: manager._reads_in_flight == 1)
            # the one reader thread hangs and one read waits: the next is refused, as Kafka's
            # reader pool rejects a task when its queue is full
            assert (await fetch_one(core, HUNG, 0)) == (ErrorCode.UNKNOWN_SERVER_ERROR, b"")
            assert manager.metrics.fetch_rejected == 1
        assert waiting == [(ErrorCode.NONE, b"")]  # it waited for a thread and gave up in time
        assert manager.read_calls.abandoned == 1  # a read that never got a thread abandons none


async def test_a_hung_copy_holds_up_only_its_partition_and_is_abandoned(
    tmp_path: Path, plugin: HangingRemoteStorage, caplog: pytest.LogCaptureFixture
) -> None:
    async with hanging_broker(tmp_path, plugin) as core:
        manager = rlm(core)
        await tiered_topic(core, HUNG)
        await tiered_topic(core, OTHER, **{"retention.bytes": "1200", "local.retention.bytes": "0"})
        plugin.gate.close(["copy_log_segment_data"], [HUNG.topic])
        await produce_batches(core, HUNG, 12)
        other = await produce_batches(core, OTHER, 12)
        # the expiration tasks run beside the copies: a later one expires what was copied. The
        # log start moves once every expired segment is deleted, after the first deletion is counted
        other_log = core.replica_manager.partitions[OTHER]
        await visited_until(
            manager,
            lambda: plugin.gate.entered == 1 and manager.metrics.delete_segments > 0 and other_log.log_start_offset > 0,
        )
        # the other partition was copied and expired while the hung one's copy waits
        assert finished(core, HUNG) == []
        # and the broker serves: produce and local reads of the hung partition
        await produce_batches(core, HUNG, 1)
        assert len(await read_from(core, HUNG, 0)) == 13 * 8
        # the next interval skips the hung copy and goes on with the rest
        copies = manager.metrics.copy_segments
        more = await produce_batches(core, OTHER, 6)
        await visited_until(manager, lambda: manager.metrics.copy_segments > copies)
        assert manager.metrics.tasks_skipped >= 1 and plugin.gate.entered == 1
        await eventually(lambda: not [tp for tp, _ in manager._running if tp == OTHER])  # its visit is over
        start = core.replica_manager.partitions[OTHER].log_start_offset
        assert await read_from(core, OTHER, start) == (other + more)[start:]
        # a leadership change abandons the hung copy at once
        hung = core.replica_manager.partitions[HUNG]
        core.replica_manager.become_follower(HUNG, hung.config, 99, hung.leader_epoch + 1, [0, 99], [0, 99])
        await eventually(lambda: manager.calls.abandoned == 1)
        assert manager.calls.hung == 1
        assert any("copy_log_segment_data of hung-0 abandoned" in r.getMessage() for r in caplog.records)
        # and shutdown does not wait for a hung copy either: OTHER's next one hangs too
        plugin.gate.close(["copy_log_segment_data"], [OTHER.topic])
        await produce_batches(core, OTHER, 6)
        await visited_until(manager, lambda: plugin.gate.entered == 2)
    assert manager.calls.abandoned == 2  # the broker stopped with the copy still hung


async def test_a_broker_whose_remote_storage_hangs_at_start_still_starts(
    tmp_path: Path, plugin: HangingRemoteStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with hanging_broker(tmp_path, plugin) as core:
        values = await trimmed(core, HUNG)
    monkeypatch.setattr(broker_server, "REMOTE_LISTING_AT_START_S", 0.1)
    plugin.gate.close(["list_remote_log_segments"], [HUNG.topic])
    async with hanging_broker(tmp_path, plugin) as core:
        assert plugin.gate.entered >= 1
        await produce_batches(core, HUNG, 1)  # it serves the local log
        plugin.gate.open()
        await rlm(core).run_once()
        got = await fetch_records(core, HUNG, 0)
        assert got and [r.value for r in got] == values[: len(got)]


async def test_deleting_a_topic_whose_remote_deletion_hangs_goes_on(
    tmp_path: Path, plugin: HangingRemoteStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DeleteTopics, and the metadata watch that applies it, wait for the remote deletion only
    so long: the broker goes on creating and serving topics, and the deletion ends by itself."""
    monkeypatch.setattr(remote_log_manager, "TOPIC_DELETION_WAIT_S", 0.1)
    async with hanging_broker(tmp_path, plugin) as core:
        await trimmed(core, HUNG)
        assert list((tmp_path / "remote" / str(HUNG)).glob("*.log"))
        plugin.gate.close(["delete_log_segment_data"], [HUNG.topic])
        assert (await core.delete_topics([HUNG.topic], 5000))[HUNG.topic].error == ErrorCode.NONE
        assert plugin.gate.entered == 1 and core.storage.get_log(HUNG) is None
        await tiered_topic(core, OTHER)  # the metadata watch goes on
        assert len(await produce_batches(core, OTHER, 2)) == 16
        plugin.gate.open()
        await eventually(lambda: not list((tmp_path / "remote" / str(HUNG)).glob("*.log")))


async def test_a_hung_remote_timestamp_search_times_out(tmp_path: Path, plugin: HangingRemoteStorage) -> None:
    """ListOffsets by time into remote storage waits remote.list.offsets.request.timeout.ms at
    most, then answers the partition REQUEST_TIMED_OUT (as Kafka's DelayedRemoteListOffsets)."""
    async with hanging_broker(tmp_path, plugin, **{"remote.list.offsets.request.timeout.ms": 200}) as core:
        await trimmed(core, HUNG)
        plugin.gate.close(["fetch_log_segment"], [HUNG.topic])
        asked = [ListOffsetsPartition(HUNG, 0)]  # the first record: in remote storage
        found = (await core.list_offsets(-1, IsolationLevel.READ_UNCOMMITTED, asked))[HUNG]
        assert found.error == ErrorCode.REQUEST_TIMED_OUT
        assert rlm(core).read_calls.abandoned == 1
        plugin.gate.open()
        found = (await core.list_offsets(-1, IsolationLevel.READ_UNCOMMITTED, asked))[HUNG]
        assert (found.error, found.offset) == (ErrorCode.NONE, 0)
