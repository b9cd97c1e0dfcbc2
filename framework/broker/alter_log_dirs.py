"""Moving a replica between the log dirs of one broker (KIP-113, AlterReplicaLogDirs).

Kafka's ``ReplicaManager.alterReplicaLogDirs`` and ``ReplicaAlterLogDirsThread``: a request
names, per partition, the log dir it should live in. The storage creates a *future* log there
(``LogStorage.create_future_log``), and one background task per broker (:meth:`
ReplicaAlterLogDirsManager.run`, in the broker's nursery) copies the current log's batches into it
from the log start -- Kafka fetches from the local replica; this reads through the storage
interface (``PartitionLog.read``, at most :data:`COPY_CHUNK_BYTES` at a time) and appends as a
follower does, so offsets and leader epochs are kept. Appends go on meanwhile; the copy follows
them, and follows truncations and log-start moves of the current log (:func:`reconcile`: the
follower's truncation by leader epoch, against the local log). Once caught up the future log is
fsynced, then the last few batches are copied and the storage swaps the logs
(``replace_current_with_future_log``) in one synchronous step on the trio thread, so no append can
come in between: none is lost or duplicated. The partition keeps its producer state and high
watermark (they are the broker's, not the log's).

A move within a broker changes no assignment: Metadata and the controller never hear of it.
Engines without log-dir moves (no ``create_future_log``) answer every request for another dir
with LOG_DIR_NOT_FOUND or KAFKA_STORAGE_ERROR, as the paths say.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

import trio

from odradek import records
from odradek.errors import ErrorCode, KafkaError
from odradek.interfaces import (
    LogDirDescription,
    LogDirMoves,
    LogStorage,
    PartitionLog,
    TopicPartition,
    described_log_dirs,
)

from .replica_manager import ReplicaManager
from .replication_quota import ALTER_LOG_DIRS, ReplicationQuotaManager

log = logging.getLogger(__name__)

#: the most bytes one copy step reads and appends (Kafka's replica.fetch.max.bytes default)
COPY_CHUNK_BYTES = 1 << 20
#: how long the copier waits before trying again a partition it cannot copy yet (after a start,
#: before the metadata created the partition it has a future log of)
RETRY_S = 0.5
#: how long the copy waits before it checks again a quota it was over
THROTTLE_WAIT_S = 0.1


def reconcile(current: PartitionLog, future: PartitionLog) -> None:
    """Make ``future`` a prefix of ``current`` again: cut what the current log no longer has
    (a follower's truncation, by leader epoch as Kafka's fetchers do) and move its log start
    with the current one's (retention, DeleteRecords)."""
    if future.log_end_offset > current.log_end_offset:
        future.truncate_to(max(current.log_end_offset, future.log_start_offset))
    entries = future.epoch_entries()
    if entries:
        last = entries[-1].epoch
        epoch, end = current.end_offset_for_epoch(last)
        if epoch < 0:
            future.truncate_fully_and_start_at(current.log_start_offset)
        elif epoch != last or end < future.log_end_offset:
            future.truncate_to(max(min(end, future.log_end_offset), future.log_start_offset))
    start = current.log_start_offset
    empty = future.log_end_offset == future.log_start_offset
    if start > future.log_end_offset or (empty and start != future.log_start_offset):
        future.truncate_fully_and_start_at(start)
    elif start > future.log_start_offset:
        future.delete_records_before(start)


def copy_step(current: PartitionLog, future: PartitionLog, max_bytes: int = COPY_CHUNK_BYTES) -> int:
    """Copy the next batches (about ``max_bytes``) from ``current`` to ``future``; returns the
    bytes copied, 0 once ``future`` holds everything ``current`` does. Synchronous."""
    reconcile(current, future)
    if future.log_end_offset >= current.log_end_offset:
        return 0
    info = current.read(future.log_end_offset, max_bytes, min_one_batch=True)
    try:
        data = info.to_bytes()
    finally:
        info.release()
    if not data:
        return 0
    batches = records.validate_batches(data, exact_counts=False)
    first = records.parse_header(data, batches[0].position).base_offset
    start = future.log_start_offset
    if first < future.log_end_offset:
        # the current log's first batch begins below its log start: the empty future log starts
        # at that batch, then at the log start (its log start offset, as the current's)
        future.truncate_fully_and_start_at(first)
        future.append_as_follower(data, batches)
        future.delete_records_before(start)
    else:
        future.append_as_follower(data, batches)
    return len(data)


def catch_up(current: PartitionLog, future: PartitionLog) -> None:
    """Copy until ``future`` holds what ``current`` does, with its leader-epoch entries (a
    leader's epoch starts at its log end before any batch of it is written). Synchronous."""
    while copy_step(current, future):
        pass
    known = future.epoch_entries()
    latest = known[-1].epoch if known else -1
    for entry in current.epoch_entries():
        if entry.epoch > latest:
            future.assign_epoch_start_offset(entry.epoch, entry.start_offset)


class ReplicaAlterLogDirsManager:
    """AlterReplicaLogDirs and the copy task (Kafka's ``ReplicaAlterLogDirsManager``)."""

    def __init__(
        self,
        replica_manager: ReplicaManager,
        storage: LogStorage,
        *,
        chunk_bytes: int = COPY_CHUNK_BYTES,
        quota: ReplicationQuotaManager | None = None,
    ) -> None:
        self.replica_manager = replica_manager
        self.storage = storage
        #: the storage, when its engine can move logs between dirs (None: it cannot)
        self.moves: LogDirMoves | None = storage if isinstance(storage, LogDirMoves) else None
        self.chunk_bytes = chunk_bytes
        #: replica.alter.log.dirs.io.max.bytes.per.second: the copy waits while its rate is over
        #: it (the last few batches copied at the swap are not held back)
        self.quota = quota if quota is not None else ReplicationQuotaManager(ALTER_LOG_DIRS, -1, lambda _t, _k: ("*",))
        self._wake = trio.Event()
        #: moves that failed (partition -> why), for operators and tests; a new request clears it
        self.failed: dict[TopicPartition, str] = {}

    async def alter_replica_log_dirs(self, wanted: Mapping[TopicPartition, str]) -> dict[TopicPartition, ErrorCode]:
        """Kafka's ``alterReplicaLogDirs``: per partition, NONE once its move to the dir asked is
        under way (or it is there already); LOG_DIR_NOT_FOUND for a path that is not one of
        ``log.dirs``; KAFKA_STORAGE_ERROR for an offline dir or partition; REPLICA_NOT_AVAILABLE
        for a partition of the cluster this broker does not host yet (its log is created in
        that dir when it comes), UNKNOWN_TOPIC_OR_PARTITION for one the cluster does not have."""
        dirs = await described_log_dirs(self.storage) or []
        by_path = {d.path: d for d in dirs}
        where = {tp: d.path for d in dirs for tp in d.partitions}
        results: dict[TopicPartition, ErrorCode] = {}
        for tp, path in wanted.items():
            try:
                results[tp] = await self._alter_one(tp, _absolute(path), by_path, where)
            except KafkaError as exc:
                log.info("AlterReplicaLogDirs %s -> %s: %s", tp, path, exc)
                results[tp] = exc.code
        self._wake.set()
        return results

    async def _alter_one(
        self,
        tp: TopicPartition,
        path: str,
        by_path: Mapping[str, LogDirDescription],
        where: Mapping[TopicPartition, str],
    ) -> ErrorCode:
        described = by_path.get(path)
        if described is None:
            return ErrorCode.LOG_DIR_NOT_FOUND
        if described.error is not None or tp in self.replica_manager.offline_partitions:
            return ErrorCode.KAFKA_STORAGE_ERROR
        self.failed.pop(tp, None)
        partition = self.replica_manager.get_partition(tp)
        if partition is None:
            if not self.replica_manager.partition_known(tp):
                return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            if self.moves is not None:
                self.moves.prefer_log_dir(tp, path)
            return ErrorCode.REPLICA_NOT_AVAILABLE
        if where.get(tp) == path:
            if self.moves is not None:  # back to where it is: a move under way is called off
                await self.moves.delete_future_log(tp)
            return ErrorCode.NONE
        if self.moves is None:
            return ErrorCode.KAFKA_STORAGE_ERROR
        try:
            self.moves.create_future_log(tp, path)  # the one there already when it is moving there
        except ValueError:  # moving to another dir: the new destination replaces it
            await self.moves.delete_future_log(tp)
            self.moves.create_future_log(tp, path)
        return ErrorCode.NONE

    async def run(self) -> None:
        """Copy every move under way, a chunk of each in turn, until cancelled."""
        if self.moves is None:
            return
        while True:
            moving = dict(self.moves.all_future_logs())
            if not moving:
                await self._wake.wait()
                self._wake = trio.Event()
                continue
            if self.quota.is_quota_exceeded():
                self.quota.held_back += 1
                await trio.sleep(THROTTLE_WAIT_S)
                continue
            progressed = False
            for tp, future in moving.items():
                progressed |= await self._step(tp, future)
                await trio.lowlevel.checkpoint()
            if not progressed:
                with trio.move_on_after(RETRY_S):
                    await self._wake.wait()
                if self._wake.is_set():
                    self._wake = trio.Event()

    async def _step(self, tp: TopicPartition, future: PartitionLog) -> bool:
        """One chunk of ``tp``'s copy, or its swap once caught up; whether anything happened."""
        assert self.moves is not None
        partition = self.replica_manager.get_partition(tp)
        if partition is None or self.storage.get_log(tp) is not partition.log:
            if self.storage.get_log(tp) is None:  # the partition's log went: nothing to copy from
                await self._abandon(tp, future, "the partition's log is gone")
            return False
        try:
            copied = copy_step(partition.log, future, self.chunk_bytes)
            if copied:
                if self.quota.enabled:
                    self.quota.record(copied)
                return True
            await future.flush()  # what the copy wrote, outside the swap's synchronous step
            if self.moves.get_future_log(tp) is not future or partition.log is not self.storage.get_log(tp):
                return True  # called off or changed meanwhile: the next round sees it
            # from here to the swap nothing awaits: no append can come in between
            catch_up(partition.log, future)
            partition.log = self.moves.replace_current_with_future_log(tp)
        except (KafkaError, OSError, ValueError) as exc:
            await self._abandon(tp, future, str(exc))
            if isinstance(exc, OSError) or (isinstance(exc, KafkaError) and exc.code is ErrorCode.KAFKA_STORAGE_ERROR):
                # as Kafka's LogDirFailureChannel: a dir that failed under the copy goes offline
                await self.replica_manager.check_log_dirs()
            return True
        return True

    async def _abandon(self, tp: TopicPartition, future: PartitionLog, why: str) -> None:
        """A move that cannot go on: the future log goes, the current log stays as it was."""
        log.error("%s: the move of its replica failed and is abandoned: %s", tp, why)
        self.failed[tp] = why
        if self.moves is not None and self.moves.get_future_log(tp) is future:
            try:
                await self.moves.delete_future_log(tp)
            except (KafkaError, OSError) as exc:
                log.error("%s: removing its future log failed: %s", tp, exc)


def _absolute(path: str) -> str:
    """A requested path as an absolute, normalized one (Kafka's ``getAbsolutePath``), without
    asking the file system: DescribeLogDirs reports the dirs so."""
    return os.path.normpath(os.path.abspath(path)) if path else path


__all__ = ["COPY_CHUNK_BYTES", "ReplicaAlterLogDirsManager", "catch_up", "copy_step", "reconcile"]
