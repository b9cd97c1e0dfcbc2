"""The append and read paths over this broker's partitions (Kafka's ``ReplicaManager``).

Produce: for each partition, validate the payload from batch headers
(:mod:`~odradek.broker.log_validator`), append as leader (:class:`~odradek.broker.partition.
Partition` checks producer sequences and lets the log assign offsets), wake the purgatories
watching the partition, then answer at once (acks 0/1) or park a
:class:`~odradek.broker.delayed.DelayedProduce` until the high watermark passes the batches
(acks=all). Fetch: read each partition up to its high watermark (or last stable offset), at least
one whole batch from the first partition with data and at most ``max_bytes`` overall; if fewer than
``min_bytes`` are readable, park a :class:`~odradek.broker.delayed.DelayedFetch` that every append
to one of its partitions re-evaluates. Reads are file ranges the transport sends with sendfile.

It also owns the partition registry (the metadata layer calls :meth:`ReplicaManager.
become_leader` / :meth:`become_follower` / :meth:`remove_partition`), the high-watermark
checkpoint (``replication-offset-checkpoint``) and producer-state snapshots.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING

import trio

from ..config import TopicConfig
from ..errors import ErrorCode, KafkaError, OffsetMovedToTieredStorage, UnknownTopicOrPartition
from ..interfaces import Codec, LogDirDescription, LogDirMoves, LogStorage, TopicPartition
from ..metrics import BrokerMetrics
from ..replica_selector import ClientMetadata, ReplicaSelector
from .api import (
    CONSUMER_REPLICA_ID,
    DEBUGGING_REPLICA_ID,
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    AbortedTransaction,
    ActiveProducer,
    DeleteRecordsResult,
    EpochEndOffset,
    FetchPartition,
    FetchPartitionResult,
    IsolationLevel,
    ListOffsetsPartition,
    ListOffsetsPartitionResult,
    LogDirPartition,
    LogDirResult,
    OffsetForLeaderEpochPartition,
    PartitionProduceResult,
)
from .delayed import DelayedDeleteRecords, DelayedFetch, DelayedProduce, release_all
from .log_validator import DEFAULT_MAX_DECOMPRESSED_BYTES, validate_records
from .partition import Partition, ReadResult
from .preferred_replica import HERE, preferred_read_replica
from .producer_state import SNAPSHOT_NAME, AppendOrigin
from .purgatory import DelayedOperationPurgatory
from .replication_quota import ReplicationQuotaManager
from .storage_failures import StorageFailureLog, one_line

if TYPE_CHECKING:
    from .remote_log_manager import RemoteLogManager

log = logging.getLogger(__name__)

HW_CHECKPOINT = "replication-offset-checkpoint"
#: Kafka's replica.high.watermark.checkpoint.interval.ms default.
HW_CHECKPOINT_INTERVAL_MS = 5000
#: Kafka's producer.id.expiration.check.interval.ms default.
PRODUCER_EXPIRATION_CHECK_INTERVAL_MS = 600_000
VALID_ACKS = (-1, 0, 1)
#: The event-loop time a Produce's partitions may take before the request lets others run
PRODUCE_SLICE_S = 0.01
#: The clock that slices it (a module attribute, so a test can drive it)
_slice_clock = time.monotonic
#: transaction-verification answers meaning "the coordinator cannot tell yet": Kafka's produce
#: path returns them as NOT_ENOUGH_REPLICAS, retriable for every client version
_COORDINATOR_NOT_READY = frozenset(
    {
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.CONCURRENT_TRANSACTIONS,
    }
)

#: a remote read's errors answered as they are (a deleted offset; a read refused with every
#: reader busy, as Kafka answers its reader pool's rejection); any other is KAFKA_STORAGE_ERROR
_REMOTE_READ_ERRORS = frozenset({ErrorCode.OFFSET_OUT_OF_RANGE, ErrorCode.UNKNOWN_SERVER_ERROR})


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _nothing() -> None:
    pass


def _nothing_for(tp: TopicPartition) -> None:
    pass


async def _no_dir_failed() -> bool:
    return False


def log_dir_of(partition: Partition) -> str:
    """The log dir holding ``partition`` (the parent of the segment engine's partition
    directory), for messages; another storage plugin is named as "the log storage"."""
    directory = getattr(partition.log, "dir", None)
    return str(directory.parent) if directory is not None else "the log storage"


def _is_storage_error(exc: BaseException) -> bool:
    return isinstance(exc, OSError) or (isinstance(exc, KafkaError) and exc.code is ErrorCode.KAFKA_STORAGE_ERROR)


def _error_of(exc: BaseException) -> ErrorCode:
    if isinstance(exc, KafkaError):
        return exc.code
    return ErrorCode.UNKNOWN_SERVER_ERROR


def _readable_end(read: ReadResult, replica_id: int, isolation_level: IsolationLevel) -> int:
    """The offset a fetch may read up to (exclusive), as :meth:`Partition.read_records` bounds
    it: the log end for a follower or a debugging consumer, else the LSO or the HW."""
    if replica_id >= 0 or replica_id == DEBUGGING_REPLICA_ID:
        return read.log_end_offset
    if isolation_level is IsolationLevel.READ_COMMITTED:
        return read.last_stable_offset
    return read.high_watermark


def _without_records(
    partition: Partition, isolation_level: IsolationLevel, preferred_read_replica: int = -1
) -> FetchPartitionResult:
    """A consumer's partition answered without records for now (a remote read under way, or a
    preferred read replica elsewhere, KIP-392): its offsets, and the empty aborted list a
    read_committed answer carries."""
    return FetchPartitionResult(
        ErrorCode.NONE,
        partition.high_watermark,
        partition.last_stable_offset,
        partition.log_start_offset,
        () if isolation_level is IsolationLevel.READ_COMMITTED else None,
        preferred_read_replica=preferred_read_replica,
    )


def _latest_tiered(partition: Partition) -> ListOffsetsPartitionResult:
    """KIP-1005 (LATEST_TIERED, -5): the highest offset copied to remote storage and its leader
    epoch, as the remote log manager last listed or copied it; offset and epoch -1 when nothing
    is copied or the topic is not tiered. Any ListOffsets version may ask, as Kafka answers it
    whatever the version (its clients ask with v9+). The epoch is the one the segment holding
    the offset recorded when it was copied: the local epoch cache, which Kafka asks, no longer
    covers offsets local retention deleted (Kafka then answers no epoch)."""
    view = partition.remote if partition.config.remote_storage_enable else None
    highest = view.highest_copied_offset if view is not None else -1
    if view is None or highest < 0:
        return ListOffsetsPartitionResult(ErrorCode.NONE, -1, -1, -1)
    segment = view.segment_for(highest)
    epochs = [e.epoch for e in segment.leader_epochs if e.start_offset <= highest] if segment is not None else []
    epoch = epochs[-1] if epochs else _epoch_for_offset(partition, highest)
    return ListOffsetsPartitionResult(ErrorCode.NONE, -1, highest, epoch)


def _epoch_for_offset(partition: Partition, offset: int) -> int:
    """The leader epoch whose range holds ``offset`` (Kafka's ``LeaderEpochFileCache.
    epochForOffset``): the last entry starting at or before it; -1 when none does."""
    epoch = -1
    for entry in partition.log.epoch_entries():
        if entry.start_offset > offset:
            break
        epoch = entry.epoch
    return epoch


class ReplicaManager:
    """Partitions hosted by this broker, with their append, read and wait paths."""

    def __init__(
        self,
        broker_id: int,
        storage: LogStorage,
        codecs: Mapping[int, Codec],
        *,
        producer_id_expiration_ms: int = 86_400_000,
        producer_id_expiration_check_interval_ms: int = PRODUCER_EXPIRATION_CHECK_INTERVAL_MS,
        clock_ms: Callable[[], int] = _now_ms,
        max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
        metrics: BrokerMetrics | None = None,
    ) -> None:
        self.broker_id = broker_id
        #: the broker's counters (records and bytes in and out per topic, failed requests)
        self.metrics = metrics if metrics is not None else BrokerMetrics()
        self.storage = storage
        self.codecs = codecs
        #: message.max.decompressed.bytes: how far a produced batch may inflate
        self.max_decompressed_bytes = max_decompressed_bytes
        self.producer_id_expiration_ms = producer_id_expiration_ms
        #: producer.id.expiration.check.interval.ms: how often idle producer ids are expired
        self.producer_id_expiration_check_interval_ms = producer_id_expiration_check_interval_ms
        self.clock_ms = clock_ms
        self.partitions: dict[TopicPartition, Partition] = {}
        #: whether the cluster has a partition (the metadata cache's, set by the broker core):
        #: one this broker does not host is then NOT_LEADER_OR_FOLLOWER, not unknown
        self.partition_known: Callable[[TopicPartition], bool] = lambda _tp: False
        #: topic -> the partitions of it in :attr:`partitions`, so a topic's re-read finds its
        #: hosted partitions without scanning every partition of the broker (it did, and a
        #: broker with thousands of topics paid that on every topic change)
        self._hosted_by_topic: dict[str, set[int]] = {}
        self.produce_purgatory: DelayedOperationPurgatory[TopicPartition] = DelayedOperationPurgatory("Produce")
        self.fetch_purgatory: DelayedOperationPurgatory[TopicPartition] = DelayedOperationPurgatory("Fetch")
        self.delete_records_purgatory: DelayedOperationPurgatory[TopicPartition] = DelayedOperationPurgatory(
            "DeleteRecords"
        )
        #: KIP-890 verification of client transactional batches: (transactional id, producer id,
        #: epoch, partition) -> NONE if the partition is in that producer's ongoing transaction,
        #: else the error (a coordinator that is not ready yet is answered as retriable).
        #: Set by a transaction coordinator; without one every transactional batch is refused, so
        #: no transaction can be left open forever, stalling the last stable offset.
        self.verify_transaction: Callable[[str | None, int, int, TopicPartition], ErrorCode] | None = None
        #: the leader side's replication quota (KIP-73), set by the broker core: a follower out
        #: of the ISR fetching a throttled partition gets no records while the rate is over it
        self.leader_quota: ReplicationQuotaManager | None = None
        #: replication hooks (set by the replica fetcher manager and the ISR manager): partition
        #: roles changed; a follower of a led partition may rejoin its ISR
        self.on_partitions_changed: Callable[[], None] = _nothing
        self.on_isr_expand_candidate: Callable[[TopicPartition], None] = _nothing_for
        #: an append to a partition failed, in the log dir named (called on the trio thread, on
        #: the hot path): logged here at once, rate-limited, unless the log-dir failure handler
        #: takes it, to log it only once its next check found the dir online (a failed dir's
        #: partitions go offline with one line for the dir)
        self.on_append_failure: Callable[[TopicPartition, str, BaseException], None] = self._log_append_failure
        #: a checkpoint or snapshot failed: wait for a check of the log dirs (the handler's);
        #: whether a dir went offline in it
        self.check_log_dirs: Callable[[], Awaitable[bool]] = _no_dir_failed
        #: partitions whose log dir failed -> that dir: not served until a restart (Kafka's
        #: ``HostedPartition.Offline``)
        self.offline_partitions: dict[TopicPartition, str] = {}
        #: the failed log dirs those are in, and the ones that held no partition (a failed
        #: checkpoint asks whether a dir failed since it started: the partition count alone
        #: missed a dir with no partitions, and logged its checkpoint failure)
        self.offline_log_dirs: set[str] = set()
        self._hw_checkpoint: dict[TopicPartition, int] | None = None
        self._persist_lock = trio.Lock()
        #: per partition, at its last producer-state snapshot: (state changes, map end offset, log bytes)
        self._snapshot_marks: dict[TopicPartition, tuple[int, int, int]] = {}
        #: appends failing per log dir (disk full): one ERROR when they start, INFO when they work
        self.append_failures = StorageFailureLog(log, "appends to partitions", clock=trio.current_time)
        #: the periodic HW checkpoint and producer-state snapshots
        self.persist_failures = StorageFailureLog(
            log, "checkpoints and producer-state snapshots", clock=trio.current_time
        )
        #: tiered storage (KIP-405), set by the broker when remote.log.storage.system.enable is
        #: true: consumers' fetches below a partition's local log start are read through it
        self.remote_log_manager: RemoteLogManager | None = None
        #: KIP-392 (``replica.selector.class``, set by the broker): chooses the replica a consumer
        #: fetching with its client metadata (Fetch v11+) reads from; with one, followers serve
        #: such consumers too. ``rack_of`` and ``broker_alive`` are the metadata cache's (set by
        #: the broker core): a broker's rack, and whether it is registered
        self.replica_selector: ReplicaSelector | None = None
        self.rack_of: Callable[[int], str | None] = lambda _broker_id: None
        self.broker_alive: Callable[[int], bool] = lambda _broker_id: True
        #: a registered broker's epoch (its registration's create revision) or None (set by the
        #: broker core from the metadata cache): a follower's Fetch v15+ naming an older epoch
        #: comes from a process of that broker that has since restarted (KIP-903)
        self.broker_epoch_of: Callable[[int], int | None] = lambda _broker_id: None

    # -- partition registry (driven by the metadata layer) ---------------------------------------
    def get_partition(self, tp: TopicPartition) -> Partition | None:
        return self.partitions.get(tp)

    def _get_or_create_partition(self, tp: TopicPartition, config: TopicConfig) -> Partition:
        partition = self.partitions.get(tp)
        if partition is not None:
            return partition
        if tp in self.offline_partitions:
            raise self._offline_error(tp)
        plog = self.storage.get_or_create_log(tp, config)
        partition = Partition(
            tp,
            plog,
            self.broker_id,
            config,
            producer_id_expiration_ms=self.producer_id_expiration_ms,
            clock_ms=self.clock_ms,
        )
        state = partition.producer_state
        state.load(plog)
        # what the loaded snapshot covered: a long replay makes the next cycle snapshot
        self._snapshot_marks[tp] = (state.changes, state.map_end_offset, plog.size_in_bytes - state.replayed_bytes)
        if self._hw_checkpoint is None:
            self._hw_checkpoint = self.storage.read_checkpoint(HW_CHECKPOINT)
        partition.restore_high_watermark(self._hw_checkpoint.get(tp, plog.log_start_offset))
        self.partitions[tp] = partition
        self._hosted_by_topic.setdefault(tp.topic, set()).add(tp.partition)
        return partition

    def become_leader(
        self,
        tp: TopicPartition,
        config: TopicConfig,
        leader_epoch: int,
        replicas: Sequence[int],
        isr: Sequence[int],
        partition_epoch: int = 0,
    ) -> Partition:
        """Host ``tp`` as its leader (creating the log if needed)."""
        partition = self._get_or_create_partition(tp, config)
        partition.make_leader(leader_epoch, replicas, isr, partition_epoch, now_ms=self.clock_ms())
        self._wake(tp)
        self.on_partitions_changed()
        self._tiered_partition_taken_on(partition)
        return partition

    def become_follower(
        self,
        tp: TopicPartition,
        config: TopicConfig,
        leader_id: int,
        leader_epoch: int,
        replicas: Sequence[int],
        isr: Sequence[int],
        partition_epoch: int = 0,
    ) -> Partition:
        """Host ``tp`` as a follower of ``leader_id``; waiting produce/fetch requests are woken
        (they now answer NOT_LEADER_OR_FOLLOWER)."""
        partition = self._get_or_create_partition(tp, config)
        partition.make_follower(leader_id, leader_epoch, replicas, isr, partition_epoch)
        if self.remote_log_manager is not None:
            self.remote_log_manager.stop_tasks(tp, led_only=True)  # a hung copy must not go on
        self._wake(tp)
        self.on_partitions_changed()
        self._tiered_partition_taken_on(partition)
        return partition

    def _tiered_partition_taken_on(self, partition: Partition) -> None:
        """A tiered partition led or followed here without a remote view yet: the remote log
        manager lists its remote segments now rather than at its next interval."""
        if self.remote_log_manager is not None and partition.remote is None and partition.config.remote_storage_enable:
            self.remote_log_manager.wake()

    def hosted_partitions(self, topic: str) -> list[int]:
        """The partitions of ``topic`` this broker hosts, in order."""
        return sorted(self._hosted_by_topic.get(topic, ()))

    def _unindex(self, tp: TopicPartition) -> None:
        hosted = self._hosted_by_topic.get(tp.topic)
        if hosted is not None:
            hosted.discard(tp.partition)
            if not hosted:
                del self._hosted_by_topic[tp.topic]

    async def remove_partition(self, tp: TopicPartition, *, delete: bool) -> None:
        """Stop hosting ``tp``; with ``delete`` its log and files go too (DeleteTopics)."""
        partition = self.partitions.pop(tp, None)
        self._unindex(tp)
        self._snapshot_marks.pop(tp, None)
        if self.remote_log_manager is not None:
            self.remote_log_manager.stop_tasks(tp, led_only=False)
        if self._hw_checkpoint is not None:
            self._hw_checkpoint.pop(tp, None)
        self._wake(tp)
        self.on_partitions_changed()
        if partition is not None and delete:
            if tp.topic not in self._hosted_by_topic:
                self.metrics.forget_topic(tp.topic)
            await self.storage.delete_log(tp)
            config = partition.config
            if self.remote_log_manager is not None and (
                config.remote_storage_enable or config.get("remote.log.delete.on.disable", False)
            ):  # tiered, or turned off with its remote data maybe not yet deleted
                await self.remote_log_manager.delete_partition(tp)

    def take_offline(self, tps: Collection[TopicPartition], log_dir: str) -> list[TopicPartition]:
        """Stop serving ``tps``, whose log dir failed: they answer KAFKA_STORAGE_ERROR, replica
        fetchers drop them, checkpoints skip them, and parked produce requests on them answer
        NOT_LEADER_OR_FOLLOWER (their records may be on the other replicas: a retry finds out).
        Returns the ones that were hosted."""
        hosted = []
        self.offline_log_dirs.add(log_dir)
        for tp in sorted(tps):
            self.offline_partitions[tp] = log_dir
            partition = self.partitions.pop(tp, None)
            self._unindex(tp)
            self._snapshot_marks.pop(tp, None)
            if self._hw_checkpoint is not None:
                self._hw_checkpoint.pop(tp, None)
            if partition is not None:
                hosted.append(tp)
                self._wake(tp)
        if hosted:
            self.on_partitions_changed()
        return hosted

    def _offline_error(self, tp: TopicPartition) -> KafkaError:
        return KafkaError(
            f"{tp} is offline on broker {self.broker_id}: its log dir {self.offline_partitions[tp]} failed",
            code=ErrorCode.KAFKA_STORAGE_ERROR,
        )

    def _missing_error(self, tp: TopicPartition) -> ErrorCode:
        """What a parked produce request answers for a partition no longer hosted."""
        if tp in self.offline_partitions or self.partition_known(tp):
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    def update_config(self, topic: str, config: TopicConfig) -> None:
        """Apply a topic's changed configs to each of its partitions and logs, live."""
        for tp, partition in self.partitions.items():
            if tp.topic == topic:
                partition.update_config(config)
                if self.remote_log_manager is not None:
                    self.remote_log_manager.config_changed(partition)

    def _wake(self, tp: TopicPartition) -> None:
        self.produce_purgatory.check_and_complete(tp)
        self.fetch_purgatory.check_and_complete(tp)

    def wake(self, tp: TopicPartition) -> None:
        """Re-check requests parked on ``tp`` (after a high watermark or ISR change)."""
        self._wake(tp)

    def _leader_partition(
        self, tp: TopicPartition, current_leader_epoch: int = -1, *, follower_reads: bool = False
    ) -> Partition:
        """The hosted partition ``tp`` if this broker leads it (or, with ``follower_reads``,
        hosts it); the requester's leader epoch (when given) is checked before leadership, as
        Kafka's getLocalLog."""
        partition = self.partitions.get(tp)
        if partition is None:
            if tp in self.offline_partitions:
                raise self._offline_error(tp)
            if self.partition_known(tp):
                # Kafka's getPartitionOrError: the cluster has it, this broker is not one of its
                # replicas (stale client metadata): the client refreshes and goes to its leader
                raise KafkaError(
                    f"broker {self.broker_id} is not a replica of {tp}", code=ErrorCode.NOT_LEADER_OR_FOLLOWER
                )
            raise UnknownTopicOrPartition(f"this broker does not host {tp}")
        partition.check_leader_epoch(current_leader_epoch)
        if not partition.is_leader and not follower_reads:
            raise KafkaError(f"{tp}: leader is broker {partition.leader_id}", code=ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return partition

    # -- produce ---------------------------------------------------------------------------------
    async def append_records(
        self,
        acks: int,
        timeout_ms: int,
        entries: Mapping[TopicPartition, bytearray | memoryview],
        *,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        api_version: int = 7,
        transactional_id: str | None = None,
        on_appended: Callable[[], None] | None = None,
    ) -> dict[TopicPartition, PartitionProduceResult]:
        """Validate, append and (for acks=all) wait; one result per partition in request order.
        ``on_appended`` runs after the appends, before the wait (the buffers are not read after)."""
        if acks not in VALID_ACKS:
            if on_appended is not None:
                on_appended()
            return {tp: PartitionProduceResult(ErrorCode.INVALID_REQUIRED_ACKS) for tp in entries}
        results: dict[TopicPartition, PartitionProduceResult] = {}
        required: dict[TopicPartition, int] = {}
        now = self.clock_ms()
        yield_at = _slice_clock() + PRODUCE_SLICE_S
        for tp, data in entries.items():
            if results and _slice_clock() >= yield_at:  # never before the first partition
                # validation (decompressing every compressed batch) and appends run on the event
                # loop: a request of many partitions lets other clients in between, so it holds
                # them up for at most about one partition's work, not all of it (Kafka does this
                # work on request-handler threads, never its network threads)
                await trio.lowlevel.checkpoint()
                yield_at = _slice_clock() + PRODUCE_SLICE_S
            try:
                partition = self._leader_partition(tp)
                try:
                    validated = validate_records(
                        data,
                        partition.append_settings,
                        origin=origin,
                        api_version=api_version,
                        now_ms=now,
                        codecs=self.codecs,
                        max_decompressed_bytes=self.max_decompressed_bytes,
                    )
                except KafkaError as exc:  # a client's bad bytes: one line, the client gets the code
                    log.info("refused records for %s: %s: %s", tp, exc.code.name, exc)
                    raise
                if origin is AppendOrigin.CLIENT and validated.batches[0].is_transactional:
                    self._verify_transaction(transactional_id, validated.batches[0].producer_id,
                                             validated.batches[0].producer_epoch, tp)  # fmt: skip
                appended = partition.append_records_to_leader(validated.data, validated.batches, origin, acks)
            except KafkaError as exc:
                if exc.code is ErrorCode.KAFKA_STORAGE_ERROR:
                    self._append_failed(tp, exc)
                results[tp] = PartitionProduceResult(exc.code, error_message=str(exc), record_errors=exc.record_errors)
                self._count_refused(tp, exc.code)
                continue
            except OSError as exc:  # a storage plugin that lets the OS error through
                self._append_failed(tp, exc)
                results[tp] = PartitionProduceResult(ErrorCode.KAFKA_STORAGE_ERROR, error_message=str(exc))
                self._count_refused(tp, ErrorCode.KAFKA_STORAGE_ERROR)
                continue
            except Exception as exc:  # a programming error must fail this partition only
                log.exception("append to %s failed", tp)
                results[tp] = PartitionProduceResult(_error_of(exc), error_message=repr(exc))
                self._count_refused(tp, _error_of(exc))
                continue
            if self.append_failures.active:
                self.append_failures.succeeded(log_dir_of(partition))
            if appended.duplicate is not None:
                # a retry of a batch already in the log (its first try timed out, or reached an
                # earlier leader): answered with the original offsets, but for acks=all only once
                # the high watermark covers it, as for a first append (Kafka's ReplicaManager
                # delays duplicates too); answering at once acknowledged records no follower
                # had, lost when this leader alone then failed
                dup = appended.duplicate
                results[tp] = PartitionProduceResult(ErrorCode.NONE, dup.first_offset, -1, partition.log_start_offset)
                required[tp] = dup.last_offset + 1
                self.metrics.appended(tp.topic, 0, 0)
                continue
            info = appended.info
            assert info is not None
            self.metrics.appended(tp.topic, info.last_offset - info.first_offset + 1, info.valid_bytes)
            results[tp] = PartitionProduceResult(
                ErrorCode.NONE, info.first_offset, validated.log_append_time, partition.log_start_offset
            )
            required[tp] = info.last_offset + 1
            self._wake(tp)
        if on_appended is not None:
            on_appended()
        if acks == -1 and required:
            op = DelayedProduce(results, required, self.partitions.get, self._missing_error)
            await self.produce_purgatory.try_complete_else_watch(op, list(required), timeout_ms)
        return results

    def _append_failed(self, tp: TopicPartition, exc: BaseException) -> None:
        if tp in self.offline_partitions:
            return  # its dir failed (found by a concurrent check): the dir's line says so
        partition = self.partitions.get(tp)
        self.on_append_failure(tp, log_dir_of(partition) if partition is not None else "the log storage", exc)

    def _log_append_failure(self, tp: TopicPartition, where: str, exc: BaseException) -> None:
        self.append_failures.failed(where, exc)

    def follower_append_failed(self, tp: TopicPartition, exc: BaseException) -> None:
        """A replica fetcher could not append ``tp``'s fetched batches (the fetcher backs off)."""
        self._append_failed(tp, exc)

    def _verify_transaction(
        self, transactional_id: str | None, producer_id: int, epoch: int, tp: TopicPartition
    ) -> None:
        verify = self.verify_transaction
        error = ErrorCode.INVALID_TXN_STATE if verify is None else verify(transactional_id, producer_id, epoch, tp)
        if error == ErrorCode.NONE:
            return
        if error in _COORDINATOR_NOT_READY:
            # the coordinator cannot say yet (loading __transaction_state after a restart, no
            # leader): Kafka answers Produce NOT_ENOUGH_REPLICAS here, which every producer
            # version retries, instead of an error that makes it abort the transaction
            raise KafkaError(
                f"{tp}: the transaction coordinator of {transactional_id!r} is not ready ({error.name}); retry",
                code=ErrorCode.NOT_ENOUGH_REPLICAS,
            )
        if error == ErrorCode.INVALID_PRODUCER_EPOCH:
            raise KafkaError(f"{tp}: producer {producer_id} epoch {epoch} is fenced", code=error)
        raise KafkaError(
            f"{tp} is not part of an ongoing transaction of producer {producer_id} (epoch {epoch})", code=error
        )

    # -- fetch -----------------------------------------------------------------------------------
    async def fetch_messages(
        self,
        replica_id: int,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        isolation_level: IsolationLevel,
        partitions: Sequence[FetchPartition],
        client_metadata: ClientMetadata | None = None,
        replica_epoch: int = -1,
    ) -> dict[TopicPartition, FetchPartitionResult]:
        """Read now; if fewer than ``min_bytes`` are readable and nothing failed, wait up to
        ``max_wait_ms`` for appends. The caller releases every returned read after sending it.

        ``client_metadata`` (a consumer's Fetch v11+) lets a replica selector send the consumer
        to another replica (KIP-392): such a partition is answered at once, without records.

        ``replica_epoch``: a follower's broker epoch (Fetch v15+, -1 unknown); older than the
        epoch this broker knows for it, every partition is NOT_LEADER_OR_FOLLOWER (see
        :meth:`_stale_replica`)."""
        if self._stale_replica(replica_id, replica_epoch):
            return {p.tp: FetchPartitionResult(ErrorCode.NOT_LEADER_OR_FOLLOWER) for p in partitions}
        client = client_metadata if self.replica_selector is not None and replica_id == CONSUMER_REPLICA_ID else None

        def read() -> tuple[dict[TopicPartition, FetchPartitionResult], int, bool]:
            return self.read_from_local_log(replica_id, max_bytes, isolation_level, partitions, client=client)

        min_bytes = min(min_bytes, max_bytes)  # as Kafka's handleFetchRequest: never more than it may answer
        remote: list[tuple[FetchPartition, int, bool]] = []
        results, total, errored = self.read_from_local_log(
            replica_id, max_bytes, isolation_level, partitions, remote_reads=remote, client=client
        )
        if replica_id >= 0:
            self._update_follower_fetch_states(replica_id, partitions, results)
        if remote:
            # KIP-405: a read from remote storage answers at once, whatever min_bytes (Kafka's
            # DelayedRemoteFetch completes when the remote read does)
            await self._read_remote(remote[0], isolation_level, results)
            self._count_fetch(replica_id, results)
            return results
        if max_wait_ms <= 0 or not partitions or total >= min_bytes or errored:
            self._count_fetch(replica_id, results)
            return results
        release_all(results)
        by_tp = {p.tp: p for p in partitions}

        def read_partition(tp: TopicPartition) -> tuple[int, bool]:
            one, size, errored = self.read_from_local_log(
                replica_id, max_bytes, isolation_level, [by_tp[tp]], client=client
            )
            release_all(one)
            return size, errored

        op = DelayedFetch(read, min_bytes, read_partition)
        try:
            await self.fetch_purgatory.try_complete_else_watch(op, [p.tp for p in partitions], max_wait_ms)
        except BaseException:
            # cancelled (client gone, shutdown) possibly after completion: nobody will send these
            if op.is_completed:
                release_all(op.results)
            raise
        self._count_fetch(replica_id, op.results)
        return op.results

    def _stale_replica(self, replica_id: int, replica_epoch: int) -> bool:
        """Whether a follower's fetch names a broker epoch older than the one registered for
        it (KIP-903, Kafka's ``Replica.updateFetchStateOrThrow``): a fetch from the process
        before a restart, which must neither count for the ISR nor move the HW with the old
        log's end. Kafka refuses it with NOT_LEADER_OR_FOLLOWER (STALE_BROKER_EPOCH is for
        the controller's requests), and so does odradek; -1 (not sent) is not checked."""
        if replica_id < 0 or replica_epoch < 0:
            return False
        known = self.broker_epoch_of(replica_id)
        if known is None or known <= replica_epoch:
            return False
        log.info("fetch from broker %d with broker epoch %d, older than %d: refused", replica_id, replica_epoch, known)
        self.metrics.stale_broker_epoch_fetches += 1
        return True

    async def _read_remote(
        self,
        wanted: tuple[FetchPartition, int, bool],
        isolation_level: IsolationLevel,
        results: dict[TopicPartition, FetchPartitionResult],
    ) -> None:
        """Serve one partition of a fetch from remote storage (Kafka reads one per fetch; the
        other partitions below their local log start answer no records and are fetched again)."""
        p, limit, min_one_batch = wanted  # at least one batch when no partition before it had records
        partition = self.partitions.get(p.tp)
        rlm = self.remote_log_manager
        if partition is None or rlm is None:
            return
        try:
            info = await rlm.read(partition, p.fetch_offset, limit, min_one_batch=min_one_batch)
        except KafkaError as exc:
            log.warning("%s: %s", p.tp, exc)
            code = exc.code if exc.code in _REMOTE_READ_ERRORS else ErrorCode.KAFKA_STORAGE_ERROR
            results[p.tp] = FetchPartitionResult(
                code, partition.high_watermark, partition.last_stable_offset, partition.log_start_offset
            )
            return
        if info is None:
            return  # not read within remote.fetch.max.wait.ms: answered without records (KIP-1018)
        aborted: tuple[AbortedTransaction, ...] | None = None
        if isolation_level is IsolationLevel.READ_COMMITTED:
            upper = info.next_offset if info.next_offset >= 0 else p.fetch_offset
            aborted = tuple(
                AbortedTransaction(a.producer_id, a.first_offset)
                for a in partition.aborted_transactions(p.fetch_offset, upper)
            )
        results[p.tp] = FetchPartitionResult(
            ErrorCode.NONE,
            partition.high_watermark,
            partition.last_stable_offset,
            partition.log_start_offset,
            aborted,
            info if info.size > 0 else None,
        )

    def _preferred_read_replica(self, partition: Partition, client: ClientMetadata, fetch_offset: int) -> int:
        """Where the replica selector sends this consumer for ``partition`` (HERE: read here)."""
        selector = self.replica_selector
        if selector is None:
            return HERE
        try:
            return preferred_read_replica(
                selector, partition, client, fetch_offset, self.clock_ms(), self.rack_of, self.broker_alive
            )
        except Exception:  # a selector plugin's bug must not fail the fetch: the leader reads
            log.exception("%s: replica selector %r failed", partition.topic_partition, selector.name)
            return HERE

    def _count_refused(self, tp: TopicPartition, error: ErrorCode) -> None:
        """A produce partition answered with ``error``, counted only for a topic that exists."""
        if tp in self.partitions or self.partition_known(tp):
            self.metrics.produce_refused(tp.topic, error)

    def _count_fetch(self, replica_id: int, results: Mapping[TopicPartition, FetchPartitionResult]) -> None:
        """Fetched partitions, bytes out (a follower's: replication bytes out) and failed ones,
        per topic that exists; the broker's own coordinators' reads are not traffic."""
        if replica_id == DEBUGGING_REPLICA_ID:
            return
        metrics = self.metrics
        follower = replica_id >= 0
        hosted = self.partitions
        quota = self.leader_quota if follower and self.leader_quota is not None and self.leader_quota.enabled else None
        throttled_bytes = 0
        selecting = self.replica_selector is not None and replica_id == CONSUMER_REPLICA_ID
        for tp, result in results.items():
            if result.error != ErrorCode.NONE:
                if tp in hosted or self.partition_known(tp):
                    metrics.fetch_refused(tp.topic, result.error)
                continue
            info = result.records
            size = info.size if info is not None else 0
            metrics.fetched(tp.topic, size, follower=follower)
            if result.diverging_epoch is not None:
                metrics.diverged(tp.topic)
            if selecting:  # KIP-392: consumers sent elsewhere, and consumers served as a follower
                if result.preferred_read_replica >= 0:
                    metrics.redirected_to_preferred_replica(tp.topic)
                elif (partition := hosted.get(tp)) is not None and not partition.is_leader:
                    metrics.fetched_from_follower(tp.topic, size)
            if quota is not None and size and quota.is_throttled(tp):
                throttled_bytes += size
        if quota is not None:
            quota.record(throttled_bytes)

    def _update_follower_fetch_states(
        self,
        replica_id: int,
        partitions: Sequence[FetchPartition],
        results: Mapping[TopicPartition, FetchPartitionResult],
    ) -> None:
        """A follower's fetch offsets are its LEOs, for the partitions read without error (as
        Kafka's ``updateFollowerFetchState``): a fetch refused for its leader epoch (fenced) or
        its offset (out of range) comes from a log that may hold a divergent tail, and counted,
        it moved the HW and answered acks=all for records the follower does not have."""
        now = self.clock_ms()
        for p in partitions:
            partition = self.partitions.get(p.tp)
            result = results.get(p.tp)
            if partition is None or not partition.is_leader or result is None or result.error != ErrorCode.NONE:
                continue
            if result.diverging_epoch is not None:
                continue  # its fetch offset is no LEO of a log like this one (Kafka: not updated)
            try:
                if partition.update_follower_fetch_state(replica_id, p.fetch_offset, p.log_start_offset, now):
                    self._wake(p.tp)
                self.delete_records_purgatory.check_and_complete(p.tp)
                if partition.can_join_isr(replica_id):
                    self.on_isr_expand_candidate(p.tp)
            except KafkaError:
                continue  # reported by the read below

    def read_from_local_log(
        self,
        replica_id: int,
        max_bytes: int,
        isolation_level: IsolationLevel,
        partitions: Sequence[FetchPartition],
        *,
        remote_reads: list[tuple[FetchPartition, int, bool]] | None = None,
        client: ClientMetadata | None = None,
    ) -> tuple[dict[TopicPartition, FetchPartitionResult], int, bool]:
        """One pass over the partitions: (results in request order, bytes readable, any error or
        redirection: either answers the fetch at once, as Kafka's ``fetchMessages``).

        ``client``: a consumer's metadata with a replica selector configured (KIP-392): each
        partition is first checked for a preferred read replica, and followers serve it too.

        The bytes readable count a partition whose read stopped short of what it may read (at
        its byte limit, or a segment's end) as its full limit, as Kafka's DelayedFetch counts
        min(bytes available, partition max bytes): reads here are whole batches, under the
        limit, and a fetch whose ``min_bytes`` is the partition limit waited out ``max_wait_ms``
        on every backlog read."""
        results: dict[TopicPartition, FetchPartitionResult] = {}
        remaining = max(0, max_bytes)
        min_one_batch = True
        total = 0
        errored = False
        quota = self.leader_quota if replica_id >= 0 and self.leader_quota is not None else None
        if quota is not None and not quota.enabled:
            quota = None
        follower_reads = client is not None
        for p in partitions:
            try:
                partition = self._leader_partition(p.tp, p.current_leader_epoch, follower_reads=follower_reads)
                if client is not None:
                    preferred = self._preferred_read_replica(partition, client, p.fetch_offset)
                    if preferred != HERE:
                        errored = True  # answered now, without records (Kafka's hasPreferredReadReplica)
                        results[p.tp] = _without_records(partition, isolation_level, preferred)
                        continue
                if quota is not None and quota.should_throttle(p.tp, replica_id in partition.isr):
                    # held back (Kafka's shouldLeaderThrottle): no records, nor bytes counted
                    # towards min_bytes, until the throttled replicas' rate is under the quota
                    results[p.tp] = FetchPartitionResult(
                        ErrorCode.NONE,
                        partition.high_watermark,
                        partition.last_stable_offset,
                        partition.log_start_offset,
                    )
                    continue
                limit = min(p.partition_max_bytes, remaining)
                read = partition.read_records(
                    p.fetch_offset,
                    limit,
                    isolation_level,
                    min_one_batch=min_one_batch,
                    replica_id=replica_id,
                    current_leader_epoch=p.current_leader_epoch,
                    fetch_only_from_leader=not follower_reads,
                    last_fetched_epoch=p.last_fetched_epoch,
                )
            except OffsetMovedToTieredStorage:
                hosted = self.partitions.get(p.tp)
                if hosted is None:
                    errored = True
                    results[p.tp] = FetchPartitionResult(ErrorCode.NOT_LEADER_OR_FOLLOWER)
                    continue
                if replica_id >= 0:  # a follower restarts at the local log start (KIP-405)
                    errored = True
                    results[p.tp] = FetchPartitionResult(
                        ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE,
                        hosted.high_watermark,
                        hosted.last_stable_offset,
                        hosted.log_start_offset,
                    )
                    continue
                # a consumer's: read from remote storage by fetch_messages (one partition a
                # fetch); a read waiting in purgatory answers it with no records, and the
                # consumer's next fetch reads it
                if remote_reads is not None and not remote_reads:
                    remote_reads.append((p, limit, min_one_batch))
                results[p.tp] = _without_records(hosted, isolation_level)
                continue
            except KafkaError as exc:
                errored = True
                hosted = self.partitions.get(p.tp)
                if exc.code is ErrorCode.OFFSET_OUT_OF_RANGE and hosted is not None:
                    results[p.tp] = FetchPartitionResult(
                        exc.code, hosted.high_watermark, hosted.last_stable_offset, hosted.log_start_offset
                    )
                else:
                    results[p.tp] = FetchPartitionResult(exc.code)
                continue
            if read.diverging_epoch is not None:
                # answered at once, without records (Kafka's hasDivergingEpoch)
                errored = True
                read.info.release()
                results[p.tp] = FetchPartitionResult(
                    ErrorCode.NONE,
                    read.high_watermark,
                    read.last_stable_offset,
                    read.log_start_offset,
                    () if isolation_level is IsolationLevel.READ_COMMITTED else None,
                    diverging_epoch=read.diverging_epoch,
                )
                continue
            size = read.info.size
            if size > 0:
                min_one_batch = False
                remaining = max(0, remaining - size)
                total += size
                after = getattr(read.info, "next_offset", -1)
                if after >= 0 and after < _readable_end(read, replica_id, isolation_level):
                    total += max(limit - size, 0)
            elif p.fetch_offset < _readable_end(read, replica_id, isolation_level):
                total += limit  # its next batch is larger than its limit: there is that much to read
            aborted: tuple[AbortedTransaction, ...] | None = None
            if isolation_level is IsolationLevel.READ_COMMITTED:
                aborted = tuple(
                    AbortedTransaction(a.producer_id, a.first_offset)
                    for a in partition.aborted_transactions(p.fetch_offset, read.last_stable_offset)
                )
            results[p.tp] = FetchPartitionResult(
                ErrorCode.NONE,
                read.high_watermark,
                read.last_stable_offset,
                read.log_start_offset,
                aborted,
                read.info if size > 0 else None,
            )
            if size == 0:
                read.info.release()
        return results, total, errored

    # -- list offsets, delete records, epochs -------------------------------------------------
    def list_offsets(
        self,
        replica_id: int,
        isolation_level: IsolationLevel,
        partitions: Sequence[ListOffsetsPartition],
    ) -> dict[TopicPartition, ListOffsetsPartitionResult]:
        results: dict[TopicPartition, ListOffsetsPartitionResult] = {}
        # consumers ask the leader, KIP-392's included (NOT_LEADER_OR_FOLLOWER on a follower);
        # only the debugging replica id may ask a follower, as Kafka's fetchOnlyFromLeader
        follower_reads = replica_id == DEBUGGING_REPLICA_ID
        for p in partitions:
            try:
                partition = self._leader_partition(p.tp, p.current_leader_epoch, follower_reads=follower_reads)
                results[p.tp] = self._list_offset(partition, replica_id, isolation_level, p.timestamp)
            except KafkaError as exc:
                results[p.tp] = ListOffsetsPartitionResult(exc.code)
        return results

    async def search_remote_timestamps(
        self,
        partitions: Sequence[ListOffsetsPartition],
        results: dict[TopicPartition, ListOffsetsPartitionResult],
    ) -> None:
        """ListOffsets by time on tiered partitions (after :meth:`list_offsets`): the first record
        at or after the timestamp in a remote segment below the local log replaces the local
        answer, as Kafka searches remote storage first; a search that fails or times out
        answers the partition's error."""
        rlm = self.remote_log_manager
        if rlm is None:
            return
        for p in partitions:
            result = results.get(p.tp)
            partition = self.partitions.get(p.tp)
            if p.timestamp < 0 or result is None or result.error != ErrorCode.NONE or partition is None:
                continue
            remote_only = partition.log_start_offset < partition.local_log_start_offset
            if not partition.config.remote_storage_enable or not remote_only:
                continue
            try:
                found = await rlm.offset_for_timestamp(partition, p.timestamp)
            except KafkaError as exc:
                log.warning("%s: %s", p.tp, exc)
                results[p.tp] = ListOffsetsPartitionResult(exc.code)
                continue
            if found is not None:
                offset, timestamp, epoch = found
                results[p.tp] = ListOffsetsPartitionResult(ErrorCode.NONE, timestamp, offset, epoch)

    @staticmethod
    def _list_offset(
        partition: Partition, replica_id: int, isolation_level: IsolationLevel, timestamp: int
    ) -> ListOffsetsPartitionResult:
        """Kafka's ``fetchOffsetForTimestamp``. Each answer carries the leader epoch of its offset
        (the current one for LATEST, else the one the epoch cache has for the offset, which is
        the found batch's), so a consumer resetting to it can check it for truncation (KIP-320).
        A consumer (replica id -1) asking while the HW is still below the offset where this
        leader's epoch began gets OFFSET_NOT_AVAILABLE (retriable) for LATEST and for a lookup
        that finds nothing readable: the HW a new leader inherited may be behind what the old
        leader answered, and an older end offset would take the consumer back."""
        if timestamp == EARLIEST_TIMESTAMP:
            start = partition.log_start_offset
            return ListOffsetsPartitionResult(ErrorCode.NONE, -1, start, _epoch_for_offset(partition, start))
        if timestamp == EARLIEST_LOCAL_TIMESTAMP:
            # KIP-405: the first offset in the local log (the log start without tiered storage)
            start = partition.local_log_start_offset
            return ListOffsetsPartitionResult(ErrorCode.NONE, -1, start, _epoch_for_offset(partition, start))
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return _latest_tiered(partition)
        # Kafka's lastFetchableOffset: what the asker may read
        if replica_id >= 0 or replica_id == DEBUGGING_REPLICA_ID:
            fetchable = partition.log_end_offset
        elif isolation_level is IsolationLevel.READ_COMMITTED:
            fetchable = partition.last_stable_offset
        else:
            fetchable = partition.high_watermark
        epoch_start = partition.leader_epoch_start_offset
        not_yet = (
            replica_id == CONSUMER_REPLICA_ID and epoch_start is not None and epoch_start > partition.high_watermark
        )
        unavailable = ListOffsetsPartitionResult(ErrorCode.OFFSET_NOT_AVAILABLE)
        if timestamp == LATEST_TIMESTAMP:
            if not_yet:
                return unavailable
            return ListOffsetsPartitionResult(ErrorCode.NONE, -1, fetchable, partition.leader_epoch)
        if timestamp == MAX_TIMESTAMP:
            # as any timestamp lookup, only an offset the asker may read (Kafka filters it the same)
            ts, offset = partition.log.max_timestamp_and_offset()
            if 0 <= offset < fetchable:
                return ListOffsetsPartitionResult(ErrorCode.NONE, ts, offset, _epoch_for_offset(partition, offset))
        elif timestamp < 0:
            raise KafkaError(f"unknown special timestamp {timestamp}", code=ErrorCode.INVALID_REQUEST)
        else:
            found = partition.fetch_offset_for_timestamp(timestamp, isolation_level, fetchable)
            if found is not None and found[0] < fetchable:
                return ListOffsetsPartitionResult(
                    ErrorCode.NONE, found[1], found[0], _epoch_for_offset(partition, found[0])
                )
        return unavailable if not_yet else ListOffsetsPartitionResult(ErrorCode.NONE, -1, -1, -1)

    def describe_log_dirs(
        self, partitions: Collection[TopicPartition] | None, dirs: Sequence[LogDirDescription]
    ) -> list[LogDirResult]:
        """DescribeLogDirs (Kafka's ``ReplicaManager.describeLogDirs``): each of ``dirs`` (what the
        storage's ``describe_log_dirs`` answered), with the size and offset lag of each asked-for
        log in it (None: every log); an offline dir is KAFKA_STORAGE_ERROR with nothing else.
        Partitions with no log here are left out."""
        wanted = None if partitions is None else set(partitions)
        results = []
        for d in dirs:
            if d.error is not None:
                results.append(LogDirResult(ErrorCode.KAFKA_STORAGE_ERROR, d.path))
                continue
            rows = []
            for tp in d.partitions:
                plog = self.storage.get_log(tp)
                if plog is None or (wanted is not None and tp not in wanted):
                    continue
                partition = self.partitions.get(tp)
                # Kafka: -1 (INVALID_OFFSET_LAG) for a log no online partition uses
                lag = partition.offset_lag if partition is not None else -1
                rows.append(LogDirPartition(tp, plog.size_in_bytes, lag))
            storage = self.storage
            for tp in d.future_partitions:
                if not isinstance(storage, LogDirMoves):
                    break
                future, plog = storage.get_future_log(tp), storage.get_log(tp)
                if future is None or plog is None or (wanted is not None and tp not in wanted):
                    continue
                # Kafka's future-replica lag: how far its log end is behind the current log's
                lag = max(plog.log_end_offset - future.log_end_offset, 0)
                rows.append(LogDirPartition(tp, future.size_in_bytes, lag, is_future=True))
            results.append(LogDirResult(ErrorCode.NONE, d.path, tuple(rows), d.total_bytes, d.usable_bytes))
        return results

    async def delete_records(
        self,
        offsets: Mapping[TopicPartition, int],
        timeout_ms: int,
        live_brokers: Callable[[], Collection[int]] = tuple,
    ) -> dict[TopicPartition, DeleteRecordsResult]:
        """Advance log start offsets on the leader, then wait until every live replica's start
        reached them (:class:`DelayedDeleteRecords`; followers follow the leader's start on their
        next fetch), at most ``timeout_ms``. A partition with no other live replica answers at once.

        Internal topics are refused whatever their cleanup.policy, as Kafka's
        ``deleteRecordsOnLocalLog`` does: ``__consumer_offsets`` and ``__transaction_state`` are the
        coordinators' only copy of committed offsets and transaction states, which a reload after a
        restart or a coordinator move reads from the log start."""
        from .metadata_cache import INTERNAL_TOPICS  # here: metadata_cache imports this module

        results: dict[TopicPartition, DeleteRecordsResult] = {}
        required: dict[TopicPartition, int] = {}
        for tp, offset in offsets.items():
            if tp.topic in INTERNAL_TOPICS:
                results[tp] = DeleteRecordsResult(ErrorCode.INVALID_TOPIC_EXCEPTION)
                continue
            try:
                partition = self._leader_partition(tp)
                required[tp] = partition.delete_records_before(offset)
            except KafkaError as exc:
                results[tp] = DeleteRecordsResult(exc.code)
            self._wake(tp)
        if required:
            op = DelayedDeleteRecords(results, required, self.partitions.get, live_brokers)
            await self.delete_records_purgatory.try_complete_else_watch(op, list(required), timeout_ms)
        return results

    def offset_for_leader_epoch(
        self, partitions: Sequence[OffsetForLeaderEpochPartition]
    ) -> dict[TopicPartition, EpochEndOffset]:
        """End offset of the largest epoch <= the asked one (the current epoch ends at the LEO)."""
        results: dict[TopicPartition, EpochEndOffset] = {}
        for p in partitions:
            try:
                partition = self._leader_partition(p.tp, p.current_leader_epoch)
                if p.leader_epoch == partition.leader_epoch:
                    results[p.tp] = EpochEndOffset(ErrorCode.NONE, partition.leader_epoch, partition.log_end_offset)
                    continue
                epoch, end = partition.log.end_offset_for_epoch(p.leader_epoch)
                results[p.tp] = EpochEndOffset(ErrorCode.NONE, epoch, end)
            except KafkaError as exc:
                results[p.tp] = EpochEndOffset(exc.code)
        return results

    def active_producers(self, tp: TopicPartition) -> tuple[ActiveProducer, ...] | None:
        """The producers this broker's replica of ``tp`` remembers (DescribeProducers), None when
        it hosts no replica. A follower answers too, as in Kafka: it replays the leader's
        batches and markers into the same producer state, so an operator can compare replicas."""
        partition = self.partitions.get(tp)
        if partition is None:
            return None
        return tuple(
            ActiveProducer(
                e.producer_id,
                e.producer_epoch,
                e.last_seq,
                e.last_timestamp,
                e.coordinator_epoch,
                -1 if e.current_txn_first_offset is None else e.current_txn_first_offset,
            )
            for e in partition.producer_state.producers.values()
        )

    # -- checkpoints, snapshots, housekeeping ----------------------------------------------------
    async def persist_state(self, *, only_changed: bool = True) -> int:
        """Checkpoint every hosted partition's HW (``replication-offset-checkpoint``) and snapshot
        the producer state of partitions that need one (all with ``only_changed=False``). The
        files are fsynced in a worker thread so the event loop keeps serving; one writer at a
        time. Returns how many snapshots were written.

        A partition needs a snapshot when its producers or aborted transactions changed, or when
        its log grew by a segment's worth since the last one (Kafka snapshots at each roll), so
        a restart replays at most about one segment. Partitions only written by non-idempotent
        producers are otherwise skipped: a snapshot per partition per cycle, each two fsyncs,
        was most of a 1,000-partition broker's I/O."""
        async with self._persist_lock:
            offsets = {tp: p.high_watermark for tp, p in self.partitions.items()}
            await trio.to_thread.run_sync(self.storage.write_checkpoint, HW_CHECKPOINT, offsets)
            self._hw_checkpoint = dict(offsets)
            written = 0
            for tp, p in list(self.partitions.items()):
                state = p.producer_state
                end = state.map_end_offset
                size = p.log.size_in_bytes
                mark = self._snapshot_marks.get(tp)
                if only_changed and mark is not None:
                    # expired producers and dropped aborted transactions change the state without
                    # moving its end offset: they need a snapshot too, or a restart brings them back
                    changes, _at_end, at_size = mark
                    if changes == state.changes and size - at_size < p.config.segment_bytes:
                        continue
                changes_now, data = state.changes, state.to_bytes()
                plog = p.log
                try:
                    await trio.to_thread.run_sync(plog.write_state, SNAPSHOT_NAME, data)
                except Exception:
                    if self.partitions.get(tp) is p and p.log is plog:
                        raise
                    continue  # deleted, or moved to another log dir, meanwhile: written next time
                self._snapshot_marks[tp] = (changes_now, end, size)
                written += 1
            return written

    def remove_expired_producers(self) -> int:
        now = self.clock_ms()
        return sum(p.producer_state.remove_expired_producers(now) for p in self.partitions.values())

    async def run(self) -> None:
        """Background: checkpoint HWs and snapshot producer state every few seconds, and expire
        idle producer ids every ``producer.id.expiration.check.interval.ms`` (first one interval
        after start, as Kafka schedules it), until cancelled. An expiration due with a checkpoint
        runs first, so the snapshot written then no longer holds the expired producers."""
        checkpoint_s = HW_CHECKPOINT_INTERVAL_MS / 1000
        expiration_s = self.producer_id_expiration_check_interval_ms / 1000
        next_checkpoint = trio.current_time() + checkpoint_s
        next_expiration = trio.current_time() + expiration_s
        while True:
            await trio.sleep_until(min(next_checkpoint, next_expiration))
            if trio.current_time() >= next_expiration:
                try:
                    self.remove_expired_producers()
                except Exception:
                    log.exception("expiring producer ids failed; retrying at the next interval")
                next_expiration = trio.current_time() + expiration_s
            if trio.current_time() < next_checkpoint:
                continue
            offline_before = len(self.offline_log_dirs)
            try:
                await self.persist_state()
                self.persist_failures.succeeded("the log dirs")
            except Exception as exc:
                if not _is_storage_error(exc):
                    log.exception("replica manager housekeeping failed; retrying at the next interval")
                elif await self.check_log_dirs() or len(self.offline_log_dirs) != offline_before:
                    # a dir failed meanwhile (the check waited for, or another, took it offline):
                    # the dir's line says so; write again at once without it
                    next_checkpoint = trio.current_time()
                    continue
                else:  # disk full or an I/O error: known, lasting; logged once, then rate-limited
                    self.persist_failures.failed("the log dirs", exc)
            next_checkpoint = trio.current_time() + checkpoint_s

    async def shutdown(self) -> None:
        """Answer parked requests, snapshot producer state, checkpoint HWs, flush every log.

        Never raises for a storage failure (a full disk): each failed write is logged once, in
        one line, and shutdown goes on -- what was acknowledged is in the logs already, and the
        next start recovers past the last good checkpoint as after a crash."""
        self.produce_purgatory.expire_all()
        self.fetch_purgatory.expire_all()
        self.delete_records_purgatory.expire_all()
        with trio.CancelScope(shield=True):
            try:
                await self.persist_state(only_changed=False)
            except Exception as exc:
                if not _is_storage_error(exc):
                    raise
                log.error("shutdown: checkpoint/snapshot not written, the next start recovers: %s", one_line(exc))
        failed = 0
        for tp, p in list(self.partitions.items()):
            try:
                await p.log.flush()
            except Exception as exc:
                if not _is_storage_error(exc):
                    raise
                failed += 1
                if failed == 1:
                    log.error("shutdown: flushing %s failed, the next start recovers it: %s", tp, one_line(exc))
        if failed > 1:
            log.error("shutdown: flushing failed for %d partitions in all", failed)
