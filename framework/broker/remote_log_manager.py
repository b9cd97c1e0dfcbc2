"""Tiered storage on a broker (Kafka's ``RemoteLogManager``, KIP-405).

With ``remote.log.storage.system.enable=true`` the broker builds the remote storage named by
``remote.log.storage.manager`` (a plugin's ``odradek_register_remote_storage``) and runs
:meth:`RemoteLogManager.run`: every ``remote.log.manager.task.interval.ms`` it visits each hosted
partition of a topic with ``remote.storage.enable=true`` and

1. lists the partition's remote segments (the metadata manager is shared by the cluster) and
   gives the partition its :class:`~.remote_log.RemoteLogView` and the log its
   ``remote_copied_end``, so local retention (``local.retention.ms/bytes``) deletes only
   segments remote storage holds;
2. as leader, copies every rolled segment whose records are all below the high watermark and
   the last stable offset and past the highest offset already copied, oldest first, each once:
   the copy is recorded COPY_SEGMENT_STARTED, stored, then published COPY_SEGMENT_FINISHED
   (exclusively per start offset, so two brokers that both led never publish one segment twice);
   a new leader continues from the highest copied offset it lists, copying the segment that
   straddles it whole (as Kafka), so no offset is ever missing;
3. as leader, deletes remote segments that ``retention.ms``/``retention.bytes`` (over the whole
   log, remote and local) or the log start offset (DeleteRecords) no longer keep, and copies
   that never finished below the highest copied offset.

Each partition's copying (2.) and its listing and expiration (1., 3.) are separate tasks, as
Kafka's RLMCopyTask and RLMExpirationTask are, and their remote storage calls run in worker
threads of two bounded pools (``remote.log.manager.copier.thread.pool.size``,
``remote.log.manager.expiration.thread.pool.size``): a partition whose remote storage call hangs
holds up only its own task of that kind (an interval finding it still running skips it), never
the other partitions' copies nor any expiration. A partition no longer led here stops its copy
task, and shutdown stops them all, at once: a hung call's thread is abandoned
(:mod:`.remote_calls`), logged and counted.

Consumers' fetches below the local log start are read from remote storage through
:meth:`RemoteLogManager.read` in worker threads (at most ``remote.log.reader.threads`` at once,
and ``remote.log.reader.max.pending.tasks`` more waiting, beyond which a read is refused as
Kafka's full reader queue refuses it); a read that has not finished within
``remote.fetch.max.wait.ms`` (KIP-1018) is given up and the fetch answered without that
partition's records. ListOffsets by time searches the remote segments below the local log
first (:meth:`RemoteLogManager.offset_for_timestamp`). The quotas of KIP-956 bound the bytes
copied and read a second (:mod:`.remote_quota`). A topic whose tiering is turned off with
``remote.log.delete.on.disable`` (KIP-950) has its remote segments deleted by a deletion task
of its leader. A failing remote storage never stops the broker: each partition's failure
is logged once (then at most once a minute) and counted, local segments stay until copied, and
the next interval tries again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from ..errors import ErrorCode, KafkaError, OffsetOutOfRange, RemoteStorageError
from ..interfaces import (
    EpochEntry,
    LogSegmentData,
    RemoteIndexType,
    RemoteLogMetadataManager,
    RemoteLogSegmentMetadata,
    RemoteSegmentState,
    RemoteStorageManager,
    RolledSegment,
    TopicPartition,
)
from .metadata_cache import TOPIC_ID_STATE, parse_topic_id
from .remote_calls import RemoteCalls
from .remote_log import (
    RemoteFetchData,
    RemoteLogView,
    epoch_entries_for,
    leader_epoch_checkpoint,
    offset_for_timestamp_in,
    offset_index_position,
    read_batches,
)
from .remote_quota import RemoteQuota
from .storage_failures import StorageFailureLog

if TYPE_CHECKING:
    from .partition import Partition
    from .replica_manager import ReplicaManager

log = logging.getLogger(__name__)

#: offset indexes of remote segments kept in memory for reads (each a segment's index file)
INDEX_CACHE_ENTRIES = 256
#: the state beside a tiered log recording a log start offset inside a remote segment
REMOTE_LOG_START_STATE = "remote-log-start-offset"
#: how long a follower told OFFSET_MOVED_TO_TIERED_STORAGE waits for remote storage to say where
#: it restarts (its fetcher, serving every partition of that leader, waits with it)
FOLLOWER_REMOTE_TIMEOUT_S = 30.0
#: how long DeleteTopics (and the metadata watch that applies it) waits for a deleted partition's
#: remote segments to be deleted before it goes on and leaves the deletion running
TOPIC_DELETION_WAIT_S = 5.0
#: the per-partition background tasks (DELETE: KIP-950's deletion when tiering is turned off)
COPY, EXPIRE, DELETE = "copy", "expiration", "deletion"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclasses.dataclass
class RemoteLogMetrics:
    """Kafka's remote storage meters (BrokerTopicMetrics Remote*), broker-wide totals."""

    copy_segments: int = 0
    copy_bytes: int = 0
    copy_failures: int = 0
    fetch_requests: int = 0
    fetch_bytes: int = 0
    fetch_failures: int = 0
    delete_segments: int = 0
    delete_failures: int = 0
    #: remote reads given up after remote.fetch.max.wait.ms (Kafka's DelayedRemoteFetch expirations)
    fetch_expired: int = 0
    #: remote reads refused with every reader busy and remote.log.reader.max.pending.tasks waiting
    fetch_rejected: int = 0
    #: intervals that found a partition's task of that kind still running (a hung remote call)
    tasks_skipped: int = 0
    #: copies that waited for the copy quota (KIP-956), and how long in all (ms)
    copy_throttles: int = 0
    copy_throttle_ms: int = 0
    #: fetches answered without their remote read as the fetch quota was exceeded (KIP-956)
    fetch_throttles: int = 0


@dataclasses.dataclass(eq=False)
class _PartitionTask:
    """One partition's running copy or expiration task: cancelled when the partition is no
    longer led here (copies) or hosted, or tiered; waited for by :meth:`RemoteLogManager.run_once`."""

    partition: Partition
    scope: trio.CancelScope
    done: trio.Event


class RemoteLogManager:
    """Copies, expires and reads one broker's tiered partitions (see the module docstring)."""

    def __init__(
        self,
        broker_id: int,
        replica_manager: ReplicaManager,
        storage: RemoteStorageManager,
        metadata: RemoteLogMetadataManager,
        *,
        interval_ms: int = 30_000,
        reader_threads: int = 10,
        reader_max_pending_tasks: int = 100,
        fetch_max_wait_ms: int = 500,
        copier_threads: int = 10,
        expiration_threads: int = 10,
        copy_quota: RemoteQuota | None = None,
        fetch_quota: RemoteQuota | None = None,
        list_offsets_timeout_ms: int = 30_000,
        clock_ms: Callable[[], int] = _now_ms,
    ) -> None:
        self.broker_id = broker_id
        self.replica_manager = replica_manager
        self.storage = storage
        self.metadata = metadata
        self.interval_ms = interval_ms
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.list_offsets_timeout_ms = list_offsets_timeout_ms
        self.clock_ms = clock_ms
        self.metrics = RemoteLogMetrics()
        #: KIP-956: the bytes per second copied to, and read from, remote storage
        self.copy_quota = copy_quota if copy_quota is not None else RemoteQuota()
        self.fetch_quota = fetch_quota if fetch_quota is not None else RemoteQuota()
        #: set (and replaced) when a quota changes, so copies waiting for the copy quota look again
        self._quotas_changed = trio.Event()
        #: the worker threads of copies, and of listings and deletions (expiration, followers)
        expiration = trio.CapacityLimiter(expiration_threads)
        self._limiters = {COPY: trio.CapacityLimiter(copier_threads), EXPIRE: expiration, DELETE: expiration}
        #: remote reads for fetches at once (remote.log.reader.threads), and how many more may wait
        self._readers = trio.CapacityLimiter(reader_threads)
        self._reads_allowed = reader_threads + reader_max_pending_tasks
        self._reads_in_flight = 0
        #: background calls and reads, each counting the calls abandoned while hung
        self.calls = RemoteCalls()
        self.read_calls = RemoteCalls()
        #: offset indexes of remote segments by segment id, read from worker threads (LRU-less:
        #: the oldest entry goes first); guarded by a lock as the reader threads share it
        self._indexes: dict[str, bytes] = {}
        self._indexes_lock = threading.Lock()
        self.failures = StorageFailureLog(log, "remote storage", clock=trio.current_time)
        #: per partition, the kinds of task whose last run failed: it is failing until both work
        self._failing_tasks: dict[TopicPartition, set[str]] = {}
        self._warned_untierable: set[TopicPartition] = set()
        #: the remote log start offsets last recorded beside each log (-1: none)
        self._persisted_starts: dict[TopicPartition, int] = {}
        #: topic ids read from the logs (partition object, id), so each is read once
        self._topic_ids: dict[TopicPartition, tuple[Partition, str]] = {}
        #: the running per-partition tasks by (partition, COPY, EXPIRE or DELETE)
        self._running: dict[tuple[TopicPartition, str], _PartitionTask] = {}
        #: partitions led here whose remote segments were deleted since tiering was turned off
        self._remote_deleted: dict[TopicPartition, Partition] = {}
        self._woken = trio.Event()
        #: the nursery of :meth:`run` while it runs (a deleted topic's remote deletion goes there)
        self._nursery: trio.Nursery | None = None

    # -- background --------------------------------------------------------------------------
    async def run(self) -> None:
        """Start each tiered partition's tasks every interval, and at once when :meth:`wake` is
        called (a partition became leader or follower here), until cancelled; the tasks run in
        this task's nursery, so a cancel (shutdown) ends them all without waiting on a hung call."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                while True:
                    self._woken = trio.Event()
                    self._schedule(nursery)
                    with trio.move_on_after(self.interval_ms / 1000):
                        await self._woken.wait()
        finally:
            self._nursery = None

    def wake(self) -> None:
        """Visit soon: a tiered partition was taken on here and has no remote view yet (its
        consumers' reads below the local log need one, and ListOffsets' earliest answer), or
        one led here is no longer (its copy task stops)."""
        self._woken.set()

    def apply_quotas(self, copy_bytes_per_second: int, fetch_bytes_per_second: int) -> None:
        """The copy and fetch quotas in force (at start and on each dynamic change); copies
        waiting for the copy quota look again at once."""
        self.copy_quota.update_quota(copy_bytes_per_second)
        self.fetch_quota.update_quota(fetch_bytes_per_second)
        self._quotas_changed.set()
        self._quotas_changed = trio.Event()

    async def _wait_for_copy_quota(self, tp: TopicPartition) -> None:
        """KIP-956: while the bytes copied by every partition are over the copy quota, wait the
        throttle time (or until the quota changes), then look again."""
        while (wait_ms := self.copy_quota.throttle_time_ms()) > 0:
            self.metrics.copy_throttles += 1
            self.metrics.copy_throttle_ms += wait_ms
            log.debug("%s: copies over remote.log.manager.copy.max.bytes.per.second; waiting %d ms", tp, wait_ms)
            changed = self._quotas_changed
            with trio.move_on_after(wait_ms / 1000):
                await changed.wait()

    def stop_tasks(self, tp: TopicPartition, *, led_only: bool) -> None:
        """Cancel ``tp``'s tasks as leader (copying, deleting: it is no longer led here), or all
        its tasks (no longer hosted here), without waiting: a hung remote call's thread is
        abandoned."""
        kinds = (COPY, DELETE) if led_only else (COPY, EXPIRE, DELETE)
        for kind in kinds:
            task = self._running.get((tp, kind))
            if task is not None:
                task.scope.cancel()
        self._forget_failures(tp, kinds)

    def config_changed(self, partition: Partition) -> None:
        """The partition's topic configs changed: what local retention may delete follows at once
        (a topic no longer tiered, or no longer copying, takes the whole log's limits before the
        next interval could say so, and deletes no copied segment meanwhile), a topic no longer
        tiered stops copying and expiring, and the next visit comes soon (KIP-950's deletion)."""
        if not partition.config.remote_storage_enable:
            _set_copied_end(partition, None)
            for kind in (COPY, EXPIRE):
                task = self._running.get((partition.topic_partition, kind))
                if task is not None:
                    task.scope.cancel()
            self._forget_failures(partition.topic_partition, (COPY, EXPIRE))
        elif partition.remote is not None:
            _set_copied_end(partition, self._copied_end(partition))
        self.wake()

    async def run_once(self) -> None:
        """One visit of every tiered partition hosted here: the copy tasks, then the expiration
        tasks (which refresh every partition's view), returning when they have run (each one
        still running from the background too)."""
        for kinds in ((COPY,), (EXPIRE,)):
            async with trio.open_nursery() as nursery:
                tasks = self._schedule(nursery, kinds)
            for task in tasks:
                await task.done.wait()

    async def refresh_all(self, timeout_s: float) -> None:
        """List every hosted tiered partition's remote segments, each at once, for at most
        ``timeout_s`` (a broker's start: a remote storage that hangs delays it no longer; a
        partition not listed is listed by its first remote read or the next interval)."""
        with trio.move_on_after(timeout_s) as scope:
            async with trio.open_nursery() as nursery:
                for partition in list(self.replica_manager.partitions.values()):
                    if partition.config.remote_storage_enable:
                        nursery.start_soon(self._refresh_quietly, partition)
        if scope.cancelled_caught:
            log.warning("the remote segments of some tiered partitions were not listed in %.0f s", timeout_s)

    async def _refresh_quietly(self, partition: Partition) -> None:
        with contextlib.suppress(KafkaError, OSError):  # the tasks report failures
            self._apply(partition, await self._list(partition, EXPIRE))

    def _schedule(self, nursery: trio.Nursery, kinds: tuple[str, ...] = (EXPIRE, COPY)) -> list[_PartitionTask]:
        """Stop the tasks that must not go on, and start every hosted tiered partition's copy
        (as leader) and expiration task that is not still running; the tasks of the visited
        partitions, new or still running."""
        hosted = self.replica_manager.partitions
        for (tp, kind), task in list(self._running.items()):
            partition = hosted.get(tp)
            if partition is not task.partition or _must_stop(kind, partition):
                task.scope.cancel()
        tasks: list[_PartitionTask] = []
        for tp, partition in list(hosted.items()):
            if not partition.config.remote_storage_enable:
                if self._tiering_off(partition):
                    kinds_here: tuple[str, ...] = (DELETE,)
                else:
                    continue
            else:
                self._remote_deleted.pop(tp, None)
                kinds_here = kinds
            for kind in kinds_here:
                if kind == COPY and not partition.is_leader:
                    continue
                running = self._running.get((tp, kind))
                if running is not None:
                    self.metrics.tasks_skipped += 1
                    log.debug("%s: its %s task is still running; not started again", tp, kind)
                    tasks.append(running)
                    continue
                task = _PartitionTask(partition, trio.CancelScope(), trio.Event())
                self._running[(tp, kind)] = task
                nursery.start_soon(self._run_task, task, kind)
                tasks.append(task)
        return tasks

    async def _run_task(self, task: _PartitionTask, kind: str) -> None:
        partition = task.partition
        tp = partition.topic_partition
        try:
            with task.scope:
                try:
                    if kind == COPY:
                        await self._copy_task(partition)
                    elif kind == DELETE:
                        await self._delete_remote_log(partition)
                    else:
                        await self.sync_partition(partition)
                except (KafkaError, OSError) as exc:  # remote storage, or the local log (a full disk)
                    if self.replica_manager.partitions.get(tp) is partition:  # else: nothing to retry
                        self._task_failed(tp, kind, exc)
                except Exception as exc:  # a bug must not stop tiering of every other partition
                    log.exception("%s: remote log manager %s task failed", tp, kind)
                    self._task_failed(tp, kind, exc)
                else:
                    self._task_succeeded(tp, kind)
        finally:
            if self._running.get((tp, kind)) is task:
                del self._running[(tp, kind)]
            task.done.set()

    def _task_failed(self, tp: TopicPartition, kind: str, exc: BaseException) -> None:
        self._failing_tasks.setdefault(tp, set()).add(kind)
        self.failures.failed(str(tp), exc)

    def _forget_failures(self, tp: TopicPartition, kinds: tuple[str, ...]) -> None:
        """``tp``'s tasks of ``kinds`` will not run here any more (it moved away, or is no
        longer led or tiered): their failures no longer count it as failing
        (``remotestoragefailingpartitions``), nor does a later success log that it works again."""
        failing = self._failing_tasks.get(tp)
        if failing is None:
            return
        failing.difference_update(kinds)
        if not failing:
            del self._failing_tasks[tp]
            self.failures.forget(str(tp))

    def _task_succeeded(self, tp: TopicPartition, kind: str) -> None:
        failing = self._failing_tasks.get(tp)
        if failing is not None:
            failing.discard(kind)
            if failing:
                return
            del self._failing_tasks[tp]
        self.failures.succeeded(str(tp))

    def _tiering_off(self, partition: Partition) -> bool:
        """A hosted partition whose topic is not tiered (any more): local retention takes the
        whole log's limits again and the remote view goes; whether its remote segments are to
        be deleted here (KIP-950: it leads, ``remote.log.delete.on.disable`` is set and they were
        not deleted since)."""
        tp = partition.topic_partition
        deleting = bool(partition.config.get("remote.log.delete.on.disable", False))
        if not (deleting and partition.is_leader):
            if partition.remote is not None:
                partition.remote = None
                _set_copied_end(partition, None)
            return False
        _set_copied_end(partition, None)
        return self._remote_deleted.get(tp) is not partition

    async def _delete_remote_log(self, partition: Partition) -> None:
        """KIP-950: ``remote.storage.enable`` was turned off with ``remote.log.delete.on.disable``:
        the leader deletes every remote segment of the partition (each replica then drops its
        view), and the log starts at the local log start. A failure is retried at the next
        interval; a restart lists the partition again to find out."""
        tp = partition.topic_partition
        listed = await self._list(partition, DELETE)
        for metadata in listed:
            await self._forget(metadata, DELETE, count=False)
        if self._stored_start(partition) != -1:
            await trio.to_thread.run_sync(partition.log.write_state, REMOTE_LOG_START_STATE, b"-1")
            self._persisted_starts[tp] = -1
        partition.remote = None
        self._remote_deleted[tp] = partition
        if listed:
            log.info("%s: tiered storage turned off: deleted its %d remote segments; the log starts at %d", tp,
                     len(listed), partition.log_start_offset)  # fmt: skip

    async def _call(self, kind: str, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        """A remote storage call of a ``kind`` task in a worker thread of its pool (abandoned on
        a cancel); ``what`` names it in the log."""
        return await self.calls.run(self._limiters[kind], f"{fn.__name__} of {what}", fn, *args)

    async def sync_partition(self, partition: Partition) -> None:
        """Refresh the partition's remote view; as leader, expire (the expiration task)."""
        listed = await self._list(partition, EXPIRE)
        self._apply(partition, listed)
        await self._persist_start(partition)
        if partition.is_leader:
            await self._expire(partition, listed)

    async def _copy_task(self, partition: Partition) -> None:
        """As leader, copy what is not yet copied (the copy task): from the view the expiration
        task keeps, listed here first when there is none yet."""
        if partition.remote is None:
            self._apply(partition, await self._list(partition, COPY))
            await self._persist_start(partition)
        await self._copy(partition)

    def _topic_id(self, partition: Partition) -> str:
        """The partition's topic id as its log records it ("" when it records none)."""
        cached = self._topic_ids.get(partition.topic_partition)
        if cached is not None and cached[0] is partition:
            return cached[1]
        try:
            stored = partition.log.read_state(TOPIC_ID_STATE)
        except (OSError, KafkaError):
            stored = None
        topic_id = (parse_topic_id(stored) if stored is not None else None) or ""
        if topic_id:
            self._topic_ids[partition.topic_partition] = (partition, topic_id)
        return topic_id

    async def _list(self, partition: Partition, kind: str) -> list[RemoteLogSegmentMetadata]:
        """The partition's remote segments in any state (an earlier topic's too: :meth:`_foreign`)."""
        tp = partition.topic_partition
        listed: list[RemoteLogSegmentMetadata] = await self._call(
            kind, str(tp), self.metadata.list_remote_log_segments, tp
        )
        return listed

    def _foreign(self, partition: Partition, metadata: RemoteLogSegmentMetadata) -> bool:
        """Whether ``metadata`` is a segment of an earlier topic of this name (another topic id)."""
        topic_id = self._topic_id(partition)
        return bool(topic_id and metadata.topic_id and metadata.topic_id != topic_id)

    def _apply(self, partition: Partition, listed: list[RemoteLogSegmentMetadata]) -> None:
        finished = tuple(
            m for m in listed if m.state is RemoteSegmentState.COPY_SEGMENT_FINISHED and not self._foreign(partition, m)
        )
        old = partition.remote
        start = finished[0].start_offset if finished else -1
        floor = old.log_start_offset if old is not None else self._stored_start(partition)
        if finished and floor > start:
            start = floor  # DeleteRecords moved it into a remote segment
        partition.remote = RemoteLogView(finished, start)
        _set_copied_end(partition, self._copied_end(partition))

    def _stored_start(self, partition: Partition) -> int:
        """The log start offset DeleteRecords put inside a remote segment, as the partition's
        log last recorded it (:meth:`_persist_start`); -1 for none."""
        try:
            stored = partition.log.read_state(REMOTE_LOG_START_STATE)
            value = int(stored) if stored is not None else -1
        except (OSError, KafkaError, ValueError):
            value = -1
        self._persisted_starts[partition.topic_partition] = value
        return value

    async def _persist_start(self, partition: Partition) -> None:
        """Record the remote log start offset beside the log when DeleteRecords (here, or on the
        leader, learnt from its fetch responses) moved it inside a remote segment, so a restart
        does not bring those records back."""
        view = partition.remote
        if view is None or not view.segments:
            return
        start = view.log_start_offset if view.log_start_offset > view.segments[0].start_offset else -1
        tp = partition.topic_partition
        if self._persisted_starts.get(tp, -1) == start:
            return
        await trio.to_thread.run_sync(partition.log.write_state, REMOTE_LOG_START_STATE, str(start).encode())
        self._persisted_starts[tp] = start

    @staticmethod
    def _copied_end(partition: Partition) -> int | None:
        """What the log's local retention may delete below: the offset after the highest copied
        one; None with ``remote.log.copy.disable`` (KIP-950: copying stops and retention.ms/bytes
        apply to the local log again, remote segments are still read and expire)."""
        view = partition.remote
        if partition.config.get("remote.log.copy.disable", False) or view is None:
            return None
        return view.highest_copied_offset + 1

    # -- copying -------------------------------------------------------------------------------
    async def _copy(self, partition: Partition) -> None:
        tp = partition.topic_partition
        rolled_segments = getattr(partition.log, "rolled_segments", None)
        if rolled_segments is None:
            if tp not in self._warned_untierable:
                self._warned_untierable.add(tp)
                log.warning("%s: its storage engine offers no rolled segments; it is not tiered", tp)
            return
        if partition.config.get("remote.log.copy.disable", False):
            return
        upto = min(partition.high_watermark, partition.last_stable_offset)
        copied = -1  # what this task copied: a listing applied meanwhile may not show it yet
        for segment in rolled_segments(upto):
            view = partition.remote
            highest = max(view.highest_copied_offset if view is not None else -1, copied)
            if segment.next_offset - 1 <= highest or segment.next_offset <= partition.log_start_offset:
                continue  # copied already, or below the log start (expired, deleted)
            await self._wait_for_copy_quota(tp)
            if not partition.is_leader:
                return
            await self._copy_segment(partition, segment)
            copied = segment.next_offset - 1

    async def _copy_segment(self, partition: Partition, segment: RolledSegment) -> None:
        tp = partition.topic_partition
        epochs = epoch_entries_for(partition.log.epoch_entries(), segment.base_offset, segment.next_offset)
        metadata = RemoteLogSegmentMetadata(
            tp,
            uuid.uuid4().hex,
            segment.base_offset,
            segment.next_offset - 1,
            segment.max_timestamp,
            segment.size,
            epochs,
            self.broker_id,
            self.clock_ms(),
            RemoteSegmentState.COPY_SEGMENT_STARTED,
            self._topic_id(partition),
        )
        data = LogSegmentData(
            segment.log_path,
            segment.offset_index_path,
            segment.time_index_path,
            partition.producer_state.to_bytes(),
            leader_epoch_checkpoint(epochs),
        )
        await self._call(COPY, str(tp), self.metadata.add_remote_log_segment_metadata, metadata)
        try:
            await self._call(COPY, str(tp), self.storage.copy_log_segment_data, metadata, data)
        except Exception:
            self.metrics.copy_failures += 1
            # what the failed copy left goes now if it can, else with the next leader's clean-up
            # (a copy cancelled, hung or not, leaves it to the next copy: see the directory
            # storage's claims; waiting on a hung storage here would hold the cancel up)
            with contextlib.suppress(KafkaError, OSError):
                await self._forget(metadata, COPY, count=False)
            raise
        finished = dataclasses.replace(
            metadata, state=RemoteSegmentState.COPY_SEGMENT_FINISHED, event_timestamp_ms=self.clock_ms()
        )
        if not await self._call(COPY, str(tp), self.metadata.update_remote_log_segment_metadata, finished):
            log.info("%s: segment %d was copied by another broker first; dropping this copy", tp, metadata.start_offset)
            await self._forget(metadata, COPY, count=False)
            return
        self.metrics.copy_segments += 1
        self.metrics.copy_bytes += segment.size
        self.copy_quota.record(segment.size)
        view = partition.remote or RemoteLogView()
        segments = tuple(sorted((*view.segments, finished), key=lambda m: m.start_offset))
        start = view.log_start_offset if view.segments else finished.start_offset
        partition.remote = RemoteLogView(segments, start)
        _set_copied_end(partition, self._copied_end(partition))
        log.info("%s: copied segment [%d, %d] (%d bytes) to remote storage", tp, segment.base_offset,
                 segment.next_offset - 1, segment.size)  # fmt: skip

    # -- remote retention ----------------------------------------------------------------------
    async def _expire(self, partition: Partition, listed: list[RemoteLogSegmentMetadata]) -> None:
        """Delete what remote retention no longer keeps; the whole log's start moves past it
        (the local log's too, as Kafka's RLMExpirationTask moves the log start offset), so a
        segment still kept locally is neither read nor copied again."""
        view = partition.remote
        if view is None:
            return
        expired = self.expired_segments(partition, view)
        highest = view.highest_copied_offset
        doomed = expired + [
            m
            for m in listed
            if (m.state is not RemoteSegmentState.COPY_SEGMENT_FINISHED and m.end_offset <= highest)
            or self._foreign(partition, m)
        ]  # copies that never finished (a broker stopped mid-copy, or lost the race to publish),
        # and an earlier topic's segments
        if not doomed:
            return
        for metadata in doomed:
            await self._forget(metadata, EXPIRE)
        gone = {m.segment_id for m in doomed}
        current = partition.remote or view
        kept = tuple(m for m in current.segments if m.segment_id not in gone)
        start = current.log_start_offset
        if expired:
            start = max(start, max(m.end_offset for m in expired) + 1)
        partition.remote = RemoteLogView(kept, max(start, kept[0].start_offset) if kept else -1)
        if expired and start > partition.log.log_start_offset:
            partition.log.delete_records_before(start)
            partition.producer_state.on_log_start_offset_advanced(partition.log.log_start_offset)
        _set_copied_end(partition, self._copied_end(partition))

    def expired_segments(self, partition: Partition, view: RemoteLogView) -> list[RemoteLogSegmentMetadata]:
        """The oldest remote segments that the log start offset, ``retention.ms`` or
        ``retention.bytes`` (the whole log's size: remote segments plus the local bytes not in
        them) no longer keep, in order, as Kafka's RLMExpirationTask picks them."""
        config = partition.config
        now = self.clock_ms()
        segments = list(view.segments)
        out: list[RemoteLogSegmentMetadata] = []
        while segments and segments[0].end_offset < view.log_start_offset:
            out.append(segments.pop(0))
        if config.delete and config.retention_ms >= 0:
            # a segment without timestamps (-1) is kept, as the whole-log rule cannot date it
            while segments and 0 <= segments[0].max_timestamp_ms < now - config.retention_ms:
                out.append(segments.pop(0))
        if config.delete and config.retention_bytes >= 0:
            copied_end = view.highest_copied_offset + 1
            local_only = partition.log.size_in_bytes - sum(
                s.size for s in getattr(partition.log, "rolled_segments", lambda _u: [])(copied_end)
            )
            total = sum(m.size_in_bytes for m in segments) + max(local_only, 0)
            while segments and total - segments[0].size_in_bytes >= config.retention_bytes:
                total -= segments[0].size_in_bytes
                out.append(segments.pop(0))
        return out

    async def _forget(self, metadata: RemoteLogSegmentMetadata, kind: str, *, count: bool = True) -> None:
        """Delete a segment's data and then its record (a crash between leaves a record whose
        data is gone, deleted again by the next leader)."""
        what = str(metadata.topic_partition)
        try:
            if metadata.state is RemoteSegmentState.COPY_SEGMENT_FINISHED:
                deleting = dataclasses.replace(metadata, state=RemoteSegmentState.DELETE_SEGMENT_STARTED)
                await self._call(kind, what, self.metadata.update_remote_log_segment_metadata, deleting)
            await self._call(kind, what, self.storage.delete_log_segment_data, metadata)
            await self._call(kind, what, self.metadata.remove_remote_log_segment_metadata, metadata)
        except (RemoteStorageError, OSError):
            if count:
                self.metrics.delete_failures += 1
            raise
        with self._indexes_lock:
            self._indexes.pop(metadata.segment_id, None)
        if count:
            self.metrics.delete_segments += 1
            log.info("%s: deleted remote segment [%d, %d]", metadata.topic_partition, metadata.start_offset,
                     metadata.end_offset)  # fmt: skip

    async def delete_partition(self, tp: TopicPartition) -> None:
        """DeleteTopics: delete every remote segment of ``tp`` and its metadata (each replica
        does; deleting what another already deleted succeeds), as a task of :meth:`run`'s
        nursery waited for at most ``TOPIC_DELETION_WAIT_S``: a hanging remote storage must
        hold up neither the request nor the metadata watch that applies it."""
        self._topic_ids.pop(tp, None)
        nursery = self._nursery
        if nursery is None:
            await self._delete_partition(tp)
            return
        done = trio.Event()

        async def delete() -> None:
            try:
                await self._delete_partition(tp)
            except Exception:  # a bug must not stop the remote log manager
                log.exception("%s: deleting the remote segments of the deleted topic failed", tp)
            finally:
                done.set()

        nursery.start_soon(delete)
        with trio.move_on_after(TOPIC_DELETION_WAIT_S):
            await done.wait()
        if not done.is_set():
            log.warning("%s: the deleted topic's remote segments are still being deleted; going on", tp)

    async def _delete_partition(self, tp: TopicPartition) -> None:
        """Delete ``tp``'s remote segments and metadata. A failure is logged: what is left
        belongs to the deleted topic's id, which a new topic of the name never reads."""
        try:
            listed: list[RemoteLogSegmentMetadata] = await self._call(
                EXPIRE, str(tp), self.metadata.list_remote_log_segments, tp
            )
            for metadata in listed:
                await self._call(EXPIRE, str(tp), self.storage.delete_log_segment_data, metadata)
                await self._call(EXPIRE, str(tp), self.metadata.remove_remote_log_segment_metadata, metadata)
        except (RemoteStorageError, OSError) as exc:
            log.error("%s: deleting the remote segments of the deleted topic failed: %s", tp, exc)
            return
        if listed:
            log.info("%s: deleted %d remote segments of the deleted topic", tp, len(listed))

    # -- reads -------------------------------------------------------------------------------
    async def read(
        self, partition: Partition, fetch_offset: int, max_bytes: int, *, min_one_batch: bool
    ) -> RemoteFetchData | None:
        """A consumer's read below the local log start, from remote storage, in a worker thread;
        None when it has not finished within ``remote.fetch.max.wait.ms`` (KIP-1018: the fetch is
        answered without the partition's records, and its thread, if hung, abandoned), and at
        once while the remote fetch quota is exceeded (KIP-956). Refused
        (UNKNOWN_SERVER_ERROR, as Kafka answers a read its full reader queue rejects) while
        every reader thread is busy and ``remote.log.reader.max.pending.tasks`` reads wait."""
        tp = partition.topic_partition
        if self.fetch_quota.is_quota_exceeded():  # KIP-956: answered without records, asked again
            self.metrics.fetch_throttles += 1
            return None
        if self._reads_in_flight + self.read_calls.hung >= self._reads_allowed:
            self.metrics.fetch_rejected += 1
            raise KafkaError(
                f"{tp}: remote read at {fetch_offset} refused: every remote log reader thread is busy and "
                "remote.log.reader.max.pending.tasks reads wait",
                code=ErrorCode.UNKNOWN_SERVER_ERROR,
            )
        self._reads_in_flight += 1
        try:
            with trio.move_on_after(self.fetch_max_wait_ms / 1000) as scope:
                return await self._read(partition, fetch_offset, max_bytes, min_one_batch)
        finally:
            self._reads_in_flight -= 1
            if scope.cancelled_caught:
                self.metrics.fetch_expired += 1
                log.info("%s: remote read at %d not done in remote.fetch.max.wait.ms (%d ms); answered without it",
                         tp, fetch_offset, self.fetch_max_wait_ms)  # fmt: skip
        return None

    async def _known_view(self, partition: Partition) -> RemoteLogView | None:
        """The partition's remote view, listed first (in a reader thread) when the partition was
        taken on here since the last visit."""
        if partition.remote is None:
            tp = partition.topic_partition
            listed = await self.read_calls.run(
                self._readers, f"list_remote_log_segments of {tp}", self.metadata.list_remote_log_segments, tp
            )
            self._apply(partition, listed)
        return partition.remote

    async def _read(
        self, partition: Partition, fetch_offset: int, max_bytes: int, min_one_batch: bool
    ) -> RemoteFetchData:
        tp = partition.topic_partition
        view = await self._known_view(partition)
        metadata = view.segment_for(fetch_offset) if view is not None else None
        if view is None or metadata is None or fetch_offset < view.log_start_offset:
            raise OffsetOutOfRange(f"{tp}: offset {fetch_offset} is not in remote storage")
        self.metrics.fetch_requests += 1
        try:
            found = await self.read_calls.run(
                self._readers, f"a read of {tp} at {fetch_offset}", self._read_sync, metadata, fetch_offset,
                max_bytes, min_one_batch,
            )  # fmt: skip
        except (RemoteStorageError, OSError) as exc:
            self.metrics.fetch_failures += 1
            raise RemoteStorageError(f"{tp}: remote read at {fetch_offset} failed: {exc}") from exc
        self.metrics.fetch_bytes += found.size
        self.fetch_quota.record(found.size)
        return found

    async def offset_for_timestamp(self, partition: Partition, timestamp: int) -> tuple[int, int, int] | None:
        """ListOffsets by time below the local log (Kafka searches remote storage first, in
        UnifiedLog.fetchOffsetByTimestamp): (offset, timestamp, leader epoch) of the first record
        at or after ``timestamp`` in the remote segments that hold offsets below the local log
        start, from the log start; None when the answer is in the local log. Each segment is
        scanned in a reader thread; the search gives up after
        ``remote.list.offsets.request.timeout.ms`` (REQUEST_TIMED_OUT, as Kafka's
        DelayedRemoteListOffsets), and a failing remote storage is KAFKA_STORAGE_ERROR."""
        tp = partition.topic_partition
        with trio.move_on_after(self.list_offsets_timeout_ms / 1000):
            try:
                return await self._offset_for_timestamp(partition, timestamp)
            except (RemoteStorageError, OSError) as exc:
                raise KafkaError(
                    f"{tp}: remote timestamp search failed: {exc}", code=ErrorCode.KAFKA_STORAGE_ERROR
                ) from exc
        raise KafkaError(
            f"{tp}: remote timestamp search not done in remote.list.offsets.request.timeout.ms "
            f"({self.list_offsets_timeout_ms} ms)",
            code=ErrorCode.REQUEST_TIMED_OUT,
        )

    async def _offset_for_timestamp(self, partition: Partition, timestamp: int) -> tuple[int, int, int] | None:
        tp = partition.topic_partition
        view = await self._known_view(partition)
        start, local_start = partition.log_start_offset, partition.local_log_start_offset
        for metadata in view.segments if view is not None else ():
            if metadata.end_offset < start or metadata.start_offset >= local_start:
                continue
            if metadata.max_timestamp_ms < timestamp:
                continue
            found = await self.read_calls.run(
                self._readers, f"a timestamp search of {tp}", self._timestamp_sync, metadata, timestamp, start
            )
            if found is not None:
                offset, record_timestamp = found
                epochs = [e.epoch for e in metadata.leader_epochs if e.start_offset <= offset]
                return offset, record_timestamp, epochs[-1] if epochs else -1
        return None

    def _timestamp_sync(
        self, metadata: RemoteLogSegmentMetadata, timestamp: int, min_offset: int
    ) -> tuple[int, int] | None:
        with self.storage.fetch_log_segment(metadata, 0) as stream:
            return offset_for_timestamp_in(stream, timestamp, min_offset)

    def _read_sync(
        self, metadata: RemoteLogSegmentMetadata, fetch_offset: int, max_bytes: int, min_one_batch: bool
    ) -> RemoteFetchData:
        with self._indexes_lock:
            index = self._indexes.get(metadata.segment_id)
        if index is None:
            index = self.storage.fetch_index(metadata, RemoteIndexType.OFFSET)
            with self._indexes_lock:
                while len(self._indexes) >= INDEX_CACHE_ENTRIES:
                    self._indexes.pop(next(iter(self._indexes)))
                self._indexes[metadata.segment_id] = index
        position = offset_index_position(index, metadata.start_offset, max(fetch_offset, metadata.start_offset))
        with self.storage.fetch_log_segment(metadata, position) as stream:
            batches = read_batches(stream, fetch_offset, max_bytes, min_one_batch=min_one_batch)
        return RemoteFetchData(fetch_offset, batches)

    # -- followers -----------------------------------------------------------------------------
    async def follower_restart_offset(self, partition: Partition) -> int | None:
        """Where a follower whose fetch offset the leader answered OFFSET_MOVED_TO_TIERED_STORAGE
        restarts its log: after the highest offset remote storage holds, which the leader still
        has locally (it deletes only what is copied, and records the copy first). None when
        remote storage holds nothing for it."""
        with trio.move_on_after(FOLLOWER_REMOTE_TIMEOUT_S):
            self._apply(partition, await self._list(partition, EXPIRE))
        view = partition.remote
        if view is None or not view.segments:
            return None
        return view.highest_copied_offset + 1

    async def follower_restart_state(self, partition: Partition, offset: int) -> tuple[EpochEntry | None, bytes | None]:
        """What a follower that restarted its log at ``offset`` takes from the remote segment
        ending just below it (Kafka's buildRemoteLogAuxState): the leader epoch in force there
        and the producer-state snapshot copied with it (None when it has none)."""
        view = partition.remote
        last = view.segment_for(offset - 1) if view is not None else None
        if last is None or last.end_offset != offset - 1:
            return None, None
        before = [e for e in last.leader_epochs if e.start_offset < offset]
        epoch = EpochEntry(before[-1].epoch, offset) if before else None
        try:
            with trio.fail_after(FOLLOWER_REMOTE_TIMEOUT_S):
                snapshot: bytes = await self._call(
                    EXPIRE, str(partition.topic_partition), self.storage.fetch_index, last,
                    RemoteIndexType.PRODUCER_SNAPSHOT,
                )  # fmt: skip
        except (RemoteStorageError, OSError, trio.TooSlowError) as exc:
            log.warning("%s: no producer snapshot in remote storage for offset %d: %s", partition.topic_partition,
                        offset, exc)  # fmt: skip
            return epoch, None
        return epoch, snapshot


def _must_stop(kind: str, partition: Partition) -> bool:
    """Whether a running task of ``kind`` must stop: a copy once the partition is no longer led
    here, copies and expiration once its topic is not tiered, a deletion once it is again."""
    tiered = partition.config.remote_storage_enable
    if kind == DELETE:
        return tiered or not partition.is_leader
    return not tiered or (kind == COPY and not partition.is_leader)


def _set_copied_end(partition: Partition, end: int | None) -> None:
    """Tell the log what remote storage holds (local retention stays above it); an engine
    without the attribute keeps every segment locally."""
    try:
        partition.log.remote_copied_end = end  # type: ignore[attr-defined]
    except AttributeError:
        pass
